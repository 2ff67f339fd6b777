//! The shards of one model that hold whole vectors side by side, and the
//! step that uses it: one shard holding every column, or the in-process
//! shards of an embedded cluster, whose column slices share one allocation
//! per matrix (`crate::hogwild::Siblings`). Their summed dot products are final, so
//! [`WholeVectors::fused`] weighs them itself and steps a minibatch in one
//! visit per output row: bit for bit what `dotprod`, the client's weights
//! and `adjust` give on each shard.

use crate::hogwild::HogwildMatrix;
use crate::loops::{fused_loop, FusedSteps};
use crate::model::{work, Model, Scratch, StepScratch};
use crate::plan::Plan;
use colonnade_proto::ShardError;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Shards of one model, in shard order, whose column slices together are
/// whole vectors: one shard holding them all, or in-process shards whose
/// views share one allocation (`crate::hogwild::Siblings`), each starting where the one
/// before it ends. [`WholeVectors::fused`] steps a minibatch on them in one visit
/// per row.
pub struct WholeVectors {
    models: Vec<Arc<Model>>,
    /// Every column of the shared rows.
    u: HogwildMatrix,
    v: HogwildMatrix,
    /// Where each shard's columns end.
    ends: Vec<usize>,
}

impl WholeVectors {
    /// `models` joined, if they hold whole vectors side by side.
    pub fn of(models: &[Arc<Model>]) -> Option<Self> {
        let first = models.first()?;
        let dim = first.spec.model.dim as usize;
        let mut ends = Vec::with_capacity(models.len());
        let mut at = 0;
        for m in models {
            let side_by_side = m.fingerprint == first.fingerprint
                && m.u.same_rows(&first.u)
                && m.v.same_rows(&first.v)
                && m.u.col_offset() == at
                && m.v.col_offset() == at
                && m.spec.col_start as usize == at;
            if !side_by_side {
                return None;
            }
            at += m.u.cols();
            ends.push(at);
        }
        let (u, v) = (first.u.whole(), first.v.whole());
        (at == dim && u.cols() == dim && v.cols() == dim).then(|| Self {
            models: models.to_vec(),
            u,
            v,
            ends,
        })
    }

