//! The `colonnade` command line: `vocab`, `train`, `export`. Flags follow
//! word2vec's names; every flag can also be set by a `COLONNADE_*` environment
//! variable (compose and Kubernetes set env most easily).

use crate::preflight::{available_memory, check_corpus, embedded_bytes, human_bytes, shard_bytes};
use crate::recovery::{recoverable, Cluster, GrpcCheckpointer, Session};
use crate::shards::{
    connect_all, create_model, model_spec, EmbeddedCluster, GrpcShard, GrpcShards,
};
use crate::stream::{GraphSource, Source};
use crate::train::{report, train, NoCheckpoints, Progress, Tracker, TrainParams, TrainSummary};
use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use colonnade_common::corpus::{InvalidUtf8, DEFAULT_MAX_SENTENCE};
use colonnade_common::count::CountOptions;
use colonnade_common::vocab::{Vocab, VocabCounts, VocabWriter};
use colonnade_common::words::WordTable;
use colonnade_exporter::cli::{ExportArgs, OutputArgs};
use colonnade_exporter::outputs::{check_outputs, FlagPath};
use colonnade_exporter::{export, ShardHandle};
use colonnade_graph::walk::{WalkParams, Walks};
use colonnade_graph::Graph;
use colonnade_ps_shard::InProcessShards;
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
    #[command(flatten)]
    pub log: colonnade_common::config::LogArgs,
    #[command(flatten)]
    pub auth: colonnade_common::config::AuthArgs,
    #[command(flatten)]
    pub tls: colonnade_common::config::ClientTlsArgs,
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
    /// Evaluate vectors: analogies (3CosAdd, 3CosMul), word-pair similarity, node classification.
    Eval(colonnade_eval::evaluate::EvalArgs),
    /// Nearest neighbours of words by cosine over the whole vocabulary.
    Similar(colonnade_eval::similar::SimilarArgs),
    /// List the models running shards hold, or drop one.
    Models(crate::models::ModelsArgs),
    /// Make a cluster's secrets: a private CA, the shards' and clients'
    /// certificates, and the bearer token (files, and a Kubernetes Secret).
    Certs(crate::certs::CertsArgs),
    /// Turn a text corpus into word ids of a vocabulary, in parts, once:
    /// workers then read their own parts and hold no word map.
    Encode(crate::encode::EncodeArgs),
    /// Write a synthetic large-vocabulary corpus: a Zipf head, a long rare
    /// tail, and planted groups of co-occurring words (`eval --groups`).
    Synth(crate::synth::SynthArgs),
}

#[derive(Args, Debug)]
pub struct VocabArgs {
    /// Corpus files: whitespace-separated UTF-8 tokens, plain or compressed
    /// with gzip, xz, zstd or bzip2 (detected from the content).
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
    /// What to do with a sentence holding invalid UTF-8: skip it or abort.
    #[arg(long, env = "COLONNADE_INVALID_UTF8", value_enum, default_value_t = InvalidUtf8Arg::Skip, long_help = INVALID_UTF8_HELP)]
    pub invalid_utf8: InvalidUtf8Arg,
    #[command(flatten)]
    pub count: CountArgs,
}

/// How a corpus is counted: threads, memory, where the spills go.
#[derive(Args, Debug, Clone)]
pub struct CountArgs {
    /// Memory the counting tables may take (e.g. 4G, 512M; binary units).
    /// Past it, sorted runs of counts are spilled to --spill-dir and merged
    /// at the end: the counts stay exact. Default: half the memory this
    /// process may use (its cgroup's limit, else the machine's).
    #[arg(long, env = "COLONNADE_MEMORY_BUDGET", value_parser = parse_bytes)]
    pub memory_budget: Option<u64>,
    /// Directory for the spilled runs (a temporary directory is made in it
    /// and removed at the end). Default: the system's temporary directory.
    #[arg(long, env = "COLONNADE_SPILL_DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Counting threads (the corpus is read on one more). Default: the
    /// available cores.
    #[arg(long, env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
}

/// A size in bytes: `4G`, `512MiB`, `1.5G`, `1000000` (K, M, G, T are 1024-based).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|e| format!("{e} (e.g. 4G, 512M, 1000000)"))
}

const INVALID_UTF8_HELP: &str = "What to do with a sentence (a line, or a 10,000-token \
piece of a longer line) that holds invalid UTF-8. `skip` (the default) leaves the sentence \
out of the vocabulary count and of training alike, logs the first few with file, line and \
byte offset, and reports how many were skipped at the end (and in train's --summary as \
`invalid_utf8_sentences_skipped`). `abort` stops at the first one with that error. Skip is \
the default because one bad byte in a large corpus (a truncated download, a stray Latin-1 \
line) should cost that sentence, not a run that has trained for hours; choose abort to \
insist on a clean corpus. Give `vocab` and `train` the same policy.";

/// `--invalid-utf8`: [`InvalidUtf8`] as a command-line value.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidUtf8Arg {
    Skip,
    Abort,
}

