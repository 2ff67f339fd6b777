//! Vector kernels as free functions on slices, with a scalar reference.
//!
//! The `*_kernel` functions are `#[inline(always)]` and written with
//! independent accumulators over fixed-width chunks, so LLVM vectorizes them
//! for whatever target features their caller is compiled with: the shard's hot
//! loops are `#[multiversion]`ed (AVX2+FMA, AVX, NEON, baseline, chosen at run
//! time; never AVX2 unconditionally) and inline these. [`dot`], [`axpy`] and
//! [`sgns_update`] are the same kernels behind their own run-time dispatch, for
//! callers outside such loops and for the tests against [`dot_scalar`].
//!
//! Every variant computes the same thing in the same order (sixteen lane sums,
//! folded pairwise; mul then add, never contracted to FMA), so results are
//! bit-identical whichever variant runs.

use multiversion::multiversion;

const LANES: usize = 16;

/// Dot product Σ a[i]·b[i] over the shorter of the two slices.
#[inline(always)]
pub fn dot_kernel(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    // Fold the lanes pairwise (16 → 8 → 4 → 2 → 1), as SIMD would.
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0] + tail
}

/// y += alpha·x.
#[inline(always)]
pub fn axpy_kernel(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// One SGNS update of an output row, fused: `delta += g·v`, then `v += g·u`
/// (`delta` reads `v` before this update changes it).
#[inline(always)]
pub fn sgns_update_kernel(g: f32, u: &[f32], delta: &mut [f32], v: &mut [f32]) {
    for ((vi, di), ui) in v.iter_mut().zip(delta.iter_mut()).zip(u) {
        *di += g * *vi;
        *vi += g * ui;
    }
}

/// [`dot_kernel`], dispatched at run time to the best SIMD variant.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_kernel(a, b)
}

/// [`axpy_kernel`], dispatched at run time to the best SIMD variant.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_kernel(alpha, x, y)
}

/// [`sgns_update_kernel`], dispatched at run time to the best SIMD variant.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub fn sgns_update(g: f32, u: &[f32], delta: &mut [f32], v: &mut [f32]) {
    sgns_update_kernel(g, u, delta, v)
}

/// Reference dot product, summed left to right in f64.
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum::<f64>() as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(v: &[(f32, f32)]) -> (Vec<f32>, Vec<f32>) {
        (
            v.iter().map(|p| p.0).collect(),
            v.iter().map(|p| p.1).collect(),
        )
    }

    proptest! {
        #[test]
        fn dot_matches_reference(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..140)) {
            let (a, b) = split(&v);
            let got = dot(&a, &b);
            let want = dot_scalar(&a, &b);
            prop_assert!((got - want).abs() <= 1e-5 * (1.0 + a.len() as f32), "{got} vs {want}");
            // The dispatched (SIMD) variant and the baseline build agree bit for bit.
            prop_assert_eq!(got.to_bits(), dot_kernel(&a, &b).to_bits());
        }

        #[test]
        fn axpy_matches_reference(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..140), alpha in -2.0f32..2.0) {
            let (x, mut y) = split(&v);
            let want: Vec<f32> = x.iter().zip(&y).map(|(xi, yi)| yi + alpha * xi).collect();
            axpy(alpha, &x, &mut y);
            prop_assert_eq!(y, want);
        }

        #[test]
        fn sgns_update_matches_reference(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0, -1.0f32..1.0), 0..140), g in -1.0f32..1.0) {
            let u: Vec<f32> = v.iter().map(|p| p.0).collect();
            let mut delta: Vec<f32> = v.iter().map(|p| p.1).collect();
            let mut out: Vec<f32> = v.iter().map(|p| p.2).collect();
            let want_delta: Vec<f32> = delta.iter().zip(&out).map(|(d, o)| d + g * o).collect();
            let want_out: Vec<f32> = out.iter().zip(&u).map(|(o, ui)| o + g * ui).collect();
            sgns_update(g, &u, &mut delta, &mut out);
            prop_assert_eq!(delta, want_delta);
            prop_assert_eq!(out, want_out);
        }
    }
}
