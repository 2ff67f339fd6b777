//! How the client reaches shards: the [`ShardApi`] trait, implemented over
//! gRPC ([`GrpcShard`]) and in process without sockets ([`LocalShard`], which
//! calls the same tonic service the server runs), so the training logic is
//! tested both ways. Also starting embedded shards and creating the model.

use anyhow::{bail, Context};
use colonnade_common::model::{column_range, ModelSpec};
use colonnade_common::vocab::Vocab;
use colonnade_proto::v1::shard_client::ShardClient;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{
    self, AdjustRequest, CreateModelChunk, DotprodRequest, DotprodResponse, StatusRequest,
    StatusResponse,
};
use colonnade_proto::{connect, encode_u64};
use colonnade_ps_shard::service::ShardService;
use colonnade_ps_shard::{ShardCore, SpawnedShard};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::{Request, Status};

/// Words per CreateModel chunk (8 MiB of counts).
const COUNTS_PER_CHUNK: usize = 1 << 20;

/// One shard as the trainer sees it.
pub trait ShardApi: Clone + Send + Sync + 'static {
    /// The shard's name in error messages.
    fn name(&self) -> &str;
    fn dotprod(
        &self,
        req: DotprodRequest,
    ) -> impl Future<Output = Result<DotprodResponse, Status>> + Send;
    fn adjust(&self, req: AdjustRequest) -> impl Future<Output = Result<(), Status>> + Send;
    fn create_model(
        &self,
        chunks: Vec<CreateModelChunk>,
    ) -> impl Future<Output = Result<v1::CreateModelResponse, Status>> + Send;
    fn status(&self) -> impl Future<Output = Result<StatusResponse, Status>> + Send;
}

/// A shard reached over gRPC.
#[derive(Clone)]
pub struct GrpcShard {
    pub endpoint: String,
    pub client: ShardClient<Channel>,
}

impl GrpcShard {
    /// Connects, retrying until `timeout` (shards may still be starting).
    pub async fn connect(endpoint: &str, timeout: Duration) -> anyhow::Result<Self> {
        let deadline = Instant::now() + timeout;
        loop {
            match connect(endpoint).await {
                Ok(client) => {
                    return Ok(Self {
                        endpoint: endpoint.to_string(),
                        client,
                    })
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "shard {endpoint} is not reachable after {timeout:?}"
                    )))
                }
                Err(e) => {
                    tracing::debug!(endpoint, error = %e, "shard not reachable yet, retrying");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }
}

/// The innermost cause of an error (e.g. "Connection refused (os error 111)").
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// How often [`connect_all`] says which shards it is still waiting for.
const WAITING_LOG_EVERY: Duration = Duration::from_secs(5);