impl From<InvalidUtf8Arg> for InvalidUtf8 {
    fn from(a: InvalidUtf8Arg) -> Self {
        match a {
            InvalidUtf8Arg::Skip => Self::Skip,
            InvalidUtf8Arg::Abort => Self::Abort,
        }
    }
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Corpus files: whitespace-separated UTF-8 tokens, plain or compressed
    /// with gzip, xz, zstd or bzip2 (detected from the content).
    #[arg(long, env = "COLONNADE_CORPUS", value_delimiter = ',', num_args = 1.., required_unless_present_any = ["graph", "encoded"])]
    pub corpus: Vec<PathBuf>,
    /// Train on an encoded corpus (`colonnade encode`): word ids of the
    /// --vocab it was made with, in parts; worker i of --num-workers M
    /// reads parts i, i+M, ... only, and holds no word map. With one worker
    /// it trains exactly as the text it was made from.
    #[arg(long, env = "COLONNADE_ENCODED", conflicts_with_all = ["corpus", "graph"], requires = "vocab")]
    pub encoded: Option<PathBuf>,
    #[command(flatten)]
    pub graph: GraphArgs,
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
    /// Negative examples per context word (CBOW: per input position).
    #[arg(long, env = "COLONNADE_NEGATIVE", default_value_t = 5)]
    pub negative: u32,
    /// Train CBOW (word2vec's -cbow 1, gensim's sg=0 with cbow_mean=1): the
    /// mean of a position's context words' input vectors predicts its word,
    /// instead of skip-gram. The shards average their own columns, so only
    /// dot products and weights cross the wire, one set per position. Part
    /// of the model's identity (its fingerprint).
    #[arg(long, env = "COLONNADE_CBOW")]
    pub cbow: bool,
    /// Discard words seen fewer times (when counting the corpus; with
    /// --graph, nodes seen fewer times in the walks) [default: 5; 1 with
    /// --graph, so every node gets a vector].
    #[arg(long, env = "COLONNADE_MIN_COUNT")]
    pub min_count: Option<u64>,
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
    /// Training threads of this process (word2vec's -threads, gensim's
    /// `workers`): minibatch pipelines, and the compute threads of embedded
    /// shards. Default: available cores.
    #[arg(long, env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
    /// Calls each thread keeps in flight (shards reached over gRPC).
    #[arg(long, env = "COLONNADE_IN_FLIGHT", default_value_t = 2)]
    pub in_flight: usize,
    /// Minibatches per call (shards reached over gRPC): independent
    /// minibatches, each its own update, sent in one dotprod and one adjust
    /// so that per-call costs are paid once for all of them. Minibatches in
    /// flight per worker: threads × --in-flight × this. Default: the most
    /// (up to 4) that keeps all --num-workers workers together at or under
    /// 16 in flight; on part 01, 32 in flight diverged (docs/benchmarks.md).
    #[arg(long, env = "COLONNADE_MINIBATCHES_PER_CALL", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub minibatches_per_call: Option<u32>,
    /// Input words per minibatch.
    #[arg(long, env = "COLONNADE_MINIBATCH", default_value_t = 256)]
    pub minibatch: usize,
    /// Run seed: initial vectors, subsampling, windows and negatives derive from it.
    #[arg(long, env = "COLONNADE_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Exponent of the unigram distribution for negatives.
    #[arg(long, env = "COLONNADE_SAMPLING_POWER", default_value_t = 0.75)]
    pub sampling_power: f32,
    /// This process's index among the --num-workers client processes
    /// (0, 1, ..., --num-workers minus 1): it trains the sentences whose
    /// index modulo --num-workers equals it.
    #[arg(long, env = "COLONNADE_WORKER_INDEX", default_value_t = 0)]
    pub worker_index: u64,
    /// Number of separate `colonnade train` processes (M) training one model
    /// on running --shards together, each given its own --worker-index and
    /// the same --vocab; each trains 1/M of the corpus. Not gensim's
    /// `workers` (that is --threads).
    #[arg(long, env = "COLONNADE_NUM_WORKERS", default_value_t = 1)]
    pub num_workers: u64,
    /// Not a Colonnade flag: refused with a message pointing to --threads
    /// (gensim's `workers`) and --num-workers.
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "", allow_hyphen_values = true)]
    pub workers: Option<String>,
    /// How long to keep retrying unreachable shards.
    #[arg(long, env = "COLONNADE_CONNECT_TIMEOUT_SECS", default_value_t = 60)]
    pub connect_timeout_secs: u64,
    /// Seconds between checkpoints of the model on the shards (running
    /// shards started with --data-dir). Default: 300 when every shard keeps
    /// a data dir, else off; 0 turns them off.
    #[arg(long, env = "COLONNADE_CHECKPOINT_INTERVAL")]
    pub checkpoint_interval: Option<u64>,
    /// How long training keeps retrying when shards fail (unreachable,
    /// restarting, not answering) before it gives up; backoff doubles up to
    /// 5 s between tries.
    #[arg(long, env = "COLONNADE_RETRY_TIMEOUT", default_value_t = 600)]
    pub retry_timeout: u64,
    /// Deadline of each training call to a shard, in seconds: a shard that
    /// does not answer within it is treated as failed.
    #[arg(long, env = "COLONNADE_CALL_TIMEOUT", default_value_t = 30)]
    pub call_timeout: u64,
    /// Start the model afresh even if the shards hold a checkpoint of it
    /// (by default training resumes from the newest checkpoint): every shard
    /// is rolled back to the initial state and its checkpoints removed.
    #[arg(long, env = "COLONNADE_RESTART")]
    pub restart: bool,
    /// Write a JSON summary of the run here.
    #[arg(long, env = "COLONNADE_SUMMARY")]
    pub summary: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP on this address while training
    /// (e.g. 0.0.0.0:9101): words trained and words/s, loss, learning rate,
    /// epoch, progress, calls and their latency and errors, retries and
    /// recoveries, bytes on the wire.
    #[arg(long, env = "COLONNADE_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// What to do with a sentence holding invalid UTF-8: skip it or abort.
    #[arg(long, env = "COLONNADE_INVALID_UTF8", value_enum, default_value_t = InvalidUtf8Arg::Skip, long_help = INVALID_UTF8_HELP)]
    pub invalid_utf8: InvalidUtf8Arg,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl TrainArgs {
    /// --min-count, or its default: 5 for text, 1 for a graph's nodes.
    pub fn min_count(&self) -> u64 {
        self.min_count
            .unwrap_or(if self.graph.graph.is_some() { 1 } else { 5 })
    }
}

