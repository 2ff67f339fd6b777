//! Ctrl-C during `colonnade train` ([`Interrupts`]): what it stops, and
//! what it says. Before training nothing was trained, so the process exits;
//! while embedded shards train, training stops after the minibatches queued
//! and the vectors trained so far are written, marked interrupted; a worker
//! of running shards stops at once (the model stays on the shards, where the
//! newest checkpoint lets the same command resume it). A second Ctrl-C
//! always exits at once.
//!
//! It must never write anything itself: the run decides what is written.

use crate::train::Progress;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

/// Exit status of a process ended by SIGINT, as shells report it.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The error a run ends with after an interrupted training wrote its
/// outputs: the process exits with [`EXIT_INTERRUPTED`].
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

const PREPARING: u8 = 0;
const TRAINING_EMBEDDED: u8 = 1;
const TRAINING_REMOTE: u8 = 2;
const WRITING: u8 = 3;

/// The phase of a run Ctrl-C acts on, and the handler that acts.
pub struct Interrupts {
    phase: Arc<AtomicU8>,
}

impl Interrupts {
    /// Takes over Ctrl-C (SIGINT) for the rest of the process; `progress`
    /// is where an embedded run's training is told to stop.
    pub fn install(progress: Arc<Progress>) -> Self {
        let phase = Arc::new(AtomicU8::new(PREPARING));
        let seen = Arc::clone(&phase);
        tokio::spawn(async move {
            loop {
                if tokio::signal::ctrl_c().await.is_err() {
                    // No signal handling on this platform: the default stays.
                    return;
                }
                let already = progress.interrupted.swap(true, Relaxed);
                match seen.load(Relaxed) {
                    TRAINING_EMBEDDED if !already => {
                        tracing::warn!("interrupted (Ctrl-C)");
                        eprintln!(
                            "\ninterrupted: training stops after the minibatches in flight, then \
                             the vectors trained so far are written to the outputs, marked \
                             interrupted in their provenance (Ctrl-C again quits at once, \
                             writing nothing)"
                        );
                    }
                    TRAINING_EMBEDDED => quit("interrupted again: quitting without writing"),
                    TRAINING_REMOTE => quit(
                        "interrupted: this worker stops; the model stays on the shards. With \
                         ps-shard --data-dir, running the same command again resumes from the \
                         newest checkpoint",
                    ),
                    WRITING => {
                        quit("interrupted while writing the outputs: they may be incomplete")
                    }
                    _ => quit("interrupted before training: nothing was trained or written"),
                }
            }
        });
        Self { phase }
    }

    /// No handler: the phases are kept but nothing acts on Ctrl-C (a host
    /// program stops the run through `Progress::interrupted` itself).
    pub fn inert() -> Self {
        Self {
            phase: Arc::new(AtomicU8::new(PREPARING)),
        }
    }

    /// Training starts: embedded shards (`embedded`), or running ones.
    pub fn training(&self, embedded: bool) {
        let phase = if embedded {
            TRAINING_EMBEDDED
        } else {
            TRAINING_REMOTE
        };
        self.phase.store(phase, Relaxed);
    }

    /// Training is over: the outputs are being written.
    pub fn writing(&self) {
        self.phase.store(WRITING, Relaxed);
    }
}

/// Ends the process from the signal task: the run's own task is blocked in
/// training or writing and cannot be asked to return.
#[allow(clippy::exit)]
fn quit(message: &str) -> ! {
    eprintln!("\n{message}");
    std::process::exit(i32::from(EXIT_INTERRUPTED));
}
