//! The Prometheus endpoint of shards and workers (`--metrics-listen`).

/// Upper bounds (seconds) of the latency histograms' buckets: a training
/// call takes about a millisecond, a checkpoint up to minutes.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 120.0,
];

/// Serves this process's metrics (the `metrics` crate's counters, gauges
/// and histograms) for Prometheus at `http://ADDR/metrics`, every
/// `*_seconds` histogram with [`LATENCY_BUCKETS`]. Call once, from inside
/// the async runtime; errors name the address.
pub fn serve(addr: std::net::SocketAddr) -> Result<(), String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
        .and_then(PrometheusBuilder::install)
        .map_err(|e| format!("--metrics-listen {addr}: {e}"))?;
    tracing::info!(%addr, "metrics for Prometheus at http://{addr}/metrics");
    Ok(())
}
