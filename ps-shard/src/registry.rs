//! The models a shard holds, keyed by fingerprint: creating (or attaching
//! to) one within the shard's memory budget (all its models together, and
//! those being created), looking one up, dropping one;
//! with a data dir, each model's files and checkpoints
//! ([`crate::checkpoints`]). Dropping a model frees its memory and keeps its
//! files unless asked to delete them: a model dropped with its files kept is
//! marked so in its directory, not loaded at start-up, and loaded again from
//! its newest checkpoint when it is created again.

use crate::checkpoints::{self, Arrival, Arrived, Checkpoints};
use crate::hogwild::Siblings;
use crate::model::Model;
use colonnade_checkpoint::ModelDir;
use colonnade_common::model::ShardSpec;
use colonnade_proto::{validate_spec, ShardError};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// All models this shard holds, keyed by fingerprint.
pub struct ShardCore {
    models: DashMap<u64, Arc<Model>>,
    /// The memory budget of all models together ([`crate::hogwild::held_bytes`]
    /// each, and [`crate::hogwild::creation_bytes`] while one is created): a model
    /// that would pass it is refused before its counts are received.
    pub max_model_bytes: Option<u64>,
    /// Bytes reserved by creations under way.
    reserved: Arc<parking_lot::Mutex<u64>>,
    /// Where models and their checkpoints are kept (`--data-dir`).
    pub data_dir: Option<PathBuf>,
    checkpoints: DashMap<u64, Arc<Checkpoints>>,
    /// True until the data dir is loaded: model calls answer UNAVAILABLE.
    loading: AtomicBool,
    /// The other shards of this process, whose models' rows this shard's
    /// share (an embedded cluster: [`Siblings`]).
    siblings: Option<Arc<Siblings>>,
    /// Most work one training call may ask ([`crate::work`],
    /// `--max-call-work`).
    pub max_call_work: u64,
}

impl Default for ShardCore {
    fn default() -> Self {
        Self {
            models: DashMap::default(),
            max_model_bytes: None,
            reserved: Arc::default(),
            data_dir: None,
            checkpoints: DashMap::default(),
            loading: AtomicBool::default(),
            siblings: None,
            max_call_work: crate::work::MAX_CALL_WORK,
        }
    }
}

/// What [`ShardCore::admit`] decided.
pub enum Admission {
    /// The shard holds the model already (with the same columns).
    Existing(Created),
    /// A new model, whose memory is reserved until the reservation drops.
    New(Reservation),
}

/// Bytes of the budget held for a model being created; released on drop
/// (the model, once inserted, is counted by itself).
pub struct Reservation {
    reserved: Arc<parking_lot::Mutex<u64>>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        *self.reserved.lock() -= self.bytes;
    }
}

/// What `create_model` did.
#[derive(Debug, PartialEq, Eq)]
pub struct Created {
    pub fingerprint: u64,
    pub existed: bool,
}

/// What [`ShardCore::drop_model`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// The model was held in memory (it no longer is).
    pub held: bool,
    /// Its files were deleted from the data dir.
    pub deleted: bool,
    /// The checkpoint versions that stay in the data dir (its files kept).
    pub kept: Vec<u64>,
    /// Its directory in the data dir (none without a data dir).
    pub dir: Option<PathBuf>,
}

impl ShardCore {
    pub fn new(max_model_bytes: Option<u64>) -> Self {
        Self {
            max_model_bytes,
            ..Self::default()
        }
    }

    /// A shard keeping its models in `data_dir`: it answers UNAVAILABLE to
    /// model calls until [`ShardCore::load_data_dir`] and
    /// [`ShardCore::loaded`] ran.
    pub fn persistent(max_model_bytes: Option<u64>, data_dir: PathBuf) -> Self {
        Self {
            max_model_bytes,
            data_dir: Some(data_dir),
            loading: AtomicBool::new(true),
            ..Self::default()
        }
    }

    /// This shard keeping the column slices of the models it creates in rows
    /// shared with the other shards given `siblings` (an embedded cluster).
    pub fn with_siblings(mut self, siblings: Arc<Siblings>) -> Self {
        self.siblings = Some(siblings);
        self
    }

