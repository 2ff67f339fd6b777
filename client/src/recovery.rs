//! Surviving the loss of a process: agreeing with the shards on one model
//! state before training ([`Cluster::reconcile`]), and taking checkpoints
//! during it ([`GrpcCheckpointer`]).
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

use crate::shards::{create_model, GrpcShard};
use crate::train::{Checkpointer, Position};
use anyhow::{bail, Context};
use colonnade_common::model::ModelSpec;
use colonnade_common::vocab::VocabCounts;
use colonnade_proto::v1::{CheckpointRequest, ModelStatus, RestoreRequest, StatusRequest};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a status or restore call may take before the shard counts as
/// unreachable for this attempt.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// A model on its shards, as the recovery logic sees it.
pub struct Cluster {
    pub shards: Vec<GrpcShard>,
    pub spec: ModelSpec,
    pub vocab: Arc<VocabCounts>,
    pub fingerprint: u64,
    pub worker: u64,
    pub num_workers: u64,
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
    /// Every shard keeps checkpoints (`--data-dir`).
    pub persistent: bool,
    /// The state was rolled back (or relabelled) to reach agreement.
    pub restored: bool,
}

/// One shard's view of the model.
struct Seen {
    persistent: bool,
    model: Option<ModelStatus>,
}

fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(timeout);
    r
}

