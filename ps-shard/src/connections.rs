//! The connections a listener accepts ([`ConnectionLimits`]): at most `max`
//! at once; each closed if it starts no call within the handshake timeout
//! (TLS, the HTTP/2 preface and a first request's headers), or once it has
//! had no call in flight for the idle limit (the call layer,
//! `crate::observe::CallLayer`, keeps each connection's [`Activity`]).
//!
//! No peer without the cluster token can lock clients out: a connection is
//! a *guest* until a call on it passes the token check ([`Activity::trust`]),
//! and when all slots are taken a new connection takes the slot of the
//! oldest guest, which is closed (whatever it holds: health `Watch` streams,
//! a half-sent preface). Only connections that presented the token (every
//! connection, on a shard without one) keep their slot until they go idle.
//! A failed `accept` (e.g. out of file descriptors) is retried after a
//! growing pause, and refusals are logged at most every
//! [`REFUSAL_LOG_EVERY`].

use futures::task::AtomicWaker;
use futures::Stream;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Most connections a shard's port keeps open at once by default
/// (`--max-connections`): with the health and metrics ports' own caps below
/// the usual 1,024-file soft limit, so that accepting never fails with "too
/// many open files". A cluster needs about one per client process per shard.
pub const MAX_CONNECTIONS: usize = 512;

/// Most connections the plaintext health port (`--health-listen`) keeps
/// open at once: probes open one at a time.
pub const MAX_HEALTH_CONNECTIONS: usize = 64;

/// How long a new connection may take to start its first call by default
/// (`--handshake-timeout-secs`): TLS handshake, HTTP/2 preface and the first
/// request's headers. A gRPC client makes its first call at once.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a refused connection or a failed `accept` is logged at most.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The longest pause before `accept` is tried again after it failed (the
/// pause doubles from 10 ms up to this while it keeps failing).
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long a new connection waits for the slot of the guest it displaced.
const EVICTION_WAIT: Duration = Duration::from_millis(500);

/// The limits of one listener's connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Most connections open at once.
    pub max: usize,
    /// A connection with no call in flight for this long is closed. None:
    /// never.
    pub max_idle: Option<Duration>,
    /// A connection that has started no call this long after it was
    /// accepted is closed.
    pub handshake: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: MAX_CONNECTIONS,
            max_idle: None,
            handshake: HANDSHAKE_TIMEOUT,
        }
    }
}

/// Calls in flight on one connection, since when it has had none (counted by
/// [`crate::observe::CallLayer`]), whether a call on it carried the cluster
/// token, and whether it was told to close.
#[derive(Debug)]
pub struct Activity {
    calls: AtomicUsize,
    idle_since: parking_lot::Mutex<Instant>,
    started: AtomicBool,
    trusted: AtomicBool,
    evicted: AtomicBool,
    /// The connection's reader, woken to close it when evicted.
    reader: AtomicWaker,
}

impl Activity {
    fn new() -> Self {
        Self {
            calls: 0.into(),
            idle_since: parking_lot::Mutex::new(Instant::now()),
            started: false.into(),
            trusted: false.into(),
            evicted: false.into(),
            reader: AtomicWaker::new(),
        }
    }

    /// A call started on the connection.
    pub fn begin(&self) {
        self.started.store(true, SeqCst);
        self.calls.fetch_add(1, SeqCst);
    }

    /// A call ended.
    pub fn end(&self) {
        let mut since = self.idle_since.lock();
        if self.calls.fetch_sub(1, SeqCst) == 1 {
            *since = Instant::now();
            // Shutting down, the connection closes once idle.
            self.reader.wake();
        }
    }

    /// A call on the connection passed the cluster token check: it keeps its
    /// slot when the listener is full.
    pub fn trust(&self) {
        self.trusted.store(true, SeqCst);
    }

    pub fn is_trusted(&self) -> bool {
        self.trusted.load(SeqCst)
    }

    /// Closes the connection (at its next read, which this wakes).
    fn evict(&self) {
        self.evicted.store(true, SeqCst);
        self.reader.wake();
    }

