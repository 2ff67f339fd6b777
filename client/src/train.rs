//! The training loop of one client (paper Fig. 7): a reader thread streams this
//! worker's sentences in jobs of ~10,000 words; `concurrency` pipelines each
//! turn sentences into minibatches (spanning sentences) and, per minibatch,
//! broadcast `dotprod`, sum the partial dot products in shard order, compute the
//! weights α(1−σ(F⁺)) and −ασ(F⁻) and broadcast `adjust` with the same seed.
//! A [`Pipeline`] is how one minibatch reaches the shards: over [`ShardApi`]
//! (gRPC, async tasks) or by calling shards held in this process directly
//! (blocking threads, no encoding, negatives drawn once for all shards).
//! The learning rate decays linearly over all epochs; a minibatch's rate is
//! taken when it is sent, from the in-vocabulary words of every sentence added
//! to any task's minibatches so far.

use crate::batch::{BatchFormer, MiniBatch};
use crate::shards::ShardApi;
use anyhow::{bail, Context};
use colonnade_common::corpus::{InvalidUtf8, SentenceReader, INVALID_UTF8_WARNINGS};
use colonnade_common::kernels::dot;
use colonnade_common::sgns::{
    keep_threshold, learning_rate, neg_log_sigmoid, negative_weight, positive_weight,
};
use colonnade_common::vocab::Vocab;
use colonnade_proto::v1::{self, AdjustRequest, DotprodRequest};
use colonnade_proto::{decode_f32_into, encode_f32, encode_u32};
use colonnade_ps_shard::core::{Batch, Model, Scratch, ShardError, Targets};
use prost::Message;
use std::future::Future;
use std::path::PathBuf;
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
    pub iter: u32,
    /// Minibatch pipelines run at once (threads × minibatches in flight).
    pub concurrency: usize,
    pub minibatch: usize,
    pub seed: u64,
    pub worker_index: u64,
    pub num_workers: u64,
    pub max_sentence: usize,
    /// What to do with a sentence holding invalid UTF-8 (as when counting).
    #[serde(serialize_with = "serialize_display")]
    pub invalid_utf8: InvalidUtf8,
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
    /// Per epoch: Σ loss and pairs of its sampled minibatches.
    epoch_loss: Mutex<Vec<(f64, u64)>>,
    pub alpha_bits: AtomicU64,
    pub done: AtomicBool,
}

impl Progress {
    pub fn alpha(&self) -> f32 {
        f32::from_bits(self.alpha_bits.load(Relaxed) as u32)
    }

    /// Counts one trained minibatch, with its loss and pair count if sampled.
    fn record(&self, mb: &MiniBatch, sent: u64, received: u64, loss: Option<(f64, usize)>) {
        self.pairs.fetch_add(mb.pairs() as u64, Relaxed);
        self.minibatches.fetch_add(1, Relaxed);
        self.bytes_sent.fetch_add(sent, Relaxed);
        self.bytes_received.fetch_add(received, Relaxed);
        if let Some((loss, n)) = loss {
            if let Ok(mut r) = self.recent.lock() {
                r.0 += loss;
                r.1 += n as u64;
            }
            if let Ok(mut e) = self.epoch_loss.lock() {
                let epoch = mb.epoch as usize;
                if e.len() <= epoch {
                    e.resize(epoch + 1, (0.0, 0));
                }
                e[epoch].0 += loss;
                e[epoch].1 += n as u64;
            }
        }
    }

