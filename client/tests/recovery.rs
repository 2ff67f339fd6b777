//! Surviving the loss of a process, tested in one process: shards that keep
//! data directories serve on loopback, and a worker's [`Cluster`] agrees
//! with them on one state of the model after a failure, a shard's restart
//! (with or without its data dir) and `--restart`. With one pipeline
//! training is deterministic, so a run that fails, rolls back to its newest
//! checkpoint and resumes from the checkpoint's manifest must end bit for bit
//! as the uninterrupted run.

use crate::common::{assemble, params, sample_corpus, spec_of, vocab_of};
use colonnade_client::checkpointer::GrpcCheckpointer;
use colonnade_client::cluster::{Begin, Cluster, Session, Worker};
use colonnade_client::grpc::GrpcShards;
use colonnade_client::identity::RunRecord;
use colonnade_client::stream::Source;
use colonnade_client::train::{train, NoCheckpoints, Position, Progress, Tracker, TrainParams};
use colonnade_common::vocab::Vocab;
use colonnade_proto::{CallError, Minibatch, ModelShards};
use colonnade_ps_shard::{Matrix, ShardCore, SpawnedShard};
use colonnade_setup::Connector;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

const WORKER: Worker = Worker { index: 0, count: 1 };
const RETRY: Duration = Duration::from_secs(20);

/// A shard serving on loopback; with `data_dir`, keeping its models there
/// (loaded before it serves, as `ps-shard --data-dir` does).
async fn shard(data_dir: Option<&Path>) -> SpawnedShard {
    let core = match data_dir {
        Some(dir) => {
            let core = ShardCore::persistent(None, dir.to_path_buf());
            core.load_data_dir().expect("load the data dir");
            core.loaded();
            core
        }
        None => ShardCore::new(None),
    };
    SpawnedShard::serve_core(([127, 0, 0, 1], 0).into(), 1, Arc::new(core))
        .await
        .expect("serve")
}

async fn connect(shards: &[SpawnedShard]) -> Cluster {
    let endpoints: Vec<String> = shards.iter().map(SpawnedShard::endpoint).collect();
    Cluster::connect(&Connector::default(), &endpoints, Duration::from_secs(5))
        .await
        .expect("connect")
}

/// `cluster`'s reconcile for this test's worker, begun `how`, after no
/// failure (it must succeed).
async fn reconcile(cluster: &Cluster, how: Begin) -> Session {
    cluster
        .reconcile(WORKER, how, None, false, RETRY)
        .await
        .expect("reconcile")
}

/// Both matrices of the model on `shards`, assembled, as bit patterns.
fn model_bits(shards: &[SpawnedShard], fp: u64, v: u64) -> Vec<u32> {
    let cores: Vec<_> = shards.iter().map(|s| Arc::clone(&s.core)).collect();
    [Matrix::Input, Matrix::Output]
        .into_iter()
        .flat_map(|m| assemble(&cores, fp, m, v))
        .map(f32::to_bits)
        .collect()
}

/// One pipeline, one minibatch per call: deterministic.
fn deterministic() -> TrainParams {
    let mut p = params(7);
    p.iter = 3;
    p.concurrency = 1;
    p
}

/// What the test's worker trains, for the manifests.
fn test_record() -> Arc<RunRecord> {
    Arc::new(RunRecord {
        source: "corpus test".into(),
        source_hash: "0000000000000000".into(),
        epochs: 3,
    })
}

struct Run {
    corpus: PathBuf,
    vocab: Arc<Vocab>,
    p: TrainParams,
}

impl Run {
    fn new(dir: &Path) -> Self {
        let corpus = sample_corpus(dir, 20_000);
        let vocab = Arc::new(vocab_of(&corpus, 2));
        Self {
            corpus,
            vocab,
            p: deterministic(),
        }
    }

    fn source(&self) -> Source {
        Source::Text(vec![self.corpus.clone()], Arc::clone(&self.vocab))
    }

    /// Creates (or attaches to) the model on `cluster`.
    async fn create(&self, cluster: &mut Cluster) -> u64 {
        let counts = self.vocab.counts_only();
        cluster
            .create(spec_of(&counts, &self.p), counts, Duration::from_secs(5))
            .await
            .expect("create")
    }

