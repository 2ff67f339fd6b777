//! The one boundary between a training pipeline and the shards of a model.
//! Two implementations: shards held in this process
//! (`colonnade_ps_shard::InProcessShards`: targets drawn once for all
//! shards, nothing encoded) and shards over gRPC
//! (`colonnade_client::shards::GrpcShards`: broadcast, decode, sum in shard
//! order). The client's SGNS step is written once against this trait.

use crate::domain::{Minibatch, ShardError};
use std::future::Future;

/// A failed call to one shard, naming it.
#[derive(Debug, thiserror::Error)]
#[error("shard {name} (shard {index} of {count}): {call} failed: {code}: {message}")]
pub struct CallError {
    /// The shard's name: its endpoint, or `embedded shard i`.
    pub name: String,
    pub index: usize,
    pub count: usize,
    /// `dotprod` or `adjust`.
    pub call: &'static str,
    pub code: tonic::Code,
    pub message: String,
}

/// How a shard's refusal of training on a diverged model begins (a
/// FAILED_PRECONDITION): [`CallError::is_divergence`] knows it by this.
pub const DIVERGED_PREFIX: &str = "training diverged: ";

/// What a status says went wrong: its message, then the causes a failed
/// connection carries (tonic's bare "transport error" names none), each
/// said once.
pub fn status_cause(status: &tonic::Status) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !status.message().is_empty() {
        parts.push(status.message().to_string());
    }
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    if parts.is_empty() {
        return "no message".into();
    }
    let text = parts.join(": ");
    if status.code() == tonic::Code::Unknown && std::error::Error::source(status).is_some() {
        // No answer from the shard at all: the connection failed.
        format!("the connection to the shard failed: {text}")
    } else {
        text
    }
}

impl CallError {
    /// Whether the shard refused the call because training diverged on its
    /// model: nothing a retry or a reconcile mends.
    pub fn is_divergence(&self) -> bool {
        self.code == tonic::Code::FailedPrecondition && self.message.starts_with(DIVERGED_PREFIX)
    }

    /// A gRPC status returned by shard `index` of `count`.
    pub fn from_status(
        name: &str,
        index: usize,
        count: usize,
        call: &'static str,
        status: &tonic::Status,
    ) -> Self {
        Self::new(
            name,
            index,
            count,
            call,
            status.code(),
            status_cause(status),
        )
    }

    fn new(
        name: &str,
        index: usize,
        count: usize,
        call: &'static str,
        code: tonic::Code,
        message: String,
    ) -> Self {
        Self {
            name: name.to_string(),
            index,
            count,
            call,
            code,
            message,
        }
    }

    /// A shard error of shard `index` of `count`.
    pub fn from_shard(
        name: &str,
        index: usize,
        count: usize,
        call: &'static str,
        e: ShardError,
    ) -> Self {
        Self::new(name, index, count, call, e.code(), e.to_string())
    }
}

/// The shards of one model, as one training pipeline calls them: a value
/// shares the shards and owns that pipeline's buffers, so calls take
/// `&mut self`; [`ModelShards::pipeline`] makes one more. A `dotprod` is
/// followed by the `adjust` of the same minibatches on the same value; an
/// implementation that caches the targets it drew pairs the two there.
///
/// A call carries one or several independent minibatches (each its own
/// deferred update, applied in order): per-call costs are paid once for
/// all of them. Dot products and weights are pair-major and concatenated
/// in minibatch order: per (input, output) pair, its positive, then its
/// `negative` samples.
pub trait ModelShards: Send + 'static {
    /// Whether calls compute on the calling thread (shards in this process):
    /// such pipelines run on blocking threads, off the async reactor.
    const BLOCKING: bool;

    /// Another handle on the same shards, with its own buffers.
    fn pipeline(&self) -> Self
    where
        Self: Sized;

    /// Negatives per pair of this model.
    fn negative(&self) -> usize;

    /// Σ over shards, in shard order, of the partial dot products of `mbs`,
    /// into `dots` (Σ pairs × (1 + negative) values).
    fn dotprod(
        &mut self,
        mbs: &[Minibatch],
        dots: &mut Vec<f32>,
    ) -> impl Future<Output = Result<(), CallError>> + Send;

    /// Applies the weights G = α × `scaled` (laid out as the dot products,
    /// α of each value's minibatch) on every shard. `scaled` holds G ÷ α,
    /// each value exact in half precision (`colonnade_common::sgns::wire_scaled_weight`):
    /// that is how weights travel, so every path applies the same G.
    fn adjust(
        &mut self,
        mbs: &[Minibatch],
        scaled: &[f32],
    ) -> impl Future<Output = Result<(), CallError>> + Send;

    /// dotprod, weights and adjust of `mbs` in one visit of each row, where
    /// the shards can weigh their own dot products: the shards of a model in
    /// this process hold whole vectors side by side (one shard, or slices
    /// sharing one allocation), so the summed dot products are final.
    /// Each minibatch is stepped in turn with exactly the weights the two
    /// calls would apply (α × `colonnade_common::sgns::scaled_weight`); `dots` gets its dot
    /// products, pair-major, for the caller's loss and divergence checks. A
    /// diverged dot product (`colonnade_common::sgns::is_diverged`) adds no update.
    /// Returns false, touching nothing, where the shards cannot (column
    /// slices in rows of their own, or shards behind the wire): the caller then makes the
    /// two calls.
    fn fused_step(
        &mut self,
        _mbs: &[Minibatch],
        _dots: &mut Vec<f32>,
    ) -> impl Future<Output = Result<bool, CallError>> + Send {
        async { Ok(false) }
    }

    /// Tells the shards, with the next `adjust`, that this call's dot
    /// products diverged (`why` says how): they apply the rest, then refuse
    /// training on the model ([`crate::DIVERGED_PREFIX`]). Shards that stay
    /// with the process (embedded) need not hear it: the run stops.
    fn note_divergence(&mut self, _why: &str) {}

    /// Bytes this handle has sent and received on the wire (0 in process).
    fn wire_bytes(&self) -> (u64, u64);
}
