//! The connections a shard accepts: at most [`MAX_CONNECTIONS`] at once
//! (one more is closed as it is accepted, and a failed `accept` is retried
//! after a pause), each closed if it sends nothing within the greeting
//! timeout or stays without a call in flight past the idle limit (the call
//! layer, `crate::observe::CallLayer`, keeps each connection's [`Activity`]).

use futures::Stream;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Most connections a shard keeps open at once: below the usual 1,024-file
/// soft limit, so that accepting never fails with "too many open files"
/// (after which a shard would spin on `accept`, refusing everyone silently).
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
pub(crate) struct Slotted {
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
pub(crate) fn limited_incoming(
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
