//! The flags of `colonnade train` ([`TrainArgs`], with [`GraphArgs`] for
//! graphs) and the checks that need nothing but the flags: ranges
//! ([`validate`]), the files it will write ([`check_outputs`]), and the
//! defaults of `--in-flight` and `--minibatches-per-call` ([`in_flight`],
//! [`minibatches_per_call`], by objective: [`InFlightBudget`]).

use crate::flags::{InvalidUtf8Arg, INVALID_UTF8_HELP};
use anyhow::bail;
use clap::Args;
use colonnade_exporter::cli::OutputArgs;
use colonnade_exporter::outputs::FlagPath;
use colonnade_graph::walk::WalkParams;
use colonnade_ps_shard::stale::REFRESH_FROM_CALLS;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Corpus files: whitespace-separated UTF-8 tokens, plain or compressed
    /// with gzip, xz, zstd or bzip2 (detected from the content).
    #[arg(long, help_heading = "Input", env = "COLONNADE_CORPUS", value_delimiter = ',', num_args = 1.., required_unless_present_any = ["graph", "encoded"])]
    pub corpus: Vec<PathBuf>,
    /// Train on an encoded corpus (`colonnade encode`): word ids of the
    /// --vocab it was made with, in parts; worker i of --num-workers M
    /// reads parts i, i+M, ... only, and holds no word map. With one worker
    /// it trains exactly as the text it was made from.
    #[arg(long, help_heading = "Input", env = "COLONNADE_ENCODED", conflicts_with_all = ["corpus", "graph"], requires = "vocab")]
    pub encoded: Option<PathBuf>,
    /// Load this vocabulary instead of counting the corpus.
    #[arg(long, help_heading = "Input", env = "COLONNADE_VOCAB")]
    pub vocab: Option<PathBuf>,
    /// Write the vocabulary used here.
    #[arg(long, help_heading = "Input", env = "COLONNADE_SAVE_VOCAB")]
    pub save_vocab: Option<PathBuf>,
    /// Vector dimension (gensim's `vector_size`).
    #[arg(
        help_heading = "Model",
        long,
        visible_alias = "vector-size",
        env = "COLONNADE_SIZE",
        default_value_t = 100
    )]
    pub size: u32,
    /// Maximum skip length between words.
    #[arg(
        long,
        help_heading = "Model",
        env = "COLONNADE_WINDOW",
        default_value_t = 5
    )]
    pub window: u32,
    /// Negative examples per context word (CBOW: per input position).
    #[arg(
        long,
        help_heading = "Model",
        env = "COLONNADE_NEGATIVE",
        default_value_t = 5
    )]
    pub negative: u32,
    /// Train CBOW (word2vec's -cbow 1, gensim's sg=0 with cbow_mean=1): the
    /// mean of a position's context words' input vectors predicts its word,
    /// instead of skip-gram. The shards average their own columns, so only
    /// dot products and weights cross the wire, one set per position. Part
    /// of the model's identity (its fingerprint).
    #[arg(long, help_heading = "Model", env = "COLONNADE_CBOW")]
    pub cbow: bool,
    /// Skip-gram: draw the negatives once per input position and share them
    /// among its context words, in word2vec C's orientation (each context
    /// word's input vector against the position's word and its negatives;
    /// Ji et al. 2016). The same dot products and bytes on the wire, but
    /// every shard draws, plans and visits (1 + negative) output rows per
    /// position instead of per context word: about 1.4x the words/s at the same
    /// analogy accuracy (docs/benchmarks.md, "Shared negatives by default").
    /// `--shared-negatives false` draws fresh negatives for every (input,
    /// context) pair. Not for --cbow [default: true for skip-gram]
    #[arg(
        long,
        help_heading = "Model",
        env = "COLONNADE_SHARED_NEGATIVES",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub shared_negatives: Option<bool>,
    /// Discard words seen fewer times (when counting the corpus; with
    /// --graph, nodes seen fewer times in the walks) [default: 5; 1 with
    /// --graph, so every node gets a vector].
    #[arg(long, help_heading = "Model", env = "COLONNADE_MIN_COUNT")]
    pub min_count: Option<u64>,
    /// Keep at most this many of the most frequent words (when counting).
    #[arg(long, help_heading = "Model", env = "COLONNADE_MAX_VOCAB")]
    pub max_vocab: Option<usize>,
    /// Subsampling threshold for frequent words (0 disables) [default:
    /// 1e-3; 0 with --graph: a threshold near 1/nodes cuts every node of a
    /// small graph, and none helped larger ones (docs/benchmarks.md,
    /// "Subsampling random walks")].
    #[arg(long, help_heading = "Model", env = "COLONNADE_SAMPLE")]
    pub sample: Option<f64>,
    /// Starting learning rate.
    #[arg(
        long,
        help_heading = "Model",
        env = "COLONNADE_ALPHA",
        default_value_t = 0.025
    )]
    pub alpha: f32,
    /// Final learning rate (gensim's `min_alpha`): the rate falls linearly
    /// from --alpha to it over the run. Without it, word2vec's schedule:
    /// --alpha × (1 − progress), never below --alpha × 0.0001.
    #[arg(long, help_heading = "Model", env = "COLONNADE_MIN_ALPHA")]
    pub min_alpha: Option<f32>,
    /// Training epochs (word2vec's -iter, gensim's `epochs`).
    #[arg(
        help_heading = "Model",
        long,
        visible_alias = "epochs",
        env = "COLONNADE_ITER",
        default_value_t = 5
    )]
    pub iter: u32,
    #[command(flatten)]
    pub graph: GraphArgs,
    /// Run this many shards inside this process. Training calls them
    /// directly (no encoding, no sockets); export reads them over gRPC on
    /// loopback. Default: 1 when no --shards are given.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_EMBEDDED_SHARDS",
        conflicts_with = "shards"
    )]
    pub embedded_shards: Option<usize>,
    /// Train embedded shards through gRPC on loopback, as remote shards are
    /// (to measure or test the wire path on one machine).
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_EMBEDDED_GRPC",
        requires = "embedded_shards"
    )]
    pub embedded_grpc: bool,
    /// Running shards, comma-separated host:port, in shard order.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_SHARDS",
        value_delimiter = ','
    )]
    pub shards: Vec<String>,
    /// Training threads of this process (word2vec's -threads, gensim's
    /// `workers`): minibatch pipelines, and the compute threads of embedded
    /// shards. Default: available cores.
    #[arg(long, help_heading = "Shards and workers", env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
    /// Calls each thread keeps in flight (shards reached over gRPC): more
    /// hide the round trips to the shards. Default: skip-gram up to --alpha
    /// 0.025 while all workers keep fewer than 8 calls in flight (one worker
    /// of up to 3 threads), 2 (of 8 minibatches: the same minibatches in
    /// flight as 4 calls of 4 for less CPU, docs/benchmarks.md, "Fewer,
    /// larger calls"; on shards crowded by more calls, calls of 8 diverged:
    /// "Calls of 8 diverge on crowded shards"; across
    /// links of 5 ms one way 4 calls of 4, `--in-flight 4
    /// --minibatches-per-call 4`, trained 1.09x their words/s); 4
    /// otherwise, or fewer (not below 2) when all --num-workers workers'
    /// threads would pass 256 minibatches in flight (docs/benchmarks.md,
    /// "Calls in flight across a network"); above --alpha 0.025 (skip-gram), as many
    /// (at least 1) as keep them at 256·(0.025/alpha)⁴, 16 at 0.05, in at
    /// most 8 calls across the workers, fewer than threads if need be
    /// (docs/benchmarks.md, "Minibatches in flight at alpha 0.05 over five
    /// epochs"); with --cbow, at 8 (docs/benchmarks.md, "CBOW's calls in
    /// flight over processes").
    #[arg(long, help_heading = "Shards and workers", env = "COLONNADE_IN_FLIGHT", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub in_flight: Option<u32>,
    /// Minibatches per call (shards reached over gRPC): sent in one dotprod
    /// and one adjust and applied together, so that per-call and per-row
    /// costs are paid once for all of them. Minibatches in flight per
    /// worker: threads × --in-flight × this. Default: the most (up to 8 for
    /// skip-gram up to --alpha 0.025 while all workers keep fewer than 8
    /// calls in flight, 4 otherwise: docs/benchmarks.md, "Fewer, larger
    /// calls") that keeps all --num-workers workers together at or under 256 in
    /// flight, up to which quality holds at --alpha 0.025 (docs/benchmarks.md,
    /// "Quality against minibatches in flight"); above it (skip-gram) at or
    /// under 256·(0.025/alpha)⁴, 16 at 0.05; with --cbow, at or under 8.
    #[arg(long, help_heading = "Shards and workers", env = "COLONNADE_MINIBATCHES_PER_CALL", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub minibatches_per_call: Option<u32>,
    /// Input words per minibatch: a minibatch's updates are applied at its
    /// end. Default: 32 for skip-gram with in-process (embedded) shards,
    /// whose calls cost little beyond their dot products, so that rare words
    /// land in the neighbourhoods per-word SGD (gensim, word2vec C) gives
    /// them; 256 for --cbow, which at 32 trained 1.0 analogy points below
    /// gensim after 5 epochs at alpha 0.025 (docs/benchmarks.md, "CBOW keeps
    /// 256 input words in process"); 256 over gRPC (--shards,
    /// --embedded-grpc), where every call pays a round trip and a plan on
    /// every shard (docs/benchmarks.md, "A call's fixed costs, and 32 input
    /// words in process").
    #[arg(long, help_heading = "Model", env = "COLONNADE_MINIBATCH")]
    pub minibatch: Option<usize>,
    /// Run seed: initial vectors, subsampling, windows and negatives derive from it.
    #[arg(
        long,
        help_heading = "Model",
        env = "COLONNADE_SEED",
        default_value_t = 1
    )]
    pub seed: u64,
    /// Exponent of the unigram distribution for negatives.
    #[arg(
        long,
        help_heading = "Model",
        env = "COLONNADE_SAMPLING_POWER",
        default_value_t = 0.75
    )]
    pub sampling_power: f32,
    /// This process's index among the --num-workers client processes
    /// (0, 1, ..., --num-workers minus 1): it trains the sentences whose
    /// index modulo --num-workers equals it.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_WORKER_INDEX",
        default_value_t = 0
    )]
    pub worker_index: u64,
    /// Number of separate `colonnade train` processes (M) training one model
    /// on running --shards together, each given its own --worker-index and
    /// the same --vocab; each trains 1/M of the corpus. Not gensim's
    /// `workers` (that is --threads).
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_NUM_WORKERS",
        default_value_t = 1
    )]
    pub num_workers: u64,
    /// Not a Colonnade flag: refused with a message pointing to --threads
    /// (gensim's `workers`) and --num-workers.
    #[arg(long, help_heading = "Shards and workers", hide = true, num_args = 0..=1, default_missing_value = "", allow_hyphen_values = true)]
    pub workers: Option<String>,
    /// How long to keep retrying unreachable shards.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_CONNECT_TIMEOUT_SECS",
        default_value_t = 60
    )]
    pub connect_timeout_secs: u64,
    /// Seconds between checkpoints of the model on the shards (running
    /// shards started with --data-dir). Default: 300 when every shard keeps
    /// a data dir, else off; 0 turns them off.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_CHECKPOINT_INTERVAL"
    )]
    pub checkpoint_interval: Option<u64>,
    /// How long training keeps retrying when shards fail (unreachable,
    /// restarting, not answering) before it gives up; backoff doubles up to
    /// 5 s between tries.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_RETRY_TIMEOUT",
        default_value_t = 600
    )]
    pub retry_timeout: u64,
    /// Deadline of each training call to a shard, in seconds: a shard that
    /// does not answer within it is treated as failed.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_CALL_TIMEOUT",
        default_value_t = 30
    )]
    pub call_timeout: u64,
    /// Start the model afresh even if the shards hold a checkpoint of it
    /// (by default training resumes from the newest checkpoint): every shard
    /// is rolled back to the initial state, its checkpoints set aside until
    /// the new run's versions replace them. Over shards holding checkpoints
    /// and given an --admin-token-file, this needs that admin token.
    #[arg(long, help_heading = "Shards and workers", env = "COLONNADE_RESTART")]
    pub restart: bool,
    /// Roll every shard back to the newest checkpoint they all hold before
    /// training (the initial state if there is none), e.g. after training
    /// diverged: shards refuse to train or export a diverged model until
    /// then. The worker token may do this; the versions rolled back from
    /// are set aside, not deleted, until newer ones replace them.
    #[arg(
        long,
        help_heading = "Shards and workers",
        env = "COLONNADE_ROLLBACK",
        conflicts_with = "restart"
    )]
    pub rollback: bool,
    /// Write a JSON summary of the run here.
    #[arg(long, help_heading = "Outputs", env = "COLONNADE_SUMMARY")]
    pub summary: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP on this address while training
    /// (e.g. 0.0.0.0:9101): words trained and words/s, loss, learning rate,
    /// epoch, progress, calls and their latency and errors, retries and
    /// recoveries, bytes on the wire.
    #[arg(long, help_heading = "Outputs", env = "COLONNADE_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// What to do with a sentence holding invalid UTF-8: skip it or abort.
    #[arg(long, help_heading = "Input", env = "COLONNADE_INVALID_UTF8", value_enum, default_value_t = InvalidUtf8Arg::Skip, long_help = INVALID_UTF8_HELP)]
    pub invalid_utf8: InvalidUtf8Arg,
    #[command(flatten, next_help_heading = "Outputs")]
    pub out: OutputArgs,
    #[command(flatten, next_help_heading = "Connecting to shards")]
    pub connect: crate::cli::ConnectArgs,
}

