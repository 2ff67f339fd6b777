//! The only shared mutable state of a shard: flat row-major f32 matrices that
//! many minibatches read and update at once without locks (Hogwild, as in the
//! paper, section 5.1).
//!
//! Safety argument: every cell is an `AtomicU32` holding f32 bits, read and
//! written with `Relaxed` ordering. That makes concurrent access data-race free
//! by Rust's memory model (no `unsafe` here), while compiling to plain loads and
//! stores on x86-64 and AArch64. An update is a relaxed load, an add and a
//! relaxed store, not a read-modify-write: two minibatches updating the same
//! cell at the same time may lose one of the two additions. That is exactly the
//! Hogwild approximation the algorithm accepts; no cell is ever torn or left
//! holding a value that was not the result of some update.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// `rows × cols` f32 values, row-major.
pub struct HogwildMatrix {
    cells: Box<[AtomicU32]>,
    cols: usize,
}

impl HogwildMatrix {
    /// A matrix whose row `r` is filled by `init(r, row)`.
    pub fn new(rows: usize, cols: usize, mut init: impl FnMut(usize, &mut [f32])) -> Self {
        let mut cells = Vec::with_capacity(rows * cols);
        let mut row = vec![0.0f32; cols];
        for r in 0..rows {
            init(r, &mut row);
            cells.extend(row.iter().map(|x| AtomicU32::new(x.to_bits())));
        }
        Self {
            cells: cells.into_boxed_slice(),
            cols,
        }
    }

    pub fn rows(&self) -> usize {
        self.cells.len().checked_div(self.cols).unwrap_or(0)
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn memory_bytes(&self) -> usize {
        self.cells.len() * 4
    }

    #[inline]
    fn row(&self, row: usize) -> &[AtomicU32] {
        &self.cells[row * self.cols..(row + 1) * self.cols]
    }

    /// Hints the CPU to start loading row `row` into cache. Never faults and
    /// changes nothing; a no-op off x86-64.
    #[inline]
    pub fn prefetch_row(&self, row: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let cells = self.row(row);
            // One hint per 64-byte line, and the last cell for an unaligned tail.
            for cell in cells.iter().step_by(16).chain(cells.last()) {
                // SAFETY: SSE is part of the x86-64 baseline, and a prefetch of
                // any address (here a valid cell) has no observable effect.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(cell.as_ptr().cast::<i8>().cast_const()) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = row;
    }

    /// Copies row `row` into `out` (length `cols`).
    #[inline]
    pub fn read_row(&self, row: usize, out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(self.row(row)) {
            *o = f32::from_bits(c.load(Relaxed));
        }
    }

    /// Adds `alpha·x` (length `cols`) to row `row`.
    #[inline]
    pub fn add_scaled_row(&self, row: usize, alpha: f32, x: &[f32]) {
        for (c, xi) in self.row(row).iter().zip(x) {
            c.store(
                (f32::from_bits(c.load(Relaxed)) + alpha * xi).to_bits(),
                Relaxed,
            );
        }
    }

    /// Adds `delta` (length `cols`) to row `row`.
    #[inline]
    pub fn add_row(&self, row: usize, delta: &[f32]) {
        for (c, d) in self.row(row).iter().zip(delta) {
            c.store((f32::from_bits(c.load(Relaxed)) + d).to_bits(), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_add_roundtrip() {
        let m = HogwildMatrix::new(3, 2, |r, row| row.fill(r as f32));
        let mut out = [0.0; 2];
        m.read_row(2, &mut out);
        assert_eq!(out, [2.0, 2.0]);
        m.add_row(1, &[0.5, -1.0]);
        m.read_row(1, &mut out);
        assert_eq!(out, [1.5, 0.0]);
        assert_eq!((m.rows(), m.cols(), m.memory_bytes()), (3, 2, 24));
    }

    #[test]
    fn concurrent_updates_never_tear() {
        // Four threads add 1.0 to the same row 10,000 times: some additions may
        // be lost (Hogwild), but every value is a whole number of additions.
        let m = HogwildMatrix::new(1, 8, |_, row| row.fill(0.0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        m.add_row(0, &[1.0; 8]);
                    }
                });
            }
        });
        let mut out = [0.0; 8];
        m.read_row(0, &mut out);
        for x in out {
            assert!(
                x.fract() == 0.0 && (10_000.0..=40_000.0).contains(&x),
                "{x}"
            );
        }
    }
}
