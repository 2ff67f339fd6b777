//! `colonnade cluster up|down|status`: a cluster of `ps-shard` processes on
//! this machine's loopback, the one-command way into the cluster mode.
//! `up` starts N shards detached from the terminal (each in its own process
//! group, its output in `DIR/s<i>.log`, its models and checkpoints in
//! `DIR/s<i>`), waits until every one answers health SERVING, records them
//! in `DIR/cluster.json` and prints the `--shards` value; `down` stops the
//! shards that file names and keeps their data dirs; `status` says whether
//! each runs and what its health says.
//!
//! It must never signal a process it cannot tell is the shard it started
//! (pids are recycled: the process's command line must be `ps-shard` with
//! that shard's `--data-dir`), never a pid of 0 or 1 (a process group, or
//! every process), never delete a data dir (checkpoints live there), and
//! never listen beyond loopback (its shards serve plaintext with no token).

use anyhow::{bail, Context};
use colonnade_setup::Connector;
use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tonic_health::pb::health_check_response::ServingStatus;

mod process;
use process::{is_our_shard, signal};

/// Start, stop or inspect a cluster of shards on this machine.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start N ps-shard processes on free loopback ports, wait until all
    /// answer health SERVING, and print their endpoints: the `--shards`
    /// value of train, export and models (the only line on stdout).
    Up(UpArgs),
    /// Stop the shards DIR/cluster.json names (SIGTERM, SIGKILL after
    /// --timeout-secs); their data dirs, with the checkpoints, are kept.
    Down(DownArgs),
    /// Whether each shard DIR/cluster.json names runs and answers health
    /// (exit 0 when every one is SERVING).
    Status(StatusArgs),
}

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// How many shards to start (each holds a column slice of every model).
    #[arg(long = "shards", env = "COLONNADE_CLUSTER_SHARDS",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub shards: u32,
    /// Directory of the cluster: shard i keeps its models and checkpoints in
    /// DIR/s<i> and logs to DIR/s<i>.log; DIR/cluster.json records the
    /// processes. Starting again on the same DIR loads the checkpoints.
    #[arg(long, env = "COLONNADE_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Compute threads of each shard (default: this machine's cores divided
    /// among the shards, at least 1).
    #[arg(long, env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
    /// Give up (and stop the shards) when they do not all answer SERVING
    /// within this many seconds; loading large checkpoints takes longer.
    #[arg(long, env = "COLONNADE_TIMEOUT_SECS", default_value_t = 120)]
    pub timeout_secs: u64,
    /// Further ps-shard flags for every shard, after `--` (e.g. `--
    /// --max-model-bytes 4000000000`: by default each shard may fill 90 % of
    /// the machine's memory, not its share). The shards get no `COLONNADE_*`
    /// variables of this shell.
    #[arg(last = true, value_name = "PS_SHARD_FLAGS")]
    pub shard_args: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct DownArgs {
    /// Directory the cluster was started with (`cluster up --data-dir`).
    #[arg(long, env = "COLONNADE_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Seconds to wait for the shards to exit after SIGTERM (they finish
    /// the calls in flight and any checkpoint being written) before SIGKILL.
    #[arg(long, env = "COLONNADE_TIMEOUT_SECS", default_value_t = 30)]
    pub timeout_secs: u64,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Directory the cluster was started with (`cluster up --data-dir`).
    #[arg(long, env = "COLONNADE_DATA_DIR")]
    pub data_dir: PathBuf,
}

/// The state file of a running local cluster, `DIR/cluster.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct State {
    /// When `up` finished, UTC (ISO 8601), and as seconds since the epoch.
    pub started_at: String,
    pub started_unix_secs: u64,
    /// The `ps-shard` binary the shards run.
    pub ps_shard: PathBuf,
    /// The `--shards` value: every endpoint, in shard order, comma-separated.
    pub shards_flag: String,
    pub shards: Vec<ShardEntry>,
}

/// One shard process of a local cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardEntry {
    pub pid: u32,
    pub endpoint: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

/// The file name of the state file in the cluster's directory.
pub const STATE_FILE: &str = "cluster.json";
/// The health service a shard reports SERVING on once its models are loaded.
const SHARD_SERVICE: &str = "colonnade.v1.Shard";
/// Starts of one shard (each on a new port) when its port was taken
/// between choosing it and the shard binding it.
const PORT_ATTEMPTS: u32 = 5;
/// Log lines shown when a shard failed.
const LOG_TAIL_LINES: usize = 15;
/// How often `up` and `down` look at the processes.
const POLL: Duration = Duration::from_millis(200);

pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Up(a) => up(&a).await,
        ClusterCommand::Down(a) => down(&a).await,
        ClusterCommand::Status(a) => status(&a).await,
    }
}

// ---------------------------------------------------------------- up

async fn up(args: &UpArgs) -> anyhow::Result<()> {
    let ps_shard = find_ps_shard()?;
    fs_err::create_dir_all(&args.data_dir).context("--data-dir")?;
    let dir = fs_err::canonicalize(&args.data_dir).context("--data-dir")?;
    let state_path = dir.join(STATE_FILE);
    if let Some(state) = read_state(&state_path)? {
        let live: Vec<String> = state
            .shards
            .iter()
            .filter(|s| is_our_shard(s))
            .map(|s| format!("{} (pid {})", s.endpoint, s.pid))
            .collect();
        if !live.is_empty() {
            bail!(
                "a cluster already runs from {}: {} names running shard(s) {}; stop it first \
                 with `colonnade cluster down --data-dir {}` (or use it: --shards {})",
                dir.display(),
                state_path.display(),
                live.join(", "),
                args.data_dir.display(),
                state.shards_flag
            );
        }
        eprintln!(
            "{} names no running shard (left by a cluster that stopped without `cluster down`): \
             replacing it",
            state_path.display()
        );
        fs_err::remove_file(&state_path)?;
    }
    let n = args.shards as usize;
    warn_extra_data_dirs(&dir, n);
    let threads = args.threads.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        (cores / n).max(1)
    });
    if threads == 0 {
        bail!("--threads 0: a shard needs at least one compute thread");
    }
    let mut starting = Vec::with_capacity(n);
    for index in 0..n {
        let shard = ShardLaunch {
            index,
            data_dir: dir.join(format!("s{index}")),
            log: dir.join(format!("s{index}.log")),
        };
        fs_err::create_dir_all(&shard.data_dir)?;
        match shard.spawn(&ps_shard, threads, &args.shard_args) {
            Ok(running) => starting.push(running),
            Err(e) => {
                stop_children(&mut starting).await;
                return Err(e);
            }
        }
    }
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let outcome = tokio::select! {
        r = wait_serving(&mut starting, &ps_shard, threads, &args.shard_args, timeout) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted: the shards were stopped")),
    };
    if let Err(e) = outcome {
        stop_children(&mut starting).await;
        return Err(e);
    }
    let now = time::OffsetDateTime::now_utc();
    let shards: Vec<ShardEntry> = starting
        .iter()
        .map(|s| ShardEntry {
            pid: s.child.id(),
            endpoint: s.endpoint(),
            data_dir: s.launch.data_dir.clone(),
            log: s.launch.log.clone(),
        })
        .collect();
    let state = State {
        started_at: format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second()
        ),
        started_unix_secs: u64::try_from(now.unix_timestamp()).unwrap_or(0),
        ps_shard,
        shards_flag: shards
            .iter()
            .map(|s| s.endpoint.as_str())
            .collect::<Vec<_>>()
            .join(","),
        shards,
    };
    if let Err(e) = write_state(&state_path, &state) {
        stop_children(&mut starting).await;
        return Err(e.context("the shards were stopped"));
    }
    // The children run on: dropping a `Child` neither kills nor waits.
    drop(starting);
    println!("{}", state.shards_flag);
    eprintln!("{}", hint(&state, &args.data_dir));
    Ok(())
}

/// What to do next, for stderr after `up`.
fn hint(state: &State, dir: &Path) -> String {
    let exe = std::env::args()
        .next()
        .unwrap_or_else(|| "colonnade".to_string());
    let shards = &state.shards_flag;
    let dir = dir.display();
    format!(
        "{n} shard(s) up: models and checkpoints in {dir}/s<i>, logs in {dir}/s<i>.log, \
         processes in {dir}/{STATE_FILE}.\
         \n  vocab:  {exe} vocab --corpus CORPUS --output vocab.tsv\
         \n  train:  {exe} train --corpus CORPUS --vocab vocab.tsv --shards {shards}\
         \n  export: {exe} export --shards {shards} --vocab vocab.tsv --output model.h5\
         \n  status: {exe} cluster status --data-dir {dir}\
         \n  stop:   {exe} cluster down --data-dir {dir}   (keeps the checkpoints)",
        n = state.shards.len()
    )
}