/// `colonnade train --graph`: random walks over a graph as the corpus.
#[derive(Args, Debug, Clone)]
pub struct GraphArgs {
    /// Train on random walks over this graph instead of a text corpus
    /// (DeepWalk; node2vec with --p/--q): an edge list, one `u v` or
    /// `u v weight` line per edge, node ids any strings, plain or
    /// compressed. Walks are generated from --seed while training, no walk
    /// file is needed; the vocabulary is the nodes, counted in the walks;
    /// the node ids are the words of the outputs.
    #[arg(long, env = "COLONNADE_GRAPH", conflicts_with_all = ["corpus", "vocab"])]
    pub graph: Option<PathBuf>,
    /// Walks started at every node in each epoch [default: 10].
    #[arg(long, env = "COLONNADE_WALKS_PER_NODE", requires = "graph")]
    pub walks_per_node: Option<u32>,
    /// Nodes per walk, the start included [default: 40].
    #[arg(long, env = "COLONNADE_WALK_LENGTH", requires = "graph")]
    pub walk_length: Option<u32>,
    /// node2vec's return parameter: a step back to the previous node weighs
    /// 1/p [default: 1].
    #[arg(long, env = "COLONNADE_P", requires = "graph")]
    pub p: Option<f32>,
    /// node2vec's in-out parameter: a step to a node not adjacent to the
    /// previous one weighs 1/q [default: 1].
    #[arg(long, env = "COLONNADE_Q", requires = "graph")]
    pub q: Option<f32>,
    /// The edge list's edges are directed (`u v` is u -> v only); walks end
    /// at nodes with no out-edges.
    #[arg(long, env = "COLONNADE_DIRECTED", requires = "graph")]
    pub directed: bool,
    /// Also write the first epoch's walks here, one per line, node ids
    /// separated by spaces (to feed the same walks to another tool).
    #[arg(long, env = "COLONNADE_SAVE_WALKS", requires = "graph")]
    pub save_walks: Option<PathBuf>,
}

impl GraphArgs {
    pub fn walk_params(&self) -> WalkParams {
        WalkParams {
            walks_per_node: self.walks_per_node.unwrap_or(10),
            walk_length: self.walk_length.unwrap_or(40),
            p: self.p.unwrap_or(1.0),
            q: self.q.unwrap_or(1.0),
        }
    }
}

/// Loads the graph, counts its nodes in the first epoch's walks and builds
/// the vocabulary from those counts; writes --save-walks.
fn graph_source(
    path: &std::path::Path,
    g: &GraphArgs,
    seed: u64,
    min_count: u64,
    max_vocab: Option<usize>,
) -> anyhow::Result<(Vocab, Source)> {
    let start = Instant::now();
    let graph = Graph::load(path, g.directed)?;
    let stats = graph.stats();
    tracing::info!(
        file = %path.display(),
        nodes = graph.nodes(),
        edges = stats.edges,
        self_loops_left_out = stats.self_loops,
        weighted = stats.weighted,
        directed = g.directed,
        layout = %human_bytes(graph.layout_bytes()),
        seconds = format!("{:.2}", start.elapsed().as_secs_f64()),
        "graph loaded"
    );
    let walks = g.walk_params();
    let start = Instant::now();
    let counts = Walks::new(&graph, walks, seed).count(0);
    let tokens: u64 = counts.iter().sum();
    let pairs = graph
        .names()
        .iter()
        .zip(&counts)
        .filter(|&(_, &c)| c >= min_count.max(1))
        .map(|(n, &c)| (n.clone(), c))
        .collect();
    let vocab = Vocab::from_pairs(pairs, max_vocab)?;
    if vocab.len() < 2 {
        bail!(
            "{}: {} node(s) occur at least --min-count {min_count} times in the walks; training needs at least 2",
            path.display(),
            vocab.len()
        );
    }
    tracing::info!(
        walks = u64::from(walks.walks_per_node) * graph.nodes() as u64,
        tokens,
        kept = vocab.len(),
        min_count,
        seconds = format!("{:.2}", start.elapsed().as_secs_f64()),
        "walks counted"
    );
    let vocab_ids = graph
        .names()
        .iter()
        .map(|n| vocab.id(n).unwrap_or(u32::MAX))
        .collect();
    let source = Arc::new(GraphSource {
        graph,
        walks,
        seed,
        vocab_ids,
    });
    if let Some(out) = &g.save_walks {
        save_walks(&source, out)?;
    }
    let counts = vocab.counts_only();
    Ok((vocab, Source::Walks(source, counts)))
}

/// Writes the first epoch's walks, one per line, node ids by name.
fn save_walks(source: &GraphSource, path: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let file = fs_err::File::create(path)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let names = source.graph.names();
    source
        .walks()
        .for_each(
            0,
            |_| true,
            |_, walk| {
                let mut sep = "";
                for &v in walk {
                    write!(out, "{sep}{}", names[v as usize])?;
                    sep = " ";
                }
                writeln!(out)?;
                Ok::<_, std::io::Error>(true)
            },
        )
        .and_then(|_| out.flush())
        .with_context(|| format!("cannot write --save-walks {}", path.display()))?;
    Ok(())
}

fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

pub fn run_vocab(args: &VocabArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let inputs: Vec<_> = args
        .corpus
        .iter()
        .map(|p| FlagPath::new("--corpus", p))
        .collect();
    check_outputs(&inputs, &[FlagPath::new("--output", &args.output)])?;
    let counted = count_corpus(&args.corpus, &args.count, args.invalid_utf8.into())?;
    let (tokens, spills) = (counted.tokens, counted.spills);
    let mut writer = VocabWriter::create(&args.output)?;
    let stats = counted.vocabulary(args.min_count, args.max_vocab, |w, c| {
        writer.push(w, c).map_err(|e| e.to_string())
    })?;
    if stats.kept < 2 {
        return Err(too_few_words(stats.kept, stats.distinct, args.min_count));
    }
    let (words, fingerprint) = writer.finish()?;
    tracing::info!(
        tokens,
        distinct = stats.distinct,
        words,
        min_count = args.min_count,
        spills,
        sort_spills = stats.sort_spills,
        fingerprint = format!("{fingerprint:016x}"),
        seconds = start.elapsed().as_secs_f64(),
        file = %args.output.display(),
        "vocabulary written"
    );
    Ok(())
}

