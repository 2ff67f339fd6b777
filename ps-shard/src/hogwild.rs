//! The only shared mutable state of a shard: flat row-major f32 matrices that
//! many minibatches read and update at once (Hogwild across minibatches, as in
//! the paper, section 5.1), with one 1-byte lock per row.
//!
//! Safety argument: the cells are raw memory the matrix owns, and the only way to
//! reach a row's cells is [`HogwildMatrix::with_row`] / [`with_row_mut`], which
//! hold that row's `parking_lot::RawMutex` for exactly the lifetime of the
//! slice they lend (a guard unlocks it, also on unwind). Rows do not overlap,
//! so at any time a cell has at most one accessor: no data race, and the
//! kernels see plain `&[f32]` / `&mut [f32]` that the compiler vectorizes.
//! Views: a matrix may be a column range of rows it shares with other
//! matrices ([`SharedRows`]): the in-process shards of one model keep their
//! slices side by side in one allocation, so a row's slices share cache
//! lines, pages and one lock. Every view of a row takes that row's one lock,
//! and [`SharedRows::claim`] never gives a column to two views, so the
//! argument above holds across views; the one exception,
//! [`HogwildMatrix::whole`], is for a caller that holds every view and
//! still locks each row it touches.
//! A caller never holds two row locks at once (the closures and guards lend one row), so
//! there is no lock-order deadlock. Minibatches still interleave freely
//! between row accesses: that is the Hogwild approximation the algorithm
//! accepts, minus lost updates, since each row update is atomic.
//!
//! Why not relaxed `AtomicU32` cells (race-free without `unsafe`)? Atomic
//! loads and stores are never vectorized: every row touch would cost one
//! scalar load/convert/store per column, far more than a lock per row and
//! SIMD kernels (docs/benchmarks-history.md, "What changed, and what each
//! change bought"). An uncontended lock is two compare-exchanges per row
//! touch. Why parking_lot's mutex and not a pure spin lock (`spinning_top`)?
//! A thread preempted while holding a hot row (a frequent word) would make
//! the others spin for its whole time slice; parking_lot spins briefly, then
//! sleeps.
//!
//! Memory layout ([`RowLayout`]): mostly packed, each row a 4-byte slot
//! holding its lock, then its cells (all views' columns), so the lock shares
//! the row's first cache line (a separate lock array costs one more cache
//! miss per row visit, which narrow rows cannot pay back). Rows whose cells
//! fill whole cache lines (multiples of 16 columns) are 64-byte aligned
//! instead, one line fewer each and no AVX load straddling two, with their
//! locks in an array after the rows. The rows live in an anonymous memory
//! map advised for transparent huge pages (2 MiB, on Linux) and aligned to
//! 2 MiB: rows are visited at random, and with 4 KiB pages nearly every
//! visit of a large model misses the TLB, so a row's prefetch waits for the
//! page walk. numpy does the same for gensim's arrays.
//!
//! [`with_row_mut`]: HogwildMatrix::with_row_mut
#![allow(
    unsafe_code,
    reason = "the row-locked matrix; the module doc gives the safety argument"
)]

use colonnade_common::kernels::prefetch;
use colonnade_common::model::ShardSpec;
use memmap2::MmapMut;
use parking_lot::lock_api::RawMutex as _;
use parking_lot::{Mutex, RawMutex};
use std::collections::HashMap;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

/// Gives the heap's free memory back to the system. glibc keeps large
/// freed blocks in the process (its mmap threshold rises after the first
/// large free), so the temporaries of a model's creation (the counts as
/// received, the sampler's work arrays: ~40 bytes a word) would otherwise
/// stay in the shard's RSS beside the matrices for good.
pub fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists; it
    // touches no memory in use and may be called from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Makes glibc serve every block of 1 MiB or more by its own memory map,
/// given back to the system when freed (by default the threshold rises
/// after the first large free, and later large temporaries stay in the
/// heap), and keep up to [`KEPT_FREE_HEAP`] of freed heap at its top: a
/// call's buffers (a few hundred KB each, allocated and freed per call)
/// then reuse pages instead of faulting them in again each time, as they
/// did when setting the map threshold left the trim threshold at its
/// 128 KiB default. Call once at start-up, before the threads.
pub fn map_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets parameters of glibc's allocator.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE_HEAP);
    }
}

/// Freed heap glibc keeps for reuse before giving it back (see
/// [`map_large_blocks`]); [`release_freed_heap`] still returns all of it.
pub const KEPT_FREE_HEAP: i32 = 32 << 20;

