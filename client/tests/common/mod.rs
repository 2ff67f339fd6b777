//! Helpers shared by the client's integration tests.
#![allow(dead_code)]

use colonnade_client::cluster::Cluster;
use colonnade_client::grpc::GrpcShards;
use colonnade_client::stream::Source;
use colonnade_client::train::{train, NoCheckpoints, Progress, TrainParams, TrainSummary};
use colonnade_common::model::{place_columns, ModelSpec, Objective};
use colonnade_common::vocab::{Counter, Vocab, VocabCounts};
use colonnade_proto::ModelShards;
use colonnade_ps_shard::{InProcessShards, Matrix, ShardCore, ShardSpec, Siblings, SpawnedShard};
use colonnade_setup::Connector;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The first `words` words of the shipped sample corpus, as a plain file, in
/// lines of 1,000 words.
pub fn sample_corpus(dir: &Path, words: usize) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/sample.txt.xz");
    let file = fs_err::File::open(&root).expect("testdata/sample.txt.xz");
    let mut text = String::new();
    let mut decoder = xz2::read::XzDecoder::new(file).take(words as u64 * 12);
    decoder.read_to_string(&mut text).expect("sample decodes");
    let tokens: Vec<&str> = text.split_whitespace().take(words).collect();
    let path = dir.join("corpus.txt");
    let mut out = fs_err::File::create(&path).expect("create corpus");
    for line in tokens.chunks(1000) {
        writeln!(out, "{}", line.join(" ")).expect("write corpus");
    }
    path
}

pub fn vocab_of(corpus: &Path, min_count: u64) -> Vocab {
    let mut c = Counter::default();
    c.count_files(&[corpus.to_path_buf()]).expect("count");
    c.into_vocab(min_count, None).expect("vocab")
}

pub fn params(seed: u64) -> TrainParams {
    TrainParams {
        window: 3,
        negative: 4,
        sample: 1e-3,
        alpha: 0.05,
        min_alpha: None,
        iter: 1,
        concurrency: 1,
        minibatches_per_call: 1,
        minibatch: 16,
        seed,
        worker_index: 0,
        num_workers: 1,
        max_sentence: 1000,
        invalid_utf8: Default::default(),
        objective: Objective::SkipGram,
        shared_negatives: false,
    }
}

pub const DIM: u32 = 12;

/// The model of `p` on `counts`, `DIM` wide, as `colonnade train` makes it.
pub fn spec_of(counts: &VocabCounts, p: &TrainParams) -> ModelSpec {
    ModelSpec {
        vocab_fingerprint: counts.fingerprint(),
        vocab_size: counts.len() as u64,
        dim: DIM,
        negative: p.negative,
        sampling_power: 0.75,
        init_seed: p.seed,
        objective: p.objective,
    }
}

/// `n` gRPC shards with the model of `p` over `counts` created on them: the
/// shards, the model's fingerprint and the first worker's pipelines.
pub async fn model_on_grpc(
    n: usize,
    counts: &Arc<VocabCounts>,
    p: &TrainParams,
) -> (Vec<SpawnedShard>, u64, GrpcShards) {
    let (spawned, mut cluster) = grpc_cluster(n).await;
    let fp = cluster
        .create(
            spec_of(counts, p),
            Arc::clone(counts),
            Duration::from_secs(5),
        )
        .await
        .expect("create model");
    let pipes = cluster
        .pipelines(0, Duration::from_secs(30))
        .expect("pipelines");
    (spawned, fp, pipes)
}

/// The weights a worker sends for a call's dot products `dots` (wire order,
/// its `examples` positives first).
pub fn applied_weights(dots: &[f32], examples: usize) -> Vec<f32> {
    dots.iter()
        .enumerate()
        .map(|(t, &f)| colonnade_common::sgns::applied_weight(f, t < examples))
        .collect()
}

/// The call `mbs` alone on `pipe`: its dotprod, then its adjust with the
/// weights a worker sends for those dot products.
pub async fn call_alone<S: ModelShards>(pipe: &mut S, mbs: &[colonnade_proto::Minibatch]) {
    let mut dots = Vec::new();
    pipe.dotprod(mbs, &mut dots).await.expect("dotprod");
    let examples = mbs.iter().map(colonnade_proto::Minibatch::examples).sum();
    let w = applied_weights(&dots, examples);
    pipe.adjust(mbs, &w).await.expect("adjust");
}