/// Connects to every endpoint at once (shards returned in `endpoints`' order),
/// retrying until `timeout`; logs every few seconds the endpoints still
/// unreachable, and fails at the timeout naming all of them.
pub async fn connect_all(
    endpoints: &[String],
    timeout: Duration,
) -> anyhow::Result<Vec<GrpcShard>> {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut pending: Vec<usize> = (0..endpoints.len()).collect();
    let mut shards: Vec<Option<GrpcShard>> = vec![None; endpoints.len()];
    let mut errors: Vec<Option<String>> = vec![None; endpoints.len()];
    let mut last_log: Option<Instant> = None;
    loop {
        let attempts = futures::future::join_all(pending.iter().map(|&i| {
            let e = &endpoints[i];
            async move {
                let limit = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(100));
                match tokio::time::timeout(limit, connect(e)).await {
                    Ok(Ok(client)) => Ok(client),
                    Ok(Err(err)) => Err(root_cause(&err)),
                    Err(_) => Err("connection attempt timed out".to_string()),
                }
            }
        }))
        .await;
        let mut still = Vec::new();
        for (&i, res) in pending.iter().zip(attempts) {
            match res {
                Ok(client) => {
                    shards[i] = Some(GrpcShard {
                        endpoint: endpoints[i].clone(),
                        client,
                    });
                }
                Err(e) => {
                    errors[i] = Some(e);
                    still.push(i);
                }
            }
        }
        pending = still;
        if pending.is_empty() {
            return Ok(shards.into_iter().flatten().collect());
        }
        let names = || {
            pending
                .iter()
                .map(|&i| endpoints[i].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if Instant::now() >= deadline {
            let reasons = pending
                .iter()
                .map(|&i| {
                    format!(
                        "{} ({})",
                        endpoints[i],
                        errors[i].as_deref().unwrap_or("unreachable")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            bail!(
                "shard(s) {} not reachable after {timeout:?} (--connect-timeout-secs): {reasons}",
                names()
            );
        }
        if last_log.is_none_or(|t| t.elapsed() >= WAITING_LOG_EVERY) {
            last_log = Some(Instant::now());
            tracing::info!(
                waited_secs = start.elapsed().as_secs(),
                timeout_secs = timeout.as_secs(),
                "waiting for shard(s) {} to accept connections",
                names()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

impl ShardApi for GrpcShard {
    fn name(&self) -> &str {
        &self.endpoint
    }

    async fn dotprod(&self, req: DotprodRequest) -> Result<DotprodResponse, Status> {
        Ok(self.client.clone().dotprod(req).await?.into_inner())
    }

    async fn adjust(&self, req: AdjustRequest) -> Result<(), Status> {
        self.client.clone().adjust(req).await.map(|_| ())
    }

    async fn create_model(
        &self,
        chunks: Vec<CreateModelChunk>,
    ) -> Result<v1::CreateModelResponse, Status> {
        Ok(self
            .client
            .clone()
            .create_model(tokio_stream_iter(chunks))
            .await?
            .into_inner())
    }

    async fn status(&self) -> Result<StatusResponse, Status> {
        Ok(self
            .client
            .clone()
            .status(StatusRequest {})
            .await?
            .into_inner())
    }
}

fn tokio_stream_iter<T: Send + 'static>(
    items: Vec<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::iter(items)
}

/// A shard in this process, called through its tonic service without sockets.
#[derive(Clone)]
pub struct LocalShard {
    name: String,
    service: Arc<ShardService>,
}

impl LocalShard {
    pub fn new(name: impl Into<String>, core: Arc<ShardCore>, threads: usize) -> Self {
        Self {
            name: name.into(),
            service: Arc::new(ShardService::new(core, threads)),
        }
    }
}

impl ShardApi for LocalShard {
    fn name(&self) -> &str {
        &self.name
    }

    async fn dotprod(&self, req: DotprodRequest) -> Result<DotprodResponse, Status> {
        Ok(Shard::dotprod(&*self.service, Request::new(req))
            .await?
            .into_inner())
    }

    async fn adjust(&self, req: AdjustRequest) -> Result<(), Status> {
        Shard::adjust(&*self.service, Request::new(req))
            .await
            .map(|_| ())
    }

    async fn create_model(
        &self,
        chunks: Vec<CreateModelChunk>,
    ) -> Result<v1::CreateModelResponse, Status> {
        // The service takes a tonic stream; go through the core directly with
        // the same validation the service applies.
        let spec = chunks
            .first()
            .and_then(|c| c.spec)
            .ok_or_else(|| Status::invalid_argument("field `spec` is missing"))?;
        let mut counts = Vec::new();
        for c in &chunks {
            counts.extend(
                colonnade_proto::decode_u64("counts", &c.counts)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?,
            );
        }
        let spec = colonnade_ps_shard::service::spec_from_wire(&spec);
        let created = self.service.core().create_model(spec, &counts)?;
        Ok(v1::CreateModelResponse {
            model_fingerprint: created.fingerprint,
            existed: created.existed,
        })
    }

    async fn status(&self) -> Result<StatusResponse, Status> {
        Ok(
            Shard::status(&*self.service, Request::new(StatusRequest {}))
                .await?
                .into_inner(),
        )
    }
}

/// Shards started inside this process, on loopback (`--embedded-shards`).
pub struct EmbeddedCluster {
    pub shards: Vec<SpawnedShard>,
}

impl EmbeddedCluster {
    /// Starts `count` shards sharing `threads` cores: each gets
    /// ⌈threads / count⌉ compute threads, so the shards together do not
    /// oversubscribe the machine the client also runs on.
    pub async fn start(count: usize, threads: usize) -> anyhow::Result<Self> {
        let per_shard = threads.div_ceil(count.max(1)).max(1);
        let mut shards = Vec::with_capacity(count);
        for _ in 0..count {
            let shard = SpawnedShard::start(([127, 0, 0, 1], 0).into(), per_shard, None)
                .await
                .context("cannot start an embedded shard on 127.0.0.1")?;
            shards.push(shard);
        }
        Ok(Self { shards })
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.shards.iter().map(SpawnedShard::endpoint).collect()
    }

    pub async fn stop(self) {
        for s in self.shards {
            s.stop().await;
        }
    }
}

/// The model spec the client derives from its vocabulary and flags.
pub fn model_spec(
    vocab: &Vocab,
    dim: u32,
    negative: u32,
    sampling_power: f32,
    init_seed: u64,
) -> ModelSpec {
    ModelSpec {
        vocab_fingerprint: vocab.fingerprint(),
        vocab_size: vocab.len() as u64,
        dim,
        negative,
        sampling_power,
        init_seed,
    }
}

/// Creates (or attaches to) the model on every shard, shard i holding columns
/// `column_range(dim, S, i)`; checks every shard reports the expected fingerprint.
pub async fn create_model<S: ShardApi>(
    shards: &[S],
    spec: &ModelSpec,
    vocab: &Vocab,
) -> anyhow::Result<u64> {
    if spec.dim < shards.len() as u32 {
        bail!("--size {} is smaller than the number of shards ({}): every shard needs at least one column", spec.dim, shards.len());
    }
    let expected = spec.fingerprint();
    let mut existed = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let cols = column_range(spec.dim, shards.len() as u32, i as u32);
        let wire_spec = v1::ModelSpec {
            vocab_fingerprint: spec.vocab_fingerprint,
            vocab_size: spec.vocab_size,
            dim: spec.dim,
            col_start: cols.start,
            col_end: cols.end,
            negative: spec.negative,
            sampling_power: spec.sampling_power,
            init_seed: spec.init_seed,
        };
        let mut chunks: Vec<CreateModelChunk> = vocab
            .counts()
            .chunks(COUNTS_PER_CHUNK)
            .enumerate()
            .map(|(k, c)| CreateModelChunk {
                spec: None,
                counts_offset: (k * COUNTS_PER_CHUNK) as u64,
                counts: encode_u64(c),
            })
            .collect();
        if let Some(first) = chunks.first_mut() {
            first.spec = Some(wire_spec);
        }
        let resp = shard.create_model(chunks).await.with_context(|| {
            format!(
                "shard {} (shard {i} of {}): create model failed",
                shard.name(),
                shards.len()
            )
        })?;
        if resp.model_fingerprint != expected {
            bail!(
                "shard {} reports model fingerprint {:016x}, this client computes {expected:016x}: client and shard disagree on the model",
                shard.name(),
                resp.model_fingerprint
            );
        }
        existed.push(resp.existed);
    }
    if existed.iter().any(|&e| e) {
        tracing::info!(
            fingerprint = format!("{expected:016x}"),
            "attached to an existing model on the shards; training continues from its state"
        );
    }
    Ok(expected)
}