/// Bytes of a packed row's lock slot on a shard (keeps the cells f32-aligned).
pub const ROW_LOCK_BYTES: u64 = 4;

/// Bytes of a row's lock when the locks are kept apart from the rows.
pub const ROW_LOCK_APART_BYTES: u64 = 1;

/// Where a shard's rows of `width` f32 cells keep their cells and their lock
/// (every column its matrices hold: a process's slice, or the whole vector
/// of in-process shards side by side).
///
/// Packed (most widths): each row is a 4-byte lock slot, then its cells, so
/// the lock shares the row's first cache line; rows start at every 4-byte
/// offset. Where the cells fill whole 64-byte cache lines (a multiple of 16
/// columns: graphs' d = 128, d = 64 or 256, 32-column slices), a 4-byte
/// slot would push every row onto one more line than its cells need and
/// make half of its 32-byte loads straddle two lines; those rows are
/// aligned to 64 bytes with no slot, and their 1-byte locks are an array of
/// their own after the rows. A lock array costs one more cache line per row
/// visit, which narrow packed rows cannot pay back, so they stay packed
/// (docs/benchmarks-history.md, "Rows of whole cache lines").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowLayout {
    /// Bytes from one row's start to the next.
    pub stride: u64,
    /// Bytes from a row's start to its first cell.
    pub cells_at: u64,
    /// Whether the locks are an array apart (else each is in its row's slot).
    pub locks_apart: bool,
}

impl RowLayout {
    /// The layout of rows of `width` cells.
    pub fn of(width: u32) -> Self {
        let cells = u64::from(width) * 4;
        if width > 0 && cells % 64 == 0 {
            Self {
                stride: cells,
                cells_at: 0,
                locks_apart: true,
            }
        } else {
            Self {
                stride: cells + ROW_LOCK_BYTES,
                cells_at: ROW_LOCK_BYTES,
                locks_apart: false,
            }
        }
    }

    /// Bytes per row in all: its stride, and its lock if kept apart.
    pub fn row_bytes(&self) -> u64 {
        self.stride
            + if self.locks_apart {
                ROW_LOCK_APART_BYTES
            } else {
                0
            }
    }
}

/// Bytes of the two matrices `spec` needs on a shard: per row its cells and
/// its lock ([`RowLayout`]).
pub fn matrix_bytes(spec: &ShardSpec) -> u64 {
    let row = RowLayout::of(spec.col_end.saturating_sub(spec.col_start)).row_bytes();
    2 * spec.model.vocab_size.saturating_mul(row)
}

/// Bytes a model of `spec` holds on a shard: its two matrices, its sampler's
/// table and its counts (at most 8 bytes a word each), and its pending
/// counts (`crate::stale`).
pub fn held_bytes(spec: &ShardSpec) -> u64 {
    let per_word = 16 + crate::stale::PENDING_BYTES_PER_ROW;
    matrix_bytes(spec).saturating_add(spec.model.vocab_size.saturating_mul(per_word))
}

/// Bytes creating a model of `spec` takes at the peak: [`held_bytes`] and
/// the counts as they arrive (8 bytes a word).
pub fn creation_bytes(spec: &ShardSpec) -> u64 {
    held_bytes(spec).saturating_add(spec.model.vocab_size.saturating_mul(8))
}

/// Alignment of the rows: one transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

// A lock kept apart takes the bytes the sizing formula gives it.
const _: () = assert!(size_of::<RawMutex>() as u64 == ROW_LOCK_APART_BYTES);

/// The memory of `rows × width` cells and their row locks, shared by the
/// views ([`HogwildMatrix`]) of its column ranges, and the ranges they claim.
pub struct SharedRows {
    /// Owns the memory `base` points into; never touched directly.
    _map: MmapMut,
    /// Row 0's first byte, 2 MiB-aligned; row `r` starts `r · stride` bytes on.
    base: NonNull<u8>,
    /// Row 0's lock; row `r`'s is `r · lock_stride` bytes on.
    locks: NonNull<u8>,
    rows: usize,
    width: usize,
    /// Bytes per row: `width` cells, and the lock slot of a packed row.
    stride: usize,
    /// `stride` when each lock is in its row's slot, 1 when they are apart.
    lock_stride: usize,
    /// Bytes from a row's first byte to its first cell.
    cells_at: usize,
    /// Bytes per row beyond the cells: its lock slot, or its lock apart.
    overhead: usize,
    /// The column ranges given out to views ([`SharedRows::claim`]):
    /// never two views over one cell, unless made by [`HogwildMatrix::whole`].
    claimed: Mutex<Vec<Range<usize>>>,
}

