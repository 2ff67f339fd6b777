//! What keeps one bad model from taking a data dir down with it: a model
//! directory that cannot be loaded at start-up is set aside
//! ([`quarantine_model`]: renamed `<fingerprint>.quarantined`, named in the
//! log with the reason) and the shard serves the others; a model is created
//! on disk in a temporary directory renamed into place once its `model.bin`
//! is complete ([`create_model_dir`]), so a full disk or a crash leaves no
//! half-made model directory behind (only a `.creating-*` directory, removed
//! at the next start, [`clean_creations`]).

use crate::model::Model;
use colonnade_checkpoint::ModelDir;
use colonnade_proto::ShardError;
use std::path::{Path, PathBuf};

/// The suffix of a model directory set aside at start-up.
pub const QUARANTINED: &str = ".quarantined";

/// The prefix of a model directory being created.
const CREATING: &str = ".creating-";

fn internal(e: impl std::fmt::Display) -> ShardError {
    ShardError::Internal(e.to_string())
}

/// Whether a model that failed to load is set aside (its files are bad) or
/// stops the start-up: a shard short of memory must not quarantine models.
pub(crate) fn is_bad_files(e: &ShardError) -> bool {
    !matches!(e, ShardError::ResourceExhausted(_))
}

/// Sets the model directory `dir` aside after it failed to load with `why`:
/// renamed `<fingerprint>.quarantined` (or `.quarantined-<n>` when that name
/// is taken), so no later start tries it again, and logged at error level
/// naming both paths. Returns where it went (none if the rename failed: the
/// directory then stays and is tried again at the next start).
pub(crate) fn quarantine_model(dir: &ModelDir, why: &ShardError) -> Option<PathBuf> {
    let from = dir.path();
    let named = |suffix: String| {
        let mut p = from.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    };
    let mut to = named(QUARANTINED.to_owned());
    let mut n = 1;
    while to.exists() {
        to = named(format!("{QUARANTINED}-{n}"));
        n += 1;
    }
    match fs_err::rename(from, &to) {
        Ok(()) => {
            if let Some(parent) = from.parent() {
                let _ = fs_err::File::open(parent).and_then(|d| d.sync_all());
            }
            tracing::error!(
                fingerprint = format!("{:016x}", dir.fingerprint()),
                dir = %from.display(),
                quarantined_as = %to.display(),
                "MODEL QUARANTINED: cannot load it ({why}); it was renamed and is not served; \
                 the shard serves its other models. Inspect or delete {}; to use the model \
                 again, create it anew (its checkpoints there can be restored by renaming the \
                 directory back once its files are repaired)",
                to.display()
            );
            Some(to)
        }
        Err(e) => {
            tracing::error!(
                fingerprint = format!("{:016x}", dir.fingerprint()),
                dir = %from.display(),
                "MODEL NOT LOADED: cannot load it ({why}) nor set it aside ({e}); the shard \
                 serves its other models and tries it again at the next start"
            );
            None
        }
    }
}

/// The model directories set aside under `root` (their file names).
pub fn quarantined(root: &Path) -> Vec<String> {
    let Ok(entries) = fs_err::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(QUARANTINED))
        .collect();
    out.sort();
    out
}

/// Removes the directories of creations a crash or a full disk interrupted.
pub(crate) fn clean_creations(root: &Path) -> Result<(), ShardError> {
    for entry in fs_err::read_dir(root).map_err(internal)? {
        let entry = entry.map_err(internal)?;
        if entry.file_name().to_string_lossy().starts_with(CREATING) {
            let path = entry.path();
            tracing::warn!(dir = %path.display(), "removing an unfinished model creation");
            fs_err::remove_dir_all(&path).map_err(internal)?;
        }
    }
    Ok(())
}

/// Writes a newly created model's spec and counts as `dir` under the data
/// dir `root`: into `root/.creating-<fingerprint>/` first, renamed into
/// place once complete (the data dir then synced), so a failure leaves no
/// model directory. A directory already there (a model created again over
/// files of an older release) gets its `model.bin` rewritten in place, as
/// before.
pub(crate) fn create_model_dir(
    root: &Path,
    dir: &ModelDir,
    model: &Model,
) -> Result<(), ShardError> {
    let write = |d: &ModelDir| {
        d.write_model(model.fingerprint, &model.spec, &model.counts)
            .map_err(internal)
    };
    if dir.path().exists() {
        return write(dir);
    }
    let staging = root.join(format!("{CREATING}{:016x}", model.fingerprint));
    let _ = fs_err::remove_dir_all(&staging);
    let staged = ModelDir::new(&staging, model.fingerprint);
    let done = write(&staged)
        .and_then(|()| fs_err::rename(staged.path(), dir.path()).map_err(internal))
        .and_then(|()| {
            fs_err::File::open(root)
                .and_then(|d| d.sync_all())
                .map_err(internal)
        });
    let _ = fs_err::remove_dir_all(&staging);
    done
}