    /// Trains `session`'s state from its position to the end.
    async fn train_from(&self, cluster: &Cluster, session: &Session) -> Position {
        let shards = cluster
            .pipelines(session.lineage, Duration::from_secs(30))
            .expect("pipelines");
        let summary = train(
            shards,
            self.vocab.counts_only(),
            self.source(),
            self.p.clone(),
            Arc::new(Progress::default()),
            Arc::new(Tracker::new(session.position)),
            NoCheckpoints,
        )
        .await
        .expect("train");
        summary.position
    }
}

/// The shards of `inner`, failing every call with UNAVAILABLE (as a shard
/// that died would) once `taken` checkpoints were taken and `grace` calls
/// made after that.
struct FailAfterCheckpoint {
    inner: GrpcShards,
    taken: Arc<AtomicU64>,
    calls_after: Arc<AtomicU64>,
    grace: u64,
}

impl FailAfterCheckpoint {
    fn check(&self, call: &'static str) -> Result<(), CallError> {
        if self.taken.load(Relaxed) == 0 || self.calls_after.fetch_add(1, Relaxed) < self.grace {
            return Ok(());
        }
        let status = tonic::Status::unavailable("the test's shard went away");
        Err(CallError::from_status("test shard", 0, 2, call, &status))
    }
}

impl ModelShards for FailAfterCheckpoint {
    const BLOCKING: bool = false;

    fn pipeline(&self) -> Self {
        Self {
            inner: self.inner.pipeline(),
            taken: Arc::clone(&self.taken),
            calls_after: Arc::clone(&self.calls_after),
            grace: self.grace,
        }
    }

    fn negative(&self) -> usize {
        self.inner.negative()
    }

    async fn dotprod(&mut self, mbs: &[Minibatch], dots: &mut Vec<f32>) -> Result<(), CallError> {
        self.check("dotprod")?;
        self.inner.dotprod(mbs, dots).await
    }

    async fn adjust(&mut self, mbs: &[Minibatch], scaled: &[f32]) -> Result<(), CallError> {
        // The adjust of a failing step reaches the shards: the failure
        // comes after it, so the state holds a minibatch beyond the
        // checkpoint that only a rollback removes.
        let result = self.inner.adjust(mbs, scaled).await;
        self.check("adjust")?;
        result
    }

    fn wire_bytes(&self) -> (u64, u64) {
        self.inner.wire_bytes()
    }
}

/// A run that fails after a checkpoint, rolls every shard back to it and
/// resumes from its manifest ends with the model of the uninterrupted run,
/// bit for bit; without the rollback it would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_resumed_from_its_checkpoint_ends_as_the_uninterrupted_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(dir.path());
    let v = run.vocab.len() as u64;

    let plain = [shard(None).await, shard(None).await];
    let mut cluster = connect(&plain).await;
    let fp = run.create(&mut cluster).await;
    let start = reconcile(&cluster, Begin::Resume).await;
    let end = run.train_from(&cluster, &start).await;
    let uninterrupted = model_bits(&plain, fp, v);

    let dirs = [dir.path().join("s0"), dir.path().join("s1")];
    let kept = [shard(Some(&dirs[0])).await, shard(Some(&dirs[1])).await];
    let mut cluster = connect(&kept).await;
    run.create(&mut cluster).await;
    let first = reconcile(&cluster, Begin::Resume).await;
    assert!(first.persistent && first.version == 0 && !first.restored);
    let shards = cluster
        .pipelines(first.lineage, Duration::from_secs(30))
        .expect("pipelines");
    let checkpoints = GrpcCheckpointer::new(
        &cluster,
        first.lineage,
        WORKER,
        test_record(),
        Duration::from_millis(1),
        first.version,
        shards.checkpoint_pending(),
    )
    .expect("checkpointer");
    let failing = FailAfterCheckpoint {
        inner: shards,
        taken: Arc::clone(&checkpoints.taken),
        calls_after: Arc::default(),
        grace: 40,
    };
    let err = train(
        failing,
        run.vocab.counts_only(),
        run.source(),
        run.p.clone(),
        Arc::new(Progress::default()),
        Arc::new(Tracker::new(first.position)),
        checkpoints,
    )
    .await
    .expect_err("the shard went away");
    assert!(
        colonnade_client::cluster::recoverable(&err),
        "a lost shard is recoverable: {err:#}"
    );

    let resumed = cluster
        .reconcile(WORKER, Begin::Resume, Some(first.lineage), false, RETRY)
        .await
        .expect("reconcile after the failure");
    assert!(resumed.restored, "rolled back: {resumed:?}");
    assert!(resumed.version >= 1, "to a checkpoint: {resumed:?}");
    assert_ne!(resumed.lineage, first.lineage, "under a new lineage");
    assert!(
        resumed.position.jobs > 0 && resumed.position.jobs < end.jobs,
        "the checkpoint was taken mid-run: {resumed:?}, the run ends at {end:?}"
    );
    let resumed_end = run.train_from(&cluster, &resumed).await;
    assert_eq!(resumed_end, end, "the same position at the end");
    assert!(
        model_bits(&kept, fp, v) == uninterrupted,
        "the resumed run's model differs from the uninterrupted run's"
    );
    for s in plain.into_iter().chain(kept) {
        s.stop().await;
    }
}

