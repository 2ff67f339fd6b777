//! Serving a [`ShardCore`] over gRPC with grpc.health.v1 beside it.

use crate::registry::ShardCore;
use crate::service::{ShardService, Tokens};
use colonnade_proto::v1::shard_server::ShardServer;
use colonnade_proto::MAX_MESSAGE_BYTES;
use futures::Stream;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How a shard serves its core, beside the listener.
#[derive(Default)]
pub struct ServeOptions {
    /// Most CPU-heavy calls running at once (at least 1).
    pub threads: usize,
    /// The bearer tokens calls must carry.
    pub tokens: Tokens,
    /// TLS on the shard's port (and mutual TLS when it names a client CA);
    /// plaintext without.
    pub tls: Option<tonic::transport::ServerTlsConfig>,
    /// A second listener, always plaintext, that serves only grpc.health.v1:
    /// for probes that cannot speak TLS (Kubernetes' gRPC probes). It tells
    /// whether the shard serves, nothing else.
    pub health: Option<TcpListener>,
    /// A connection with no call in flight for this long is closed (gRPC's
    /// MAX_CONNECTION_IDLE): idle clients do not hold the
    /// [`MAX_CONNECTIONS`] slots. None: never.
    pub max_connection_idle: Option<Duration>,
    /// How long a probe of the compute threads may wait before health says
    /// NOT_SERVING (default [`PROBE_STALL`]).
    pub probe_stall: Option<Duration>,
}

/// Serves `core` on `listener` until `shutdown` resolves: the Shard service
/// behind the bearer-token check, grpc.health.v1 beside it, every call
/// counted and timed (`colonnade_shard_calls_total`,
/// `colonnade_shard_call_seconds`). Health says NOT_SERVING while the data
/// dir loads, while the shard's compute threads do not answer
/// ([`watch_compute`]) and once shutdown begins.
pub async fn serve(
    listener: TcpListener,
    core: Arc<ShardCore>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let ServeOptions {
        threads,
        tokens,
        tls,
        health: health_listener,
        max_connection_idle,
        probe_stall,
    } = options;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_not_serving::<ShardServer<ShardService>>()
        .await;
    let interceptor = tokens.clone().interceptor();
    let service = ShardService::new(Arc::clone(&core), threads).with_tokens(tokens);
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let watchdog = tokio::spawn(watch_compute(
        service.probe(),
        core,
        reporter.clone(),
        stopping.clone(),
        probe_stall.unwrap_or(PROBE_STALL),
    ));
    let shard = ShardServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Every Shard call needs the cluster token; health probes need none.
    let shard = tonic::service::interceptor::InterceptedService::new(shard, interceptor);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    // Health stops serving first, then calls in flight finish.
    let shutdown = {
        let reporter = reporter.clone();
        async move {
            shutdown.await;
            let _ = stopping_tx.send(true);
            reporter
                .set_not_serving::<ShardServer<ShardService>>()
                .await;
        }
    };
    let health_server = health_listener.map(|l| {
        let mut stopping = stopping.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .layer(crate::observe::CallLayer)
                .add_service(health.clone())
                .serve_with_incoming_shutdown(
                    limited_incoming(l, MAX_CONNECTIONS, max_connection_idle),
                    async move {
                        let _ = stopping.wait_for(|s| *s).await;
                    },
                ),
        )
    });
    let served = builder
        .tcp_nodelay(true)
        .initial_stream_window_size(colonnade_proto::HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(colonnade_proto::HTTP2_CONNECTION_WINDOW)
        .layer(crate::observe::CallLayer)
        .add_service(health)
        .add_service(shard)
        .serve_with_incoming_shutdown(
            limited_incoming(listener, MAX_CONNECTIONS, max_connection_idle),
            shutdown,
        )
        .await;
    watchdog.abort();
    if let Some(h) = health_server {
        h.abort();
    }
    served
}

/// How often [`watch_compute`] sends a probe through the compute threads.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// How long a probe may wait for a compute thread before health says
/// NOT_SERVING, by default.
pub const PROBE_STALL: Duration = Duration::from_secs(10);

