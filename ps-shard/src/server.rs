//! Serving a [`ShardCore`] over gRPC with grpc.health.v1 beside it, behind
//! the connection limits of [`crate::connections`] and the admission of
//! [`crate::edge`].

use crate::connections::{limited_incoming, ConnectionLimits, MAX_HEALTH_CONNECTIONS};
use crate::edge::{EdgeLayer, EdgeLimits};
use crate::registry::ShardCore;
use crate::service::ShardService;
use colonnade_proto::v1::shard_server::ShardServer;
use colonnade_proto::MAX_MESSAGE_BYTES;
use colonnade_setup::channel::{HTTP2_CONNECTION_WINDOW, HTTP2_MAX_FRAME, HTTP2_STREAM_WINDOW};
use colonnade_setup::Tokens;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long calls in flight may take to finish once shutdown begins; then
/// their connections are closed. (Streams, `Watch` and `PullRows`, end at
/// once.)
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

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
    /// whether the shard serves, nothing else. It keeps at most
    /// [`MAX_HEALTH_CONNECTIONS`] connections.
    pub health: Option<TcpListener>,
    /// The limits of the shard port's connections (`max_idle`: gRPC's
    /// MAX_CONNECTION_IDLE, so that idle clients do not hold the slots).
    pub connections: ConnectionLimits,
    /// Admission before decoding: bytes of requests in flight, request
    /// stalls.
    pub edge: EdgeLimits,
    /// How long a probe of the compute threads may wait before health says
    /// NOT_SERVING (default [`PROBE_STALL`]).
    pub probe_stall: Option<Duration>,
}

/// Serves `core` on `listener` until `shutdown` resolves: the Shard service
/// behind the bearer-token check, grpc.health.v1 beside it, every call
/// counted and timed (`colonnade_shard_calls_total`,
/// `colonnade_shard_call_seconds`). Health says NOT_SERVING while the data
/// dir loads, while the shard's compute threads do not answer
/// ([`watch_compute`]) and once shutdown begins; then open streams end,
/// and calls in flight have [`SHUTDOWN_GRACE`] to finish.
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
        connections,
        edge,
        probe_stall,
    } = options;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_not_serving::<ShardServer<ShardService>>()
        .await;
    let interceptor = trusting(tokens.clone().interceptor());
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let edge = EdgeLayer::new(edge, stopping.clone(), tokens.clone());
    let service = ShardService::new(Arc::clone(&core), threads).with_tokens(tokens);
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
        let limits = ConnectionLimits {
            max: MAX_HEALTH_CONNECTIONS.min(connections.max),
            ..connections
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .layer(crate::observe::CallLayer)
                .layer(edge.sibling())
                .add_service(health.clone())
                .serve_with_incoming_shutdown(
                    limited_incoming(l, limits, stopping.clone()),
                    async move {
                        let _ = stopping.wait_for(|s| *s).await;
                    },
                ),
        )
    });
    let served = builder
        .tcp_nodelay(true)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
        .max_frame_size(HTTP2_MAX_FRAME)
        .layer(crate::observe::CallLayer)
        .layer(edge)
        .add_service(health)
        .add_service(shard)
        .serve_with_incoming_shutdown(
            limited_incoming(listener, connections, stopping.clone()),
            shutdown,
        );
    let mut stopped = stopping.clone();
    let served = tokio::select! {
        served = served => served,
        () = async move {
            let _ = stopped.wait_for(|s| *s).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!(
                grace_secs = SHUTDOWN_GRACE.as_secs(),
                "calls still in flight {} s after shutdown began: closing their connections",
                SHUTDOWN_GRACE.as_secs()
            );
            Ok(())
        }
    };
    watchdog.abort();
    if let Some(h) = health_server {
        h.abort();
    }
    served
}

/// The cluster-token check `check`, marking the connection of each call
/// that passes it as trusted: it keeps its slot when the port is full
/// ([`crate::connections`]).
fn trusting(
    mut check: impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>
        + Clone
        + Send
        + Sync
        + 'static,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>
       + Clone
       + Send
       + Sync
       + 'static {
    move |request| {
        let request = check(request)?;
        let ext = request.extensions();
        let info = ext.get::<crate::connections::SlotInfo>().or_else(|| {
            ext.get::<tonic::transport::server::TlsConnectInfo<crate::connections::SlotInfo>>()
                .map(tonic::transport::server::TlsConnectInfo::get_ref)
        });
        if let Some(info) = info {
            info.activity.trust();
        }
        Ok(request)
    }
}

/// How often [`watch_compute`] sends a probe through the compute threads.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// How long a probe may wait for a compute thread before health says
/// NOT_SERVING, by default.
pub const PROBE_STALL: Duration = Duration::from_secs(10);

/// Keeps the Shard service's health true: NOT_SERVING while the data dir
/// loads, and whenever a probe (an empty job through the same permits as
/// every training call) waits longer than
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
                        stall_secs = colonnade_setup::log::seconds(stall),
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
