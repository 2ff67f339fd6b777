//! The Colonnade parameter-server shard (paper section 5.1): it holds a column
//! slice [col_start, col_end) of every input vector u(w) and output vector v(w)
//! in two flat row-major f32 arrays, serves `dotprod` and `adjust` for client
//! minibatches, regenerates negatives from the client's seed, and streams rows
//! out for export.
//!
//! Layout: [`hogwild`] is the only shared mutable state (a lock per row, with
//! its safety argument); [`core`] is the training logic, free of transport;
//! [`service`] is the thin tonic adapter; [`server`] wires it with health
//! checks. A shard never sends vectors or gradients during training, never
//! needs state between a `dotprod` and its `adjust` (it caches the drawn
//! negatives for the `adjust`, but a miss just draws them again from the
//! seed), and never changes state on a request it rejects.

pub mod core;
pub mod hogwild;
pub mod server;
pub mod service;

pub use crate::core::{ShardCore, ShardError, ShardSpec};
pub use crate::server::{serve, SpawnedShard};
