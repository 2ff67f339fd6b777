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

/// Serves `core` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    core: Arc<ShardCore>,
    threads: usize,
    tokens: Tokens,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    if core.is_loading() {
        // NOT_SERVING until the data dir is loaded.
        reporter
            .set_not_serving::<ShardServer<ShardService>>()
            .await;
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            while core.is_loading() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            reporter.set_serving::<ShardServer<ShardService>>().await;
        });
    } else {
        reporter.set_serving::<ShardServer<ShardService>>().await;
    }
    let interceptor = tokens.clone().interceptor();
    let shard = ShardServer::new(ShardService::new(core, threads).with_tokens(tokens))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Every Shard call needs the cluster token; health probes need none.
    let shard = tonic::service::interceptor::InterceptedService::new(shard, interceptor);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(colonnade_proto::HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(colonnade_proto::HTTP2_CONNECTION_WINDOW)
        .add_service(health)
        .add_service(shard)
        .serve_with_incoming_shutdown(limited_incoming(listener, MAX_CONNECTIONS), shutdown)
        .await
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

/// An accepted connection holding one of the shard's connection slots,
/// closed if it sends nothing within [`GREETING_TIMEOUT`].
struct Slotted {
    tcp: TcpStream,
    _slot: OwnedSemaphorePermit,
    greeting: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The connections of `listener`, at most `max` open at once: one more is
/// closed as soon as it is accepted, and a failed `accept` (e.g. out of file
/// descriptors) is retried after a pause instead of at once; both are logged,
/// at most every [`REFUSAL_LOG_EVERY`]. Yields no errors, so the server
/// never stops on one.
fn limited_incoming(
    listener: TcpListener,
    max: usize,
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
                            let conn = Slotted {
                                tcp,
                                _slot: slot,
                                greeting: Some(Box::pin(tokio::time::sleep(GREETING_TIMEOUT))),
                            };
                            return Some((Ok(conn), (listener, slots, logged, refused)));
                        }
                        Err(_) => {
                            drop(tcp);
                            refused += 1;
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

impl Connected for Slotted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Slotted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
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
        let task = tokio::spawn(serve(
            listener,
            Arc::clone(&core),
            threads,
            Tokens::default(),
            async {
                let _ = rx.await;
            },
        ));
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