// SAFETY: the cells are only reached through a view's `with_row`/`with_row_mut`,
// which hold the row's lock for as long as the lent slice lives (see the module
// docs); the map `base` points into is owned here and moves with it.
unsafe impl Sync for SharedRows {}
// SAFETY: as above; nothing in it is tied to a thread.
unsafe impl Send for SharedRows {}

/// `rows × cols` f32 values, row-major, one lock per row: a view of columns
/// `[col_offset, col_offset + cols)` of a [`SharedRows`] allocation, which other
/// views of the same rows (the other column slices of in-process shards)
/// may share; they then share the row locks too.
pub struct HogwildMatrix {
    rows_of: Arc<SharedRows>,
    /// `rows_of.base`, copied out of the `Arc` for the hot loops.
    base: NonNull<u8>,
    /// `rows_of.locks`, copied out likewise.
    locks: NonNull<u8>,
    rows: usize,
    stride: usize,
    lock_stride: usize,
    /// Bytes from a row's first byte to this view's first cell.
    cells_at: usize,
    col_offset: usize,
    cols: usize,
}

// SAFETY: as for `SharedRows`: a view only reaches cells through its row-locked
// accessors.
unsafe impl Sync for HogwildMatrix {}
// SAFETY: as above.
unsafe impl Send for HogwildMatrix {}

impl SharedRows {
    /// Zeroed rows of `width` columns of which no view holds any yet: each
    /// column range is taken with [`SharedRows::claim`]. Fails when the
    /// memory cannot be mapped.
    pub fn zeroed(rows: usize, width: usize) -> std::io::Result<Arc<Self>> {
        let layout = u32::try_from(width).ok().map(RowLayout::of);
        let bytes = layout
            .and_then(|l| usize::try_from(l.row_bytes()).ok())
            .and_then(|b| rows.checked_mul(b))
            .filter(|&b| b <= isize::MAX as usize / 2);
        let (Some(layout), Some(bytes)) = (layout, bytes) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("{rows} × {width} cells do not fit in the address space"),
            ));
        };
        // All at most `row_bytes`, which fits in a usize (above).
        let (stride, cells_at) = (layout.stride as usize, layout.cells_at as usize);
        let overhead = layout.row_bytes() as usize - 4 * width;
        // The locks: in each row's first bytes, or 1 byte each after the rows.
        let (locks_from, lock_stride) = if layout.locks_apart {
            (rows * stride, size_of::<RawMutex>())
        } else {
            (0, stride)
        };
        let mut map = MmapMut::map_anon(bytes + HUGE_PAGE)?;
        let offset = map.as_ptr().align_offset(HUGE_PAGE);
        // Best effort: without THP (another OS, or disabled) the map still works.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        // SAFETY: the map is page-aligned, so `offset < HUGE_PAGE` and the
        // `bytes` (rows, then any lock array) from `base` lie inside the map.
        let base = unsafe { NonNull::new_unchecked(map.as_mut_ptr().add(offset)) };
        // SAFETY: `locks_from` is 0, or the end of the rows (inside, above).
        let locks = unsafe { base.add(locks_from) };
        for r in 0..rows {
            // SAFETY: row r's lock is inside the map (above: in its row's
            // first bytes, or byte r of the array after the rows), aligned
            // for `RawMutex` (align 1), and not yet referenced. The cells stay
            // zero-filled, as the anonymous map is: 0.0f32.
            unsafe {
                locks
                    .add(r * lock_stride)
                    .cast::<RawMutex>()
                    .write(RawMutex::INIT)
            };
        }
        Ok(Arc::new(Self {
            _map: map,
            base,
            rows,
            width,
            locks,
            stride,
            lock_stride,
            cells_at,
            overhead,
            claimed: Mutex::new(Vec::new()),
        }))
    }

    /// A view of columns `cols`, if no view holds any of them yet (a range
    /// is given out once, for good) and they are within the width.
    pub fn claim(self: &Arc<Self>, cols: Range<usize>) -> Option<HogwildMatrix> {
        if cols.is_empty() || cols.end > self.width {
            return None;
        }
        let mut claimed = self.claimed.lock();
        if claimed
            .iter()
            .any(|c| c.start < cols.end && cols.start < c.end)
        {
            return None;
        }
        claimed.push(cols.clone());
        Some(HogwildMatrix::view(Arc::clone(self), cols))
    }

    /// (rows, width).
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.width)
    }
}

