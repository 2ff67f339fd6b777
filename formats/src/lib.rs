//! Every vector file Colonnade writes or reads, in both directions: word2vec
//! text and binary ([`word2vec`]), HDF5 ([`h5`]: `vectors` f32 [V, D],
//! `words`, `counts`, optionally `output_vectors`, and the run's
//! [`Provenance`] as root attributes), and the TensorBoard projector's TSV
//! files ([`tsv`], write only). [`read_vectors`] tells the formats apart by
//! content and loads a file whole; [`open_vectors`] is for large files: it
//! hands the words over one by one and uses the rows of an uncompressed
//! HDF5 file in place, from a read-only memory map ([`MappedRows`]).
//! Layouts are documented in docs/formats.md.
//!
//! Row i of every file is word i. Words never contain ASCII whitespace, so the
//! whitespace-separated formats need no escaping; a writer given such a word
//! refuses it. Every error names its file (file I/O goes through `fs-err`).
//!
//! Every file is written under a temporary name beside it and renamed when
//! complete ([`staged`]): a write that fails leaves no partial file.
//!
//! This crate only turns rows into files and files into rows: it must never
//! talk to shards, depend on the transport, or compute on the vectors.

pub mod h5;
mod mapped;
mod out;
pub mod provenance;
pub mod staged;
pub mod tsv;
mod vectors;
pub mod word2vec;

pub use mapped::MappedRows;
pub use provenance::{Provenance, Training};
pub use vectors::{open_vectors, read_vectors, Format, Opened, Rows, Vectors};

use std::path::PathBuf;

/// Why a vector file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// File I/O; the message names the path (it comes from `fs-err`).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The content is not what the format says, or cannot be written in it.
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    #[error("{path}: HDF5 {what}: {source}")]
    Hdf5 {
        path: PathBuf,
        what: String,
        source: hdf5::Error,
    },
}
