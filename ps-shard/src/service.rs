//! The tonic adapter: decodes requests, runs the CPU work of [`crate::model`]
//! on blocking threads (never on the async reactor, at most `threads` at
//! once), and maps [`ShardError`]s to gRPC codes. Panics in handlers become
//! `Internal`. It pairs each `dotprod` with the `adjust` of the same
//! minibatch: the targets a `dotprod` drew wait in a [`TargetCache`] for it.

use crate::checkpoints::{Arrival, Joined};
use crate::model::{Model, Scratch};
use crate::plan::Targets;
use crate::registry::ShardCore;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{
    self, AdjustRequest, AdjustResponse, CheckpointInfo, CheckpointRequest, CheckpointResponse,
    CreateModelChunk, CreateModelResponse, DotprodRequest, DotprodResponse, DropModelRequest,
    DropModelResponse, ModelStatus, PullRowsRequest, RestoreRequest, RestoreResponse, RowBlock,
    StatusRequest, StatusResponse,
};
use colonnade_proto::{decode_f32_into, decode_u64, encode_f32};
use colonnade_proto::{Matrix, Minibatch, ShardError, ShardSpec};
use dashmap::DashMap;
use futures::Stream;
use std::cell::RefCell;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status, Streaming};

/// Rows per streamed export block (each block ≲ 4 MiB for 256 columns).
const PULL_BLOCK_ROWS: u64 = 4096;

/// At most this many minibatches' targets wait for their `adjust` (the cache
/// is cleared when full; ≲ 250 KB each for 256-input minibatches).
const TARGET_CACHE_ENTRIES: usize = 512;

/// The targets each `dotprod` drew, by (model fingerprint, minibatch seed),
/// until the `adjust` of the same minibatch takes them. A soft cache: an
/// entry is used only if it fits the adjust's minibatch, and a miss
/// (restart, eviction, a retried call) draws the targets again from the seed.
#[derive(Default)]
pub struct TargetCache {
    entries: DashMap<(u64, u64), Targets>,
}

impl TargetCache {
    fn put(&self, fingerprint: u64, seed: u64, targets: Targets) {
        if self.entries.len() >= TARGET_CACHE_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert((fingerprint, seed), targets);
    }

    /// The targets of `mb` on `model`: the cached ones if they fit it, else
    /// drawn again into `spare`.
    fn take(
        &self,
        model: &Model,
        mb: &Minibatch,
        spare: &mut Targets,
    ) -> Result<Targets, ShardError> {
        if let Some((_, cached)) = self.entries.remove(&(model.fingerprint, mb.seed)) {
            if model.targets_fit(mb, &cached) {
                return Ok(cached);
            }
        }
        let mut t = std::mem::take(spare);
        model.draw_targets(mb, &mut t)?;
        Ok(t)
    }
}

/// Per-thread buffers: the decoded request and the model's scratch.
#[derive(Default)]
struct ThreadBufs {
    batch: Minibatch,
    weights: Vec<f32>,
    dots: Vec<f32>,
    scratch: Scratch,
    /// Targets to draw into next (returned by the last `adjust`).
    spare: Targets,
}

thread_local! {
    static BUFS: RefCell<ThreadBufs> = RefCell::new(ThreadBufs::default());
}

pub struct ShardService {
    core: Arc<ShardCore>,
    permits: Arc<Semaphore>,
    targets: Arc<TargetCache>,
}

impl ShardService {
    pub fn new(core: Arc<ShardCore>, threads: usize) -> Self {
        Self {
            core,
            permits: Arc::new(Semaphore::new(threads.max(1))),
            targets: Arc::default(),
        }
    }

