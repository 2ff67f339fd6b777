//! Checks on output files made before any work starts (`colonnade train`,
//! `colonnade export`, `colonnade vocab`): a run that would fail or overwrite
//! its own input when it finally writes should fail in its first second.
//! [`check_space`], once the model's size is known, refuses outputs that
//! cannot fit their file system or the process's file size limit.

use crate::cli::OutputArgs;
use std::path::{Path, PathBuf};

/// A path given by a flag (`--output`, `--corpus`, ...), for error messages.
#[derive(Clone, Copy, Debug)]
pub struct FlagPath<'a> {
    pub flag: &'static str,
    pub path: &'a Path,
}

impl<'a> FlagPath<'a> {
    pub fn new(flag: &'static str, path: &'a Path) -> Self {
        Self { flag, path }
    }
}

impl std::fmt::Display for FlagPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.flag, self.path.display())
    }
}

/// What a path names on disk, to tell whether two paths are one file.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    /// An existing regular file: its device and inode (catches hard links too).
    Inode(u64, u64),
    /// A file that does not exist yet: its canonical directory and name.
    Path(PathBuf),
    /// Something we cannot compare (a device such as /dev/null, a pipe).
    Other,
}

fn identity(path: &Path) -> Identity {
    use std::os::unix::fs::MetadataExt;
    match fs_err::metadata(path) {
        Ok(m) if m.is_file() => Identity::Inode(m.dev(), m.ino()),
        Ok(_) => Identity::Other,
        Err(_) => {
            let (Some(parent), Some(name)) = (parent_dir(path), path.file_name()) else {
                return Identity::Other;
            };
            match fs_err::canonicalize(parent) {
                Ok(dir) => Identity::Path(dir.join(name)),
                Err(_) => Identity::Other,
            }
        }
    }
}

/// The directory a file would be created in (`.` for a bare file name).
fn parent_dir(path: &Path) -> Option<&Path> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Some(Path::new(".")),
        other => other,
    }
}

