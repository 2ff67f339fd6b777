//! The Colonnade client (`colonnade`): a stateless worker that reads its part of
//! the corpus into its one minibatch stream ([`stream`]), steps every
//! minibatch through the model's shards with the SGNS step ([`train`], over
//! [`colonnade_proto::ModelShards`]: [`shards::GrpcShards`] or the in-process
//! `colonnade_ps_shard::InProcessShards`) and exports the
//! result; plus the `vocab` and `export` commands ([`cli`]), and the commands
//! that use trained vectors: `eval` ([`eval`]: analogies and word-pair
//! similarity, gensim-compatible) and `similar` ([`similar`]: exact nearest
//! neighbours), over vectors read back by [`vectors`] and searched by [`knn`];
//! and `models` ([`models`]: list and drop the models running shards hold).
//!
//! While training it holds no model state: every vector lives on the shards. It must never
//! send vectors or gradients, only word ids, seeds and weights.

pub mod cli;
pub mod eval;
pub mod health;
pub mod knn;
pub mod models;
pub mod preflight;
pub mod shards;
pub mod similar;
pub mod stream;
pub mod train;
pub mod vectors;
