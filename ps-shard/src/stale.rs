//! Staleness across calls in flight: per row of a model, the dot products
//! of the calls planned on it whose updates have not been applied yet
//! ([`Pending`]).
//!
//! A call's dot products all read the model as its `dotprod` found it, and
//! its `adjust` applies their summed steps later; the calls in flight at the
//! same time (every pipeline of every worker) read nearly the same state.
//! The row step cap ([`crate::plan::row_step_cap`]) bounds the stale steps
//! one call gives a row; across calls, a row's step is scaled by the same
//! rule with k the dot products *pending* on it (its own, and a share of
//! those of every other call planned and not yet applied: [`OTHERS_SHARE`]),
//! so that the steps all calls in flight give a row stay within a few caps,
//! however many are in flight
//! (staleness-aware asynchronous SGD, Zhang et al. 2016, counted per row:
//! docs/design.md, "Staleness across calls in flight"). A call alone, or
//! one whose rows no other call touches, steps exactly as before. On a
//! crowded shard ([`REFRESH_FROM_CALLS`]; for CBOW as soon as another call
//! waits, [`CBOW_REFRESH_FROM_CALLS`]) a call's weights are refreshed for
//! its rows' drift instead ([`crate::loops::Refresh`]), and it steps by its
//! own dot products only.
//!
//! Counts are kept per shard (each counts the calls it served), in memory
//! only: a restarted shard starts from none pending. Nothing here may hold
//! a row lock or touch the rows.
#![allow(
    unsafe_code,
    reason = "the counters are a zeroed u32 allocation viewed as atomics"
)]

use colonnade_common::model::Objective;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Per row of each matrix: dot products pending on it.
pub struct Pending {
    u: Box<[AtomicU32]>,
    v: Box<[AtomicU32]>,
}

/// Bytes of [`Pending`] per row of a model (both matrices).
pub const PENDING_BYTES_PER_ROW: u64 = 8;

impl Pending {
    /// No dot product pending on any of `rows` rows. The counters are
    /// zeroed by the allocator (pages the kernel maps in only when a count
    /// first changes), so a model never trained over gRPC costs no memory.
    pub fn new(rows: usize) -> Self {
        Self {
            u: zeroed(rows),
            v: zeroed(rows),
        }
    }

    /// The counters of the input (`u`) or output (`v`) matrix.
    pub fn of(&self, input: bool) -> &[AtomicU32] {
        if input {
            &self.u
        } else {
            &self.v
        }
    }

    /// Adds `k` dot products pending on `row` (saturating).
    #[inline]
    pub fn add(counts: &[AtomicU32], row: u32, k: u64) {
        if let Some(c) = counts.get(row as usize) {
            let k = u32::try_from(k).unwrap_or(u32::MAX);
            let _ = c.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_add(k)));
        }
    }

    /// Takes `k` dot products pending on `row` away (never below zero).
    #[inline]
    pub fn sub(counts: &[AtomicU32], row: u32, k: u64) {
        if let Some(c) = counts.get(row as usize) {
            let k = u32::try_from(k).unwrap_or(u32::MAX);
            let _ = c.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(k)));
        }
    }

    /// The dot products a row's step stands for: its own `k`, and each
    /// [`OTHERS_SHARE`]-th of the others pending on it (rounded up), its own
    /// taken out of the count when the call is `counted` among them.
    #[inline]
    pub fn load(counts: &[AtomicU32], row: u32, k: u64, counted: bool) -> u64 {
        let pending = counts.get(row as usize).map_or(0, |c| c.load(Relaxed));
        let others = if counted {
            u64::from(pending).saturating_sub(k)
        } else {
            u64::from(pending)
        };
        k + others.div_ceil(OTHERS_SHARE)
    }
}

/// Other calls' dot products pending on a row count for one in
/// [`OTHERS_SHARE`] of the call's own in its step scale. Their steps come
/// from nearly the same state as the call's own, but not the same: counting
/// them in full (1) kept every setting measured up to 1,024 minibatches in
/// flight from diverging but cost 3.5 analogy points at 64 in flight and 12
/// at 256; counting one in 4 trained 64 in flight as well as 16 and lost
/// the least at 256 (one in 8 diverged at 256; docs/benchmarks.md,
/// "Quality against minibatches in flight").
pub const OTHERS_SHARE: u64 = 4;

/// Calls waiting for their adjust on a shard (its dotprod's included) from
/// which each further call's dotprod keeps its dot products and its adjust
/// refreshes its weights for the rows' drift instead of scaling its steps by
/// the dot products of the others ([`crate::loops::Refresh`]). The default
/// 2-thread worker keeps 4 calls in flight (32 minibatches in calls of 8),
/// which never reach it (the worker keeps calls of 8 only under it: on a
/// crowded shard they diverged where calls of 4 trained);
/// 256 minibatches in flight (64 calls) trained as well as 16 with the
/// refresh and 4.2–4.6 analogy points below without it (docs/benchmarks.md,
/// "Quality against minibatches in flight"). It costs a dot product more
/// per pair, so it is not paid where the steps of a few calls in flight are
/// bounded well enough by the counts.
pub const REFRESH_FROM_CALLS: usize = 8;