/// The suffix of a checkpoint version a restore rolled back from.
pub const ROLLED_BACK: &str = ".rolled-back";

fn rolled_back_path(dir: &ModelDir, version: u64) -> PathBuf {
    let mut p = dir.checkpoint_path(version).into_os_string();
    p.push(ROLLED_BACK);
    PathBuf::from(p)
}

/// Sets the versions above `version` aside (a restore to `version`):
/// renamed `v<N>.ckpt.rolled-back`, so they are neither listed nor loaded at
/// a start, but kept on disk until the restored state has a complete version
/// of its own that replaces them ([`remove_rolled_back`]). Nothing a
/// restore does deletes a checkpoint.
pub(crate) fn set_aside_above(dir: &ModelDir, version: u64) -> Result<(), ShardError> {
    for v in dir.versions().map_err(internal)? {
        if v > version {
            let (from, to) = (dir.checkpoint_path(v), rolled_back_path(dir, v));
            fs_err::rename(&from, &to).map_err(internal)?;
            tracing::info!(
                from = %from.display(),
                to = %to.display(),
                "checkpoint version {v} set aside by a restore to version {version}; kept until                  a newer version of the restored state replaces it"
            );
        }
    }
    fs_err::File::open(dir.path())
        .and_then(|d| d.sync_all())
        .map_err(internal)
}

/// Removes the versions set aside that version `written`, just complete,
/// replaces (those up to it).
pub(crate) fn remove_rolled_back(dir: &ModelDir, written: u64) {
    let Ok(entries) = fs_err::read_dir(dir.path()) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let version = name
            .strip_suffix(ROLLED_BACK)
            .and_then(|n| n.strip_prefix('v'))
            .and_then(|n| n.strip_suffix(".ckpt"))
            .and_then(|n| n.parse::<u64>().ok());
        if version.is_some_and(|v| v <= written) {
            if let Err(e) = fs_err::remove_file(entry.path()) {
                tracing::warn!(error = %e, "cannot remove a rolled-back checkpoint version");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{spec, COUNTS};
    use crate::registry::ShardCore;

    fn start(root: &Path) -> ShardCore {
        let core = ShardCore::persistent(None, root.to_path_buf());
        core.load_data_dir()
            .expect("start-up never fails on one bad model");
        core.loaded();
        core
    }

    /// A bit flipped in one model's `model.bin`, and the empty directory an
    /// old release left when a creation hit a full disk: the shard starts,
    /// serves the good model, and sets both bad ones aside by name.
    #[test]
    fn a_bad_model_is_quarantined_and_the_others_served() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let core = start(tmp.path());
        let good = core
            .create_model(spec(0..4), &COUNTS)
            .expect("create")
            .fingerprint;
        let mut other = spec(0..4);
        other.model.init_seed += 1;
        let bad = core
            .create_model(other, &COUNTS)
            .expect("create")
            .fingerprint;
        drop(core);
        let model_bin = ModelDir::new(tmp.path(), bad).path().join("model.bin");
        let mut bytes = fs_err::read(&model_bin).expect("read");
        let at = bytes.len() - 20;
        bytes[at] ^= 0x10;
        fs_err::write(&model_bin, bytes).expect("flip");
        let empty = tmp.path().join(format!("{:016x}", 0xabcdu64));
        fs_err::create_dir(&empty).expect("empty dir");

        let core = start(tmp.path());
        assert_eq!(core.models().len(), 1);
        assert!(core.model(good).is_ok());
        let q = quarantined(tmp.path());
        assert_eq!(
            q,
            vec![
                format!("{:016x}{QUARANTINED}", 0xabcdu64),
                format!("{bad:016x}{QUARANTINED}")
            ]
        );
        // The next start does not try them again, and still serves the good one.
        assert_eq!(start(tmp.path()).models().len(), 1);
    }

    /// A creation that fails leaves no model directory: here the data dir's
    /// staging name is taken by a file, so the staging directory cannot be
    /// made (as on a full disk).
    #[test]
    fn a_failed_creation_leaves_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let core = start(tmp.path());
        let s = spec(0..4);
        let fp = s.model.fingerprint();
        let blocker = tmp.path().join(format!("{CREATING}{fp:016x}"));
        let dir = ModelDir::new(tmp.path(), fp);
        let model = Model::new(s.clone(), &COUNTS).expect("model");
        // A file where the staging directory's parent should be.
        fs_err::write(&blocker, b"x").expect("blocker");
        assert!(create_model_dir(tmp.path(), &dir, &model).is_err());
        assert!(!dir.path().exists(), "no half-made model directory");
        // Leftovers of an interrupted creation go at the next start.
        fs_err::remove_file(&blocker).expect("rm");
        fs_err::create_dir_all(blocker.join("sub")).expect("leftover");
        let core2 = start(tmp.path());
        assert!(!blocker.exists());
        core2.create_model(s, &COUNTS).expect("create");
        assert!(dir.path().join("model.bin").is_file());
        drop(core);
    }
}
