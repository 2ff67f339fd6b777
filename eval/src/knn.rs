//! Exact top-k search over unit rows by blocked matrix products: the base rows
//! are cut into chunks; for each chunk one GEMM (ndarray → matrixmultiply)
//! scores every probe vector against every row of the chunk, and a caller's
//! closure turns those scores into candidates for its tasks (a `similar`
//! query, an analogy question). Chunks run in parallel (rayon); each worker
//! keeps its own top-k lists, merged at the end. Memory: one probes × chunk
//! score block per worker plus k entries per task.

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, ArrayView1, ArrayView2};
use rayon::prelude::*;
use std::borrow::Cow;

/// Score-block budget per worker, in f32 values (1 MiB: stays in L2).
const BLOCK_VALUES: usize = 1 << 18;

/// The best `k` (score, row) pairs seen, best first: higher score, then lower
/// row (so ties resolve the same way whatever the chunk order). NaN never enters.
#[derive(Clone, Debug)]
pub struct TopK {
    k: usize,
    items: Vec<(f32, u32)>,
}

fn better(a: (f32, u32), b: (f32, u32)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            items: Vec::with_capacity(k.min(64) + 1),
        }
    }

    /// Would (`score`, `row`) enter? Cheap test for the scan loops.
    #[inline]
    pub fn admits(&self, score: f32, row: u32) -> bool {
        if self.k == 0 || score.is_nan() {
            return false;
        }
        match self.items.last() {
            Some(&last) if self.items.len() == self.k => better((score, row), last),
            _ => true,
        }
    }

    #[inline]
    pub fn push(&mut self, score: f32, row: u32) {
        if !self.admits(score, row) {
            return;
        }
        let item = (score, row);
        let at = self.items.partition_point(|&x| better(x, item));
        self.items.insert(at, item);
        self.items.truncate(self.k);
    }

    /// Could any score up to `max` enter? (False once full with better items.)
    #[inline]
    pub fn may_admit(&self, max: f32) -> bool {
        match self.items.last() {
            Some(&(last, _)) if self.items.len() == self.k => max >= last || max.is_nan(),
            _ => self.k > 0,
        }
    }

    /// Offers rows `start..start + scores.len()` with these scores, except
    /// rows for which `skip(row)` holds. Blocks of scores whose best cannot
    /// enter are passed over whole (a vectorised max), so the common case
    /// costs little more than reading the scores.
    #[inline]
    pub fn push_slice(&mut self, start: u32, scores: &[f32], skip: impl Fn(u32) -> bool) {
        const W: usize = 32;
        for (bi, block) in scores.chunks(W).enumerate() {
            if !self.may_admit(block_max(block)) {
                continue;
            }
            let first = start + (bi * W) as u32;
            for (i, &x) in block.iter().enumerate() {
                let row = first + i as u32;
                if self.admits(x, row) && !skip(row) {
                    self.push(x, row);
                }
            }
        }
    }

    pub fn merge(&mut self, other: &TopK) {
        for &(score, row) in &other.items {
            self.push(score, row);
        }
    }

    /// Best first.
    pub fn items(&self) -> &[(f32, u32)] {
        &self.items
    }
}

/// A 1-D view as a slice (score rows are contiguous; copied otherwise).
pub fn row_slice<'a>(m: &ArrayView1<'a, f32>) -> Cow<'a, [f32]> {
    match m.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(m.to_vec()),
    }
}

/// The largest value, NaN ignored (-inf when none): lane-wise, so it
/// compiles to packed max instructions.
#[inline]
fn block_max(xs: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut blocks = xs.chunks_exact(LANES);
    for b in blocks.by_ref() {
        for (m, &x) in lanes.iter_mut().zip(b) {
            *m = if x > *m { x } else { *m };
        }
    }
    for (m, &x) in lanes.iter_mut().zip(blocks.remainder()) {
        *m = if x > *m { x } else { *m };
    }
    lanes
        .iter()
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
}