/// Warns of data dirs of shards beyond `n` that hold something: models
/// checkpointed there were split among more shards than are starting now.
fn warn_extra_data_dirs(dir: &Path, n: usize) {
    let mut extra = Vec::new();
    for i in n.. {
        let d = dir.join(format!("s{i}"));
        if !d.is_dir() {
            break;
        }
        let holds = std::fs::read_dir(&d).is_ok_and(|mut e| e.next().is_some());
        if holds {
            extra.push(d.display().to_string());
        }
    }
    if !extra.is_empty() {
        eprintln!(
            "warning: {} hold(s) data of shards beyond the {n} starting: models checkpointed \
             there were split among more shards, and are not served now",
            extra.join(", ")
        );
    }
}

/// Where shard `index` keeps its files.
struct ShardLaunch {
    index: usize,
    data_dir: PathBuf,
    log: PathBuf,
}

/// A shard process started by this `up`.
struct Started {
    launch: ShardLaunch,
    child: Child,
    port: u16,
    /// Starts so far (the port was taken before the shard bound it).
    attempts: u32,
    serving: bool,
    /// The last health answer or probe error, for a timeout's report.
    last_health: String,
}

impl ShardLaunch {
    /// Starts the shard on a free loopback port, detached: its own process
    /// group (a Ctrl-C in this terminal does not reach it), no stdin, its
    /// output in its log file, and none of this process's `COLONNADE_*`
    /// variables (they name one process's settings, such as a listen port).
    fn spawn(self, ps_shard: &Path, threads: usize, extra: &[String]) -> anyhow::Result<Started> {
        let port = free_port().with_context(|| format!("shard s{}", self.index))?;
        let child = self.start_process(ps_shard, port, threads, extra)?;
        Ok(Started {
            launch: self,
            child,
            port,
            attempts: 1,
            serving: false,
            last_health: "no answer yet".into(),
        })
    }

    fn start_process(
        &self,
        ps_shard: &Path,
        port: u16,
        threads: usize,
        extra: &[String],
    ) -> anyhow::Result<Child> {
        let log = fs_err::File::create(&self.log)
            .with_context(|| format!("shard s{}: its log file", self.index))?
            .into_file();
        let log2 = log
            .try_clone()
            .with_context(|| format!("shard s{}: {}", self.index, self.log.display()))?;
        let mut cmd = std::process::Command::new(ps_shard);
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--threads")
            .arg(threads.to_string())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .process_group(0);
        for (key, _) in std::env::vars_os() {
            if key.as_bytes().starts_with(b"COLONNADE_") {
                cmd.env_remove(key);
            }
        }
        cmd.spawn().with_context(|| {
            format!(
                "shard s{}: cannot start {} (log {})",
                self.index,
                ps_shard.display(),
                self.log.display()
            )
        })
    }
}

impl Started {
    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `s<i> (127.0.0.1:port, log DIR/s<i>.log)`.
    fn name(&self) -> String {
        format!(
            "shard s{} ({}, log {})",
            self.launch.index,
            self.endpoint(),
            self.launch.log.display()
        )
    }
}

