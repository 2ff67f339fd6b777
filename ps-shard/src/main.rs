use anyhow::Context;
use clap::Parser;
use colonnade_ps_shard::connections::ConnectionLimits;
use colonnade_ps_shard::edge::EdgeLimits;
use colonnade_ps_shard::{serve, ServeOptions, ShardCore};
use colonnade_setup::Tokens;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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
    /// Training calls (dotprod/adjust) computed at once (default: available
    /// cores); the runtime has one thread more, for I/O and health.
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
    log: colonnade_setup::log::LogArgs,
    #[command(flatten)]
    auth: colonnade_setup::AuthArgs,
    /// File holding the token admin calls (DropModel) need instead of the
    /// cluster token, so that workers holding the cluster token cannot drop
    /// models. Without it, admin calls take the cluster token.
    #[arg(long, env = "COLONNADE_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<std::path::PathBuf>,
    /// This shard's TLS certificate chain (PEM): the port serves TLS only,
    /// and clients name the shard `https://host:port`. Needs --tls-key.
    /// `colonnade certs` makes one.
    #[arg(long, env = "COLONNADE_SHARD_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "COLONNADE_SHARD_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,
    /// CA certificate(s) (PEM) that clients' certificates must chain to:
    /// every connection must present one (mutual TLS). Needs --tls-cert.
    #[arg(long, env = "COLONNADE_SHARD_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
    /// Serve plaintext on an address other than loopback. Without TLS a
    /// shard refuses to listen beyond loopback unless given this: anyone
    /// on the network could read the vectors and the bearer token.
    #[arg(long, env = "COLONNADE_ALLOW_PLAINTEXT")]
    allow_plaintext: bool,
    /// Also serve grpc.health.v1 alone, in plaintext, on this address: for
    /// probes that cannot speak TLS (Kubernetes' gRPC probes). It answers
    /// SERVING or NOT_SERVING and nothing else.
    #[arg(long, env = "COLONNADE_HEALTH_LISTEN")]
    health_listen: Option<SocketAddr>,
    /// Serve Prometheus metrics over HTTP on this address (e.g.
    /// 0.0.0.0:9100): calls and errors by method and code, call latency,
    /// pairs adjusted, model bytes, checkpoints, connections, health.
    #[arg(long, env = "COLONNADE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Close a client connection that has had no call in flight for this
    /// many seconds (0: never), so that idle clients do not hold the
    /// connection slots; a client's next call reconnects.
    #[arg(
        long,
        env = "COLONNADE_MAX_CONNECTION_IDLE_SECS",
        default_value_t = 300
    )]
    max_connection_idle_secs: u64,
    /// Most connections the shard's port keeps open at once. When all are
    /// taken, a new connection displaces the oldest one that has not made
    /// a call with the cluster token (health probes, half-open handshakes);
    /// when every one has, the new connection is closed at once.
    #[arg(long, env = "COLONNADE_MAX_CONNECTIONS", default_value_t = colonnade_ps_shard::connections::MAX_CONNECTIONS)]
    max_connections: usize,
    /// Close a new connection that has not started a call within this many
    /// seconds (TLS handshake, HTTP/2 preface, first request's headers).
    #[arg(long, env = "COLONNADE_HANDSHAKE_TIMEOUT_SECS", default_value_t = 10.0)]
    handshake_timeout_secs: f64,
    /// Most bytes of requests being received or served at once: a request
    /// that would pass it is refused with RESOURCE_EXHAUSTED before it is
    /// decoded (CreateModel's counts are bounded by --max-model-bytes).
    #[arg(long, env = "COLONNADE_MAX_REQUEST_BYTES_IN_FLIGHT", default_value_t = colonnade_ps_shard::edge::MAX_REQUEST_BYTES_IN_FLIGHT as u64)]
    max_request_bytes_in_flight: u64,
    /// Fail a request that sends nothing for this many seconds before it is
    /// complete (DEADLINE_EXCEEDED), e.g. a CreateModel stream that stops
    /// after its first message: its memory reservation is given back.
    #[arg(long, env = "COLONNADE_REQUEST_STALL_SECS", default_value_t = 30.0)]
    request_stall_secs: f64,
    /// Most work one Dotprod or Adjust may ask, in multiply-adds (examples
    /// × (1 + negative) × the shard's columns); more is refused with
    /// RESOURCE_EXHAUSTED. The default, 2^34 (about 0.6 CPU-s), is 4× a
    /// worker's default call at the largest dimension on one shard.
    #[arg(long, env = "COLONNADE_MAX_CALL_WORK", default_value_t = colonnade_ps_shard::work::MAX_CALL_WORK)]
    max_call_work: u64,
    /// Health says NOT_SERVING when a probe of the compute threads (an
    /// empty job queued like every training call) waits longer than this
    /// many seconds, and SERVING again once one gets through.
    #[arg(long, env = "COLONNADE_HEALTH_STALL_SECS", default_value_t = 10.0)]
    health_stall_secs: f64,
}

