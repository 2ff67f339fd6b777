//! Helpers shared by the client's integration tests.
#![allow(dead_code)]

use colonnade_client::shards::{create_model, model_spec, GrpcShard, GrpcShards};
use colonnade_client::stream::Source;
use colonnade_client::train::{train, NoCheckpoints, Progress, TrainParams, TrainSummary};
use colonnade_common::model::{column_range, place_columns};
use colonnade_common::vocab::{Counter, Vocab};
use colonnade_ps_shard::{InProcessShards, Matrix, ShardCore, ShardSpec, Siblings, SpawnedShard};
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
        iter: 1,
        concurrency: 1,
        minibatches_per_call: 1,
        minibatch: 16,
        seed,
        worker_index: 0,
        num_workers: 1,
        max_sentence: 1000,
        invalid_utf8: Default::default(),
        cbow: false,
    }
}

pub const DIM: u32 = 12;

/// `n` shards serving gRPC on loopback, and connections to them.
pub async fn grpc_cluster(n: usize) -> (Vec<SpawnedShard>, Vec<GrpcShard>) {
    let mut spawned = Vec::new();
    let mut shards = Vec::new();
    for _ in 0..n {
        let s = SpawnedShard::start(([127, 0, 0, 1], 0).into(), 2, None)
            .await
            .expect("start shard");
        shards.push(
            GrpcShard::connect(&s.endpoint(), Duration::from_secs(5))
                .await
                .expect("connect"),
        );
        spawned.push(s);
    }
    (spawned, shards)
}

/// Creates the model on `shards` and trains over gRPC; returns the
/// fingerprint and summary.
pub async fn run(
    shards: Vec<GrpcShard>,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, TrainSummary) {
    let counts = vocab.counts_only();
    let mut spec = model_spec(&counts, DIM, p.negative, 0.75, p.seed);
    spec.cbow = p.cbow;
    let fp = create_model(&shards, &spec, &counts)
        .await
        .expect("create model");
    let summary = train(
        GrpcShards::new(shards, fp, p.negative),
        counts,
        Source::Text(vec![corpus.to_path_buf()], Arc::clone(vocab)),
        p.clone(),
        Arc::new(Progress::default()),
        Arc::default(),
        NoCheckpoints,
    )
    .await
    .expect("train");
    (fp, summary)
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
    let mut spec = model_spec(&counts, DIM, p.negative, 0.75, p.seed);
    spec.cbow = p.cbow;
    for (i, core) in cores.iter().enumerate() {
        let cols = column_range(DIM, cores.len() as u32, i as u32);
        let shard = ShardSpec {
            model: spec.clone(),
            col_start: cols.start,
            col_end: cols.end,
        };
        core.create_model(shard, vocab.counts())
            .expect("create model");
    }
    let fp = spec.fingerprint();
    let shards = InProcessShards::new(cores, fp).expect("shards hold the model");
    let summary = train(
        shards,
        counts,
        Source::Text(vec![corpus.to_path_buf()], Arc::clone(vocab)),
        p.clone(),
        Arc::new(Progress::default()),
        Arc::default(),
        NoCheckpoints,
    )
    .await
    .expect("train in process");
    (fp, summary)
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
