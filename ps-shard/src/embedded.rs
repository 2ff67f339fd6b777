//! Shards started inside a client process (`colonnade train
//! --embedded-shards N`): each serves gRPC on loopback (export and `colonnade
//! health` reach it there), while training reaches their models in process
//! ([`crate::InProcessShards`] over [`EmbeddedCluster::cores`]). The shards
//! keep each model's column slices side by side in one allocation
//! ([`Siblings`]), so that training visits each row once, not once per shard.

use crate::hogwild::Siblings;
use crate::registry::ShardCore;
use crate::server::SpawnedShard;
use std::sync::Arc;

/// Shards started inside this process, on loopback.
pub struct EmbeddedCluster {
    shards: Vec<SpawnedShard>,
}

impl EmbeddedCluster {
    /// Starts `count` shards sharing `threads` cores: each gets
    /// ⌈threads / count⌉ compute threads, so the shards together do not
    /// oversubscribe the machine the client also runs on.
    pub async fn start(count: usize, threads: usize) -> std::io::Result<Self> {
        let per_shard = threads.div_ceil(count.max(1)).max(1);
        let siblings = Arc::new(Siblings::default());
        let mut shards = Vec::with_capacity(count);
        for _ in 0..count {
            let core = ShardCore::new(None).with_siblings(Arc::clone(&siblings));
            let shard =
                SpawnedShard::serve_core(([127, 0, 0, 1], 0).into(), per_shard, Arc::new(core))
                    .await?;
            shards.push(shard);
        }
        Ok(Self { shards })
    }

    /// The shards' loopback endpoints, in shard order.
    pub fn endpoints(&self) -> Vec<String> {
        self.shards.iter().map(SpawnedShard::endpoint).collect()
    }

    /// The shards' cores, in shard order (for [`crate::InProcessShards`]).
    pub fn cores(&self) -> Vec<Arc<ShardCore>> {
        self.shards.iter().map(|s| Arc::clone(&s.core)).collect()
    }

    /// Stops every shard's server.
    pub async fn stop(self) {
        for s in self.shards {
            s.stop().await;
        }
    }
}
