//! The Colonnade client (`colonnade`): a stateless worker that reads its part of
//! the corpus into its one minibatch stream ([`stream`]), steps every
//! minibatch through the model's shards with the SGNS step ([`train`], over
//! [`colonnade_proto::ModelShards`]: [`shards::GrpcShards`] or the in-process
//! `colonnade_ps_shard::InProcessShards`) and exports the result; plus the
//! `vocab` and `export` commands ([`cli`]), `models` ([`models`]: list and
//! drop the models running shards hold), and the commands that use trained
//! vectors, `eval` and `similar`, which run `colonnade-eval`.
//!
//! While training it holds no model state: every vector lives on the shards. It must never
//! send vectors or gradients, only word ids, seeds and weights, and never
//! depend on a shard's internals (only on the boundary in `colonnade-proto`
//! and `InProcessShards`).

pub mod certs;
pub mod cli;
pub mod encode;
pub mod health;
pub mod models;
pub mod preflight;
pub mod recovery;
pub mod shards;
pub mod stream;
pub mod synth;
pub mod train;
