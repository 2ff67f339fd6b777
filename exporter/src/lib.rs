//! The Colonnade exporter: pulls every shard's column slice of the vectors,
//! reassembles full rows in blocks (memory bounded by the block, never the
//! whole matrix) and writes them as HDF5 ([`hdf5_out`]), word2vec text and
//! binary ([`word2vec`]) and the TensorBoard projector's TSV files ([`tsv`]).
//!
//! It only reads shard state (`PullRows`, `Status`); it must never modify a
//! model. HDF5 layout: `vectors` f32 [V, D] (input vectors), `words` UTF-8
//! strings [V], `counts` u64 [V], optionally `output_vectors` f32 [V, D], and
//! the configuration, seed, fingerprint and version as attributes of the root
//! group (see docs/formats.md).

pub mod cli;
pub mod hdf5_out;
pub mod outputs;
pub mod pull;
pub mod tsv;
pub mod word2vec;

pub use pull::{
    describe_model, discover, export, parse_fingerprint, ExportOptions, ExportSummary, ShardHandle,
};
