//! The shards of a model held in this process, reached without a wire
//! (`colonnade train --embedded-shards`): one [`ModelShards`] handle per
//! training pipeline calls every shard's [`Model`] on the pipeline's own
//! thread. Nothing is encoded, and the targets are drawn once per minibatch
//! for all shards (every shard of a model draws the same ones from the
//! minibatch seed); the handle keeps them from `dotprod` for its `adjust`.

use crate::model::{Model, Scratch};
use crate::plan::Targets;
use crate::registry::ShardCore;
use colonnade_proto::{CallError, Minibatch, ModelShards, ShardError};
use std::sync::Arc;

/// One pipeline's handle on the in-process shards of a model, in shard order.
pub struct InProcessShards {
    models: Arc<[Arc<Model>]>,
    targets: Targets,
    scratch: Scratch,
    part: Vec<f32>,
}

impl InProcessShards {
    /// The model `fingerprint` on each of `cores` (shard i is `cores[i]`).
    /// Fails, naming the shard, when one does not hold it.
    pub fn new(cores: &[Arc<ShardCore>], fingerprint: u64) -> Result<Self, CallError> {
        if cores.is_empty() {
            return Err(CallError::from_shard(
                "embedded shards",
                0,
                0,
                "train",
                ShardError::FailedPrecondition("no shards to train with".into()),
            ));
        }
        let models = cores
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.model(fingerprint)
                    .map_err(|e| CallError::from_shard(&name(i), i, cores.len(), "train", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            models: models.into(),
            targets: Targets::default(),
            scratch: Scratch::default(),
            part: Vec::new(),
        })
    }

    fn failed(&self, i: usize, call: &'static str, e: ShardError) -> CallError {
        CallError::from_shard(&name(i), i, self.models.len(), call, e)
    }
}

fn name(i: usize) -> String {
    format!("embedded-{i}")
}

impl ModelShards for InProcessShards {
    const BLOCKING: bool = true;

    fn pipeline(&self) -> Self {
        Self {
            models: Arc::clone(&self.models),
            targets: Targets::default(),
            scratch: Scratch::default(),
            part: Vec::new(),
        }
    }

    fn negative(&self) -> usize {
        self.models[0].spec.model.negative as usize
    }

    async fn dotprod(&mut self, mb: &Minibatch, dots: &mut Vec<f32>) -> Result<(), CallError> {
        self.models[0]
            .draw_targets(mb, &mut self.targets)
            .map_err(|e| self.failed(0, "dotprod", e))?;
        for (i, m) in self.models.iter().enumerate() {
            let out = if i == 0 { &mut *dots } else { &mut self.part };
            m.dotprod(mb, &self.targets, &mut self.scratch, out)
                .map_err(|e| CallError::from_shard(&name(i), i, self.models.len(), "dotprod", e))?;
            if i > 0 {
                for (acc, x) in dots.iter_mut().zip(&self.part) {
                    *acc += x;
                }
            }
        }
        Ok(())
    }

    async fn adjust(&mut self, mb: &Minibatch, weights: &[f32]) -> Result<(), CallError> {
        for (i, m) in self.models.iter().enumerate() {
            m.adjust(mb, &self.targets, weights, &mut self.scratch)
                .map_err(|e| CallError::from_shard(&name(i), i, self.models.len(), "adjust", e))?;
        }
        Ok(())
    }

    fn wire_bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}