/// Whether training can recover from `e` by reconciling with the shards: a
/// shard unreachable, restarting, answering late, or of another lineage.
/// Bad requests, a model that does not fit, divergence are not retried.
pub fn recoverable(e: &anyhow::Error) -> bool {
    let Some(call) = e.downcast_ref::<colonnade_proto::CallError>() else {
        return false;
    };
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

impl Cluster {
    /// Every shard's status of the model, retried with exponential backoff
    /// until `deadline` while a shard is unreachable or loading.
    async fn statuses(&self, deadline: Instant) -> anyhow::Result<Vec<Seen>> {
        let mut backoff = Duration::from_millis(200);
        loop {
            let answers = futures::future::join_all(self.shards.iter().map(|s| {
                let mut client = s.client.clone();
                async move {
                    client
                        .status(request(StatusRequest {}, CONTROL_TIMEOUT))
                        .await
                }
            }))
            .await;
            let mut seen = Vec::with_capacity(self.shards.len());
            let mut waiting = Vec::new();
            for (shard, answer) in self.shards.iter().zip(answers) {
                match answer {
                    Ok(r) => {
                        let r = r.into_inner();
                        crate::shards::same_api(&shard.endpoint, &r)?;
                        if r.loading {
                            waiting.push(format!("{} (loading its checkpoints)", shard.endpoint));
                        }
                        seen.push(Seen {
                            persistent: r.persistent,
                            model: r
                                .models
                                .into_iter()
                                .find(|m| m.model_fingerprint == self.fingerprint),
                        });
                    }
                    Err(e) => waiting.push(format!(
                        "{} ({}: {})",
                        shard.endpoint,
                        e.code(),
                        e.message()
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

    /// Brings every shard to one state of the model and says where this
    /// worker resumes. `restart`: roll every shard back to the initial state
    /// (drops the checkpoints). `failed`: the lineage this worker was
    /// training when a call failed; if the shards still agree on it, the
    /// state may hold a minibatch applied on some shards only (or applied
    /// late by a shard that was not answering), so it is rolled back to the
    /// newest checkpoint all shards hold, unless `keep_on_failure` (no
    /// checkpoints: rolling back would start over). Waits up to `retry` for
    /// shards to come back.
    pub async fn reconcile(
        &self,
        restart: bool,
        failed: Option<u64>,
        keep_on_failure: bool,
        retry: Duration,
    ) -> anyhow::Result<Session> {
        let deadline = Instant::now() + retry;
        let mut restart = restart;
        let mut failed = failed;
        let mut restored = false;
        for _round in 0..20 {
            let seen = self.statuses(deadline).await?;
            if seen.iter().any(|s| s.model.is_none()) {
                // A shard restarted without a data dir (or dropped the model):
                // create it there; the lineage check below sees its new state.
                create_model(&self.shards, &self.spec, &self.vocab).await?;
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
            let consistent = lineages.len() == 1
                && !(lineages.contains(&0) && trained > 0 && trained < models.len());
            let suspect =
                consistent && !keep_on_failure && failed.is_some_and(|l| lineages.contains(&l));
            if consistent && !restart && !suspect {
                let lineage = models[0].lineage;
                let (position, finished) = self.position_in(&models, common)?;
                return Ok(Session {
                    lineage,
                    version: common,
                    position,
                    finished,
                    persistent,
                    restored,
                });
            }
            let target = if restart { 0 } else { common };
            let lineage = next_lineage(self.fingerprint, target, &lineages);
            let why = if restart {
                "--restart".to_string()
            } else if suspect {
                "a call failed: the last minibatches may be applied on some shards only".to_string()
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
            let results = futures::future::join_all(self.shards.iter().map(|s| {
                let mut client = s.client.clone();
                let req = RestoreRequest {
                    model_fingerprint: self.fingerprint,
                    version: target,
                    lineage,
                };
                async move {
                    client
                        .restore(request(req, Duration::from_secs(3600)))
                        .await
                }
            }))
            .await;
            for (s, r) in self.shards.iter().zip(results) {
                if let Err(e) = r {
                    tracing::warn!(shard = %s.endpoint, code = %e.code(), "restore failed: {}", e.message());
                }
            }
            restart = false;
            failed = None;
            restored = true;
        }
        bail!("the shards did not agree on one state of the model after 20 rounds of reconciling")
    }

    /// This worker's position in the manifest of `version` (0: the start).
    fn position_in(
        &self,
        models: &[&ModelStatus],
        version: u64,
    ) -> anyhow::Result<(Position, bool)> {
        if version == 0 {
            return Ok((Position::default(), false));
        }
        let manifest = models
            .iter()
            .flat_map(|m| &m.checkpoints)
            .find(|c| c.version == version)
            .map(|c| c.manifest.clone())
            .context("no shard returned the manifest of the common version")?;
        let m: Manifest = serde_json::from_slice(&manifest).with_context(|| {
            format!("the manifest of checkpoint version {version} is not readable")
        })?;
        if m.num_workers != self.num_workers {
            bail!(
                "checkpoint version {version} was taken with --num-workers {}, this worker has {}: \
                 give the same, or --restart",
                m.num_workers,
                self.num_workers
            );
        }
        let w = m
            .workers
            .iter()
            .find(|w| w.worker == self.worker)
            .with_context(|| {
                format!(
                    "checkpoint version {version} has no position of worker {}",
                    self.worker
                )
            })?;
        let position = if w.position.is_null() {
            Position::default()
        } else {
            serde_json::from_value(w.position.clone()).with_context(|| {
                format!(
                    "the position of worker {} in checkpoint {version}",
                    self.worker
                )
            })?
        };
        Ok((position, w.finished))
    }
}

/// The manifest a shard writes with every checkpoint version.
#[derive(serde::Deserialize)]
struct Manifest {
    num_workers: u64,
    workers: Vec<ManifestWorker>,
}

#[derive(serde::Deserialize)]
struct ManifestWorker {
    worker: u64,
    finished: bool,
    #[serde(default)]
    position: serde_json::Value,
}

/// The newest checkpoint version every shard holds (0 if none).
fn common_version(models: &[&ModelStatus]) -> u64 {
    let mut sets = models.iter().map(|m| {
        m.checkpoints
            .iter()
            .map(|c| c.version)
            .collect::<BTreeSet<u64>>()
    });
    let Some(first) = sets.next() else {
        return 0;
    };
    sets.fold(first, |a, b| a.intersection(&b).copied().collect())
        .into_iter()
        .next_back()
        .unwrap_or(0)
}

/// The lineage a restore to `version` from `lineages` gives: the same for
/// every worker that reconciles the same disagreement, so concurrent
/// reconcilers converge instead of restoring each other's restores.
fn next_lineage(fingerprint: u64, version: u64, lineages: &BTreeSet<u64>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&fingerprint.to_le_bytes());
    h.update(&version.to_le_bytes());
    for l in lineages {
        h.update(&l.to_le_bytes());
    }
    h.digest().max(1)
}

fn describe(shards: &[GrpcShard], models: &[&ModelStatus]) -> String {
    shards
        .iter()
        .zip(models)
        .map(|(s, m)| {
            format!(
                "{}: lineage {:016x} from version {}, {} adjusts since, versions {:?}",
                s.endpoint,
                m.lineage,
                m.base_version,
                m.adjusts_since_base,
                m.checkpoints.iter().map(|c| c.version).collect::<Vec<_>>()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Takes checkpoints through the shards' barrier: every `interval`, or at
/// once when a shard says other workers wait at one. Version N + 1 is asked
/// for only once N is on every shard's disk. A failed checkpoint is logged
/// and tried again later; training goes on.
#[derive(Clone)]
pub struct GrpcCheckpointer {
    shards: Vec<GrpcShard>,
    fingerprint: u64,
    lineage: u64,
    worker: u32,
    num_workers: u32,
    interval: Duration,
    /// How long to wait at a barrier for the other workers.
    barrier_timeout: Duration,
    /// Pending versions other workers announced (from adjust answers).
    announced: Arc<AtomicU64>,
    versions: Arc<Mutex<Versions>>,
    /// Checkpoints taken, and the longest pause (f64 bits).
    pub taken: Arc<AtomicU64>,
    pub pause_max: Arc<AtomicU64>,
}

/// What a worker knows of the checkpoint versions.
struct Versions {
    /// The newest version known complete on every shard.
    complete: u64,
    /// A version taken but not yet confirmed on every shard's disk.
    written: Option<u64>,
    /// When the last one was taken (or tried).
    last: Instant,
}

impl GrpcCheckpointer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        shards: Vec<GrpcShard>,
        fingerprint: u64,
        lineage: u64,
        worker: u64,
        num_workers: u64,
        interval: Duration,
        complete: u64,
        announced: Arc<AtomicU64>,
    ) -> Self {
        Self {
            shards,
            fingerprint,
            lineage,
            worker: worker as u32,
            num_workers: num_workers as u32,
            interval,
            barrier_timeout: Duration::from_secs(120).min(interval.max(Duration::from_secs(30))),
            announced,
            versions: Arc::new(Mutex::new(Versions {
                complete,
                written: None,
                last: Instant::now(),
            })),
            taken: Arc::default(),
            pause_max: Arc::default(),
        }
    }

    /// Sends this worker's arrival at checkpoint `version` to every shard.
    /// Returns the version taken, or `Err(Some(v))` when the shards wait at
    /// version v instead.
    pub async fn arrive(
        &self,
        version: u64,
        position: &Position,
        finished: bool,
        durable: bool,
    ) -> anyhow::Result<Result<(u64, f64), u64>> {
        let position = serde_json::to_vec(position).context("position")?;
        let answers = futures::future::join_all(self.shards.iter().map(|s| {
            let mut client = s.client.clone();
            let req = CheckpointRequest {
                model_fingerprint: self.fingerprint,
                lineage: self.lineage,
                version,
                worker_index: self.worker,
                num_workers: self.num_workers,
                position: position.clone().into(),
                finished,
                durable,
                timeout_ms: self.barrier_timeout.as_millis() as u32,
            };
            let timeout =
                self.barrier_timeout + Duration::from_secs(if durable { 3600 } else { 60 });
            async move { client.checkpoint(request(req, timeout)).await }
        }))
        .await;
        let mut pause: f64 = 0.0;
        let mut other = None;
        let count = self.shards.len();
        for (i, (s, a)) in self.shards.iter().zip(answers).enumerate() {
            let a = a
                .map_err(|e| {
                    colonnade_proto::CallError::from_status(&s.endpoint, i, count, "checkpoint", &e)
                })?
                .into_inner();
            if !a.joined {
                other = Some(a.version);
            }
            pause = pause.max(a.pause_seconds);
        }
        Ok(match other {
            Some(v) => Err(v),
            None => Ok((version, pause)),
        })
    }

    fn versions(&self) -> std::sync::MutexGuard<'_, Versions> {
        self.versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the version last taken is on every shard's disk now.
    async fn confirm_written(&self) {
        let Some(version) = self.versions().written else {
            return;
        };
        let answers = futures::future::join_all(self.shards.iter().map(|s| {
            let mut client = s.client.clone();
            async move {
                client
                    .status(request(StatusRequest {}, CONTROL_TIMEOUT))
                    .await
            }
        }))
        .await;
        let mut all = true;
        for (s, a) in self.shards.iter().zip(answers) {
            let Ok(a) = a else {
                all = false;
                continue;
            };
            let Some(m) = a
                .into_inner()
                .models
                .into_iter()
                .find(|m| m.model_fingerprint == self.fingerprint)
            else {
                all = false;
                continue;
            };
            if !m.checkpoints.iter().any(|c| c.version == version) {
                all = false;
                if !m.checkpoint_error.is_empty() {
                    tracing::error!(shard = %s.endpoint, "{}; the checkpoint will be taken again", m.checkpoint_error);
                    self.versions().written = None; // take `version` again
                    return;
                }
            }
        }
        if all {
            let mut v = self.versions();
            v.complete = version;
            v.written = None;
        }
    }

    /// Takes version `complete + 1` (or the one other workers wait at).
    pub async fn take_at(
        &self,
        position: Position,
        finished: bool,
        durable: bool,
    ) -> anyhow::Result<()> {
        self.confirm_written().await;
        let mut version = {
            let v = self.versions();
            v.written.map_or(v.complete + 1, |_| 0)
        };
        if self.announced() {
            version = self.announced.load(Relaxed);
        }
        if version == 0 {
            // The previous version is still being written: not yet.
            return Ok(());
        }
        for _ in 0..3 {
            match self.arrive(version, &position, finished, durable).await? {
                Ok((v, pause)) => {
                    {
                        let mut state = self.versions();
                        state.written = Some(v);
                        state.last = Instant::now();
                    }
                    self.taken.fetch_add(1, Relaxed);
                    self.pause_max.fetch_max(pause.to_bits(), Relaxed);
                    tracing::info!(
                        version = v,
                        pause_ms = pause * 1e3,
                        jobs = position.jobs,
                        "checkpoint taken"
                    );
                    if durable {
                        self.confirm_written().await;
                    }
                    return Ok(());
                }
                Err(other) => version = other,
            }
        }
        bail!("checkpoint: the shards kept pointing at other pending versions")
    }

    /// The final checkpoint of a worker whose part is done: recorded as
    /// finished (later barriers do not wait for it) and on disk.
    pub async fn finish(&self, position: Position) -> anyhow::Result<()> {
        // Wait for the previous version to be written first.
        for _ in 0..600 {
            self.confirm_written().await;
            if self.versions().written.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.versions().written = None;
        self.take_at(position, true, true).await
    }

    /// The newest version known complete on every shard.
    pub fn complete(&self) -> u64 {
        self.versions().complete
    }
}

impl GrpcCheckpointer {
    /// Another worker waits at a version this one has not taken.
    fn announced(&self) -> bool {
        let v = self.versions();
        self.announced.load(Relaxed) > v.complete.max(v.written.unwrap_or(0))
    }
}

impl Checkpointer for GrpcCheckpointer {
    async fn due(&mut self) -> bool {
        if self.announced() {
            return true;
        }
        if self.versions().last.elapsed() < self.interval {
            return false;
        }
        // The previous version must be on every disk before the next.
        self.confirm_written().await;
        self.versions().written.is_none()
    }

    async fn take(&mut self, position: Position) {
        if let Err(e) = self.take_at(position, false, false).await {
            tracing::warn!(error = %format!("{e:#}"), "checkpoint not taken; training goes on");
            self.announced.store(0, Relaxed);
            self.versions().last = Instant::now();
        }
    }
}
