//! A buffered output file for the whitespace-separated formats, and the check
//! that a word can be written in them.

use crate::staged::Staged;
use crate::Error;
use std::io::BufWriter;
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

/// An output file written through a buffer under a temporary name
/// ([`Staged`]): it gets its name only when [`Out::finish`] succeeds.
pub(crate) struct Out {
    /// The name the file will have, for messages.
    pub(crate) path: PathBuf,
    pub(crate) w: BufWriter<fs_err::File>,
    staged: Staged,
}

impl Out {
    pub(crate) fn create(path: &Path) -> Result<Self, Error> {
        let staged = Staged::new(path);
        let file = fs_err::File::create(staged.path())?;
        Ok(Self {
            path: path.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, file),
            staged,
        })
    }

    /// Flushes the buffer and gives the file its name; returns the path
    /// written. On an error the temporary file is removed.
    pub(crate) fn finish(self) -> Result<PathBuf, Error> {
        let Self { path, w, staged } = self;
        let file = w.into_inner().map_err(|e| in_file(&path, e.into_error()))?;
        drop(file);
        staged.commit().map_err(|e| match e {
            Error::Io(io) => in_file(&path, io),
            other => other,
        })
    }
}

/// An I/O error writing `path` (fs-err names the temporary file; the
/// message names the one asked for).
pub(crate) fn in_file(path: &Path, e: std::io::Error) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        msg: format!("cannot write: {e}"),
    }
}
