//! Configuration conventions every binary shares: empty `COLONNADE_*`
//! variables, the log set-up and how a user error ends the process.

use std::io::IsTerminal;
use std::process::ExitCode;

/// Removes `COLONNADE_*` environment variables that are set but empty, so that
/// `COLONNADE_THREADS=` in a compose file or ConfigMap means "use the default"
/// rather than "parse the empty string". Call at the start of `main`, before any
/// thread is started.
pub fn unset_empty_env() {
    let empty: Vec<_> = std::env::vars_os()
        .filter(|(k, v)| v.is_empty() && k.to_str().is_some_and(|k| k.starts_with("COLONNADE_")))
        .map(|(k, _)| k)
        .collect();
    for k in empty {
        std::env::remove_var(k);
    }
}

/// Whether log lines may carry ANSI colours: only when stderr is a terminal
/// and `NO_COLOR` is unset or empty (<https://no-color.org>). Log files,
/// `docker logs` and `kubectl logs` get plain text.
pub fn log_colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per event (timestamp, level, target, fields), for
    /// log collectors.
    Json,
}

/// The log flags every binary takes.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LogArgs {
    /// Log lines as text, or as one JSON object per line (for log
    /// collectors). Filter with RUST_LOG (default: info).
    #[arg(long, global = true, env = "COLONNADE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The shared bearer token of a cluster: every training, export and admin
/// call to a shard carries it, and a shard given one refuses calls without
/// it (`UNAUTHENTICATED`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// File holding the cluster's bearer token (one line of visible ASCII;
    /// surrounding whitespace is ignored). Shards given a token refuse every
    /// call without it but the gRPC health checks; clients and the exporter
    /// send it. Without this flag the token is read from COLONNADE_AUTH_TOKEN
    /// when that is set.
    #[arg(long, global = true, env = "COLONNADE_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<std::path::PathBuf>,
}

impl AuthArgs {
    /// The token: from `--auth-token-file`, else from `COLONNADE_AUTH_TOKEN`,
    /// else none. Errors name the file or the variable.
    pub fn token(&self) -> Result<Option<String>, String> {
        match &self.auth_token_file {
            Some(path) => read_token(path).map(Some),
            None => std::env::var("COLONNADE_AUTH_TOKEN")
                .ok()
                .map(|t| parse_token(&t).map_err(|e| format!("COLONNADE_AUTH_TOKEN: {e}")))
                .transpose(),
        }
    }
}

/// TLS towards shards, for clients and the exporter: shards named
/// `https://host:port` are reached over TLS, checked against `--tls-ca` (or
/// the system's trust store); `--tls-cert`/`--tls-key` present a client
/// certificate to shards that require one (mutual TLS).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientTlsArgs {
    /// CA certificate(s) (PEM) the shards' certificates must chain to, for
    /// shards named `https://host:port`. Without it, the system's trust
    /// store. Giving any --tls-* flag makes a shard named without
    /// `https://` an error rather than a plaintext connection.
    #[arg(long, global = true, env = "COLONNADE_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// This process's certificate (PEM), presented to shards that require
    /// mutual TLS (ps-shard --tls-ca); needs --tls-key.
    #[arg(long, global = true, env = "COLONNADE_TLS_CERT")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, global = true, env = "COLONNADE_TLS_KEY")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl ClientTlsArgs {
    /// Whether any TLS flag was given.
    pub fn any(&self) -> bool {
        self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some()
    }
}

/// Reads a token file (see [`AuthArgs`]); errors name the file.
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = fs_err::read_to_string(path).map_err(|e| e.to_string())?;
    parse_token(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A token is its text without surrounding whitespace: non-empty visible
/// ASCII (it travels as an HTTP header).
fn parse_token(text: &str) -> Result<String, String> {
    let token = text.trim();
    if token.is_empty() {
        return Err("the token is empty".into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token must be visible ASCII without spaces".into());
    }
    Ok(token.to_string())
}

/// The logging every binary uses: to stderr, filtered by `RUST_LOG` (default
/// `info`), as text coloured only as [`log_colours`] says, or as JSON lines.
pub fn init_logging(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(log_colours()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Upper bounds (seconds) of the latency histograms' buckets: a training
/// call takes about a millisecond, a checkpoint up to minutes.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 120.0,
];

/// Serves this process's metrics (the `metrics` crate's counters, gauges
/// and histograms) for Prometheus at `http://ADDR/metrics`, every
/// `*_seconds` histogram with [`LATENCY_BUCKETS`]. Call once, from inside
/// the async runtime; errors name the address.
pub fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
        .and_then(PrometheusBuilder::install)
        .map_err(|e| format!("--metrics-listen {addr}: {e}"))?;
    tracing::info!(%addr, "metrics for Prometheus at http://{addr}/metrics");
    Ok(())
}

/// Ends `main`: a user error is printed as `error: <message>: <cause>: ...`
/// (the alternate `{:#}` form, which for `anyhow` joins the cause chain) and
/// exits with 1, never with a backtrace, whatever `RUST_BACKTRACE` says.
/// Panics keep Rust's own report.
pub fn exit_code<E: std::fmt::Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
