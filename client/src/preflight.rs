//! Checks `colonnade train` makes before it starts work, so first-day mistakes
//! fail in the first second with a message saying what to change: a corpus
//! that can be read only once, and a model larger than this machine's memory.

use anyhow::bail;
use colonnade_common::model::{ModelSpec, ShardSpec};
use colonnade_ps_shard::hogwild::{held_bytes, RowLayout};
use std::path::{Path, PathBuf};

/// Whether `path` can be read more than once: a regular file (or a symlink to
/// one) can; a pipe, `/dev/stdin` or another device cannot.
fn rereadable(path: &Path) -> anyhow::Result<bool> {
    let meta = fs_err::metadata(path)
        .map_err(|e| anyhow::anyhow!("corpus file {}: {e}", path.display()))?;
    if meta.is_dir() {
        bail!(
            "corpus file {} is a directory; give the files in it",
            path.display()
        );
    }
    Ok(meta.is_file())
}

/// Checks every corpus file exists, and that a corpus that can be read only
/// once (a pipe, `/dev/stdin`) comes with `--vocab` and `--iter 1`: counting
/// the vocabulary and every epoch each need a pass over the corpus.
pub fn check_corpus(corpus: &[PathBuf], vocab_given: bool, iter: u32) -> anyhow::Result<()> {
    for path in corpus {
        if rereadable(path)? {
            continue;
        }
        let mut passes = Vec::new();
        if !vocab_given {
            passes.push("counting the vocabulary (no --vocab)".to_string());
        }
        if iter > 1 {
            passes.push(format!("each of the {iter} epochs (--iter {iter})"));
        }
        if !passes.is_empty() {
            bail!(
                "corpus {} is not a regular file (a pipe or a device): it can be read only once, \
                 but {} need a pass over it each; give --vocab FILE and --iter 1 to train on it \
                 in a single pass, or give a regular file",
                path.display(),
                passes.join(" and ")
            );
        }
    }
    Ok(())
}

/// The memory a model holds on each of `shards` shards: both matrices with
/// their row locks, the sampler's alias table and the counts
/// (`colonnade_ps_shard::hogwild::held_bytes`).
pub fn shard_bytes(spec: &ModelSpec, shards: u32) -> Vec<u64> {
    (0..shards)
        .map(|i| held_bytes(&ShardSpec::of(spec, shards, i)))
        .collect()
}

/// The memory a model holds on `shards` embedded shards together: they keep
/// a row's slices side by side under one lock (`Siblings`), so both
/// matrices count one row of `dim` cells and one lock per word
/// ([`RowLayout`]), and each shard has its own sampler table and counts:
/// 2·V·row(dim) + shards·16·V.
pub fn embedded_bytes(spec: &ModelSpec, shards: u32) -> u64 {
    let v = spec.vocab_size;
    let matrices = 2u64.saturating_mul(v.saturating_mul(RowLayout::of(spec.dim).row_bytes()));
    matrices.saturating_add(u64::from(shards).saturating_mul(16).saturating_mul(v))
}

/// `bytes` in binary units, e.g. `1.5 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The memory this process can still get, and where that figure comes from:
/// the lesser of the room left under its cgroup's memory limit (v2
/// `memory.max`, or v1 `memory.limit_in_bytes`) and the kernel's
/// `MemAvailable`. `None` when neither can be read.
pub fn available_memory() -> Option<(u64, &'static str)> {
    let mem_available = read_meminfo_available();
    let cgroup = cgroup_room();
    match (mem_available, cgroup) {
        (Some(m), Some(c)) if c < m => Some((
            c,
            "the room left under this container's memory limit (cgroup)",
        )),
        (Some(m), _) => Some((m, "MemAvailable in /proc/meminfo")),
        (None, Some(c)) => Some((
            c,
            "the room left under this container's memory limit (cgroup)",
        )),
        (None, None) => None,
    }
}

