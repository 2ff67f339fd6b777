//! Vector kernels as free functions on slices, with a scalar reference.
//!
//! [`dot_kernel`] and [`axpy_kernel`] are portable `#[inline(always)]` code
//! written with independent accumulators over fixed-width chunks. LLVM
//! vectorizes `axpy_kernel` fully for whatever target features its caller is
//! compiled with, but not `dot_kernel`: its lane fold makes the SLP vectorizer
//! fall back to 2-wide loads (seen in the shard's disassembly), far slower
//! than 8-wide ones (docs/benchmarks-history.md, "What changed, and what each
//! change bought"). So the dot product also exists as AVX-512 and
//! AVX intrinsics ([`Avx512`], [`Avx`]), chosen through the [`Simd`] trait:
//! the shard's hot loops are generic over it, `#[multiversion]`ed (AVX2+FMA,
//! AVX, NEON, baseline, chosen at run time; never a wider set
//! unconditionally), and pick [`Avx`] with `match_target!` in the clones that
//! have AVX, [`Portable`] elsewhere. The fused loop also has a build for
//! AVX-512F, entered with the [`Avx512`] that [`Avx512::detect`] returns.
//! [`dot`] and [`axpy`] are the same kernels behind their own run-time
//! dispatch, for callers outside such loops and for the tests against
//! [`dot_scalar`].
//!
//! Every variant computes the same thing in the same order (sixteen lane sums
//! over the vectors zero-padded to a multiple of 16, folded pairwise; mul then
//! add, never contracted to FMA), so results are bit-identical whichever
//! variant runs, and whether a caller pads its rows or the kernel masks them.
#![allow(
    unsafe_code,
    reason = "SIMD intrinsics behind target-feature checks; each block says why it is sound"
)]

use multiversion::multiversion;
use multiversion::target::match_target;

/// The lanes of [`dot_kernel`]'s order: 16, one AVX-512 register, two AVX.
pub const LANES: usize = 16;

/// Dot product Σ a[i]·b[i] over the shorter of the two slices, in the one
/// order every variant keeps: the slices zero-padded to a multiple of
/// [`LANES`] floats, lane `l` summing the products at `l`, `l + 16`, … in
/// order, then the lanes folded pairwise (16 → 8 → 4 → 2 → 1). A row of
/// 25 columns is then two chunks, the second masked, and no scalar tail
/// (whose chain of dependent adds cost a shard with 25 columns per row
/// about a third of its dot-product loop); callers that pad their rows
/// with zeros to [`padded`] columns get the same value without a mask.
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
    let (x, y) = (ca.remainder(), cb.remainder());
    if !x.is_empty() {
        // The zero-padded last chunk: a padding lane adds 0·0 = +0.
        for l in 0..LANES {
            acc[l] += if l < x.len() { x[l] * y[l] } else { 0.0 };
        }
    }
    // Fold the lanes pairwise (16 → 8 → 4 → 2 → 1), as SIMD would.
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0]
}

/// `cols` rounded up to a multiple of [`LANES`]: the stride of scratch rows
/// kept zero-padded, so that [`dot_kernel`] over them needs no mask.
pub const fn padded(cols: usize) -> usize {
    cols.div_ceil(LANES) * LANES
}

