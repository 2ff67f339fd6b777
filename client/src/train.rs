//! The training loop of one client (paper Fig. 7): the worker's one
//! minibatch stream ([`crate::stream`], a reader thread) feeds `concurrency`
//! pipelines, and each pipeline steps minibatches through a model's shards
//! ([`ModelShards`]: in process or over gRPC) with the one SGNS step:
//! `dotprod` on every shard, the partial dot products summed in shard order,
//! the weights α(1−σ(F⁺)) and −ασ(F⁻) (and the loss) computed here, then
//! `adjust` on every shard with the same seed.

use crate::losswatch::{LossWatch, Rise};
use crate::stream::{
    form_minibatches, BatchFormer, Job, Schedule, Skip, Source, Spent, StreamParams,
};
use anyhow::{bail, Context};
use colonnade_common::corpus::InvalidUtf8;
use colonnade_common::model::Objective;
use colonnade_common::sgns::{applied_weight, diverged_at, DIVERGED_DOT};
use colonnade_common::sgns::{keep_threshold, neg_log_sigmoid};
use colonnade_common::vocab::VocabCounts;
use colonnade_proto::{Minibatch, MinibatchId, ModelShards};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Training hyper-parameters and this worker's place among the workers.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TrainParams {
    pub window: u32,
    pub negative: u32,
    pub sample: f64,
    pub alpha: f32,
    /// gensim's final learning rate; none: word2vec's schedule.
    pub min_alpha: Option<f32>,
    pub iter: u32,
    /// Minibatch pipelines run at once (threads × calls in flight).
    pub concurrency: usize,
    /// Minibatches each pipeline sends per call (independent minibatches,
    /// each its own deferred update: only per-call costs are shared).
    pub minibatches_per_call: usize,
    pub minibatch: usize,
    pub seed: u64,
    pub worker_index: u64,
    pub num_workers: u64,
    pub max_sentence: usize,
    /// What to do with a sentence holding invalid UTF-8 (as when counting).
    #[serde(serialize_with = "serialize_display")]
    pub invalid_utf8: InvalidUtf8,
    /// What it trains (the model's spec must say the same).
    #[serde(serialize_with = "serialize_display")]
    pub objective: Objective,
    /// Skip-gram: negatives drawn per input position and shared by its
    /// context words (`Minibatch::shared_negatives`).
    pub shared_negatives: bool,
}

