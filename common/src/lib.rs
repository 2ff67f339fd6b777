//! What every Colonnade component must agree on bit for bit: the vocabulary and
//! its order and fingerprint ([`vocab`], its words stored by [`words`]), seed derivation ([`seeds`]), the
//! negative sampler ([`sampler`]), the initial value of every vector row
//! ([`init`]), the SGNS math and schedules ([`sgns`]), the column split
//! ([`model`]), the vector kernels ([`kernels`]), streaming corpus reading
//! ([`corpus`]), exact vocabulary counting in bounded memory ([`count`]),
//! the encoded corpus format ([`encoded`], with [`varint`]) and
//! configuration conventions and the metrics endpoint ([`config`]).
//!
//! Shards, clients and the exporter link this crate so they can never disagree.
//! Its only I/O is files: corpora, vocabulary files, encoded corpora and the
//! counter's spilled runs (plus the plaintext metrics listener `config`
//! serves). It must never depend on the transport (no gRPC here).

pub mod config;
pub mod corpus;
pub mod count;
pub mod encoded;
pub mod init;
pub mod kernels;
pub mod model;
pub mod sampler;
pub mod seeds;
pub mod sgns;
pub mod varint;
pub mod vocab;
pub mod words;
