//! `colonnade vocab`, and counting a corpus into a vocabulary for `train`:
//! exact counts in bounded memory (`colonnade_common::count`), with progress.

use crate::cli::vocab::VocabArgs;
use crate::flags::CountArgs;
use crate::preflight::{available_memory, human_bytes};
use colonnade_common::corpus::{InvalidUtf8, DEFAULT_MAX_SENTENCE};
use colonnade_common::count::CountOptions;
use colonnade_common::vocab::{Vocab, VocabWriter};
use colonnade_common::words::{unwritable, WordTable};
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
    let mut bad = None;
    let stats = counted.vocabulary(args.min_count, args.max_vocab, |w, c| {
        refuse_unwritable(w, &mut bad)?;
        writer.push(w, c).map_err(|e| e.to_string())
    });
    let stats = stats.map_err(|e| unwritable_in(&args.corpus, bad, e.into()))?;
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
    let mut bad = None;
    let stats = counted.vocabulary(min_count, max_vocab, |w, c| {
        refuse_unwritable(w, &mut bad)?;
        let _ = words.push(w);
        counts.push(c);
        Ok(())
    });
    let stats = stats.map_err(|e| unwritable_in(corpus, bad, e.into()))?;
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

/// Stops the vocabulary at a word no output could hold (a control
/// character, [`unwritable`]), keeping it in `bad` for [`unwritable_in`].
fn refuse_unwritable(word: &str, bad: &mut Option<(String, String)>) -> Result<(), String> {
    match unwritable(word) {
        None => Ok(()),
        Some(why) => {
            let msg = format!("word {word:?} {why}");
            *bad = Some((word.to_owned(), why));
            Err(msg)
        }
    }
}

/// The error of a vocabulary stopped by `bad`, naming the corpus file and
/// line it first occurs on (read again: only on this error); `other` when
/// the vocabulary stopped for another reason.
fn unwritable_in(
    corpus: &[PathBuf],
    bad: Option<(String, String)>,
    other: anyhow::Error,
) -> anyhow::Error {
    let Some((word, why)) = bad else {
        return other;
    };
    let shown: String = word.chars().take(80).collect();
    match first_occurrence(corpus, &word) {
        Some((path, line)) => anyhow::anyhow!(
            "--corpus {}:{line}: the word {shown:?} {why}",
            path.display()
        ),
        None => anyhow::anyhow!("--corpus: the word {shown:?} {why}"),
    }
}

/// The file and line (from 1) where `word` first occurs as a token of
/// `corpus` (tokens split on ASCII whitespace, as the corpus reader does).
fn first_occurrence(corpus: &[PathBuf], word: &str) -> Option<(PathBuf, u64)> {
    use std::io::BufRead as _;
    for path in corpus {
        let mut reader = colonnade_common::corpus::open(path).ok()?;
        let mut line = Vec::new();
        let mut lineno = 0u64;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => lineno += 1,
            }
            if line
                .split(u8::is_ascii_whitespace)
                .any(|t| t == word.as_bytes())
            {
                return Some((path.clone(), lineno));
            }
        }
    }
    None
}