fn serialize_display<T: std::fmt::Display, S: serde::Serializer>(
    value: &T,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Counters shared by the training tasks and the progress reporter.
#[derive(Default)]
pub struct Progress {
    /// Corpus tokens read (in and out of vocabulary), all epochs.
    pub tokens: AtomicU64,
    /// In-vocabulary words read (word2vec's word_count_actual).
    pub words: AtomicU64,
    /// Words left after subsampling (the minibatch inputs).
    pub trained_words: AtomicU64,
    pub pairs: AtomicU64,
    pub minibatches: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Σ loss and pairs since the last report, and the last mean reported.
    recent: Mutex<(f64, u64, Option<f64>)>,
    /// Per epoch: Σ loss and examples of its sampled calls, watched for
    /// divergence.
    epoch_loss: Mutex<LossWatch>,
    pub alpha_bits: AtomicU64,
    /// The newest epoch a minibatch was trained in (0-based).
    epoch: AtomicU64,
    /// When [`Progress::publish`] last ran, and the words read then.
    rate: Mutex<Option<(Instant, u64)>>,
    pub done: AtomicBool,
    /// Stop training after the jobs already queued (Ctrl-C).
    pub interrupted: AtomicBool,
    /// Tokens and words an earlier process trained (a resumed run): not
    /// in this process's rate.
    pub resumed_tokens: AtomicU64,
    pub resumed_words: AtomicU64,
    /// Wakes the reporter when training ends (see [`Progress::finish`]).
    finished: tokio::sync::Notify,
}

impl Progress {
    /// Marks training done and wakes the reporter at once, not at its next
    /// half-second tick, so that a run's end (and its wall time) is not
    /// rounded up to that tick.
    pub fn finish(&self) {
        self.done.store(true, Relaxed);
        self.finished.notify_one();
    }

    pub fn alpha(&self) -> f32 {
        f32::from_bits(self.alpha_bits.load(Relaxed) as u32)
    }

    /// Sets the client's metrics from the counts so far (`--metrics-listen`;
    /// without it these are no-ops): totals as counters, the rate of the
    /// last interval, the last sampled loss, the learning rate, and the
    /// fraction of `words_total` read; the first interval runs from `start`.
    fn publish(&self, words_total: u64, start: Instant) {
        let words = self.words.load(Relaxed);
        metrics::counter!("colonnade_client_words_total").absolute(words);
        metrics::counter!("colonnade_client_tokens_total").absolute(self.tokens.load(Relaxed));
        metrics::counter!("colonnade_client_trained_words_total")
            .absolute(self.trained_words.load(Relaxed));
        metrics::counter!("colonnade_client_pairs_total").absolute(self.pairs.load(Relaxed));
        metrics::counter!("colonnade_client_minibatches_total")
            .absolute(self.minibatches.load(Relaxed));
        metrics::counter!("colonnade_client_wire_bytes_total", "direction" => "sent")
            .absolute(self.bytes_sent.load(Relaxed));
        metrics::counter!("colonnade_client_wire_bytes_total", "direction" => "received")
            .absolute(self.bytes_received.load(Relaxed));
        metrics::gauge!("colonnade_client_learning_rate").set(f64::from(self.alpha()));
        metrics::gauge!("colonnade_client_epoch").set(self.epoch.load(Relaxed) as f64);
        metrics::gauge!("colonnade_client_progress_ratio")
            .set(words as f64 / words_total.max(1) as f64);
        if let Ok(mut r) = self.rate.lock() {
            let now = Instant::now();
            if let Some((t, w)) = r.replace((now, words)).or(Some((start, 0))) {
                let secs = now.duration_since(t).as_secs_f64();
                if secs > 0.0 {
                    metrics::gauge!("colonnade_client_words_per_second")
                        .set(words.saturating_sub(w) as f64 / secs);
                }
            }
        }
        if let Ok(r) = self.recent.lock() {
            if let Some(loss) = r.2 {
                metrics::gauge!("colonnade_client_loss").set(loss);
            }
        }
    }

    /// Counts the bytes of one call.
    fn record_bytes(&self, sent: u64, received: u64) {
        self.bytes_sent.fetch_add(sent, Relaxed);
        self.bytes_received.fetch_add(received, Relaxed);
    }

    /// Counts one trained minibatch, with its loss and pair count if sampled.
    fn record(&self, mb: &Minibatch, loss: Option<(f64, usize)>) {
        self.pairs.fetch_add(mb.pairs() as u64, Relaxed);
        self.alpha_bits
            .store(u64::from(mb.alpha.to_bits()), Relaxed);
        self.minibatches.fetch_add(1, Relaxed);
        self.epoch.fetch_max(mb.id.epoch, Relaxed);
        if let Some((loss, n)) = loss {
            if let Ok(mut r) = self.recent.lock() {
                r.0 += loss;
                r.1 += n as u64;
            }
            if let Ok(mut e) = self.epoch_loss.lock() {
                e.add(mb.id.epoch, loss, n as u64);
            }
        }
    }

    /// On a sampled call, whether the worker's loss has diverged
    /// ([`LossWatch::check`], the epochs before the call's): why, naming
    /// the call's first minibatch, once an epoch's loss has risen above the
    /// one before's (and on every sampled call after). The call's own loss
    /// counts when it is recorded ([`Progress::record`]).
    fn watch_loss(&self, sampled: bool, mbs: &[Minibatch]) -> Option<String> {
        let mb = mbs.first().filter(|_| sampled)?;
        let Rise {
            epoch,
            before,
            after,
        } = self.epoch_loss.lock().ok()?.check(mb.id.epoch)?;
        Some(format!(
            "training diverged by {}: the mean loss per example rose from {before:.3} in epoch \
             {epoch} to {after:.3} in epoch {}, on the same text, with every dot product u·v \
             under {DIVERGED_DOT:e} (learning rate α is now {}). Try a lower --alpha or fewer \
             minibatches in flight (--in-flight, --minibatches-per-call, --threads); `colonnade \
             train --rollback` resumes every shard from the newest checkpoint they all hold",
            mb.origin(),
            epoch + 1,
            mb.alpha
        ))
    }

    /// Counters whose loss watch compares epochs of at least `examples`
    /// sampled examples, in any number of sampled calls, instead of
    /// [`crate::losswatch::MIN_EXAMPLES`] in [`crate::losswatch::MIN_CALLS`]
    /// (tests on small corpora).
    pub fn watching_loss_from(examples: u64) -> Self {
        Self {
            epoch_loss: Mutex::new(LossWatch::new(examples, 1)),
            ..Self::default()
        }
    }

    /// The newest epoch a minibatch was trained in (0-based).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    /// Mean loss per pair of each epoch's sampled minibatches.
    pub fn epoch_losses(&self) -> Vec<Option<f64>> {
        self.epoch_loss
            .lock()
            .map_or_else(|_| Vec::new(), |e| e.means())
    }

    /// Mean loss per pair since the previous call (over the sampled minibatches).
    /// With no sampled minibatch since, the previous mean again.
    pub fn take_loss(&self) -> Option<f64> {
        let mut r = self.recent.lock().ok()?;
        if r.1 > 0 {
            *r = (0.0, 0, Some(r.0 / r.1 as f64));
        }
        r.2
    }
}

/// A worker's training position: the jobs of its stream done (a
/// contiguous prefix: every minibatch of them is applied on every shard,
/// none after them) and the corpus they covered. Recorded in checkpoint
/// manifests; a resumed worker skips exactly these jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    pub jobs: u64,
    /// (epoch, sequence number) of the last minibatch of those jobs.
    pub last: Option<(u64, u64)>,
    pub tokens: u64,
    /// In-vocabulary words read (the learning-rate schedule's count).
    pub words: u64,
    pub trained_words: u64,
}

