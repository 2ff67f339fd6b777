//! Checks on output files made before any work starts (`colonnade train`,
//! `colonnade export`, `colonnade vocab`): a run that would fail or overwrite
//! its own input when it finally writes should fail in its first second.

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
