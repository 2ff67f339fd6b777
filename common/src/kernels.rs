//! Vector kernels as free functions on slices, with a scalar reference.
//!
//! The `*_kernel` functions are `#[inline(always)]` and written with
//! independent accumulators over fixed-width chunks, so LLVM vectorizes them
//! for whatever target features their caller is compiled with: the shard's hot
//! loops are `#[multiversion]`ed (AVX2+FMA, AVX, NEON, baseline, chosen at run
//! time; never AVX2 unconditionally) and inline these. [`dot`] and [`axpy`]
//! are the same kernels behind their own run-time dispatch, for
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
    }
}
