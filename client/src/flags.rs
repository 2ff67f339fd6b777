//! Flags more than one command takes: how a corpus is counted
//! ([`CountArgs`], `vocab` and `train`), what to do with invalid UTF-8
//! ([`InvalidUtf8Arg`], `vocab`, `train` and `encode`), and sizes in bytes.

use clap::Args;
use colonnade_common::corpus::InvalidUtf8;
use std::path::PathBuf;

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

pub const INVALID_UTF8_HELP: &str = "What to do with a sentence (a line, or a 10,000-token \
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

/// word2vec's single-dash flags, and what Colonnade calls them.
const WORD2VEC_FLAGS: &[(&str, &str)] = &[
    ("train", "--corpus FILE"),
    ("output", "--output-text FILE (or --output-binary FILE, word2vec's -binary 1)"),
    ("binary", "--output-binary FILE for word2vec's binary format, --output-text FILE for its text"),
    ("size", "--size N (or --vector-size N)"),
    ("window", "--window N"),
    ("sample", "--sample X"),
    ("hs", "nothing: hierarchical softmax is not supported, Colonnade trains with negative sampling (--negative N)"),
    ("negative", "--negative N"),
    ("threads", "--threads N"),
    ("iter", "--iter N (or --epochs N)"),
    ("min-count", "--min-count N"),
    ("alpha", "--alpha X"),
    ("cbow", "--cbow for CBOW (a switch: no 1), nothing for skip-gram (the default)"),
    ("save-vocab", "--save-vocab FILE"),
    ("read-vocab", "--vocab FILE"),
    ("classes", "nothing: k-means classes are not supported"),
    ("debug", "--log-format (logs are on by default)"),
];

/// Names that users of gensim, fastText or word2vec give as double-dash
/// flags, where Colonnade's name is not close enough to be suggested.
const OTHER_NAMES: &[(&str, &str)] = &[
    ("hs", "hierarchical softmax is not supported: Colonnade trains with negative sampling (--negative N)"),
    ("sg", "skip-gram is the default; give --cbow for CBOW"),
    ("cbow-mean", "CBOW always averages its context (gensim's cbow_mean=1)"),
    ("dim", "--size N (or --vector-size N)"),
    ("epoch", "--iter N (or --epochs N)"),
    ("lr", "--alpha X"),
    ("ws", "--window N"),
    ("neg", "--negative N"),
    ("thread", "--threads N"),
    ("workers", "--threads N"),
    ("input", "--corpus FILE"),
    ("train", "--corpus FILE"),
    ("corpus-file", "--corpus FILE"),
    ("max-final-vocab", "--max-vocab N"),
    ("ns-exponent", "--sampling-power X"),
    ("read-vocab", "--vocab FILE"),
];

/// The message for word2vec's single-dash spelling of a flag in `args`
/// (`-cbow 1`), which clap would read as a cluster of short flags.
pub fn word2vec_spelling<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Option<String> {
    let hints: Vec<String> = args
        .iter()
        .skip(1)
        .filter_map(|a| a.as_ref().to_str())
        .filter(|a| a.starts_with('-') && !a.starts_with("--"))
        .filter_map(|a| {
            let name = &a[1..];
            WORD2VEC_FLAGS
                .iter()
                .find(|(w, _)| *w == name)
                .map(|(_, ours)| format!("  {a}: {ours}"))
        })
        .collect();
    (!hints.is_empty()).then(|| {
        format!(
            "word2vec's single-dash flags are not Colonnade's; its flags take two dashes:\n{}",
            hints.join("\n")
        )
    })
}

/// An unknown flag's hint: what a user of another trainer means by it, or
/// clap's suggestion when it is close to what was typed (clap also suggests
/// flags that merely share a letter or two, e.g. `--p` for `--epochs`).
pub fn unknown_flag_hint(given: &str, suggested: Option<&str>) -> Option<String> {
    let name = given.trim_start_matches('-').split('=').next()?;
    let normalised = name.replace('_', "-").to_lowercase();
    if let Some((_, ours)) = OTHER_NAMES.iter().find(|(n, _)| *n == normalised) {
        return Some(format!("--{name}: {ours}"));
    }
    let suggested = suggested?.trim_start_matches('-');
    let close = strsim::normalized_levenshtein(&normalised, suggested) >= 0.6
        || (normalised.len() >= 3 && suggested.starts_with(&normalised));
    close.then(|| format!("a similar flag exists: --{suggested}"))
}
