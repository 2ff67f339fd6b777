//! What every Colonnade component must agree on bit for bit: the vocabulary and
//! its order and fingerprint ([`vocab`]), seed derivation ([`seeds`]), the
//! negative sampler ([`sampler`]), the initial value of every vector row
//! ([`init`]), the SGNS math and schedules ([`sgns`]), the column split
//! ([`model`]), the vector kernels ([`kernels`]), streaming corpus reading
//! ([`corpus`]) and configuration conventions ([`config`]).
//!
//! Shards, clients and the exporter link this crate so they can never disagree.
//! It must never do I/O other than reading corpora and vocabulary files, and
//! never depend on the transport (no gRPC here).

pub mod config;
pub mod corpus;
pub mod init;
pub mod kernels;
pub mod model;
pub mod sampler;
pub mod seeds;
pub mod sgns;
pub mod vocab;