    /// Mean loss per pair of each epoch's sampled minibatches.
    pub fn epoch_losses(&self) -> Vec<Option<f64>> {
        self.epoch_loss.lock().map_or_else(
            |_| Vec::new(),
            |e| {
                e.iter()
                    .map(|&(sum, n)| (n > 0).then(|| sum / n as f64))
                    .collect()
            },
        )
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
}

/// In-vocabulary words per job sent from the reader to the training tasks.
const JOB_WORDS: usize = 10_000;

/// Consecutive sentences of this worker, for one training task.
#[derive(Default)]
struct Job {
    epoch: u64,
    /// Per sentence: its index in the epoch, its token count (in and out of
    /// vocabulary) and its in-vocabulary ids, in order.
    sentences: Vec<(u64, u64, Vec<u32>)>,
    words: usize,
}

/// Trains on `corpus` through `shards` (in shard order) for the model `fingerprint`.
pub async fn train<S: ShardApi>(
    shards: Vec<S>,
    fingerprint: u64,
    vocab: Arc<Vocab>,
    corpus: Vec<PathBuf>,
    params: TrainParams,
    progress: Arc<Progress>,
) -> anyhow::Result<TrainSummary> {
    if shards.is_empty() {
        bail!("no shards to train with");
    }
    let shards = Arc::new(shards);
    let negative = params.negative as usize;
    let pipeline = |_| RemotePipeline {
        shards: Arc::clone(&shards),
        fingerprint,
        negative,
        bufs: Buffers::default(),
    };
    run(vocab, corpus, params, progress, pipeline).await
}

/// Trains on `corpus` with shards held in this process, `models[i]` being
/// shard i's slice of one model (all with the same fingerprint).
pub async fn train_in_process(
    models: Vec<Arc<Model>>,
    vocab: Arc<Vocab>,
    corpus: Vec<PathBuf>,
    params: TrainParams,
    progress: Arc<Progress>,
) -> anyhow::Result<TrainSummary> {
    let Some(first) = models.first() else {
        bail!("no shards to train with");
    };
    if let Some((i, m)) = models
        .iter()
        .enumerate()
        .find(|(_, m)| m.fingerprint != first.fingerprint)
    {
        bail!(
            "embedded shard {i} holds model {:016x}, shard 0 holds {:016x}",
            m.fingerprint,
            first.fingerprint
        );
    }
    let models: Arc<[Arc<Model>]> = models.into();
    let pipeline = |_| LocalPipeline {
        models: Arc::clone(&models),
        scratch: Scratch::default(),
        targets: Targets::default(),
        bufs: Buffers::default(),
    };
    run(vocab, corpus, params, progress, pipeline).await
}

/// The reader thread and `params.concurrency` pipelines made by `pipeline(i)`.
async fn run<P: Pipeline>(
    vocab: Arc<Vocab>,
    corpus: Vec<PathBuf>,
    params: TrainParams,
    progress: Arc<Progress>,
    pipeline: impl Fn(usize) -> P,
) -> anyhow::Result<TrainSummary> {
    if params.num_workers == 0 || params.worker_index >= params.num_workers {
        bail!(
            "--worker-index {} is not below --num-workers {}",
            params.worker_index,
            params.num_workers
        );
    }
    let total = vocab.total_count();
    let keep: Arc<[u32]> = vocab
        .counts()
        .iter()
        .map(|&c| keep_threshold(c, total, params.sample))
        .collect();
    // This worker's share of all epochs' words, for the learning-rate schedule.
    let words_total = u64::from(params.iter) * total / params.num_workers;
    let concurrency = params.concurrency.max(1);
    let (tx, rx) = async_channel::bounded::<Job>(concurrency * 2);
    let start = Instant::now();
    progress
        .alpha_bits
        .store(u64::from(params.alpha.to_bits()), Relaxed);

    let reader = {
        let vocab = Arc::clone(&vocab);
        let params = params.clone();
        std::thread::Builder::new()
            .name("corpus-reader".into())
            .spawn(move || read_corpus(&corpus, &vocab, &params, &tx))
            .context("cannot start the corpus reader thread")?
    };

    let schedule = Schedule {
        alpha0: params.alpha,
        words_total,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..concurrency {
        let former = BatchFormer::new(
            Arc::clone(&keep),
            params.window,
            params.minibatch,
            params.seed,
        );
        let work = worker(
            rx.clone(),
            former,
            schedule,
            pipeline(i),
            Arc::clone(&progress),
        );
        if P::BLOCKING {
            tasks.spawn_blocking(move || futures::executor::block_on(work));
        } else {
            tasks.spawn(work);
        }
    }
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
        tokens_per_second: tokens as f64 / seconds.max(1e-9),
        final_loss: progress.take_loss(),
        epoch_loss: progress.epoch_losses(),
        invalid_utf8_sentences_skipped,
        progress_reached: None,
    })
}

/// One training pipeline: turns jobs into minibatches and steps them.
async fn worker<P: Pipeline>(
    rx: async_channel::Receiver<Job>,
    mut former: BatchFormer,
    schedule: Schedule,
    mut pipeline: P,
    progress: Arc<Progress>,
) -> anyhow::Result<()> {
    let mut batches = Vec::new();
    while let Ok(job) = rx.recv().await {
        for (sentence, tokens, ids) in &job.sentences {
            batches.clear();
            let kept = former.add_sentence(job.epoch, *sentence, ids, &mut batches);
            progress.tokens.fetch_add(*tokens, Relaxed);
            progress.words.fetch_add(ids.len() as u64, Relaxed);
            progress.trained_words.fetch_add(kept as u64, Relaxed);
            for mb in &batches {
                pipeline
                    .step(mb, schedule.alpha(&progress), &progress)
                    .await?;
            }
        }
    }
    batches.clear();
    former.flush(&mut batches);
    for mb in &batches {
        pipeline
            .step(mb, schedule.alpha(&progress), &progress)
            .await?;
    }
    Ok(())
}