/// y += alpha·x.
#[inline(always)]
pub fn axpy_kernel(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// The kernels of one instruction set, for loops generic over it.
pub trait Simd: Copy {
    /// Σ a[i]·b[i] over the shorter slice, in [`dot_kernel`]'s order.
    fn dot(self, a: &[f32], b: &[f32]) -> f32;
    /// y += alpha·x.
    #[inline(always)]
    fn axpy(self, alpha: f32, x: &[f32], y: &mut [f32]) {
        axpy_kernel(alpha, x, y)
    }
    /// 16 floats of an accumulator, held in registers where the instruction
    /// set has them (a fixed-size array LLVM leaves in memory).
    type Lanes: Copy;
    /// Lanes of +0.
    fn lanes_zero(self) -> Self::Lanes;
    /// The 16 floats of `x`, as lanes.
    fn lanes_load(self, x: &[f32; LANES]) -> Self::Lanes;
    /// acc + alpha·x, lane by lane: [`axpy_kernel`]'s operations (mul, then
    /// add), so bit for bit what it gives.
    fn lanes_axpy(self, acc: Self::Lanes, alpha: f32, x: &[f32; LANES]) -> Self::Lanes;
    /// The lanes, into `out`.
    fn lanes_store(self, acc: Self::Lanes, out: &mut [f32; LANES]);
    /// The first `N` floats of `row` (all of it when shorter), zero-padded
    /// to `N`: a row's copy that the loops then read a chunk at a time.
    #[inline(always)]
    fn padded<const N: usize>(self, row: &[f32]) -> [f32; N] {
        let mut out = [0.0f32; N];
        let n = row.len().min(N);
        out[..n].copy_from_slice(&row[..n]);
        out
    }
}

/// The portable kernels (vectorized by LLVM as well as it can).
#[derive(Clone, Copy, Debug)]
pub struct Portable;

impl Simd for Portable {
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        dot_kernel(a, b)
    }

    type Lanes = [f32; LANES];

    #[inline(always)]
    fn lanes_zero(self) -> Self::Lanes {
        [0.0; LANES]
    }

    #[inline(always)]
    fn lanes_load(self, x: &[f32; LANES]) -> Self::Lanes {
        *x
    }

    #[inline(always)]
    fn lanes_axpy(self, mut acc: Self::Lanes, alpha: f32, x: &[f32; LANES]) -> Self::Lanes {
        axpy_kernel(alpha, x, &mut acc);
        acc
    }

    #[inline(always)]
    fn lanes_store(self, acc: Self::Lanes, out: &mut [f32; LANES]) {
        *out = acc;
    }
}

/// Proof that the CPU has AVX: its dot product uses 256-bit intrinsics.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct Avx(());

#[cfg(target_arch = "x86_64")]
impl Avx {
    /// `Some` when this CPU has AVX.
    pub fn detect() -> Option<Self> {
        std::arch::is_x86_feature_detected!("avx").then_some(Self(()))
    }

    /// # Safety
    /// The CPU must have AVX: call only where that is known, e.g. in a
    /// `#[multiversion]` clone whose target includes AVX.
    #[inline(always)]
    pub unsafe fn new_unchecked() -> Self {
        Self(())
    }
}

#[cfg(target_arch = "x86_64")]
impl Simd for Avx {
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: an `Avx` exists only on CPUs with AVX (see its constructors).
        unsafe { dot_avx(a, b) }
    }

    type Lanes = (std::arch::x86_64::__m256, std::arch::x86_64::__m256);

    #[inline(always)]
    fn lanes_zero(self) -> Self::Lanes {
        // SAFETY: as in `dot`.
        unsafe { lanes_zero_avx() }
    }

    #[inline(always)]
    fn lanes_load(self, x: &[f32; LANES]) -> Self::Lanes {
        // SAFETY: as in `dot`.
        unsafe { lanes_load_avx(x) }
    }

    #[inline(always)]
    fn lanes_axpy(self, acc: Self::Lanes, alpha: f32, x: &[f32; LANES]) -> Self::Lanes {
        // SAFETY: as in `dot`.
        unsafe { lanes_axpy_avx(acc, alpha, x) }
    }

    #[inline(always)]
    fn lanes_store(self, acc: Self::Lanes, out: &mut [f32; LANES]) {
        // SAFETY: as in `dot`.
        unsafe { lanes_store_avx(acc, out) }
    }

    #[inline(always)]
    fn padded<const N: usize>(self, row: &[f32]) -> [f32; N] {
        let mut out = [0.0f32; N];
        // SAFETY: as in `dot`.
        unsafe { padded_avx(row, &mut out) };
        out
    }
}

