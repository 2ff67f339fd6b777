//! The Colonnade parameter-server shard (paper section 5.1): it holds a column
//! slice [col_start, col_end) of every input vector u(w) and output vector v(w)
//! in two flat row-major f32 arrays, serves `dotprod` and `adjust` for client
//! minibatches, regenerates negatives from the client's seed, and streams rows
//! out for export.
//!
//! Layout, from the data up: [`hogwild`] is the only shared mutable state
//! (rows with a lock each, their memory layout and size, with the safety
//! argument; the shards of one process may keep a model's slices side by
//! side in one allocation, [`Siblings`]); [`plan`] draws and groups a
//! minibatch's targets, and [`stale`] counts the dot products of calls in
//! flight per row; [`loops`] are the SIMD loops over a plan, which with
//! [`finite`] keep every value finite; [`model`]
//! is one model's slice and its operations, [`whole`] the shards of a model
//! holding whole vectors and their fused step; [`checkpoints`] keeps a
//! model in a data dir (barrier, crash-safe versions, restore, load at
//! start-up, quarantining a model whose files are bad: [`datadir`]) and
//! [`registry`] the models a shard holds, with their checkpoints, [`roles`]
//! what the worker and admin tokens may do with them; [`service`] is the
//! thin tonic adapter (which pairs a `dotprod` with its `adjust` through
//! [`plan_cache`]; [`work`]
//! bounds a call's CPU work), [`server`] wires it with health checks, TLS,
//! the connection limits of [`connections`], the admission before decoding
//! of [`edge`] and [`observe`]'s metrics;
//! [`in_process`] reaches a model's shards in this process through the same
//! boundary trait the client uses over gRPC, and [`embedded`] starts the
//! shards of a client process.
//!
//! A shard never sends vectors or gradients during training, never needs
//! state between a `dotprod` and its `adjust` (a cached plan is an
//! optimisation: a miss draws it again from the seed; the pending counts
//! only scale steps), and never changes state on a request it rejects.

pub mod checkpoints;
pub mod connections;
pub mod datadir;
pub mod edge;
pub mod embedded;
pub mod finite;
#[cfg(test)]
mod fixture;
pub mod hogwild;
pub mod in_process;
mod loops;
pub mod model;
pub mod observe;
pub mod plan;
pub mod plan_cache;
pub mod registry;
pub mod roles;
pub mod server;
pub mod service;
pub mod stale;
pub mod whole;
pub mod work;

pub use crate::embedded::EmbeddedCluster;
pub use crate::hogwild::Siblings;
pub use crate::in_process::InProcessShards;
pub use crate::registry::{Created, ShardCore};
pub use crate::server::{serve, ServeOptions, SpawnedShard};
pub use colonnade_common::model::{Matrix, ShardSpec};
pub use colonnade_proto::ShardError;
