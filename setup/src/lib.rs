//! What every Colonnade binary sets up when it starts and at its network
//! edge: the `COLONNADE_*` environment conventions and how a user error ends
//! the process ([`env`]), logging ([`log`]), the Prometheus listener
//! ([`metrics`]), TLS on both sides ([`tls`]), bearer tokens: the one a
//! process sends and the shard's check of the two roles ([`auth`]), and the
//! channels to shards built from them ([`channel`]: a [`Connector`] value,
//! made once from the flags and handed to whatever connects; no global state).
//!
//! This crate must never hold training logic or model state: it knows
//! processes, sockets and credentials, not vectors.

pub mod auth;
pub mod channel;
pub mod env;
pub mod log;
pub mod metrics;
pub mod tls;

pub use auth::{AuthArgs, Scope, Tokens};
pub use channel::{explain, ConnectError, Connector, ShardClient};
pub use tls::ClientTlsArgs;