impl Position {
    /// What the stream skips to resume here, for worker `worker`.
    pub fn skip(&self, worker: u64) -> Skip {
        Skip {
            jobs: self.jobs,
            last: self
                .last
                .map(|(epoch, seq)| MinibatchId { worker, epoch, seq }),
        }
    }
}

/// Tracks which jobs are done, in any order, as the contiguous [`Position`].
#[derive(Default)]
pub struct Tracker {
    state: Mutex<(Position, BTreeMap<u64, Position>)>,
}

impl Tracker {
    pub fn new(start: Position) -> Self {
        Self {
            state: Mutex::new((start, BTreeMap::new())),
        }
    }

    pub fn position(&self) -> Position {
        self.state.lock().map(|s| s.0).unwrap_or_default()
    }

    fn complete(&self, job: &Job) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let done = Position {
            jobs: 1,
            last: job.minibatches.last().map(|m| (m.id.epoch, m.id.seq)),
            tokens: job.tokens,
            words: job.words,
            trained_words: job.trained_words,
        };
        s.1.insert(job.index, done);
        loop {
            let next = s.0.jobs;
            let Some(d) = s.1.remove(&next) else {
                break;
            };
            let p = &mut s.0;
            p.jobs += 1;
            p.last = d.last.or(p.last);
            p.tokens += d.tokens;
            p.words += d.words;
            p.trained_words += d.trained_words;
        }
    }
}

/// Takes checkpoints of the model during training (shards over gRPC with a
/// data dir): asked whether one is due every ~200 ms, and given the position
/// while every pipeline is idle (nothing in flight).
pub trait Checkpointer: Send + 'static {
    /// Whether to take one now (may ask the shards; training goes on meanwhile).
    fn due(&mut self) -> impl Future<Output = bool> + Send;
    fn take(&mut self, position: Position) -> impl Future<Output = ()> + Send;
}

/// No checkpoints (embedded shards, or `--checkpoint-interval 0`).
pub struct NoCheckpoints;

impl Checkpointer for NoCheckpoints {
    async fn due(&mut self) -> bool {
        false
    }

    async fn take(&mut self, _position: Position) {}
}

