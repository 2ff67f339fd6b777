//! A shard's models on disk (`ps-shard --data-dir`) and the checkpoint
//! protocol around them, per model ([`Checkpoints`]; the registry of models,
//! `crate::registry::ShardCore`, calls it): the barrier every worker of a model reaches before a
//! version is taken, the copy of both matrices (the only pause training
//! sees), the crash-safe write in the background (format:
//! `colonnade-checkpoint`), restoring a version under a new lineage, and
//! loading the newest readable version at start-up.
//!
//! Invariants: a version is listed only once its file is complete on disk;
//! a file that fails to load is renamed `*.corrupt` so it is never listed
//! again; after version N is written, versions below N − 1 are removed, so a
//! shard keeps the last two (the client asks for N + 1 only once N is on
//! every shard's disk, so a version common to all shards always remains); a
//! checkpoint takes the newest version again or the next one, never one
//! further ahead; a restore sets the versions above its own aside, never
//! deletes them, until versions of the restored state replace them.

use crate::model::Model;
use colonnade_checkpoint::{counts_fingerprint, CheckpointReader, Header, ModelDir};
use colonnade_common::model::{Matrix, ShardSpec};
use colonnade_proto::ShardError;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A complete checkpoint version on this shard's disk.
#[derive(Clone, Debug)]
pub struct Version {
    pub version: u64,
    pub lineage: u64,
    /// The manifest JSON (every worker's training position).
    pub manifest: Vec<u8>,
    /// When it was written (Unix milliseconds).
    pub written_unix_ms: u64,
}

/// One model's checkpoint state on this shard.
#[derive(Default)]
pub struct Checkpoints {
    barrier: Mutex<Option<Barrier>>,
    /// Workers that reported their part finished, with their last position.
    finished: Mutex<BTreeMap<u32, serde_json::Value>>,
    /// Held while a version is copied and written: the next waits for it.
    writer: Arc<Mutex<()>>,
    on_disk: Mutex<Vec<Version>>,
    /// Why the last write failed, until one succeeds.
    last_error: Mutex<Option<String>>,
    pending: AtomicU64,
}

impl Checkpoints {
    /// The version a barrier is waiting for (0: none).
    pub fn pending(&self) -> u64 {
        self.pending.load(Relaxed)
    }

    pub fn versions(&self) -> Vec<Version> {
        self.on_disk.lock().clone()
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// How long ago the newest version on disk was written.
    pub fn newest_age(&self) -> Option<Duration> {
        let newest = self
            .on_disk
            .lock()
            .iter()
            .map(|v| v.written_unix_ms)
            .max()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_millis() as u64;
        Some(Duration::from_millis(now.saturating_sub(newest)))
    }

    /// Gives up the barrier in progress, telling its waiters why.
    pub(crate) fn abandon(&self, why: &str) {
        if let Some(b) = self.barrier.lock().take() {
            let _ = b.tx.send(Phase::Failed(ShardError::Aborted(format!(
                "checkpoint {} abandoned: {why}",
                b.version
            ))));
        }
        self.pending.store(0, Relaxed);
    }
}

struct Barrier {
    version: u64,
    lineage: u64,
    num_workers: u32,
    /// Per worker: its position and whether its part is finished.
    arrived: BTreeMap<u32, (serde_json::Value, bool)>,
    durable: bool,
    tx: Arc<watch::Sender<Phase>>,
}

/// Where a barrier is.
#[derive(Clone, Debug)]
enum Phase {
    Waiting,
    /// The matrices are copied: training may go on.
    Taken(Taken),
    /// The copy is on disk.
    Written(Taken),
    Failed(ShardError),
}

/// What a checkpoint cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Taken {
    pub version: u64,
    pub pause_seconds: f64,
    pub bytes: u64,
}

/// A worker's arrival at a checkpoint barrier.
pub struct Arrival {
    pub fingerprint: u64,
    pub lineage: u64,
    pub version: u64,
    pub worker: u32,
    pub num_workers: u32,
    pub position: serde_json::Value,
    pub finished: bool,
    pub durable: bool,
    pub timeout: Duration,
}

/// The outcome of an arrival: the version taken, or the pending one to join.
pub enum Arrived {
    Taken(Taken),
    OtherPending(u64),
}

fn internal(e: impl std::fmt::Display) -> ShardError {
    ShardError::Internal(e.to_string())
}

