//! Admission at a shard's edge, before any request is decoded ([`EdgeLayer`],
//! a tower layer around the whole server):
//!
//! - a Shard call without the cluster token is refused (UNAUTHENTICATED)
//!   before its request is received, so that it reserves nothing; requests
//!   on other paths (health) are at most [`MAX_OTHER_BYTES`];
//! - the bytes of requests being received or served are bounded per shard
//!   (`--max-request-bytes-in-flight`): a unary request is received whole
//!   here, the size its gRPC prefix declares reserved as soon as the prefix
//!   arrives, and one that would pass the bound is answered
//!   RESOURCE_EXHAUSTED at once (its reservation held until its response
//!   ends);
//! - a request body that sends nothing for `--request-stall-secs` is failed
//!   (DEADLINE_EXCEEDED): a CreateModel stream that stops after its first
//!   message gives its memory reservation back;
//! - health `Watch` streams are bounded ([`MAX_WATCH_STREAMS`]);
//! - server-streaming responses (`Watch`, `PullRows`) end with UNAVAILABLE
//!   once the shard shuts down, so that open streams never hold a shutdown.

use bytes::{Bytes, BytesMut};
use colonnade_proto::MAX_MESSAGE_BYTES;
use colonnade_setup::{Scope, Tokens};
use http_body::{Body as _, Frame};
use http_body_util::Full;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::Status;

/// Default bound on the bytes of requests in flight on one shard: 8
/// requests of the largest message size at once, or thousands of the
/// largest a worker sends with its defaults (an `Adjust` of ~130 KB).
pub const MAX_REQUEST_BYTES_IN_FLIGHT: usize = 512 << 20;

/// Default time a request body may send nothing before it is failed.
pub const REQUEST_STALL: Duration = Duration::from_secs(30);

/// Most health `Watch` streams open at once on one listener; one more is
/// refused with RESOURCE_EXHAUSTED. (Kubernetes' probes use `Check`.)
pub const MAX_WATCH_STREAMS: usize = 64;

/// Largest request on a path outside the Shard service (health checks).
const MAX_OTHER_BYTES: usize = 64 << 10;

const SHARD: &str = "/colonnade.v1.Shard/";
/// The one request path that streams its request: received as it comes.
const CREATE_MODEL: &str = "/colonnade.v1.Shard/CreateModel";
const WATCH: &str = "/grpc.health.v1.Health/Watch";
const PULL_ROWS: &str = "/colonnade.v1.Shard/PullRows";

/// The limits [`EdgeLayer`] enforces.
#[derive(Clone, Copy, Debug)]
pub struct EdgeLimits {
    /// Bytes of requests in flight on the shard at most.
    pub request_bytes: usize,
    /// A request body that sends nothing for this long is failed.
    pub request_stall: Duration,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        Self {
            request_bytes: MAX_REQUEST_BYTES_IN_FLIGHT,
            request_stall: REQUEST_STALL,
        }
    }
}

/// Admission before decoding (see the module's doc). Clones share their
/// budgets: one per shard for bytes, one per layer for `Watch` streams.
#[derive(Clone)]
pub struct EdgeLayer {
    limits: EdgeLimits,
    bytes: Arc<Semaphore>,
    watches: Arc<Semaphore>,
    stopping: watch::Receiver<bool>,
    /// Checked before a Shard request is received: a peer without the
    /// token reserves nothing.
    tokens: Arc<Tokens>,
}

impl EdgeLayer {
    /// `stopping` turns true when the shard shuts down.
    pub fn new(limits: EdgeLimits, stopping: watch::Receiver<bool>, tokens: Tokens) -> Self {
        Self {
            limits,
            tokens: Arc::new(tokens),
            bytes: Arc::new(Semaphore::new(
                limits.request_bytes.clamp(1, Semaphore::MAX_PERMITS),
            )),
            watches: Arc::new(Semaphore::new(MAX_WATCH_STREAMS)),
            stopping,
        }
    }

    /// The same byte budget, with its own `Watch` budget (for a second
    /// listener).
    pub fn sibling(&self) -> Self {
        Self {
            watches: Arc::new(Semaphore::new(MAX_WATCH_STREAMS)),
            ..self.clone()
        }
    }
}

impl<S> tower::Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    layer: EdgeLayer,
}

/// Bytes reserved from a shard's budget, given back when dropped.
struct Reserved {
    budget: Arc<Semaphore>,
    bytes: usize,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.budget.add_permits(self.bytes);
        metrics::gauge!("colonnade_shard_request_bytes_in_flight").decrement(self.bytes as f64);
    }
}

impl Reserved {
    /// Reserves `n` more bytes, if the budget has them.
    fn grow(&mut self, n: usize) -> bool {
        let Ok(n32) = u32::try_from(n) else {
            return false;
        };
        match self.budget.try_acquire_many(n32) {
            Ok(permit) => {
                permit.forget();
                self.bytes += n;
                metrics::gauge!("colonnade_shard_request_bytes_in_flight").increment(n as f64);
                true
            }
            Err(_) => false,
        }
    }
}

fn refused(status: Status) -> http::Response<Body> {
    status.into_http()
}

/// What [`receive`] got: the request whole, with its bytes reserved, or
/// its first bytes only when its gRPC prefix declares a message larger than
/// any the shard accepts (for tonic to refuse with its own error).
enum Received {
    Whole(Bytes, Reserved),
    Oversized(Bytes),
}