/// [`REFRESH_FROM_CALLS`] for CBOW's calls: 2, so that a CBOW call refreshes
/// its weights whenever another call waits for its adjust on the shard. A
/// CBOW dot product reads the mean of up to 2·window context rows, and the
/// calls in flight move all of them: with the counts alone, CBOW at alpha
/// 0.05, sample 1e-3, over 2 processes at the then default 32 minibatches
/// in flight diverged in 3 seeds of 3, and a per-call cap or fuller counts
/// either still diverged or lost 2.6–4.5 analogy points; refreshed from 2
/// calls it trained 0.80 points above gensim in all 3 seeds, at 1.05–1.08×
/// the CPU per word (skip-gram would pay 1.18× for no measured gain, so it
/// keeps 8; docs/benchmarks.md, "CBOW refreshes from 2 calls"). Not enough
/// for 5 epochs at that setting: 32 in flight still diverged there in 2
/// seeds of 3, 8 did not, so the worker keeps CBOW at 8 by default
/// (`MAX_SAFE_CBOW_IN_FLIGHT` in the client).
pub const CBOW_REFRESH_FROM_CALLS: usize = 2;

/// Calls waiting (the new one's included) from which a call of `objective`
/// is refreshed at its adjust.
pub fn refresh_from_calls(objective: Objective) -> usize {
    if objective.is_cbow() {
        CBOW_REFRESH_FROM_CALLS
    } else {
        REFRESH_FROM_CALLS
    }
}

/// `n` atomics at zero, from a zeroed allocation.
fn zeroed(n: usize) -> Box<[AtomicU32]> {
    const _: () = assert!(
        size_of::<AtomicU32>() == size_of::<u32>() && align_of::<AtomicU32>() == align_of::<u32>()
    );
    let zeros: Box<[u32]> = vec![0u32; n].into_boxed_slice();
    let raw = Box::into_raw(zeros);
    // SAFETY: AtomicU32 has the size, alignment and bit validity of u32
    // (checked above), so the allocation of `n` zero u32 is one of `n`
    // AtomicU32 at zero, with the same layout for its deallocation.
    unsafe { Box::from_raw(raw as *mut [AtomicU32]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_take_and_saturate() {
        let p = Pending::new(3);
        let v = p.of(false);
        Pending::add(v, 1, 5);
        Pending::add(v, 1, 7);
        assert_eq!(
            Pending::load(v, 1, 5, true),
            5 + 2,
            "its own counted: 7 others"
        );
        assert_eq!(
            Pending::load(v, 1, 4, false),
            4 + 3,
            "its own added: 12 others"
        );
        assert_eq!(Pending::load(v, 0, 4, false), 4, "nothing else pending");
        Pending::sub(v, 1, 5);
        assert_eq!(Pending::load(v, 1, 7, true), 7);
        Pending::add(v, 1, 4 * OTHERS_SHARE);
        assert_eq!(Pending::load(v, 1, 7, true), 7 + 4);
        Pending::sub(v, 1, 100);
        assert_eq!(Pending::load(v, 1, 0, true), 0, "never below zero");
        Pending::add(v, 2, u64::MAX);
        assert_eq!(
            Pending::load(v, 2, 0, true),
            u64::from(u32::MAX).div_ceil(OTHERS_SHARE)
        );
        Pending::add(v, 9, 1);
        assert_eq!(
            Pending::load(v, 9, 3, true),
            3,
            "a row out of range counts nothing"
        );
        assert_eq!(Pending::load(p.of(true), 1, 2, true), 2, "u apart from v");
    }

    #[test]
    fn a_refreshed_weight_is_the_sigmoid_of_the_moved_dot_product() {
        use crate::loops::refreshed_weight;
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        let alpha = 0.025f32;
        for f in [-9.0f64, -4.0, -1.5, -0.3, 0.0, 0.4, 2.0, 5.0] {
            for drift in [
                -12.0f64, -3.0, -0.25, -0.1, -0.01, 0.003, 0.2, 0.25, 0.26, 1.0, 7.0,
            ] {
                for positive in [true, false] {
                    let label = if positive { 1.0 } else { 0.0 };
                    let g = alpha * (label - sigmoid(f)) as f32;
                    let want = f64::from(alpha) * (label - sigmoid(f + drift));
                    let got = f64::from(refreshed_weight(g, alpha, drift as f32));
                    assert!(
                        (got - want).abs() <= 1e-3 * f64::from(alpha),
                        "F {f}, drift {drift}, positive {positive}: {got} against {want}"
                    );
                }
            }
        }
        assert_eq!(
            refreshed_weight(0.01, alpha, 0.0),
            0.01,
            "no drift: unchanged"
        );
        assert_eq!(
            refreshed_weight(0.0, alpha, 3.0),
            0.0,
            "a skipped pair stays skipped"
        );
        assert_eq!(refreshed_weight(0.01, 0.0, 3.0), 0.01, "no rate: unchanged");
    }
}