    pub fn is_loading(&self) -> bool {
        self.loading.load(Relaxed)
    }

    /// Marks the data dir loaded: model calls are served.
    pub fn loaded(&self) {
        self.loading.store(false, Relaxed);
    }

    /// Puts `model` in place of any state of the same model (a restore or a
    /// load); calls in flight on the old state finish on it, unseen.
    fn insert_loaded(&self, model: Model) {
        self.models.insert(model.fingerprint, Arc::new(model));
    }

    fn unavailable_while_loading(&self) -> Result<(), ShardError> {
        if self.is_loading() {
            return Err(ShardError::Unavailable(format!(
                "this shard is loading its models from {}; retry shortly",
                self.data_dir
                    .as_deref()
                    .map_or_else(String::new, |d| d.display().to_string())
            )));
        }
        Ok(())
    }

    /// Creates the model, or attaches to it if this shard already holds the same
    /// model with the same columns (its trained state is kept).
    pub fn create_model(&self, spec: ShardSpec, counts: &[u64]) -> Result<Created, ShardError> {
        let admission = self.admit(&spec)?;
        self.create_admitted(spec, counts.into(), admission)
    }

    /// [`ShardCore::create_model`] for a spec [`ShardCore::admit`] admitted.
    pub fn create_admitted(
        &self,
        spec: ShardSpec,
        counts: Arc<[u64]>,
        admission: Admission,
    ) -> Result<Created, ShardError> {
        let fingerprint = spec.model.fingerprint();
        let _reservation = match admission {
            Admission::Existing(created) => return Ok(created),
            Admission::New(r) => r,
        };
        if let Some(created) = self.create_dropped(&spec)? {
            return Ok(created);
        }
        let model = Arc::new(Model::initial_in(
            spec.clone(),
            counts,
            0,
            self.siblings.as_deref(),
        )?);
        match self.models.entry(fingerprint) {
            Entry::Occupied(e) => attach(e.get(), &spec),
            Entry::Vacant(e) => {
                // On disk before anyone can train it: a restart finds it.
                self.persist_created(&model)?;
                e.insert(model);
                Ok(Created {
                    fingerprint,
                    existed: false,
                })
            }
        }
    }

    /// Bytes the models this shard holds take ([`Model::held_bytes`]).
    pub fn held_bytes(&self) -> u64 {
        self.models.iter().map(|m| m.held_bytes()).sum()
    }

    /// Whether `spec` may be created here, checked before its counts are
    /// received: the spec is valid, and the model fits the memory budget
    /// beside the models held and those being created (its bytes are then
    /// reserved); or this shard already holds the model (attaching to it is
    /// allowed).
    pub fn admit(&self, spec: &ShardSpec) -> Result<Admission, ShardError> {
        self.unavailable_while_loading()?;
        validate_spec(spec)?;
        if let Some(existing) = self.models.get(&spec.model.fingerprint()) {
            return attach(&existing, spec).map(Admission::Existing);
        }
        let need = crate::hogwild::creation_bytes(spec);
        let mut reserved = self.reserved.lock();
        if let Some(limit) = self.max_model_bytes {
            let held = self.held_bytes();
            if held.saturating_add(*reserved).saturating_add(need) > limit {
                let others = self.models.len();
                return Err(ShardError::ResourceExhausted(format!(
                    "model needs {need} bytes ({} words × ({} columns + a row lock) × 2 matrices, \
                     its sampler and counts); this shard holds {held} bytes in {others} other \
                     model(s){} and its memory budget is {limit} bytes (ps-shard \
                     --max-model-bytes): use more shards (fewer columns each), a smaller \
                     --size, or drop models it no longer needs (`colonnade models drop`)",
                    spec.model.vocab_size,
                    spec.cols(),
                    if *reserved > 0 {
                        format!(", {} bytes are reserved by models being created", *reserved)
                    } else {
                        String::new()
                    }
                )));
            }
        }
        *reserved += need;
        Ok(Admission::New(Reservation {
            reserved: Arc::clone(&self.reserved),
            bytes: need,
        }))
    }

