//! The tonic adapter: decodes requests, runs the CPU work of [`crate::model`]
//! on blocking threads (never on the async reactor, at most `threads` at
//! once), and maps [`ShardError`]s to gRPC codes. Panics in handlers become
//! `Internal`. It pairs each `dotprod` with the `adjust` of the same
//! minibatch: the targets a `dotprod` drew wait in a [`TargetCache`] for it.

use crate::checkpoints::{Arrival, Arrived};
use crate::model::{Model, Scratch};
use crate::plan::Targets;
use crate::registry::ShardCore;
use colonnade_common::model::ShardSpec;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{
    self, AdjustRequest, AdjustResponse, CheckpointInfo, CheckpointRequest, CheckpointResponse,
    CreateModelChunk, CreateModelResponse, DotprodRequest, DotprodResponse, DropModelRequest,
    DropModelResponse, ModelStatus, PullRowsRequest, RestoreRequest, RestoreResponse, RowBlock,
    StatusRequest, StatusResponse,
};
use colonnade_proto::{decode_f16_scaled_into, decode_u64, encode_f32};
use colonnade_proto::{matrix_from_wire, Minibatch, ShardError, MAX_CALL_DOTS};
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

/// At most this many bytes of drawn targets wait for their `adjust` (the
/// cache is emptied when a new entry would pass it), and at most this many
/// more wait, spent, to be drawn into again. A 256-input minibatch's targets
/// take ~250 KB, so 16 in flight per worker take ~4 MB; a call's worth is
/// bounded by [`MAX_CALL_DOTS`] (~120 MB of plan).
pub const TARGET_CACHE_BYTES: usize = 256 << 20;

/// The targets each `dotprod` drew, by (model fingerprint, minibatch seed),
/// until the `adjust` of the same minibatch takes them. A soft cache: an
/// entry is used only if it fits the adjust's minibatch, and a miss
/// (restart, eviction, a retried call) draws the targets again from the seed.
/// Its memory is bounded by [`TARGET_CACHE_BYTES`] however many `dotprod`s
/// never see their `adjust`.
#[derive(Default)]
pub struct TargetCache {
    waiting: parking_lot::Mutex<Waiting>,
    /// Targets whose adjust is done, to draw into again (any thread), and
    /// their bytes.
    free: parking_lot::Mutex<(Vec<Targets>, usize)>,
}

#[derive(Default)]
struct Waiting {
    entries: std::collections::HashMap<(u64, u64), Targets>,
    bytes: usize,
}

impl TargetCache {
    fn put(&self, fingerprint: u64, seed: u64, targets: Targets) {
        let bytes = targets.heap_bytes();
        let mut w = self.waiting.lock();
        if w.bytes + bytes > TARGET_CACHE_BYTES {
            w.entries.clear();
            w.bytes = 0;
            if bytes > TARGET_CACHE_BYTES {
                return;
            }
        }
        w.bytes += bytes;
        if let Some(old) = w.entries.insert((fingerprint, seed), targets) {
            w.bytes -= old.heap_bytes();
        }
    }

    /// Targets to draw into: recycled ones when there are.
    fn fresh(&self) -> Targets {
        let mut free = self.free.lock();
        match free.0.pop() {
            Some(t) => {
                free.1 -= t.heap_bytes();
                t
            }
            None => Targets::default(),
        }
    }

    /// Returns targets whose minibatch is done.
    fn recycle(&self, t: Targets) {
        let bytes = t.heap_bytes();
        let mut free = self.free.lock();
        if free.1 + bytes <= TARGET_CACHE_BYTES {
            free.1 += bytes;
            free.0.push(t);
        }
    }

    /// The targets of `mb` on `model`: the cached ones if they fit it, else
    /// drawn again.
    fn take(&self, model: &Model, mb: &Minibatch) -> Result<Targets, ShardError> {
        let cached = {
            let mut w = self.waiting.lock();
            let cached = w.entries.remove(&(model.fingerprint, mb.seed));
            if let Some(t) = &cached {
                w.bytes -= t.heap_bytes();
            }
            cached
        };
        if let Some(cached) = cached {
            if model.targets_fit(mb, &cached) {
                return Ok(cached);
            }
            self.recycle(cached);
        }
        let mut t = self.fresh();
        model.draw_targets(mb, &mut t)?;
        Ok(t)
    }

