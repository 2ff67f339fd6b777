//! The Colonnade client (`colonnade`): a stateless worker and the commands
//! around it. [`cli`] parses flags and dispatches; [`run`] owns a training
//! run (prepare what it reads, [`source`]; reach or start the shards, create
//! the model and agree on its state, [`cluster`] reading what the shards'
//! statuses say in `agreement`; train with recovery and
//! [`checkpointer`]; export). Training itself is [`stream`] (the worker's one
//! minibatch former, on its reader thread) feeding the pipelines of
//! [`train`], each stepping minibatches through the one SGNS step over
//! [`colonnade_proto::ModelShards`]: [`grpc::GrpcShards`] or the in-process
//! `colonnade_ps_shard::InProcessShards`. The other commands: `vocab`
//! ([`vocab`]), `encode`, `synth`, `models`, `health`, `certs`, `cluster` (shards
//! on this machine, [`local`]), and `eval` and `similar` (`colonnade-eval`).
//!
//! While training it holds no model state: every vector lives on the shards.
//! It must never send vectors or gradients, only word ids, seeds and
//! weights, and never depend on a shard's internals (only on the boundary in
//! `colonnade-proto`, `InProcessShards` and `EmbeddedCluster`).

mod agreement;
pub mod certs;
pub mod checkpointer;
pub mod cli;
pub mod cluster;
pub mod encode;
pub mod flags;
pub mod grpc;
pub mod health;
pub mod identity;
pub mod interrupt;
pub mod local;
pub mod losswatch;
pub mod models;
pub mod preflight;
pub mod run;
pub mod source;
pub mod stream;
pub mod synth;
pub mod train;
pub mod vocab;