fn main() -> std::process::ExitCode {
    colonnade_ps_shard::hogwild::map_large_blocks();
    colonnade_setup::env::unset_empty_env();
    let args = Args::parse();
    colonnade_setup::log::init(args.log.log_format);
    // Training calls run on the runtime thread that received them
    // (`service::ShardService::inline`), at most one per compute permit: one
    // thread more than the permits keeps one serving I/O and health while
    // every permit computes.
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(compute_threads(args.threads) + 1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|rt| rt.block_on(run(args)));
    colonnade_setup::env::exit_code(result)
}

/// `--threads`, or the machine's processors.
fn compute_threads(given: Option<usize>) -> usize {
    given
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
        .max(1)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let threads = compute_threads(args.threads);
    let max_model_bytes = args.max_model_bytes.unwrap_or_else(default_budget);
    let handshake = positive_secs("--handshake-timeout-secs", args.handshake_timeout_secs)?;
    let request_stall = positive_secs("--request-stall-secs", args.request_stall_secs)?;
    let health_stall = positive_secs("--health-stall-secs", args.health_stall_secs)?;
    if args.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    if args.max_request_bytes_in_flight < 1 << 20 {
        anyhow::bail!(
            "--max-request-bytes-in-flight {}: at least 1 MiB (1048576), or no worker's call fits",
            args.max_request_bytes_in_flight
        );
    }
    let tokens = Tokens {
        cluster: args.auth.token().map_err(anyhow::Error::msg)?,
        admin: args
            .admin_token_file
            .as_deref()
            .map(colonnade_setup::auth::read_token)
            .transpose()
            .map_err(anyhow::Error::msg)?,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            colonnade_setup::tls::server_config(cert, key, args.tls_ca.as_deref())
                .map_err(anyhow::Error::msg)?,
        ),
        (None, None) if args.tls_ca.is_some() => {
            anyhow::bail!("--tls-ca (mutual TLS) needs the shard's own --tls-cert and --tls-key")
        }
        (None, None) => None,
        (Some(_), None) => anyhow::bail!("--tls-cert needs --tls-key (its private key)"),
        (None, Some(_)) => anyhow::bail!("--tls-key needs --tls-cert"),
    };
    let exposed = !args.listen.ip().is_loopback();
    if tls.is_none() && exposed {
        if !args.allow_plaintext {
            anyhow::bail!(
                "--listen {}: a shard serves plaintext only on loopback; give --tls-cert and \
                 --tls-key (`colonnade certs` makes them), or --allow-plaintext on a network \
                 you trust",
                args.listen
            );
        }
        tracing::warn!(
            listen = %args.listen,
            "serving plaintext beyond loopback (--allow-plaintext): anyone on the path can read \
             vectors and bearer tokens"
        );
    }
    if tokens.cluster.is_none() && exposed {
        tracing::warn!(
            listen = %args.listen,
            "no bearer token (--auth-token-file): anyone who reaches this address can train, \
             read and drop models"
        );
    }
    if let Some(addr) = args.metrics_listen {
        colonnade_setup::metrics::serve(addr).map_err(anyhow::Error::msg)?;
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("listener address")?;
    let health = match args.health_listen {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen on {a} (--health-listen)"))?,
        ),
        None => None,
    };
    tracing::info!(
        %addr,
        tls = tls.is_some(),
        mutual_tls = args.tls_ca.is_some(),
        // Options as their value, or left out: not `Some(..)`/`None`.
        health_listen = args.health_listen.map(tracing::field::display),
        metrics_listen = args.metrics_listen.map(tracing::field::display),
        threads,
        max_model_bytes,
        version = env!("CARGO_PKG_VERSION"),
        data_dir = args.data_dir.as_deref().map(|d| tracing::field::display(d.display())),
        "ps-shard serving"
    );
    let mut core = match args.data_dir {
        Some(dir) => ShardCore::persistent(Some(max_model_bytes), dir),
        None => ShardCore::new(Some(max_model_bytes)),
    };
    core.max_call_work = args.max_call_work;
    let core = Arc::new(core);
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
    if args.metrics_listen.is_some() {
        tokio::spawn(colonnade_ps_shard::observe::sample(
            Arc::clone(&core),
            Some(max_model_bytes),
        ));
    }
    let options = ServeOptions {
        threads,
        tokens,
        tls,
        health,
        connections: ConnectionLimits {
            max: args.max_connections,
            max_idle: (args.max_connection_idle_secs > 0)
                .then(|| Duration::from_secs(args.max_connection_idle_secs)),
            handshake,
        },
        edge: EdgeLimits {
            request_bytes: usize::try_from(args.max_request_bytes_in_flight).unwrap_or(usize::MAX),
            request_stall,
        },
        probe_stall: Some(health_stall),
    };
    let server = tokio::spawn(serve(listener, Arc::clone(&core), options, async move {
        let _ = stop_rx.await;
    }));
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

/// `secs` of `flag` as a duration, refused unless positive and finite.
fn positive_secs(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    if !(secs > 0.0 && secs.is_finite() && secs < 1e9) {
        anyhow::bail!("{flag} {secs}: must be a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(secs))
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
