//! The Colonnade exporter: discovers the shards that hold a model together,
//! pulls every shard's column slice of the vectors and reassembles full rows
//! in blocks (memory bounded by the block, never the whole matrix), then hands
//! them to the writers of `colonnade-formats` (HDF5, word2vec text and binary,
//! TensorBoard projector TSV), with the model's provenance. [`cli`] holds the
//! output flags `colonnade train` shares and the `export` command; [`outputs`]
//! checks output paths before any work starts.
//!
//! [`checkpoints`] reads a model from shards' checkpoint directories instead,
//! with no shard running.
//!
//! It only reads shard state (`PullRows`, `Status`, checkpoint files); it must never modify a
//! model, and never lays out a file itself.

pub mod checkpoints;
pub mod cli;
pub mod outputs;
pub mod pull;

pub use pull::{
    describe_model, discover, discover_model, export, model_provenance, parse_fingerprint,
    shard_status, ExportSummary, ShardHandle, Source, Wanted,
};
