//! The processes `colonnade cluster` started: whether a pid is still the
//! shard the state file names (pids are recycled), and the one signal call.
//! It must never signal a pid of 0 or 1, nor a process whose command line is
//! not that shard's.

use super::ShardEntry;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether `shard.pid` runs (not a zombie) and is the shard the state file
/// names: `ps-shard` with that shard's `--data-dir` on its command line. A
/// pid reused by another process is not.
pub(super) fn is_our_shard(shard: &ShardEntry) -> bool {
    running(shard.pid) && cmdline_is_shard(shard.pid, &shard.data_dir)
}

/// Whether `pid` exists and has not exited (a zombie has).
pub(super) fn running(pid: u32) -> bool {
    let Ok(stat) = fs_err::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

fn cmdline_is_shard(pid: u32, data_dir: &Path) -> bool {
    let Ok(cmdline) = fs_err::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let is_ps_shard = args.first().is_some_and(|a0| {
        Path::new(OsStr::from_bytes(a0))
            .file_name()
            .is_some_and(|n| n.as_bytes().starts_with(b"ps-shard"))
    });
    let dir = data_dir.as_os_str().as_bytes();
    let has_dir = args
        .windows(2)
        .any(|w| w[0] == b"--data-dir" && w[1] == dir)
        || args.iter().any(|a| {
            a.strip_prefix(b"--data-dir=".as_slice())
                .is_some_and(|v| v == dir)
        });
    is_ps_shard && has_dir
}

/// Sends `sig` to process `pid` (> 1: never a process group or every process).
#[allow(
    unsafe_code,
    reason = "kill(2): two integers in, no memory of this process touched"
)]
pub(super) fn signal(pid: i32, sig: libc::c_int) -> std::io::Result<()> {
    if pid <= 1 {
        return Err(std::io::Error::other(format!(
            "refusing to signal pid {pid}"
        )));
    }
    // SAFETY: kill(2) reads and writes no memory of this process; pid > 1
    // names one process, never a group (0, negative) or all (-1).
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