/// Per-task state of a [`scan`]: merged across workers at the end.
pub trait Accumulator: Clone + Send {
    fn merge(&mut self, other: &Self);
}

impl Accumulator for TopK {
    fn merge(&mut self, other: &Self) {
        TopK::merge(self, other);
    }
}

impl<const N: usize> Accumulator for [TopK; N] {
    fn merge(&mut self, other: &Self) {
        for (a, b) in self.iter_mut().zip(other) {
            a.merge(b);
        }
    }
}

/// The rows a [`scan`] scores against: unit rows, or the file's raw rows
/// with each row's inverse L2 norm, by which the row's scores are multiplied
/// after the product (the cosine, without a normalised copy of the rows).
#[derive(Clone, Copy, Debug)]
pub struct Base<'a> {
    rows: ArrayView2<'a, f32>,
    inv_norm: Option<&'a [f32]>,
}

impl<'a> Base<'a> {
    /// Rows already of unit length (or zero).
    pub fn unit(rows: ArrayView2<'a, f32>) -> Self {
        Self {
            rows,
            inv_norm: None,
        }
    }

    /// Raw rows and one inverse norm per row.
    pub fn scaled(rows: ArrayView2<'a, f32>, inv_norm: &'a [f32]) -> Self {
        assert_eq!(rows.nrows(), inv_norm.len(), "one inverse norm per row");
        Self {
            rows,
            inv_norm: Some(inv_norm),
        }
    }

    /// The first `n` rows (all if fewer).
    pub fn head(self, n: usize) -> Self {
        let n = n.min(self.rows.nrows());
        Self {
            rows: self.rows.slice_move(s![..n, ..]),
            inv_norm: self.inv_norm.map(|v| &v[..n]),
        }
    }

    pub fn nrows(&self) -> usize {
        self.rows.nrows()
    }
}

/// Rows per chunk for `probes` probe vectors.
fn chunk_rows(probes: usize) -> usize {
    (BLOCK_VALUES / probes.max(1)).clamp(64, 16_384)
}