/// Unlocks a row when dropped, so a panicking closure cannot leave it locked.
struct Unlock<'a>(&'a RawMutex);

impl Drop for Unlock<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: created only right after `lock()` on this mutex, by this thread.
        unsafe { self.0.unlock() }
    }
}

/// A row locked for update ([`HogwildMatrix::row_mut`]): its cells, and the
/// lock, released when the guard drops (also on unwind).
pub(crate) struct RowMut<'a> {
    cells: &'a mut [f32],
    _unlock: Unlock<'a>,
}

impl std::ops::Deref for RowMut<'_> {
    type Target = [f32];

    #[inline(always)]
    fn deref(&self) -> &[f32] {
        self.cells
    }
}

impl std::ops::DerefMut for RowMut<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [f32] {
        self.cells
    }
}

impl HogwildMatrix {
    /// A matrix of zeros. Fails when the memory cannot be mapped.
    pub fn zeroed(rows: usize, cols: usize) -> std::io::Result<Self> {
        let rows_of = SharedRows::zeroed(rows, cols)?;
        rows_of.claimed.lock().push(0..cols);
        Ok(Self::view(rows_of, 0..cols))
    }

    fn view(rows_of: Arc<SharedRows>, cols: Range<usize>) -> Self {
        Self {
            base: rows_of.base,
            rows: rows_of.rows,
            locks: rows_of.locks,
            stride: rows_of.stride,
            lock_stride: rows_of.lock_stride,
            cells_at: rows_of.cells_at + 4 * cols.start,
            col_offset: cols.start,
            cols: cols.len(),
            rows_of,
        }
    }

    /// A view of every column of the rows this view shares, over the cells
    /// of the other views too: for a caller that holds all of them (the
    /// in-process shards of one model, stepping a minibatch in one visit per
    /// row). The row locks still make every access exclusive.
    pub(crate) fn whole(&self) -> Self {
        let width = self.rows_of.width;
        Self::view(Arc::clone(&self.rows_of), 0..width)
    }