    pub fn model(&self, fingerprint: u64) -> Result<Arc<Model>, ShardError> {
        self.unavailable_while_loading()?;
        self.models
            .get(&fingerprint)
            .map(|m| Arc::clone(&m))
            .ok_or_else(|| {
                let held: Vec<String> = self
                    .models
                    .iter()
                    .map(|m| format!("{:016x}", m.key()))
                    .collect();
                ShardError::FailedPrecondition(format!(
                "this shard holds no model with fingerprint {fingerprint:016x} (it holds: [{}]); \
                 was it created with another vocabulary or configuration, or restarted?",
                held.join(", ")
            ))
            })
    }

    pub fn models(&self) -> Vec<Arc<Model>> {
        let mut all: Vec<_> = self.models.iter().map(|m| Arc::clone(&m)).collect();
        all.sort_by_key(|m| m.fingerprint);
        all
    }

    /// Creates `spec`'s model from its files in the data dir when it was
    /// dropped with them kept: loaded at its newest readable version, under
    /// a lineage of its own (as at start-up), and held again, so a restart
    /// loads it. `None` when the data dir keeps no such model. Files of the
    /// same model with other columns (another shard's slice) are refused,
    /// not overwritten.
    fn create_dropped(&self, spec: &ShardSpec) -> Result<Option<Created>, ShardError> {
        let fingerprint = spec.model.fingerprint();
        let Some(dir) = self.model_dir(fingerprint).filter(ModelDir::is_dropped) else {
            return Ok(None);
        };
        let (_, kept, _) = dir
            .read_model()
            .map_err(|e| ShardError::Internal(e.to_string()))?;
        if kept != *spec {
            return Err(ShardError::FailedPrecondition(format!(
                "this shard keeps the checkpoints of model {fingerprint:016x} with columns [{}, \
                 {}) in {} (dropped with its checkpoints kept), asked for columns [{}, {}): give \
                 the shards in the order they trained it, or delete them with `colonnade models \
                 drop --delete-checkpoints`",
                kept.col_start,
                kept.col_end,
                dir.path().display(),
                spec.col_start,
                spec.col_end
            )));
        }
        let (model, state) = checkpoints::load_model(&dir)?;
        let version = model.base_version;
        match self.models.entry(fingerprint) {
            // Created again meanwhile by another call: attach to it.
            Entry::Occupied(e) => attach(e.get(), spec).map(Some),
            Entry::Vacant(e) => {
                dir.unmark_dropped()
                    .map_err(|e| ShardError::Internal(e.to_string()))?;
                self.checkpoints.insert(fingerprint, Arc::new(state));
                e.insert(Arc::new(model));
                tracing::info!(
                    fingerprint = format!("{fingerprint:016x}"),
                    version,
                    dir = %dir.path().display(),
                    "model created again from the checkpoints it was dropped with"
                );
                Ok(Some(Created {
                    fingerprint,
                    existed: true,
                }))
            }
        }
    }

    /// Drops the model from memory. With a data dir its files stay, marked
    /// dropped ([`ModelDir::mark_dropped`]), unless `delete_checkpoints`
    /// (which also deletes the files of a model dropped earlier with its
    /// files kept). A checkpoint barrier of the model is given up and a
    /// version being written is finished first.
    pub fn drop_model(
        &self,
        fingerprint: u64,
        delete_checkpoints: bool,
    ) -> Result<Dropped, ShardError> {
        // The loader inserts models meanwhile: a drop then could miss one.
        self.unavailable_while_loading()?;
        let held = self.models.remove(&fingerprint).is_some();
        if let Some((_, state)) = self.checkpoints.remove(&fingerprint) {
            state.abandon("the model was dropped");
            state.wait_for_write();
        }
        let Some(dir) = self.model_dir(fingerprint) else {
            return Ok(Dropped {
                held,
                ..Dropped::default()
            });
        };
        let internal =
            |e: colonnade_checkpoint::CheckpointError| ShardError::Internal(e.to_string());
        let on_disk = dir.path().is_dir();
        let mut dropped = Dropped {
            held,
            dir: Some(dir.path().to_path_buf()),
            ..Dropped::default()
        };
        if delete_checkpoints {
            dir.remove_all().map_err(internal)?;
            dropped.deleted = on_disk;
        } else if on_disk {
            if held {
                dir.mark_dropped().map_err(internal)?;
            }
            dropped.kept = dir.versions().map_err(internal)?;
        }
        Ok(dropped)
    }

