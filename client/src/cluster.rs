//! A model's shards, as one value: [`Cluster`] connects to them (retrying
//! while they start), creates or attaches to the model on every one,
//! agrees with them on one state of it before training and after a failure
//! ([`Cluster::reconcile`]), and exports it through the exporter's
//! discovery. Every call to all shards goes through one helper
//! ([`crate::grpc::broadcast`]).
//!
//! Every shard's state of a model carries a *lineage*: 0 as created, and a
//! new id whenever a state is restored or loaded at a shard's start. Training
//! calls carry the lineage the worker trains, and a shard of another lineage
//! refuses them (ABORTED), so a restarted shard's columns never mix with the
//! survivors'. Reconciling reads every shard's lineage and checkpoints: when
//! they agree, training goes on; when not, every shard is restored to the
//! newest checkpoint version all of them hold (version 0 is the initial
//! state, which every shard can rebuild), under one new lineage, and every
//! worker resumes from its position in that version's manifest.

use crate::agreement::{common_version, describe, next_lineage, position_in};
use crate::grpc::{broadcast, same_api, with_timeout, GrpcShard, GrpcShards};
use crate::identity::RunRecord;
use crate::train::Position;
use anyhow::{bail, Context};
use colonnade_common::model::{ModelSpec, ShardSpec};
use colonnade_common::vocab::{Vocab, VocabCounts};
use colonnade_exporter::cli::OutputArgs;
use colonnade_exporter::ExportSummary;
use colonnade_formats::Provenance;
use colonnade_proto::v1::{self, CreateModelChunk, ModelStatus, RestoreRequest, StatusRequest};
use colonnade_proto::{encode_u64, CallError};
use colonnade_setup::Connector;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a status or restore call may take before the shard counts as
/// unreachable for this attempt.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// Words per CreateModel chunk (8 MiB of counts).
const COUNTS_PER_CHUNK: usize = 1 << 20;

/// At most this many adjust calls on each shard, all at lineage 0, some
/// shards trained and some not: other workers' first calls may be in flight
/// (their adjusts reach the shards one by one), and a reconciling worker
/// reads the statuses again for up to 0.5 s before it calls the states
/// different. More calls than any cluster keeps in flight.
const FIRST_CALLS_IN_FLIGHT: u64 = 4096;

/// How often [`Cluster::connect`] says which shards it is still waiting for.
const WAITING_LOG_EVERY: Duration = Duration::from_secs(5);

/// The shards of a cluster, in shard order, and the model on them once
/// created ([`Cluster::create`]).
pub struct Cluster {
    connector: Connector,
    shards: Vec<GrpcShard>,
    model: Option<OnShards>,
    /// The `--num-workers` this process declares when it creates the model
    /// (0: not a training worker).
    workers: u32,
}

/// The model a cluster trains.
struct OnShards {
    spec: ModelSpec,
    vocab: Arc<VocabCounts>,
    fingerprint: u64,
    /// A shard whose model state is trained with another `--num-workers`
    /// than this worker declared, and that count.
    other_workers: Option<(String, u32)>,
}

/// What the shards agreed on.
#[derive(Clone, Debug)]
pub struct Session {
    pub lineage: u64,
    /// The newest checkpoint version every shard holds (0: none).
    pub version: u64,
    /// This worker's position in that version's manifest, and whether its
    /// part was finished there.
    pub position: Position,
    pub finished: bool,
    /// What this worker trained in that version, as its manifest records it
    /// (none at version 0, or from releases that did not record it).
    pub record: Option<RunRecord>,
    /// Some shard has applied adjusts to this state since its base version.
    pub trained: bool,
    /// Every shard keeps checkpoints (`--data-dir`).
    pub persistent: bool,
    /// The state was rolled back (or relabelled) to reach agreement.
    pub restored: bool,
}

/// This worker among the workers of a model.
#[derive(Clone, Copy, Debug)]
pub struct Worker {
    pub index: u64,
    pub count: u64,
}

/// One shard's view of the model.
struct Seen {
    endpoint: String,
    persistent: bool,
    model: Option<ModelStatus>,
}

/// Which state a worker starts training from (see [`Cluster::reconcile`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    /// The state the shards hold (the usual start, and after a failure).
    Resume,
    /// The newest checkpoint every shard holds (`--rollback`).
    Rollback,
    /// The initial state, checkpoints dropped (`--restart`).
    Restart,
}

