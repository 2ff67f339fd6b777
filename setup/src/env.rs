//! Conventions every binary shares at start and at its end: empty
//! `COLONNADE_*` variables, and how a user error ends the process.

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
