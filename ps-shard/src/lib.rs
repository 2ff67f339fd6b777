//! The Colonnade parameter-server shard (paper section 5.1): it holds a column
//! slice [col_start, col_end) of every input vector u(w) and output vector v(w)
//! in two flat row-major f32 arrays, serves `dotprod` and `adjust` for client
//! minibatches, regenerates negatives from the client's seed, and streams rows
//! out for export.
//!
//! Layout, by data: [`hogwild`] is the only shared mutable state (a lock per
//! row, with its safety argument; the shards of one process may keep a
//! model's slices side by side in one allocation, [`model::Siblings`]); [`plan`] draws and groups a minibatch's
//! targets; [`loops`] are the two SIMD loops over a plan; [`model`] is one
//! model's slice and its operations; [`registry`] the models a shard holds;
//! [`service`] the thin tonic adapter (which pairs a `dotprod` with its
//! `adjust`), [`server`] wires it with health checks, TLS and
//! [`observe`]'s metrics; [`in_process`] reaches
//! a model's shards in this process through the same boundary trait the
//! client uses over gRPC; [`checkpoints`] keeps models in a data dir
//! (barrier, crash-safe versions, restore, load at start-up). A shard never sends vectors or gradients during
//! training, never needs state between a `dotprod` and its `adjust` (a
//! cached plan is an optimisation: a miss draws it again from the seed), and
//! never changes state on a request it rejects.

pub mod checkpoints;
#[cfg(test)]
mod fixture;
pub mod hogwild;
pub mod in_process;
mod loops;
pub mod model;
pub mod observe;
pub mod plan;
pub mod registry;
pub mod server;
pub mod service;

pub use crate::in_process::InProcessShards;
pub use crate::model::Siblings;
pub use crate::registry::{Created, ShardCore};
pub use crate::server::{serve, ServeOptions, SpawnedShard};
pub use colonnade_proto::{Matrix, ShardError, ShardSpec};