/// Scans `base` (rows × D) against `probes` (P × D) chunk by chunk. For each
/// chunk starting at row `start`, `scores` = probes · chunkᵀ (P × chunk rows,
/// row-major, so one probe's scores are contiguous; column j multiplied by
/// row j's inverse norm when `base` has them) and `visit(task, scores,
/// start, acc, scratch)` runs for every task in `0..tasks`, adding candidates
/// (global row numbers) to that task's accumulator (a copy of `init` to begin
/// with); `scratch` is a reusable buffer of the worker's.
/// Returns each task's accumulator, merged over all chunks.
pub fn scan<A, F>(
    base: Base<'_>,
    probes: ArrayView2<'_, f32>,
    tasks: usize,
    init: &A,
    visit: F,
) -> Vec<A>
where
    A: Accumulator + Sync,
    F: Fn(usize, ArrayView2<'_, f32>, u32, &mut A, &mut Vec<f32>) + Sync,
{
    let Base {
        rows: base,
        inv_norm,
    } = base;
    let rows = base.nrows();
    let chunk = chunk_rows(probes.nrows());
    let chunks = rows.div_ceil(chunk);
    // A few long runs of consecutive chunks (two per worker, for balance):
    // each run's top-k lists fill early and then reject whole blocks cheaply.
    let runs = (2 * rayon::current_num_threads()).clamp(1, chunks.max(1));
    (0..runs)
        .into_par_iter()
        .map(|run| {
            let mut accs = vec![init.clone(); tasks];
            let mut buf = Array2::<f32>::zeros((probes.nrows(), chunk));
            let mut scratch = Vec::with_capacity(chunk);
            for c in (run * chunks / runs)..((run + 1) * chunks / runs) {
                let start = c * chunk;
                let end = (start + chunk).min(rows);
                let mut scores = buf.slice_mut(s![.., ..end - start]);
                general_mat_mul(
                    1.0,
                    &probes,
                    &base.slice(s![start..end, ..]).t(),
                    0.0,
                    &mut scores,
                );
                if let Some(inv) = inv_norm {
                    let inv = &inv[start..end];
                    for mut probe in scores.rows_mut() {
                        for (x, s) in probe.iter_mut().zip(inv) {
                            *x *= s;
                        }
                    }
                }
                let scores = scores.view();
                for (task, acc) in accs.iter_mut().enumerate() {
                    visit(task, scores, start as u32, acc, &mut scratch);
                }
            }
            accs
        })
        .reduce(
            || vec![init.clone(); tasks],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(&b) {
                    x.merge(y);
                }
                a
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    #[test]
    fn topk_orders_by_score_then_row() {
        let mut t = TopK::new(3);
        for (s, r) in [
            (0.5, 9),
            (0.9, 4),
            (0.5, 2),
            (f32::NAN, 0),
            (0.1, 1),
            (0.9, 7),
        ] {
            t.push(s, r);
        }
        assert_eq!(t.items(), &[(0.9, 4), (0.9, 7), (0.5, 2)]);
        let mut u = TopK::new(3);
        u.push(0.95, 100);
        u.merge(&t);
        assert_eq!(u.items(), &[(0.95, 100), (0.9, 4), (0.9, 7)]);
    }

    #[test]
    fn scan_matches_brute_force() {
        let (n, d, p) = (5000, 7, 3);
        // Small integers: every dot product is exact, and ties are many.
        let base = Array2::from_shape_fn((n, d), |(i, j)| ((i * 31 + j * 17) % 101) as f32 - 50.0);
        let probes = Array2::from_shape_fn((p, d), |(i, j)| ((i + 2 * j) % 5) as f32 - 2.0);
        let tops = scan(
            Base::unit(base.view()),
            probes.view(),
            p,
            &TopK::new(4),
            |t, scores, start, top: &mut TopK, _| {
                for (j, &x) in scores.row(t).iter().enumerate() {
                    top.push(x, start + j as u32);
                }
            },
        );
        for (t, top) in tops.iter().enumerate() {
            let mut all: Vec<(f32, u32)> = (0..n)
                .map(|i| (base.row(i).dot(&probes.row(t)), i as u32))
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            assert_eq!(top.items(), &all[..4]);
        }
    }

    #[test]
    fn scaled_rows_score_as_their_unit_rows() {
        let (n, d) = (3000, 5);
        // No ties: the two paths round differently in the last bit.
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(3);
        let raw =
            Array2::from_shape_fn((n, d), |_| rand::Rng::random_range(&mut rng, -3.0f32..3.0));
        let norms: Vec<f32> = raw
            .rows()
            .into_iter()
            .map(|r| r.iter().map(|x| x * x).sum::<f32>().sqrt())
            .collect();
        let inv: Vec<f32> = norms
            .iter()
            .map(|&x| if x > 0.0 { 1.0 / x } else { 1.0 })
            .collect();
        let mut unit = raw.clone();
        for (mut r, &x) in unit.rows_mut().into_iter().zip(&norms) {
            if x > 0.0 {
                r.mapv_inplace(|v| v / x);
            }
        }
        let probes = unit.slice(s![..4, ..]).to_owned();
        let best = |base: Base<'_>| {
            scan(
                base.head(2500),
                probes.view(),
                4,
                &TopK::new(6),
                |t, scores, start, top: &mut TopK, _| {
                    top.push_slice(start, &row_slice(&scores.row(t)), |_| false);
                },
            )
        };
        let (a, b) = (
            best(Base::unit(unit.view())),
            best(Base::scaled(raw.view(), &inv)),
        );
        for (x, y) in a.iter().zip(&b) {
            let rows = |t: &TopK| t.items().iter().map(|p| p.1).collect::<Vec<_>>();
            assert_eq!(rows(x), rows(y));
            for (p, q) in x.items().iter().zip(y.items()) {
                assert!((p.0 - q.0).abs() < 1e-6, "{p:?} {q:?}");
                assert!(p.1 < 2500);
            }
        }
    }
}