/// --minibatch's default for skip-gram with in-process shards, for CBOW with
/// in-process shards, and over gRPC.
pub const IN_PROCESS_MINIBATCH: usize = 32;
pub const IN_PROCESS_CBOW_MINIBATCH: usize = 256;
pub const GRPC_MINIBATCH: usize = 256;

impl TrainArgs {
    /// The most examples one input position can give: CBOW one, skip-gram
    /// one per context word at the widest window.
    pub fn most_examples_per_input(&self) -> u64 {
        if self.cbow {
            1
        } else {
            2 * u64::from(self.window)
        }
    }

    /// The most dot products one minibatch over gRPC can ask of a shard:
    /// every input position at the widest window.
    pub fn most_dots_per_minibatch(&self) -> u64 {
        (self.minibatch(false) as u64)
            .saturating_mul(self.most_examples_per_input())
            .saturating_mul(1 + u64::from(self.negative))
    }

    /// The most minibatches per call the default of
    /// `--minibatches-per-call` may give so that a call stays within what a
    /// shard accepts ([`colonnade_proto::MAX_CALL_DOTS`]), at least 1.
    pub fn most_minibatches_per_call(&self) -> usize {
        let most = colonnade_proto::MAX_CALL_DOTS / self.most_dots_per_minibatch().max(1);
        usize::try_from(most.max(1)).unwrap_or(usize::MAX)
    }

