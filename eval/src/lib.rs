//! Evaluation and search over trained vectors, read from any file
//! `colonnade-formats` reads: `colonnade eval` ([`evaluate`]: analogy
//! accuracy in [`analogy`], word-pair similarity in [`pairs`], both scored as
//! gensim scores them) and `colonnade similar` ([`similar`]: exact nearest
//! neighbours). Both search unit rows ([`embeddings`]) by blocked matrix
//! products ([`knn`]).
//!
//! Row order is the file's, most frequent word first, so "the first N rows"
//! means the N most frequent words. This crate only reads vector files: it
//! must never talk to shards, train, or write a model.

pub mod analogy;
pub mod embeddings;
pub mod evaluate;
pub mod knn;
pub mod pairs;
pub mod similar;