impl Begin {
    /// From the `--restart` and `--rollback` flags (`--restart` wins).
    pub fn from_flags(restart: bool, rollback: bool) -> Self {
        match (restart, rollback) {
            (true, _) => Self::Restart,
            (false, true) => Self::Rollback,
            (false, false) => Self::Resume,
        }
    }
}

/// Whether training can recover from `e` by reconciling with the shards: a
/// shard unreachable, restarting, answering late, or of another lineage.
/// Bad requests, a model that does not fit, divergence are not retried.
pub fn recoverable(e: &anyhow::Error) -> bool {
    let Some(call) = e.downcast_ref::<CallError>() else {
        return false;
    };
    if call.is_divergence() {
        return false;
    }
    use tonic::Code;
    !matches!(
        call.code,
        Code::InvalidArgument
            | Code::ResourceExhausted
            | Code::Unimplemented
            | Code::OutOfRange
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::AlreadyExists
    )
}

/// Refuses a shard list naming one endpoint twice (ignoring an `http://` or
/// `https://` scheme and a trailing `/`), before anything is connected or
/// created: a shard listed twice would be given two column ranges of one model.
pub fn refuse_duplicates(endpoints: &[String]) -> anyhow::Result<()> {
    let key = |e: &str| {
        let e = e.trim().trim_end_matches('/').to_ascii_lowercase();
        let bare = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"));
        bare.unwrap_or(&e).to_string()
    };
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, e) in endpoints.iter().enumerate() {
        if let Some(first) = seen.insert(key(e), i) {
            bail!(
                "--shards lists {e} twice (shards {first} and {i}): each shard holds its own \
                 columns of the model, so every endpoint must appear once"
            );
        }
    }
    Ok(())
}

