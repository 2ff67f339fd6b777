//! Evaluation and search over trained vectors, read from any file
//! `colonnade-formats` reads: `colonnade eval` ([`evaluate`]: analogy
//! accuracy in [`analogy`], word-pair similarity in [`pairs`], both scored as
//! gensim scores them, and node classification in [`classify`], scored as
//! scikit-learn's one-vs-rest logistic regression scores it, and the recall
//! of planted groups among nearest neighbours in [`groups`]) and
//! `colonnade similar` ([`similar`]: exact nearest neighbours). The searches
//! use unit rows ([`embeddings`]: normalised in memory, or an uncompressed
//! HDF5 file's rows used in place from a memory map with their inverse
//! norms) and blocked matrix products ([`knn`]); the classifiers use the raw
//! rows.
//!
//! Row order is the file's, most frequent word first, so "the first N rows"
//! means the N most frequent words. This crate only reads vector files: it
//! must never talk to shards, train or change the vectors, or write a model
//! (the node classifiers it fits live in memory for one evaluation).

pub mod analogy;
pub mod classify;
pub mod embeddings;
pub mod evaluate;
pub mod groups;
pub mod knn;
pub mod pairs;
pub mod similar;
