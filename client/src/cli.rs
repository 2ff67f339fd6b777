//! The `colonnade` command line: `vocab`, `train`, `export`. Flags follow
//! word2vec's names; every flag can also be set by a `COLONNADE_*` environment
//! variable (compose and Kubernetes set env most easily).

use crate::shards::{create_model, model_spec, EmbeddedCluster, GrpcShard};
use crate::train::{report, train, train_in_process, Progress, TrainParams, TrainSummary};
use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use colonnade_common::corpus::DEFAULT_MAX_SENTENCE;
use colonnade_common::vocab::{Counter, Vocab};
use colonnade_exporter::cli::{ExportArgs, OutputArgs};
use colonnade_exporter::{export, ShardHandle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "colonnade",
    version,
    about = "Train word2vec embeddings through column-partitioned parameter-server shards"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Count a corpus and write the vocabulary file.
    Vocab(VocabArgs),
    /// Train through PS shards (embedded or running) and export the vectors.
    Train(Box<TrainArgs>),
    /// Export a trained model from running shards.
    Export(ExportArgs),
    /// Probe shards with grpc.health.v1 (exit 0 when all are SERVING).
    Health(crate::health::HealthArgs),
    /// Evaluate vectors: analogies (3CosAdd, 3CosMul) and word-pair similarity.
    Eval(crate::eval::EvalArgs),
    /// Nearest neighbours of words by cosine over the whole vocabulary.
    Similar(crate::similar::SimilarArgs),
}

