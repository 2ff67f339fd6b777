//! Serving a [`ShardCore`] over gRPC with grpc.health.v1 beside it.

use crate::registry::ShardCore;
use crate::service::ShardService;
use colonnade_proto::v1::shard_server::ShardServer;
use colonnade_proto::MAX_MESSAGE_BYTES;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

/// Serves `core` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    core: Arc<ShardCore>,
    threads: usize,
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
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            reporter.set_serving::<ShardServer<ShardService>>().await;
        });
    } else {
        reporter.set_serving::<ShardServer<ShardService>>().await;
    }
    let shard = ShardServer::new(ShardService::new(core, threads))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(colonnade_proto::HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(colonnade_proto::HTTP2_CONNECTION_WINDOW)
        .add_service(health)
        .add_service(shard)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
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
        let task = tokio::spawn(serve(listener, Arc::clone(&core), threads, async {
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
