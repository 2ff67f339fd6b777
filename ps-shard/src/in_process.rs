//! The shards of a model held in this process, reached without a wire
//! (`colonnade train --embedded-shards`): one [`ModelShards`] handle per
//! training pipeline calls every shard's [`Model`] on the pipeline's own
//! thread. Nothing is encoded, and the targets are drawn once per minibatch
//! for all shards (every shard of a model draws the same ones from the
//! minibatch seed); the handle keeps them from `dotprod` for its `adjust`.
//! When the shards hold whole vectors side by side (one shard, the
//! default, or the shards of an embedded cluster, whose slices of each row
//! share one allocation: [`crate::hogwild::Siblings`]), the handle sums and
//! weighs the dot products itself and steps each minibatch in one visit per
//! row ([`ModelShards::fused_step`], [`WholeVectors`]), the same model bit for bit
//! as calling each shard.

use crate::model::{Model, Scratch};
use crate::plan::Targets;
use crate::registry::ShardCore;
use crate::whole::WholeVectors;
use colonnade_proto::{CallError, Minibatch, ModelShards, ShardError};
use std::sync::Arc;

/// One pipeline's handle on the in-process shards of a model, in shard order.
pub struct InProcessShards {
    models: Arc<[Arc<Model>]>,
    /// The models as whole vectors, when they hold whole vectors side by side.
    whole: Option<Arc<WholeVectors>>,
    /// Per minibatch of the last `dotprod`: its targets, for its `adjust`.
    targets: Vec<Targets>,
    /// The targets of the minibatch a fused step is on.
    fused_targets: Targets,
    scratch: Scratch,
    part: Vec<f32>,
    /// One minibatch's weights α × scaled.
    weights: Vec<f32>,
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
            whole: WholeVectors::of(&models).map(Arc::new),
            models: models.into(),
            targets: Vec::new(),
            fused_targets: Targets::default(),
            scratch: Scratch::default(),
            part: Vec::new(),
            weights: Vec::new(),
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
            whole: self.whole.clone(),
            targets: Vec::new(),
            fused_targets: Targets::default(),
            scratch: Scratch::default(),
            part: Vec::new(),
            weights: Vec::new(),
        }
    }

    fn negative(&self) -> usize {
        self.models[0].spec.model.negative as usize
    }

    async fn dotprod(&mut self, mbs: &[Minibatch], dots: &mut Vec<f32>) -> Result<(), CallError> {
        self.targets.resize_with(mbs.len(), Targets::default);
        dots.clear();
        for (mb, targets) in mbs.iter().zip(&mut self.targets) {
            self.models[0]
                .draw_targets(mb, targets)
                .map_err(|e| CallError::from_shard(&name(0), 0, self.models.len(), "dotprod", e))?;
            let start = dots.len();
            for (i, m) in self.models.iter().enumerate() {
                m.dotprod(mb, targets, &mut self.scratch, &mut self.part)
                    .map_err(|e| {
                        CallError::from_shard(&name(i), i, self.models.len(), "dotprod", e)
                    })?;
                if i == 0 {
                    dots.extend_from_slice(&self.part);
                } else {
                    for (acc, x) in dots[start..].iter_mut().zip(&self.part) {
                        *acc += x;
                    }
                }
            }
        }
        Ok(())
    }

    async fn adjust(&mut self, mbs: &[Minibatch], scaled: &[f32]) -> Result<(), CallError> {
        let planned: usize = self.targets.iter().map(Targets::len).sum();
        if mbs.len() != self.targets.len() || scaled.len() != planned {
            let e = ShardError::InvalidArgument(format!(
                "adjust of {} minibatches with {} weights follows a dotprod of {} minibatches \
                 with {planned} dot products",
                mbs.len(),
                scaled.len(),
                self.targets.len()
            ));
            return Err(self.failed(0, "adjust", e));
        }
        let mut offset = 0;
        for (mb, targets) in mbs.iter().zip(&self.targets) {
            let n = targets.len();
            let part = &scaled[offset..offset + n];
            offset += n;
            self.weights.clear();
            self.weights.extend(part.iter().map(|&g| mb.alpha * g));
            for (i, m) in self.models.iter().enumerate() {
                m.adjust(mb, targets, &self.weights, &mut self.scratch)
                    .map_err(|e| {
                        CallError::from_shard(&name(i), i, self.models.len(), "adjust", e)
                    })?;
            }
        }
        Ok(())
    }

    /// The shards hold whole vectors side by side ([`WholeVectors`]): each
    /// minibatch in one visit per row. Else (shards with rows of their
    /// own): false.
    async fn fused_step(
        &mut self,
        mbs: &[Minibatch],
        dots: &mut Vec<f32>,
    ) -> Result<bool, CallError> {
        let Some(whole) = &self.whole else {
            return Ok(false);
        };
        // A later `adjust` must not take these targets for a `dotprod`'s.
        self.targets.clear();
        let mut targets = std::mem::take(&mut self.fused_targets);
        dots.clear();
        let model = &self.models[0];
        for mb in mbs {
            model
                .draw_targets(mb, &mut targets)
                .and_then(|()| whole.fused(mb, &targets, &mut self.scratch, &mut self.part))
                .map_err(|e| CallError::from_shard(&name(0), 0, self.models.len(), "train", e))?;
            dots.extend_from_slice(&self.part);
        }
        self.fused_targets = targets;
        Ok(true)
    }

    fn wire_bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}
