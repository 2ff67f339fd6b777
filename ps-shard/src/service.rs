//! The tonic adapter: decodes requests, runs the CPU work of [`crate::core`] on
//! blocking threads (never on the async reactor, at most `threads` at once),
//! and maps [`ShardError`]s to gRPC codes. Panics in handlers become `Internal`.

use crate::core::{Batch, Matrix, Scratch, ShardCore, ShardError, ShardSpec};
use colonnade_common::model::ModelSpec;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{
    self, AdjustRequest, AdjustResponse, CreateModelChunk, CreateModelResponse, DotprodRequest,
    DotprodResponse, DropModelRequest, DropModelResponse, ModelStatus, PullRowsRequest, RowBlock,
    StatusRequest, StatusResponse,
};
use colonnade_proto::{decode_f32_into, decode_u32_into, decode_u64, encode_f32, WireLengthError};
use futures::Stream;
use std::cell::RefCell;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status, Streaming};

/// Rows per streamed export block (each block ≲ 4 MiB for 256 columns).
const PULL_BLOCK_ROWS: u64 = 4096;

impl From<ShardError> for Status {
    fn from(e: ShardError) -> Self {
        match e {
            ShardError::InvalidArgument(m) => Status::invalid_argument(m),
            ShardError::FailedPrecondition(m) => Status::failed_precondition(m),
            ShardError::ResourceExhausted(m) => Status::resource_exhausted(m),
        }
    }
}

fn wire(e: WireLengthError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// Per-thread buffers: decoded request arrays and the core's scratch.
#[derive(Default)]
struct ThreadBufs {
    inputs: Vec<u32>,
    context_counts: Vec<u32>,
    outputs: Vec<u32>,
    pos_w: Vec<f32>,
    neg_w: Vec<f32>,
    pos: Vec<f32>,
    neg: Vec<f32>,
    scratch: Scratch,
}

thread_local! {
    static BUFS: RefCell<ThreadBufs> = RefCell::new(ThreadBufs::default());
}

pub struct ShardService {
    core: Arc<ShardCore>,
    permits: Arc<Semaphore>,
}

impl ShardService {
    pub fn new(core: Arc<ShardCore>, threads: usize) -> Self {
        Self {
            core,
            permits: Arc::new(Semaphore::new(threads.max(1))),
        }
    }

    pub fn core(&self) -> &Arc<ShardCore> {
        &self.core
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ThreadBufs) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let _permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("shard is shutting down"))?;
        tokio::task::spawn_blocking(move || BUFS.with(|b| f(&mut b.borrow_mut())))
            .await
            .map_err(|e| Status::internal(format!("shard handler failed: {e}")))?
    }
}

/// Decodes a minibatch into the thread's buffers.
fn decode_batch(b: Option<&v1::Minibatch>, bufs: &mut ThreadBufs) -> Result<(u64, u64), Status> {
    let b = b.ok_or_else(|| Status::invalid_argument("field `batch` is missing"))?;
    decode_u32_into("inputs", &b.inputs, &mut bufs.inputs).map_err(wire)?;
    decode_u32_into(
        "context_counts",
        &b.context_counts,
        &mut bufs.context_counts,
    )
    .map_err(wire)?;
    decode_u32_into("outputs", &b.outputs, &mut bufs.outputs).map_err(wire)?;
    Ok((b.model_fingerprint, b.seed))
}

fn spec_to_wire(s: &ShardSpec) -> v1::ModelSpec {
    v1::ModelSpec {
        vocab_fingerprint: s.model.vocab_fingerprint,
        vocab_size: s.model.vocab_size,
        dim: s.model.dim,
        col_start: s.col_start,
        col_end: s.col_end,
        negative: s.model.negative,
        sampling_power: s.model.sampling_power,
        init_seed: s.model.init_seed,
    }
}

/// The domain spec of a wire `ModelSpec`.
pub fn spec_from_wire(s: &v1::ModelSpec) -> ShardSpec {
    ShardSpec {
        model: ModelSpec {
            vocab_fingerprint: s.vocab_fingerprint,
            vocab_size: s.vocab_size,
            dim: s.dim,
            negative: s.negative,
            sampling_power: s.sampling_power,
            init_seed: s.init_seed,
        },
        col_start: s.col_start,
        col_end: s.col_end,
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
        let spec = first.spec.as_ref().map(spec_from_wire).ok_or_else(|| {
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
            let part = decode_u64("counts", &c.counts).map_err(wire)?;
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
            .blocking(move |_| core.create_model(spec, &counts).map_err(Status::from))
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
        let core = Arc::clone(&self.core);
        let req = request.into_inner();
        let resp = self
            .blocking(move |bufs| {
                let (fingerprint, seed) = decode_batch(req.batch.as_ref(), bufs)?;
                let model = core.model(fingerprint)?;
                let ThreadBufs {
                    inputs,
                    context_counts,
                    outputs,
                    pos,
                    neg,
                    scratch,
                    ..
                } = bufs;
                let batch = Batch {
                    fingerprint,
                    seed,
                    inputs,
                    context_counts,
                    outputs,
                };
                model.dotprod(&batch, scratch, pos, neg)?;
                Ok(DotprodResponse {
                    pos: encode_f32(pos),
                    neg: encode_f32(neg),
                })
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn adjust(
        &self,
        request: Request<AdjustRequest>,
    ) -> Result<Response<AdjustResponse>, Status> {
        let core = Arc::clone(&self.core);
        let req = request.into_inner();
        self.blocking(move |bufs| {
            let (fingerprint, seed) = decode_batch(req.batch.as_ref(), bufs)?;
            decode_f32_into("pos_weights", &req.pos_weights, &mut bufs.pos_w).map_err(wire)?;
            decode_f32_into("neg_weights", &req.neg_weights, &mut bufs.neg_w).map_err(wire)?;
            let model = core.model(fingerprint)?;
            let ThreadBufs {
                inputs,
                context_counts,
                outputs,
                pos_w,
                neg_w,
                scratch,
                ..
            } = bufs;
            let batch = Batch {
                fingerprint,
                seed,
                inputs,
                context_counts,
                outputs,
            };
            model.adjust(&batch, pos_w, neg_w, scratch)?;
            Ok(())
        })
        .await?;
        Ok(Response::new(AdjustResponse {}))
    }

    type PullRowsStream = RowStream;

    async fn pull_rows(
        &self,
        request: Request<PullRowsRequest>,
    ) -> Result<Response<RowStream>, Status> {
        let req = request.into_inner();
        let model = self.core.model(req.model_fingerprint)?;
        let matrix = match v1::Matrix::try_from(req.matrix) {
            Ok(v1::Matrix::Input) => Matrix::Input,
            Ok(v1::Matrix::Output) => Matrix::Output,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "field `matrix`: {} is not INPUT or OUTPUT",
                    req.matrix
                )))
            }
        };
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

    async fn status(
        &self,
        _request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let models = self
            .core
            .models()
            .iter()
            .map(|m| ModelStatus {
                model_fingerprint: m.fingerprint,
                spec: Some(spec_to_wire(&m.spec)),
                dotprod_calls: m.stats.dotprod_calls.load(Relaxed),
                adjust_calls: m.stats.adjust_calls.load(Relaxed),
                pairs_adjusted: m.stats.pairs_adjusted.load(Relaxed),
                memory_bytes: m.memory_bytes() as u64,
            })
            .collect();
        Ok(Response::new(StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            api_version: colonnade_proto::API_VERSION,
            models,
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