/// Keeps the Shard service's health true: NOT_SERVING while the data dir
/// loads, and whenever a probe (an empty job through the same permits and
/// blocking threads as every training call) waits longer than
/// `stall`: the shard accepts connections but cannot answer calls.
/// SERVING again once a probe gets through. Stops once `stopping` is set.
async fn watch_compute(
    probe: impl Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + 'static,
    core: Arc<ShardCore>,
    reporter: tonic_health::server::HealthReporter,
    stopping: tokio::sync::watch::Receiver<bool>,
    stall: Duration,
) {
    while core.is_loading() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut serving, mut served) = (false, false);
    loop {
        if *stopping.borrow() {
            return;
        }
        let mut attempt = probe();
        let answered = match tokio::time::timeout(stall, &mut attempt).await {
            Ok(answered) => answered,
            Err(_) => {
                if serving {
                    tracing::warn!(
                        stall_secs = stall.as_secs_f64(),
                        "health: NOT_SERVING: the shard's compute threads have not answered a \
                         probe"
                    );
                    metrics::gauge!("colonnade_shard_serving").set(0.0);
                    reporter
                        .set_not_serving::<ShardServer<ShardService>>()
                        .await;
                    serving = false;
                }
                attempt.await
            }
        };
        if !answered {
            return; // shutting down
        }
        if !serving && !*stopping.borrow() {
            if served {
                tracing::info!("health: SERVING again: a probe got through the compute threads");
            }
            served = true;
            metrics::gauge!("colonnade_shard_serving").set(1.0);
            reporter.set_serving::<ShardServer<ShardService>>().await;
            serving = true;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Most connections a shard keeps open at once: below the usual 1,024-file
/// soft limit, so that accepting never fails with "too many open files"
/// (which left a shard spinning on `accept`, refusing everyone silently).
/// A cluster needs about one per client process per shard.
pub const MAX_CONNECTIONS: usize = 512;

/// How often a refused connection or a failed `accept` is logged at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// How long a new connection may stay silent: one that sends nothing (not
/// even the HTTP/2 preface) within it is closed and its slot freed. An
/// established gRPC client idle between calls is not affected.
const GREETING_TIMEOUT: Duration = Duration::from_secs(10);

/// Calls in flight on one connection, and since when it has had none
/// (counted by [`crate::observe::CallLayer`]).
#[derive(Debug)]
pub struct Activity {
    calls: std::sync::atomic::AtomicUsize,
    idle_since: parking_lot::Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            calls: 0.into(),
            idle_since: parking_lot::Mutex::new(Instant::now()),
        }
    }

    /// A call started on the connection.
    pub fn begin(&self) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A call ended.
    pub fn end(&self) {
        let mut since = self.idle_since.lock();
        if self.calls.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            *since = Instant::now();
        }
    }

    /// How long the connection has had no call in flight (zero while one is).
    fn idle_for(&self) -> Duration {
        let since = self.idle_since.lock();
        if self.calls.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            Duration::ZERO
        } else {
            since.elapsed()
        }
    }
}

/// What the server knows of a connection: its TCP addresses, and its
/// [`Activity`] for the call layer (in every request's extensions).
#[derive(Clone, Debug)]
pub struct SlotInfo {
    pub tcp: TcpConnectInfo,
    pub activity: Arc<Activity>,
}

/// An accepted connection holding one of the shard's connection slots,
/// closed if it sends nothing within [`GREETING_TIMEOUT`], or once it has
/// had no call in flight for `max_idle`.
struct Slotted {
    tcp: TcpStream,
    _slot: OwnedSemaphorePermit,
    greeting: Option<Pin<Box<tokio::time::Sleep>>>,
    activity: Arc<Activity>,
    /// The idle limit and the timer that wakes the reader to check it.
    idle: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
}

