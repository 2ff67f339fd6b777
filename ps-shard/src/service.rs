//! The tonic adapter: decodes requests, runs the CPU work of [`crate::model`]
//! (training calls on the runtime thread that received them, the rest on
//! blocking threads; at most `threads` at once), and maps [`ShardError`]s
//! to gRPC codes. Panics in handlers become `Internal`. It pairs each
//! `dotprod` with the `adjust` of the same call: the plan a `dotprod` drew
//! waits in a [`crate::plan_cache::PlanCache`] for it.

use crate::checkpoints::{Arrival, Arrived};
use crate::model::{Model, Scratch};
use crate::plan::Plan;
use crate::plan_cache::{CallKey, PlanCache};
use crate::registry::ShardCore;
use crate::stale::refresh_from_calls;
use colonnade_common::model::ShardSpec;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{
    self, AdjustRequest, AdjustResponse, CheckpointInfo, CheckpointRequest, CheckpointResponse,
    CreateModelChunk, CreateModelResponse, DotprodRequest, DotprodResponse, DropModelRequest,
    DropModelResponse, ModelStatus, PullRowsRequest, RestoreRequest, RestoreResponse, RowBlock,
    StatusRequest, StatusResponse,
};
use colonnade_proto::{decode_f16_blocks, decode_u64, encode_f16, encode_f32};
use colonnade_proto::{matrix_from_wire, Minibatch, ShardError};
use colonnade_setup::{Scope, Tokens};
use futures::Stream;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status, Streaming};

/// Bytes of values per streamed export block (at least one row).
const PULL_BLOCK_BYTES: u64 = 4 << 20;

/// Most PullRows streams open at once; one more is refused with
/// RESOURCE_EXHAUSTED (each holds up to three blocks while unread).
pub const MAX_PULL_STREAMS: usize = 16;

/// A PullRows stream whose reader takes no block for this long is ended,
/// and its permit returned.
const PULL_STALL: std::time::Duration = std::time::Duration::from_secs(600);

/// Per-thread buffers: the decoded request and the model's scratch, reused
/// from call to call so that steady-state requests allocate nothing beyond
/// their own message buffers (paper 6.1.3).
#[derive(Default)]
struct ThreadBufs {
    /// The call's minibatches (the first `n` are this call's).
    minibatches: Vec<Minibatch>,
    /// The call's weights.
    weights: Vec<f32>,
    /// The call's dot products.
    dots: Vec<f32>,
    scratch: Scratch,
}

thread_local! {
    static BUFS: RefCell<ThreadBufs> = RefCell::new(ThreadBufs::default());
}

/// `f` with this thread's buffers: the one way a call's work reaches them,
/// on a blocking thread or inline.
fn with_bufs<T>(f: impl FnOnce(&mut ThreadBufs) -> T) -> T {
    BUFS.with(|b| f(&mut b.borrow_mut()))
}

/// Most minibatches one training call may carry.
pub const MAX_MINIBATCHES_PER_CALL: usize = 256;

pub struct ShardService {
    core: Arc<ShardCore>,
    tokens: Tokens,
    permits: Arc<Semaphore>,
    /// One per open PullRows stream ([`MAX_PULL_STREAMS`]).
    pulls: Arc<Semaphore>,
    plans: Arc<PlanCache>,
}

impl ShardService {
    pub fn new(core: Arc<ShardCore>, threads: usize) -> Self {
        Self {
            core,
            tokens: Tokens::default(),
            permits: Arc::new(Semaphore::new(threads.max(1))),
            pulls: Arc::new(Semaphore::new(MAX_PULL_STREAMS)),
            plans: Arc::default(),
        }
    }

    /// Checks calls against `tokens`.
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    pub fn core(&self) -> &Arc<ShardCore> {
        &self.core
    }

