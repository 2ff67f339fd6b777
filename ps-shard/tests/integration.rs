//! The shard's integration tests, one test binary (one link of every
//! dependency instead of one per file). Each module is a file beside this
//! one. `allocations.rs` stays a binary of its own: it installs a counting
//! global allocator.

mod column_split;
mod fuzz;
mod limits;