/// Trains `run` on two data-dir shards up to a checkpoint (version 1 on
/// both disks), then on past it; returns the shards, the fingerprint, the
/// lineage and the model's bits at the checkpoint.
async fn checkpointed(run: &Run, dirs: &[PathBuf; 2]) -> (Vec<SpawnedShard>, u64, u64, Vec<u32>) {
    let v = run.vocab.len() as u64;
    let shards = vec![shard(Some(&dirs[0])).await, shard(Some(&dirs[1])).await];
    let mut cluster = connect(&shards).await;
    let fp = run.create(&mut cluster).await;
    let session = reconcile(&cluster, Begin::Resume).await;
    let end = run.train_from(&cluster, &session).await;
    let pipes = cluster
        .pipelines(session.lineage, Duration::from_secs(30))
        .expect("pipelines");
    let checkpoints = GrpcCheckpointer::new(
        &cluster,
        session.lineage,
        WORKER,
        test_record(),
        Duration::from_secs(3600),
        0,
        pipes.checkpoint_pending(),
    )
    .expect("checkpointer");
    checkpoints
        .take_at(end, false, true)
        .await
        .expect("checkpoint 1");
    assert_eq!(checkpoints.complete(), 1, "version 1 is on both disks");
    let at_checkpoint = model_bits(&shards, fp, v);
    // Training on past the checkpoint (the same corpus again).
    let mut again = session.clone();
    again.position = Position::default();
    run.train_from(&cluster, &again).await;
    assert!(model_bits(&shards, fp, v) != at_checkpoint);
    (shards, fp, session.lineage, at_checkpoint)
}

/// A shard restarted on its data dir comes back at the checkpoint under a
/// lineage of its own: the survivors' newer state must not be mixed with
/// it, so every shard is rolled back to the newest version all of them
/// hold, and the worker resumes from that version's manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_shard_rolls_every_shard_back_to_the_common_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(dir.path());
    let v = run.vocab.len() as u64;
    let dirs = [dir.path().join("s0"), dir.path().join("s1")];
    let (mut shards, fp, lineage, at_checkpoint) = checkpointed(&run, &dirs).await;

    let old = shards.pop().expect("two shards");
    old.stop().await;
    shards.push(shard(Some(&dirs[1])).await);
    let mut cluster = connect(&shards).await;
    run.create(&mut cluster).await;
    // A call of the old lineage is refused by the restarted shard.
    let mut stale = cluster
        .pipelines(lineage, Duration::from_secs(30))
        .expect("pipelines");
    let mb = one_pair();
    let err = stale
        .dotprod(&[mb], &mut Vec::new())
        .await
        .expect_err("another lineage");
    assert_eq!(err.code, tonic::Code::Aborted, "{err}");

    let session = reconcile(&cluster, Begin::Resume).await;
    assert!(session.restored && session.version == 1, "{session:?}");
    assert!(model_bits(&shards, fp, v) == at_checkpoint);
    assert!(session.position.jobs > 0, "the manifest's position");
    // Reconciling again changes nothing: the shards agree now.
    let again = reconcile(&cluster, Begin::Resume).await;
    assert!(!again.restored && again.lineage == session.lineage);
    for s in shards {
        s.stop().await;
    }
}