    /// A probe of the compute path: each call waits for a compute permit,
    /// as every training call does, and runs an empty job on a blocking
    /// thread, as the other heavy calls do, and answers whether it got
    /// through (false once the shard shuts down). See `server::watch_compute`.
    pub fn probe(
        &self,
    ) -> impl Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + 'static {
        let permits = Arc::clone(&self.permits);
        move || {
            let permits = Arc::clone(&permits);
            Box::pin(async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return false;
                };
                tokio::task::spawn_blocking(|| ()).await.is_ok()
            })
        }
    }

    /// A compute permit (refused once the shard shuts down).
    async fn permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("shard is shutting down"))
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ThreadBufs) -> Result<T, ShardError> + Send + 'static,
    ) -> Result<T, Status> {
        let _permit = self.permit().await?;
        tokio::task::spawn_blocking(move || with_bufs(f))
            .await
            .map_err(|e| Status::internal(format!("shard handler failed: {e}")))?
            .map_err(Status::from)
    }

    /// A training call's work (`dotprod`, `adjust`), run on the runtime
    /// thread that received it once a compute permit is free. A call is
    /// bounded by `--max-call-work` and takes about a millisecond at the
    /// defaults; handing it to a blocking thread and back (a wake-up and a
    /// futex each way, the request's bytes read on another core) cost 4
    /// shards and their worker about 10 % of their CPU (docs/benchmarks.md,
    /// "A shard's calls on its own threads"). `ps-shard` runs one runtime
    /// thread more than its permits, so one is free for I/O and health while
    /// every permit computes. A panic in `f` becomes `Internal`, as on a
    /// blocking thread.
    async fn inline<T>(
        &self,
        f: impl FnOnce(&mut ThreadBufs) -> Result<T, ShardError> + Send,
    ) -> Result<T, Status> {
        let _permit = self.permit().await?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| with_bufs(f)))
            .map_err(|_| Status::internal("shard handler failed: it panicked"))?
            .map_err(Status::from)
    }

    /// Refuses a call of no minibatches or of too many, before any work.
    fn check_count(minibatches: usize) -> Result<(), Status> {
        if minibatches > MAX_MINIBATCHES_PER_CALL {
            return Err(Status::invalid_argument(format!(
                "field `minibatches`: {minibatches} minibatches, at most \
                 {MAX_MINIBATCHES_PER_CALL} per call"
            )));
        }
        Ok(())
    }
}

/// Decodes a call's minibatches into `bufs.minibatches` (the first
/// `wire.len()` are the call's), checking that they are of one model and
/// lineage, that the model holds that lineage, and that the call's work
/// stays bounded, minibatch by minibatch before anything is planned.
/// Returns the model and the call's key.
fn decode_call(
    core: &ShardCore,
    wire: &[v1::Minibatch],
    bufs: &mut ThreadBufs,
) -> Result<(Arc<Model>, CallKey), ShardError> {
    let n = wire.len();
    if n == 0 {
        return Err(ShardError::InvalidArgument(
            "field `minibatches` is empty".into(),
        ));
    }
    if bufs.minibatches.len() < n {
        bufs.minibatches.resize_with(n, Minibatch::default);
    }
    let mut model: Option<(Arc<Model>, u64)> = None;
    let mut dots = 0u64;
    for (i, (w, mb)) in wire.iter().zip(&mut bufs.minibatches).enumerate() {
        let in_call = |e: ShardError| match e {
            ShardError::InvalidArgument(m) if n > 1 => {
                ShardError::InvalidArgument(format!("minibatch {i}: {m}"))
            }
            e => e,
        };
        let (fingerprint, lineage) = mb.decode_from(Some(w)).map_err(in_call)?;
        let m = match &model {
            Some((m, l)) if m.fingerprint == fingerprint && *l == lineage => Arc::clone(m),
            Some((m, l)) => {
                return Err(ShardError::InvalidArgument(format!(
                    "minibatch {i}: model {fingerprint:016x} lineage {lineage:016x}, but the \
                     call's first minibatch is of model {:016x} lineage {l:016x}: the \
                     minibatches of a call are of one model",
                    m.fingerprint
                )))
            }
            None => {
                let m = core.model(fingerprint)?;
                m.check_lineage(lineage)?;
                m.check_trainable()?;
                model = Some((Arc::clone(&m), lineage));
                m
            }
        };
        dots += mb.examples() as u64 * (1 + u64::from(m.spec.model.negative));
        crate::work::check(dots, &m, i, core.max_call_work)?;
    }
    let (model, lineage) = model.ok_or_else(|| ShardError::Internal("no minibatch".into()))?;
    let key = CallKey {
        fingerprint: model.fingerprint,
        lineage,
        seed: bufs.minibatches[0].seed,
        minibatches: n as u32,
    };
    Ok((model, key))
}