/// `n` shards serving gRPC on loopback, and a cluster connected to them.
pub async fn grpc_cluster(n: usize) -> (Vec<SpawnedShard>, Cluster) {
    let mut spawned = Vec::new();
    for _ in 0..n {
        let s = SpawnedShard::start(([127, 0, 0, 1], 0).into(), 2, None)
            .await
            .expect("start shard");
        spawned.push(s);
    }
    let endpoints: Vec<String> = spawned.iter().map(SpawnedShard::endpoint).collect();
    let cluster = Cluster::connect(&Connector::default(), &endpoints, Duration::from_secs(5))
        .await
        .expect("connect");
    (spawned, cluster)
}

/// Creates the model of `p` on `cluster` and trains over gRPC; returns the
/// fingerprint and summary.
pub async fn run(
    mut cluster: Cluster,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, TrainSummary) {
    let counts = vocab.counts_only();
    let fp = cluster
        .create(
            spec_of(&counts, p),
            Arc::clone(&counts),
            Duration::from_secs(5),
        )
        .await
        .expect("create model");
    let shards = cluster
        .pipelines(0, Duration::from_secs(30))
        .expect("pipelines");
    (fp, train_text(shards, vocab, corpus, p).await)
}

/// Trains `p` on the text `corpus` through `shards`, from the start.
async fn train_text<S: ModelShards>(
    shards: S,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> TrainSummary {
    train(
        shards,
        vocab.counts_only(),
        Source::Text(vec![corpus.to_path_buf()], Arc::clone(vocab)),
        p.clone(),
        Arc::new(Progress::default()),
        Arc::default(),
        NoCheckpoints,
    )
    .await
    .expect("train")
}

/// Creates the model on `cores` (shard i holding the i-th column range) and
/// trains through them in process (`InProcessShards`, what
/// `--embedded-shards` uses); returns the fingerprint and summary.
pub async fn run_on_cores(
    cores: &[Arc<ShardCore>],
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, TrainSummary) {
    let counts = vocab.counts_only();
    let spec = spec_of(&counts, p);
    for (i, core) in cores.iter().enumerate() {
        let shard = ShardSpec::of(&spec, cores.len() as u32, i as u32);
        core.create_model(shard, vocab.counts())
            .expect("create model");
    }
    let fp = spec.fingerprint();
    let shards = InProcessShards::new(cores, fp).expect("shards hold the model");
    (fp, train_text(shards, vocab, corpus, p).await)
}

/// [`run_on_cores`] on `count` fresh shard cores; returns the fingerprint,
/// the cores and the summary.
pub async fn run_in_process(
    count: usize,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, Vec<Arc<ShardCore>>, TrainSummary) {
    let cores: Vec<Arc<ShardCore>> = (0..count).map(|_| Arc::new(ShardCore::new(None))).collect();
    let (fp, summary) = run_on_cores(&cores, vocab, corpus, p).await;
    (fp, cores, summary)
}

/// [`run_in_process`] on `count` shard cores that keep the model's slices
/// side by side in one allocation, as `--embedded-shards` does: training
/// steps each minibatch in one visit per row ([`Siblings`]).
pub async fn run_in_process_joined(
    count: usize,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, Vec<Arc<ShardCore>>, TrainSummary) {
    let siblings = Arc::new(Siblings::default());
    let cores: Vec<Arc<ShardCore>> = (0..count)
        .map(|_| Arc::new(ShardCore::new(None).with_siblings(Arc::clone(&siblings))))
        .collect();
    let (fp, summary) = run_on_cores(&cores, vocab, corpus, p).await;
    (fp, cores, summary)
}

/// Full rows of one matrix, assembled from shard cores in column order.
pub fn assemble(cores: &[Arc<ShardCore>], fp: u64, matrix: Matrix, vocab_size: u64) -> Vec<f32> {
    let d = DIM as usize;
    let mut full = vec![0.0f32; vocab_size as usize * d];
    for core in cores {
        let model = core.model(fp).expect("model on shard");
        let mut part = Vec::new();
        model
            .read_rows(matrix, 0, vocab_size, &mut part)
            .expect("rows");
        place_columns(
            &mut full,
            d,
            model.spec.col_start..model.spec.col_end,
            &part,
        );
    }
    full
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