    fn model_dir(&self, fingerprint: u64) -> Option<ModelDir> {
        self.data_dir
            .as_deref()
            .map(|d| ModelDir::new(d, fingerprint))
    }

    /// Writes a newly created model's spec and counts to the data dir, if any.
    fn persist_created(&self, model: &Model) -> Result<(), ShardError> {
        match (self.data_dir.as_deref(), self.model_dir(model.fingerprint)) {
            (Some(root), Some(dir)) => crate::datadir::create_model_dir(root, &dir, model),
            _ => Ok(()),
        }
    }

    /// Loads every model of the data dir at its newest readable version
    /// (see [`checkpoints::load_models`]).
    pub fn load_data_dir(&self) -> Result<(), ShardError> {
        let Some(root) = self.data_dir.as_deref() else {
            return Ok(());
        };
        for (model, state) in checkpoints::load_models(root)? {
            self.checkpoints.insert(model.fingerprint, Arc::new(state));
            self.insert_loaded(model);
        }
        Ok(())
    }

    /// The checkpoint version a barrier of model `fingerprint` waits at (0:
    /// none).
    pub fn pending_checkpoint(&self, fingerprint: u64) -> u64 {
        self.checkpoints
            .get(&fingerprint)
            .map_or(0, |c| c.pending())
    }

    /// The checkpoint state of model `fingerprint`.
    pub fn checkpoints(&self, fingerprint: u64) -> Arc<Checkpoints> {
        Arc::clone(
            &self
                .checkpoints
                .entry(fingerprint)
                .or_insert_with(|| Arc::new(Checkpoints::default())),
        )
    }

    /// A worker arrives at a checkpoint barrier; returns once the version
    /// is taken (or written, if durable), or the pending version to join.
    pub async fn checkpoint(&self, a: Arrival) -> Result<Arrived, ShardError> {
        let Some(dir) = self.model_dir(a.fingerprint) else {
            return Err(ShardError::FailedPrecondition(
                "this shard keeps no checkpoints: start it with --data-dir".into(),
            ));
        };
        let model = self.model(a.fingerprint)?;
        self.checkpoints(a.fingerprint).arrive(model, dir, a).await
    }

    /// Replaces model `fingerprint`'s state by checkpoint `version` (0: the
    /// initial state) under `lineage`, to be trained by `workers` workers
    /// (0: not declared); sets newer versions aside. Returns false when the
    /// model already is of `lineage`.
    pub fn restore(
        &self,
        fingerprint: u64,
        version: u64,
        lineage: u64,
        workers: u32,
    ) -> Result<bool, ShardError> {
        let model = self.model(fingerprint)?;
        if model.lineage() == lineage {
            return Ok(false);
        }
        let dir = self.model_dir(fingerprint);
        match self
            .checkpoints(fingerprint)
            .restore(&model, dir.as_ref(), version, lineage)?
        {
            Some(fresh) => {
                fresh.set_workers(workers);
                self.insert_loaded(fresh);
            }
            None => model.set_workers(workers),
        }
        Ok(true)
    }

    /// Waits for every checkpoint being written (on shutdown).
    pub fn wait_for_writes(&self) {
        let states: Vec<_> = self.checkpoints.iter().map(|c| Arc::clone(&c)).collect();
        for s in states {
            s.wait_for_write();
        }
    }
}