/// Decodes a call's scaled weights into its weights G (each times its α
/// in `plan`) in `weights`, checking their number against `plan` and their
/// values (a scaled weight is 1 − σ(F) or −σ(F): within [−1, 1]) in the
/// same pass: one pass over the half floats, a block at a time, with no
/// array of the unpacked values between (the three passes it replaced, an
/// unpacked array, its zeroing and the product, were about 5 % of a
/// shard's CPU at 4 shards).
fn weights_of(raw: &[u8], plan: &Plan, weights: &mut Vec<f32>) -> Result<(), ShardError> {
    if raw.len().is_multiple_of(2) && raw.len() / 2 != plan.len() {
        return Err(ShardError::InvalidArgument(format!(
            "field `scaled_weights`: {} weights for {} dot products (examples × (1 + negative) \
             over the call's minibatches)",
            raw.len() / 2,
            plan.len()
        )));
    }
    weights.clear();
    weights.reserve(plan.len());
    let (mut at, mut outside) = (0, None);
    let within = |g: f32| g.abs() <= 1.0; // false for NaN too
    decode_f16_blocks("scaled_weights", raw, |block| {
        // A branch-free check of the block first (it vectorizes, as the
        // product below does): a check per weight inside the product kept
        // both scalar, about 2 % of a shard's CPU over gRPC.
        if outside.is_none() && !block.iter().fold(true, |ok, &g| ok & within(g)) {
            outside = block
                .iter()
                .position(|&g| !within(g))
                .map(|j| (at + j, block[j]));
        }
        at += block.len();
        plan.extend_weights(block, weights);
    })
    .map_err(ShardError::from)?;
    if let Some((i, g)) = outside {
        return Err(ShardError::InvalidArgument(format!(
            "field `scaled_weights`: weight {i} is {g}, outside [-1, 1] (1 − σ(F) or −σ(F))"
        )));
    }
    Ok(())
}

type RowStream = Pin<Box<dyn Stream<Item = Result<RowBlock, Status>> + Send>>;

#[tonic::async_trait]
impl Shard for ShardService {
    async fn create_model(
        &self,
        request: Request<Streaming<CreateModelChunk>>,
    ) -> Result<Response<CreateModelResponse>, Status> {
        let mut stream = request.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty CreateModel stream"))?;
        let spec = first.spec.as_ref().map(ShardSpec::from).ok_or_else(|| {
            Status::invalid_argument("field `spec` is missing from the first CreateModel message")
        })?;
        let workers = first.num_workers;
        let vocab = spec.model.vocab_size;
        if vocab > u64::from(u32::MAX) {
            return Err(Status::invalid_argument(format!(
                "field `vocab_size`: {vocab} exceeds 2^32-1"
            )));
        }
        // Size limits and spec checks before a single count is buffered.
        let admission = self.core.admit(&spec).map_err(Status::from)?;
        // Admitted: the budget holds vocab_size counts.
        let mut counts: Vec<u64> = Vec::with_capacity(usize::try_from(vocab).unwrap_or(0));
        let mut chunk = Some(first);
        while let Some(c) = chunk {
            if c.counts_offset != counts.len() as u64 {
                return Err(Status::invalid_argument(format!(
                    "field `counts_offset`: {} but {} counts received so far",
                    c.counts_offset,
                    counts.len()
                )));
            }
            let part = decode_u64("counts", &c.counts).map_err(ShardError::from)?;
            if counts.len() as u64 + part.len() as u64 > vocab {
                return Err(Status::invalid_argument(format!(
                    "field `counts`: more than vocab_size {vocab} counts"
                )));
            }
            counts.extend(part);
            chunk = stream.message().await?;
        }
        let core = Arc::clone(&self.core);
        let created = self
            .blocking(move |_| {
                let counts: Arc<[u64]> = counts.into();
                let created = core.create_admitted(spec, counts, admission);
                // The received chunks and counts are freed by now.
                crate::hogwild::release_freed_heap();
                created
            })
            .await?;
        let num_workers = self
            .core
            .model(created.fingerprint)
            .map_err(Status::from)?
            .declare_workers(workers);
        tracing::info!(
            fingerprint = format!("{:016x}", created.fingerprint),
            existed = created.existed,
            num_workers,
            "model ready"
        );
        Ok(Response::new(CreateModelResponse {
            model_fingerprint: created.fingerprint,
            existed: created.existed,
            num_workers,
        }))
    }

