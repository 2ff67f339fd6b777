//! Vector kernels as free functions on slices. Written with independent
//! accumulators over fixed-width chunks so LLVM vectorizes them for the target's
//! baseline SIMD; [`dot_scalar`] is the plain reference they are tested against.

const LANES: usize = 8;

/// Dot product Σ a[i]·b[i]. Panics in debug builds if the lengths differ.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
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
    let pairs = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    (pairs[0] + pairs[2]) + (pairs[1] + pairs[3]) + tail
}

/// y += alpha·x.
#[inline]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len());
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
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

    proptest! {
        #[test]
        fn dot_matches_reference(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..67)) {
            let a: Vec<f32> = v.iter().map(|p| p.0).collect();
            let b: Vec<f32> = v.iter().map(|p| p.1).collect();
            let got = dot(&a, &b);
            let want = dot_scalar(&a, &b);
            prop_assert!((got - want).abs() <= 1e-5 * (1.0 + a.len() as f32), "{got} vs {want}");
        }

        #[test]
        fn axpy_matches_reference(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..67), alpha in -2.0f32..2.0) {
            let x: Vec<f32> = v.iter().map(|p| p.0).collect();
            let mut y: Vec<f32> = v.iter().map(|p| p.1).collect();
            let want: Vec<f32> = x.iter().zip(&y).map(|(xi, yi)| yi + alpha * xi).collect();
            axpy(alpha, &x, &mut y);
            prop_assert_eq!(y, want);
        }
    }
}