/// Lane l of a 16-lane window starting at `MASKS[16 - r]` is set when l < r
/// (r in 0 ..= 16; the high 8 lanes' window starts at `MASKS[24 - r]`).
#[cfg(target_arch = "x86_64")]
static MASKS: [i32; 32] = {
    let mut m = [0i32; 32];
    let mut i = 0;
    while i < 16 {
        m[i] = -1;
        i += 1;
    }
    m
};

/// `row` into `out`, zero-padded, in whole 8-float stores: each chunk of
/// the row loaded whole, or under a mask where the row ends (masked-off
/// lanes read as 0 and touch no memory). A copy by `memcpy` of the row's
/// length and then whole-chunk loads of it made every loop visit of a row
/// wait for a store forward that fails (the loads span two of the copy's
/// stores): that reload was the split loops' hottest instruction over gRPC.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn padded_avx(row: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = row.len().min(out.len());
    for (c, chunk) in out.chunks_exact_mut(LANES).enumerate() {
        let start = c * LANES;
        let r = n.saturating_sub(start).min(LANES);
        let o = chunk.as_mut_ptr();
        // SAFETY: `chunk` holds 16 floats, so both 8-float stores are in
        // bounds. The loads read only lanes below r, which lie within `row`
        // (start + r <= n <= row.len()); r in 0 ..= 16 keeps both mask
        // windows within MASKS.
        unsafe {
            let (lo, hi) = if r == LANES {
                let x = row.as_ptr().add(start);
                (_mm256_loadu_ps(x), _mm256_loadu_ps(x.add(8)))
            } else if r > 0 {
                let x = row.as_ptr().add(start);
                let m_lo = _mm256_loadu_si256(MASKS.as_ptr().add(16 - r).cast());
                let m_hi = _mm256_loadu_si256(MASKS.as_ptr().add(24 - r).cast());
                (
                    _mm256_maskload_ps(x, m_lo),
                    _mm256_maskload_ps(x.wrapping_add(8), m_hi),
                )
            } else {
                (_mm256_setzero_ps(), _mm256_setzero_ps())
            };
            _mm256_storeu_ps(o, lo);
            _mm256_storeu_ps(o.add(8), hi);
        }
    }
    // A length that is not whole chunks (not what the loops pass): the rest
    // as the default does.
    let whole = out.len() - out.len() % LANES;
    if whole < n {
        out[whole..n].copy_from_slice(&row[whole..n]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
fn lanes_zero_avx() -> <Avx as Simd>::Lanes {
    use std::arch::x86_64::_mm256_setzero_ps;
    (_mm256_setzero_ps(), _mm256_setzero_ps())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
fn lanes_load_avx(x: &[f32; LANES]) -> <Avx as Simd>::Lanes {
    use std::arch::x86_64::_mm256_loadu_ps;
    // SAFETY: `x` holds 16 floats, so both 8-float loads are in bounds;
    // unaligned loads have no alignment requirement.
    unsafe {
        (
            _mm256_loadu_ps(x.as_ptr()),
            _mm256_loadu_ps(x.as_ptr().add(8)),
        )
    }
}

/// acc + alpha·x in two 8-float registers: mul, then add, as `axpy_kernel`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
fn lanes_axpy_avx(acc: <Avx as Simd>::Lanes, alpha: f32, x: &[f32; LANES]) -> <Avx as Simd>::Lanes {
    use std::arch::x86_64::*;
    let a = _mm256_set1_ps(alpha);
    // SAFETY: `x` holds 16 floats, so both 8-float loads are in bounds;
    // unaligned loads have no alignment requirement.
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_ps(x.as_ptr()),
            _mm256_loadu_ps(x.as_ptr().add(8)),
        )
    };
    (
        _mm256_add_ps(acc.0, _mm256_mul_ps(a, lo)),
        _mm256_add_ps(acc.1, _mm256_mul_ps(a, hi)),
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
fn lanes_store_avx(acc: <Avx as Simd>::Lanes, out: &mut [f32; LANES]) {
    use std::arch::x86_64::_mm256_storeu_ps;
    // SAFETY: `out` holds 16 floats, so both 8-float stores are in bounds.
    unsafe {
        _mm256_storeu_ps(out.as_mut_ptr(), acc.0);
        _mm256_storeu_ps(out.as_mut_ptr().add(8), acc.1);
    }
}

/// [`dot_kernel`] with AVX intrinsics, in the same order: lanes 0–7 and 8–15
/// of each 16-float chunk in two accumulators, the last chunk loaded under a
/// mask (masked-off lanes read as 0), the lanes folded 16 → 8 → 4 → 2 → 1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn dot_avx(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lo = _mm256_setzero_ps();
    let mut hi = _mm256_setzero_ps();
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        // SAFETY: each chunk holds 16 floats, so both 8-float loads of each
        // are in bounds; unaligned loads have no alignment requirement.
        unsafe {
            let (x, y) = (x.as_ptr(), y.as_ptr());
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(y)));
            hi = _mm256_add_ps(
                hi,
                _mm256_mul_ps(_mm256_loadu_ps(x.add(8)), _mm256_loadu_ps(y.add(8))),
            );
        }
    }
    let (x, y) = (ca.remainder(), cb.remainder());
    let r = x.len();
    if r > 0 {
        // Lane l of the low (high) half is loaded when l (8 + l) < r.
        // SAFETY: 0 < r < 16, so both 8-lane windows lie within MASKS; a
        // masked load touches only the lanes its mask selects, which are
        // below r and so within both slices.
        unsafe {
            let m_lo = _mm256_loadu_si256(MASKS.as_ptr().add(16 - r).cast());
            let m_hi = _mm256_loadu_si256(MASKS.as_ptr().add(24 - r).cast());
            let (x, y) = (x.as_ptr(), y.as_ptr());
            let (xl, yl) = (_mm256_maskload_ps(x, m_lo), _mm256_maskload_ps(y, m_lo));
            let (xh, yh) = (
                _mm256_maskload_ps(x.wrapping_add(8), m_hi),
                _mm256_maskload_ps(y.wrapping_add(8), m_hi),
            );
            lo = _mm256_add_ps(lo, _mm256_mul_ps(xl, yl));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(xh, yh));
        }
    }
    let s8 = _mm256_add_ps(lo, hi);
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    _mm_cvtss_f32(s1)
}

