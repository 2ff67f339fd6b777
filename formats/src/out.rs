//! A buffered output file for the whitespace-separated formats, and the check
//! that a word can be written in them.

use crate::Error;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Refuses a word that a whitespace-separated format cannot hold.
pub(crate) fn check_word(word: &str, path: &Path) -> Result<(), Error> {
    let refuse = |msg: String| {
        Err(Error::Format {
            path: path.to_path_buf(),
            msg,
        })
    };
    if word.is_empty() {
        return refuse("cannot write an empty word".into());
    }
    if let Some(c) = word.bytes().find(u8::is_ascii_whitespace) {
        return refuse(format!(
            "the word {word:?} contains ASCII whitespace ({c:#04x}); this format separates fields by whitespace"
        ));
    }
    Ok(())
}

pub(crate) struct Out {
    pub(crate) path: PathBuf,
    pub(crate) w: BufWriter<fs_err::File>,
}

impl Out {
    pub(crate) fn create(path: &Path) -> Result<Self, Error> {
        let file = fs_err::File::create(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, file),
        })
    }

    /// Flushes the buffer; returns the path written.
    pub(crate) fn finish(mut self) -> Result<PathBuf, Error> {
        self.w.flush()?;
        Ok(self.path)
    }
}