    /// Bytes of targets held: waiting for their adjust, and spent.
    pub fn bytes(&self) -> usize {
        self.waiting.lock().bytes + self.free.lock().1
    }
}

/// Per-thread buffers: the decoded request and the model's scratch, reused
/// from call to call so that steady-state requests allocate nothing beyond
/// their own message buffers (paper 6.1.3).
#[derive(Default)]
struct ThreadBufs {
    /// The call's minibatches (the first `n` are this call's) and their models.
    batches: Vec<Minibatch>,
    models: Vec<Arc<Model>>,
    /// Scaled weights of the whole call, then one minibatch's weights.
    scaled: Vec<f32>,
    weights: Vec<f32>,
    /// Dot products of the whole call, and of one minibatch.
    dots: Vec<f32>,
    part: Vec<f32>,
    scratch: Scratch,
    /// The targets of the minibatches of the current `adjust`.
    taken: Vec<Targets>,
}

thread_local! {
    static BUFS: RefCell<ThreadBufs> = RefCell::new(ThreadBufs::default());
}

/// Most minibatches one training call may carry.
pub const MAX_BATCHES_PER_CALL: usize = 256;

pub struct ShardService {
    core: Arc<ShardCore>,
    tokens: Tokens,
    permits: Arc<Semaphore>,
    /// One per open PullRows stream ([`MAX_PULL_STREAMS`]).
    pulls: Arc<Semaphore>,
    targets: Arc<TargetCache>,
}