/// Streams this worker's sentences of every epoch into the channel.
fn read_corpus(
    corpus: &[PathBuf],
    vocab: &Vocab,
    p: &TrainParams,
    tx: &async_channel::Sender<Job>,
) -> anyhow::Result<u64> {
    let send = |job: Job| tx.send_blocking(job).is_ok();
    // Sentences skipped for invalid UTF-8 in the first epoch (the same ones
    // are skipped in every epoch; only the first epoch logs them).
    let mut skipped = 0u64;
    for epoch in 0..u64::from(p.iter) {
        let mut sentence = 0u64;
        let mut job = Job {
            epoch,
            ..Job::default()
        };
        for path in corpus {
            let warnings = if epoch == 0 {
                INVALID_UTF8_WARNINGS.saturating_sub(skipped)
            } else {
                0
            };
            let mut reader = SentenceReader::open(path, p.max_sentence)?
                .invalid_utf8(p.invalid_utf8)
                .warn_limit(warnings);
            while let Some(s) = reader.next_sentence()? {
                let index = sentence;
                sentence += 1;
                if index % p.num_workers != p.worker_index {
                    continue;
                }
                let ids: Vec<u32> = s.tokens().filter_map(|t| vocab.id(t)).collect();
                job.words += ids.len();
                job.sentences.push((index, s.len() as u64, ids));
                if job.words >= JOB_WORDS
                    && !send(std::mem::replace(
                        &mut job,
                        Job {
                            epoch,
                            ..Job::default()
                        },
                    ))
                {
                    return Ok(skipped); // training stopped; its error is reported instead
                }
            }
            if epoch == 0 {
                skipped += reader.skipped();
            }
        }
        if !job.sentences.is_empty() && !send(job) {
            return Ok(skipped);
        }
    }
    Ok(skipped)
}

#[derive(Default)]
struct Buffers {
    f_pos: Vec<f32>,
    f_neg: Vec<f32>,
    part: Vec<f32>,
    part_neg: Vec<f32>,
    g_pos: Vec<f32>,
    g_neg: Vec<f32>,
    /// Minibatches this pipeline has stepped.
    steps: u64,
}

impl Buffers {
    /// Zeroes the dot-product sums for `pairs` pairs.
    fn zero_dots(&mut self, pairs: usize, negative: usize) {
        self.f_pos.clear();
        self.f_pos.resize(pairs, 0.0);
        self.f_neg.clear();
        self.f_neg.resize(pairs * negative, 0.0);
    }

    /// The weights α(1−σ(F⁺)) and −ασ(F⁻) of the summed dot products. Every
    /// [`LOSS_EVERY`]th minibatch of a pipeline (`minibatch % LOSS_EVERY ==
    /// 0`) also returns its loss and pair count, for the progress display: the
    /// logarithms cost ~4 % of a run's CPU when taken for every pair.
    /// Fails, naming `mb`, when a dot product is not finite or beyond
    /// [`DIVERGED_DOT`]: the model has diverged, and training on would only
    /// spread garbage (or NaN) through it.
    fn weights(
        &mut self,
        mb: &MiniBatch,
        alpha: f32,
        minibatch: u64,
    ) -> anyhow::Result<Option<(f64, usize)>> {
        // Σ F² (SIMD): NaN or ∞ if any dot product is, and above
        // DIVERGED_DOT² if one is larger than DIVERGED_DOT.
        let energy = dot(&self.f_pos, &self.f_pos) + dot(&self.f_neg, &self.f_neg);
        if !(energy.is_finite() && energy <= DIVERGED_DOT * DIVERGED_DOT) {
            let largest = self
                .f_pos
                .iter()
                .chain(&self.f_neg)
                .find(|f| !f.is_finite())
                .or_else(|| {
                    self.f_pos
                        .iter()
                        .chain(&self.f_neg)
                        .max_by(|a, b| a.abs().total_cmp(&b.abs()))
                })
                .copied()
                .unwrap_or(f32::NAN);
            bail!(
                "training diverged in {}: its dot products u·v reached {largest:e} \
                 (Σ(u·v)² = {energy:e}; a healthy model keeps |u·v| far below {DIVERGED_DOT:e}; \
                 learning rate α was {alpha}). Try a lower --alpha, a smaller --minibatch or \
                 more --sample",
                mb.origin()
            );
        }
        self.g_pos.clear();
        self.g_neg.clear();
        self.g_pos
            .extend(self.f_pos.iter().map(|&f| positive_weight(alpha, f)));
        self.g_neg
            .extend(self.f_neg.iter().map(|&f| negative_weight(alpha, f)));
        if minibatch % LOSS_EVERY != 0 {
            return Ok(None);
        }
        let mut loss = 0.0f64;
        for &f in &self.f_pos {
            loss += f64::from(neg_log_sigmoid(f));
        }
        for &f in &self.f_neg {
            loss += f64::from(neg_log_sigmoid(-f));
        }
        Ok(Some((loss, self.f_pos.len())))
    }
}

