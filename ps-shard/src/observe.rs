//! What a shard tells Prometheus (`ps-shard --metrics-listen`): every gRPC
//! call counted by method and status code and timed ([`CallLayer`], a tower
//! layer around the whole server, so that calls refused before a handler
//! runs, for a missing token or an oversized message, are counted too; it
//! also keeps each connection's calls in flight for the idle limit), and the
//! shard's state sampled every few seconds ([`sample`]). Labels come from
//! fixed sets: a hostile request cannot add series.

use crate::connections::{Activity, SlotInfo};
use crate::registry::ShardCore;
use http_body::{Body, Frame};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The methods calls are counted under; any other path counts as `other`.
const METHODS: [&str; 10] = [
    "CreateModel",
    "Dotprod",
    "Adjust",
    "PullRows",
    "Checkpoint",
    "Restore",
    "Status",
    "DropModel",
    "Check",
    "Watch",
];

/// The method label of a request path (`/colonnade.v1.Shard/Dotprod`).
fn method_label(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or_default();
    let known = path.starts_with("/colonnade.v1.Shard/") || path.starts_with("/grpc.health.v1.");
    match METHODS.iter().find(|m| **m == name) {
        Some(m) if known => m,
        _ => "other",
    }
}

/// The name of a gRPC status code, as tonic spells it.
fn code_label(code: Option<i32>) -> &'static str {
    const NAMES: [&str; 17] = [
        "Ok",
        "Cancelled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    code.and_then(|c| usize::try_from(c).ok())
        .and_then(|c| NAMES.get(c).copied())
        .unwrap_or("Unknown")
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Counts and times every call of the server it wraps, and marks it in
/// flight on its connection until its response ends.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallLayer;

impl<S> tower::Layer<S> for CallLayer {
    type Service = Calls<S>;

    fn layer(&self, inner: S) -> Calls<S> {
        Calls { inner }
    }
}

#[derive(Clone, Debug)]
pub struct Calls<S> {
    inner: S,
}

/// The connection a request came on (plaintext or TLS).
fn activity<B>(request: &http::Request<B>) -> Option<Arc<Activity>> {
    let ext = request.extensions();
    ext.get::<SlotInfo>()
        .or_else(|| {
            ext.get::<tonic::transport::server::TlsConnectInfo<SlotInfo>>()
                .map(tonic::transport::server::TlsConnectInfo::get_ref)
        })
        .map(|info| Arc::clone(&info.activity))
}

impl<S, B, RB> tower::Service<http::Request<B>> for Calls<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Recorded<RB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = method_label(request.uri().path());
        let start = Instant::now();
        let activity = activity(&request);
        if let Some(a) = &activity {
            a.begin();
        }
        let mut pending = Pending(activity);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let activity = pending.0.take();
            // An error before any message is a trailers-only response: its
            // status is in the headers. Otherwise it comes in the trailers.
            let code = grpc_status(response.headers());
            Ok(response.map(|body| {
                let mut recorded = Recorded {
                    body,
                    method,
                    start,
                    code,
                    done: false,
                    activity,
                };
                // Trailers-only: the call is over (its empty body may
                // never be polled).
                if code.is_some() {
                    recorded.record(code_label(code));
                }
                recorded
            }))
        })
    }
}

/// A call's connection activity until its response exists: ended if the
/// handler's future is dropped (or fails) first.
struct Pending(Option<Arc<Activity>>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(a) = self.0.take() {
            a.end();
        }
    }
}

/// A response body that records its call when it ends: with the status of
/// its trailers (or headers), or `Cancelled` if the client dropped it first.
pub struct Recorded<B> {
    body: B,
    method: &'static str,
    start: Instant,
    code: Option<i32>,
    done: bool,
    activity: Option<Arc<Activity>>,
}

impl<B> Recorded<B> {
    fn record(&mut self, code: &'static str) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(a) = self.activity.take() {
            a.end();
        }
        metrics::counter!("colonnade_shard_calls_total", "method" => self.method, "code" => code)
            .increment(1);
        metrics::histogram!("colonnade_shard_call_seconds", "method" => self.method)
            .record(self.start.elapsed().as_secs_f64());
    }
}

impl<B> Drop for Recorded<B> {
    fn drop(&mut self) {
        self.record("Cancelled");
    }
}

impl<B: Body + Unpin> Body for Recorded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = grpc_status(trailers).or(self.code);
                    self.record(code_label(code));
                }
            }
            Poll::Ready(Some(Err(_))) => self.record("Internal"),
            Poll::Ready(None) => {
                let code = self.code;
                self.record(code_label(code));
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// How often [`sample`] reads the shard's state.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Sets the gauges of the shard's state every few seconds until the task
/// is dropped: models and their bytes against the budget, pairs adjusted,
/// checkpoints (age of the newest, failed writes), and this process's
/// resident memory.
pub async fn sample(core: Arc<ShardCore>, budget: Option<u64>) {
    if let Some(b) = budget {
        metrics::gauge!("colonnade_shard_memory_budget_bytes").set(b as f64);
    }
    let mut adjusted_seen = std::collections::HashMap::<u64, u64>::new();
    loop {
        let models = core.models();
        let mut bytes = 0u64;
        let mut newest_age: Option<f64> = None;
        let mut failing = 0u64;
        for m in &models {
            bytes += m.memory_bytes() as u64;
            // Pairs adjusted, as a counter: the increase since the last sample.
            let pairs = m
                .stats
                .pairs_adjusted
                .load(std::sync::atomic::Ordering::Relaxed);
            let seen = adjusted_seen.entry(m.fingerprint).or_insert(0);
            metrics::counter!("colonnade_shard_pairs_adjusted_total")
                .increment(pairs.saturating_sub(*seen));
            *seen = pairs;
            let ckpt = core.checkpoints(m.fingerprint);
            if let Some(age) = ckpt.newest_age() {
                let age = age.as_secs_f64();
                newest_age = Some(newest_age.map_or(age, |a: f64| a.min(age)));
            }
            if ckpt.last_error().is_some() {
                failing += 1;
            }
        }
        adjusted_seen.retain(|fp, _| models.iter().any(|m| m.fingerprint == *fp));
        metrics::gauge!("colonnade_shard_models").set(models.len() as f64);
        metrics::gauge!("colonnade_shard_model_bytes").set(bytes as f64);
        if let Some(age) = newest_age {
            metrics::gauge!("colonnade_shard_checkpoint_age_seconds").set(age);
        }
        metrics::gauge!("colonnade_shard_models_failing_checkpoints").set(failing as f64);
        if let Some(rss) = resident_bytes() {
            metrics::gauge!("process_resident_memory_bytes").set(rss as f64);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// This process's resident memory (`/proc/self/statm`), where there is one.
pub fn resident_bytes() -> Option<u64> {
    let statm = fs_err::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_fixed_sets() {
        assert_eq!(method_label("/colonnade.v1.Shard/Dotprod"), "Dotprod");
        assert_eq!(method_label("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(method_label("/colonnade.v1.Shard/Anything"), "other");
        assert_eq!(method_label("/evil.Service/Dotprod"), "other");
        assert_eq!(method_label(""), "other");
        assert_eq!(code_label(Some(0)), "Ok");
        assert_eq!(code_label(Some(16)), "Unauthenticated");
        assert_eq!(code_label(Some(99)), "Unknown");
        assert_eq!(code_label(Some(-1)), "Unknown");
        assert_eq!(code_label(None), "Unknown");
    }
}
