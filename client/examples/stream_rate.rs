//! How fast one worker's minibatch stream runs on its own: the reader
//! thread's whole job (read, tokenize, look up, subsample, draw windows,
//! form minibatches with identity, seed and learning rate), with no shard.
//! Training cannot go faster than this on one worker.
//!
//!     cargo run --release -p colonnade-client --example stream_rate -- CORPUS VOCAB [ITER]
//!
//! Prints words/s (corpus tokens ÷ seconds) and minibatches/s.

use colonnade_client::stream::{form_minibatches, BatchFormer, Schedule, StreamParams};
use colonnade_common::corpus::{InvalidUtf8, DEFAULT_MAX_SENTENCE};
use colonnade_common::sgns::keep_threshold;
use colonnade_common::vocab::Vocab;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: stream_rate CORPUS VOCAB [ITER]";
    let corpus = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let vocab = Arc::new(Vocab::load(&PathBuf::from(
        args.next().ok_or_else(|| anyhow::anyhow!(usage))?,
    ))?);
    let iter: u32 = args.next().map_or(Ok(1), |s| s.parse())?;
    let total = vocab.total_count();
    let keep: Arc<[u32]> = vocab
        .counts()
        .iter()
        .map(|&c| keep_threshold(c, total, 1e-3))
        .collect();
    let schedule = Schedule {
        alpha0: 0.025,
        min_alpha: None,
        words_total: u64::from(iter) * total,
    };
    let former = BatchFormer::new(keep, 5, 256, 1, 0, schedule);
    let params = StreamParams {
        source: colonnade_client::stream::Source::Text(vec![corpus], Arc::clone(&vocab)),
        iter,
        worker_index: 0,
        num_workers: 1,
        max_sentence: DEFAULT_MAX_SENTENCE,
        invalid_utf8: InvalidUtf8::Skip,
        skip: Default::default(),
    };
    let (mut tokens, mut minibatches) = (0u64, 0u64);
    let start = Instant::now();
    form_minibatches(&params, former, |job| {
        tokens += job.tokens;
        minibatches += job.minibatches.len() as u64;
        true
    })?;
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{tokens} words, {minibatches} minibatches in {seconds:.2} s: {:.0} words/s, {:.0} minibatches/s",
        tokens as f64 / seconds,
        minibatches as f64 / seconds
    );
    Ok(())
}