    async fn dotprod(
        &self,
        request: Request<DotprodRequest>,
    ) -> Result<Response<DotprodResponse>, Status> {
        let minibatches = request.into_inner().minibatches;
        Self::check_count(minibatches.len())?;
        let (core, cache) = (Arc::clone(&self.core), Arc::clone(&self.plans));
        let (dots, half_dots) = self
            .inline(move |b| {
                let (model, key) = decode_call(&core, &minibatches, b)?;
                let mut plan = cache.fresh();
                model.plan(&b.minibatches[..minibatches.len()], &mut plan)?;
                model.dotprod(&plan, &mut b.scratch, &mut b.dots)?;
                // Final dot products whole, a column slice's partials as
                // half floats (the bulk of what a call moves).
                let dots = if model.spec.cols() == model.spec.model.dim as usize {
                    (encode_f32(&b.dots), bytes::Bytes::new())
                } else {
                    (bytes::Bytes::new(), encode_f16(&b.dots))
                };
                // A crowded shard (for CBOW, one where another call waits)
                // refreshes the call's weights at its adjust.
                if cache.waiting_calls() + 1 >= refresh_from_calls(plan.objective) {
                    plan.keep_dots(&mut b.dots);
                }
                // Pending on their rows until the adjust (or the plan's drop).
                plan.count_in(model.pending());
                cache.put(key, plan);
                Ok(dots)
            })
            .await?;
        Ok(Response::new(DotprodResponse { dots, half_dots }))
    }

    async fn adjust(
        &self,
        request: Request<AdjustRequest>,
    ) -> Result<Response<AdjustResponse>, Status> {
        let AdjustRequest {
            minibatches,
            scaled_weights: raw,
            call,
            diverged,
        } = request.into_inner();
        Self::check_count(minibatches.len())?;
        let fingerprint = match (&call, minibatches.first()) {
            (_, Some(mb)) => mb.model_fingerprint,
            (Some(c), None) => c.model_fingerprint,
            (None, None) => 0,
        };
        let (core, cache) = (Arc::clone(&self.core), Arc::clone(&self.plans));
        self.inline(move |b| {
            let (model, mut plan) = if minibatches.is_empty() {
                let c = call.ok_or_else(|| {
                    ShardError::InvalidArgument(
                        "fields `minibatches` and `call`: an adjust carries its call's \
                         minibatches or names the call"
                            .into(),
                    )
                })?;
                let model = core.model(c.model_fingerprint)?;
                model.check_lineage(c.lineage)?;
                model.check_trainable()?;
                let key = CallKey {
                    fingerprint: c.model_fingerprint,
                    lineage: c.lineage,
                    seed: c.seed,
                    minibatches: c.minibatches,
                };
                let plan = cache.remove(&key).ok_or_else(|| {
                    ShardError::NotFound(format!(
                        "field `call`: this shard holds no plan of the call of {} minibatch(es) \
                         from seed {} (its dotprod went elsewhere, or the plan was dropped): \
                         send the adjust with its minibatches",
                        c.minibatches, c.seed
                    ))
                })?;
                (model, plan)
            } else {
                let (model, key) = decode_call(&core, &minibatches, b)?;
                let n = minibatches.len();
                let plan = cache.take_or_plan(&model, &key, &b.minibatches[..n])?;
                (model, plan)
            };
            // Everything is checked before any row changes: the weights'
            // number and values.
            let applied = weights_of(&raw, &plan, &mut b.weights)
                .and_then(|()| model.adjust(&mut plan, &b.weights, true, &mut b.scratch))
                .map(|()| {
                    if !diverged.is_empty() {
                        model.mark_diverged(&diverged);
                    }
                });
            cache.recycle(plan);
            applied
        })
        .await?;
        let checkpoint_pending = self.core.pending_checkpoint(fingerprint);
        Ok(Response::new(AdjustResponse { checkpoint_pending }))
    }

    type PullRowsStream = RowStream;

