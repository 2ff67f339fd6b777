//! Configuration conventions every binary shares.

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
