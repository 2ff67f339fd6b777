//! The models a shard holds, keyed by fingerprint: creating (or attaching
//! to) one within the shard's memory budget (all its models together, and
//! those being created), looking one up, dropping one;
//! with a data dir, each model's files and checkpoints
//! ([`crate::checkpoints`]).

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
#[derive(Default)]
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

    /// Drops the model, and with a data dir its files and checkpoints.
    pub fn drop_model(&self, fingerprint: u64) -> bool {
        let dropped = self.models.remove(&fingerprint).is_some();
        if dropped {
            self.checkpoints.remove(&fingerprint);
            if let Some(dir) = self.model_dir(fingerprint) {
                checkpoints::forget(&dir);
            }
        }
        dropped
    }

    fn model_dir(&self, fingerprint: u64) -> Option<ModelDir> {
        self.data_dir
            .as_deref()
            .map(|d| ModelDir::new(d, fingerprint))
    }

    /// Writes a newly created model's spec and counts to the data dir, if any.
    fn persist_created(&self, model: &Model) -> Result<(), ShardError> {
        match self.model_dir(model.fingerprint) {
            Some(dir) => checkpoints::persist_created(&dir, model),
            None => Ok(()),
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
    /// initial state) under `lineage`; removes newer versions. Returns false
    /// when the model already is of `lineage`.
    pub fn restore(
        &self,
        fingerprint: u64,
        version: u64,
        lineage: u64,
    ) -> Result<bool, ShardError> {
        let model = self.model(fingerprint)?;
        if model.lineage() == lineage {
            return Ok(false);
        }
        let dir = self.model_dir(fingerprint);
        if let Some(fresh) =
            self.checkpoints(fingerprint)
                .restore(&model, dir.as_ref(), version, lineage)?
        {
            self.insert_loaded(fresh);
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
        assert!(core.drop_model(a.fingerprint));
        assert!(core.model(a.fingerprint).is_err());
    }
}
