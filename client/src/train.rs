//! The training loop of one client (paper Fig. 7): a reader thread streams this
//! worker's sentences in jobs of ~10,000 words; `concurrency` tasks each turn
//! sentences into minibatches (spanning sentences) and, per minibatch,
//! broadcast `dotprod`, sum the partial dot products in shard order, compute the
//! weights α(1−σ(F⁺)) and −ασ(F⁻) and broadcast `adjust` with the same seed.
//! The learning rate decays linearly over all epochs; a minibatch's rate is
//! taken when it is sent, from the in-vocabulary words of every sentence added
//! to any task's minibatches so far.

use crate::batch::{BatchFormer, MiniBatch};
use crate::shards::ShardApi;
use anyhow::{bail, Context};
use colonnade_common::corpus::SentenceReader;
use colonnade_common::sgns::{
    keep_threshold, learning_rate, neg_log_sigmoid, negative_weight, positive_weight,
};
use colonnade_common::vocab::Vocab;
use colonnade_proto::v1::{self, AdjustRequest, DotprodRequest};
use colonnade_proto::{decode_f32_into, encode_f32, encode_u32};
use prost::Message;
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
    /// Σ loss and pairs since the last report.
    recent: Mutex<(f64, u64)>,
    pub alpha_bits: AtomicU64,
    pub done: AtomicBool,
}

impl Progress {
    pub fn alpha(&self) -> f32 {
        f32::from_bits(self.alpha_bits.load(Relaxed) as u32)
    }

    /// Mean loss per pair since the previous call.
    pub fn take_loss(&self) -> Option<f64> {
        let mut r = self.recent.lock().ok()?;
        let (sum, n) = std::mem::take(&mut *r);
        (n > 0).then(|| sum / n as f64)
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

    let shards = Arc::new(shards);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let rx = rx.clone();
        let shards = Arc::clone(&shards);
        let progress = Arc::clone(&progress);
        let mut former = BatchFormer::new(
            Arc::clone(&keep),
            params.window,
            params.minibatch,
            params.seed,
        );
        let schedule = Schedule {
            alpha0: params.alpha,
            words_total,
        };
        let negative = params.negative as usize;
        tasks.spawn(async move {
            let mut batches = Vec::new();
            let mut bufs = Buffers::default();
            while let Ok(job) = rx.recv().await {
                for (sentence, tokens, ids) in &job.sentences {
                    batches.clear();
                    let kept = former.add_sentence(job.epoch, *sentence, ids, &mut batches);
                    progress.tokens.fetch_add(*tokens, Relaxed);
                    progress.words.fetch_add(ids.len() as u64, Relaxed);
                    progress.trained_words.fetch_add(kept as u64, Relaxed);
                    for mb in &batches {
                        step(
                            &shards,
                            fingerprint,
                            mb,
                            schedule,
                            negative,
                            &mut bufs,
                            &progress,
                        )
                        .await?;
                    }
                }
            }
            batches.clear();
            former.flush(&mut batches);
            for mb in &batches {
                step(
                    &shards,
                    fingerprint,
                    mb,
                    schedule,
                    negative,
                    &mut bufs,
                    &progress,
                )
                .await?;
            }
            anyhow::Ok(())
        });
    }
    drop(rx);
    let mut failure = None;
    while let Some(res) = tasks.join_next().await {
        let err = match res {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => anyhow::anyhow!("a training task failed: {e}"),
        };
        if failure.is_none() {
            failure = Some(err);
            tasks.abort_all();
        }
    }
    let read = tokio::task::spawn_blocking(move || reader.join())
        .await
        .context("corpus reader")?
        .map_err(|_| anyhow::anyhow!("the corpus reader thread panicked"))?;
    if let Some(e) = failure {
        return Err(e);
    }
    read?;
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
    })
}