impl ShardService {
    pub fn new(core: Arc<ShardCore>, threads: usize) -> Self {
        Self {
            core,
            tokens: Tokens::default(),
            permits: Arc::new(Semaphore::new(threads.max(1))),
            pulls: Arc::new(Semaphore::new(MAX_PULL_STREAMS)),
            targets: Arc::default(),
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

    /// A probe of the compute path: each call waits for a compute permit
    /// and runs an empty job on a blocking thread, as every training call
    /// does, and answers whether it got through (false once the shard shuts
    /// down). See `server::watch_compute`.
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

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ThreadBufs) -> Result<T, ShardError> + Send + 'static,
    ) -> Result<T, Status> {
        let _permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("shard is shutting down"))?;
        tokio::task::spawn_blocking(move || BUFS.with(|b| f(&mut b.borrow_mut())))
            .await
            .map_err(|e| Status::internal(format!("shard handler failed: {e}")))?
            .map_err(Status::from)
    }

    /// Runs a training call on a blocking thread: decodes its minibatches
    /// into the thread's buffers and finds their models (checking their
    /// lineages), then runs `f` with the number of minibatches.
    async fn training_call<T: Send + 'static>(
        &self,
        batches: Vec<v1::Minibatch>,
        f: impl FnOnce(&mut ThreadBufs, usize, &TargetCache) -> Result<T, ShardError> + Send + 'static,
    ) -> Result<T, Status> {
        if batches.is_empty() {
            return Err(Status::invalid_argument("field `batches` is empty"));
        }
        if batches.len() > MAX_BATCHES_PER_CALL {
            return Err(Status::invalid_argument(format!(
                "field `batches`: {} minibatches, at most {MAX_BATCHES_PER_CALL} per call",
                batches.len()
            )));
        }
        let core = Arc::clone(&self.core);
        let targets = Arc::clone(&self.targets);
        self.blocking(move |bufs| {
            let n = batches.len();
            if bufs.batches.len() < n {
                bufs.batches.resize_with(n, Minibatch::default);
            }
            bufs.models.clear();
            // The call's work, checked minibatch by minibatch before any
            // target is drawn: a call's plan and dot products stay bounded.
            let mut dots = 0u64;
            for (i, (wire, batch)) in batches.iter().zip(&mut bufs.batches).enumerate() {
                let in_batch = |e: ShardError| match e {
                    ShardError::InvalidArgument(m) if n > 1 => {
                        ShardError::InvalidArgument(format!("batch {i}: {m}"))
                    }
                    e => e,
                };
                let (fingerprint, lineage) = batch.decode_from(Some(wire)).map_err(in_batch)?;
                let model = match bufs.models.last() {
                    Some(m) if m.fingerprint == fingerprint => Arc::clone(m),
                    _ => core.model(fingerprint)?,
                };
                model.check_lineage(lineage)?;
                dots += batch.examples() as u64 * (1 + u64::from(model.spec.model.negative));
                if dots > MAX_CALL_DOTS {
                    return Err(ShardError::ResourceExhausted(format!(
                        "field `batches`: the call's minibatches (through batch {i}) ask for {dots} \
                         dot products (examples × (1 + negative)), more than {MAX_CALL_DOTS} per \
                         call; send fewer or smaller minibatches per call"
                    )));
                }
                bufs.models.push(model);
            }
            f(bufs, n, &targets)
        })
        .await
    }
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
        tracing::info!(
            fingerprint = format!("{:016x}", created.fingerprint),
            existed = created.existed,
            "model ready"
        );
        Ok(Response::new(CreateModelResponse {
            model_fingerprint: created.fingerprint,
            existed: created.existed,
        }))
    }

    async fn dotprod(
        &self,
        request: Request<DotprodRequest>,
    ) -> Result<Response<DotprodResponse>, Status> {
        let req = request.into_inner();
        let dots = self
            .training_call(req.batches, |b, n, cache| {
                b.dots.clear();
                for i in 0..n {
                    let (model, mb) = (&b.models[i], &b.batches[i]);
                    let mut t = cache.fresh();
                    model.draw_targets(mb, &mut t)?;
                    model.dotprod(mb, &t, &mut b.scratch, &mut b.part)?;
                    b.dots.extend_from_slice(&b.part);
                    cache.put(model.fingerprint, mb.seed, t);
                }
                Ok(encode_f32(&b.dots))
            })
            .await?;
        Ok(Response::new(DotprodResponse { dots }))
    }

    async fn adjust(
        &self,
        request: Request<AdjustRequest>,
    ) -> Result<Response<AdjustResponse>, Status> {
        let req = request.into_inner();
        let fingerprint = req.batches.first().map_or(0, |b| b.model_fingerprint);
        let raw = req.scaled_weights;
        self.training_call(req.batches, move |b, n, cache| {
            // Everything is checked before any row changes: the targets of
            // every minibatch, the weights' number and values.
            decode_f16_scaled_into("scaled_weights", &raw, 1.0, &mut b.scaled)?;
            for t in b.taken.drain(..) {
                cache.recycle(t);
            }
            let mut planned = 0;
            for i in 0..n {
                let t = cache.take(&b.models[i], &b.batches[i])?;
                planned += t.len();
                b.taken.push(t);
            }
            if b.scaled.len() != planned {
                return Err(ShardError::InvalidArgument(format!(
                    "field `scaled_weights`: {} weights for {planned} dot products (examples × (1 + \
                     negative) over {n} minibatches)",
                    b.scaled.len()
                )));
            }
            // A scaled weight is 1 − σ(F) or −σ(F): within [−1, 1].
            if let Some(i) = b.scaled.iter().position(|x| x.is_nan() || x.abs() > 1.0) {
                return Err(ShardError::InvalidArgument(format!(
                    "field `scaled_weights`: weight {i} is {}, outside [-1, 1] (1 − σ(F) or −σ(F))",
                    b.scaled[i]
                )));
            }
            let mut offset = 0;
            for i in 0..n {
                let (model, mb, t) = (&b.models[i], &b.batches[i], &b.taken[i]);
                let part = &b.scaled[offset..offset + t.len()];
                offset += t.len();
                b.weights.clear();
                b.weights.extend(part.iter().map(|&g| mb.alpha * g));
                model.adjust(mb, t, &b.weights, &mut b.scratch)?;
            }
            for t in b.taken.drain(..) {
                cache.recycle(t);
            }
            Ok(())
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
        let req = request.into_inner();
        let core = Arc::clone(&self.core);
        let restored = self
            .blocking(move |_| core.restore(req.model_fingerprint, req.version, req.lineage))
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
        let dropped = self.core.drop_model(request.into_inner().model_fingerprint);
        Ok(Response::new(DropModelResponse { dropped }))
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
        let req = Request::new(DotprodRequest { batches: vec![b] });
        s.dotprod(req).await.expect("dotprod");
    }

    async fn adjust(s: &ShardService, b: v1::Minibatch) {
        let weights: Vec<f32> = (0..12).map(|t| 0.05 * (t as f32 - 4.0)).collect();
        let req = Request::new(AdjustRequest {
            batches: vec![b],
            scaled_weights: colonnade_proto::encode_f16(&weights),
        });
        s.adjust(req).await.expect("adjust");
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