/// Checks that every output can be written and overwrites nothing it must
/// not: its directory exists, it is not a directory, it is not one of the
/// `inputs`, and no two outputs name the same file. The error names the flag
/// and the path.
pub fn check_outputs(inputs: &[FlagPath<'_>], outputs: &[FlagPath<'_>]) -> anyhow::Result<()> {
    let input_ids: Vec<(FlagPath<'_>, Identity)> =
        inputs.iter().map(|i| (*i, identity(i.path))).collect();
    let mut seen: Vec<(FlagPath<'_>, Identity)> = Vec::with_capacity(outputs.len());
    for out in outputs {
        if out.path.as_os_str().is_empty() {
            anyhow::bail!("{} is given an empty path", out.flag);
        }
        if out.path.is_dir() {
            anyhow::bail!("{out} is a directory; give a file name to write");
        }
        let dir = parent_dir(out.path).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            anyhow::bail!(
                "{out}: directory {} does not exist (create it first)",
                dir.display()
            );
        }
        if let Err(e) = colonnade_formats::staged::probe(out.path) {
            anyhow::bail!(
                "{out}: cannot create a file in directory {}: {e}",
                dir.display()
            );
        }
        let id = identity(out.path);
        if id != Identity::Other {
            if let Some((input, _)) = input_ids.iter().find(|(_, i)| *i == id) {
                anyhow::bail!("{out} is the same file as the input {input}: writing it would destroy the input");
            }
            if let Some((other, _)) = seen.iter().find(|(_, i)| *i == id) {
                anyhow::bail!(
                    "{out} and {other} name the same file: give each output its own path"
                );
            }
        }
        seen.push((*out, id));
    }
    Ok(())
}

/// The least number of bytes each file of `out` takes for `words` rows of
/// `dim` values whose words hold `word_bytes` bytes in all: a bound below
/// the real size (a text value takes at least 2 bytes, " 0"), so that a
/// refusal is certain. A compressed HDF5 file has no such bound (0).
pub fn least_bytes(
    out: &OutputArgs,
    words: u64,
    dim: u32,
    word_bytes: u64,
) -> Vec<(FlagPath<'_>, u64)> {
    let cells = words.saturating_mul(u64::from(dim));
    let matrices = if out.output_vectors { 2 } else { 1 };
    let hdf5 = match out.hdf5_compress {
        Some(_) => 0,
        None => cells.saturating_mul(4 * matrices) + words.saturating_mul(8),
    };
    let sizes = [
        (&out.output, "--output", hdf5),
        (
            &out.output_text,
            "--output-text",
            cells.saturating_mul(2) + word_bytes + words,
        ),
        (
            &out.output_binary,
            "--output-binary",
            cells.saturating_mul(4) + word_bytes + words.saturating_mul(2),
        ),
        (
            &out.output_tsv_vectors,
            "--output-tsv-vectors",
            cells.saturating_mul(2),
        ),
        (
            &out.output_tsv_metadata,
            "--output-tsv-metadata",
            word_bytes + words,
        ),
    ];
    sizes
        .into_iter()
        .filter_map(|(p, flag, bytes)| p.as_deref().map(|p| (FlagPath::new(flag, p), bytes)))
        .collect()
}

/// Refuses outputs that cannot be written whole, before the work that
/// fills them: a file larger than the process may write (`ulimit -f`), or
/// files larger together than their file system's free space (files on one
/// file system added up). The sizes are [`least_bytes`].
pub fn check_space(out: &OutputArgs, words: u64, dim: u32, word_bytes: u64) -> anyhow::Result<()> {
    let files = least_bytes(out, words, dim, word_bytes);
    if let Some(limit) = file_size_limit() {
        if let Some((f, bytes)) = files.iter().find(|(_, b)| *b > limit) {
            anyhow::bail!(
                "{f} needs at least {} ({words} words x {dim} dimensions) but this process may \
                 write files of at most {} (its file size limit, ulimit -f)",
                human(*bytes),
                human(limit)
            );
        }
    }
    let mut by_fs: Vec<(u64, u64, u64, Vec<String>)> = Vec::new();
    for (f, bytes) in &files {
        let dir = parent_dir(f.path).unwrap_or(Path::new("."));
        let Some((fs, free)) = free_space(dir) else {
            continue;
        };
        match by_fs.iter_mut().find(|e| e.0 == fs) {
            Some(e) => {
                e.1 = e.1.saturating_add(*bytes);
                e.3.push(f.to_string());
            }
            None => by_fs.push((fs, *bytes, free, vec![f.to_string()])),
        }
    }
    for (_, need, free, names) in by_fs {
        if need > free {
            anyhow::bail!(
                "{} need(s) at least {} ({words} words x {dim} dimensions) but the file system \
                 holding {} has only {} free: free some space or write elsewhere",
                names.join(", "),
                human(need),
                if names.len() == 1 { "it" } else { "them" },
                human(free)
            );
        }
    }
    Ok(())
}

/// The process's file size limit (RLIMIT_FSIZE), if any.
#[allow(
    unsafe_code,
    reason = "getrlimit(2): writes only the struct given, which lives on this stack"
)]
fn file_size_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// The file system id of `dir` and the bytes an unprivileged process may
/// still write on it.
#[allow(
    unsafe_code,
    reason = "statvfs(3): reads a NUL-terminated path, writes only the struct given"
)]
fn free_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let (fsid, avail, block): (u64, u64, u64) = (st.f_fsid, st.f_bavail, st.f_frsize);
    Some((fsid, avail.saturating_mul(block)))
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(inputs: &[(&'static str, &Path)], outputs: &[(&'static str, &Path)]) -> String {
        let i: Vec<_> = inputs.iter().map(|(f, p)| FlagPath::new(f, p)).collect();
        let o: Vec<_> = outputs.iter().map(|(f, p)| FlagPath::new(f, p)).collect();
        match check_outputs(&i, &o) {
            Ok(()) => String::new(),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn refuses_bad_outputs_and_names_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let corpus = dir.path().join("c.txt");
        fs_err::write(&corpus, "a b c\n").expect("write");
        let link = dir.path().join("link.txt");
        fs_err::hard_link(&corpus, &link).expect("hard link");
        let ok = dir.path().join("m.h5");
        let missing_dir = dir.path().join("nope").join("m.h5");
        let dotted = dir.path().join(".").join("m.h5");

        assert_eq!(check(&[("--corpus", &corpus)], &[("--output", &ok)]), "");
        let e = check(&[], &[("--output", &missing_dir)]);
        assert!(
            e.contains("--output") && e.contains("nope") && e.contains("does not exist"),
            "{e}"
        );
        let e = check(&[], &[("--output-text", dir.path())]);
        assert!(
            e.contains("--output-text") && e.contains("is a directory"),
            "{e}"
        );
        let e = check(&[("--corpus", &corpus)], &[("--output-binary", &link)]);
        assert!(
            e.contains("--output-binary") && e.contains("same file as the input --corpus"),
            "{e}"
        );
        let e = check(&[], &[("--output", &ok), ("--summary", &dotted)]);
        assert!(
            e.contains("--summary") && e.contains("--output") && e.contains("same file"),
            "{e}"
        );
        // Devices may be given to several outputs.
        let null = Path::new("/dev/null");
        assert_eq!(
            check(&[], &[("--output-text", null), ("--summary", null)]),
            ""
        );
    }
}