fn read_meminfo_available() -> Option<u64> {
    let text = fs_err::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line
        .trim_start_matches("MemAvailable:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

fn read_u64(path: &str) -> Option<u64> {
    fs_err::read_to_string(path).ok()?.trim().parse().ok()
}

/// Limit minus usage of this process's memory cgroup, if it has a limit.
fn cgroup_room() -> Option<u64> {
    // cgroup v2: this process's group, or the namespace root.
    let own = fs_err::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        });
    let mut dirs = Vec::new();
    if let Some(own) = own.filter(|p| p != "/") {
        dirs.push(format!("/sys/fs/cgroup{own}"));
    }
    dirs.push("/sys/fs/cgroup".to_string());
    for dir in dirs {
        if let Ok(max) = fs_err::read_to_string(format!("{dir}/memory.max")) {
            let Ok(limit) = max.trim().parse::<u64>() else {
                return None; // "max": no limit
            };
            let used = read_u64(&format!("{dir}/memory.current")).unwrap_or(0);
            return Some(limit.saturating_sub(used));
        }
    }
    // cgroup v1: "no limit" is a huge number (near i64::MAX).
    let limit = read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes")?;
    if limit >= 1 << 60 {
        return None;
    }
    let used = read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0);
    Some(limit.saturating_sub(used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(vocab_size: u64, dim: u32) -> ModelSpec {
        ModelSpec {
            vocab_fingerprint: 1,
            vocab_size,
            dim,
            negative: 5,
            sampling_power: 0.75,
            init_seed: 1,
            objective: colonnade_common::model::Objective::SkipGram,
        }
    }

    #[test]
    fn shard_bytes_follow_the_readme_formula() {
        // 2 matrices × V × (cols·4 + 4 bytes of row lock) + 8·V sampler
        // bytes + 8·V of counts + 8·V of pending counts.
        let v = 1000u64;
        let per = shard_bytes(&spec(v, 10), 3);
        let cols = [3u64, 3, 4];
        for (b, c) in per.iter().zip(cols) {
            assert_eq!(*b, 2 * v * (c * 4 + 4) + 24 * v);
        }
        // Rows of 128 and 32 columns fill whole cache lines and keep 1-byte
        // locks apart; 25 and 100 columns are packed with a 4-byte slot.
        assert_eq!(shard_bytes(&spec(v, 128), 1), [2 * v * 513 + 24 * v]);
        assert_eq!(
            shard_bytes(&spec(v, 128), 4),
            [2 * v * 129 + 24 * v; 4].to_vec()
        );
        assert_eq!(
            shard_bytes(&spec(v, 100), 4),
            [2 * v * 104 + 24 * v; 4].to_vec()
        );
        // Embedded shards step fused and never touch their pending counts
        // (pages the kernel never maps in).
        assert_eq!(embedded_bytes(&spec(v, 128), 4), 2 * v * 513 + 64 * v);
        assert_eq!(embedded_bytes(&spec(v, 100), 4), 2 * v * 404 + 64 * v);
    }

    #[test]
    fn embedded_shards_share_the_row_locks() {
        // The sum over shards, less the 8·V bytes of row locks each shard
        // beyond the first would hold on its own.
        let v = 1000u64;
        // (and the 8·V of pending counts each, which the fused steps of
        // embedded shards never touch).
        let separate: u64 = shard_bytes(&spec(v, 10), 3).iter().sum();
        assert_eq!(
            embedded_bytes(&spec(v, 10), 3),
            separate - 2 * 8 * v - 3 * 8 * v
        );
        assert_eq!(
            embedded_bytes(&spec(v, 10), 1),
            shard_bytes(&spec(v, 10), 1)[0] - 8 * v
        );
    }

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn available_memory_is_known_on_linux() {
        let (bytes, _) = available_memory().expect("/proc/meminfo");
        assert!(bytes > 0);
    }

    #[test]
    fn a_pipe_needs_vocab_and_one_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.txt");
        fs_err::write(&file, "a b\n").expect("write");
        assert!(check_corpus(std::slice::from_ref(&file), false, 5).is_ok());
        let dev = PathBuf::from("/dev/null");
        let e = format!(
            "{:#}",
            check_corpus(std::slice::from_ref(&dev), false, 1).expect_err("pipe")
        );
        assert!(e.contains("/dev/null") && e.contains("--vocab"), "{e}");
        let e = format!(
            "{:#}",
            check_corpus(std::slice::from_ref(&dev), true, 3).expect_err("pipe")
        );
        assert!(e.contains("--iter 3") && !e.contains("no --vocab"), "{e}");
        assert!(check_corpus(&[dev], true, 1).is_ok());
        let e = format!(
            "{:#}",
            check_corpus(&[dir.path().to_path_buf()], true, 1).expect_err("dir")
        );
        assert!(e.contains("is a directory"), "{e}");
    }
}
