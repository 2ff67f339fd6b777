//! The Prometheus endpoint of shards and workers (`--metrics-listen`): a
//! small HTTP/1.1 server of its own, so that no peer can exhaust the
//! process's file descriptors through it. It keeps at most
//! [`MAX_METRICS_CONNECTIONS`] connections (one more is closed at once),
//! answers one request per connection and closes it, gives each
//! [`METRICS_REQUEST_TIMEOUT`] to send its request and read the answer,
//! retries a failed `accept` (e.g. out of file descriptors) after a growing
//! pause, and logs refusals and failures at most every [`LOG_EVERY`].

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Upper bounds (seconds) of the latency histograms' buckets: a training
/// call takes about a millisecond, a checkpoint up to minutes.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 120.0,
];

/// Most connections the metrics endpoint keeps open at once (a scraper
/// opens one at a time).
pub const MAX_METRICS_CONNECTIONS: usize = 16;

/// How long a metrics connection may take to send its request and read
/// the answer; then it is closed.
pub const METRICS_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a refused connection or a failed `accept` is logged at most.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Largest request head read (a scraper's is a few hundred bytes).
const MAX_REQUEST_HEAD: usize = 8 << 10;

/// How often histograms are compacted.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Serves this process's metrics (the `metrics` crate's counters, gauges
/// and histograms) for Prometheus at `http://ADDR/metrics`, every
/// `*_seconds` histogram with [`LATENCY_BUCKETS`]. Call once, from inside
/// the async runtime; errors name the address.
pub fn serve(addr: std::net::SocketAddr) -> Result<(), String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let failed = |e: &dyn std::fmt::Display| format!("--metrics-listen {addr}: {e}");
    let listener = std::net::TcpListener::bind(addr).map_err(|e| failed(&e))?;
    listener.set_nonblocking(true).map_err(|e| failed(&e))?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| failed(&e))?;
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| failed(&e))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(accept(listener, handle));
    tracing::info!(%addr, "metrics for Prometheus at http://{addr}/metrics");
    Ok(())
}

/// Accepts metrics connections for ever, within the limits of [`serve`].
async fn accept(
    listener: tokio::net::TcpListener,
    handle: metrics_exporter_prometheus::PrometheusHandle,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_METRICS_CONNECTIONS));
    let mut logged: Option<Instant> = None;
    let (mut refused, mut failed) = (0u64, 0u64);
    let mut backoff = Duration::ZERO;
    loop {
        let quiet = logged.is_some_and(|t| t.elapsed() < LOG_EVERY);
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff = Duration::ZERO;
                accepted
            }
            Err(e) => {
                failed += 1;
                backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                if !quiet {
                    tracing::warn!(
                        failed,
                        "metrics endpoint: accepting a connection failed: {e}; retrying"
                    );
                    logged = Some(Instant::now());
                }
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(tcp);
            refused += 1;
            if !quiet {
                tracing::warn!(
                    %peer,
                    refused,
                    "metrics endpoint: refused a connection: {MAX_METRICS_CONNECTIONS} are open"
                );
                logged = Some(Instant::now());
            }
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = tokio::time::timeout(METRICS_REQUEST_TIMEOUT, answer(tcp, &handle)).await;
        });
    }
}

/// Reads one request head and answers it: the metrics for `GET /metrics`
/// (or `/`), 404 for other paths, 405 for other methods; then closes.
async fn answer(
    mut tcp: tokio::net::TcpStream,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_REQUEST_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics" | b"/") => ("200 OK", handle.render()),
        (b"GET", _) => (
            "404 Not Found",
            "not found: metrics are at /metrics\n".into(),
        ),
        _ => ("405 Method Not Allowed", "only GET\n".into()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(response.as_bytes()).await?;
    tcp.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flood_of_idle_connections_is_capped_and_scrapes_still_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        tokio::spawn(accept(listener, handle));
        // Idle connections past the cap: the ones beyond it are closed at once.
        let mut idle = Vec::new();
        for _ in 0..MAX_METRICS_CONNECTIONS + 8 {
            idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        let mut closed = 0;
        for s in &mut idle[MAX_METRICS_CONNECTIONS..] {
            let mut b = [0u8; 1];
            if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await {
                closed += 1;
            }
        }
        assert_eq!(closed, 8, "connections past the cap are closed");
        drop(idle);
        // Once the idle ones are gone, a scrape answers.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    }
}
