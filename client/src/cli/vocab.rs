//! The flags of `colonnade vocab`.

use crate::flags::{CountArgs, InvalidUtf8Arg, INVALID_UTF8_HELP};
use clap::Args;
use std::path::PathBuf;

/// Count a corpus and write the vocabulary file.
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