/// Counts the corpus in the memory budget of `count`, showing progress: a
/// spinner on a terminal, a log line every 10 s otherwise.
fn count_corpus(
    corpus: &[PathBuf],
    count: &CountArgs,
    invalid_utf8: InvalidUtf8,
) -> anyhow::Result<colonnade_common::count::Counted> {
    let budget = count
        .memory_budget
        .unwrap_or_else(|| available_memory().map_or(2 << 30, |(bytes, _)| bytes / 2));
    let options = CountOptions {
        threads: count.threads.unwrap_or_else(available_threads).max(1),
        memory_budget: budget,
        spill_dir: count.spill_dir.clone(),
        invalid_utf8,
        max_sentence: DEFAULT_MAX_SENTENCE,
    };
    tracing::info!(
        threads = options.threads,
        memory_budget = %human_bytes(budget),
        "counting the corpus"
    );
    let start = Instant::now();
    let bar = colonnade_common::config::log_colours().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let mut last_log = Instant::now();
    let counted = colonnade_common::count::count(corpus, &options, |p| {
        let rate = p.tokens as f64 / start.elapsed().as_secs_f64().max(1e-9);
        let msg = format!("counting: {} tokens, {rate:.0} tokens/s", p.tokens);
        match &bar {
            Some(bar) => bar.set_message(msg),
            None if last_log.elapsed() >= Duration::from_secs(10) => {
                last_log = Instant::now();
                tracing::info!("{msg}");
            }
            None => {}
        }
    })?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let skipped = counted.skipped_sentences;
    if skipped > 0 {
        tracing::warn!(
            "skipped {skipped} sentence(s) holding invalid UTF-8 while counting the corpus: \
             their words are not counted (or trained); --invalid-utf8 abort stops at the first instead"
        );
    }
    tracing::info!(
        tokens = counted.tokens,
        spills = counted.spills,
        tables = %human_bytes(counted.table_bytes()),
        seconds = format!("{:.1}", start.elapsed().as_secs_f64()),
        "corpus counted"
    );
    Ok(counted)
}

/// Counts the corpus; returns the vocabulary and the corpus's token count.
/// The error for a vocabulary of fewer than 2 words after `--min-count`.
fn too_few_words(kept: u64, distinct: u64, min_count: u64) -> anyhow::Error {
    let what = if kept == 0 {
        "is empty".to_owned()
    } else {
        format!("has {kept} word")
    };
    anyhow::anyhow!(
        "the vocabulary {what} after applying min-count {min_count} (the corpus has {distinct} \
         distinct words); training needs at least 2: lower --min-count or give a larger corpus"
    )
}

fn count_vocab(
    corpus: &[PathBuf],
    min_count: u64,
    max_vocab: Option<usize>,
    invalid_utf8: InvalidUtf8,
    count: &CountArgs,
) -> anyhow::Result<(Vocab, u64)> {
    let counted = count_corpus(corpus, count, invalid_utf8)?;
    let tokens = counted.tokens;
    let mut words = WordTable::default();
    let mut counts = Vec::new();
    let stats = counted.vocabulary(min_count, max_vocab, |w, c| {
        let _ = words.push(w);
        counts.push(c);
        Ok(())
    })?;
    let vocab = Vocab::from_ordered(words, counts)?;
    if vocab.len() < 2 {
        return Err(too_few_words(vocab.len() as u64, stats.distinct, min_count));
    }
    tracing::info!(
        tokens,
        distinct = stats.distinct,
        kept = vocab.len(),
        min_count,
        "vocabulary built"
    );
    Ok((vocab, tokens))
}

/// Minibatches in flight across all workers of a model up to which quality
/// held on part 01 (16 trained as well as 1; 32 and 64 diverged in the first
/// epoch): the default of --minibatches-per-call keeps under it.
pub const MAX_SAFE_IN_FLIGHT: u64 = 16;

/// `--minibatches-per-call`: as given, else the most up to 4 that keeps the
/// `workers` workers' `calls` calls each at or under [`MAX_SAFE_IN_FLIGHT`]
/// minibatches in flight (at least 1). Warns when the total exceeds it.
fn minibatches_per_call(given: Option<u32>, calls: usize, workers: u64) -> usize {
    let calls_total = (calls as u64).max(1) * workers.max(1);
    let per_call = match given {
        Some(n) => u64::from(n),
        None => (MAX_SAFE_IN_FLIGHT / calls_total).clamp(1, 4),
    };
    let in_flight = per_call * calls_total;
    if in_flight > MAX_SAFE_IN_FLIGHT {
        tracing::warn!(
            in_flight,
            workers,
            minibatches_per_call = per_call,
            "{in_flight} minibatches in flight across the workers (threads x --in-flight x \
             --minibatches-per-call x --num-workers): on part 01 more than {MAX_SAFE_IN_FLIGHT} \
             diverged; lower --in-flight or --threads if training stops with a divergence error"
        );
    }
    per_call as usize
}