/// Streams this worker's sentences of every epoch into the channel.
fn read_corpus(
    corpus: &[PathBuf],
    vocab: &Vocab,
    p: &TrainParams,
    tx: &async_channel::Sender<Job>,
) -> anyhow::Result<()> {
    let send = |job: Job| tx.send_blocking(job).is_ok();
    for epoch in 0..u64::from(p.iter) {
        let mut sentence = 0u64;
        let mut job = Job {
            epoch,
            ..Job::default()
        };
        for path in corpus {
            let mut reader = SentenceReader::open(path, p.max_sentence)?;
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
                    return Ok(()); // training stopped; its error is reported instead
                }
            }
        }
        if !job.sentences.is_empty() && !send(job) {
            return Ok(());
        }
    }
    Ok(())
}

#[derive(Default)]
struct Buffers {
    f_pos: Vec<f32>,
    f_neg: Vec<f32>,
    part: Vec<f32>,
    g_pos: Vec<f32>,
    g_neg: Vec<f32>,
}

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

/// One minibatch: dotprod on every shard, weights on the client, adjust on every shard.
async fn step<S: ShardApi>(
    shards: &[S],
    fingerprint: u64,
    mb: &MiniBatch,
    schedule: Schedule,
    negative: usize,
    b: &mut Buffers,
    progress: &Progress,
) -> anyhow::Result<()> {
    let pairs = mb.pairs();
    let alpha = schedule.alpha(progress);
    let batch = v1::Minibatch {
        model_fingerprint: fingerprint,
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
    b.f_pos.clear();
    b.f_pos.resize(pairs, 0.0);
    b.f_neg.clear();
    b.f_neg.resize(pairs * negative, 0.0);
    for (i, (shard, resp)) in shards.iter().zip(responses).enumerate() {
        let resp = resp.map_err(|e| shard_error(shard.name(), i, shards.len(), "dotprod", e))?;
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
            for (acc, x) in sum.iter_mut().zip(&b.part) {
                *acc += x;
            }
        }
    }
    let mut loss = 0.0f64;
    b.g_pos.clear();
    b.g_neg.clear();
    for &f in &b.f_pos {
        b.g_pos.push(positive_weight(alpha, f));
        loss += f64::from(neg_log_sigmoid(f));
    }
    for &f in &b.f_neg {
        b.g_neg.push(negative_weight(alpha, f));
        loss += f64::from(neg_log_sigmoid(-f));
    }
    let adj_req = AdjustRequest {
        batch: dot_req.batch,
        pos_weights: encode_f32(&b.g_pos),
        neg_weights: encode_f32(&b.g_neg),
    };
    sent += adj_req.encoded_len() as u64 * shards.len() as u64;
    let results = futures::future::join_all(shards.iter().map(|s| s.adjust(adj_req.clone()))).await;
    for (i, (shard, res)) in shards.iter().zip(results).enumerate() {
        res.map_err(|e| shard_error(shard.name(), i, shards.len(), "adjust", e))?;
    }
    progress.pairs.fetch_add(pairs as u64, Relaxed);
    progress.minibatches.fetch_add(1, Relaxed);
    progress.bytes_sent.fetch_add(sent, Relaxed);
    progress.bytes_received.fetch_add(received, Relaxed);
    if let Ok(mut r) = progress.recent.lock() {
        r.0 += loss;
        r.1 += pairs as u64;
    }
    Ok(())
}

/// Reports progress until training is done: a bar on a terminal, log lines otherwise.
pub async fn report(progress: Arc<Progress>, tokens_total: u64, interactive: bool) {
    let start = Instant::now();
    let bar = interactive.then(|| {
        let bar = indicatif::ProgressBar::new(tokens_total);
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
        let rate = tokens as f64 / start.elapsed().as_secs_f64().max(1e-9);
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
                bar.set_position(tokens);
                bar.set_message(msg);
            }
            None if last_log.elapsed() >= Duration::from_secs(10) => {
                last_log = Instant::now();
                let pct = 100.0 * tokens as f64 / tokens_total.max(1) as f64;
                let eta = if rate > 0.0 {
                    (tokens_total.saturating_sub(tokens)) as f64 / rate
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
            return;
        }
    }
}