/// Waits until every shard answers SERVING; a shard whose port was taken
/// before it bound it is started again on another port (at most
/// [`PORT_ATTEMPTS`] times). Fails naming the shard and its log when one
/// exits otherwise or the time runs out.
async fn wait_serving(
    shards: &mut [Started],
    ps_shard: &Path,
    threads: usize,
    extra: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let connector = Connector::default();
    let deadline = Instant::now() + timeout;
    loop {
        for s in shards.iter_mut() {
            if let Some(exit) = s.child.try_wait().context("waiting for a shard")? {
                let log = log_tail(&s.launch.log);
                if port_taken(&log) && s.attempts < PORT_ATTEMPTS {
                    let port = free_port().with_context(|| s.name())?;
                    tracing::warn!(
                        "{}: the port was taken before the shard bound it; starting it on port {port}",
                        s.name()
                    );
                    s.child = s.launch.start_process(ps_shard, port, threads, extra)?;
                    s.port = port;
                    s.attempts += 1;
                    s.serving = false;
                    continue;
                }
                bail!(
                    "{} exited during startup ({exit}){}; the other shards were stopped. \
                     The end of its log:\n{}",
                    s.name(),
                    if port_taken(&log) {
                        format!(" after {} ports were taken", s.attempts)
                    } else {
                        String::new()
                    },
                    indent(&log)
                );
            }
            if s.serving {
                continue;
            }
            let probe = crate::health::probe(
                &connector,
                &s.endpoint(),
                SHARD_SERVICE,
                Duration::from_secs(2),
            )
            .await;
            match probe {
                Ok(ServingStatus::Serving) => s.serving = true,
                Ok(other) => s.last_health = other.as_str_name().to_string(),
                Err(e) => s.last_health = format!("{e:#}"),
            }
        }
        // Serving, and still our processes (not another server that took
        // the port): a shard that exited is seen at the top of the loop.
        if shards.iter().all(|s| s.serving) {
            let mut all_alive = true;
            for s in shards.iter_mut() {
                if s.child.try_wait().context("waiting for a shard")?.is_some() {
                    all_alive = false;
                }
            }
            if all_alive {
                return Ok(());
            }
            continue;
        }
        if Instant::now() >= deadline {
            let waiting: Vec<String> = shards
                .iter()
                .filter(|s| !s.serving)
                .map(|s| {
                    format!(
                        "{}: {}; the end of its log:\n{}",
                        s.name(),
                        s.last_health,
                        indent(&log_tail(&s.launch.log))
                    )
                })
                .collect();
            bail!(
                "not every shard answered health SERVING within {timeout:?} (--timeout-secs); \
                 the shards were stopped.\n{}",
                waiting.join("\n")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Stops shards this process started (its children: their pids cannot
/// have been reused): SIGTERM, then SIGKILL after 10 s.
async fn stop_children(shards: &mut [Started]) {
    for s in shards.iter_mut() {
        if matches!(s.child.try_wait(), Ok(None)) {
            if let Ok(pid) = i32::try_from(s.child.id()) {
                let _ = signal(pid, libc::SIGTERM);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for s in shards.iter_mut() {
        while matches!(s.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
        if matches!(s.child.try_wait(), Ok(None)) {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

/// Whether a shard's log says it could not bind its port.
fn port_taken(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("os error 98")
}

/// A free loopback port: bound to port 0 and released (another process
/// may take it before the shard binds it; the caller retries).
fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port")?;
    Ok(listener
        .local_addr()
        .context("cannot find a free loopback port")?
        .port())
}

/// The `ps-shard` binary: next to this executable, else on PATH.
fn find_ps_shard() -> anyhow::Result<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("ps-shard")));
    if let Some(p) = &beside {
        if is_executable(p) {
            return Ok(p.clone());
        }
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("ps-shard"))
            .find(|p| is_executable(p))
    });
    if let Some(p) = on_path {
        return Ok(p);
    }
    bail!(
        "cannot find the ps-shard binary: it is neither next to this colonnade ({}) nor on \
         PATH; build it (`cargo build --release --workspace --bins`) or put it on PATH",
        beside.map_or_else(
            || "its directory is unknown".into(),
            |p| p.display().to_string()
        )
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The last lines of a shard's log (or why it cannot be read).
fn log_tail(log: &Path) -> String {
    match fs_err::read(log) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            if tail.is_empty() {
                "(empty)".into()
            } else {
                tail.join("\n")
            }
        }
        Err(e) => format!("(cannot read it: {e})"),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------- state

/// Reads `DIR/cluster.json`; `None` when there is none. Errors name the file.
pub fn read_state(path: &Path) -> anyhow::Result<Option<State>> {
    let text = match fs_err::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let state: State = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a state file of `colonnade cluster up`; if none of its shards runs, \
             remove it",
            path.display()
        )
    })?;
    for s in &state.shards {
        if s.pid <= 1 || i32::try_from(s.pid).is_err() {
            bail!(
                "{}: shard {} has pid {}, which no shard can have; if none of its shards \
                 runs, remove the file",
                path.display(),
                s.endpoint,
                s.pid
            );
        }
    }
    Ok(Some(state))
}

/// Writes the state file whole or not at all (a temporary file renamed).
fn write_state(path: &Path, state: &State) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let json = serde_json::to_string_pretty(state).context("encoding the cluster state")?;
    fs_err::write(&tmp, json + "\n")?;
    fs_err::rename(&tmp, path)?;
    Ok(())
}

// ---------------------------------------------------------------- down

async fn down(args: &DownArgs) -> anyhow::Result<()> {
    let state_path = args.data_dir.join(STATE_FILE);
    let Some(state) = read_state(&state_path)? else {
        println!(
            "no cluster runs from {} (no {}): nothing to stop",
            args.data_dir.display(),
            state_path.display()
        );
        return Ok(());
    };
    let mut stopping = Vec::new();
    for (i, s) in state.shards.iter().enumerate() {
        if !is_our_shard(s) {
            println!("shard s{i} ({}, pid {}) is not running", s.endpoint, s.pid);
            continue;
        }
        let pid = i32::try_from(s.pid).context("pid")?;
        match signal(pid, libc::SIGTERM) {
            Ok(()) => stopping.push((i, s)),
            // It exited meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => bail!(
                "shard s{i} ({}, pid {}): cannot send SIGTERM: {e}",
                s.endpoint,
                s.pid
            ),
        }
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    let deadline = Instant::now() + timeout;
    while stopping.iter().any(|(_, s)| is_our_shard(s)) && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    let mut killed = Vec::new();
    for (i, s) in &stopping {
        if is_our_shard(s) {
            if let Ok(pid) = i32::try_from(s.pid) {
                let _ = signal(pid, libc::SIGKILL);
            }
            killed.push(format!("s{i} (pid {}, log {})", s.pid, s.log.display()));
        }
    }
    if !killed.is_empty() {
        eprintln!(
            "warning: shard(s) {} did not exit within {timeout:?} of SIGTERM \
             (--timeout-secs): killed",
            killed.join(", ")
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while stopping.iter().any(|(_, s)| is_our_shard(s)) && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
        let left: Vec<String> = stopping
            .iter()
            .filter(|(_, s)| is_our_shard(s))
            .map(|(i, s)| format!("s{i} (pid {})", s.pid))
            .collect();
        if !left.is_empty() {
            bail!(
                "shard(s) {} still run after SIGKILL; {} is kept",
                left.join(", "),
                state_path.display()
            );
        }
    }
    fs_err::remove_file(&state_path)?;
    let dirs = state
        .shards
        .iter()
        .map(|s| s.data_dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "stopped {} shard(s); kept their data dirs with the checkpoints ({dirs}) and logs: \
         `colonnade cluster up --data-dir {}` with the same --shards loads them again",
        stopping.len(),
        args.data_dir.display()
    );
    Ok(())
}

// ---------------------------------------------------------------- status

async fn status(args: &StatusArgs) -> anyhow::Result<()> {
    let state_path = args.data_dir.join(STATE_FILE);
    let Some(state) = read_state(&state_path)? else {
        bail!(
            "no cluster runs from {} (no {})",
            args.data_dir.display(),
            state_path.display()
        );
    };
    let connector = Connector::default();
    let mut rows = Vec::new();
    let mut all_serving = true;
    for (i, s) in state.shards.iter().enumerate() {
        let alive = is_our_shard(s);
        let health = if alive {
            match crate::health::probe(
                &connector,
                &s.endpoint,
                SHARD_SERVICE,
                Duration::from_secs(3),
            )
            .await
            {
                Ok(st) => st.as_str_name().to_string(),
                Err(e) => format!("no answer ({e:#})"),
            }
        } else {
            "-".to_string()
        };
        all_serving &= health == ServingStatus::Serving.as_str_name();
        rows.push([
            format!("s{i}"),
            s.pid.to_string(),
            s.endpoint.clone(),
            if alive { "running" } else { "not running" }.to_string(),
            health,
            s.log.display().to_string(),
        ]);
    }
    let header = ["shard", "pid", "endpoint", "process", "health", "log"].map(String::from);
    let mut widths = [0usize; 6];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    println!(
        "started {}; --shards {}",
        state.started_at, state.shards_flag
    );
    if !all_serving {
        bail!(
            "not every shard runs and answers SERVING (`colonnade cluster down --data-dir {}` \
             stops what is left; `cluster up` starts the cluster again)",
            args.data_dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