pub async fn run_train(args: TrainArgs) -> anyhow::Result<TrainSummary> {
    // Everything that can be checked without reading the corpus is checked
    // first: flags, corpus files, outputs, then the running shards.
    validate(&args)?;
    if args.graph.graph.is_none() && args.encoded.is_none() {
        check_corpus(&args.corpus, args.vocab.is_some(), args.iter)?;
    }
    if let Some(dir) = &args.encoded {
        crate::encode::check_workers(dir, args.num_workers)?;
    }
    check_train_outputs(&args)?;
    let timeout = Duration::from_secs(args.connect_timeout_secs);
    let remote = if args.embedded_shards.is_none() {
        connect_all(&args.shards, timeout).await?
    } else {
        Vec::new()
    };
    // The words (None for an encoded corpus: training needs only counts),
    // the counts and what the sentences come from.
    let (words, source): (Option<Arc<Vocab>>, Source) =
        match (&args.graph.graph, &args.encoded, &args.vocab) {
            (Some(graph), _, _) => {
                let (vocab, source) = tokio::task::block_in_place(|| {
                    graph_source(
                        graph,
                        &args.graph,
                        args.seed,
                        args.min_count(),
                        args.max_vocab,
                    )
                })?;
                (Some(Arc::new(vocab)), source)
            }
            (None, Some(dir), Some(path)) => {
                let counts = Arc::new(tokio::task::block_in_place(|| VocabCounts::load(path))?);
                let encoded = crate::encode::open_for_training(dir, &counts)?;
                (None, Source::Encoded(encoded, counts))
            }
            (None, _, Some(path)) => {
                let vocab = Arc::new(tokio::task::block_in_place(|| Vocab::load(path))?);
                let source = Source::Text(args.corpus.clone(), Arc::clone(&vocab));
                (Some(vocab), source)
            }
            (None, _, None) => {
                let count = CountArgs {
                    memory_budget: None,
                    spill_dir: None,
                    threads: args.threads,
                };
                let (vocab, _) = tokio::task::block_in_place(|| {
                    count_vocab(
                        &args.corpus,
                        args.min_count(),
                        args.max_vocab,
                        args.invalid_utf8.into(),
                        &count,
                    )
                })?;
                let vocab = Arc::new(vocab);
                let source = Source::Text(args.corpus.clone(), Arc::clone(&vocab));
                (Some(vocab), source)
            }
        };
    if let (Some(path), Some(words)) = (&args.save_vocab, &words) {
        words.save(path)?;
    }
    let vocab = source.counts();
    let mut spec = model_spec(
        &vocab,
        args.size,
        args.negative,
        args.sampling_power,
        args.seed,
    );
    spec.cbow = args.cbow;
    let shard_count = args.embedded_shards.unwrap_or(remote.len());
    check_memory(&spec, shard_count, args.embedded_shards.is_some())?;
    let threads = args.threads.unwrap_or_else(available_threads).max(1);
    let embedded = match args.embedded_shards {
        Some(n) => Some(EmbeddedCluster::start(n, threads).await?),
        None => None,
    };
    let (endpoints, shards) = match &embedded {
        Some(cluster) => {
            let endpoints = cluster.endpoints();
            let shards = connect_all(&endpoints, timeout).await?;
            (endpoints, shards)
        }
        None => (args.shards.clone(), remote),
    };
    let fingerprint = create_retrying(&shards, &spec, &vocab, args.retry_timeout).await?;
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
        minibatches_per_call: if in_process {
            1
        } else {
            minibatches_per_call(
                args.minibatches_per_call,
                threads * args.in_flight.max(1),
                args.num_workers,
            )
        },
        minibatch: args.minibatch,
        seed: args.seed,
        worker_index: args.worker_index,
        num_workers: args.num_workers,
        max_sentence: DEFAULT_MAX_SENTENCE,
        invalid_utf8: args.invalid_utf8.into(),
        cbow: args.cbow,
    };
    let progress = Arc::new(Progress::default());
    if let Some(addr) = args.metrics_listen {
        colonnade_common::config::serve_metrics(addr).map_err(anyhow::Error::msg)?;
    }
    // In-vocabulary words this worker reads over all epochs: what the
    // progress display counts (out-of-vocabulary tokens are not in it).
    let expected = u64::from(args.iter)
        * source
            .words_of(args.worker_index, args.num_workers)
            .unwrap_or(vocab.total_count() / args.num_workers);
    let reporter = tokio::spawn(report(
        Arc::clone(&progress),
        expected,
        std::io::stderr().is_terminal(),
    ));
    let result = match embedded.as_ref().filter(|_| in_process) {
        Some(cluster) => {
            let cores: Vec<_> = cluster.shards.iter().map(|s| Arc::clone(&s.core)).collect();
            let shards = InProcessShards::new(&cores, fingerprint)?;
            train(
                shards,
                Arc::clone(&vocab),
                source,
                params.clone(),
                Arc::clone(&progress),
                Arc::default(),
                NoCheckpoints,
            )
            .await
        }
        None => {
            let cluster = Cluster {
                shards,
                spec: spec.clone(),
                vocab: Arc::clone(&vocab),
                fingerprint,
                worker: args.worker_index,
                num_workers: args.num_workers,
            };
            train_over_grpc(&args, &cluster, source, &params, &progress).await
        }
    };
    progress.finish();
    let reached = reporter.await.ok();
    let mut summary = result?;
    summary.progress_reached = reached;
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
    if summary.invalid_utf8_sentences_skipped > 0 {
        eprintln!(
            "skipped {} sentence(s) holding invalid UTF-8 (--invalid-utf8 skip; the warnings above name the first)",
            summary.invalid_utf8_sentences_skipped
        );
    }
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
        let provenance = attributes(
            &args,
            &params,
            &spec,
            fingerprint,
            &summary,
            endpoints.len(),
        );
        // An encoded corpus trained without the words: read them now.
        let words = match (words, &args.vocab) {
            (Some(w), _) => w,
            (None, Some(path)) => Arc::new(tokio::task::block_in_place(|| Vocab::load(path))?),
            (None, None) => bail!("no vocabulary to export the words of"),
        };
        let out = export(
            &mut handles,
            fingerprint,
            &words,
            args.size,
            &args.out,
            &provenance,
        )
        .await?;
        for f in &out.files {
            tracing::info!(file = %f.display(), rows = out.rows, dim = out.dim, seconds = start.elapsed().as_secs_f64(), "written");
        }
    }
    if let Some(path) = &args.summary {
        let json = serde_json::to_string_pretty(&summary).context("summary")?;
        fs_err::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(cluster) = embedded {
        cluster.stop().await;
    }
    Ok(summary)
}

