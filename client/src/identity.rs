//! What a worker trains, as a record ([`RunRecord`]): its corpus (or graph,
//! or encoded corpus) and its epochs. Every checkpoint manifest keeps it
//! next to the worker's position, so that a resumed run is checked against
//! the run it continues ([`RunRecord::check_resume`]): a model is never
//! trained further on another corpus or schedule without the user asking.
//!
//! It reads file names, lengths and the first MiB of each input only: it
//! must never read a whole corpus (that is the stream's work).

use crate::cli::train::TrainArgs;
use anyhow::{bail, Context};
use std::io::Read;
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// Bytes of each input file hashed into the record (with its length).
const HASHED_PREFIX: u64 = 1 << 20;

/// A worker's run, as recorded in the checkpoint manifests.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunRecord {
    /// What it reads, for people: e.g. `corpus text8 (100000000 bytes)`.
    pub source: String,
    /// xxh3 of the inputs' names, lengths and first MiB (16 hex digits).
    pub source_hash: String,
    /// Epochs (`--iter`).
    pub epochs: u32,
}

impl RunRecord {
    /// The record of the run `args` asks for.
    pub fn of(args: &TrainArgs) -> anyhow::Result<Self> {
        let mut h = Xxh3::new();
        let source = if let Some(graph) = &args.graph.graph {
            let w = args.graph.walk_params();
            h.update(b"graph");
            hash_file(&mut h, graph)?;
            h.update(
                format!(
                    "{} {} {} {} {}",
                    w.walks_per_node, w.walk_length, w.p, w.q, args.graph.directed
                )
                .as_bytes(),
            );
            format!("graph {}", describe(graph))
        } else if let Some(dir) = &args.encoded {
            h.update(b"encoded");
            hash_file(&mut h, &dir.join(colonnade_common::encoded::MANIFEST))?;
            format!("encoded corpus {}", dir.display())
        } else {
            h.update(b"corpus");
            for path in &args.corpus {
                hash_file(&mut h, path)?;
            }
            let names: Vec<String> = args.corpus.iter().map(|p| describe(p)).collect();
            format!("corpus {}", names.join(", "))
        };
        Ok(Self {
            source,
            source_hash: format!("{:016x}", h.digest()),
            epochs: args.iter,
        })
    }

    /// Refuses to resume `recorded` (the run a checkpoint of model
    /// `fingerprint` was taken in) as this run when they read different
    /// inputs or have different epochs; `finished`: that worker's part was
    /// done in the checkpoint.
    pub fn check_resume(
        &self,
        recorded: &RunRecord,
        fingerprint: u64,
        version: u64,
        finished: bool,
    ) -> anyhow::Result<()> {
        let mut changed = Vec::new();
        if recorded.source_hash != self.source_hash {
            changed.push(format!(
                "it was trained on {}, this run reads {}",
                recorded.source, self.source
            ));
        }
        if recorded.epochs != self.epochs {
            changed.push(format!(
                "it was trained for --iter {}, this run asks for --iter {}",
                recorded.epochs, self.epochs
            ));
        }
        if changed.is_empty() {
            return Ok(());
        }
        let state = if finished {
            "is trained to the end"
        } else {
            "is partly trained"
        };
        bail!(
            "model {fingerprint:016x} on the shards {state} (checkpoint version {version}), but \
             {}. Training a model further on another corpus or schedule is not supported: give \
             --restart to train it afresh from its initial state with this run's corpus and \
             --iter (its checkpoints are removed), or a different --seed to train a separate \
             model next to it; to continue the recorded run, give its corpus and --iter",
            changed.join("; and ")
        )
    }
}

/// A file's name (not its directory: workers may mount it elsewhere) and
/// length, or its path when it cannot be read.
fn describe(path: &Path) -> String {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    match fs_err::metadata(path) {
        Ok(m) if m.is_file() => format!("{name} ({} bytes)", m.len()),
        _ => name,
    }
}

/// Adds a file's name, length and first [`HASHED_PREFIX`] bytes to `h`;
/// standard input (`-`) by its name only.
fn hash_file(h: &mut Xxh3, path: &Path) -> anyhow::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    h.update(name.unwrap_or_default().as_bytes());
    h.update(&[0]);
    if path == Path::new("-") {
        return Ok(());
    }
    let file = fs_err::File::open(path)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    h.update(&len.to_le_bytes());
    let mut prefix = Vec::new();
    file.take(HASHED_PREFIX)
        .read_to_end(&mut prefix)
        .with_context(|| format!("cannot read {}", path.display()))?;
    h.update(&prefix);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::RunRecord;

    fn record(hash: &str, epochs: u32) -> RunRecord {
        RunRecord {
            source: format!("corpus {hash}"),
            source_hash: hash.into(),
            epochs,
        }
    }

    #[test]
    fn resume_is_refused_when_the_corpus_or_the_epochs_change() {
        let old = record("aa", 5);
        assert!(record("aa", 5).check_resume(&old, 1, 3, false).is_ok());
        let corpus = record("bb", 5).check_resume(&old, 1, 3, true);
        let msg = format!("{:#}", corpus.expect_err("another corpus"));
        assert!(
            msg.contains("corpus aa") && msg.contains("corpus bb"),
            "{msg}"
        );
        assert!(msg.contains("trained to the end") && msg.contains("--restart"));
        let epochs = record("aa", 1).check_resume(&old, 1, 3, false);
        let msg = format!("{:#}", epochs.expect_err("other epochs"));
        assert!(
            msg.contains("--iter 5") && msg.contains("--iter 1"),
            "{msg}"
        );
    }
}
