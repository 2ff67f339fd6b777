//! Shards over gRPC: connecting ([`connect_all`]), creating the model on
//! every shard ([`create_model`]), and [`GrpcShards`], the gRPC side of the
//! training boundary ([`ModelShards`]): each call is broadcast to every shard
//! at once and the partial dot products summed in shard order. Also starting
//! embedded shards ([`EmbeddedCluster`]).

use anyhow::{bail, Context};
use colonnade_common::model::{column_range, ModelSpec};
use colonnade_common::vocab::VocabCounts;
use colonnade_proto::v1::{self, AdjustRequest, CreateModelChunk, DotprodRequest};
use colonnade_proto::ShardClient;
use colonnade_proto::{
    connect, decode_f32_into, encode_f16, encode_u64, CallError, Minibatch, MinibatchId,
    ModelShards, ShardSpec,
};
use colonnade_ps_shard::{ShardCore, Siblings, SpawnedShard};
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Words per CreateModel chunk (8 MiB of counts).
const COUNTS_PER_CHUNK: usize = 1 << 20;

/// A shard reached over gRPC.
#[derive(Clone)]
pub struct GrpcShard {
    pub endpoint: String,
    pub client: ShardClient,
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
                Err(e) if e.permanent => return Err(e.into()),
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

/// Fails, naming the shard, when `status` (of the shard at `endpoint`) is
/// of another shard API than this client's: shards of another API may draw
/// other negatives from the same seed (API 5 changed the sampler of large
/// vocabularies) or read calls otherwise, and their partial dot products
/// would not add up, silently.
pub fn same_api(endpoint: &str, status: &v1::StatusResponse) -> anyhow::Result<()> {
    if status.api_version != colonnade_proto::API_VERSION {
        bail!(
            "shard {endpoint} speaks shard API v{} (ps-shard {}), this client v{} (colonnade {}): \
             run one Colonnade release on every shard and worker of a model",
            status.api_version,
            status.version,
            colonnade_proto::API_VERSION,
            env!("CARGO_PKG_VERSION"),
        );
    }
    Ok(())
}

/// Refuses a shard list naming one endpoint twice (ignoring an `http://` or
/// `https://` scheme and a trailing `/`), before anything is connected or created: a
/// shard listed twice would be given two column ranges of one model.
pub fn refuse_duplicates(endpoints: &[String]) -> anyhow::Result<()> {
    let key = |e: &str| {
        let e = e.trim().trim_end_matches('/');
        let e = e.to_ascii_lowercase();
        let bare = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"));
        bare.unwrap_or(&e).to_string()
    };
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, e) in endpoints.iter().enumerate() {
        if let Some(first) = seen.insert(key(e), i) {
            anyhow::bail!(
                "--shards lists {e} twice (shards {first} and {i}): each shard holds its own \
                 columns of the model, so every endpoint must appear once"
            );
        }
    }
    Ok(())
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
    refuse_duplicates(endpoints)?;
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
                    Ok(Err(err)) => Err(err),
                    Err(_) => Err(colonnade_proto::ConnectError {
                        endpoint: e.clone(),
                        reason: "connection attempt timed out".into(),
                        permanent: false,
                    }),
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
                // A TLS or naming mismatch does not go away by waiting.
                Err(e) if e.permanent => return Err(e.into()),
                Err(e) => {
                    errors[i] = Some(e.reason);
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

/// The gRPC side of the training boundary: one pipeline's handle on the
/// shards of model `fingerprint`, in shard order. It encodes a minibatch
/// once for `dotprod` and keeps it for the `adjust` that follows.
pub struct GrpcShards {
    shards: Arc<[GrpcShard]>,
    fingerprint: u64,
    negative: usize,
    /// The lineage of the model state this worker trains (see `recovery`).
    lineage: u64,
    /// Every call's deadline: a shard that stops answering fails the call.
    timeout: Duration,
    /// The newest checkpoint version a shard said other workers wait for.
    pending: Arc<std::sync::atomic::AtomicU64>,
    /// The last call's minibatches in wire form (and their identities),
    /// from their `dotprod` for their `adjust`.
    wire: Vec<v1::Minibatch>,
    wire_ids: Vec<(MinibatchId, u64)>,
    part: Vec<f32>,
    sent: u64,
    received: u64,
}

impl GrpcShards {
    pub fn new(shards: Vec<GrpcShard>, fingerprint: u64, negative: u32) -> Self {
        Self {
            shards: shards.into(),
            fingerprint,
            negative: negative as usize,
            lineage: 0,
            timeout: DEFAULT_CALL_TIMEOUT,
            pending: Arc::default(),
            wire: Vec::new(),
            wire_ids: Vec::new(),
            part: Vec::new(),
            sent: 0,
            received: 0,
        }
    }

    /// Trains the model state of `lineage`: a shard holding another refuses.
    pub fn with_lineage(mut self, lineage: u64) -> Self {
        self.lineage = lineage;
        self
    }

    /// Every call fails after `timeout` without an answer.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Where shards' "checkpoint pending" answers are recorded.
    pub fn checkpoint_pending(&self) -> Arc<std::sync::atomic::AtomicU64> {
        Arc::clone(&self.pending)
    }

    /// The wire form of `mbs`: the one the last `dotprod` encoded, when it
    /// was for the same minibatches.
    fn wire(&mut self, mbs: &[Minibatch]) -> Vec<v1::Minibatch> {
        let same = self.wire_ids.len() == mbs.len()
            && self
                .wire_ids
                .iter()
                .zip(mbs)
                .all(|(&(id, seed), mb)| id == mb.id && seed == mb.seed);
        if same {
            self.wire_ids.clear();
            return std::mem::take(&mut self.wire);
        }
        mbs.iter()
            .map(|mb| {
                let mut wire = mb.to_wire(self.fingerprint);
                wire.lineage = self.lineage;
                wire
            })
            .collect()
    }

    fn failed(&self, i: usize, call: &'static str, status: &tonic::Status) -> CallError {
        metrics::counter!(
            "colonnade_client_call_errors_total",
            "method" => call,
            "code" => code_name(status.code()),
        )
        .increment(1);
        CallError::from_status(&self.shards[i].endpoint, i, self.shards.len(), call, status)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(self.timeout);
        r
    }
}

/// A status code's name as a metric label (tonic's spelling).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "Ok",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Deadline of a training call (a minibatch takes milliseconds).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl ModelShards for GrpcShards {
    const BLOCKING: bool = false;

    fn pipeline(&self) -> Self {
        Self {
            shards: Arc::clone(&self.shards),
            fingerprint: self.fingerprint,
            negative: self.negative,
            lineage: self.lineage,
            timeout: self.timeout,
            pending: Arc::clone(&self.pending),
            wire: Vec::new(),
            wire_ids: Vec::new(),
            part: Vec::new(),
            sent: 0,
            received: 0,
        }
    }

    fn negative(&self) -> usize {
        self.negative
    }

    async fn dotprod(&mut self, mbs: &[Minibatch], dots: &mut Vec<f32>) -> Result<(), CallError> {
        let req = DotprodRequest {
            batches: self.wire(mbs),
        };
        self.sent += req.encoded_len() as u64 * self.shards.len() as u64;
        let start = Instant::now();
        let responses = futures::future::join_all(self.shards.iter().map(|s| {
            let (mut client, req) = (s.client.clone(), self.request(req.clone()));
            async move { client.dotprod(req).await }
        }))
        .await;
        metrics::histogram!("colonnade_client_call_seconds", "method" => "dotprod")
            .record(start.elapsed().as_secs_f64());
        let expected: usize = mbs
            .iter()
            .map(|mb| mb.examples() * (self.negative + 1))
            .sum();
        for (i, resp) in responses.into_iter().enumerate() {
            let resp = resp
                .map_err(|e| self.failed(i, "dotprod", &e))?
                .into_inner();
            self.received += resp.encoded_len() as u64;
            let out = if i == 0 { &mut *dots } else { &mut self.part };
            let checked = match decode_f32_into("dots", &resp.dots, out) {
                Err(e) => Err(e.to_string()),
                Ok(()) if out.len() != expected => {
                    Err(format!("{} dot products, expected {expected}", out.len()))
                }
                Ok(()) => Ok(()),
            };
            if let Err(msg) = checked {
                let status = tonic::Status::internal(format!("bad response: {msg}"));
                return Err(self.failed(i, "dotprod", &status));
            }
            if i > 0 {
                for (acc, x) in dots.iter_mut().zip(&self.part) {
                    *acc += x;
                }
            }
        }
        self.wire = req.batches;
        self.wire_ids.clear();
        self.wire_ids.extend(mbs.iter().map(|mb| (mb.id, mb.seed)));
        Ok(())
    }

    async fn adjust(&mut self, mbs: &[Minibatch], scaled: &[f32]) -> Result<(), CallError> {
        let req = AdjustRequest {
            batches: self.wire(mbs),
            scaled_weights: encode_f16(scaled),
        };
        self.sent += req.encoded_len() as u64 * self.shards.len() as u64;
        let start = Instant::now();
        let results = futures::future::join_all(self.shards.iter().map(|s| {
            let (mut client, req) = (s.client.clone(), self.request(req.clone()));
            async move { client.adjust(req).await }
        }))
        .await;
        metrics::histogram!("colonnade_client_call_seconds", "method" => "adjust")
            .record(start.elapsed().as_secs_f64());
        for (i, res) in results.into_iter().enumerate() {
            let pending = res
                .map_err(|e| self.failed(i, "adjust", &e))?
                .into_inner()
                .checkpoint_pending;
            if pending != 0 {
                self.pending
                    .fetch_max(pending, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn wire_bytes(&self) -> (u64, u64) {
        (self.sent, self.received)
    }
}

/// Shards started inside this process, on loopback (`--embedded-shards`).
pub struct EmbeddedCluster {
    pub shards: Vec<SpawnedShard>,
}

impl EmbeddedCluster {
    /// Starts `count` shards sharing `threads` cores: each gets
    /// ⌈threads / count⌉ compute threads, so the shards together do not
    /// oversubscribe the machine the client also runs on. They keep each
    /// model's column slices side by side in one allocation ([`Siblings`]),
    /// so that training in process visits each row once, not once per shard.
    pub async fn start(count: usize, threads: usize) -> anyhow::Result<Self> {
        let per_shard = threads.div_ceil(count.max(1)).max(1);
        let siblings = Arc::new(Siblings::default());
        let mut shards = Vec::with_capacity(count);
        for _ in 0..count {
            let core = ShardCore::new(None).with_siblings(Arc::clone(&siblings));
            let shard =
                SpawnedShard::serve_core(([127, 0, 0, 1], 0).into(), per_shard, Arc::new(core))
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
    vocab: &VocabCounts,
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
        cbow: false,
    }
}

/// Creates (or attaches to) the model on every shard at once, shard i
/// holding columns `column_range(dim, S, i)`, the counts streamed in chunks
/// of [`COUNTS_PER_CHUNK`] as they are sent; checks every shard reports the
/// expected fingerprint.
pub async fn create_model(
    shards: &[GrpcShard],
    spec: &ModelSpec,
    vocab: &Arc<VocabCounts>,
) -> anyhow::Result<u64> {
    if spec.dim < shards.len() as u32 {
        bail!("--size {} is smaller than the number of shards ({}): every shard needs at least one column", spec.dim, shards.len());
    }
    let statuses = futures::future::join_all(shards.iter().map(|shard| {
        let mut client = shard.client.clone();
        async move { client.status(v1::StatusRequest {}).await }
    }))
    .await;
    for (i, (shard, status)) in shards.iter().zip(statuses).enumerate() {
        let status = status
            .map_err(|e| CallError::from_status(&shard.endpoint, i, shards.len(), "status", &e))?;
        same_api(&shard.endpoint, status.get_ref())?;
    }
    let expected = spec.fingerprint();
    let created = futures::future::join_all(shards.iter().enumerate().map(|(i, shard)| {
        let cols = column_range(spec.dim, shards.len() as u32, i as u32);
        let shard_spec = ShardSpec {
            model: spec.clone(),
            col_start: cols.start,
            col_end: cols.end,
        };
        let vocab = Arc::clone(vocab);
        let n_chunks = vocab.counts.len().div_ceil(COUNTS_PER_CHUNK);
        let chunks = futures::stream::iter((0..n_chunks).map(move |k| {
            let start = k * COUNTS_PER_CHUNK;
            let end = (start + COUNTS_PER_CHUNK).min(vocab.counts.len());
            CreateModelChunk {
                spec: (k == 0).then(|| v1::ModelSpec::from(&shard_spec)),
                counts_offset: start as u64,
                counts: encode_u64(&vocab.counts[start..end]),
            }
        }));
        let mut client = shard.client.clone();
        async move {
            client
                .create_model(chunks)
                .await
                .map(tonic::Response::into_inner)
                .with_context(|| {
                    format!(
                        "shard {} (shard {i} of {}): create model failed",
                        shard.endpoint,
                        shards.len()
                    )
                })
        }
    }))
    .await;
    let mut existed = Vec::new();
    for (shard, resp) in shards.iter().zip(created) {
        let resp = resp?;
        if resp.model_fingerprint != expected {
            bail!(
                "shard {} reports model fingerprint {:016x}, this client computes {expected:016x}: client and shard disagree on the model",
                shard.endpoint,
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