impl Cluster {
    /// Connects to every endpoint at once (shards kept in `endpoints`'
    /// order), retrying until `timeout`; logs every few seconds the
    /// endpoints still unreachable, and fails at the timeout naming all of
    /// them. A TLS or naming mismatch fails at once.
    pub async fn connect(
        connector: &Connector,
        endpoints: &[String],
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        refuse_duplicates(endpoints)?;
        if endpoints.is_empty() {
            bail!("no shards given (--shards host:port,...)");
        }
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
                    match tokio::time::timeout(limit, connector.connect(e)).await {
                        Ok(result) => result,
                        Err(_) => Err(colonnade_setup::ConnectError {
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
                return Ok(Self {
                    connector: connector.clone(),
                    shards: shards.into_iter().flatten().collect(),
                    model: None,
                    workers: 0,
                });
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
                        let why = errors[i].as_deref().unwrap_or("unreachable");
                        format!("{} ({why})", endpoints[i])
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

    /// The shards, in shard order.
    pub fn shards(&self) -> &[GrpcShard] {
        &self.shards
    }

    pub fn len(&self) -> usize {
        self.shards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    fn model(&self) -> anyhow::Result<&OnShards> {
        self.model
            .as_ref()
            .context("no model created on the shards yet")
    }

    /// The model's fingerprint, once created.
    pub fn fingerprint(&self) -> Option<u64> {
        self.model.as_ref().map(|m| m.fingerprint)
    }

    /// A training pipeline's handle on the model, for state `lineage`, each
    /// call with deadline `timeout`.
    pub fn pipelines(&self, lineage: u64, timeout: Duration) -> anyhow::Result<GrpcShards> {
        let m = self.model()?;
        Ok(
            GrpcShards::new(self.shards.clone(), m.fingerprint, m.spec.negative)
                .with_lineage(lineage)
                .with_timeout(timeout),
        )
    }

    /// Creates (or attaches to) the model `spec` on every shard, shard i
    /// holding its [`ShardSpec::of`] columns, retrying up to `retry` while a
    /// shard answers UNAVAILABLE (loading its data dir at start-up).
    /// Returns the model fingerprint.
    pub async fn create(
        &mut self,
        spec: ModelSpec,
        vocab: Arc<VocabCounts>,
        retry: Duration,
    ) -> anyhow::Result<u64> {
        let deadline = Instant::now() + retry;
        let mut backoff = Duration::from_millis(200);
        let (fingerprint, other_workers) = loop {
            match self.create_once(&spec, &vocab).await {
                Err(e)
                    if Instant::now() + backoff < deadline
                        && e.downcast_ref::<tonic::Status>()
                            .is_some_and(|s| s.code() == tonic::Code::Unavailable) =>
                {
                    tracing::info!(error = %format!("{e:#}"), "a shard is not ready; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                other => break other?,
            }
        };
        self.model = Some(OnShards {
            spec,
            vocab,
            fingerprint,
            other_workers,
        });
        Ok(fingerprint)
    }

    /// Declares this process a training worker of `count` (its
    /// `--num-workers`) for the models it creates.
    pub fn declare_workers(&mut self, count: u64) {
        self.workers = u32::try_from(count).unwrap_or(u32::MAX);
    }

    /// Refuses a worker started with another `--num-workers` than the
    /// workers already training the model's state, at start rather than at
    /// the first checkpoint barrier or the end of the run.
    pub fn check_workers(&self) -> anyhow::Result<()> {
        let Some(m) = &self.model else { return Ok(()) };
        if let Some((endpoint, count)) = &m.other_workers {
            bail!(
                "model {:016x} is being trained by workers started with --num-workers {count} \
                 (shard {endpoint} recorded it), this worker was started with --num-workers {}: \
                 start every worker of a model with the same --num-workers (each with its own \
                 --worker-index below it), or give --restart to train the model afresh with {}",
                m.fingerprint,
                self.workers,
                self.workers
            );
        }
        Ok(())
    }

    /// One attempt of [`Cluster::create`]: checks every shard's API version,
    /// then streams the counts in chunks of [`COUNTS_PER_CHUNK`] as they are
    /// sent; checks every shard reports the expected fingerprint.
    async fn create_once(
        &self,
        spec: &ModelSpec,
        vocab: &Arc<VocabCounts>,
    ) -> anyhow::Result<(u64, Option<(String, u32)>)> {
        let count = self.shards.len();
        let workers = self.workers;
        if spec.dim < count as u32 {
            bail!(
                "--size {} is smaller than the number of shards ({count}): every shard needs at \
                 least one column",
                spec.dim
            );
        }
        let statuses = broadcast(&self.shards, |mut client| async move {
            client.status(StatusRequest {}).await
        })
        .await;
        for (i, (shard, status)) in self.shards.iter().zip(statuses).enumerate() {
            let status = status
                .map_err(|e| CallError::from_status(&shard.endpoint, i, count, "status", &e))?;
            same_api(&shard.endpoint, &status)?;
        }
        let expected = spec.fingerprint();
        let created =
            futures::future::join_all(self.shards.iter().enumerate().map(|(i, shard)| {
                let shard_spec = ShardSpec::of(spec, count as u32, i as u32);
                let vocab = Arc::clone(vocab);
                let n_chunks = vocab.counts.len().div_ceil(COUNTS_PER_CHUNK);
                let chunks = futures::stream::iter((0..n_chunks).map(move |k| {
                    let start = k * COUNTS_PER_CHUNK;
                    let end = (start + COUNTS_PER_CHUNK).min(vocab.counts.len());
                    CreateModelChunk {
                        spec: (k == 0).then(|| v1::ModelSpec::from(&shard_spec)),
                        counts_offset: start as u64,
                        counts: encode_u64(&vocab.counts[start..end]),
                        num_workers: if k == 0 { workers } else { 0 },
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
                                "shard {} (shard {i} of {count}): create model failed",
                                shard.endpoint
                            )
                        })
                }
            }))
            .await;
        let mut existed = false;
        let mut other_workers = None;
        for (shard, resp) in self.shards.iter().zip(created) {
            let resp = resp?;
            if resp.model_fingerprint != expected {
                bail!(
                    "shard {} reports model fingerprint {:016x}, this client computes \
                     {expected:016x}: client and shard disagree on the model",
                    shard.endpoint,
                    resp.model_fingerprint
                );
            }
            existed |= resp.existed;
            if self.workers != 0 && resp.num_workers != 0 && resp.num_workers != self.workers {
                other_workers.get_or_insert((shard.endpoint.clone(), resp.num_workers));
            }
        }
        if existed {
            tracing::info!(
                fingerprint = format!("{expected:016x}"),
                "attached to an existing model on the shards; training continues from its state"
            );
        }
        Ok((expected, other_workers))
    }

    /// Every shard's status of the model, retried with exponential backoff
    /// until `deadline` while a shard is unreachable or loading.
    async fn statuses(&self, deadline: Instant) -> anyhow::Result<Vec<Seen>> {
        let fingerprint = self.model()?.fingerprint;
        let mut backoff = Duration::from_millis(200);
        loop {
            let answers = broadcast(&self.shards, |mut client| async move {
                client
                    .status(with_timeout(StatusRequest {}, CONTROL_TIMEOUT))
                    .await
            })
            .await;
            let mut seen = Vec::with_capacity(self.shards.len());
            let mut waiting = Vec::new();
            for (shard, answer) in self.shards.iter().zip(answers) {
                match answer {
                    Ok(r) => {
                        same_api(&shard.endpoint, &r)?;
                        if r.loading {
                            waiting.push(format!("{} (loading its checkpoints)", shard.endpoint));
                        }
                        seen.push(Seen {
                            endpoint: shard.endpoint.clone(),
                            persistent: r.persistent,
                            model: r
                                .models
                                .into_iter()
                                .find(|m| m.model_fingerprint == fingerprint),
                        });
                    }
                    Err(e) => waiting.push(format!(
                        "{} ({}: {})",
                        shard.endpoint,
                        e.code(),
                        colonnade_proto::shards::status_cause(&e)
                    )),
                }
            }
            if waiting.is_empty() {
                return Ok(seen);
            }
            if Instant::now() + backoff > deadline {
                bail!(
                    "shard(s) still unavailable at the end of --retry-timeout: {}",
                    waiting.join("; ")
                );
            }
            tracing::warn!(
                retry_in_ms = backoff.as_millis() as u64,
                "waiting for shard(s): {}",
                waiting.join("; ")
            );
            metrics::counter!("colonnade_client_retries_total").increment(1);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Brings every shard to one state of the model and says where `worker`
    /// resumes. `begin`: resume the state the shards hold, roll it back to
    /// the newest checkpoint all shards hold, or restart from the initial
    /// state (drops the checkpoints). A state marked diverged is refused
    /// unless rolled back or restarted. `failed`: the lineage this worker was
    /// training when a call failed; if the shards still agree on it, the
    /// state may hold a minibatch applied on some shards only (or applied
    /// late by a shard that was not answering), so it is rolled back to the
    /// newest checkpoint all shards hold, unless `keep_on_failure` (no
    /// checkpoints: rolling back would start over). Waits up to `retry` for
    /// shards to come back.
    pub async fn reconcile(
        &self,
        worker: Worker,
        begin: Begin,
        failed: Option<u64>,
        keep_on_failure: bool,
        retry: Duration,
    ) -> anyhow::Result<Session> {
        let model = self.model()?;
        let deadline = Instant::now() + retry;
        let mut restart = begin == Begin::Restart;
        let mut rollback = begin == Begin::Rollback;
        let mut failed = failed;
        let mut restored = false;
        let mut settling = 0;
        for _round in 0..20 {
            let seen = self.statuses(deadline).await?;
            if seen.iter().any(|s| s.model.is_none()) {
                // A shard restarted without a data dir (or dropped the model):
                // create it there; the lineage check below sees its new state.
                self.create_once(&model.spec, &model.vocab).await?;
                continue;
            }
            let models: Vec<&ModelStatus> = seen.iter().filter_map(|s| s.model.as_ref()).collect();
            let persistent = seen.iter().all(|s| s.persistent);
            let common = common_version(&models);
            let lineages: BTreeSet<u64> = models.iter().map(|m| m.lineage).collect();
            let trained = models.iter().filter(|m| m.adjusts_since_base > 0).count();
            // The created state (lineage 0) is one state only while all
            // shards or none have been trained in it: a shard restarted
            // empty next to trained ones must not be trained with them.
            let partly_trained = lineages.len() == 1
                && lineages.contains(&0)
                && trained > 0
                && trained < models.len();
            let consistent = lineages.len() == 1 && !partly_trained;
            let suspect =
                consistent && !keep_on_failure && failed.is_some_and(|l| lineages.contains(&l));
            let diverged = seen.iter().find_map(|s| {
                s.model
                    .as_ref()
                    .filter(|m| !m.diverged.is_empty())
                    .map(|m| (s, m))
            });
            if let Some((s, m)) = diverged.filter(|_| !restart && !rollback) {
                bail!(
                    "shard {} refuses to train model {:016x}: training diverged on it ({}). Give \
                     --rollback to roll every shard back to the newest checkpoint they all hold \
                     (version {common}{}), or --restart to start over; either with a lower \
                     --alpha, more --sample or fewer minibatches in flight",
                    s.endpoint,
                    m.model_fingerprint,
                    m.diverged,
                    if common == 0 {
                        ": none, so the initial state"
                    } else {
                        ""
                    }
                );
            }
            // Other workers' first calls in flight: an adjust that has
            // reached some shards and not yet the others looks like a shard
            // restarted empty next to trained ones. Read again while it may
            // pass, rather than roll every worker back to the start.
            let first_calls = partly_trained
                && models
                    .iter()
                    .all(|m| m.adjusts_since_base <= FIRST_CALLS_IN_FLIGHT);
            if first_calls && !restart && !rollback && failed.is_none() && settling < 5 {
                settling += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            if consistent && !restart && !rollback && !suspect {
                let (position, finished, record) = position_in(&models, common, worker)?;
                return Ok(Session {
                    lineage: models[0].lineage,
                    version: common,
                    position,
                    finished,
                    record,
                    trained: trained > 0,
                    persistent,
                    restored,
                });
            }
            let target = if restart { 0 } else { common };
            let lineage = next_lineage(model.fingerprint, target, &lineages);
            // Every shard loaded version `target` when it started (each load
            // takes a lineage of its own) and none has trained since: one
            // state under several labels, which the restore only relabels. A
            // clean restart of the whole cluster is not a disagreement.
            let reloaded = !restart
                && !rollback
                && !suspect
                && models
                    .iter()
                    .all(|m| m.base_version == target && m.adjusts_since_base == 0)
                && models
                    .iter()
                    .map(|m| {
                        m.checkpoints
                            .iter()
                            .find(|c| c.version == target)
                            .map(|c| c.lineage)
                    })
                    .collect::<BTreeSet<_>>()
                    .len()
                    == 1;
            if reloaded {
                tracing::info!(
                    version = target,
                    "every shard restarted from checkpoint version {target}{}: agreeing on it",
                    if target == 0 {
                        " (the initial state)"
                    } else {
                        ""
                    }
                );
            } else {
                let why = if restart {
                    "--restart".to_string()
                } else if rollback {
                    "--rollback".to_string()
                } else if suspect {
                    "a call failed: the last minibatches may be applied on some shards only"
                        .to_string()
                } else {
                    format!(
                        "the shards hold different states: {}",
                        describe(&self.shards, &models)
                    )
                };
                tracing::warn!(
                    version = target,
                    "rolling every shard back to checkpoint version {target} ({why})"
                );
            }
            let req = RestoreRequest {
                model_fingerprint: model.fingerprint,
                version: target,
                lineage,
                num_workers: u32::try_from(worker.count).unwrap_or(u32::MAX),
            };
            let results = broadcast(&self.shards, |mut client| {
                let req = with_timeout(req, Duration::from_secs(3600));
                async move { client.restore(req).await }
            })
            .await;
            for (s, r) in self.shards.iter().zip(results) {
                if let Err(e) = r {
                    if e.code() == tonic::Code::PermissionDenied {
                        bail!(
                            "shard {} refuses to roll model {:016x} back to version {target} \
                             ({why_short}): {}",
                            s.endpoint,
                            model.fingerprint,
                            e.message(),
                            why_short = if restart {
                                "--restart"
                            } else {
                                "to agree on a state"
                            }
                        );
                    }
                    tracing::warn!(shard = %s.endpoint, code = %e.code(), "restore failed: {}", colonnade_proto::shards::status_cause(&e));
                }
            }
            restart = false;
            rollback = false;
            failed = None;
            restored = true;
        }
        bail!("the shards did not agree on one state of the model after 20 rounds of reconciling")
    }

    /// Pulls the model from the shards (found again by the exporter's
    /// discovery, which checks that their columns tile the dimension) and
    /// writes every file `out` asks for.
    pub async fn export(
        &self,
        words: &Vocab,
        out: &OutputArgs,
        provenance: &Provenance,
    ) -> anyhow::Result<ExportSummary> {
        let model = self.model()?;
        let endpoints: Vec<String> = self.shards.iter().map(|s| s.endpoint.clone()).collect();
        let (mut handles, spec, fingerprint) =
            colonnade_exporter::discover(&self.connector, &endpoints, Some(model.fingerprint))
                .await?;
        let source = colonnade_exporter::Source::Shards(&mut handles);
        colonnade_exporter::export(source, fingerprint, words, spec.dim, out, provenance).await
    }
}