    /// Whether `self` and `other` are views of the same rows.
    pub fn same_rows(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rows_of, &other.rows_of)
    }

    /// A matrix whose row `r` is filled by `init(r, row)`.
    pub fn new(
        rows: usize,
        cols: usize,
        init: impl FnMut(usize, &mut [f32]),
    ) -> std::io::Result<Self> {
        let m = Self::zeroed(rows, cols)?;
        m.fill_rows(init);
        Ok(m)
    }

    /// Sets row `r` of this view to `init(r, row)`, for every row.
    pub fn fill_rows(&self, mut init: impl FnMut(usize, &mut [f32])) {
        for r in 0..self.rows {
            self.with_row_mut(r, |row| init(r, row));
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The first column of the shared rows this view holds.
    pub fn col_offset(&self) -> usize {
        self.col_offset
    }

    /// Whether every row's cells of this view start on a 64-byte boundary
    /// (the map's base is 2 MiB-aligned): rows of whole cache lines
    /// ([`RowLayout`]), and a view starting at a multiple of 16 columns.
    /// 512-bit loads pay only then: elsewhere nearly every one straddles two
    /// lines (docs/benchmarks-history.md, "AVX-512 on rows of whole cache
    /// lines").
    pub fn lines_aligned(&self) -> bool {
        self.stride.is_multiple_of(64) && self.cells_at.is_multiple_of(64)
    }

    /// Bytes this view holds: its cells, and the row locks for the view of
    /// the first columns (a lock serves every view of a row).
    pub fn memory_bytes(&self) -> usize {
        let overhead = if self.col_offset == 0 {
            self.rows_of.overhead
        } else {
            0
        };
        self.rows * (self.cols * 4 + overhead)
    }

    /// Row `row`'s first byte and its lock. Panics if `row` is out of range.
    #[inline(always)]
    fn row_start(&self, row: usize) -> (NonNull<u8>, NonNull<u8>) {
        assert!(
            row < self.rows,
            "row {row} out of range ({} rows)",
            self.rows
        );
        // SAFETY: row < rows, so both offsets stay inside the map (see `zeroed`).
        unsafe {
            (
                self.base.add(row * self.stride),
                self.locks.add(row * self.lock_stride),
            )
        }
    }

    /// Hints the CPU to start loading row `row` (its lock and this view's
    /// cells) into cache. Never faults and changes nothing; a no-op off
    /// x86-64. Panics if `row` is out of range.
    #[inline(always)]
    pub fn prefetch_row(&self, row: usize) {
        let (start, lock) = self.row_start(row);
        // One hint per 64-byte line the view touches: the lock first, its
        // compare-exchange cannot start before the line arrives.
        prefetch(lock.as_ptr().cast_const());
        let at = start.as_ptr() as usize;
        let lock = lock.as_ptr() as usize;
        let first = at + self.cells_at;
        let last = first + self.cols * 4 - 1;
        let hint = |addr: usize| prefetch(start.as_ptr().wrapping_add(addr - at).cast_const());
        let mut line = first & !63;
        while line <= last {
            if line != lock & !63 {
                hint(line.max(first));
            }
            line += 64;
        }
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
        let mut locked = self.row_mut(row);
        f(&mut locked)
    }

    /// Row `row` (length `cols`), locked for update until the guard drops:
    /// [`Self::with_row_mut`] without a closure, for the shard's loops, whose
    /// per-row work must inline into their SIMD clones (a closure LLVM
    /// leaves out of line is compiled without the clone's target features).
    /// A thread holds one row at a time: taking a row it holds deadlocks.
    /// Panics if `row` is out of range.
    #[inline(always)]
    pub(crate) fn row_mut(&self, row: usize) -> RowMut<'_> {
        let (start, lock) = self.row_start(row);
        // SAFETY: the row's lock holds a `RawMutex` written in `zeroed` and
        // only ever shared.
        let lock = unsafe { lock.cast::<RawMutex>().as_ref() };
        lock.lock();
        let unlock = Unlock(lock);
        // SAFETY: this view's `cols` cells lie `cells_at` bytes into the row,
        // inside the map and its `width` cells, clear of every lock
        // ([`RowLayout`]), f32-aligned (base, stride and `cells_at` are
        // multiples of 4) and initialized. The row lock, which
        // every view of these rows takes, is held until the guard (and its
        // `unlock`) drops, and the slice lives no longer than the guard; every
        // access to the cells goes through a guard, so this is the only
        // reference to them.
        let cells = unsafe {
            std::slice::from_raw_parts_mut(
                start.add(self.cells_at).cast::<f32>().as_ptr(),
                self.cols,
            )
        };
        RowMut {
            cells,
            _unlock: unlock,
        }
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

/// The shards of one process (`colonnade train --embedded-shards`) keep each
/// model's column slices side by side in one allocation per matrix: a row's
/// slices then share cache lines, pages and one lock, and [`crate::whole::WholeVectors`] steps a
/// minibatch in one visit per row across them. Each shard's model is a view
/// of its columns ([`SharedRows::claim`]); the memory goes when the last
/// view does.
#[derive(Default)]
pub struct Siblings {
    /// Per model fingerprint: its u and v rows, while any view holds them.
    models: Mutex<HashMap<u64, SharedPair>>,
}

/// A model's u and v rows, held by its shards' views.
type SharedPair = (Weak<SharedRows>, Weak<SharedRows>);

impl Siblings {
    /// Views of columns `cols` of model `fingerprint`'s u and v (`rows` ×
    /// `width`, zero), shared with its other shards in this process; `None`
    /// when a view already holds one of these columns (a shard that dropped
    /// the model and creates it again): that shard then keeps its own.
    pub fn matrices(
        &self,
        fingerprint: u64,
        rows: usize,
        width: usize,
        cols: Range<usize>,
    ) -> std::io::Result<Option<(HogwildMatrix, HogwildMatrix)>> {
        let mut models = self.models.lock();
        models.retain(|_, (u, v)| u.strong_count() > 0 && v.strong_count() > 0);
        let held = models
            .get(&fingerprint)
            .and_then(|(u, v)| Some((u.upgrade()?, v.upgrade()?)))
            .filter(|(u, v)| u.shape() == (rows, width) && v.shape() == (rows, width));
        let (u, v) = match held {
            Some(pair) => pair,
            None => {
                let pair = (
                    SharedRows::zeroed(rows, width)?,
                    SharedRows::zeroed(rows, width)?,
                );
                models.insert(
                    fingerprint,
                    (Arc::downgrade(&pair.0), Arc::downgrade(&pair.1)),
                );
                pair
            }
        };
        Ok(u.claim(cols.clone()).zip(v.claim(cols)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_whole_cache_lines_keep_their_locks_apart() {
        // (width, bytes per row): whole lines with a 1-byte lock apart for
        // multiples of 16 columns, a 4-byte slot in the row otherwise.
        for (width, bytes) in [
            (128, 513),
            (64, 257),
            (32, 129),
            (16, 65),
            (100, 404),
            (300, 1204),
            (75, 304),
            (25, 104),
            (8, 36),
            (1, 8),
            (0, 4),
        ] {
            let l = RowLayout::of(width);
            assert_eq!(l.row_bytes(), bytes, "{width} columns");
            let cells = u64::from(width) * 4;
            assert_eq!(l.cells_at + cells, l.stride, "{width} columns");
            if l.locks_apart {
                assert_eq!((l.stride % 64, l.cells_at), (0, 0), "{width} columns");
            } else {
                assert_eq!(l.cells_at, ROW_LOCK_BYTES, "{width} columns");
            }
        }
    }

    #[test]
    fn read_add_roundtrip() {
        let m = HogwildMatrix::new(3, 2, |r, row| row.fill(r as f32)).expect("map");
        let mut out = [0.0; 2];
        m.read_row(2, &mut out);
        assert_eq!(out, [2.0, 2.0]);
        m.add_row(1, &[0.5, -1.0]);
        m.read_row(1, &mut out);
        assert_eq!(out, [1.5, 0.0]);
        assert_eq!((m.rows(), m.cols(), m.memory_bytes()), (3, 2, 36));
    }

    #[test]
    fn rows_and_their_locks_do_not_overlap() {
        // Odd column counts put packed rows at every offset within cache
        // lines; 16 and 128 columns are whole lines with their locks apart.
        for cols in [1usize, 3, 16, 50, 67, 128] {
            let m = HogwildMatrix::new(40, cols, |r, row| {
                for (c, x) in row.iter_mut().enumerate() {
                    *x = (r * 1000 + c) as f32;
                }
            })
            .expect("map");
            for r in (0..40).step_by(3) {
                m.add_row(r, &vec![0.5; cols]);
                m.prefetch_row(r);
            }
            for r in 0..40 {
                let want: Vec<f32> = (0..cols)
                    .map(|c| (r * 1000 + c) as f32 + if r % 3 == 0 { 0.5 } else { 0.0 })
                    .collect();
                let mut got = vec![0.0; cols];
                m.read_row(r, &mut got);
                assert_eq!(got, want, "row {r} of {cols} columns");
            }
        }
        let z = HogwildMatrix::zeroed(5, 7).expect("map");
        let mut got = [1.0; 7];
        z.read_row(4, &mut got);
        assert_eq!(got, [0.0; 7]);
    }

    #[test]
    fn rows_of_whole_lines_start_on_64_bytes_and_count_their_locks() {
        for (cols, aligned, stride, bytes) in [(128usize, true, 512, 513), (25, false, 104, 104)] {
            let m = HogwildMatrix::zeroed(9, cols).expect("map");
            for r in 0..9 {
                let at = m.with_row(r, |row| row.as_ptr() as usize);
                assert_eq!(
                    at.is_multiple_of(64),
                    aligned || (r * stride + 4).is_multiple_of(64),
                    "row {r} of {cols}"
                );
            }
            assert_eq!(m.memory_bytes(), 9 * bytes);
        }
        // Views: the first holds the locks, the others their cells.
        let rows = SharedRows::zeroed(5, 128).expect("map");
        let (a, b) = (
            rows.claim(0..100).expect("a"),
            rows.claim(100..128).expect("b"),
        );
        assert_eq!((a.memory_bytes(), b.memory_bytes()), (5 * 401, 5 * 112));
        // Locks apart: the last row's lock is the map's last byte in use,
        // and writing every row leaves every other row (and lock) intact.
        let m = HogwildMatrix::new(33, 16, |r, row| row.fill(r as f32)).expect("map");
        for r in 0..33 {
            m.add_row(r, &[1.0; 16]);
        }
        for r in 0..33 {
            m.with_row(r, |row| {
                assert!(row.iter().all(|&x| x == r as f32 + 1.0), "row {r}")
            });
        }
    }

    #[test]
    fn concurrent_updates_are_never_lost() {
        // Four threads add 1.0 to the same row 10,000 times each: with a lock
        // per row every addition lands (unlocked atomic cells would lose some).
        let m = HogwildMatrix::zeroed(2, 8).expect("map");
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
        let m = HogwildMatrix::new(1, 4, |_, row| row.fill(1.0)).expect("map");
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
