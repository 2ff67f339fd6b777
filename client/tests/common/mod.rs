//! Helpers shared by the client's integration tests.
#![allow(dead_code)]

use colonnade_client::shards::{create_model, model_spec, LocalShard, ShardApi};
use colonnade_client::train::{train, train_in_process, Progress, TrainParams, TrainSummary};
use colonnade_common::vocab::{Counter, Vocab};
use colonnade_ps_shard::core::Matrix;
use colonnade_ps_shard::ShardCore;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The first `words` words of the shipped sample corpus, as a plain file, in
/// lines of 1,000 words.
pub fn sample_corpus(dir: &Path, words: usize) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/sample.txt.xz");
    let file = std::fs::File::open(&root).expect("testdata/sample.txt.xz");
    let mut text = String::new();
    let mut decoder = xz2::read::XzDecoder::new(file).take(words as u64 * 12);
    decoder.read_to_string(&mut text).expect("sample decodes");
    let tokens: Vec<&str> = text.split_whitespace().take(words).collect();
    let path = dir.join("corpus.txt");
    let mut out = std::fs::File::create(&path).expect("create corpus");
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
        minibatch: 16,
        seed,
        worker_index: 0,
        num_workers: 1,
        max_sentence: 1000,
        invalid_utf8: Default::default(),
    }
}

pub const DIM: u32 = 12;

/// Creates the model on `shards` and trains; returns the fingerprint and summary.
pub async fn run<S: ShardApi>(
    shards: Vec<S>,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, TrainSummary) {
    let spec = model_spec(vocab, DIM, p.negative, 0.75, p.seed);
    let fp = create_model(&shards, &spec, vocab)
        .await
        .expect("create model");
    let summary = train(
        shards,
        fp,
        Arc::clone(vocab),
        vec![corpus.to_path_buf()],
        p.clone(),
        Arc::new(Progress::default()),
    )
    .await
    .expect("train");
    (fp, summary)
}

/// Creates the model on `count` fresh shard cores and trains through them in
/// process (`train_in_process`, what `--embedded-shards` uses); returns the
/// fingerprint, the cores and the summary.
pub async fn run_in_process(
    count: usize,
    vocab: &Arc<Vocab>,
    corpus: &Path,
    p: &TrainParams,
) -> (u64, Vec<Arc<ShardCore>>, TrainSummary) {
    let cores: Vec<Arc<ShardCore>> = (0..count).map(|_| Arc::new(ShardCore::new(None))).collect();
    let shards: Vec<LocalShard> = cores
        .iter()
        .enumerate()
        .map(|(i, c)| LocalShard::new(format!("local-{i}"), Arc::clone(c), 1))
        .collect();
    let spec = model_spec(vocab, DIM, p.negative, 0.75, p.seed);
    let fp = create_model(&shards, &spec, vocab)
        .await
        .expect("create model");
    let models = cores.iter().map(|c| c.model(fp).expect("model")).collect();
    let summary = train_in_process(
        models,
        Arc::clone(vocab),
        vec![corpus.to_path_buf()],
        p.clone(),
        Arc::new(Progress::default()),
    )
    .await
    .expect("train in process");
    (fp, cores, summary)
}

/// Full rows of one matrix, assembled from shard cores in column order.
pub fn assemble(cores: &[Arc<ShardCore>], fp: u64, matrix: Matrix, vocab_size: u64) -> Vec<f32> {
    let d = DIM as usize;
    let mut full = vec![0.0f32; vocab_size as usize * d];
    for core in cores {
        let model = core.model(fp).expect("model on shard");
        let (c0, c1) = (model.spec.col_start as usize, model.spec.col_end as usize);
        let mut part = Vec::new();
        model
            .read_rows(matrix, 0, vocab_size, &mut part)
            .expect("rows");
        let cols = c1 - c0;
        for r in 0..vocab_size as usize {
            full[r * d + c0..r * d + c1].copy_from_slice(&part[r * cols..(r + 1) * cols]);
        }
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