/// What a finished training run reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainSummary {
    pub tokens: u64,
    pub words: u64,
    pub trained_words: u64,
    pub pairs: u64,
    pub minibatches: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub seconds: f64,
    pub tokens_per_second: f64,
    pub final_loss: Option<f64>,
    /// Mean loss per pair of each epoch (over its sampled minibatches).
    pub epoch_loss: Vec<Option<f64>>,
    /// Sentences of the corpus skipped for invalid UTF-8 (`--invalid-utf8
    /// skip`), counted in one epoch: each is skipped in every epoch.
    pub invalid_utf8_sentences_skipped: u64,
    /// The fraction of the expected work (in-vocabulary words over all
    /// epochs, this worker's share) the progress display had reached when
    /// training ended: ~1.0 when it showed the truth. Set by the caller that
    /// ran [`report`].
    pub progress_reached: Option<f64>,
    /// This worker's position at the end.
    pub position: Position,
    /// The checkpoint version this process resumed from (0: the start).
    pub resumed_from_version: u64,
    /// Failures this process recovered from (shards lost, restarted, rolled back).
    pub recoveries: u64,
    /// In-vocabulary words this process read again after recoveries (work
    /// lost between the last checkpoint and a failure).
    pub words_retrained: u64,
    /// Checkpoints this worker took part in, and the longest pause one cost.
    pub checkpoints: u64,
    pub checkpoint_pause_max_seconds: f64,
    /// Tokens trained before this process (the checkpoint it resumed
    /// from): this run trained `tokens` minus these.
    pub resumed_tokens: u64,
    /// This worker's part was already finished in the checkpoint it found:
    /// nothing was trained.
    pub finished_before: bool,
    /// Training stopped early (Ctrl-C): the model holds what was trained
    /// until then.
    pub interrupted: bool,
}

/// Trains on `source` through `shards` (a handle on the model's shards;
/// each pipeline gets its own from [`ModelShards::pipeline`]), from the
/// position `tracker` holds (it follows the jobs done, also when training
/// fails); `checkpointer` takes checkpoints while the pipelines are idle.
pub async fn train<S: ModelShards, C: Checkpointer>(
    shards: S,
    vocab: Arc<VocabCounts>,
    source: Source,
    params: TrainParams,
    progress: Arc<Progress>,
    tracker: Arc<Tracker>,
    checkpointer: C,
) -> anyhow::Result<TrainSummary> {
    if params.num_workers == 0 || params.worker_index >= params.num_workers {
        bail!(
            "--worker-index {} is not below --num-workers {}",
            params.worker_index,
            params.num_workers
        );
    }
    if shards.negative() != params.negative as usize {
        bail!(
            "the shards' model has {} negatives, training asks for {}",
            shards.negative(),
            params.negative
        );
    }
    let total = vocab.total_count();
    let keep: Arc<[u32]> = vocab
        .counts
        .iter()
        .map(|&c| keep_threshold(c, total, params.sample))
        .collect();
    let schedule = Schedule {
        alpha0: params.alpha,
        min_alpha: params.min_alpha,
        // This worker's share of all epochs' words: exact for an encoded
        // corpus, the vocabulary's total ÷ workers otherwise.
        words_total: u64::from(params.iter)
            * source
                .words_of(params.worker_index, params.num_workers)
                .unwrap_or(total / params.num_workers),
    };
    let concurrency = params.concurrency.max(1);
    // Tokens of earlier sessions (a resumed run): not this session's rate.
    let tokens_before = progress.tokens.load(Relaxed);
    let (tx, rx) = async_channel::bounded::<Job>(concurrency * 2);
    let spent = Spent::default();
    let start = Instant::now();
    progress
        .alpha_bits
        .store(u64::from(params.alpha.to_bits()), Relaxed);

    let reader = {
        let former = BatchFormer::new(
            keep,
            params.window,
            params.minibatch,
            params.seed,
            params.worker_index,
            schedule,
        )
        .objective(params.objective, params.shared_negatives)
        .recycling(spent.clone());
        let stream = StreamParams {
            source,
            iter: params.iter,
            worker_index: params.worker_index,
            num_workers: params.num_workers,
            max_sentence: params.max_sentence,
            invalid_utf8: params.invalid_utf8,
            skip: tracker.position().skip(params.worker_index),
        };
        std::thread::Builder::new()
            .name("minibatch-stream".into())
            .spawn({
                let progress = Arc::clone(&progress);
                // Interrupted: no job after this one; the pipelines finish
                // those queued and training ends as at the corpus's end.
                move || {
                    form_minibatches(&stream, former, |job| {
                        !progress.interrupted.load(Relaxed) && tx.send_blocking(job).is_ok()
                    })
                }
            })
            .context("cannot start the corpus reader thread")?
    };

    // Pipelines hold it shared while they take and step a job; a checkpoint
    // holds it exclusively, so it sees every job taken done and none started.
    let gate = Arc::new(tokio::sync::RwLock::new(()));
    let finished = Arc::new(AtomicBool::new(false));
    let checkpoints = tokio::spawn(checkpoint_loop(
        checkpointer,
        Arc::clone(&gate),
        Arc::clone(&tracker),
        Arc::clone(&finished),
    ));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let work = pipeline(
            rx.clone(),
            shards.pipeline(),
            params.minibatches_per_call.max(1),
            Arc::clone(&progress),
            Arc::clone(&gate),
            Arc::clone(&tracker),
            spent.clone(),
        );
        if S::BLOCKING {
            tasks.spawn_blocking(move || futures::executor::block_on(work));
        } else {
            tasks.spawn(work);
        }
    }
    drop(shards);
    let mut failure = None;
    while let Some(res) = tasks.join_next().await {
        let err = match res {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => anyhow::anyhow!("a training task failed: {e}"),
        };
        if failure.is_none() {
            failure = Some(err);
            // Blocking pipelines cannot be aborted: closing the channel stops
            // them at their next job, and stops the reader.
            rx.close();
            tasks.abort_all();
        }
    }
    drop(rx);
    finished.store(true, Relaxed);
    let _ = checkpoints.await;
    let read = tokio::task::spawn_blocking(move || reader.join())
        .await
        .context("corpus reader")?
        .map_err(|_| anyhow::anyhow!("the corpus reader thread panicked"))?;
    if let Some(e) = failure {
        return Err(e);
    }
    let invalid_utf8_sentences_skipped = read?;
    let seconds = start.elapsed().as_secs_f64();
    let tokens = progress.tokens.load(Relaxed);
    Ok(TrainSummary {
        tokens,
        words: progress.words.load(Relaxed),
        trained_words: progress.trained_words.load(Relaxed),
        pairs: progress.pairs.load(Relaxed),
        minibatches: progress.minibatches.load(Relaxed),
        bytes_sent: progress.bytes_sent.load(Relaxed),
        bytes_received: progress.bytes_received.load(Relaxed),
        seconds,
        tokens_per_second: tokens.saturating_sub(tokens_before) as f64 / seconds.max(1e-9),
        final_loss: progress.take_loss(),
        epoch_loss: progress.epoch_losses(),
        invalid_utf8_sentences_skipped,
        progress_reached: None,
        position: tracker.position(),
        resumed_from_version: 0,
        recoveries: 0,
        words_retrained: 0,
        checkpoints: 0,
        checkpoint_pause_max_seconds: 0.0,
        resumed_tokens: tokens_before,
        finished_before: false,
        interrupted: progress.interrupted.load(Relaxed),
    })
}