/// A shard restarted without its data dir holds no checkpoint: the newest
/// version every shard holds is the initial state, so every shard goes back
/// to it (and the model is created again where it was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_restarted_empty_takes_every_shard_back_to_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(dir.path());
    let v = run.vocab.len() as u64;
    let dirs = [dir.path().join("s0"), dir.path().join("s1")];
    let (mut shards, fp, _, _) = checkpointed(&run, &dirs).await;
    let old = shards.pop().expect("two shards");
    old.stop().await;
    shards.push(shard(None).await);
    let mut cluster = connect(&shards).await;
    // As a worker does: attach where the model is, create it where not.
    run.create(&mut cluster).await;
    let session = reconcile(&cluster, Begin::Resume).await;
    assert!(session.restored && session.version == 0, "{session:?}");
    assert_eq!(session.position, Position::default());
    let fresh = [shard(None).await, shard(None).await];
    let mut initial = connect(&fresh).await;
    run.create(&mut initial).await;
    assert!(
        model_bits(&shards, fp, v) == model_bits(&fresh, fp, v),
        "every shard holds the initial state"
    );
    for s in shards.into_iter().chain(fresh) {
        s.stop().await;
    }
}

/// `--restart` rolls every shard back to the initial state and removes the
/// checkpoints from their disks, even when the shards agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_goes_back_to_the_start_and_drops_the_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(dir.path());
    let dirs = [dir.path().join("s0"), dir.path().join("s1")];
    let (shards, fp, _, _) = checkpointed(&run, &dirs).await;
    let mut cluster = connect(&shards).await;
    run.create(&mut cluster).await;
    let session = reconcile(&cluster, Begin::Restart).await;
    assert!(session.restored && session.version == 0, "{session:?}");
    for s in &shards {
        let versions = s.core.checkpoints(fp).versions();
        assert!(versions.is_empty(), "{versions:?} left on a shard's disk");
    }
    for d in &dirs {
        let files: Vec<String> = fs_err::read_dir(d.join(format!("{fp:016x}")))
            .expect("model dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ckpt"))
            .collect();
        assert!(files.is_empty(), "checkpoint files left: {files:?}");
    }
    for s in shards {
        s.stop().await;
    }
}

/// Training that diverges stops every worker with one error, and never
/// loops: the shards mark the model, refuse training calls on it (an error
/// no reconcile retries), and refuse a worker started on it, until it is
/// rolled back to the newest checkpoint (`--rollback`), which holds the
/// checkpoint's state and trains again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diverged_model_is_refused_until_rolled_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(dir.path());
    let v = run.vocab.len() as u64;
    let dirs = [dir.path().join("s0"), dir.path().join("s1")];
    let (shards, fp, _, at_checkpoint) = checkpointed(&run, &dirs).await;
    let mut cluster = connect(&shards).await;
    run.create(&mut cluster).await;
    let session = reconcile(&cluster, Begin::Resume).await;
    // A learning rate that blows the model up within a few calls.
    let mut wild = run.p.clone();
    wild.alpha = 50.0;
    let pipes = cluster
        .pipelines(session.lineage, Duration::from_secs(30))
        .expect("pipelines");
    let err = train(
        pipes,
        run.vocab.counts_only(),
        run.source(),
        wild,
        Arc::new(Progress::default()),
        Arc::new(Tracker::new(Position::default())),
        NoCheckpoints,
    )
    .await
    .expect_err("training diverges");
    assert!(err.to_string().contains("training diverged"), "{err:#}");
    let diverged: Vec<u32> = model_bits(&shards, fp, v);

    // Another worker's next call is refused, and that is not recoverable.
    let mut other = cluster
        .pipelines(session.lineage, Duration::from_secs(30))
        .expect("pipelines");
    let mb = one_pair();
    let refused = other
        .dotprod(std::slice::from_ref(&mb), &mut Vec::new())
        .await
        .expect_err("a diverged model takes no training");
    assert!(refused.is_divergence(), "{refused}");
    assert!(refused.message.contains("--rollback"), "{refused}");
    assert!(!colonnade_client::cluster::recoverable(
        &anyhow::Error::new(refused)
    ));
    assert!(
        model_bits(&shards, fp, v) == diverged,
        "the refused call changed nothing"
    );

    // A worker started on it is refused, naming a shard and the way out.
    let err = cluster
        .reconcile(WORKER, Begin::Resume, None, false, RETRY)
        .await
        .expect_err("a worker starting on a diverged model");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("training diverged") && msg.contains("--rollback"),
        "{msg}"
    );
    assert!(
        msg.contains(&shards[0].endpoint()) || msg.contains(&shards[1].endpoint()),
        "{msg}"
    );

    // --rollback: back to checkpoint 1, trainable again.
    let back = reconcile(&cluster, Begin::Rollback).await;
    assert!(back.restored && back.version == 1, "{back:?}");
    assert!(model_bits(&shards, fp, v) == at_checkpoint);
    let mut pipes = cluster
        .pipelines(back.lineage, Duration::from_secs(30))
        .expect("pipelines");
    pipes
        .dotprod(&[mb], &mut Vec::new())
        .await
        .expect("training calls are served again");
    for s in shards {
        s.stop().await;
    }
}

