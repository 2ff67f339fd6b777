//! The CPU work one training call may ask of a shard, checked minibatch by
//! minibatch as a call is decoded and before anything is planned: dot
//! products (examples × (1 + negative), at most [`MAX_CALL_DOTS`]) and work
//! (dot products × the shard's columns, at most `--max-call-work`, default
//! [`MAX_CALL_WORK`]). Both are refused with RESOURCE_EXHAUSTED.

use crate::model::Model;
use colonnade_proto::{ShardError, MAX_CALL_DOTS};

/// Default bound on a call's work, in multiply-adds (dot products × the
/// shard's columns): 2^34, about 0.6 CPU-seconds at the ~3·10^10 per second
/// the loops reach. A worker's default call (skip-gram: 8 minibatches of
/// 256 inputs, window 5, negative 5: 122,880 dot products at most) stays 2×
/// below it even at the largest dimension (65,536) on one shard, and [`MAX_CALL_DOTS`] dot
/// products pass it only above 4,096 columns per shard.
pub const MAX_CALL_WORK: u64 = 1 << 34;

/// Refuses a call whose minibatches through minibatch `i` ask for `dots`
/// dot products of `model`, when that passes either bound.
pub fn check(dots: u64, model: &Model, i: usize, max_work: u64) -> Result<(), ShardError> {
    if dots > MAX_CALL_DOTS {
        return Err(ShardError::ResourceExhausted(format!(
            "field `minibatches`: the call's minibatches (through minibatch {i}) ask for \
             {dots} dot products (examples × (1 + negative)), more than {MAX_CALL_DOTS} per \
             call; send fewer or smaller minibatches per call"
        )));
    }
    let cols = model.spec.cols() as u64;
    let work = dots.saturating_mul(cols);
    if work > max_work {
        return Err(ShardError::ResourceExhausted(format!(
            "field `minibatches`: the call's minibatches (through minibatch {i}) ask for \
             {dots} dot products of {cols} columns each, {work} multiply-adds, more than this \
             shard's limit of {max_work} per call (--max-call-work): send fewer or smaller \
             minibatches per call, or spread the dimension over more shards"
        )));
    }
    Ok(())
}
