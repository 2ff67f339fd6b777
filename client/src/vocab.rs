//! `colonnade vocab`, and counting a corpus into a vocabulary for `train`:
//! exact counts in bounded memory (`colonnade_common::count`), with progress.

use crate::cli::vocab::VocabArgs;
use crate::flags::CountArgs;
use crate::preflight::{available_memory, human_bytes};
use colonnade_common::corpus::{InvalidUtf8, DEFAULT_MAX_SENTENCE};
use colonnade_common::count::CountOptions;
use colonnade_common::vocab::{Vocab, VocabWriter};
use colonnade_common::words::WordTable;
use colonnade_exporter::outputs::{check_outputs, FlagPath};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The cores this process may use.
pub fn available_threads() -> usize {
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
        seconds = colonnade_setup::log::seconds(start.elapsed()),
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
    let bar = colonnade_setup::log::colours().then(|| {
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

pub fn count_vocab(
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