/// The shards of `inner` training epoch 2 to tell every positive pair
/// from its context (its weight 1 − σ(F) sent as −σ(F), as a negative's),
/// and epochs 1 and 3 as the worker says: a model that breaks within an
/// epoch while its dot products stay small (a pushed-apart pair's weight
/// vanishes as σ(F) does), as stale steps at a high rate broke one
/// (docs/benchmarks.md, "Minibatches in flight at alpha 0.05 over five
/// epochs").
struct Ascent {
    inner: GrpcShards,
}

impl ModelShards for Ascent {
    const BLOCKING: bool = false;

    fn pipeline(&self) -> Self {
        Self {
            inner: self.inner.pipeline(),
        }
    }

    fn negative(&self) -> usize {
        self.inner.negative()
    }

    async fn dotprod(&mut self, mbs: &[Minibatch], dots: &mut Vec<f32>) -> Result<(), CallError> {
        self.inner.dotprod(mbs, dots).await
    }

    async fn adjust(&mut self, mbs: &[Minibatch], scaled: &[f32]) -> Result<(), CallError> {
        if mbs.first().is_some_and(|mb| mb.id.epoch == 1) {
            // The positives come first, one per example.
            let examples: usize = mbs.iter().map(Minibatch::examples).sum();
            let apart: Vec<f32> = scaled
                .iter()
                .enumerate()
                .map(|(t, &w)| if t < examples { w - 1.0 } else { w })
                .collect();
            self.inner.adjust(mbs, &apart).await
        } else {
            self.inner.adjust(mbs, scaled).await
        }
    }

    fn note_divergence(&mut self, why: &str) {
        self.inner.note_divergence(why);
    }

    fn wire_bytes(&self) -> (u64, u64) {
        self.inner.wire_bytes()
    }
}

/// A model whose loss rises from one epoch to the next while every dot
/// product stays under the divergence rule's 10⁴ stops the run with the
/// divergence error naming the loss, and the shards refuse training on it,
/// as for a diverged dot product; before the loss was watched such a run
/// ended without an error on a broken model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_that_climbs_under_the_dot_product_rule_stops_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 60_000);
    let vocab = Arc::new(vocab_of(&corpus, 2));
    let mut p = params(7);
    p.iter = 3;
    p.alpha = 0.05;
    let shards = [shard(None).await, shard(None).await];
    let mut cluster = connect(&shards).await;
    let counts = vocab.counts_only();
    let fp = cluster
        .create(spec_of(&counts, &p), counts, Duration::from_secs(5))
        .await
        .expect("create");
    let session = reconcile(&cluster, Begin::Resume).await;
    let inner = cluster
        .pipelines(session.lineage, Duration::from_secs(30))
        .expect("pipelines");
    // Epochs of 500 sampled examples count (a real run's need 10,000).
    let progress = Arc::new(Progress::watching_loss_from(500));
    let err = train(
        Ascent { inner },
        vocab.counts_only(),
        Source::Text(vec![corpus.clone()], Arc::clone(&vocab)),
        p,
        Arc::clone(&progress),
        Arc::new(Tracker::new(Position::default())),
        NoCheckpoints,
    )
    .await
    .expect_err("a climbing loss stops training");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("training diverged")
            && msg.contains("rose from")
            && msg.contains("in epoch 2"),
        "{msg}"
    );
    assert_eq!(
        progress.epoch(),
        2,
        "stopped as epoch 3 began, after epoch 2's loss rose: {msg}"
    );
    // Every dot product was still small: the dot-product rule alone would
    // have trained on.
    let u = assemble(
        &[Arc::clone(&shards[0].core), Arc::clone(&shards[1].core)],
        fp,
        Matrix::Input,
        vocab.len() as u64,
    );
    let v = assemble(
        &[Arc::clone(&shards[0].core), Arc::clone(&shards[1].core)],
        fp,
        Matrix::Output,
        vocab.len() as u64,
    );
    let dim = crate::common::DIM as usize;
    let norm = |m: &[f32]| {
        m.chunks(dim)
            .map(|r| r.iter().map(|x| x * x).sum::<f32>().sqrt())
            .fold(0.0f32, f32::max)
    };
    assert!(
        norm(&u) * norm(&v) < 1e4,
        "no dot product can pass 10^4: |u| {} |v| {}",
        norm(&u),
        norm(&v)
    );
    // The shards refuse the next training call, naming the way out.
    let mut other = cluster
        .pipelines(session.lineage, Duration::from_secs(30))
        .expect("pipelines");
    let refused = other
        .dotprod(&[one_pair()], &mut Vec::new())
        .await
        .expect_err("a diverged model takes no training");
    assert!(refused.is_divergence(), "{refused}");
    for s in shards {
        s.stop().await;
    }
}

