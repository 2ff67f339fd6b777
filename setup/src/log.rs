//! Logging: to stderr, filtered by `RUST_LOG` (default `info`), as text or
//! as one JSON object per line.

use std::io::IsTerminal;

/// Whether log lines and progress bars may carry ANSI colours: only when
/// stderr is a terminal and `NO_COLOR` is unset or empty
/// (<https://no-color.org>). Log files, `docker logs` and `kubectl logs` get
/// plain text.
pub fn colours() -> bool {
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

/// The logging every binary uses: to stderr, filtered by `RUST_LOG` (default
/// `info`), as text coloured only as [`colours`] says, or as JSON lines.
pub fn init(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(colours()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// `x` rounded to 3 decimals, for a log field: `seconds=177.157`, not
/// `seconds=177.15746900000002` (f64's shortest form of a rounded value
/// has at most 3 decimals), and still a number in JSON logs and for the
/// benchmark scripts that parse the text ones.
pub fn rounded(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// The seconds of `d`, to the millisecond, for a log field.
pub fn seconds(d: std::time::Duration) -> f64 {
    rounded(d.as_secs_f64())
}