/// Takes a checkpoint whenever one is due, with every pipeline idle.
async fn checkpoint_loop<C: Checkpointer>(
    mut checkpointer: C,
    gate: Arc<tokio::sync::RwLock<()>>,
    tracker: Arc<Tracker>,
    finished: Arc<AtomicBool>,
) {
    while !finished.load(Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if finished.load(Relaxed) || !checkpointer.due().await {
            continue;
        }
        let idle = gate.write().await;
        checkpointer.take(tracker.position()).await;
        drop(idle);
    }
}

/// One training pipeline: takes jobs of the stream and steps their minibatches.
async fn pipeline<S: ModelShards>(
    rx: async_channel::Receiver<Job>,
    mut shards: S,
    per_call: usize,
    progress: Arc<Progress>,
    gate: Arc<tokio::sync::RwLock<()>>,
    tracker: Arc<Tracker>,
    spent: Spent,
) -> anyhow::Result<()> {
    let mut sgns = Sgns::new(shards.negative());
    loop {
        let _working = gate.read().await;
        let Ok(mut job) = rx.recv().await else {
            return Ok(());
        };
        progress.tokens.fetch_add(job.tokens, Relaxed);
        progress.words.fetch_add(job.words, Relaxed);
        progress.trained_words.fetch_add(job.trained_words, Relaxed);
        for mbs in job.minibatches.chunks(per_call) {
            sgns.step(&mut shards, mbs, &progress).await?;
        }
        tracker.complete(&job);
        spent.give(&mut job.minibatches);
    }
}

/// The SGNS step of one pipeline, and its buffers.
struct Sgns {
    /// Dot products per example (a skip-gram pair, a CBOW position):
    /// 1 + negatives.
    per_pair: usize,
    /// A call's dot products, in wire order.
    dots: Vec<f32>,
    /// The weights ÷ α, as they travel (see [`ModelShards::adjust`]).
    scaled: Vec<f32>,
    /// Calls this pipeline has stepped.
    steps: u64,
}

