//! Output files that appear whole or not at all ([`Staged`]): written under a
//! temporary name in the target's own directory, flushed to disk, then
//! renamed over the target. A write that fails (a full disk, a file size
//! limit) or a writer dropped before it finishes removes the temporary file,
//! so a reader never finds a truncated or half-written file under the name
//! it asked for, and an existing file of that name stays as it was.
//!
//! A target that exists and is not a regular file (`/dev/null`, a pipe) is
//! written in place: renaming over it would replace the device.

use crate::Error;
use std::path::{Path, PathBuf};

/// A file being written for `target`; [`Staged::commit`] puts it there.
#[derive(Debug)]
pub struct Staged {
    target: PathBuf,
    /// Where the bytes go: a temporary file beside the target, or the
    /// target itself when it is not a regular file.
    writing: PathBuf,
    committed: bool,
}

/// The name of the temporary file beside `target`: hidden, and naming the
/// process, so two runs writing one directory never share one.
pub fn temporary_path(target: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(target.file_name().unwrap_or_default());
    name.push(format!(".colonnade-tmp-{}", std::process::id()));
    target.with_file_name(name)
}

impl Staged {
    /// Stages a file for `target` (a symbolic link is followed: the file it
    /// points to is replaced, the link kept).
    pub fn new(target: &Path) -> Self {
        let resolved = match fs_err::symlink_metadata(target) {
            Ok(m) if m.file_type().is_symlink() => {
                fs_err::canonicalize(target).unwrap_or_else(|_| target.to_path_buf())
            }
            _ => target.to_path_buf(),
        };
        let in_place = fs_err::metadata(&resolved).is_ok_and(|m| !m.is_file());
        let writing = if in_place {
            resolved.clone()
        } else {
            temporary_path(&resolved)
        };
        Self {
            target: resolved,
            writing,
            committed: in_place,
        }
    }

    /// The path to write to.
    pub fn path(&self) -> &Path {
        &self.writing
    }

    /// The path the file will have.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Makes the written file durable and renames it to the target; returns
    /// the target. The writer must have closed it.
    pub fn commit(mut self) -> Result<PathBuf, Error> {
        if self.writing != self.target {
            fs_err::File::open(&self.writing)?.sync_all()?;
            fs_err::rename(&self.writing, &self.target)?;
            if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
                // The rename is durable once the directory is; a directory
                // that cannot be opened for it is left to the OS.
                if let Ok(d) = fs_err::File::open(dir) {
                    let _ = d.sync_all();
                }
            }
        }
        self.committed = true;
        Ok(std::mem::take(&mut self.target))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: the error that made the write stop is the one
            // to report.
            let _ = fs_err::remove_file(&self.writing);
        }
    }
}

/// Checks that a file can be created in `target`'s directory (it exists,
/// is writable, its file system is not read-only) by creating and removing
/// the temporary file a [`Staged`] write would use.
pub fn probe(target: &Path) -> std::io::Result<()> {
    let staged = Staged::new(target);
    if staged.writing == staged.target {
        return Ok(());
    }
    fs_err::File::create(&staged.writing)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_replaces_and_drop_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("out.txt");
        fs_err::write(&target, "old").expect("write");

        let s = Staged::new(&target);
        assert_ne!(s.path(), target.as_path());
        fs_err::write(s.path(), "partial").expect("write");
        drop(s);
        assert_eq!(fs_err::read_to_string(&target).expect("read"), "old");
        assert_eq!(fs_err::read_dir(dir.path()).expect("ls").count(), 1);

        let s = Staged::new(&target);
        fs_err::write(s.path(), "new").expect("write");
        assert_eq!(s.commit().expect("commit"), target);
        assert_eq!(fs_err::read_to_string(&target).expect("read"), "new");
        assert_eq!(fs_err::read_dir(dir.path()).expect("ls").count(), 1);

        probe(&target).expect("probe");
        assert_eq!(fs_err::read_dir(dir.path()).expect("ls").count(), 1);
        assert!(probe(&dir.path().join("missing").join("x")).is_err());
    }

    #[test]
    fn devices_are_written_in_place() {
        let s = Staged::new(Path::new("/dev/null"));
        assert_eq!(s.path(), Path::new("/dev/null"));
        assert_eq!(s.commit().expect("commit"), PathBuf::from("/dev/null"));
    }

    #[test]
    fn a_link_keeps_pointing_at_the_new_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real.txt");
        let link = dir.path().join("link.txt");
        fs_err::write(&real, "old").expect("write");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let s = Staged::new(&link);
        fs_err::write(s.path(), "new").expect("write");
        s.commit().expect("commit");
        assert!(fs_err::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink());
        assert_eq!(fs_err::read_to_string(&real).expect("read"), "new");
    }
}
