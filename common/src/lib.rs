//! What every Colonnade component must agree on bit for bit: the vocabulary and
//! its order and fingerprint ([`vocab`], its words stored by [`words`]), seed derivation ([`seeds`]), the
//! negative sampler ([`sampler`]), the initial value of every vector row
//! ([`init`]), the SGNS math, schedules and the divergence rule ([`sgns`]),
//! the model's spec, objective, matrices and column split ([`model`]), the vector kernels ([`kernels`]), streaming corpus reading
//! ([`corpus`]), exact vocabulary counting in bounded memory ([`count`]),
//! and the encoded corpus format ([`encoded`], with [`varint`]).
//!
//! Shards, clients and the exporter link this crate so they can never disagree.
//! Its only I/O is files: corpora, vocabulary files, encoded corpora and the
//! counter's spilled runs. It must never touch the network or set up the
//! process (logging, metrics, credentials: `colonnade-setup`).

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
