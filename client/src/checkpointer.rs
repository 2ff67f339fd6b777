//! Checkpoints while training ([`GrpcCheckpointer`]): a version is agreed by
//! a barrier the shards hold (every worker of the model arrives at it at a
//! minibatch boundary, with its position), taken when the last one arrives,
//! and written by each shard in the background. Version N + 1 is asked for
//! only once N is on every shard's disk.

use crate::cluster::{Cluster, Worker, CONTROL_TIMEOUT};
use crate::grpc::{broadcast, with_timeout, GrpcShard};
use crate::identity::RunRecord;
use crate::train::{Checkpointer, Position};
use anyhow::{bail, Context};
use colonnade_proto::v1::{CheckpointRequest, StatusRequest};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// What this worker trains: recorded with its position in every
    /// manifest, so that a resumed run can be checked against it.
    record: Arc<RunRecord>,
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
    /// A checkpointer of `cluster`'s model in state `lineage`, for
    /// `worker`, every `interval`; `complete` is the newest version known
    /// on every shard's disk, and `announced` where the pipelines record the
    /// versions other workers wait at; `record` is what this worker trains.
    pub fn new(
        cluster: &Cluster,
        lineage: u64,
        worker: Worker,
        record: Arc<RunRecord>,
        interval: Duration,
        complete: u64,
        announced: Arc<AtomicU64>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            shards: cluster.shards().to_vec(),
            fingerprint: cluster
                .fingerprint()
                .context("checkpoints of a model not created")?,
            lineage,
            worker: worker.index as u32,
            num_workers: worker.count as u32,
            interval,
            record,
            barrier_timeout: Duration::from_secs(120).min(interval.max(Duration::from_secs(30))),
            announced,
            versions: Arc::new(Mutex::new(Versions {
                complete,
                written: None,
                last: Instant::now(),
            })),
            taken: Arc::default(),
            pause_max: Arc::default(),
        })
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
        let mut entry = serde_json::to_value(position).context("position")?;
        if let Some(map) = entry.as_object_mut() {
            map.insert(
                "run".into(),
                serde_json::to_value(&*self.record).context("run record")?,
            );
        }
        let position = serde_json::to_vec(&entry).context("position")?;
        let req = CheckpointRequest {
            model_fingerprint: self.fingerprint,
            lineage: self.lineage,
            version,
            worker_index: self.worker,
            num_workers: self.num_workers,
            position: position.into(),
            finished,
            durable,
            timeout_ms: self.barrier_timeout.as_millis() as u32,
        };
        let timeout = self.barrier_timeout + Duration::from_secs(if durable { 3600 } else { 60 });
        let answers = broadcast(&self.shards, |mut client| {
            let req = with_timeout(req.clone(), timeout);
            async move { client.checkpoint(req).await }
        })
        .await;
        let mut pause: f64 = 0.0;
        let mut other = None;
        let count = self.shards.len();
        for (i, (s, a)) in self.shards.iter().zip(answers).enumerate() {
            let a = a.map_err(|e| {
                colonnade_proto::CallError::from_status(&s.endpoint, i, count, "checkpoint", &e)
            })?;
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
        let answers = broadcast(&self.shards, |mut client| async move {
            client
                .status(with_timeout(StatusRequest {}, CONTROL_TIMEOUT))
                .await
        })
        .await;
        let mut all = true;
        for (s, a) in self.shards.iter().zip(answers) {
            let Ok(a) = a else {
                all = false;
                continue;
            };
            let Some(m) = a
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
                        pause_ms = colonnade_setup::log::rounded(pause * 1e3),
                        jobs = position.jobs,
                        "checkpoint taken"
                    );
                    if durable {
                        self.confirm_written().await;
                    }
                    return Ok(());
                }
                Err(other) if other == version => {
                    // The shards wait at this very version, but for another
                    // barrier: of the same lineage (checked first), so of
                    // another number of workers.
                    return Err(WorkersMismatch {
                        version,
                        num_workers: self.num_workers,
                    }
                    .into());
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

/// The shards' barrier at a checkpoint version was opened by a worker
/// started with another `--num-workers`: no checkpoint can be taken until
/// every worker is started with the same.
#[derive(Debug)]
pub struct WorkersMismatch {
    pub version: u64,
    pub num_workers: u32,
}

impl std::fmt::Display for WorkersMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checkpoint version {}: the shards' barrier was opened by a worker started with \
             another --num-workers than this worker's {}; every worker of a model must be \
             started with the same --num-workers (and its own --worker-index below it)",
            self.version, self.num_workers
        )
    }
}

impl std::error::Error for WorkersMismatch {}

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
            if e.is::<WorkersMismatch>() {
                tracing::error!(error = %format!("{e:#}"), "checkpoint not taken");
            }
            tracing::warn!(error = %format!("{e:#}"), "checkpoint not taken; training goes on");
            self.announced.store(0, Relaxed);
            self.versions().last = Instant::now();
        }
    }
}
