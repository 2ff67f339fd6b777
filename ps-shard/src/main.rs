use anyhow::Context;
use clap::Parser;
use colonnade_ps_shard::service::Tokens;
use colonnade_ps_shard::{serve, ShardCore};
use std::net::SocketAddr;
use std::sync::Arc;

/// Colonnade parameter-server shard: holds a column slice of every word vector
/// and serves dotprod/adjust. The model's configuration arrives from the client.
#[derive(Parser, Debug)]
#[command(name = "ps-shard", version)]
struct Args {
    /// Address to listen on. Loopback by default: listening on other
    /// interfaces (`0.0.0.0:50051`, as the compose and Kubernetes
    /// deployments do) is a decision for whoever runs the shard.
    #[arg(long, env = "COLONNADE_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Worker threads for dotprod/adjust (default: available cores).
    #[arg(long, env = "COLONNADE_SHARD_THREADS")]
    threads: Option<usize>,
    /// Memory budget of all models on this shard together (matrices,
    /// samplers, counts, and models being created): a CreateModel that would
    /// pass it is refused with RESOURCE_EXHAUSTED before its counts are
    /// received. Default: 90 % of the memory this process may use (its
    /// cgroup's limit, else the machine's).
    #[arg(long, env = "COLONNADE_MAX_MODEL_BYTES")]
    max_model_bytes: Option<u64>,
    /// Keep models and their checkpoints in this directory: at start the
    /// shard loads the newest complete checkpoint of every model found there
    /// (health NOT_SERVING until done); clients take checkpoints into it
    /// (`colonnade train --checkpoint-interval`). Without it, a shard's
    /// models live only in its memory.
    #[arg(long, env = "COLONNADE_SHARD_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    log: colonnade_common::config::LogArgs,
    #[command(flatten)]
    auth: colonnade_common::config::AuthArgs,
    /// File holding the token admin calls (DropModel) need instead of the
    /// cluster token, so that workers holding the cluster token cannot drop
    /// models. Without it, admin calls take the cluster token.
    #[arg(long, env = "COLONNADE_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<std::path::PathBuf>,
}

fn main() -> std::process::ExitCode {
    colonnade_common::config::unset_empty_env();
    let args = Args::parse();
    colonnade_common::config::init_logging(args.log.log_format);
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| rt.block_on(run(args)));
    colonnade_common::config::exit_code(result)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let max_model_bytes = args.max_model_bytes.unwrap_or_else(default_budget);
    let tokens = Tokens {
        cluster: args.auth.token().map_err(anyhow::Error::msg)?,
        admin: args
            .admin_token_file
            .as_deref()
            .map(colonnade_common::config::read_token)
            .transpose()
            .map_err(anyhow::Error::msg)?,
    };
    if tokens.cluster.is_none() && !args.listen.ip().is_loopback() {
        tracing::warn!(
            listen = %args.listen,
            "no bearer token (--auth-token-file): anyone who reaches this address can train, \
             read and drop models"
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("listener address")?;
    tracing::info!(%addr, threads, max_model_bytes, version = env!("CARGO_PKG_VERSION"), data_dir = ?args.data_dir, "ps-shard serving");
    let core = Arc::new(match args.data_dir {
        Some(dir) => ShardCore::persistent(Some(max_model_bytes), dir),
        None => ShardCore::new(Some(max_model_bytes)),
    });
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    if core.is_loading() {
        let core = Arc::clone(&core);
        tokio::task::spawn_blocking(move || match core.load_data_dir() {
            Ok(()) => core.loaded(),
            Err(e) => {
                let _ = failed_tx.send(anyhow::Error::new(e).context("cannot load the data dir"));
            }
        });
    } else {
        drop(failed_tx);
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        Arc::clone(&core),
        threads,
        tokens,
        async move {
            let _ = stop_rx.await;
        },
    ));
    let load_failed = async move {
        match failed_rx.await {
            Ok(e) => Some(e),
            Err(_) => std::future::pending().await,
        }
    };
    let failure = tokio::select! {
        () = shutdown_signal() => None,
        e = load_failed => e,
    };
    // Calls in flight finish; then any checkpoint being written.
    let _ = stop_tx.send(());
    server
        .await
        .context("server task")?
        .context("server failed")?;
    tokio::task::spawn_blocking(move || core.wait_for_writes())
        .await
        .context("waiting for checkpoint writes")?;
    if let Some(e) = failure {
        return Err(e);
    }
    tracing::info!("ps-shard stopped");
    Ok(())
}

/// 90 % of the memory this process may use: its cgroup's limit when it has
/// one (a container), else the machine's memory.
fn default_budget() -> u64 {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let machine = sys.total_memory();
    let usable = sys
        .cgroup_limits()
        .map_or(machine, |c| c.total_memory.min(machine));
    usable / 10 * 9
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