/// Proof that the CPU has AVX-512F: its dot product uses 512-bit intrinsics.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub struct Avx512(());

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    /// `Some` when this CPU has AVX-512F (the only way to get one).
    pub fn detect() -> Option<Self> {
        std::arch::is_x86_feature_detected!("avx512f").then_some(Self(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: an `Avx512` exists only on CPUs with AVX-512F (see
        // `detect`, its one constructor).
        unsafe { dot_avx512(a, b) }
    }

    // The split loops, the only users of lanes, have no AVX-512 clone.
    type Lanes = [f32; LANES];

    #[inline(always)]
    fn lanes_zero(self) -> Self::Lanes {
        Portable.lanes_zero()
    }

    #[inline(always)]
    fn lanes_load(self, x: &[f32; LANES]) -> Self::Lanes {
        Portable.lanes_load(x)
    }

    #[inline(always)]
    fn lanes_axpy(self, acc: Self::Lanes, alpha: f32, x: &[f32; LANES]) -> Self::Lanes {
        Portable.lanes_axpy(acc, alpha, x)
    }

    #[inline(always)]
    fn lanes_store(self, acc: Self::Lanes, out: &mut [f32; LANES]) {
        Portable.lanes_store(acc, out)
    }
}

/// [`dot_kernel`] with AVX-512 intrinsics, in the same order: the 16 lanes of
/// each chunk in one accumulator, the last chunk loaded under a mask, the
/// lanes folded 16 → 8 → 4 → 2 → 1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = _mm512_setzero_ps();
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        // SAFETY: each chunk holds 16 floats, so each 16-float load is in
        // bounds; unaligned loads have no alignment requirement.
        unsafe {
            acc = _mm512_add_ps(
                acc,
                _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(y.as_ptr())),
            );
        }
    }
    let (x, y) = (ca.remainder(), cb.remainder());
    if !x.is_empty() {
        let m: u16 = (1u16 << x.len()) - 1;
        // SAFETY: a masked load touches only the lanes below x.len() (< 16),
        // which are within both remainders.
        unsafe {
            acc = _mm512_add_ps(
                acc,
                _mm512_mul_ps(
                    _mm512_maskz_loadu_ps(m, x.as_ptr()),
                    _mm512_maskz_loadu_ps(m, y.as_ptr()),
                ),
            );
        }
    }
    // Lanes l and l + 8, as the AVX variant's two accumulators, then as it.
    let s8 = _mm256_add_ps(
        _mm512_castps512_ps256(acc),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc))),
    );
    let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    _mm_cvtss_f32(s1)
}