    /// --minibatch, or its default: when the shards are `in_process`
    /// (embedded, not over gRPC), [`IN_PROCESS_MINIBATCH`] for skip-gram and
    /// [`IN_PROCESS_CBOW_MINIBATCH`] for CBOW; else [`GRPC_MINIBATCH`].
    ///
    /// CBOW keeps the long minibatch in process: at 32 input words it
    /// trained below gensim after 5 epochs at alpha 0.025, sample 1e-4 (28.97
    /// and 28.64 % against 29.97 and 29.75 at 256, seeds 1 and 2, part 01;
    /// gensim 29.97), a cell where analogies climb 2 points per 0.005 of
    /// alpha, while its rare words agree with gensim's as well at either
    /// size (docs/benchmarks.md, "CBOW keeps 256 input words in process").
    pub fn minibatch(&self, in_process: bool) -> usize {
        self.minibatch.unwrap_or(match (in_process, self.cbow) {
            (true, false) => IN_PROCESS_MINIBATCH,
            (true, true) => IN_PROCESS_CBOW_MINIBATCH,
            (false, _) => GRPC_MINIBATCH,
        })
    }

    /// --sample, or its default: 1e-3 for text, 0 for a graph's walks.
    pub fn sample(&self) -> f64 {
        self.sample.unwrap_or(if self.graph.graph.is_some() {
            0.0
        } else {
            1e-3
        })
    }

    /// --shared-negatives, or its default: on for skip-gram (CBOW draws one
    /// set of negatives per position anyway).
    pub fn shared_negatives(&self) -> bool {
        self.shared_negatives.unwrap_or(!self.cbow)
    }

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
    #[arg(long, help_heading = "Graphs", env = "COLONNADE_GRAPH", conflicts_with_all = ["corpus", "vocab"])]
    pub graph: Option<PathBuf>,
    /// Walks started at every node in each epoch [default: 10].
    #[arg(
        long,
        help_heading = "Graphs",
        env = "COLONNADE_WALKS_PER_NODE",
        requires = "graph"
    )]
    pub walks_per_node: Option<u32>,
    /// Nodes per walk, the start included [default: 40].
    #[arg(
        long,
        help_heading = "Graphs",
        env = "COLONNADE_WALK_LENGTH",
        requires = "graph"
    )]
    pub walk_length: Option<u32>,
    /// node2vec's return parameter: a step back to the previous node weighs
    /// 1/p [default: 1].
    #[arg(long, help_heading = "Graphs", env = "COLONNADE_P", requires = "graph")]
    pub p: Option<f32>,
    /// node2vec's in-out parameter: a step to a node not adjacent to the
    /// previous one weighs 1/q [default: 1].
    #[arg(long, help_heading = "Graphs", env = "COLONNADE_Q", requires = "graph")]
    pub q: Option<f32>,
    /// The edge list's edges are directed (`u v` is u -> v only); walks end
    /// at nodes with no out-edges.
    #[arg(
        long,
        help_heading = "Graphs",
        env = "COLONNADE_DIRECTED",
        requires = "graph"
    )]
    pub directed: bool,
    /// Also write the first epoch's walks here, one per line, node ids
    /// separated by spaces (to feed the same walks to another tool).
    #[arg(
        long,
        help_heading = "Graphs",
        env = "COLONNADE_SAVE_WALKS",
        requires = "graph"
    )]
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

