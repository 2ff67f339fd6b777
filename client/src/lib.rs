//! The Colonnade client (`colonnade`): a stateless worker that reads its part of
//! the corpus, forms minibatches ([`batch`]), drives the shards through
//! `dotprod`/`adjust` ([`train`], over [`shards::ShardApi`]) and exports the
//! result; plus the `vocab` and `export` commands ([`cli`]), `models`
//! ([`models`]: list and drop the models running shards hold), and the
//! commands that use trained vectors, `eval` and `similar`, which run
//! `colonnade-eval`.
//!
//! While training it holds no model state: every vector lives on the shards. It must never
//! send vectors or gradients, only word ids, seeds and weights.

pub mod batch;
pub mod cli;
pub mod health;
pub mod models;
pub mod preflight;
pub mod shards;
pub mod train;