    pub fn core(&self) -> &Arc<ShardCore> {
        &self.core
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

    /// Runs a training call on a blocking thread: decodes its minibatch into
    /// the thread's buffers, finds its model, then runs `f`.
    async fn training_call<T: Send + 'static>(
        &self,
        batch: Option<v1::Minibatch>,
        f: impl FnOnce(&Model, &mut ThreadBufs, &TargetCache) -> Result<T, ShardError> + Send + 'static,
    ) -> Result<T, Status> {
        let core = Arc::clone(&self.core);
        let targets = Arc::clone(&self.targets);
        self.blocking(move |bufs| {
            let (fingerprint, lineage) = bufs.batch.decode_from(batch.as_ref())?;
            let model = core.model(fingerprint)?;
            model.check_lineage(lineage)?;
            f(&model, bufs, &targets)
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
        self.core.admit(&spec).map_err(Status::from)?;
        let mut counts: Vec<u64> = Vec::new();
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
            .blocking(move |_| core.create_model(spec, &counts))
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
            .training_call(req.batch, |model, b, cache| {
                let mut t = std::mem::take(&mut b.spare);
                model.draw_targets(&b.batch, &mut t)?;
                model.dotprod(&b.batch, &t, &mut b.scratch, &mut b.dots)?;
                cache.put(model.fingerprint, b.batch.seed, t);
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
        let fingerprint = req.batch.as_ref().map_or(0, |b| b.model_fingerprint);
        self.training_call(req.batch, move |model, b, cache| {
            decode_f32_into("weights", &req.weights, &mut b.weights)?;
            let t = cache.take(model, &b.batch, &mut b.spare)?;
            let applied = model.adjust(&b.batch, &t, &b.weights, &mut b.scratch);
            b.spare = t;
            applied
        })
        .await?;
        let checkpoint_pending = self
            .core
            .checkpoints
            .get(&fingerprint)
            .map_or(0, |c| c.pending());
        Ok(Response::new(AdjustResponse { checkpoint_pending }))
    }

    type PullRowsStream = RowStream;

    async fn pull_rows(
        &self,
        request: Request<PullRowsRequest>,
    ) -> Result<Response<RowStream>, Status> {
        let req = request.into_inner();
        let model = self.core.model(req.model_fingerprint)?;
        let matrix = Matrix::from_wire(req.matrix)?;
        let vocab = model.spec.model.vocab_size;
        if req.row_start > req.row_end || req.row_end > vocab {
            return Err(Status::invalid_argument(format!(
                "fields `row_start`/`row_end`: [{}, {}) is not within the vocabulary [0, {vocab})",
                req.row_start, req.row_end
            )));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::task::spawn_blocking(move || {
            let mut values = Vec::new();
            let mut start = req.row_start;
            while start < req.row_end {
                let end = (start + PULL_BLOCK_ROWS).min(req.row_end);
                let block = model
                    .read_rows(matrix, start, end, &mut values)
                    .map(|()| RowBlock {
                        row_start: start,
                        rows: (end - start) as u32,
                        values: encode_f32(&values),
                    })
                    .map_err(Status::from);
                if tx.blocking_send(block).is_err() {
                    return; // client went away
                }
                start = end;
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
            Joined::Taken(t) => CheckpointResponse {
                version: t.version,
                joined: true,
                pause_seconds: t.pause_seconds,
                bytes: t.bytes,
            },
            Joined::OtherPending(version) => CheckpointResponse {
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
            inputs: vec![0, 1],
            context_counts: vec![2, 1],
            outputs: outputs.to_vec(),
            ..Minibatch::default()
        }
        .to_wire(fp)
    }

    async fn dotprod(s: &ShardService, b: v1::Minibatch) {
        let req = Request::new(DotprodRequest { batch: Some(b) });
        s.dotprod(req).await.expect("dotprod");
    }

    async fn adjust(s: &ShardService, b: v1::Minibatch) {
        let weights: Vec<f32> = (0..12).map(|t| 0.05 * (t as f32 - 4.0)).collect();
        let req = Request::new(AdjustRequest {
            batch: Some(b),
            weights: encode_f32(&weights),
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