pub fn validate(args: &TrainArgs) -> anyhow::Result<()> {
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
    if args.cbow && args.shared_negatives == Some(true) {
        bail!(
            "--shared-negatives is for skip-gram: CBOW already draws one set of negatives per \
             input position"
        );
    }
    if !(args.alpha.is_finite() && args.alpha > 0.0 && args.alpha <= colonnade_proto::MAX_ALPHA) {
        bail!(
            "--alpha must be a positive number up to {} (word2vec's default is 0.025), got {}",
            colonnade_proto::MAX_ALPHA,
            args.alpha
        );
    }
    if let Some(min) = args.min_alpha {
        if !(min.is_finite() && min >= 0.0 && min <= args.alpha) {
            bail!(
                "--min-alpha must be between 0 and --alpha ({}), got {min}",
                args.alpha
            );
        }
    }
    if args.negative > colonnade_proto::MAX_NEGATIVE {
        bail!(
            "--negative {} is more than the shards accept ({})",
            args.negative,
            colonnade_proto::MAX_NEGATIVE
        );
    }
    crate::cluster::refuse_duplicates(&args.shards)?;
    if !args.shards.is_empty() || args.embedded_grpc {
        // The most dot products one call can ask of a shard: every input
        // position at the widest window. The default per call is lowered
        // to fit ([`TrainArgs::most_minibatches_per_call`]).
        let per_call = args.minibatches_per_call.map_or(1, u64::from);
        let examples = args.most_examples_per_input();
        let dots = per_call.saturating_mul(args.most_dots_per_minibatch());
        if dots > colonnade_proto::MAX_CALL_DOTS {
            bail!(
                "--minibatch {} × --minibatches-per-call {per_call} × {examples} examples per \
                 input (at --window {}) × (1 + --negative {}) = up to {dots} dot products per call, \
                 more than the shards accept ({}): lower --minibatches-per-call or --minibatch",
                args.minibatch(false),
                args.window,
                args.negative,
                colonnade_proto::MAX_CALL_DOTS
            );
        }
    }
    if !(args.sample().is_finite() && args.sample() >= 0.0) {
        bail!("--sample must be 0 or positive, got {}", args.sample());
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
    if args.minibatch == Some(0) {
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
pub fn check_outputs(args: &TrainArgs) -> anyhow::Result<()> {
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
    colonnade_exporter::outputs::check_outputs(&inputs, &outputs)
}

/// Minibatches in flight across all workers of a model up to which
/// skip-gram's quality holds at learning rates up to [`SAFE_ALPHA`]
/// (docs/benchmarks.md, "Quality against minibatches in flight": 256
/// trained as well as 16 once crowded shards refresh their weights; 1,024
/// within 0.3 points, but diverged at `--sample 1e-3` in a variant that
/// refreshed every call; 256 and 128 also trained five epochs at alpha
/// 0.025 within the bar): the default of --minibatches-per-call keeps under
/// it. Above [`SAFE_ALPHA`] it shrinks ([`skip_gram_in_flight`]).
pub const MAX_SAFE_IN_FLIGHT: u64 = 256;

/// The learning rate up to which skip-gram keeps [`MAX_SAFE_IN_FLIGHT`]
/// minibatches in flight: word2vec's default for it.
pub const SAFE_ALPHA: f32 = 0.025;

/// Skip-gram's minibatches in flight across all workers at learning rate
/// `alpha`: [`MAX_SAFE_IN_FLIGHT`] up to [`SAFE_ALPHA`], then
/// 256·(0.025/α)⁴, 16 at 0.05. At alpha 0.05 over five epochs (2
/// `ps-shard` processes, part 01) 16 in flight as 8 calls of 2 trained
/// within 0.3 analogy points of gensim's 16 workers (3 seeds each at
/// sample 1e-4 and 1e-3), 32 as 8 calls of 4 0.4-1.4 points below them,
/// 64 as 16 calls of 4 broke (26.7 % against gensim's 39.5 %) and 128
/// broke in 3 seeds of 3 (15.5-16.4 %), all without a diverged dot
/// product: the rate a stale step is taken at multiplies what the steps of
/// the calls in flight do to a shared row (docs/benchmarks.md,
/// "Minibatches in flight at alpha 0.05 over five epochs"). The fourth
/// power is fitted to those two rates, 256 at 0.025 and 16 at 0.05, not
/// derived: between and above them it was not measured.
pub fn skip_gram_in_flight(alpha: f32) -> u64 {
    if alpha.is_nan() || alpha <= SAFE_ALPHA {
        return MAX_SAFE_IN_FLIGHT;
    }
    let ratio = f64::from(SAFE_ALPHA) / f64::from(alpha);
    ((MAX_SAFE_IN_FLIGHT as f64) * ratio.powi(4))
        .round()
        .max(1.0) as u64
}

/// [`MAX_SAFE_IN_FLIGHT`] for CBOW: 8. CBOW at word2vec's defaults (alpha
/// 0.05, sample 1e-3) for 5 epochs over 2 `ps-shard` processes diverged in
/// 2 seeds of 3 at 32 in flight (8 calls of 4), and at 8 threads in 2 of 2;
/// at 8 (2 calls of 4; 8 threads, 8 calls of 1) it trained in every seed,
/// within 0.3 analogy points of gensim's median (docs/benchmarks.md,
/// "CBOW's calls in flight over processes"). At 2 threads it is also the
/// cheaper (0.95x the CPU); at 8, calls of one minibatch cost 1.4x. A CBOW
/// dot product reads the mean of up to 2·window context rows, which every minibatch in flight moves, and one epoch's
/// decaying rate hid it (256 in flight trained above gensim in 1 epoch).
pub const MAX_SAFE_CBOW_IN_FLIGHT: u64 = 8;

/// The most minibatches per call the default of --minibatches-per-call
/// gives, and the count the default of --in-flight plans each call with,
/// where the budget does not say otherwise ([`InFlightBudget::per_call`]).
const MOST_MINIBATCHES_PER_CALL: u64 = 4;

/// The calls per thread the default of --in-flight gives with
/// [`MOST_MINIBATCHES_PER_CALL`] (CBOW, skip-gram above [`SAFE_ALPHA`], and
/// skip-gram on crowded shards: [`InFlightBudget::for_layout`]).
const MOST_CALLS_PER_THREAD: u64 = 4;

/// Skip-gram's [`MOST_MINIBATCHES_PER_CALL`] up to [`SAFE_ALPHA`]: 8, in 2
/// calls per thread ([`SAFE_CALLS_PER_THREAD`]), the same 32 minibatches in
/// flight at 2 threads as 8 calls of 4. Half the calls cost 4 `ps-shard`
/// processes and their worker 10 % less CPU per token and 8 processes 16 %
/// less (every call pays its messages, its plan and its row visits on
/// every shard), and trained as well once the shards counted a call's
/// minibatches past the 4th as calls in flight
/// (`colonnade_ps_shard::plan::skip_gram_call_step_cap`; before, calls of 8
/// lost 0.4-0.8 analogy points; docs/benchmarks.md, "Fewer, larger calls").
const SAFE_MINIBATCHES_PER_CALL: u64 = 8;

/// The most calls a thread keeps in flight by default where the budget
/// gives [`SAFE_MINIBATCHES_PER_CALL`]: 2, so that a thread still has a
/// call to compute while the other's round trip is on the wire.
const SAFE_CALLS_PER_THREAD: u64 = 2;

/// What the defaults of `--in-flight` and `--minibatches-per-call` keep all
/// workers of a model at or under, by objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlightBudget {
    /// Minibatches in flight across all workers.
    pub most: u64,
    /// The fewest calls a thread keeps in flight by default.
    pub least_calls: u64,
    /// The most calls in flight across all workers by default, where the
    /// rate needs it ([`MOST_CALLS_ABOVE_SAFE_ALPHA`]): fewer pipelines than
    /// threads × calls then.
    pub most_calls: Option<u64>,
    /// The most minibatches per call and calls per thread the defaults
    /// give.
    pub per_call: u64,
    pub calls_per_thread: u64,
}

/// Skip-gram's calls in flight across all workers above [`SAFE_ALPHA`]: 8,
/// [`colonnade_ps_shard`]'s `REFRESH_FROM_CALLS`, under which the shards'
/// counts of pending dot products bound a row's steps. At alpha 0.05 over
/// five epochs on 2 `ps-shard` processes 8 calls trained at 32 and 64
/// minibatches in flight, at both samples, while 16 calls broke at 16 and
/// 32 (calls of 1 and 2, sample 1e-3) and at 64 (calls of 4, sample 1e-4),
/// and lost 0.8-0.9 analogy points at 32 with sample 1e-4: a worker of 16
/// threads keeps 8 calls (of 2 at alpha 0.05), as one of 8 does
/// (docs/benchmarks.md, "Minibatches in flight at alpha 0.05 over five
/// epochs").
pub const MOST_CALLS_ABOVE_SAFE_ALPHA: u64 = 8;

impl InFlightBudget {
    /// Skip-gram at learning rate `alpha`: [`skip_gram_in_flight`], at
    /// least 2 calls per thread up to [`SAFE_ALPHA`] (a thread with one
    /// call waits for every round trip); above it one, and at most
    /// [`MOST_CALLS_ABOVE_SAFE_ALPHA`] calls in all, where calls of more
    /// minibatches trained and more calls of fewer did not; CBOW:
    /// [`MAX_SAFE_CBOW_IN_FLIGHT`], one call per thread where it must.
    pub fn of(cbow: bool, alpha: f32) -> Self {
        if cbow {
            Self {
                most: MAX_SAFE_CBOW_IN_FLIGHT,
                least_calls: 1,
                most_calls: None,
                per_call: MOST_MINIBATCHES_PER_CALL,
                calls_per_thread: MOST_CALLS_PER_THREAD,
            }
        } else {
            let most = skip_gram_in_flight(alpha);
            let fast = most < MAX_SAFE_IN_FLIGHT;
            Self {
                most,
                least_calls: if fast { 1 } else { 2 },
                most_calls: fast.then_some(MOST_CALLS_ABOVE_SAFE_ALPHA),
                per_call: if fast {
                    MOST_MINIBATCHES_PER_CALL
                } else {
                    SAFE_MINIBATCHES_PER_CALL
                },
                calls_per_thread: if fast {
                    MOST_CALLS_PER_THREAD
                } else {
                    SAFE_CALLS_PER_THREAD
                },
            }
        }
    }

    /// This budget for `workers` workers of `threads` threads each:
    /// skip-gram's calls of [`SAFE_MINIBATCHES_PER_CALL`] only while all
    /// their calls in flight stay under the shards' `REFRESH_FROM_CALLS`
    /// (one worker of up to 3 threads: 2 × 2 calls at the default 2), where
    /// a shard counts each call's pending dot products and
    /// `skip_gram_call_step_cap` was measured; from there on 4 calls of 4
    /// per thread, the layout before calls of 8 (128 in flight at 8
    /// threads, 256 at 16). On crowded shards, which refresh a call's
    /// weights instead of counting the others, calls of 8 diverged: 8
    /// threads (16 calls of 8, 128 in flight), five epochs, sample 1e-3,
    /// alpha 0.025 over 2 `ps-shard` processes, in epoch 3 or 4 of 3 seeds
    /// of 3, where 32 calls of 4 trained 0.8-1.3 analogy points above
    /// gensim (docs/benchmarks.md, "Calls of 8 diverge on crowded shards").
    /// `in_flight` is `--in-flight` as given: the calls counted are the
    /// ones [`calls_in_flight`] gives this budget.
    pub fn for_layout(self, threads: usize, workers: u64, in_flight: Option<u32>) -> Self {
        let calls = (calls_in_flight(in_flight, threads, workers, self) as u64)
            .saturating_mul(workers.max(1));
        if crowds_large_calls(self.per_call, calls) {
            Self {
                per_call: MOST_MINIBATCHES_PER_CALL,
                calls_per_thread: MOST_CALLS_PER_THREAD,
                ..self
            }
        } else {
            self
        }
    }
}

/// `--in-flight`: as given, else the budget's calls per thread (skip-gram up
/// to [`SAFE_ALPHA`]: 2 of 8 minibatches, [`SAFE_MINIBATCHES_PER_CALL`];
/// otherwise 4 of 4), or as many (at least `budget.least_calls`) as keep the
/// `workers` workers' `threads` threads each at or under `budget.most`
/// minibatches in flight with the budget's minibatches per call. Across a
/// network a thread with 2 calls of 4 in flight waits for round trips (4
/// calls of 4 trained 1.3-1.9x the words/s of 2 at 0.5-5 ms one way); what
/// hides them is the minibatches in flight, which 2 calls of 8 keep; on one
/// host 4 calls of 4 cost the same CPU per token as 2, and 8 cost 23% more
/// (the shards' refresh of crowded calls). Many workers already keep the
/// shards busy: their threads keep 2, and their calls fewer minibatches.
/// CBOW's budget gives one call per thread ([`MAX_SAFE_CBOW_IN_FLIGHT`]).
pub fn in_flight(
    given: Option<u32>,
    threads: usize,
    workers: u64,
    budget: InFlightBudget,
) -> usize {
    match given {
        Some(n) => n as usize,
        None => {
            let per_thread = (threads as u64).max(1) * workers.max(1) * budget.per_call;
            let calls = budget.most / per_thread;
            calls.clamp(
                budget.least_calls,
                budget.calls_per_thread.max(budget.least_calls),
            ) as usize
        }
    }
}

/// The calls (pipelines) a worker of `threads` threads keeps in flight:
/// `threads` × [`in_flight`], and with --in-flight not given at most the
/// budget's share of [`InFlightBudget::most_calls`] among the `workers`
/// (at least one).
pub fn calls_in_flight(
    given: Option<u32>,
    threads: usize,
    workers: u64,
    budget: InFlightBudget,
) -> usize {
    let calls = threads.max(1) * in_flight(given, threads, workers, budget);
    match (given, budget.most_calls) {
        (None, Some(most)) => {
            let share = usize::try_from((most / workers.max(1)).max(1)).unwrap_or(usize::MAX);
            calls.min(share)
        }
        _ => calls,
    }
}

/// `--minibatches-per-call`: as given, else the most up to the budget's
/// ([`InFlightBudget::per_call`]: 8 for skip-gram up to [`SAFE_ALPHA`], 4
/// otherwise) that keeps the
/// `workers` workers' `calls` calls each at or under `budget.most`
/// minibatches in flight (at least 1). Warns when the total exceeds it,
/// and when a given value of more than [`MOST_MINIBATCHES_PER_CALL`] comes
/// in calls that crowd the shards ([`crowds_large_calls`]).
pub fn minibatches_per_call(
    given: Option<u32>,
    calls: usize,
    workers: u64,
    budget: InFlightBudget,
) -> usize {
    let calls_total = (calls as u64).max(1) * workers.max(1);
    let per_call = match given {
        Some(n) => u64::from(n),
        None => (budget.most / calls_total).clamp(1, budget.per_call),
    };
    let in_flight = per_call * calls_total;
    let most = budget.most;
    if in_flight > most {
        tracing::warn!(
            in_flight,
            workers,
            minibatches_per_call = per_call,
            "{in_flight} minibatches in flight across the workers (threads x --in-flight x \
             --minibatches-per-call x --num-workers), more than the {most} measured to train \
             as well as fewer at this learning rate (skip-gram: 256 up to alpha 0.025, 16 at \
             0.05, where 32 lost up to 1.4 analogy points and 64-128 broke over 5 epochs; CBOW: 8, 32 diverged at alpha 0.05 over \
             5 epochs); lower --in-flight, --threads or --minibatches-per-call if it diverges"
        );
    }
    if given.is_some() && crowds_large_calls(per_call, calls_total) {
        tracing::warn!(
            calls = calls_total,
            minibatches_per_call = per_call,
            "{calls_total} calls of {per_call} minibatches in flight across the workers crowd \
             the shards ({REFRESH_FROM_CALLS} or more calls: each refreshes a call's weights \
             instead of counting the others'), where calls of more than \
             {MOST_MINIBATCHES_PER_CALL} diverged (16 calls of 8, sample 1e-3, 5 epochs) or \
             trained up to 1.2 analogy points below calls of {MOST_MINIBATCHES_PER_CALL}; \
             without --minibatches-per-call these threads keep calls of \
             {MOST_MINIBATCHES_PER_CALL} (docs/benchmarks.md, \"Calls of 8 diverge on crowded \
             shards\")"
        );
    }
    per_call as usize
}

/// Whether `calls` calls in flight across the workers, of `per_call`
/// minibatches each, are calls of more than [`MOST_MINIBATCHES_PER_CALL`]
/// on shards they crowd (`REFRESH_FROM_CALLS` or more): the layout
/// [`InFlightBudget::for_layout`] keeps the defaults out of. A crowded shard
/// refreshes each call's weights and steps it by its own dot products, at
/// the cap `skip_gram_call_step_cap` gives a call of its size; neither that
/// cap (1.6 caps for 8: 16 calls of 8 diverged at 8 threads) nor one cap
/// per call (0.2-0.9 analogy points below it in every seed at 16 threads)
/// trained calls of 8 there as calls of 4 train (docs/benchmarks.md, "One
/// cap for a refreshed call of 8: measured and not kept").
pub fn crowds_large_calls(per_call: u64, calls: u64) -> bool {
    per_call > MOST_MINIBATCHES_PER_CALL && calls >= REFRESH_FROM_CALLS as u64
}

#[cfg(test)]
mod tests {
    use super::{in_flight, minibatches_per_call, InFlightBudget};

    const SG: InFlightBudget = InFlightBudget {
        most: 256,
        least_calls: 2,
        most_calls: None,
        per_call: 8,
        calls_per_thread: 2,
    };

    /// The minibatch of the run's shards: small in process for skip-gram,
    /// large for CBOW and over gRPC, and --minibatch whatever the shards.
    #[test]
    fn default_minibatch_depends_on_where_the_shards_are_and_the_objective() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        let args = |extra: &[&str]| {
            let argv = ["colonnade", "train", "--corpus", "c.txt"]
                .iter()
                .chain(extra);
            match Cli::try_parse_from(argv).expect("parses").command {
                Command::Train(args) => args,
                _ => unreachable!("a train command"),
            }
        };
        let defaults = args(&[]);
        assert_eq!(defaults.minibatch(true), 32);
        assert_eq!(defaults.minibatch(false), 256);
        let cbow = args(&["--cbow"]);
        assert_eq!(
            (cbow.minibatch(true), cbow.minibatch(false)),
            (256, 256),
            "CBOW keeps 256 input words in process too"
        );
        let given = args(&["--minibatch", "64"]);
        assert_eq!((given.minibatch(true), given.minibatch(false)), (64, 64));
        let given = args(&["--cbow", "--minibatch", "64"]);
        assert_eq!((given.minibatch(true), given.minibatch(false)), (64, 64));
    }

    #[test]
    fn default_in_flight_is_2_calls_of_8_until_the_workers_would_pass_256_in_flight() {
        assert_eq!(
            in_flight(None, 2, 1, SG),
            2,
            "one worker, 2 threads: 32 in flight"
        );
        assert_eq!(in_flight(None, 16, 1, SG), 2, "16 threads: 256");
        assert_eq!(in_flight(None, 2, 8, SG), 2, "8 workers x 2 threads: 256");
        assert_eq!(in_flight(None, 2, 64, SG), 2, "never below 2");
        assert_eq!(in_flight(Some(1), 2, 1, SG), 1, "a given value is kept");
        assert_eq!(in_flight(Some(8), 2, 64, SG), 8);
        // Above alpha 0.025 (and for CBOW) the budget keeps calls of 4, up
        // to 4 per thread.
        let four = InFlightBudget {
            per_call: 4,
            calls_per_thread: 4,
            ..SG
        };
        assert_eq!(in_flight(None, 2, 1, four), 4);
        assert_eq!(in_flight(None, 2, 12, four), 2, "256 / 96 = 2.67");
        // Together with the minibatches per call: 256 in flight or fewer.
        for (threads, workers, per) in [
            (1, 1, 8),
            (2, 1, 8),
            (2, 16, 4),
            (4, 4, 8),
            (16, 1, 8),
            (8, 8, 2),
        ] {
            let calls = threads * in_flight(None, threads, workers, SG);
            let per_call = minibatches_per_call(None, calls, workers, SG);
            assert!(
                (calls * per_call) as u64 * workers <= 256,
                "{threads} threads, {workers} workers"
            );
            assert_eq!(per_call, per, "{threads} threads, {workers} workers");
        }
    }

    #[test]
    fn default_minibatches_per_call_keeps_the_cluster_at_256_in_flight() {
        // 2 threads × 2 in flight = 4 calls per worker.
        assert_eq!(minibatches_per_call(None, 4, 1, SG), 8);
        assert_eq!(
            minibatches_per_call(None, 4, 16, SG),
            4,
            "16 workers: 256 in flight"
        );
        assert_eq!(minibatches_per_call(None, 4, 32, SG), 2);
        assert_eq!(minibatches_per_call(None, 4, 64, SG), 1);
        assert_eq!(minibatches_per_call(None, 4, 256, SG), 1, "never below one");
        assert_eq!(minibatches_per_call(None, 1, 1, SG), 8, "never above eight");
        assert_eq!(minibatches_per_call(None, 96, 1, SG), 2, "256 / 96 = 2");
        assert_eq!(
            minibatches_per_call(Some(16), 4, 4, SG),
            16,
            "a given value is kept"
        );
    }

    /// A default call stays within what a shard accepts: at the widest
    /// windows fewer than 8 minibatches per call, and a given count that
    /// would pass it is refused before training, naming the flags.
    #[test]
    fn the_default_minibatches_per_call_fit_a_shards_bound_on_dot_products() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        let args = |extra: &[&str]| {
            let argv = [
                "colonnade",
                "train",
                "--corpus",
                "c.txt",
                "--shards",
                "127.0.0.1:1",
            ]
            .iter()
            .chain(extra);
            match Cli::try_parse_from(argv).expect("parses").command {
                Command::Train(args) => args,
                _ => unreachable!("a train command"),
            }
        };
        assert_eq!(args(&[]).most_minibatches_per_call(), 273, "window 5");
        let wide = args(&["--window", "255"]);
        // 256 inputs × 510 examples × 6 = 783,360 dot products a minibatch.
        assert_eq!(wide.most_minibatches_per_call(), 5);
        super::validate(&wide).expect("the default fits");
        let e = super::validate(&args(&["--window", "255", "--minibatches-per-call", "8"]))
            .expect_err("8 would not fit");
        assert!(e.to_string().contains("--minibatches-per-call 8"), "{e}");
        let huge = args(&["--window", "255", "--negative", "20", "--minibatch", "4096"]);
        assert_eq!(huge.most_minibatches_per_call(), 1, "never below one");
    }

    /// Skip-gram above alpha 0.025 keeps fewer minibatches in flight, 16 at
    /// 0.05, in at most 8 calls across the workers, the layout measured to
    /// train there within the bar (8 calls of 2), whatever the threads; at
    /// 0.025 and below, the 256 of before.
    #[test]
    fn skip_gram_keeps_16_in_flight_at_alpha_0_05() {
        use super::{calls_in_flight, skip_gram_in_flight, MAX_SAFE_IN_FLIGHT};
        assert_eq!(skip_gram_in_flight(0.025), MAX_SAFE_IN_FLIGHT);
        assert_eq!(skip_gram_in_flight(0.01), MAX_SAFE_IN_FLIGHT);
        assert_eq!(skip_gram_in_flight(0.05), 16);
        assert_eq!(skip_gram_in_flight(0.0375), 51, "256 · (2/3)⁴");
        assert_eq!(skip_gram_in_flight(0.1), 1);
        assert_eq!(skip_gram_in_flight(10.0), 1, "never below one");
        assert_eq!(skip_gram_in_flight(f32::NAN), MAX_SAFE_IN_FLIGHT);
        let fast = InFlightBudget::of(false, 0.05);
        assert_eq!((fast.least_calls, fast.most_calls), (1, Some(8)));
        // (threads, workers) -> (calls per worker, minibatches per call)
        for (threads, workers, calls, per) in [
            (2, 1, 4, 4),
            (8, 1, 8, 2),
            (16, 1, 8, 2),
            (4, 2, 4, 2),
            (8, 2, 4, 2),
            (2, 16, 1, 1),
        ] {
            let (c, p) = default_layout(threads, workers, fast);
            assert_eq!((c, p), (calls, per), "{threads} threads, {workers} workers");
            assert_eq!((c * p) as u64 * workers, 16);
        }
        assert_eq!(
            calls_in_flight(Some(2), 16, 1, fast),
            32,
            "a given --in-flight is kept"
        );
        // At the default rate: 16 threads keep 4 calls of 4 each, 256.
        let default = InFlightBudget::of(false, 0.025).for_layout(16, 1, None);
        assert_eq!(default.most_calls, None);
        assert_eq!(calls_in_flight(None, 16, 1, default), 64);
        assert_eq!(minibatches_per_call(None, 64, 1, default), 4);
    }

    /// The defaults' (calls per worker, minibatches per call) under `budget`.
    fn default_layout(threads: usize, workers: u64, budget: InFlightBudget) -> (usize, usize) {
        let c = super::calls_in_flight(None, threads, workers, budget);
        (c, minibatches_per_call(None, c, workers, budget))
    }

    /// Skip-gram's calls of 8 only where every shard counts the calls in
    /// flight (under `REFRESH_FROM_CALLS` of them across the workers): a
    /// crowded shard refreshes instead, and there 16 calls of 8 diverged
    /// over five epochs where 32 calls of 4 trained (8 threads, sample
    /// 1e-3); past it the layout is 4 calls of 4 per thread again.
    #[test]
    fn skip_gram_calls_of_8_stay_under_the_shards_crowd() {
        use super::{calls_in_flight, REFRESH_FROM_CALLS};
        // (threads, workers) -> (calls across the workers, minibatches per call)
        for (threads, workers, calls, per) in [
            (1, 1, 2, 8),
            (2, 1, 4, 8),
            (3, 1, 6, 8),
            (1, 3, 6, 8),
            (4, 1, 16, 4),
            (2, 2, 16, 4),
            (8, 1, 32, 4),
            (16, 1, 64, 4),
            (2, 8, 64, 4),
            (2, 16, 64, 4),
        ] {
            let budget = InFlightBudget::of(false, 0.025).for_layout(threads, workers, None);
            let (c, p) = default_layout(threads, workers, budget);
            assert_eq!(
                (c as u64 * workers, p),
                (calls, per),
                "{threads} threads, {workers} workers"
            );
            assert!((c * p) as u64 * workers <= 256);
            assert_eq!(
                p == 8,
                (c as u64 * workers) < REFRESH_FROM_CALLS as u64,
                "calls of 8 only under the crowd"
            );
            assert!(
                !super::crowds_large_calls(p as u64, c as u64 * workers),
                "{threads} threads, {workers} workers: the defaults crowd calls of {p}"
            );
        }
        // A given --in-flight counts: 2 threads of 8 calls crowd the
        // shards, and keep calls of 4; of 1 call they do not.
        let sg = InFlightBudget::of(false, 0.025);
        for (given, calls, per) in [(8, 16, 4), (1, 2, 8), (3, 6, 8), (4, 8, 4)] {
            let budget = sg.for_layout(2, 1, Some(given));
            let c = calls_in_flight(Some(given), 2, 1, budget);
            let p = minibatches_per_call(None, c, 1, budget);
            assert_eq!((c, p), (calls, per), "--in-flight {given}");
        }
        // CBOW and rates above 0.025 keep their budgets whatever the layout.
        for (cbow, alpha) in [(true, 0.025), (true, 0.05), (false, 0.05)] {
            let b = InFlightBudget::of(cbow, alpha);
            assert_eq!(b.for_layout(16, 4, None), b);
            assert_eq!(b.for_layout(2, 1, Some(64)), b);
        }
    }

    #[test]
    fn cbow_defaults_keep_the_workers_at_8_in_flight_with_one_call_per_thread_at_least() {
        let cbow = InFlightBudget::of(true, 0.05);
        assert_eq!(
            cbow,
            InFlightBudget::of(true, 0.025),
            "CBOW's is 8 at any rate"
        );
        assert_eq!(InFlightBudget::of(false, 0.025), SG);
        // (threads, workers) -> (calls per thread, minibatches per call)
        for (threads, workers, calls, per) in [
            (1, 1, 2, 4),
            (2, 1, 1, 4),
            (4, 1, 1, 2),
            (8, 1, 1, 1),
            (16, 1, 1, 1),
            (2, 8, 1, 1),
        ] {
            let c = in_flight(None, threads, workers, cbow);
            let p = minibatches_per_call(None, threads * c, workers, cbow);
            assert_eq!((c, p), (calls, per), "{threads} threads, {workers} workers");
            let total = (threads * c * p) as u64 * workers;
            assert!(
                total <= 8 || p == 1 && c == 1,
                "{threads} threads, {workers} workers: {total} in flight"
            );
        }
        assert_eq!(in_flight(Some(4), 2, 1, cbow), 4, "a given value is kept");
        assert_eq!(minibatches_per_call(Some(4), 8, 1, cbow), 4);
    }
}
