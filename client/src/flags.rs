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