/// Trains through shards over gRPC, surviving their loss: agrees with the
/// shards on one state of the model (resuming from the newest checkpoint),
/// takes checkpoints while training, and on a failure that can pass
/// (a shard unreachable, restarting, not answering) reconciles again and
/// goes on from the position the agreed state holds.
async fn train_over_grpc(
    args: &TrainArgs,
    cluster: &Cluster,
    source: Source,
    params: &TrainParams,
    progress: &Arc<Progress>,
) -> anyhow::Result<TrainSummary> {
    use std::sync::atomic::Ordering::Relaxed;
    let start = Instant::now();
    let retry = Duration::from_secs(args.retry_timeout);
    let mut session = cluster.reconcile(args.restart, None, false, retry).await?;
    let interval = match args.checkpoint_interval {
        Some(0) => None,
        Some(s) if !session.persistent => bail!(
            "--checkpoint-interval {s}: not every shard keeps checkpoints; start each \
             ps-shard with --data-dir DIR (or give --checkpoint-interval 0)"
        ),
        Some(s) => Some(Duration::from_secs(s)),
        None => session.persistent.then(|| Duration::from_secs(300)),
    };
    let resumed_from = session.version;
    let resumed_tokens = session.position.tokens;
    if session.version > 0 {
        let msg = format!(
            "resuming from checkpoint version {} of the model: worker {} at job {} ({} words of its part read{}); give --restart to start afresh",
            session.version,
            args.worker_index,
            session.position.jobs,
            session.position.words,
            if session.finished { ", its part finished" } else { "" }
        );
        tracing::info!("{msg}");
        eprintln!("{msg}");
    }
    let (mut recoveries, mut words_retrained) = (0u64, 0u64);
    let mut checkpointer: Option<GrpcCheckpointer> = None;
    let mut finish_deadline: Option<Instant> = None;
    let summary = loop {
        let tracker = Arc::new(Tracker::new(session.position));
        progress.tokens.store(session.position.tokens, Relaxed);
        progress.words.store(session.position.words, Relaxed);
        progress
            .trained_words
            .store(session.position.trained_words, Relaxed);
        let shards = GrpcShards::new(cluster.shards.clone(), cluster.fingerprint, args.negative)
            .with_lineage(session.lineage)
            .with_timeout(Duration::from_secs(args.call_timeout.max(1)));
        let ckpt = interval.map(|i| {
            GrpcCheckpointer::new(
                cluster.shards.clone(),
                cluster.fingerprint,
                session.lineage,
                args.worker_index,
                args.num_workers,
                i,
                session.version,
                shards.checkpoint_pending(),
            )
        });
        let result = if session.finished {
            Ok(None)
        } else {
            let run = match ckpt.clone() {
                Some(c) => {
                    train(
                        shards,
                        Arc::clone(&cluster.vocab),
                        source.clone(),
                        params.clone(),
                        Arc::clone(progress),
                        Arc::clone(&tracker),
                        c,
                    )
                    .await
                }
                None => {
                    train(
                        shards,
                        Arc::clone(&cluster.vocab),
                        source.clone(),
                        params.clone(),
                        Arc::clone(progress),
                        Arc::clone(&tracker),
                        NoCheckpoints,
                    )
                    .await
                }
            };
            run.map(Some)
        };
        if let Some(c) = &ckpt {
            let taken = checkpointer.as_ref().map_or(0, |p| p.taken.load(Relaxed));
            c.taken.fetch_add(taken, Relaxed);
            c.pause_max.fetch_max(
                checkpointer
                    .as_ref()
                    .map_or(0, |p| p.pause_max.load(Relaxed)),
                Relaxed,
            );
            checkpointer = Some(c.clone());
        }
        match result {
            Ok(summary) => {
                let position = summary.as_ref().map_or(session.position, |s| s.position);
                let Some(c) = checkpointer.as_ref().filter(|_| !session.finished) else {
                    break summary;
                };
                // This worker's part is done: recorded (so later barriers do
                // not wait for it) and on disk, before it exits. Until then a
                // rollback could undo its last minibatches with no worker left
                // to train them again.
                let Err(e) = c.finish(position).await else {
                    break summary;
                };
                if e.downcast_ref::<colonnade_proto::CallError>()
                    .is_some_and(|c| c.code == tonic::Code::Internal)
                {
                    // A shard could not write it (e.g. its disk is full):
                    // the model is complete in the shards' memory; the
                    // newest version on disk stays the one before.
                    tracing::error!(error = %format!("{e:#}"), "the final checkpoint could not be written; the newest checkpoint on disk is an earlier one");
                    eprintln!("warning: the final checkpoint could not be written ({e:#}); the model is complete on the running shards");
                    break summary;
                }
                let giving_up = finish_deadline.get_or_insert_with(|| Instant::now() + retry);
                if Instant::now() >= *giving_up {
                    return Err(e.context(format!(
                        "the final checkpoint could not be taken within --retry-timeout {}s",
                        args.retry_timeout
                    )));
                }
                tracing::warn!(error = %format!("{e:#}"), "the final checkpoint was not taken; reconciling and trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                let before = session.lineage;
                session = cluster
                    .reconcile(false, None, true, retry)
                    .await
                    .context("recovery failed")?;
                if session.lineage == before && !session.restored {
                    // Nothing was lost: the stream is at its end, try again.
                    session.position = position;
                    session.finished = false;
                } else {
                    // Rolled back: train this worker's part again from the
                    // checkpoint's position.
                    recoveries += 1;
                    words_retrained += position.words.saturating_sub(session.position.words);
                }
            }
            Err(e) if recoverable(&e) => {
                recoveries += 1;
                metrics::counter!("colonnade_client_recoveries_total").increment(1);
                let reached = progress.words.load(Relaxed);
                let failed_at = tracker.position();
                tracing::warn!(error = %format!("{e:#}"), "training interrupted; reconciling with the shards (--retry-timeout {}s)", args.retry_timeout);
                eprintln!("training interrupted: {e:#}; recovering");
                let before = session.lineage;
                // With checkpoints, a failure rolls the model back to the
                // newest one (a minibatch may be half applied); without, the
                // state is kept and this worker goes on where it was.
                session = cluster
                    .reconcile(false, Some(before), interval.is_none(), retry)
                    .await
                    .context("recovery failed")?;
                if session.lineage == before && !session.restored {
                    session.position = failed_at;
                    session.finished = false;
                }
                words_retrained += reached.saturating_sub(session.position.words);
                tracing::warn!(
                    version = session.version,
                    lineage = format!("{:016x}", session.lineage),
                    jobs = session.position.jobs,
                    "training resumes"
                );
            }
            Err(e) => return Err(e),
        }
    };
    let mut summary = match summary {
        Some(s) => s,
        None => finished_summary(&session, progress),
    };
    // The whole of this process's training, recoveries included.
    summary.seconds = start.elapsed().as_secs_f64();
    summary.tokens_per_second =
        summary.tokens.saturating_sub(resumed_tokens) as f64 / summary.seconds.max(1e-9);
    summary.resumed_from_version = resumed_from;
    summary.recoveries = recoveries;
    summary.words_retrained = words_retrained;
    if let Some(c) = &checkpointer {
        summary.checkpoints = c.taken.load(Relaxed);
        summary.checkpoint_pause_max_seconds = f64::from_bits(c.pause_max.load(Relaxed));
    }
    Ok(summary)
}

/// Creates (or attaches to) the model on every shard, retrying while a
/// shard answers UNAVAILABLE (loading its data dir at start-up).
async fn create_retrying(
    shards: &[GrpcShard],
    spec: &colonnade_common::model::ModelSpec,
    vocab: &Arc<VocabCounts>,
    retry_secs: u64,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(retry_secs);
    let mut backoff = Duration::from_millis(200);
    loop {
        match create_model(shards, spec, vocab).await {
            Err(e)
                if Instant::now() + backoff < deadline
                    && e.downcast_ref::<tonic::Status>()
                        .is_some_and(|s| s.code() == tonic::Code::Unavailable) =>
            {
                tracing::info!(error = %format!("{e:#}"), "a shard is not ready; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            other => return other,
        }
    }
}

/// The summary of a worker whose part a checkpoint already records finished.
fn finished_summary(session: &Session, progress: &Progress) -> TrainSummary {
    let p = session.position;
    TrainSummary {
        tokens: p.tokens,
        words: p.words,
        trained_words: p.trained_words,
        pairs: 0,
        minibatches: 0,
        bytes_sent: 0,
        bytes_received: 0,
        seconds: 0.0,
        tokens_per_second: 0.0,
        final_loss: progress.take_loss(),
        epoch_loss: Vec::new(),
        invalid_utf8_sentences_skipped: 0,
        progress_reached: None,
        position: p,
        resumed_from_version: session.version,
        recoveries: 0,
        words_retrained: 0,
        checkpoints: 0,
        checkpoint_pause_max_seconds: 0.0,
    }
}

fn validate(args: &TrainArgs) -> anyhow::Result<()> {
    if args.workers.is_some() {
        bail!(
            "--workers is not a Colonnade flag. Colonnade's equivalent of gensim's `workers` \
             and word2vec's `-threads` is --threads N (training threads in this process); \
             --num-workers M is the number of separate `colonnade train` processes that share \
             one model's corpus on running --shards"
        );
    }
    if args.embedded_shards.is_some() && args.num_workers > 1 {
        bail!(
            "--num-workers {} with --embedded-shards: embedded shards live and die in this \
             process, so no other worker can join and this one would train only 1/{} of the \
             corpus. For more training threads use --threads; for several worker processes \
             start ps-shard processes and give --shards",
            args.num_workers,
            args.num_workers
        );
    }
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
    if args.window == 0 || args.window > crate::stream::MAX_WINDOW {
        bail!(
            "--window {} is outside 1..={} (window radii travel as one byte)",
            args.window,
            crate::stream::MAX_WINDOW
        );
    }
    if args.negative == 0 {
        bail!("--negative must be at least 1 (hierarchical softmax is not supported)");
    }
    if !(args.alpha.is_finite() && args.alpha > 0.0 && args.alpha <= colonnade_proto::MAX_ALPHA) {
        bail!(
            "--alpha must be a positive number up to {} (word2vec's default is 0.025), got {}",
            colonnade_proto::MAX_ALPHA,
            args.alpha
        );
    }
    if args.negative > colonnade_proto::MAX_NEGATIVE {
        bail!(
            "--negative {} is more than the shards accept ({})",
            args.negative,
            colonnade_proto::MAX_NEGATIVE
        );
    }
    crate::shards::refuse_duplicates(&args.shards)?;
    if !args.shards.is_empty() || args.embedded_grpc {
        // The most dot products one call can ask of a shard: every input
        // position at the widest window.
        let per_call = args.minibatches_per_call.map_or(4, u64::from);
        let examples = if args.cbow {
            1
        } else {
            2 * u64::from(args.window)
        };
        let dots = per_call
            .saturating_mul(args.minibatch as u64)
            .saturating_mul(examples)
            .saturating_mul(1 + u64::from(args.negative));
        if dots > colonnade_proto::MAX_CALL_DOTS {
            bail!(
                "--minibatch {} × --minibatches-per-call {per_call} × {examples} examples per \
                 input (at --window {}) × (1 + --negative {}) = up to {dots} dot products per call, \
                 more than the shards accept ({}): lower --minibatches-per-call or --minibatch",
                args.minibatch,
                args.window,
                args.negative,
                colonnade_proto::MAX_CALL_DOTS
            );
        }
    }
    if !(args.sample.is_finite() && args.sample >= 0.0) {
        bail!("--sample must be 0 or positive, got {}", args.sample);
    }
    if args.iter == 0 {
        bail!("--iter must be at least 1");
    }
    if args.graph.graph.is_some() {
        args.graph
            .walk_params()
            .check()
            .map_err(anyhow::Error::msg)?;
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

/// The output checks of `colonnade train`: every file it will write (the
/// export outputs, --save-vocab, --summary) against the corpus and --vocab
/// and each other; and with embedded shards, that the model is written at all.
fn check_train_outputs(args: &TrainArgs) -> anyhow::Result<()> {
    if args.embedded_shards.is_some() && !args.out.any() {
        bail!(
            "--embedded-shards with no output: the model lives only in this process and would \
             be thrown away when training ends. Give --output FILE.h5, --output-text FILE, \
             --output-binary FILE or --output-tsv-vectors/--output-tsv-metadata"
        );
    }
    let mut inputs: Vec<_> = args
        .corpus
        .iter()
        .map(|p| FlagPath::new("--corpus", p))
        .collect();
    if let Some(v) = &args.vocab {
        inputs.push(FlagPath::new("--vocab", v));
    }
    if let Some(g) = &args.graph.graph {
        inputs.push(FlagPath::new("--graph", g));
    }
    let mut outputs = args.out.paths();
    if let Some(p) = &args.graph.save_walks {
        outputs.push(FlagPath::new("--save-walks", p));
    }
    if let Some(p) = &args.save_vocab {
        outputs.push(FlagPath::new("--save-vocab", p));
    }
    if let Some(p) = &args.summary {
        outputs.push(FlagPath::new("--summary", p));
    }
    check_outputs(&inputs, &outputs)
}

/// Logs the memory the model needs per shard and in total; with embedded
/// shards, refuses a model larger than the memory this process can get,
/// before anything is allocated.
fn check_memory(
    spec: &colonnade_common::model::ModelSpec,
    shards: usize,
    embedded: bool,
) -> anyhow::Result<()> {
    if !embedded {
        let per_shard = shard_bytes(spec, shards as u32);
        let total = per_shard.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let largest = per_shard.iter().copied().max().unwrap_or(0);
        tracing::info!(
            words = spec.vocab_size,
            dim = spec.dim,
            shards,
            per_shard = %human_bytes(largest),
            total = %human_bytes(total),
            "memory estimate: 2 matrices x words x (columns x 4 + 4 bytes) + 16 bytes x words (sampler, counts) per shard"
        );
        return Ok(());
    }
    let total = embedded_bytes(spec, shards as u32);
    tracing::info!(
        words = spec.vocab_size,
        dim = spec.dim,
        shards,
        total = %human_bytes(total),
        "memory estimate: 2 matrices x words x (dim x 4 + 4 bytes), shared by the embedded shards, + 16 bytes x words (sampler, counts) per shard"
    );
    if let Some((available, source)) = available_memory() {
        if total > available {
            bail!(
                "the model needs {} ({} words x {} dimensions over {shards} embedded shard(s)) \
                 but this process can get only {} ({source}). Use a smaller --size, fewer \
                 words (--max-vocab, a higher --min-count), or remote shards (--shards) on \
                 machines with more memory",
                human_bytes(total),
                spec.vocab_size,
                spec.dim,
                human_bytes(available)
            );
        }
    }
    Ok(())
}

/// The provenance of the trained model: what the shards hold, and the run.
fn attributes(
    args: &TrainArgs,
    params: &TrainParams,
    spec: &colonnade_common::model::ModelSpec,
    fingerprint: u64,
    summary: &TrainSummary,
    shards: usize,
) -> colonnade_formats::Provenance {
    let graph = args.graph.graph.as_ref().map(|path| {
        let w = args.graph.walk_params();
        serde_json::json!({
            "path": path,
            "directed": args.graph.directed,
            "walks_per_node": w.walks_per_node,
            "walk_length": w.walk_length,
            "p": w.p,
            "q": w.q,
        })
    });
    let config = serde_json::json!({ "params": params, "corpus": args.corpus, "graph": graph, "summary": summary });
    colonnade_formats::Provenance {
        training: Some(colonnade_formats::Training {
            window: args.window.into(),
            min_count: args.min_count(),
            sample: args.sample,
            alpha: args.alpha.into(),
            iter: args.iter.into(),
            minibatch: args.minibatch as u64,
            seed: args.seed,
            sampling_power: args.sampling_power.into(),
            train_words: summary.tokens,
            train_seconds: summary.seconds,
            config_json: config.to_string(),
        }),
        ..colonnade_exporter::model_provenance(spec, fingerprint, shards)
    }
}

#[cfg(test)]
mod tests {
    use super::minibatches_per_call;

    #[test]
    fn default_minibatches_per_call_keeps_the_cluster_at_16_in_flight() {
        // 2 threads × 2 in flight = 4 calls per worker.
        assert_eq!(minibatches_per_call(None, 4, 1), 4);
        assert_eq!(minibatches_per_call(None, 4, 2), 2);
        assert_eq!(minibatches_per_call(None, 4, 4), 1);
        assert_eq!(minibatches_per_call(None, 4, 8), 1, "never below one");
        assert_eq!(minibatches_per_call(None, 1, 1), 4, "never above four");
        assert_eq!(
            minibatches_per_call(None, 3, 1),
            4,
            "16 / 3 = 5, capped at 4"
        );
        assert_eq!(
            minibatches_per_call(Some(8), 4, 4),
            8,
            "a given value is kept"
        );
    }
}