impl Sgns {
    fn new(negative: usize) -> Self {
        Self {
            per_pair: negative + 1,
            dots: Vec::new(),
            scaled: Vec::new(),
            steps: 0,
        }
    }

    /// dotprod → weights and loss → adjust, for the minibatches of one call.
    /// The call's dot products come in its wire order (`colonnade.v1`
    /// DotprodResponse): first one positive per example, then the negatives.
    async fn step<S: ModelShards>(
        &mut self,
        shards: &mut S,
        mbs: &[Minibatch],
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let (sent0, received0) = shards.wire_bytes();
        let examples: usize = mbs.iter().map(Minibatch::examples).sum();
        // Either path applies the same updates: every dot product's weight
        // under the divergence rule (`applied_weight`: none for a diverged
        // one); then a call with a diverged dot product stops training.
        // A loss that rose from one epoch to the next ([`LossWatch`]) stops
        // the run as a diverged dot product does, after this call's updates.
        let (diverged, loss) = if shards.fused_step(mbs, &mut self.dots).await? {
            // The shards weighed and applied the dot products themselves.
            self.check_count(examples, mbs.len())?;
            self.stop_or_loss(mbs, examples, progress)
        } else {
            shards.dotprod(mbs, &mut self.dots).await?;
            self.check_count(examples, mbs.len())?;
            self.scaled.clear();
            self.scaled.extend(
                self.dots
                    .iter()
                    .enumerate()
                    .map(|(t, &f)| applied_weight(f, t < examples)),
            );
            let (diverged, loss) = self.stop_or_loss(mbs, examples, progress);
            if let Some(why) = &diverged {
                // The shards mark the model with it: no worker trains on.
                shards.note_divergence(why);
            }
            shards.adjust(mbs, &self.scaled).await?;
            (diverged, loss)
        };
        if let Some(why) = diverged {
            bail!("{why}");
        }
        let (sent, received) = shards.wire_bytes();
        progress.record_bytes(sent - sent0, received - received0);
        for (i, mb) in mbs.iter().enumerate() {
            // The call's loss counts with its first minibatch.
            progress.record(mb, if i == 0 { loss } else { None });
        }
        Ok(())
    }

    /// The call's loss if sampled ([`Self::sampled_loss`]), and why
    /// training must stop: a diverged dot product ([`Self::divergence`]),
    /// or on a sampled call a loss that rose from one epoch to the next
    /// ([`Progress::watch_loss`]).
    fn stop_or_loss(
        &mut self,
        mbs: &[Minibatch],
        examples: usize,
        progress: &Progress,
    ) -> (Option<String>, Option<(f64, usize)>) {
        let loss = self.sampled_loss(examples);
        let stop = self
            .divergence(mbs)
            .or_else(|| progress.watch_loss(loss.is_some(), mbs));
        (stop, loss)
    }

    /// Fails unless the shards returned one dot product per example and
    /// negative.
    fn check_count(&self, examples: usize, minibatches: usize) -> anyhow::Result<()> {
        let expected = examples * self.per_pair;
        if self.dots.len() != expected {
            bail!(
                "the shards returned {} dot products for {minibatches} minibatches of {expected}",
                self.dots.len(),
            );
        }
        Ok(())
    }

    /// Why training diverged in this call, naming its first minibatch, when
    /// one of its dot products has (`colonnade_common::sgns::is_diverged`:
    /// NaN, ±∞ or beyond [`DIVERGED_DOT`]): the model has blown up, and
    /// training on would only spread garbage (or NaN) through it. The call's
    /// other dot products are applied, its diverged ones are not, whichever
    /// path steps it; then the run stops.
    fn divergence(&self, mbs: &[Minibatch]) -> Option<String> {
        let found = diverged_at(&self.dots)?;
        let mb = mbs.first()?;
        let call = if mbs.len() > 1 {
            format!(" (a call of {} minibatches)", mbs.len())
        } else {
            String::new()
        };
        Some(format!(
            "training diverged in {}{call}: its dot products u·v reached {found:e} (a healthy \
             model keeps |u·v| far below {DIVERGED_DOT:e}; learning rate α was {}). Try a \
             lower --alpha, a smaller --minibatch, more --sample or fewer minibatches in flight",
            mb.origin(),
            mb.alpha
        ))
    }

