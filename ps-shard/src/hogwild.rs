//! The only shared mutable state of a shard: flat row-major f32 matrices that
//! many minibatches read and update at once (Hogwild across minibatches, as in
//! the paper, section 5.1), with one 1-byte lock per row.
//!
//! Safety argument: the cells live in `UnsafeCell<f32>`, and the only way to
//! reach a row's cells is [`HogwildMatrix::with_row`] / [`with_row_mut`], which
//! hold that row's `parking_lot::RawMutex` for exactly the lifetime of the
//! slice they lend (a guard unlocks it, also on unwind). Rows do not overlap,
//! so at any time a cell has at most one accessor: no data race, and the
//! kernels see plain `&[f32]` / `&mut [f32]` that the compiler vectorizes.
//! A caller never holds two row locks at once (the closures get one row), so
//! there is no lock-order deadlock. Minibatches still interleave freely
//! between row accesses: that is the Hogwild approximation the algorithm
//! accepts, minus lost updates, since each row update is now atomic.
//!
//! Why not relaxed `AtomicU32` cells (the previous version, race-free without
//! `unsafe`)? Atomic loads and stores are never vectorized: every row touch
//! cost one scalar load/convert/store per column, and the criterion bench
//! (`shard/adjust_pairs/256`) measured the shard's `adjust` ~2.7× slower
//! than with a lock per row and SIMD kernels. An uncontended lock is two
//! compare-exchanges per row touch. Why parking_lot's mutex and not a pure
//! spin lock (`spinning_top`, tried)? A thread preempted while holding a hot
//! row (a frequent word) made the other spin for its whole time slice: one
//! of two identical 1-epoch runs took twice the CPU. parking_lot spins
//! briefly, then sleeps.
//!
//! [`with_row_mut`]: HogwildMatrix::with_row_mut

use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;
use std::cell::UnsafeCell;

/// `rows × cols` f32 values, row-major, one lock per row.
pub struct HogwildMatrix {
    cells: Box<[UnsafeCell<f32>]>,
    locks: Box<[RawMutex]>,
    cols: usize,
}

// SAFETY: cells are only reached through `with_row`/`with_row_mut`, which hold
// the row's lock for as long as the lent slice lives (see the module docs).
unsafe impl Sync for HogwildMatrix {}

/// Unlocks a row when dropped, so a panicking closure cannot leave it locked.
struct Unlock<'a>(&'a RawMutex);

impl Drop for Unlock<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: created only right after `lock()` on this mutex, by this thread.
        unsafe { self.0.unlock() }
    }
}

impl HogwildMatrix {
    /// A matrix whose row `r` is filled by `init(r, row)`.
    pub fn new(rows: usize, cols: usize, mut init: impl FnMut(usize, &mut [f32])) -> Self {
        let mut cells = Vec::with_capacity(rows * cols);
        let mut row = vec![0.0f32; cols];
        for r in 0..rows {
            init(r, &mut row);
            cells.extend(row.iter().map(|&x| UnsafeCell::new(x)));
        }
        Self {
            cells: cells.into_boxed_slice(),
            locks: (0..rows).map(|_| RawMutex::INIT).collect(),
            cols,
        }
    }

    pub fn rows(&self) -> usize {
        self.locks.len()
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn memory_bytes(&self) -> usize {
        self.cells.len() * 4 + self.locks.len()
    }

    /// Hints the CPU to start loading row `row` into cache. Never faults and
    /// changes nothing; a no-op off x86-64.
    #[inline(always)]
    pub fn prefetch_row(&self, row: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let cells = &self.cells[row * self.cols..(row + 1) * self.cols];
            // The row's lock first: its compare-exchange cannot start before
            // the line arrives, and perf put ~1/3 of the loops' time on it
            // when only the cells were prefetched.
            let lock = std::ptr::from_ref(&self.locks[row]).cast::<i8>();
            // SAFETY: SSE is part of the x86-64 baseline, and a prefetch of
            // any address (here a valid lock or cell) has no observable effect.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(lock) };
            // One hint per 64-byte line, and the last cell for an unaligned tail.
            for cell in cells.iter().step_by(16).chain(cells.last()) {
                // SAFETY: as above.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(cell.get().cast::<i8>().cast_const()) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = row;
    }

    /// Runs `f` on row `row` (length `cols`) with the row locked.
    /// Panics if `row` is out of range.
    #[inline(always)]
    pub fn with_row<R>(&self, row: usize, f: impl FnOnce(&[f32]) -> R) -> R {
        self.with_row_mut(row, |r| f(r))
    }

    /// Runs `f` on row `row` (length `cols`) with the row locked, for update.
    /// Panics if `row` is out of range.
    #[inline(always)]
    pub fn with_row_mut<R>(&self, row: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
        let lock = &self.locks[row];
        let cells = &self.cells[row * self.cols..(row + 1) * self.cols];
        lock.lock();
        let _unlock = Unlock(lock);
        // SAFETY: `UnsafeCell<f32>` has the layout of `f32`, so the row's cells
        // are `cols` contiguous f32s. The row lock is held until `_unlock`
        // drops, after `f` returns, and every access to these cells goes
        // through this function, so this is the only reference to them.
        let row = unsafe {
            std::slice::from_raw_parts_mut(UnsafeCell::raw_get(cells.as_ptr()), cells.len())
        };
        f(row)
    }

    /// Copies row `row` into `out` (length `cols`).
    #[inline(always)]
    pub fn read_row(&self, row: usize, out: &mut [f32]) {
        self.with_row(row, |r| out.copy_from_slice(r));
    }

    /// Adds `delta` (length `cols`) to row `row`.
    #[inline(always)]
    pub fn add_row(&self, row: usize, delta: &[f32]) {
        self.with_row_mut(row, |r| {
            for (c, d) in r.iter_mut().zip(delta) {
                *c += d;
            }
        });
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
        assert_eq!((m.rows(), m.cols(), m.memory_bytes()), (3, 2, 27));
    }

    #[test]
    fn concurrent_updates_are_never_lost() {
        // Four threads add 1.0 to the same row 10,000 times each: with a lock
        // per row every addition lands (the atomic-cell version lost some).
        let m = HogwildMatrix::new(2, 8, |_, row| row.fill(0.0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        m.add_row(0, &[1.0; 8]);
                        m.with_row(1, |r| assert!(r.iter().all(|&x| x == 0.0)));
                    }
                });
            }
        });
        let mut out = [0.0; 8];
        m.read_row(0, &mut out);
        assert_eq!(out, [40_000.0; 8]);
    }

    #[test]
    fn a_panic_inside_a_row_access_unlocks_the_row() {
        let m = HogwildMatrix::new(1, 4, |_, row| row.fill(1.0));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.with_row_mut(0, |_| panic!("boom"));
        }));
        assert!(caught.is_err());
        m.add_row(0, &[1.0; 4]); // would deadlock if the row stayed locked
        let mut out = [0.0; 4];
        m.read_row(0, &mut out);
        assert_eq!(out, [2.0; 4]);
    }
}