    /// How long the connection has had no call in flight (zero while one is).
    fn idle_for(&self) -> Duration {
        let since = self.idle_since.lock();
        if self.calls.load(SeqCst) > 0 {
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

/// An accepted connection holding one of its listener's slots, closed if it
/// starts no call within the handshake timeout, once it has had no call in
/// flight for `max_idle`, or when a new connection displaces it.
pub(crate) struct Slotted {
    tcp: TcpStream,
    _slot: OwnedSemaphorePermit,
    /// Until the first call starts: when the handshake time is up.
    handshake: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    activity: Arc<Activity>,
    /// The idle limit and the timer that wakes the reader to check it.
    idle: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    /// Resolves when the server shuts down (then None): the connection
    /// closes as soon as it has no call in flight, without waiting for the
    /// peer to acknowledge HTTP/2's graceful GOAWAY (a peer that never
    /// reads would hold the shutdown for ever).
    stopping: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

/// The guests of a listener (connections whose calls have not passed the
/// token check), oldest first.
#[derive(Default)]
struct Guests(VecDeque<Weak<Activity>>);

impl Guests {
    fn push(&mut self, a: &Arc<Activity>, max: usize) {
        if self.0.len() >= 2 * max.max(1) {
            self.0
                .retain(|g| g.upgrade().is_some_and(|a| !a.is_trusted()));
        }
        self.0.push_back(Arc::downgrade(a));
    }

    /// Closes the oldest open guest, if any; whether one was.
    fn evict_oldest(&mut self) -> bool {
        while let Some(g) = self.0.pop_front() {
            if let Some(a) = g.upgrade() {
                if !a.is_trusted() && !a.evicted.load(SeqCst) {
                    a.evict();
                    return true;
                }
            }
        }
        false
    }
}

/// Why a new connection was not accepted, and how many were not, for the
/// rate-limited log.
struct Refusals {
    logged: Option<Instant>,
    refused: u64,
    displaced: u64,
    failed: u64,
    backoff: Duration,
}

impl Refusals {
    fn quiet(&self) -> bool {
        self.logged.is_some_and(|t| t.elapsed() < REFUSAL_LOG_EVERY)
    }
}

/// The connections of `listener` within `limits` (see the module's doc):
/// one more than `limits.max` displaces the oldest guest, or is closed as
/// soon as it is accepted when every slot is held by a trusted connection;
/// a failed `accept` (e.g. out of file descriptors) is retried after a
/// growing pause instead of at once. Yields no errors, so the server never
/// stops on one.
pub(crate) fn limited_incoming(
    listener: TcpListener,
    limits: ConnectionLimits,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Result<Slotted, std::io::Error>> {
    let slots = Arc::new(Semaphore::new(limits.max.max(1)));
    let guests = Arc::new(parking_lot::Mutex::new(Guests::default()));
    let refusals = Refusals {
        logged: None,
        refused: 0,
        displaced: 0,
        failed: 0,
        backoff: Duration::ZERO,
    };
    futures::stream::unfold(
        (listener, slots, guests, refusals),
        move |(listener, slots, guests, mut log)| {
            let stopping = stopping.clone();
            async move {
                loop {
                    let (tcp, peer) = match listener.accept().await {
                        Ok(accepted) => {
                            log.backoff = Duration::ZERO;
                            accepted
                        }
                        Err(e) => {
                            log.failed += 1;
                            metrics::counter!("colonnade_shard_accept_errors_total").increment(1);
                            log.backoff = (log.backoff * 2)
                                .clamp(Duration::from_millis(10), ACCEPT_BACKOFF_MAX);
                            if !log.quiet() {
                                tracing::warn!(
                                    failed = log.failed,
                                    backoff_ms = log.backoff.as_millis() as u64,
                                    "accepting a connection failed: {e}; retrying (out of file \
                                 descriptors? raise `ulimit -n` or lower --max-connections)"
                                );
                                log.logged = Some(Instant::now());
                            }
                            tokio::time::sleep(log.backoff).await;
                            continue;
                        }
                    };
                    let slot = match Arc::clone(&slots).try_acquire_owned() {
                        Ok(slot) => Some(slot),
                        Err(_) => {
                            // Full: the oldest guest makes room.
                            let displaced = guests.lock().evict_oldest();
                            if displaced {
                                metrics::counter!("colonnade_shard_connections_displaced_total")
                                    .increment(1);
                                log.displaced += 1;
                                if !log.quiet() {
                                    tracing::warn!(
                                        %peer,
                                        displaced = log.displaced,
                                        "all {} connection slots are taken: closed the oldest \
                                         connection that has not carried the token to admit a \
                                         new one (--max-connections)",
                                        limits.max
                                    );
                                    log.logged = Some(Instant::now());
                                }
                                let wait = Arc::clone(&slots).acquire_owned();
                                tokio::time::timeout(EVICTION_WAIT, wait)
                                    .await
                                    .ok()
                                    .and_then(Result::ok)
                            } else {
                                None
                            }
                        }
                    };
                    let Some(slot) = slot else {
                        drop(tcp);
                        log.refused += 1;
                        metrics::counter!("colonnade_shard_connections_refused_total").increment(1);
                        if !log.quiet() {
                            tracing::warn!(
                                %peer,
                                refused = log.refused,
                                "refused a connection: {} connections that carried the token are \
                                 open (idle clients? each client process needs about one; \
                                 --max-connections)",
                                limits.max
                            );
                            log.logged = Some(Instant::now());
                        }
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    metrics::gauge!("colonnade_shard_connections").increment(1.0);
                    let activity = Arc::new(Activity::new());
                    guests.lock().push(&activity, limits.max);
                    let conn = Slotted {
                        tcp,
                        _slot: slot,
                        handshake: Some((
                            limits.handshake,
                            Box::pin(tokio::time::sleep(limits.handshake)),
                        )),
                        activity,
                        idle: limits
                            .max_idle
                            .map(|d| (d, Box::pin(tokio::time::sleep(d)))),
                        stopping: Some({
                            let mut stopping = stopping.clone();
                            Box::pin(async move {
                                let _ = stopping.wait_for(|s| *s).await;
                            })
                        }),
                    };
                    return Some((Ok(conn), (listener, slots, guests, log)));
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

fn closing(why: String) -> Poll<std::io::Result<()>> {
    Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))
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

    /// Why the connection must close now, if it must: displaced, no call
    /// started within the handshake time, or idle past its limit.
    fn must_close(&mut self, cx: &mut Context<'_>) -> Option<String> {
        self.activity.reader.register(cx.waker());
        if self.activity.evicted.load(SeqCst) {
            return Some("displaced by a new connection (all slots were taken)".into());
        }
        if self.activity.started.load(SeqCst) {
            self.handshake = None;
        } else if let Some((limit, timer)) = self.handshake.as_mut() {
            if timer.as_mut().poll(cx).is_ready() {
                let secs = limit.as_secs_f64();
                metrics::counter!("colonnade_shard_connections_handshake_closed_total")
                    .increment(1);
                tracing::debug!(
                    secs,
                    "closing a connection that started no call in {secs} s"
                );
                return Some(format!(
                    "no call started within {secs} s of connecting (--handshake-timeout-secs)"
                ));
            }
        }
        if let Some(stop) = self.stopping.as_mut() {
            if stop.as_mut().poll(cx).is_ready() {
                self.stopping = None;
            }
        }
        if self.stopping.is_none() && self.activity.calls.load(SeqCst) == 0 {
            return Some("the shard is shutting down".into());
        }
        if self.idle_expired(cx) {
            let secs = self.idle.as_ref().map_or(0, |(d, _)| d.as_secs());
            tracing::debug!(secs, "closing a connection without a call for {secs} s");
            metrics::counter!("colonnade_shard_connections_idle_closed_total").increment(1);
            return Some(format!("no call for {secs} s (--max-connection-idle-secs)"));
        }
        None
    }
}

impl AsyncRead for Slotted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(why) = self.must_close(cx) {
            return closing(why);
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
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