/// Largest |u·v| a healthy model shows: σ saturates beyond ±20, so SGNS
/// stops pushing dot products long before this; a larger one (or a NaN)
/// means the vectors have blown up.
const DIVERGED_DOT: f32 = 1e4;

/// One minibatch in this many (per pipeline) has its loss computed.
const LOSS_EVERY: u64 = 16;

fn shard_error(
    name: &str,
    index: usize,
    count: usize,
    call: &str,
    status: tonic::Status,
) -> anyhow::Error {
    anyhow::anyhow!(
        "shard {name} (shard {index} of {count}): {call} failed: {}: {}",
        status.code(),
        status.message()
    )
}

/// word2vec's learning-rate schedule over this worker's share of all epochs.
#[derive(Clone, Copy)]
struct Schedule {
    alpha0: f32,
    words_total: u64,
}

impl Schedule {
    /// The rate for the next minibatch, from the words processed so far.
    fn alpha(self, progress: &Progress) -> f32 {
        let alpha = learning_rate(self.alpha0, progress.words.load(Relaxed), self.words_total);
        progress
            .alpha_bits
            .store(u64::from(alpha.to_bits()), Relaxed);
        alpha
    }
}

/// How one minibatch reaches the shards: dotprod on every shard, partial dots
/// summed in shard order, weights on the client, adjust on every shard.
pub trait Pipeline: Send + 'static {
    /// Whether `step` computes on the calling thread (shards in this process):
    /// such pipelines run on blocking threads, off the async reactor.
    const BLOCKING: bool;
    fn step(
        &mut self,
        mb: &MiniBatch,
        alpha: f32,
        progress: &Progress,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// A pipeline over [`ShardApi`] shards (gRPC).
struct RemotePipeline<S> {
    shards: Arc<Vec<S>>,
    fingerprint: u64,
    negative: usize,
    bufs: Buffers,
}

impl<S: ShardApi> Pipeline for RemotePipeline<S> {
    const BLOCKING: bool = false;

    async fn step(
        &mut self,
        mb: &MiniBatch,
        alpha: f32,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let (shards, b) = (&self.shards[..], &mut self.bufs);
        let pairs = mb.pairs();
        let batch = v1::Minibatch {
            model_fingerprint: self.fingerprint,
            seed: mb.seed,
            inputs: encode_u32(&mb.inputs),
            context_counts: encode_u32(&mb.context_counts),
            outputs: encode_u32(&mb.outputs),
        };
        let dot_req = DotprodRequest { batch: Some(batch) };
        let mut sent = dot_req.encoded_len() as u64 * shards.len() as u64;
        let mut received = 0u64;
        let responses =
            futures::future::join_all(shards.iter().map(|s| s.dotprod(dot_req.clone()))).await;
        b.zero_dots(pairs, self.negative);
        for (i, (shard, resp)) in shards.iter().zip(responses).enumerate() {
            let resp =
                resp.map_err(|e| shard_error(shard.name(), i, shards.len(), "dotprod", e))?;
            received += resp.encoded_len() as u64;
            for (raw, field, sum) in [
                (&resp.pos, "pos", &mut b.f_pos),
                (&resp.neg, "neg", &mut b.f_neg),
            ] {
                decode_f32_into(field, raw, &mut b.part)
                    .with_context(|| format!("shard {}: bad dotprod response", shard.name()))?;
                if b.part.len() != sum.len() {
                    bail!(
                        "shard {}: dotprod returned {} `{field}` values, expected {}",
                        shard.name(),
                        b.part.len(),
                        sum.len()
                    );
                }
                add_into(sum, &b.part);
            }
        }
        let loss = b.weights(mb, alpha, b.steps)?;
        b.steps += 1;
        let adj_req = AdjustRequest {
            batch: dot_req.batch,
            pos_weights: encode_f32(&b.g_pos),
            neg_weights: encode_f32(&b.g_neg),
        };
        sent += adj_req.encoded_len() as u64 * shards.len() as u64;
        let results =
            futures::future::join_all(shards.iter().map(|s| s.adjust(adj_req.clone()))).await;
        for (i, (shard, res)) in shards.iter().zip(results).enumerate() {
            res.map_err(|e| shard_error(shard.name(), i, shards.len(), "adjust", e))?;
        }
        progress.record(mb, sent, received, loss);
        Ok(())
    }
}

/// A pipeline over shards held in this process: their core is called on this
/// thread, nothing is encoded, and the negatives are drawn once for all shards
/// (every shard of a model draws the same ones from the minibatch seed).
struct LocalPipeline {
    models: Arc<[Arc<Model>]>,
    scratch: Scratch,
    targets: Targets,
    bufs: Buffers,
}

impl LocalPipeline {
    fn step_now(&mut self, mb: &MiniBatch, alpha: f32, progress: &Progress) -> anyhow::Result<()> {
        let (models, b) = (&self.models[..], &mut self.bufs);
        let pairs = mb.pairs();
        let negative = models[0].spec.model.negative as usize;
        let batch = Batch {
            fingerprint: models[0].fingerprint,
            seed: mb.seed,
            inputs: &mb.inputs,
            context_counts: &mb.context_counts,
            outputs: &mb.outputs,
        };
        let failed = |i: usize, call: &str, e: ShardError| {
            anyhow::anyhow!("embedded shard {i} of {}: {call} failed: {e}", models.len())
        };
        models[0]
            .draw_targets(&batch, &mut self.targets)
            .map_err(|e| failed(0, "dotprod", e))?;
        b.zero_dots(pairs, negative);
        for (i, m) in models.iter().enumerate() {
            m.dotprod_with(
                &batch,
                &self.targets,
                &mut self.scratch,
                &mut b.part,
                &mut b.part_neg,
            )
            .map_err(|e| failed(i, "dotprod", e))?;
            add_into(&mut b.f_pos, &b.part);
            add_into(&mut b.f_neg, &b.part_neg);
        }
        let loss = b.weights(mb, alpha, b.steps)?;
        b.steps += 1;
        for (i, m) in models.iter().enumerate() {
            m.adjust_with(&batch, &self.targets, &b.g_pos, &b.g_neg, &mut self.scratch)
                .map_err(|e| failed(i, "adjust", e))?;
        }
        progress.record(mb, 0, 0, loss);
        Ok(())
    }
}

impl Pipeline for LocalPipeline {
    const BLOCKING: bool = true;

    async fn step(
        &mut self,
        mb: &MiniBatch,
        alpha: f32,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        self.step_now(mb, alpha, progress)
    }
}

fn add_into(sum: &mut [f32], part: &[f32]) {
    for (acc, x) in sum.iter_mut().zip(part) {
        *acc += x;
    }
}

/// Reports progress until training is done: a bar on a terminal, log lines
/// otherwise. Progress is in-vocabulary words read ([`Progress::words`])
/// against `words_total`, the in-vocabulary words this worker reads over all
/// epochs (iter × the vocabulary's total count / workers), so that
/// out-of-vocabulary tokens count on neither side. Returns the fraction of
/// `words_total` reached at the end.
pub async fn report(progress: Arc<Progress>, words_total: u64, interactive: bool) -> f64 {
    let start = Instant::now();
    let fraction = |words: u64| words as f64 / words_total.max(1) as f64;
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
        tokio::time::sleep(Duration::from_millis(500)).await;
        let done = progress.done.load(Relaxed);
        let tokens = progress.tokens.load(Relaxed);
        let words = progress.words.load(Relaxed);
        let elapsed = start.elapsed().as_secs_f64().max(1e-9);
        let rate = tokens as f64 / elapsed;
        let word_rate = words as f64 / elapsed;
        if let Some(l) = progress.take_loss() {
            last_loss = Some(l);
        }
        let loss = last_loss.map_or_else(|| "-".to_string(), |l| format!("{l:.4}"));
        let msg = format!(
            "{:.0} words/s  alpha {:.6}  loss {loss}",
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