/// [`dot_kernel`], dispatched at run time to the best SIMD variant.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    match_target! {
        // SAFETY: this arm is compiled only into clones for CPUs with AVX.
        "x86_64+avx" => unsafe { Avx::new_unchecked() }.dot(a, b),
        _ => Portable.dot(a, b),
    }
}

/// [`axpy_kernel`], dispatched at run time to the best SIMD variant.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_kernel(alpha, x, y)
}

/// Hints the CPU to start loading the cache line holding address `p`, for
/// loads whose addresses are known ahead of use (the sampler's buckets, the
/// shard's rows). Safe for any address: a prefetch never faults, reads
/// nothing into the program and changes nothing observable. A no-op off
/// x86-64.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86-64 baseline, and a prefetch of any
        // address has no observable effect.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
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

    /// Every kernel's padded copy is the row, then zeros, at every length
    /// up to the width and past it (cut), for every width the loops use.
    #[test]
    fn padded_copies_are_the_row_then_zeros() {
        fn check<K: Simd, const N: usize>(k: K) {
            let row: Vec<f32> = (0..N + 9).map(|i| i as f32 + 0.5).collect();
            for len in 0..=N + 9 {
                let got = k.padded::<N>(&row[..len]);
                let want: Vec<f32> = (0..N).map(|i| if i < len { row[i] } else { 0.0 }).collect();
                assert_eq!(got.to_vec(), want, "width {N}, length {len}");
            }
        }
        fn all<K: Simd>(k: K) {
            check::<K, 16>(k);
            check::<K, 32>(k);
            check::<K, 48>(k);
            check::<K, 64>(k);
            check::<K, 20>(k);
        }
        all(Portable);
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx::detect() {
            all(k);
        }
    }

    proptest! {
        #[test]
        fn dot_matches_reference(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..140)) {
            let (a, b) = split(&v);
            let got = dot(&a, &b);
            let want = dot_scalar(&a, &b);
            prop_assert!((got - want).abs() <= 1e-5 * (1.0 + a.len() as f32), "{got} vs {want}");
            // The dispatched (SIMD) variant and the portable kernel agree bit for bit.
            prop_assert_eq!(got.to_bits(), dot_kernel(&a, &b).to_bits());
            #[cfg(target_arch = "x86_64")]
            if let Some(avx) = Avx::detect() {
                prop_assert_eq!(avx.dot(&a, &b).to_bits(), got.to_bits());
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(avx512) = Avx512::detect() {
                prop_assert_eq!(avx512.dot(&a, &b).to_bits(), got.to_bits());
            }
        }

        #[test]
        fn zero_padded_rows_dot_as_masked_ones(v in proptest::collection::vec((-1.0f32..1.0, -1.0f32..1.0), 0..140)) {
            let (a, b) = split(&v);
            let pad = padded(a.len());
            let (mut pa, mut pb) = (a.clone(), b.clone());
            pa.resize(pad, 0.0);
            pb.resize(pad, 0.0);
            prop_assert_eq!(dot_kernel(&pa, &pb).to_bits(), dot_kernel(&a, &b).to_bits());
            prop_assert_eq!(dot(&pa, &pb).to_bits(), dot(&a, &b).to_bits());
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