/// Receives `body` whole into memory reserved from `budget` (the size its
/// gRPC prefix declares at once, then frame by frame past it), failing with
/// the status to answer when it would pass the budget or stalls.
async fn receive(
    mut body: Body,
    budget: &Arc<Semaphore>,
    limits: EdgeLimits,
    largest: usize,
) -> Result<Received, Status> {
    let mut reserved = Reserved {
        budget: Arc::clone(budget),
        bytes: 0,
    };
    let mut buf = BytesMut::new();
    let refuse = |reserved: &Reserved, wanted: usize| {
        metrics::counter!("colonnade_shard_requests_refused_total", "limit" => "bytes")
            .increment(1);
        let held = limits
            .request_bytes
            .saturating_sub(budget.available_permits())
            .saturating_sub(reserved.bytes);
        Status::resource_exhausted(format!(
            "this shard has {held} bytes of requests in flight and this one ({wanted} bytes) \
             would pass its limit (--max-request-bytes-in-flight {}): retry later, or send \
             smaller calls",
            limits.request_bytes
        ))
    };
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let frame = match tokio::time::timeout(limits.request_stall, frame).await {
            Err(_) => return Err(stalled(limits.request_stall)),
            Ok(None) => return Ok(Received::Whole(buf.freeze(), reserved)),
            Ok(Some(Err(status))) => return Err(status),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // request trailers: gRPC sends none
        };
        let had = buf.len();
        buf.extend_from_slice(&data);
        if had < 5 && buf.len() >= 5 {
            // The first message's prefix: a flag byte and its length.
            let declared = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if declared > largest {
                return Ok(Received::Oversized(buf.freeze()));
            }
            let want = (declared + 5).saturating_sub(reserved.bytes);
            if !reserved.grow(want) {
                return Err(refuse(&reserved, declared + 5));
            }
        }
        if buf.len() > reserved.bytes {
            // Past the first message (gRPC unary calls send one).
            if buf.len() > largest + 5 {
                return Err(Status::resource_exhausted(format!(
                    "the request is larger than {} bytes, the largest this shard accepts on \
                     this path",
                    largest + 5
                )));
            }
            if !reserved.grow(buf.len() - reserved.bytes) {
                return Err(refuse(&reserved, buf.len()));
            }
        }
    }
}

fn stalled(stall: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "the request sent nothing for {} s (--request-stall-secs)",
        stall.as_secs_f64()
    ))
}

impl<S> tower::Service<http::Request<Body>> for Edge<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The clone that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let path = request.uri().path();
            let streams_response = path == WATCH || path == PULL_ROWS;
            let watch = if path == WATCH {
                match Arc::clone(&layer.watches).try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        metrics::counter!("colonnade_shard_requests_refused_total", "limit" => "watch")
                            .increment(1);
                        return Ok(refused(Status::resource_exhausted(format!(
                            "{MAX_WATCH_STREAMS} health Watch streams are open on this shard \
                             already; use Check"
                        ))));
                    }
                }
            } else {
                None
            };
            let (parts, body) = request.into_parts();
            let shard_call = parts.uri.path().starts_with(SHARD);
            if shard_call {
                let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers.clone());
                if let Err(status) = layer.tokens.check(&metadata, Scope::Cluster) {
                    return Ok(refused(status));
                }
            }
            // Health requests are a service name; other paths are refused
            // after them by tonic.
            let largest = if shard_call {
                MAX_MESSAGE_BYTES
            } else {
                MAX_OTHER_BYTES
            };
            let (body, reserved) = if parts.uri.path() == CREATE_MODEL {
                (
                    Body::new(Stalling::new(body, layer.limits.request_stall)),
                    None,
                )
            } else {
                match receive(body, &layer.bytes, layer.limits, largest).await {
                    Ok(Received::Whole(bytes, reserved)) => {
                        (Body::new(Full::new(bytes)), Some(reserved))
                    }
                    Ok(Received::Oversized(start)) if shard_call => {
                        (Body::new(Full::new(start)), None)
                    }
                    Ok(Received::Oversized(_)) => {
                        return Ok(refused(Status::resource_exhausted(format!(
                            "a request of more than {MAX_OTHER_BYTES} bytes on this path"
                        ))))
                    }
                    Err(status) => return Ok(refused(status)),
                }
            };
            let response = inner.call(http::Request::from_parts(parts, body)).await?;
            let stopping = streams_response.then(|| {
                let mut stopping = layer.stopping.clone();
                let stop: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                    let _ = stopping.wait_for(|s| *s).await;
                });
                stop
            });
            Ok(response.map(|body| {
                Body::new(Held {
                    body,
                    _reserved: reserved,
                    _watch: watch,
                    stopping,
                    ended: false,
                })
            }))
        })
    }
}

/// A streamed request that fails once it sends nothing for `stall`.
struct Stalling {
    body: Body,
    stall: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Stalling {
    fn new(body: Body, stall: Duration) -> Self {
        Self {
            body,
            stall,
            timer: Box::pin(tokio::time::sleep(stall)),
        }
    }
}

impl http_body::Body for Stalling {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if polled.is_ready() {
            let next = tokio::time::Instant::now() + self.stall;
            self.timer.as_mut().reset(next);
            return polled;
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            metrics::counter!("colonnade_shard_requests_refused_total", "limit" => "stall")
                .increment(1);
            return Poll::Ready(Some(Err(stalled(self.stall))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

/// A response holding its request's reservations until it ends; a streamed
/// one ends with UNAVAILABLE once the shard shuts down.
struct Held {
    body: Body,
    _reserved: Option<Reserved>,
    _watch: Option<OwnedSemaphorePermit>,
    stopping: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    ended: bool,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if polled.is_pending() {
            if let Some(stop) = self.stopping.as_mut() {
                if stop.as_mut().poll(cx).is_ready() {
                    self.ended = true;
                    let mut trailers = http::HeaderMap::new();
                    let status = Status::unavailable("the shard is shutting down");
                    if status.add_header(&mut trailers).is_ok() {
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
