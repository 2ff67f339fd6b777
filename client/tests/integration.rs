//! The client's integration tests, one test binary (one link of every
//! dependency instead of one per file). Each module is a file beside this
//! one; `common` holds their shared helpers.

mod cluster;
mod common;
mod determinism;
mod env_vars;
mod recovery;
mod reference;
mod refresh;