    async fn pull_rows(
        &self,
        request: Request<PullRowsRequest>,
    ) -> Result<Response<RowStream>, Status> {
        let req = request.into_inner();
        let model = self.core.model(req.model_fingerprint)?;
        model.check_exportable()?;
        let matrix = matrix_from_wire(req.matrix)?;
        let vocab = model.spec.model.vocab_size;
        if req.row_start > req.row_end || req.row_end > vocab {
            return Err(Status::invalid_argument(format!(
                "fields `row_start`/`row_end`: [{}, {}) is not within the vocabulary [0, {vocab})",
                req.row_start, req.row_end
            )));
        }
        let permit = Arc::clone(&self.pulls).try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{MAX_PULL_STREAMS} PullRows streams are open on this shard already (an \
                 exporter that does not read its streams?); retry when one has finished"
            ))
        })?;
        // Blocks of ≲ 4 MiB whatever the shard's width.
        let block_rows = (PULL_BLOCK_BYTES / (model.spec.cols() as u64 * 4)).max(1);
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        // An async task: a stream nobody reads holds its permit and two
        // blocks, never a thread (each block is read on a blocking thread
        // and the task waits for room without one).
        tokio::spawn(async move {
            let _permit = permit;
            let mut values = Vec::new();
            let mut start = req.row_start;
            while start < req.row_end {
                let end = (start + block_rows).min(req.row_end);
                let m = Arc::clone(&model);
                let mut buf = std::mem::take(&mut values);
                let read = tokio::task::spawn_blocking(move || {
                    let r = m.read_rows(matrix, start, end, &mut buf);
                    let block = r.map(|()| RowBlock {
                        row_start: start,
                        rows: (end - start) as u32,
                        values: encode_f32(&buf),
                    });
                    (block, buf)
                })
                .await;
                let block = match read {
                    Ok((block, buf)) => {
                        values = buf;
                        block.map_err(Status::from)
                    }
                    Err(e) => Err(Status::internal(format!("reading rows failed: {e}"))),
                };
                let failed = block.is_err();
                match tokio::time::timeout(PULL_STALL, tx.send(block)).await {
                    Ok(Ok(())) if !failed => start = end,
                    _ => return, // failed, client went away, or stalled
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn checkpoint(
        &self,
        request: Request<CheckpointRequest>,
    ) -> Result<Response<CheckpointResponse>, Status> {
        let req = request.into_inner();
        let position: serde_json::Value = if req.position.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&req.position)
                .map_err(|e| Status::invalid_argument(format!("field `position`: not JSON: {e}")))?
        };
        let arrival = Arrival {
            fingerprint: req.model_fingerprint,
            lineage: req.lineage,
            version: req.version,
            worker: req.worker_index,
            num_workers: req.num_workers,
            position,
            finished: req.finished,
            durable: req.durable,
            timeout: std::time::Duration::from_millis(u64::from(req.timeout_ms.max(1))),
        };
        let resp = match self.core.checkpoint(arrival).await? {
            Arrived::Taken(t) => CheckpointResponse {
                version: t.version,
                joined: true,
                pause_seconds: t.pause_seconds,
                bytes: t.bytes,
            },
            Arrived::OtherPending(version) => CheckpointResponse {
                version,
                joined: false,
                ..CheckpointResponse::default()
            },
        };
        Ok(Response::new(resp))
    }

    async fn restore(
        &self,
        request: Request<RestoreRequest>,
    ) -> Result<Response<RestoreResponse>, Status> {
        crate::roles::check_restore(&self.core, &self.tokens, &request)?;
        let req = request.into_inner();
        let core = Arc::clone(&self.core);
        let restored = self
            .blocking(move |_| {
                core.restore(
                    req.model_fingerprint,
                    req.version,
                    req.lineage,
                    req.num_workers,
                )
            })
            .await?;
        Ok(Response::new(RestoreResponse { restored }))
    }

    async fn status(
        &self,
        _request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let models = self
            .core
            .models()
            .iter()
            .map(|m| {
                let ckpt = self.core.checkpoints(m.fingerprint);
                ModelStatus {
                    model_fingerprint: m.fingerprint,
                    spec: Some(v1::ModelSpec::from(&m.spec)),
                    dotprod_calls: m.stats.dotprod_calls.load(Relaxed),
                    adjust_calls: m.stats.adjust_calls.load(Relaxed),
                    pairs_adjusted: m.stats.pairs_adjusted.load(Relaxed),
                    memory_bytes: m.memory_bytes() as u64,
                    lineage: m.lineage(),
                    base_version: m.base_version,
                    adjusts_since_base: m.stats.adjust_calls.load(Relaxed),
                    checkpoints: ckpt
                        .versions()
                        .into_iter()
                        .map(|v| CheckpointInfo {
                            version: v.version,
                            lineage: v.lineage,
                            manifest: v.manifest.into(),
                        })
                        .collect(),
                    checkpoint_pending: ckpt.pending(),
                    checkpoint_error: ckpt.last_error().unwrap_or_default(),
                    diverged: m.diverged().unwrap_or_default(),
                }
            })
            .collect();
        Ok(Response::new(StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            api_version: colonnade_proto::API_VERSION,
            models,
            persistent: self.core.data_dir.is_some(),
            loading: self.core.is_loading(),
        }))
    }

    async fn drop_model(
        &self,
        request: Request<DropModelRequest>,
    ) -> Result<Response<DropModelResponse>, Status> {
        self.tokens.check(request.metadata(), Scope::Admin)?;
        let req = request.into_inner();
        let core = Arc::clone(&self.core);
        // Blocking: it waits for a checkpoint being written, and deletes files.
        let d = self
            .blocking(move |_| core.drop_model(req.model_fingerprint, req.delete_checkpoints))
            .await?;
        let fingerprint = format!("{:016x}", req.model_fingerprint);
        let dir = d
            .dir
            .as_deref()
            .map(|p| tracing::field::display(p.display()));
        let what = match (d.held, d.deleted, d.dir.is_some()) {
            (_, true, _) => "model dropped, its files deleted from the data dir",
            (true, false, true) => {
                "model dropped from memory, its checkpoints kept in the data dir (creating it \
                 again loads them; a restart does not)"
            }
            (true, false, false) => "model dropped (no data dir: nothing on disk)",
            (false, false, _) => "drop of a model this shard does not hold: nothing dropped",
        };
        tracing::info!(
            fingerprint,
            held = d.held,
            checkpoints_deleted = d.deleted,
            checkpoints_kept = ?d.kept,
            dir,
            "{what}"
        );
        Ok(Response::new(DropModelResponse {
            dropped: d.held,
            checkpoints_deleted: d.deleted,
            checkpoints_kept: d.kept,
            model_dir: d.dir.map(|p| p.display().to_string()).unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{snapshot, spec, COUNTS};

    fn service() -> (ShardService, Arc<Model>) {
        let core = Arc::new(ShardCore::new(None));
        let fp = core
            .create_model(spec(0..8), &COUNTS)
            .expect("create")
            .fingerprint;
        let model = core.model(fp).expect("model");
        (ShardService::new(core, 1), model)
    }

    fn batch(fp: u64, outputs: &[u32]) -> v1::Minibatch {
        Minibatch {
            seed: 9,
            alpha: 1.0,
            inputs: vec![0, 1],
            context_counts: vec![2, 1],
            outputs: outputs.to_vec(),
            ..Minibatch::default()
        }
        .to_wire(fp)
    }

    async fn dotprod(s: &ShardService, b: v1::Minibatch) {
        let req = Request::new(DotprodRequest {
            minibatches: vec![b],
        });
        s.dotprod(req).await.expect("dotprod");
    }

    async fn adjust(s: &ShardService, b: v1::Minibatch) {
        let weights: Vec<f32> = (0..12).map(|t| 0.05 * (t as f32 - 4.0)).collect();
        let req = Request::new(AdjustRequest {
            minibatches: vec![b],
            scaled_weights: encode_f16(&weights),
            ..AdjustRequest::default()
        });
        s.adjust(req).await.expect("adjust");
    }

    /// A weight outside [−1, 1] in a later block of the half floats (they
    /// are checked a block of 256 at a time) is refused, named by its index,
    /// before any row changes.
    #[tokio::test]
    async fn a_weight_out_of_range_is_named_and_nothing_is_applied() {
        let (s, m) = service();
        let outputs: Vec<u32> = (0..80).map(|i| i % 6).collect();
        let b = Minibatch {
            seed: 9,
            alpha: 1.0,
            inputs: vec![0, 1],
            context_counts: vec![40, 40],
            outputs,
            ..Minibatch::default()
        }
        .to_wire(m.fingerprint);
        let dots = 80 * (1 + m.spec.model.negative as usize);
        assert!(dots > 300, "the call spans more than one block: {dots}");
        for (at, bad) in [(0, -1.5f32), (290, 1.5), (dots - 1, f32::NAN)] {
            let mut weights = vec![0.1f32; dots];
            weights[at] = bad;
            let before = snapshot(&m);
            let req = Request::new(AdjustRequest {
                minibatches: vec![b.clone()],
                scaled_weights: encode_f16(&weights),
                ..AdjustRequest::default()
            });
            let e = s.adjust(req).await.expect_err("refused");
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(
                e.message().contains(&format!("weight {at} is {bad}")),
                "{}",
                e.message()
            );
            assert_eq!(snapshot(&m), before, "nothing applied");
        }
    }

    /// A shard holding every column answers its final dot products as f32
    /// (`dots`), a shard of a column slice its partials as half floats
    /// (`half_dots`, half the bytes); the slices' sum is the whole dot
    /// product within the half floats' rounding.
    #[tokio::test]
    async fn a_column_slice_answers_half_floats_and_a_whole_shard_f32() {
        let answer = |cols: std::ops::Range<u32>| async move {
            let core = Arc::new(ShardCore::new(None));
            let fp = core
                .create_model(spec(cols), &COUNTS)
                .expect("create")
                .fingerprint;
            let s = ShardService::new(core, 1);
            // One step first, so that v is not zero and the products are not.
            dotprod(&s, batch(fp, &[1, 2, 3])).await;
            adjust(&s, batch(fp, &[1, 2, 3])).await;
            let mut b = batch(fp, &[2, 3, 4]);
            b.seed = 10;
            let req = Request::new(DotprodRequest {
                minibatches: vec![b],
            });
            s.dotprod(req).await.expect("dotprod").into_inner()
        };
        let n = 3 * (1 + spec(0..8).model.negative as usize);
        let whole = answer(0..8).await;
        assert_eq!((whole.dots.len(), whole.half_dots.len()), (4 * n, 0));
        let mut sum = vec![0.0f32; n];
        colonnade_proto::sum_dots_into(&whole.half_dots, &whole.dots, &mut sum, true)
            .expect("n f32");
        let mut parts = vec![0.0f32; n];
        for (i, cols) in [0..3, 3..8].into_iter().enumerate() {
            let part = answer(cols).await;
            assert_eq!((part.dots.len(), part.half_dots.len()), (0, 2 * n));
            colonnade_proto::sum_dots_into(&part.half_dots, &part.dots, &mut parts, i == 0)
                .expect("n half floats");
        }
        assert!(sum.iter().any(|&x| x.abs() > 1e-4), "{sum:?}");
        for (t, (&w, &p)) in sum.iter().zip(&parts).enumerate() {
            assert!(
                (w - p).abs() <= 1e-3 * w.abs().max(1e-3),
                "dot {t}: {w} vs {p}"
            );
        }
    }

    #[tokio::test]
    async fn adjust_uses_dotprods_targets_only_when_they_fit() {
        // Paired (dotprod first, its targets cached) and alone (drawn again
        // from the seed): the same update.
        let ((a, ma), (b, mb)) = (service(), service());
        dotprod(&a, batch(ma.fingerprint, &[1, 2, 3])).await;
        adjust(&a, batch(ma.fingerprint, &[1, 2, 3])).await;
        adjust(&b, batch(mb.fingerprint, &[1, 2, 3])).await;
        assert_eq!(snapshot(&ma), snapshot(&mb));
        assert_ne!(
            snapshot(&ma),
            snapshot(&service().1),
            "the adjust changed the model"
        );
        // A minibatch reusing the seed with other outputs must not get the
        // cached targets of the first one.
        let ((c, mc), (d, md)) = (service(), service());
        dotprod(&c, batch(mc.fingerprint, &[1, 2, 3])).await;
        adjust(&c, batch(mc.fingerprint, &[4, 5, 2])).await;
        adjust(&d, batch(md.fingerprint, &[4, 5, 2])).await;
        assert_eq!(snapshot(&mc), snapshot(&md));
    }
}