    /// Every [`LOSS_EVERY`]th call of a pipeline: its loss, from its dot
    /// products (`examples` positives first, then the negatives), and its
    /// example count, for the progress display (the logarithms are too dear
    /// to take for every dot product: docs/benchmarks-history.md).
    fn sampled_loss(&mut self, examples: usize) -> Option<(f64, usize)> {
        let sampled = self.steps.is_multiple_of(LOSS_EVERY);
        self.steps += 1;
        if !sampled {
            return None;
        }
        let (positives, negatives) = self.dots.split_at(examples.min(self.dots.len()));
        let loss = positives
            .iter()
            .map(|&f| f64::from(neg_log_sigmoid(f)))
            .chain(negatives.iter().map(|&f| f64::from(neg_log_sigmoid(-f))))
            .sum();
        Some((loss, examples))
    }
}

/// One call in this many (per pipeline) has its loss computed.
const LOSS_EVERY: u64 = 16;

/// Reports progress until training is done: a bar on a terminal, log lines
/// otherwise. Progress is in-vocabulary words read ([`Progress::words`])
/// against `words_total`, the in-vocabulary words this worker reads over all
/// epochs (iter × the vocabulary's total count / workers), so that
/// out-of-vocabulary tokens count on neither side. Returns the fraction of
/// `words_total` reached at the end.
pub async fn report(
    progress: Arc<Progress>,
    words_total: u64,
    epochs: u32,
    interactive: bool,
) -> f64 {
    let start = Instant::now();
    let fraction = |words: u64| words as f64 / words_total.max(1) as f64;
    // Epochs whose mean loss has been said (an epoch is over once a
    // minibatch of the next one has been trained, or training is done).
    let mut epochs_said = 0usize;
    let bar = interactive.then(|| {
        let bar = indicatif::ProgressBar::new(words_total);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {percent:>3}% {msg} ETA {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut last_log = Instant::now();
    let mut last_loss = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = progress.finished.notified() => {}
        }
        let done = progress.done.load(Relaxed);
        let tokens = progress.tokens.load(Relaxed);
        let words = progress.words.load(Relaxed);
        let elapsed = start.elapsed().as_secs_f64().max(1e-9);
        // This process's rate: what a resumed run found done is not in it.
        let rate = tokens.saturating_sub(progress.resumed_tokens.load(Relaxed)) as f64 / elapsed;
        let word_rate = words.saturating_sub(progress.resumed_words.load(Relaxed)) as f64 / elapsed;
        let epoch = progress.epoch.load(Relaxed) as usize;
        // At the end every epoch trained is over, but an interrupted one.
        let interrupted = progress.interrupted.load(Relaxed);
        let over = if done && !interrupted {
            epochs as usize
        } else {
            epoch
        };
        let losses = progress.epoch_losses();
        while epochs_said < over.min(losses.len()) {
            if let Some(l) = losses[epochs_said] {
                let line = format!("epoch {}/{epochs} done: loss {l:.4}", epochs_said + 1);
                match &bar {
                    Some(bar) => bar.println(line),
                    None => tracing::info!("{line}"),
                }
            }
            epochs_said += 1;
        }
        if let Some(l) = progress.take_loss() {
            last_loss = Some(l);
        }
        progress.publish(words_total, start);
        let loss = last_loss.map_or_else(|| "-".to_string(), |l| format!("{l:.4}"));
        let msg = format!(
            "epoch {}/{epochs}  {:.0} words/s  alpha {:.6}  loss {loss}",
            (epoch + 1).min(epochs.max(1) as usize),
            rate,
            progress.alpha()
        );
        match &bar {
            Some(bar) => {
                bar.set_position(words.min(words_total));
                bar.set_message(msg);
            }
            None if last_log.elapsed() >= Duration::from_secs(10) => {
                last_log = Instant::now();
                let pct = 100.0 * fraction(words);
                let eta = if word_rate > 0.0 {
                    (words_total.saturating_sub(words)) as f64 / word_rate
                } else {
                    f64::NAN
                };
                tracing::info!("progress {pct:.1}%  {msg}  eta {eta:.0}s");
            }
            None => {}
        }
        if done {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            return fraction(words);
        }
    }
}
