//! The row step cap: how many deferred gradient steps a row may take from
//! one call before its summed step is scaled down, per minibatch
//! ([`row_step_cap`]), per call of several ([`call_step_cap`]), and what a
//! CBOW context word counts for ([`cbow_context_load`]). Counts only, the
//! same on every shard: nothing here reads the vectors.

use crate::stale::OTHERS_SHARE;

/// The least number of deferred gradient steps a row may take from one
/// minibatch before they are scaled down (see [`row_step_cap`]).
pub const ROW_STEP_CAP: u64 = 64;

/// How many deferred gradient steps one row may take from a minibatch: the
/// dot products of its largest input position (`negative + 1` per context
/// word, so 2·window·(negative + 1) in practice: one full window, as
/// word2vec itself defers), and at least [`ROW_STEP_CAP`]. A row that takes
/// part in k dot products of a minibatch receives the sum of k steps all
/// computed from the vectors as they were at the minibatch's start; above
/// the cap, that sum is scaled by `cap / k` (the mean step, taken `cap`
/// times). Without it, head-heavy vocabularies (a few hundred words, a hub
/// node) diverge: their frequent rows take hundreds of stale steps per
/// minibatch (docs/design.md, "Row step cap").
pub fn row_step_cap(context_counts: &[u32], negative: u32) -> u64 {
    let widest = context_counts.iter().copied().max().unwrap_or(0);
    (u64::from(widest) * (u64::from(negative) + 1)).max(ROW_STEP_CAP)
}

/// The most minibatches of a call [`call_step_cap`] counts: the default
/// --minibatches-per-call. CBOW at alpha 0.05, sample 1e-3, 256 in flight
/// as 16 per call diverged counting all 16 (3.4 caps), where 4 per call
/// (8 threads x 8 calls) trained above 16 in flight.
pub const CALL_CAP_MINIBATCHES: u64 = 4;

/// The row step cap of a call of `minibatches` minibatches whose widest
/// input position gives `cap` ([`row_step_cap`]): the cap at which a row's
/// summed steps are scaled as if each minibatch were a call of its own in
/// flight beside the others, each counting the others' dot products on the
/// row one in [`OTHERS_SHARE`] ([`crate::stale`]): a row with k dot products
/// per minibatch is scaled when k + (m − 1)·k/S > cap, i.e. when the call's
/// m·k pass cap · m·S / (S + m − 1), m counted up to
/// [`CALL_CAP_MINIBATCHES`]. One minibatch keeps `cap`; 4 or more get 2.3
/// caps. CBOW's calls take it: a cap on the call as a whole scaled frequent
/// rows down as if its minibatches were one, and CBOW over processes lost
/// 1.7 analogy points to gensim at 4 minibatches per call. Skip-gram's keep
/// one cap per call: at alpha 0.05 over processes it diverged in every seed
/// with this cap or m caps, and it trains above gensim with one
/// (docs/benchmarks.md, "Quality grid against gensim").
pub fn call_step_cap(cap: u64, minibatches: usize) -> u64 {
    let m = (minibatches as u64).clamp(1, CALL_CAP_MINIBATCHES);
    cap.saturating_mul(m * OTHERS_SHARE) / (OTHERS_SHARE + m - 1)
}

/// The row step cap of a skip-gram call of `minibatches` minibatches whose
/// widest input position gives `cap` ([`row_step_cap`]): `cap` up to
/// [`CALL_CAP_MINIBATCHES`] minibatches, as a call of 4 has always had;
/// beyond them each further minibatch counts as a call of its own in flight
/// would, one in [`OTHERS_SHARE`] ([`crate::stale`]): a row with k dot
/// products per minibatch is scaled when 4k + (m − 4)·k/S > cap, i.e. when
/// the call's m·k pass cap · m·S / (4·S + m − 4): 1.6 caps at 8 minibatches,
/// 2.3 at 16. Counted in full (one cap per call), a call of 8 scaled its
/// frequent rows down as 32 minibatches in flight as 4 calls of 8 never
/// were as 8 calls of 4, and trained 0.4–0.8 analogy points below them
/// (docs/benchmarks.md, "Fewer, larger calls"). Measured where the shard
/// counts the calls in flight: on a crowded one (`REFRESH_FROM_CALLS`),
/// 16 calls of 8 diverged over five epochs where 32 of 4 trained, and the
/// worker's defaults keep calls of 8 off it ("Calls of 8 diverge on crowded
/// shards").
pub fn skip_gram_call_step_cap(cap: u64, minibatches: usize) -> u64 {
    let (m, first) = (minibatches as u64, CALL_CAP_MINIBATCHES);
    if m <= first {
        return cap;
    }
    cap.saturating_mul(m * OTHERS_SHARE) / (first * OTHERS_SHARE + m - first)
}

/// The dot products a CBOW context word entry counts for in its row's load:
/// its position's `per_pair` (1 + negative) shared among the position's `c`
/// context words, rounded up. The position's dot products are of h, the
/// mean of its context rows, so each context row is 1/c of what they read:
/// a step on it moves those dot products, and the steps after them, by 1/c
/// of what a skip-gram step on its own row would. Counted in full, as a
/// skip-gram input's, the cap scaled CBOW's frequent context words down c
/// times too early, and CBOW trained 0.4-0.8 analogy points below gensim
/// after one epoch (docs/benchmarks.md, "Quality grid against gensim").
pub fn cbow_context_load(per_pair: u64, c: u32) -> u32 {
    u32::try_from(per_pair.div_ceil(u64::from(c.max(1)))).unwrap_or(u32::MAX)
}

/// The scale of a row's summed update when it takes part in `k` dot products
/// of one minibatch: 1 up to `cap` (see [`row_step_cap`]), then `cap / k`.
/// Over gRPC, k counts the dot products of every call in flight on the row
/// ([`crate::stale`]).
#[inline]
pub fn row_step_scale(k: u64, cap: u64) -> f32 {
    if k > cap {
        (cap as f64 / k as f64) as f32
    } else {
        1.0
    }
}
