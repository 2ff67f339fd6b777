//! [`EvalError`], the error of reading an evaluation file (analogy questions,
//! word pairs, node labels, groups): it names the file, and the line when
//! there is one.

use std::path::PathBuf;

/// Why an evaluation file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// Reading a file; the message names the path (it comes from `fs-err`).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{path}:{line}: {msg}")]
    Parse {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    /// A file with nothing to evaluate in it.
    #[error("{path}: {msg}")]
    Empty { path: PathBuf, msg: String },
}