fn attach(existing: &Model, spec: &ShardSpec) -> Result<Created, ShardError> {
    if existing.spec != *spec {
        return Err(ShardError::FailedPrecondition(format!(
            "this shard already holds model {:016x} with columns [{}, {}), asked for [{}, {})",
            existing.fingerprint,
            existing.spec.col_start,
            existing.spec.col_end,
            spec.col_start,
            spec.col_end
        )));
    }
    Ok(Created {
        fingerprint: existing.fingerprint,
        existed: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{spec, COUNTS};

    #[test]
    fn the_first_declared_worker_count_holds_until_a_restore() {
        let core = ShardCore::new(None);
        let fp = core
            .create_model(spec(0..4), &COUNTS)
            .expect("create")
            .fingerprint;
        let model = || core.model(fp).expect("model");
        assert_eq!(model().declare_workers(0), 0, "nothing declared yet");
        assert_eq!(model().declare_workers(2), 2);
        assert_eq!(model().declare_workers(3), 2, "the first count holds");
        assert_eq!(model().declare_workers(0), 2);
        // A restore to the same lineage is a no-op and keeps it.
        assert!(!core.restore(fp, 0, 0, 3).expect("no-op"));
        assert_eq!(model().declare_workers(3), 2);
        // A restore starts a state for the restoring workers' count.
        assert!(core.restore(fp, 0, 7, 3).expect("restore"));
        assert_eq!(model().declare_workers(2), 3);
        assert!(core.restore(fp, 0, 8, 0).expect("restore"));
        assert_eq!(model().declare_workers(2), 2);
    }

    #[test]
    fn create_is_idempotent_and_guards_columns() {
        let core = ShardCore::new(None);
        let a = core.create_model(spec(0..4), &COUNTS).expect("create");
        assert!(!a.existed);
        let b = core.create_model(spec(0..4), &COUNTS).expect("attach");
        assert_eq!(
            b,
            Created {
                fingerprint: a.fingerprint,
                existed: true
            }
        );
        assert!(matches!(
            core.create_model(spec(4..8), &COUNTS),
            Err(ShardError::FailedPrecondition(_))
        ));
        assert!(matches!(
            core.create_model(spec(0..9), &COUNTS),
            Err(ShardError::InvalidArgument(_))
        ));
        let limited = ShardCore::new(Some(10));
        assert!(matches!(
            limited.create_model(spec(0..4), &COUNTS),
            Err(ShardError::ResourceExhausted(_))
        ));
        assert!(core.drop_model(a.fingerprint, false).expect("drop").held);
        assert!(core.model(a.fingerprint).is_err());
    }

    /// With a data dir, a drop keeps the model's files unless asked: a
    /// shard starting on the dir does not load the dropped model, creating
    /// it again does (held again, so a restart loads it), and a drop with
    /// `delete_checkpoints` deletes the files, also of a model only kept.
    #[test]
    fn a_drop_keeps_the_files_unless_asked_and_creating_again_loads_them() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let start = || {
            let core = ShardCore::persistent(None, tmp.path().to_path_buf());
            core.load_data_dir().expect("load");
            core.loaded();
            core
        };
        let core = start();
        let fp = core
            .create_model(spec(0..4), &COUNTS)
            .expect("create")
            .fingerprint;
        let dir = ModelDir::new(tmp.path(), fp);
        let dropped = core.drop_model(fp, false).expect("drop");
        assert!(dropped.held && !dropped.deleted, "{dropped:?}");
        assert_eq!(dropped.dir.as_deref(), Some(dir.path()));
        assert!(dir.is_dropped() && core.model(fp).is_err());

        let restarted = start();
        assert!(
            restarted.models().is_empty(),
            "a dropped model is not loaded"
        );
        assert!(matches!(
            restarted.create_model(spec(4..8), &COUNTS),
            Err(ShardError::FailedPrecondition(m)) if m.contains("--delete-checkpoints")
        ));
        let again = restarted
            .create_model(spec(0..4), &COUNTS)
            .expect("create again");
        assert!(again.existed, "loaded from its files: {again:?}");
        assert!(!dir.is_dropped());
        assert_eq!(start().models().len(), 1, "held again: a restart loads it");

        let kept = restarted.drop_model(fp, false).expect("drop");
        assert!(kept.held && dir.is_dropped());
        let deleted = start().drop_model(fp, true).expect("delete");
        assert!(!deleted.held && deleted.deleted, "{deleted:?}");
        assert!(!dir.path().exists());
        let nothing = start().drop_model(fp, true).expect("nothing left");
        assert!(!nothing.held && !nothing.deleted && nothing.kept.is_empty());
    }
}