    /// The shards' [`Model::dotprod`], a client's weights (α ×
    /// `colonnade_common::sgns::scaled_weight` of the summed dot products) and
    /// their [`Model::adjust`] of the call `plan` in one visit per row;
    /// `dots` gets the summed dot products, in wire order. Bit for bit the
    /// calls on each shard with the client's weights in between
    /// (`client/tests/determinism.rs` compares it with shards over gRPC).
    pub fn fused(
        &self,
        plan: &Plan,
        s: &mut Scratch,
        dots: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        self.models[0].check_plan(plan)?;
        let cols = self.u.cols();
        dots.clear();
        dots.resize(plan.len(), 0.0);
        s.weights.resize(plan.len(), 0.0);
        let StepScratch {
            u_rows,
            u_delta,
            v_delta,
            weights,
        } = s.for_steps(plan.slots().len(), cols, cols);
        let mut written = 0;
        fused_loop(
            work(&self.u, &self.v, plan, u_rows, cols),
            FusedSteps {
                alphas: &plan.alphas,
                positives: plan.examples(),
                input_scale: &plan.input_scale,
                cap: plan.cap,
                dots,
                weights,
                u_delta,
                v_delta,
                ends: &self.ends,
                written: &mut written,
            },
        );
        for m in &self.models {
            m.stats.dotprod_calls.fetch_add(1, Relaxed);
            m.stats.adjust_calls.fetch_add(1, Relaxed);
            m.stats.pairs_adjusted.fetch_add(plan.pairs(), Relaxed);
        }
        // Every shard's state is marked alike: a row is shared by all of them.
        let mut noted = Ok(());
        for m in &self.models {
            let r = m.note_written(written);
            noted = noted.and(r);
        }
        noted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{minibatch, snapshot, spec, COUNTS};
    use crate::hogwild::Siblings;
    use colonnade_common::model::{Objective, ShardSpec};
    use colonnade_common::sgns::sigmoid;
    use std::ops::Range;

    /// Steps the same calls (two minibatches each) fused on `joined` and
    /// call by call on `split` (shard order, partial dot products summed as
    /// a client does, its half-float weights); both must stay equal bit for
    /// bit.
    fn fused_matches_split(joined: &WholeVectors, split: &[Model], (cbow, shared): Mode) {
        let (mut p, mut s, mut dots) = (Plan::default(), Scratch::default(), Vec::new());
        let (mut part, mut summed, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        let joined_state = || {
            joined
                .models
                .iter()
                .map(|m| snapshot(m))
                .collect::<Vec<_>>()
        };
        let split_state = || split.iter().map(snapshot).collect::<Vec<_>>();
        let before = split_state();
        assert_eq!(joined_state(), before, "the same initial state");
        // Several steps, so v is no longer zero and every weight matters.
        for seed in 0..6u64 {
            let mut a = minibatch(seed, &[0, 1, 5], &[2, 1, 3], &[1, 2, 3, 4, 0, 5]);
            let mut b = minibatch(seed + 100, &[2, 3], &[1, 2], &[1, 0, 4]);
            (a.alpha, b.alpha) = (0.5, 0.25);
            a.objective = Objective::from_cbow(cbow);
            b.objective = a.objective;
            (a.shared_negatives, b.shared_negatives) = (shared, shared);
            let call = [a, b];
            split[0].plan(&call, &mut p).expect("plan");
            joined.fused(&p, &mut s, &mut dots).expect("fused");
            // Several slices' partials arrive as half floats.
            let sent = |x: f32| {
                if split.len() > 1 {
                    colonnade_proto::partial_as_sent(x)
                } else {
                    x
                }
            };
            for (i, m) in split.iter().enumerate() {
                m.dotprod(&p, &mut s, &mut part).expect("dotprod");
                if i == 0 {
                    summed = part.iter().map(|&x| sent(x)).collect();
                } else {
                    summed
                        .iter_mut()
                        .zip(&part)
                        .for_each(|(a, &x)| *a += sent(x));
                }
            }
            assert_eq!(dots, summed, "step {seed}: dot products");
            // What a client computes: the half-float G/α (positives first in
            // wire order), then the shard's α of each dot product's minibatch.
            let scaled: Vec<f32> = summed
                .iter()
                .enumerate()
                .map(|(i, &f)| {
                    let g = if i < p.examples() {
                        1.0 - sigmoid(f)
                    } else {
                        -sigmoid(f)
                    };
                    colonnade_common::sgns::wire_scaled_weight(g)
                })
                .collect();
            p.weights(&scaled, &mut weights);
            for m in split {
                m.adjust(&mut p, &weights, false, &mut s).expect("adjust");
            }
            assert_eq!(joined_state(), split_state(), "step {seed}: model");
        }
        assert!(split_state() != before, "the steps changed the model");
    }

    /// (CBOW, shared negatives): the three ways a call trains.
    type Mode = (bool, bool);
    const MODES: [Mode; 3] = [(false, false), (true, false), (false, true)];

    /// Shards of `ranges` (specs from `spec_of`) twice: sharing rows as
    /// in-process siblings, and each with rows of its own.
    fn shared_and_own(
        ranges: &[Range<u32>],
        spec_of: impl Fn(&Range<u32>) -> ShardSpec,
    ) -> (Vec<Arc<Model>>, Vec<Model>) {
        let siblings = Siblings::default();
        let shared = ranges
            .iter()
            .map(|r| {
                let counts: Arc<[u64]> = COUNTS.into();
                Arc::new(Model::initial_in(spec_of(r), counts, 0, Some(&siblings)).expect("model"))
            })
            .collect();
        let own = ranges
            .iter()
            .map(|r| Model::new(spec_of(r), &COUNTS).expect("model"))
            .collect();
        (shared, own)
    }

    #[test]
    fn fused_step_is_dotprod_weights_adjust_bit_for_bit() {
        let dim = spec(0..8).model.dim;
        let whole = || Model::new(spec(0..dim), &COUNTS).expect("model");
        for mode in [MODES[0], MODES[2]] {
            let joined =
                WholeVectors::of(&[Arc::new(whole())]).expect("one shard holds whole vectors");
            fused_matches_split(&joined, &[whole()], mode);
        }
        // A column slice's dot products are partial: it cannot weigh them.
        let slice = Arc::new(Model::new(spec(0..dim / 2), &COUNTS).expect("model"));
        assert!(WholeVectors::of(&[slice]).is_none());
    }

    /// Rows of whole cache lines (32 columns, and two 16-column siblings):
    /// on a CPU with AVX-512F the fused loop's dot products take 512-bit
    /// loads there, the split loops' 256-bit ones, bit for bit the same.
    #[test]
    fn fused_step_on_rows_of_whole_lines_is_the_split_step_bit_for_bit() {
        let wide = |r: Range<u32>| {
            let mut s = spec(r);
            s.model.dim = 32;
            s
        };
        let whole = || Model::new(wide(0..32), &COUNTS).expect("model");
        let joined = WholeVectors::of(&[Arc::new(whole())]).expect("one shard holds whole vectors");
        assert!(joined.models[0].v.lines_aligned(), "rows of whole lines");
        fused_matches_split(&joined, &[whole()], MODES[0]);
        let siblings = Siblings::default();
        let shared: Vec<Arc<Model>> = [0..16u32, 16..32]
            .into_iter()
            .map(|r| {
                let counts: Arc<[u64]> = COUNTS.into();
                Arc::new(Model::initial_in(wide(r), counts, 0, Some(&siblings)).expect("model"))
            })
            .collect();
        let own: Vec<Model> = [0..16u32, 16..32]
            .into_iter()
            .map(|r| Model::new(wide(r), &COUNTS).expect("model"))
            .collect();
        fused_matches_split(
            &WholeVectors::of(&shared).expect("side by side"),
            &own,
            MODES[2],
        );
    }

    /// Widths the split loops pad to different strides (100 columns: 112,
    /// read at run time; 25, 35 and 40: 32 and 48, fixed-size): the fused
    /// loop's masked dot products and unpadded rows give bit for bit what
    /// the split loops give on padded ones.
    #[test]
    fn fused_step_on_padded_widths_is_the_split_step_bit_for_bit() {
        let wide = |r: Range<u32>| {
            let mut s = spec(r);
            s.model.dim = 100;
            s
        };
        let whole = || Model::new(wide(0..100), &COUNTS).expect("model");
        for mode in [MODES[0], MODES[2]] {
            let joined =
                WholeVectors::of(&[Arc::new(whole())]).expect("one shard holds whole vectors");
            fused_matches_split(&joined, &[whole()], mode);
        }
        let ranges = [0..25u32, 25..60, 60..100];
        for (cbow, shared) in MODES {
            let spec_of = |r: &Range<u32>| {
                let mut s = wide(r.clone());
                s.model.objective = Objective::from_cbow(cbow);
                s
            };
            let (siblings, own) = shared_and_own(&ranges, spec_of);
            fused_matches_split(
                &WholeVectors::of(&siblings).expect("side by side"),
                &own,
                (cbow, shared),
            );
        }
    }

    /// In-process shards sharing rows step a minibatch fused, bit for bit
    /// what shards of their own give call by call (skip-gram, CBOW and
    /// shared negatives).
    #[test]
    fn sibling_slices_step_fused_as_separate_shards_would() {
        let ranges = [0..3u32, 3..5, 5..8];
        for (cbow, shared_negatives) in MODES {
            let with_cbow = |r: &Range<u32>| {
                let mut s = spec(r.clone());
                s.model.objective = Objective::from_cbow(cbow);
                s
            };
            let (shared, own) = shared_and_own(&ranges, with_cbow);
            assert!(shared[1].u.same_rows(&shared[0].u), "the shards share rows");
            let joined = WholeVectors::of(&shared).expect("side by side");
            fused_matches_split(&joined, &own, (cbow, shared_negatives));
            // Out of order, or with a shard of its own, they are not joined.
            assert!(WholeVectors::of(&[Arc::clone(&shared[1]), Arc::clone(&shared[0])]).is_none());
            let alone = Arc::new(Model::new(with_cbow(&ranges[2]), &COUNTS).expect("model"));
            assert!(
                WholeVectors::of(&[Arc::clone(&shared[0]), Arc::clone(&shared[1]), alone])
                    .is_none()
            );
        }
    }

    #[test]
    fn a_column_is_never_given_to_two_sibling_views() {
        let siblings = Siblings::default();
        let counts: Arc<[u64]> = COUNTS.into();
        let make = |r: Range<u32>| {
            Model::initial_in(spec(r), Arc::clone(&counts), 0, Some(&siblings)).expect("model")
        };
        let (a, b) = (make(0..4), make(4..8));
        assert!(a.u.same_rows(&b.u) && a.v.same_rows(&b.v));
        // The same columns again (a shard that dropped the model and makes
        // it anew): its own rows, the others' cells untouched.
        let before = (snapshot(&a), snapshot(&b));
        let again = make(2..6);
        assert!(!again.u.same_rows(&a.u));
        assert_eq!((snapshot(&a), snapshot(&b)), before);
        // Once every view is gone, the rows go, and a new model starts afresh.
        drop((a, b, again));
        let c = make(0..4);
        assert_eq!(
            snapshot(&c),
            snapshot(&Model::new(spec(0..4), &COUNTS).expect("model"))
        );
        assert_eq!(c.u.memory_bytes(), COUNTS.len() * (4 * 4 + 4));
        assert_eq!(make(4..8).u.memory_bytes(), COUNTS.len() * 4 * 4);
    }
}