/// The connections of `listener`, at most `max` open at once: one more is
/// closed as soon as it is accepted, and a failed `accept` (e.g. out of file
/// descriptors) is retried after a pause instead of at once; both are logged,
/// at most every [`REFUSAL_LOG_EVERY`]. Yields no errors, so the server
/// never stops on one.
fn limited_incoming(
    listener: TcpListener,
    max: usize,
    max_idle: Option<Duration>,
) -> impl Stream<Item = Result<Slotted, std::io::Error>> {
    let slots = Arc::new(Semaphore::new(max));
    futures::stream::unfold(
        (listener, slots, None::<Instant>, 0u64),
        move |(listener, slots, mut logged, mut refused)| async move {
            loop {
                let quiet = logged.is_some_and(|t| t.elapsed() < REFUSAL_LOG_EVERY);
                match listener.accept().await {
                    Ok((tcp, peer)) => match Arc::clone(&slots).try_acquire_owned() {
                        Ok(slot) => {
                            let _ = tcp.set_nodelay(true);
                            metrics::gauge!("colonnade_shard_connections").increment(1.0);
                            let conn = Slotted {
                                tcp,
                                _slot: slot,
                                greeting: Some(Box::pin(tokio::time::sleep(GREETING_TIMEOUT))),
                                activity: Arc::new(Activity::new()),
                                idle: max_idle.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
                            };
                            return Some((Ok(conn), (listener, slots, logged, refused)));
                        }
                        Err(_) => {
                            drop(tcp);
                            refused += 1;
                            metrics::counter!("colonnade_shard_connections_refused_total")
                                .increment(1);
                            if !quiet {
                                tracing::warn!(
                                    %peer,
                                    refused,
                                    "refused a connection: {max} connections are open \
                                     (idle clients? each client process needs about one)"
                                );
                                logged = Some(Instant::now());
                            }
                        }
                    },
                    Err(e) => {
                        if !quiet {
                            tracing::warn!("accepting a connection failed: {e}; retrying");
                            logged = Some(Instant::now());
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        },
    )
}

impl Drop for Slotted {
    fn drop(&mut self) {
        metrics::gauge!("colonnade_shard_connections").decrement(1.0);
    }
}

impl Connected for Slotted {
    type ConnectInfo = SlotInfo;

    fn connect_info(&self) -> SlotInfo {
        SlotInfo {
            tcp: self.tcp.connect_info(),
            activity: Arc::clone(&self.activity),
        }
    }
}

impl Slotted {
    /// Whether the connection has been idle past its limit; otherwise sets
    /// the timer for the moment it could be, to be woken then.
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some((limit, timer)) = self.idle.as_mut() else {
            return false;
        };
        let limit = *limit;
        while timer.as_mut().poll(cx).is_ready() {
            let idle = self.activity.idle_for();
            if idle >= limit {
                return true;
            }
            let wait = if idle.is_zero() { limit } else { limit - idle };
            timer.as_mut().reset(tokio::time::Instant::now() + wait);
        }
        false
    }
}

impl AsyncRead for Slotted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.idle_expired(cx) {
            let secs = self.idle.as_ref().map_or(0, |(d, _)| d.as_secs());
            tracing::debug!(secs, "closing a connection without a call for {secs} s");
            metrics::counter!("colonnade_shard_connections_idle_closed_total").increment(1);
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no call for {secs} s (--max-connection-idle-secs)"),
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let Some(deadline) = self.greeting.as_mut() {
            if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
                self.greeting = None;
            } else if read.is_pending() && deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the connection sent nothing in its first 10 s",
                )));
            }
        }
        read
    }
}

impl AsyncWrite for Slotted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// A shard running on a background task, e.g. for embedded clusters and tests.
pub struct SpawnedShard {
    pub addr: SocketAddr,
    pub core: Arc<ShardCore>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl SpawnedShard {
    /// Binds `addr` (port 0 picks a free one) and serves a fresh shard.
    pub async fn start(
        addr: SocketAddr,
        threads: usize,
        max_model_bytes: Option<u64>,
    ) -> std::io::Result<Self> {
        Self::serve_core(addr, threads, Arc::new(ShardCore::new(max_model_bytes))).await
    }

    /// Binds `addr` and serves `core` (e.g. one keeping a data dir, loaded
    /// by the caller).
    pub async fn serve_core(
        addr: SocketAddr,
        threads: usize,
        core: Arc<ShardCore>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let options = ServeOptions {
            threads,
            ..ServeOptions::default()
        };
        let task = tokio::spawn(serve(listener, Arc::clone(&core), options, async {
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            core,
            shutdown: Some(tx),
            task,
        })
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// Stops serving and waits for the server task.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for SpawnedShard {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