/// Another worker's first call in flight when a worker starts: its adjust
/// has reached one shard and not yet the other. That is no disagreement:
/// the starting worker reads again and trains on, where it used to roll
/// every worker back to the start (the soak of 2026-11-28: 26 calls of 8
/// workers aborted at t = 1 s). An adjust that never comes still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workers_first_call_in_flight_is_not_a_disagreement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(dir.path());
    let shards = [shard(None).await, shard(None).await];
    let mut cluster = connect(&shards).await;
    let fp = run.create(&mut cluster).await;
    let negative = run.p.negative;
    let on = |i: usize| shard_of(&cluster, i, fp, negative);
    let mb = one_pair();
    let weights = vec![0.5f32; 1 + negative as usize];
    let mut shard1 = on(1);
    one_call(&mut shard1, &mb, &weights).await;
    // The call's adjust reaches shard 0 150 ms later, while the new worker reconciles.
    let mut shard0 = on(0);
    let late = {
        let (mb, weights) = (mb.clone(), weights.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            one_call(&mut shard0, &mb, &weights).await;
        })
    };
    let session = reconcile(&cluster, Begin::Resume).await;
    late.await.expect("the late adjust");
    assert!(!session.restored && session.lineage == 0, "{session:?}");
    assert!(session.trained, "{session:?}");
    for s in &shards {
        let m = s.core.model(fp).expect("model");
        assert_eq!(m.lineage(), 0, "no shard was restored");
    }
    // An adjust on one shard only that no other follows (a shard restarted
    // empty next to a trained one looks the same): the states differ, and
    // after the wait every shard goes back to the start.
    let blank = [shard(None).await, shard(None).await];
    let mut other = connect(&blank).await;
    run.create(&mut other).await;
    let mut one = shard_of(&other, 1, fp, negative);
    one_call(&mut one, &mb, &weights).await;
    let session = reconcile(&other, Begin::Resume).await;
    assert!(session.restored && session.version == 0, "{session:?}");
    for s in shards.into_iter().chain(blank) {
        s.stop().await;
    }
}

/// Training calls to shard `i` of `cluster` alone.
fn shard_of(cluster: &Cluster, i: usize, fp: u64, negative: u32) -> GrpcShards {
    GrpcShards::new(vec![cluster.shards()[i].clone()], fp, negative)
}

/// One minibatch's dotprod and adjust on `shards`.
async fn one_call(shards: &mut GrpcShards, mb: &Minibatch, weights: &[f32]) {
    let mbs = std::slice::from_ref(mb);
    shards.dotprod(mbs, &mut Vec::new()).await.expect("dotprod");
    shards.adjust(mbs, weights).await.expect("adjust");
}

/// A minibatch of one pair (word 0 with context word 1).
fn one_pair() -> Minibatch {
    Minibatch {
        seed: 1,
        alpha: 0.01,
        inputs: vec![0],
        context_counts: vec![1],
        outputs: vec![1],
        ..Minibatch::default()
    }
}
