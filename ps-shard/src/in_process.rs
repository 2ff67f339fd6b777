//! The shards of a model held in this process, reached without a wire
//! (`colonnade train --embedded-shards`): one [`ModelShards`] handle per
//! training pipeline calls every shard's [`Model`] on the pipeline's own
//! thread. Nothing is encoded, and a call is planned once for all shards
//! (every shard of a model draws the same plan from the minibatch seeds);
//! the handle keeps it from `dotprod` for its `adjust`.
//! When the shards hold whole vectors side by side (one shard, the
//! default, or the shards of an embedded cluster, whose slices of each row
//! share one allocation: [`crate::hogwild::Siblings`]), the handle sums and
//! weighs the dot products itself and steps each minibatch in one visit per
//! row ([`ModelShards::fused_step`], [`WholeVectors`]), the same model bit for bit
//! as calling each shard.

use crate::model::{Model, Scratch};
use crate::plan::Plan;
use crate::registry::ShardCore;
use crate::whole::WholeVectors;
use colonnade_proto::{partial_as_sent, CallError, Minibatch, ModelShards, ShardError};
use std::sync::Arc;

/// One pipeline's handle on the in-process shards of a model, in shard order.
pub struct InProcessShards {
    models: Arc<[Arc<Model>]>,
    /// The models as whole vectors, when they hold whole vectors side by side.
    whole: Option<Arc<WholeVectors>>,
    /// The plan of the last call (its `dotprod`'s, for its `adjust`), and
    /// whether a `dotprod` made it.
    plan: Plan,
    planned: bool,
    scratch: Scratch,
    part: Vec<f32>,
    /// The call's weights α × scaled.
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
            plan: Plan::default(),
            planned: false,
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
            plan: Plan::default(),
            planned: false,
            scratch: Scratch::default(),
            part: Vec::new(),
            weights: Vec::new(),
        }
    }

    fn negative(&self) -> usize {
        self.models[0].spec.model.negative as usize
    }

    async fn dotprod(&mut self, mbs: &[Minibatch], dots: &mut Vec<f32>) -> Result<(), CallError> {
        self.planned = false;
        self.models[0]
            .plan(mbs, &mut self.plan)
            .map_err(|e| self.failed(0, "dotprod", e))?;
        // Column slices' partial dot products as they would cross the wire
        // (half floats), so that the model is the one shards over gRPC train.
        let sliced = self.models.len() > 1;
        for (i, m) in self.models.iter().enumerate() {
            let out = if i == 0 { &mut *dots } else { &mut self.part };
            m.dotprod(&self.plan, &mut self.scratch, out)
                .map_err(|e| CallError::from_shard(&name(i), i, self.models.len(), "dotprod", e))?;
            if i == 0 && sliced {
                dots.iter_mut().for_each(|x| *x = partial_as_sent(*x));
            } else if i > 0 {
                for (acc, &x) in dots.iter_mut().zip(&self.part) {
                    *acc += partial_as_sent(x);
                }
            }
        }
        self.planned = true;
        Ok(())
    }

    async fn adjust(&mut self, mbs: &[Minibatch], scaled: &[f32]) -> Result<(), CallError> {
        if !self.planned || !self.models[0].plan_fits(mbs, &self.plan) {
            let e = ShardError::InvalidArgument(format!(
                "an adjust of {} minibatches follows no dotprod of the same call",
                mbs.len()
            ));
            return Err(self.failed(0, "adjust", e));
        }
        self.plan.weights(scaled, &mut self.weights);
        for (i, m) in self.models.iter().enumerate() {
            m.adjust(&mut self.plan, &self.weights, false, &mut self.scratch)
                .map_err(|e| CallError::from_shard(&name(i), i, self.models.len(), "adjust", e))?;
        }
        self.planned = false;
        Ok(())
    }

    /// The shards hold whole vectors side by side ([`WholeVectors`]): the
    /// call in one visit per row. Else (shards with rows of their own):
    /// false.
    async fn fused_step(
        &mut self,
        mbs: &[Minibatch],
        dots: &mut Vec<f32>,
    ) -> Result<bool, CallError> {
        let Some(whole) = &self.whole else {
            return Ok(false);
        };
        // A later `adjust` must not take this plan for a `dotprod`'s.
        self.planned = false;
        self.models[0]
            .plan(mbs, &mut self.plan)
            .and_then(|()| whole.fused(&self.plan, &mut self.scratch, dots))
            .map_err(|e| CallError::from_shard(&name(0), 0, self.models.len(), "train", e))?;
        Ok(true)
    }

    fn wire_bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}