/// A lineage id no other state of any shard will have (0 is the created state).
pub fn fresh_lineage(fingerprint: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(fingerprint);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// Loads checkpoint `path` into a fresh model of `spec` under `lineage`.
fn load_version(
    path: &Path,
    spec: &ShardSpec,
    counts: Arc<[u64]>,
    lineage: u64,
) -> Result<(Model, Header), ShardError> {
    let reader = CheckpointReader::open(path).map_err(internal)?;
    let header = reader.header().clone();
    let fingerprint = spec.model.fingerprint();
    if header.model_fingerprint != fingerprint || header.spec != *spec {
        return Err(ShardError::Internal(format!(
            "{}: holds model {:016x} columns [{}, {}), expected model {fingerprint:016x} columns [{}, {})",
            path.display(),
            header.model_fingerprint,
            header.spec.col_start,
            header.spec.col_end,
            spec.col_start,
            spec.col_end
        )));
    }
    if header.counts_fingerprint != counts_fingerprint(&counts) {
        return Err(ShardError::Internal(format!(
            "{}: its word counts (fingerprint {:016x}) are not the model's",
            path.display(),
            header.counts_fingerprint
        )));
    }
    let model = Model::initial(spec.clone(), counts, lineage)?.with_base(header.version);
    let mut failed = None;
    reader
        .read_matrices(|matrix, start, values| {
            if let Err(e) = model.write_rows(matrix, start, values) {
                failed.get_or_insert(e);
            }
        })
        .map_err(internal)?;
    if let Some(e) = failed {
        return Err(ShardError::Internal(format!("{}: {e}", path.display())));
    }
    Ok((model, header))
}

/// Moves a file that failed to load out of the way, so it is never listed.
fn quarantine(path: &Path) {
    let mut to = path.as_os_str().to_owned();
    to.push(".corrupt");
    if let Err(e) = fs_err::rename(path, PathBuf::from(&to)) {
        tracing::error!(error = %e, "cannot set the unreadable checkpoint aside");
    }
}

fn version_of(h: &Header) -> Version {
    Version {
        version: h.version,
        lineage: h.lineage,
        manifest: serde_json::to_vec(&h.manifest).unwrap_or_default(),
        written_unix_ms: h.written_unix_ms,
    }
}

/// Loads every model of the data dir `root` at its newest readable version
/// ([`load_model`]), except those dropped with their files kept
/// ([`ModelDir::is_dropped`]): they stay on disk until created again. A
/// model whose files cannot be loaded is set aside
/// ([`crate::datadir::quarantine_model`]) and the others are loaded; only a
/// shortage of memory stops the start-up.
pub(crate) fn load_models(root: &Path) -> Result<Vec<(Model, Checkpoints)>, ShardError> {
    fs_err::create_dir_all(root).map_err(|e| {
        ShardError::Internal(format!(
            "cannot create the data dir {}: {e}",
            root.display()
        ))
    })?;
    crate::datadir::clean_creations(root)?;
    let mut models = Vec::new();
    for dir in ModelDir::list(root).map_err(internal)? {
        if dir.is_dropped() {
            tracing::info!(
                fingerprint = format!("{:016x}", dir.fingerprint()),
                dir = %dir.path().display(),
                "model dropped with its checkpoints kept: not loaded (creating it again loads \
                 it; `colonnade models drop --delete-checkpoints` deletes it)"
            );
            continue;
        }
        match load_model(&dir) {
            Ok(m) => models.push(m),
            Err(e) if crate::datadir::is_bad_files(&e) => {
                crate::datadir::quarantine_model(&dir, &e);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(models)
}

/// Loads the model of `dir` at its newest readable version, under a lineage
/// of its own, with its checkpoint state. A version that fails to load is
/// named in the log, set aside, and the previous one tried; with none left,
/// the model starts from its initial state.
pub(crate) fn load_model(dir: &ModelDir) -> Result<(Model, Checkpoints), ShardError> {
    let start = Instant::now();
    dir.clean_temporaries().map_err(internal)?;
    let (fingerprint, spec, counts) = dir.read_model().map_err(internal)?;
    if spec.model.fingerprint() != fingerprint {
        return Err(ShardError::Internal(format!(
            "{}: its spec has fingerprint {:016x}, not {fingerprint:016x}",
            dir.path().display(),
            spec.model.fingerprint()
        )));
    }
    let counts: Arc<[u64]> = counts.into();
    let lineage = fresh_lineage(fingerprint);
    let mut loaded = None;
    let mut older = Vec::new();
    for version in dir.versions().map_err(internal)?.into_iter().rev() {
        let path = dir.checkpoint_path(version);
        if loaded.is_some() {
            // Older versions: the header is checked now, the payload on restore.
            match CheckpointReader::open(&path) {
                Ok(r) => older.push(version_of(r.header())),
                Err(e) => {
                    tracing::error!(error = %e, "checkpoint unreadable; set aside");
                    quarantine(&path);
                }
            }
            continue;
        }
        match load_version(&path, &spec, Arc::clone(&counts), lineage) {
            Ok((model, header)) => {
                older.push(version_of(&header));
                loaded = Some(model);
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "checkpoint unreadable; set aside, falling back to the previous version"
                );
                quarantine(&path);
            }
        }
    }
    older.sort_by_key(|v| v.version);
    let model = match loaded {
        Some(m) => m,
        None => Model::initial(spec, counts, lineage)?,
    };
    let state = Checkpoints::default();
    if let Some(newest) = older.last() {
        *state.finished.lock() = finished_workers(&newest.manifest);
    }
    *state.on_disk.lock() = older;
    tracing::info!(
        fingerprint = format!("{fingerprint:016x}"),
        version = model.base_version,
        lineage = format!("{lineage:016x}"),
        seconds = colonnade_setup::log::seconds(start.elapsed()),
        "model loaded from the data dir"
    );
    Ok((model, state))
}

impl Checkpoints {
    /// A worker arrives at a checkpoint barrier of `model` (kept in `dir`);
    /// returns once the version is taken (or written, if `durable`), or the
    /// pending version to join.
    pub(crate) async fn arrive(
        self: &Arc<Self>,
        model: Arc<Model>,
        dir: ModelDir,
        a: Arrival,
    ) -> Result<Arrived, ShardError> {
        model.check_lineage(a.lineage)?;
        // A diverged state is never kept as a version to roll back to.
        model.check_trainable()?;
        if a.version == 0 || a.num_workers == 0 || a.worker >= a.num_workers {
            return Err(ShardError::InvalidArgument(format!(
                "fields `version`/`worker_index`/`num_workers`: version {} worker {} of {}",
                a.version, a.worker, a.num_workers
            )));
        }
        let newest = self.on_disk.lock().last().map_or(0, |v| v.version);
        if a.version < newest {
            return Err(ShardError::FailedPrecondition(format!(
                "checkpoint version {} is older than version {newest} on this shard's disk",
                a.version
            )));
        }
        // Version N + 1 replaces N − 1: a version further ahead would
        // replace versions no newer complete one stands for.
        if a.version > newest + 1 {
            return Err(ShardError::InvalidArgument(format!(
                "field `version`: checkpoint version {} of model {:016x}, but this shard's \
                 newest complete version is {newest}: a checkpoint takes version {newest} \
                 again or version {}",
                a.version,
                model.fingerprint,
                newest + 1
            )));
        }
        let (mut rx, durable) = {
            let mut slot = self.barrier.lock();
            let b = slot.get_or_insert_with(|| Barrier {
                version: a.version,
                lineage: a.lineage,
                num_workers: a.num_workers,
                arrived: BTreeMap::new(),
                durable: false,
                tx: Arc::new(watch::channel(Phase::Waiting).0),
            });
            if b.version != a.version || b.lineage != a.lineage || b.num_workers != a.num_workers {
                return Ok(Arrived::OtherPending(b.version));
            }
            self.pending.store(b.version, Relaxed);
            b.arrived.insert(a.worker, (a.position, a.finished));
            b.durable |= a.durable;
            let finished = self.finished.lock();
            let complete =
                (0..b.num_workers).all(|w| b.arrived.contains_key(&w) || finished.contains_key(&w));
            drop(finished);
            let rx = b.tx.subscribe();
            let durable = a.durable;
            if complete {
                if let Some(b) = slot.take() {
                    self.pending.store(0, Relaxed);
                    self.take(model, dir, b);
                }
            }
            (rx, durable)
        };
        let done = |p: &Phase| match p {
            Phase::Waiting => false,
            Phase::Taken(_) => !durable,
            Phase::Written(_) | Phase::Failed(_) => true,
        };
        let waited = tokio::time::timeout(a.timeout, async {
            rx.wait_for(done).await.map(|p| p.clone())
        })
        .await;
        match waited {
            Ok(Ok(phase)) => match phase {
                Phase::Taken(t) | Phase::Written(t) => Ok(Arrived::Taken(t)),
                Phase::Failed(e) => Err(e),
                Phase::Waiting => Err(internal("checkpoint barrier woke while waiting")),
            },
            Ok(Err(_)) => Err(ShardError::Aborted(format!(
                "checkpoint {} was abandoned",
                a.version
            ))),
            Err(_) => {
                let missing = {
                    let slot = self.barrier.lock();
                    let finished = self.finished.lock();
                    slot.as_ref().filter(|b| b.version == a.version).map(|b| {
                        (0..b.num_workers)
                            .filter(|w| !b.arrived.contains_key(w) && !finished.contains_key(w))
                            .map(|w| w.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                };
                let why = format!(
                    "worker(s) [{}] did not reach it within {:?}",
                    missing.unwrap_or_default(),
                    a.timeout
                );
                self.abandon(&why);
                Err(ShardError::Aborted(format!(
                    "checkpoint {} abandoned: {why}",
                    a.version
                )))
            }
        }
    }

    /// Copies the model (every worker is waiting at the barrier, so nothing
    /// changes it meanwhile), releases the waiters, writes the copy.
    fn take(self: &Arc<Self>, model: Arc<Model>, dir: ModelDir, b: Barrier) {
        let state = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let writer = Arc::clone(&state.writer);
            let _writing = writer.lock();
            let start = Instant::now();
            let rows = model.spec.model.vocab_size;
            let (mut u, mut v) = (Vec::new(), Vec::new());
            let copied = model
                .read_rows(Matrix::Input, 0, rows, &mut u)
                .and_then(|()| model.read_rows(Matrix::Output, 0, rows, &mut v));
            if let Err(e) = copied {
                let _ = b.tx.send(Phase::Failed(e));
                return;
            }
            let taken = Taken {
                version: b.version,
                pause_seconds: start.elapsed().as_secs_f64(),
                bytes: (u.len() + v.len()) as u64 * 4,
            };
            let manifest = state.manifest(&b);
            let _ = b.tx.send(Phase::Taken(taken));
            let outcome = state.write(&dir, &model, &b, manifest, &u, &v);
            drop((u, v));
            metrics::histogram!("colonnade_shard_checkpoint_pause_seconds")
                .record(taken.pause_seconds);
            metrics::histogram!("colonnade_shard_checkpoint_seconds")
                .record(start.elapsed().as_secs_f64());
            metrics::gauge!("colonnade_shard_checkpoint_bytes").set(taken.bytes as f64);
            let outcome_label = if outcome.is_ok() { "written" } else { "failed" };
            metrics::counter!("colonnade_shard_checkpoints_total", "outcome" => outcome_label)
                .increment(1);
            let _ = b.tx.send(match outcome {
                Ok(()) => Phase::Written(taken),
                Err(e) => Phase::Failed(e),
            });
            tracing::info!(
                fingerprint = format!("{:016x}", model.fingerprint),
                version = b.version,
                pause_ms = colonnade_setup::log::rounded(taken.pause_seconds * 1e3),
                total_ms = colonnade_setup::log::rounded(start.elapsed().as_secs_f64() * 1e3),
                bytes = taken.bytes,
                "checkpoint taken"
            );
        });
    }

    /// The manifest of barrier `b`: every worker's position, and which have
    /// finished their part (those now, and those recorded before).
    fn manifest(&self, b: &Barrier) -> serde_json::Value {
        let mut finished = self.finished.lock();
        for (&w, (pos, done)) in &b.arrived {
            if *done {
                finished.insert(w, pos.clone());
            }
        }
        let mut workers = Vec::new();
        for w in 0..b.num_workers {
            let (position, done) = match b.arrived.get(&w) {
                Some((p, d)) => (p.clone(), *d),
                None => (finished.get(&w).cloned().unwrap_or_default(), true),
            };
            workers.push(serde_json::json!({
                "worker": w, "finished": done, "position": position
            }));
        }
        serde_json::json!({
            "version": b.version,
            "lineage": b.lineage,
            "num_workers": b.num_workers,
            "workers": workers,
        })
    }

    fn write(
        &self,
        dir: &ModelDir,
        model: &Model,
        b: &Barrier,
        manifest: serde_json::Value,
        u: &[f32],
        v: &[f32],
    ) -> Result<(), ShardError> {
        let header = Header {
            model_fingerprint: model.fingerprint,
            spec: model.spec.clone(),
            counts_fingerprint: counts_fingerprint(&model.counts),
            version: b.version,
            lineage: b.lineage,
            manifest,
            written_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        if let Err(e) = dir.write_checkpoint(&header, u, v) {
            let msg = format!(
                "checkpoint {} of model {:016x} not written ({e}); version {} stays the newest here",
                b.version,
                model.fingerprint,
                self.on_disk.lock().last().map_or(0, |v| v.version)
            );
            tracing::error!("{msg}");
            *self.last_error.lock() = Some(msg.clone());
            return Err(ShardError::Internal(msg));
        }
        *self.last_error.lock() = None;
        let keep_from = b.version.saturating_sub(1);
        {
            let mut on_disk = self.on_disk.lock();
            on_disk.retain(|v| v.version >= keep_from && v.version != b.version);
            on_disk.push(version_of(&header));
            on_disk.sort_by_key(|v| v.version);
        }
        if let Err(e) = dir.remove_versions(|v| v < keep_from) {
            tracing::warn!(error = %e, "cannot remove old checkpoint versions");
        }
        crate::datadir::remove_rolled_back(dir, b.version);
        Ok(())
    }

    /// The state of `model` at checkpoint `version` (0: the initial state)
    /// under `lineage`, read from `dir`; sets newer versions aside (kept
    /// until the restored state writes versions that replace them:
    /// [`crate::datadir::set_aside_above`]). `None`
    /// when `model` is that state already, untouched since it was loaded:
    /// it is relabelled in place.
    pub(crate) fn restore(
        &self,
        model: &Model,
        dir: Option<&ModelDir>,
        version: u64,
        lineage: u64,
    ) -> Result<Option<Model>, ShardError> {
        let fingerprint = model.fingerprint;
        self.abandon("the model is being restored");
        let writer = Arc::clone(&self.writer);
        let _writing = writer.lock();
        let start = Instant::now();
        let manifest = if version == 0 {
            None
        } else {
            let on_disk = self.versions();
            let v = on_disk
                .iter()
                .find(|v| v.version == version)
                .ok_or_else(|| {
                    ShardError::FailedPrecondition(format!(
                        "this shard has no checkpoint version {version} of model \
                         {fingerprint:016x} (it has: {:?})",
                        on_disk.iter().map(|v| v.version).collect::<Vec<_>>()
                    ))
                })?;
            Some(v.manifest.clone())
        };
        let restored = if version == model.base_version
            && model.stats.adjust_calls.load(Relaxed) == 0
        {
            // Untouched since it was loaded: relabel instead of reloading.
            model.set_lineage(lineage);
            None
        } else if version == 0 {
            Some(Model::initial(
                model.spec.clone(),
                Arc::clone(&model.counts),
                lineage,
            )?)
        } else {
            let dir = dir.ok_or_else(|| internal("no data dir"))?;
            let path = dir.checkpoint_path(version);
            match load_version(&path, &model.spec, Arc::clone(&model.counts), lineage) {
                Ok((fresh, _)) => Some(fresh),
                Err(e) => {
                    quarantine(&path);
                    self.on_disk.lock().retain(|v| v.version != version);
                    return Err(ShardError::FailedPrecondition(format!(
                        "cannot restore version {version}: {e}; it was set aside, restore an older one"
                    )));
                }
            }
        };
        self.on_disk.lock().retain(|v| v.version <= version);
        if let Some(dir) = dir {
            crate::datadir::set_aside_above(dir, version)?;
        }
        *self.finished.lock() = manifest
            .as_deref()
            .map(finished_workers)
            .unwrap_or_default();
        tracing::info!(
            fingerprint = format!("{fingerprint:016x}"),
            version,
            lineage = format!("{lineage:016x}"),
            seconds = colonnade_setup::log::seconds(start.elapsed()),
            "model restored"
        );
        Ok(restored)
    }

    /// Waits for the checkpoint being written, if any (on shutdown).
    pub fn wait_for_write(&self) {
        drop(self.writer.lock());
    }
}

/// The workers a manifest records as finished, with their positions.
fn finished_workers(manifest: &[u8]) -> BTreeMap<u32, serde_json::Value> {
    let Ok(m) = serde_json::from_slice::<serde_json::Value>(manifest) else {
        return BTreeMap::new();
    };
    m["workers"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .filter(|w| w["finished"].as_bool() == Some(true))
                .filter_map(|w| Some((w["worker"].as_u64()? as u32, w["position"].clone())))
                .collect()
        })
        .unwrap_or_default()
}
