//! Evaluation and search over trained vectors, read from any file
//! `colonnade-formats` reads. The modules, from the top down:
//!
//! * the commands: [`evaluate`] is `colonnade eval` (its flags, which
//!   evaluations run, the report) and [`similar`] is `colonnade similar`
//!   (exact nearest neighbours);
//! * one module per evaluation, each with the reader of its file: analogy
//!   accuracy ([`analogy`]) and word-pair similarity ([`pairs`]), scored as
//!   gensim scores them; node classification, scored as scikit-learn's
//!   one-vs-rest logistic regression scores it ([`classify`]: the labels
//!   file, the splits and the report, over [`one_vs_rest`]: the classifiers,
//!   their predictions and the F1 scores); and the recall of planted groups
//!   among nearest neighbours ([`groups`], searching with
//!   [`similar::neighbours`]);
//! * what they share: unit rows ([`embeddings`]: normalised in memory, or an
//!   uncompressed HDF5 file's rows used in place from a memory map with their
//!   inverse norms; the classifiers use the raw rows), blocked matrix
//!   products ([`knn`]), the readers' error ([`error`]) and their text
//!   rules (`text`, private to the crate).
//!
//! A module imports only from the modules below it (and [`groups`] the one
//! search function of [`similar`]): nothing imports [`evaluate`], and
//! [`error`] and `text` import no evaluation.
//!
//! Row order is the file's, most frequent word first, so "the first N rows"
//! means the N most frequent words. This crate only reads vector files: it
//! must never talk to shards, train or change the vectors, or write a model
//! (the node classifiers it fits live in memory for one evaluation).

pub mod analogy;
pub mod classify;
pub mod embeddings;
pub mod error;
pub mod evaluate;
pub mod groups;
pub mod knn;
pub mod one_vs_rest;
pub mod pairs;
pub mod similar;
mod text;

/// The seconds since `start`, to the millisecond, for a log field
/// (`seconds=0.013`, not `0.013051273`), as `colonnade_setup::log::seconds`
/// does in the binaries; this crate does not link the process setup.
pub(crate) fn seconds_since(start: std::time::Instant) -> f64 {
    (start.elapsed().as_secs_f64() * 1e3).round() / 1e3
}