#[derive(Args, Debug)]
pub struct VocabArgs {
    /// Corpus files: whitespace-separated tokens, plain, .gz or .xz.
    #[arg(long, env = "COLONNADE_CORPUS", value_delimiter = ',', num_args = 1.., required = true)]
    pub corpus: Vec<PathBuf>,
    /// Discard words seen fewer times.
    #[arg(long, env = "COLONNADE_MIN_COUNT", default_value_t = 5)]
    pub min_count: u64,
    /// Keep at most this many of the most frequent words.
    #[arg(long, env = "COLONNADE_MAX_VOCAB")]
    pub max_vocab: Option<usize>,
    /// Vocabulary file to write (word<TAB>count).
    #[arg(long, env = "COLONNADE_VOCAB_OUTPUT")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Corpus files: whitespace-separated tokens, plain, .gz or .xz.
    #[arg(long, env = "COLONNADE_CORPUS", value_delimiter = ',', num_args = 1.., required = true)]
    pub corpus: Vec<PathBuf>,
    /// Run this many shards inside this process. Training calls them
    /// directly (no encoding, no sockets); export reads them over gRPC on
    /// loopback.
    #[arg(long, env = "COLONNADE_EMBEDDED_SHARDS", conflicts_with = "shards")]
    pub embedded_shards: Option<usize>,
    /// Train embedded shards through gRPC on loopback, as remote shards are
    /// (to measure or test the wire path on one machine).
    #[arg(long, env = "COLONNADE_EMBEDDED_GRPC", requires = "embedded_shards")]
    pub embedded_grpc: bool,
    /// Running shards, comma-separated host:port, in shard order.
    #[arg(long, env = "COLONNADE_SHARDS", value_delimiter = ',')]
    pub shards: Vec<String>,
    /// Load this vocabulary instead of counting the corpus.
    #[arg(long, env = "COLONNADE_VOCAB")]
    pub vocab: Option<PathBuf>,
    /// Write the vocabulary used here.
    #[arg(long, env = "COLONNADE_SAVE_VOCAB")]
    pub save_vocab: Option<PathBuf>,
    /// Vector dimension.
    #[arg(long, env = "COLONNADE_SIZE", default_value_t = 100)]
    pub size: u32,
    /// Maximum skip length between words.
    #[arg(long, env = "COLONNADE_WINDOW", default_value_t = 5)]
    pub window: u32,
    /// Negative examples per context word.
    #[arg(long, env = "COLONNADE_NEGATIVE", default_value_t = 5)]
    pub negative: u32,
    /// Discard words seen fewer times (when counting the corpus).
    #[arg(long, env = "COLONNADE_MIN_COUNT", default_value_t = 5)]
    pub min_count: u64,
    /// Keep at most this many of the most frequent words (when counting).
    #[arg(long, env = "COLONNADE_MAX_VOCAB")]
    pub max_vocab: Option<usize>,
    /// Subsampling threshold for frequent words (0 disables).
    #[arg(long, env = "COLONNADE_SAMPLE", default_value_t = 1e-3)]
    pub sample: f64,
    /// Starting learning rate.
    #[arg(long, env = "COLONNADE_ALPHA", default_value_t = 0.025)]
    pub alpha: f32,
    /// Training epochs.
    #[arg(long, env = "COLONNADE_ITER", default_value_t = 5)]
    pub iter: u32,
    /// Client threads (minibatch pipelines); default: available cores.
    #[arg(long, env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
    /// Minibatches each thread keeps in flight (shards reached over gRPC).
    #[arg(long, env = "COLONNADE_IN_FLIGHT", default_value_t = 2)]
    pub in_flight: usize,
    /// Input words per minibatch.
    #[arg(long, env = "COLONNADE_MINIBATCH", default_value_t = 256)]
    pub minibatch: usize,
    /// Run seed: initial vectors, subsampling, windows and negatives derive from it.
    #[arg(long, env = "COLONNADE_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Exponent of the unigram distribution for negatives.
    #[arg(long, env = "COLONNADE_SAMPLING_POWER", default_value_t = 0.75)]
    pub sampling_power: f32,
    /// This worker's index among --num-workers (each trains its own part of the corpus).
    #[arg(long, env = "COLONNADE_WORKER_INDEX", default_value_t = 0)]
    pub worker_index: u64,
    /// Number of client workers sharing the corpus.
    #[arg(long, env = "COLONNADE_NUM_WORKERS", default_value_t = 1)]
    pub num_workers: u64,
    /// How long to keep retrying unreachable shards.
    #[arg(long, env = "COLONNADE_CONNECT_TIMEOUT_SECS", default_value_t = 60)]
    pub connect_timeout_secs: u64,
    /// Write a JSON summary of the run here.
    #[arg(long, env = "COLONNADE_SUMMARY")]
    pub summary: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

pub fn run_vocab(args: &VocabArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let (vocab, _) = count_vocab(&args.corpus, args.min_count, args.max_vocab)?;
    vocab.save(&args.output)?;
    tracing::info!(
        words = vocab.len(),
        fingerprint = format!("{:016x}", vocab.fingerprint()),
        seconds = start.elapsed().as_secs_f64(),
        file = %args.output.display(),
        "vocabulary written"
    );
    Ok(())
}

/// Counts the corpus; returns the vocabulary and the corpus's token count.
fn count_vocab(
    corpus: &[PathBuf],
    min_count: u64,
    max_vocab: Option<usize>,
) -> anyhow::Result<(Vocab, u64)> {
    let mut counter = Counter::default();
    counter.count_files(corpus)?;
    let (tokens, distinct) = (counter.tokens, counter.distinct());
    let vocab = counter.into_vocab(min_count, max_vocab)?;
    if vocab.len() < 2 {
        bail!(
            "the vocabulary has {} word(s) with min-count {min_count}; training needs at least 2",
            vocab.len()
        );
    }
    tracing::info!(
        tokens,
        distinct,
        kept = vocab.len(),
        min_count,
        "corpus counted"
    );
    Ok((vocab, tokens))
}

pub async fn run_train(args: TrainArgs) -> anyhow::Result<TrainSummary> {
    validate(&args)?;
    for path in &args.corpus {
        std::fs::metadata(path).with_context(|| format!("corpus file {}", path.display()))?;
    }
    // Corpus tokens per epoch, for the progress display: counted when we
    // count; else the vocabulary's total (in-vocabulary words only).
    let (vocab, tokens_per_epoch) = match &args.vocab {
        Some(path) => {
            let vocab = Vocab::load(path)?;
            let total = vocab.total_count();
            (vocab, total)
        }
        None => tokio::task::block_in_place(|| {
            count_vocab(&args.corpus, args.min_count, args.max_vocab)
        })?,
    };
    if let Some(path) = &args.save_vocab {
        vocab.save(path)?;
    }
    let vocab = Arc::new(vocab);
    let threads = args.threads.unwrap_or_else(available_threads).max(1);
    let embedded = match args.embedded_shards {
        Some(n) => Some(EmbeddedCluster::start(n, threads).await?),
        None => None,
    };
    let endpoints = embedded
        .as_ref()
        .map_or_else(|| args.shards.clone(), EmbeddedCluster::endpoints);
    let timeout = Duration::from_secs(args.connect_timeout_secs);
    let mut shards = Vec::with_capacity(endpoints.len());
    for e in &endpoints {
        shards.push(GrpcShard::connect(e, timeout).await?);
    }
    let spec = model_spec(
        &vocab,
        args.size,
        args.negative,
        args.sampling_power,
        args.seed,
    );
    let fingerprint = create_model(&shards, &spec, &vocab).await?;
    tracing::info!(
        shards = shards.len(),
        words = vocab.len(),
        dim = args.size,
        fingerprint = format!("{fingerprint:016x}"),
        "model ready on every shard"
    );
    let in_process = embedded.is_some() && !args.embedded_grpc;
    let params = TrainParams {
        window: args.window,
        negative: args.negative,
        sample: args.sample,
        alpha: args.alpha,
        iter: args.iter,
        // In-process shards compute on the pipeline's own thread: one each.
        concurrency: if in_process {
            threads
        } else {
            threads * args.in_flight.max(1)
        },
        minibatch: args.minibatch,
        seed: args.seed,
        worker_index: args.worker_index,
        num_workers: args.num_workers,
        max_sentence: DEFAULT_MAX_SENTENCE,
    };
    let progress = Arc::new(Progress::default());
    let expected = u64::from(args.iter) * tokens_per_epoch / args.num_workers;
    let reporter = tokio::spawn(report(
        Arc::clone(&progress),
        expected,
        std::io::stderr().is_terminal(),
    ));
    let result = match embedded.as_ref().filter(|_| in_process) {
        Some(cluster) => {
            let models = cluster
                .shards
                .iter()
                .map(|s| s.core.model(fingerprint))
                .collect::<Result<Vec<_>, _>>()
                .context("embedded shard lost its model")?;
            train_in_process(
                models,
                Arc::clone(&vocab),
                args.corpus.clone(),
                params.clone(),
                Arc::clone(&progress),
            )
            .await
        }
        None => {
            train(
                shards,
                fingerprint,
                Arc::clone(&vocab),
                args.corpus.clone(),
                params.clone(),
                Arc::clone(&progress),
            )
            .await
        }
    };
    progress
        .done
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = reporter.await;
    let summary = result?;
    tracing::info!(
        words = summary.tokens,
        seconds = format!("{:.1}", summary.seconds),
        words_per_sec = format!("{:.0}", summary.tokens_per_second),
        trained_words = summary.trained_words,
        pairs = summary.pairs,
        loss = summary
            .final_loss
            .map(|l| format!("{l:.4}"))
            .unwrap_or_default(),
        "training done"
    );
    eprintln!(
        "trained {} words ({} epochs) in {:.1} s: {:.0} words/s",
        summary.tokens, args.iter, summary.seconds, summary.tokens_per_second
    );
    if args.out.any() {
        let start = Instant::now();
        let mut handles = Vec::with_capacity(endpoints.len());
        for (i, e) in endpoints.iter().enumerate() {
            let cols =
                colonnade_common::model::column_range(args.size, endpoints.len() as u32, i as u32);
            let client = colonnade_proto::connect(e).await?;
            handles.push(ShardHandle {
                endpoint: e.clone(),
                client,
                col_start: cols.start,
                col_end: cols.end,
            });
        }
        let attrs = attributes(
            &args,
            &params,
            fingerprint,
            &vocab,
            &summary,
            endpoints.len(),
        );
        let out = export(
            &mut handles,
            fingerprint,
            &vocab,
            args.size,
            &args.out.options(attrs),
        )
        .await?;
        for f in &out.files {
            tracing::info!(file = %f.display(), rows = out.rows, dim = out.dim, seconds = start.elapsed().as_secs_f64(), "written");
        }
    }
    if let Some(path) = &args.summary {
        let json = serde_json::to_string_pretty(&summary).context("summary")?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(cluster) = embedded {
        cluster.stop().await;
    }
    Ok(summary)
}

fn validate(args: &TrainArgs) -> anyhow::Result<()> {
    let shard_count = match (args.embedded_shards, args.shards.len()) {
        (Some(0), _) => bail!("--embedded-shards must be at least 1"),
        (Some(n), _) => n,
        (None, 0) => bail!("give --embedded-shards N or --shards host:port,..."),
        (None, n) => n,
    };
    if args.size == 0 || (args.size as usize) < shard_count {
        bail!(
            "--size {} must be at least the number of shards ({shard_count})",
            args.size
        );
    }
    if args.window == 0 {
        bail!("--window must be at least 1");
    }
    if args.negative == 0 {
        bail!("--negative must be at least 1 (hierarchical softmax is not supported)");
    }
    if !(args.alpha.is_finite() && args.alpha > 0.0) {
        bail!("--alpha must be a positive number, got {}", args.alpha);
    }
    if !(args.sample.is_finite() && args.sample >= 0.0) {
        bail!("--sample must be 0 or positive, got {}", args.sample);
    }
    if args.iter == 0 {
        bail!("--iter must be at least 1");
    }
    if args.minibatch == 0 {
        bail!("--minibatch must be at least 1");
    }
    if args.num_workers == 0 || args.worker_index >= args.num_workers {
        bail!(
            "--worker-index {} must be below --num-workers {}",
            args.worker_index,
            args.num_workers
        );
    }
    Ok(())
}

fn attributes(
    args: &TrainArgs,
    params: &TrainParams,
    fingerprint: u64,
    vocab: &Vocab,
    summary: &TrainSummary,
    shards: usize,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("colonnade_version".into(), env!("CARGO_PKG_VERSION").into());
    m.insert(
        "model_fingerprint".into(),
        format!("{fingerprint:016x}").into(),
    );
    m.insert(
        "vocab_fingerprint".into(),
        format!("{:016x}", vocab.fingerprint()).into(),
    );
    m.insert("dim".into(), args.size.into());
    m.insert("window".into(), args.window.into());
    m.insert("negative".into(), args.negative.into());
    m.insert("min_count".into(), args.min_count.into());
    m.insert("sample".into(), args.sample.into());
    m.insert("alpha".into(), f64::from(args.alpha).into());
    m.insert("iter".into(), args.iter.into());
    m.insert("minibatch".into(), (args.minibatch as u64).into());
    m.insert("seed".into(), args.seed.into());
    m.insert("init_seed".into(), args.seed.into());
    m.insert(
        "sampling_power".into(),
        f64::from(args.sampling_power).into(),
    );
    m.insert("shards".into(), (shards as u64).into());
    m.insert("train_words".into(), summary.tokens.into());
    m.insert("train_seconds".into(), summary.seconds.into());
    let config = serde_json::json!({ "params": params, "corpus": args.corpus, "summary": summary });
    m.insert("config_json".into(), config.to_string().into());
    m
}
