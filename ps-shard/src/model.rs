//! One model's column slice on a shard: its two matrices, its negative
//! sampler, and the three operations on them: `dotprod`, `adjust` (paper
//! Fig. 5 and 6, over a minibatch and its drawn [`Targets`]) and `read_rows`
//! for export. Every minibatch is validated completely before any state is
//! touched, so a rejected request leaves the model unchanged.

use crate::hogwild::{HogwildMatrix, Siblings};
use crate::loops::{adjust_loop, dotprod_loop, Contexts, Steps, Work};
use crate::plan::Targets;
use colonnade_common::init::init_input_row;
use colonnade_common::model::{Matrix, ShardSpec};
use colonnade_common::sampler::AliasSampler;
use colonnade_proto::domain::invalid_argument as invalid;
use colonnade_proto::{validate_spec, Minibatch, ShardError};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

#[derive(Default)]
pub struct ModelStats {
    pub dotprod_calls: AtomicU64,
    pub adjust_calls: AtomicU64,
    pub pairs_adjusted: AtomicU64,
}

/// One model's column slice.
pub struct Model {
    pub spec: ShardSpec,
    pub fingerprint: u64,
    pub(crate) u: HogwildMatrix,
    pub(crate) v: HogwildMatrix,
    sampler: AliasSampler,
    /// The word counts the sampler was built from (kept to rebuild the
    /// initial state, and to write them next to checkpoints).
    pub counts: Arc<[u64]>,
    /// Which state this is: 0 as created, else the id a restore gave it
    /// (relabelled in place when a restore finds it already at the version).
    lineage: AtomicU64,
    /// The checkpoint version this state started from (0: the initial state).
    pub base_version: u64,
    pub stats: ModelStats,
}

/// Reusable per-thread buffers, so steady-state requests allocate nothing
/// (paper 6.1.3).
#[derive(Default)]
pub struct Scratch {
    /// Per input position: its u row as the call found it.
    u_rows: LineBuf,
    /// Per input position: its accumulated Δu.
    u_delta: LineBuf,
    /// One output row's accumulated Δv.
    v_delta: LineBuf,
    /// A fused step's weights, per dot product.
    pub(crate) weights: Vec<f32>,
}

/// The scratch slices of one call that steps rows: per input position its
/// u row (to be read) and its Δu (zeroed), one output row's Δv, and a
/// fused step's weights.
pub(crate) struct StepScratch<'a> {
    pub u_rows: &'a mut [f32],
    pub u_delta: &'a mut [f32],
    pub v_delta: &'a mut [f32],
    pub weights: &'a mut [f32],
}

impl Scratch {
    /// The buffers of a call that steps rows of `cols` columns for `inputs`
    /// input positions (a fused call sizes `weights` first).
    pub(crate) fn for_steps(&mut self, inputs: usize, cols: usize) -> StepScratch<'_> {
        StepScratch {
            u_rows: self.u_rows.lend(inputs * cols, false),
            u_delta: self.u_delta.lend(inputs * cols, true),
            v_delta: self.v_delta.lend(cols, false),
            weights: &mut self.weights,
        }
    }
}

/// A reusable f32 buffer lent as a slice that starts on a 64-byte boundary:
/// scratch rows of a multiple of 16 columns then fill whole cache lines, as
/// the matrices' rows do ([`crate::hogwild::RowLayout`]), and no 32-byte
/// load from them straddles two lines. Its values are not kept from one
/// loan to the next.
#[derive(Default)]
struct LineBuf(Vec<f32>);

impl LineBuf {
    /// Floats before the first 64-byte boundary, at most.
    const SLACK: usize = 64 / 4 - 1;

    /// `len` floats from a 64-byte boundary: zeros when `zero`, else
    /// whatever they held.
    fn lend(&mut self, len: usize, zero: bool) -> &mut [f32] {
        let need = len + Self::SLACK;
        if self.0.len() < need {
            self.0.resize(need, 0.0);
        }
        // Floats are 4-byte aligned, so this is a whole number of floats.
        let skip = (self.0.as_ptr() as usize).wrapping_neg() % 64 / 4;
        let s = &mut self.0[skip..skip + len];
        if zero {
            s.fill(0.0);
        }
        s
    }
}

impl Model {
    /// The initial state of a model: u from the init seed, v zero; lineage 0.
    pub fn new(spec: ShardSpec, counts: &[u64]) -> Result<Self, ShardError> {
        Self::initial(spec, counts.into(), 0)
    }

    /// The initial state (version 0) under `lineage`.
    pub fn initial(spec: ShardSpec, counts: Arc<[u64]>, lineage: u64) -> Result<Self, ShardError> {
        Self::initial_in(spec, counts, lineage, None)
    }

    /// [`Model::initial`], its matrices views of rows shared with the other
    /// in-process shards of the model when `siblings` is given (and their
    /// columns are free there; else its own).
    pub fn initial_in(
        spec: ShardSpec,
        counts: Arc<[u64]>,
        lineage: u64,
        siblings: Option<&Siblings>,
    ) -> Result<Self, ShardError> {
        validate_spec(&spec)?;
        if counts.len() as u64 != spec.model.vocab_size {
            return Err(invalid(format!(
                "field `counts`: {} counts for vocab_size {}",
                counts.len(),
                spec.model.vocab_size
            )));
        }
        let sampler = AliasSampler::new(&counts, f64::from(spec.model.sampling_power))
            .map_err(|e| invalid(format!("field `counts`: {e}")))?;
        // The sampler's work arrays are freed: out of the RSS before the
        // matrices come in.
        crate::hogwild::release_freed_heap();
        let rows = counts.len();
        let cols = spec.cols();
        let (seed, dim, col_start) = (spec.model.init_seed, spec.model.dim, spec.col_start);
        let no_memory = |e: std::io::Error| {
            ShardError::ResourceExhausted(format!(
                "cannot map {} bytes for {rows} words × {cols} columns: {e}",
                (rows as u64).saturating_mul(cols as u64 * 4)
            ))
        };
        let fingerprint = spec.model.fingerprint();
        let shared = match siblings {
            Some(s) => s
                .matrices(
                    fingerprint,
                    rows,
                    dim as usize,
                    spec.col_start as usize..spec.col_end as usize,
                )
                .map_err(no_memory)?,
            None => None,
        };
        let (u, v) = match shared {
            Some(pair) => pair,
            None => (
                HogwildMatrix::zeroed(rows, cols).map_err(no_memory)?,
                HogwildMatrix::zeroed(rows, cols).map_err(no_memory)?,
            ),
        };
        // v stays zero, as its fresh columns are.
        u.fill_rows(|r, row| init_input_row(seed, dim, r as u64, col_start, row));
        Ok(Self {
            fingerprint,
            spec,
            u,
            v,
            sampler,
            counts,
            lineage: AtomicU64::new(lineage),
            base_version: 0,
            stats: ModelStats::default(),
        })
    }

    /// This state under another lineage, as checkpoint `base_version`: the
    /// caller fills its rows with [`Model::write_rows`] before anyone sees it.
    pub fn with_base(mut self, base_version: u64) -> Self {
        self.base_version = base_version;
        self
    }

    pub fn lineage(&self) -> u64 {
        self.lineage.load(Relaxed)
    }

    /// Relabels this state (a restore to the version it already is, untouched).
    pub fn set_lineage(&self, lineage: u64) {
        self.lineage.store(lineage, Relaxed);
    }

    /// Refuses calls made for another lineage of the model.
    pub fn check_lineage(&self, lineage: u64) -> Result<(), ShardError> {
        let mine = self.lineage();
        if lineage == mine {
            return Ok(());
        }
        Err(ShardError::Aborted(format!(
            "model {:016x} is at lineage {mine:016x} (from checkpoint version {}), the call was \
             made for lineage {lineage:016x}: the model was restored or the shard restarted \
             since; reconcile the shards and resume from the checkpoint",
            self.fingerprint, self.base_version
        )))
    }

    /// Bytes this model holds: [`Model::memory_bytes`] and its counts.
    pub fn held_bytes(&self) -> u64 {
        self.memory_bytes() as u64 + self.counts.len() as u64 * 8
    }

    pub fn memory_bytes(&self) -> usize {
        self.u.memory_bytes() + self.v.memory_bytes() + self.sampler.memory_bytes()
    }

    pub(crate) fn negative(&self) -> usize {
        self.spec.model.negative as usize
    }

    /// Validates `mb` against this model and draws its targets: per pair its
    /// output word and the negatives drawn from its seed, planned for the
    /// loops. Shards of one model draw identical targets (same counts, same
    /// seed), so a caller holding several shards of a model may draw them
    /// once and pass them to each one's [`Model::dotprod`] and
    /// [`Model::adjust`].
    pub fn draw_targets(&self, mb: &Minibatch, targets: &mut Targets) -> Result<(), ShardError> {
        mb.validate(self.spec.model.vocab_size)?;
        if mb.objective != self.spec.model.objective {
            return Err(invalid(format!(
                "field `cbow`: a {} minibatch for model {:016x}, which trains {}",
                mb.objective, self.fingerprint, self.spec.model.objective
            )));
        }
        targets.draw(&self.sampler, self.negative(), self.fingerprint, mb);
        Ok(())
    }

    /// Whether `targets` were drawn for `mb` on this model (see [`Targets::fit`]).
    pub fn targets_fit(&self, mb: &Minibatch, targets: &Targets) -> bool {
        targets.fit(self.fingerprint, self.negative(), mb)
    }

    /// Refuses targets that were not drawn for `mb` on this model.
    pub(crate) fn check_targets(&self, mb: &Minibatch, t: &Targets) -> Result<(), ShardError> {
        if self.targets_fit(mb, t) {
            return Ok(());
        }
        mb.validate(self.spec.model.vocab_size)?;
        Err(invalid(format!(
            "targets drawn for model {:016x} seed {} ({} dot products) do not belong to this \
             minibatch (model {:016x}, seed {}, {} pairs)",
            t.fingerprint,
            t.seed,
            t.len(),
            self.fingerprint,
            mb.seed,
            mb.pairs()
        )))
    }

    /// Partial dot products of `mb` on this shard's columns (paper Fig. 5),
    /// pair-major into `dots`: per pair u_s(w_I)·v_s(w_O), then u_s(w_I)·v_s(w̃)
    /// for each of its negatives.
    pub fn dotprod(
        &self,
        mb: &Minibatch,
        targets: &Targets,
        scratch: &mut Scratch,
        dots: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        self.check_targets(mb, targets)?;
        let u_rows = scratch
            .u_rows
            .lend(mb.inputs.len() * self.spec.cols(), false);
        dots.clear();
        dots.resize(targets.len(), 0.0);
        dotprod_loop(self.work(mb, targets, u_rows), dots);
        self.stats.dotprod_calls.fetch_add(1, Relaxed);
        Ok(())
    }

    fn work<'a>(&'a self, mb: &'a Minibatch, t: &'a Targets, u_rows: &'a mut [f32]) -> Work<'a> {
        work(&self.u, &self.v, mb, t, u_rows)
    }

    /// Applies Δu_s(w_I) += G·v_s(x) and Δv_s(x) += G·u_s(w_I) for every dot
    /// product of `mb` (paper Fig. 6), `weights` laid out as the dot products,
    /// every vector read at its value at the start of the call (paper 5.1).
    /// One visit per distinct output row x: for each of its dot products, Δu
    /// of the input position += G·v(x) and Δv(x) += G·u(w_I); then v(x) +=
    /// s·Δv(x); u is read first and updated after all rows, u(w) += s·Δu. The
    /// scale s is [`crate::plan::row_step_scale`] of the row's dot-product
    /// count: 1 unless the row takes more stale steps than the row step cap.
    /// The weights are checked before any state is touched.
    pub fn adjust(
        &self,
        mb: &Minibatch,
        targets: &Targets,
        weights: &[f32],
        s: &mut Scratch,
    ) -> Result<(), ShardError> {
        self.check_targets(mb, targets)?;
        let pairs = mb.pairs();
        if weights.len() != targets.len() {
            return Err(invalid(format!(
                "field `weights`: {} weights for {} examples × (1 + {} negatives)",
                weights.len(),
                mb.examples(),
                self.negative()
            )));
        }
        if let Some(i) = weights.iter().position(|x| !x.is_finite()) {
            return Err(invalid(format!(
                "field `weights`: weight {i} is not finite ({})",
                weights[i]
            )));
        }
        let cols = self.spec.cols();
        let StepScratch {
            u_rows,
            u_delta,
            v_delta,
            ..
        } = s.for_steps(mb.inputs.len(), cols);
        adjust_loop(
            self.work(mb, targets, u_rows),
            Steps {
                weights,
                input_scale: &targets.input_scale,
                cap: targets.cap,
                u_delta,
                v_delta,
            },
        );
        self.stats.adjust_calls.fetch_add(1, Relaxed);
        self.stats.pairs_adjusted.fetch_add(pairs as u64, Relaxed);
        Ok(())
    }

    /// Overwrites rows from `start` of one matrix with `values` (whole rows,
    /// this shard's columns, row-major): loading a checkpoint.
    pub fn write_rows(&self, matrix: Matrix, start: u64, values: &[f32]) -> Result<(), ShardError> {
        let cols = self.spec.cols();
        let rows = (values.len() / cols.max(1)) as u64;
        let v = self.spec.model.vocab_size;
        if !values.len().is_multiple_of(cols.max(1))
            || start.checked_add(rows).is_none_or(|e| e > v)
        {
            return Err(invalid(format!(
                "{} values from row {start} are not whole rows of {cols} columns within {v} rows",
                values.len()
            )));
        }
        let m = match matrix {
            Matrix::Input => &self.u,
            Matrix::Output => &self.v,
        };
        for (i, row) in values.chunks_exact(cols).enumerate() {
            m.with_row_mut(start as usize + i, |r| r.copy_from_slice(row));
        }
        Ok(())
    }

    /// Rows `start..end` of one matrix, this shard's columns, row-major.
    pub fn read_rows(
        &self,
        matrix: Matrix,
        start: u64,
        end: u64,
        out: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        let v = self.spec.model.vocab_size;
        if start > end || end > v {
            return Err(invalid(format!(
                "fields `row_start`/`row_end`: [{start}, {end}) is not within the vocabulary [0, {v})"
            )));
        }
        let m = match matrix {
            Matrix::Input => &self.u,
            Matrix::Output => &self.v,
        };
        let cols = self.spec.cols();
        out.clear();
        out.resize((end - start) as usize * cols, 0.0);
        for (i, row) in (start..end).enumerate() {
            m.read_row(row as usize, &mut out[i * cols..(i + 1) * cols]);
        }
        Ok(())
    }
}

/// What the loops read of a validated minibatch and its plan.
pub(crate) fn work<'a>(
    u: &'a HogwildMatrix,
    v: &'a HogwildMatrix,
    mb: &'a Minibatch,
    t: &'a Targets,
    u_rows: &'a mut [f32],
) -> Work<'a> {
    Work {
        u,
        v,
        inputs: &mb.inputs,
        contexts: mb.objective.is_cbow().then_some(Contexts {
            counts: &mb.context_counts,
            words: &mb.outputs,
        }),
        plan: &t.plan,
        groups: &t.groups,
        u_rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{minibatch, snapshot, spec, COUNTS};
    use colonnade_common::model::Objective;

    fn model() -> Model {
        Model::new(spec(0..8), &COUNTS).expect("model")
    }

    #[test]
    fn bad_requests_leave_state_untouched() {
        let m = model();
        let good = minibatch(1, &[0, 1], &[2, 1], &[1, 2, 3]);
        let (mut t, mut s) = (Targets::default(), Scratch::default());
        m.draw_targets(&good, &mut t).expect("targets");
        m.adjust(&good, &t, &[0.1; 12], &mut s).expect("adjust");
        let before = snapshot(&m);
        let cases = [
            (minibatch(1, &[0, 1], &[2, 1], &[1, 2, 6]), 12, "`outputs`"),
            (
                minibatch(1, &[0, 1], &[2], &[1, 2, 3]),
                12,
                "`context_counts`",
            ),
            (minibatch(1, &[0, 1], &[2, 2], &[1, 2, 3]), 12, "`outputs`"),
            (good.clone(), 11, "`weights`"),
            (minibatch(2, &[0, 1], &[2, 1], &[1, 2, 3]), 12, "targets"),
        ];
        for (mb, weights, field) in cases {
            let e = m
                .adjust(&mb, &t, &vec![0.1; weights], &mut s)
                .expect_err(field);
            assert!(e.to_string().contains(field), "{e} should name {field}");
            let mut dots = Vec::new();
            if weights == 12 {
                assert!(m.dotprod(&mb, &t, &mut s, &mut dots).is_err());
            }
        }
        let mut nan = vec![0.1; 12];
        nan[4] = f32::NAN;
        let e = m.adjust(&good, &t, &nan, &mut s).expect_err("nan");
        assert!(e.to_string().contains("not finite"));
        assert_eq!(snapshot(&m), before);
    }

    #[test]
    fn a_minibatch_of_the_other_objective_is_refused() {
        let m = model();
        let mut mb = minibatch(1, &[0, 1], &[2, 1], &[1, 2, 3]);
        mb.objective = Objective::Cbow;
        let mut t = Targets::default();
        let e = m.draw_targets(&mb, &mut t).expect_err("CBOW on skip-gram");
        assert!(e.to_string().contains("field `cbow`"), "{e}");
        let mut spec = spec(0..8);
        spec.model.objective = Objective::Cbow;
        let cbow = Model::new(spec, &COUNTS).expect("model");
        cbow.draw_targets(&mb, &mut t).expect("CBOW on CBOW");
        assert_eq!(t.len(), 2 * 4, "one example per input position");
        mb.objective = Objective::SkipGram;
        assert!(!cbow.targets_fit(&mb, &t));
        assert!(cbow.draw_targets(&mb, &mut t).is_err());
    }

    #[test]
    fn targets_fit_only_the_minibatch_they_were_drawn_for() {
        let m = model();
        let a = minibatch(9, &[0, 1], &[2, 1], &[1, 2, 3]);
        let mut t = Targets::default();
        m.draw_targets(&a, &mut t).expect("targets");
        assert!(m.targets_fit(&a, &t));
        // Same seed, other outputs: the negatives would differ.
        assert!(!m.targets_fit(&minibatch(9, &[0, 1], &[2, 1], &[4, 5, 2]), &t));
        // Same seed and outputs, other inputs: the step scales would differ.
        assert!(!m.targets_fit(&minibatch(9, &[1, 1], &[2, 1], &[1, 2, 3]), &t));
        assert_eq!(t.len(), 3 * 4);
    }

    #[test]
    fn scratch_is_lent_from_64_bytes_and_zeroed_when_asked() {
        let mut b = LineBuf::default();
        for len in [0usize, 1, 100, 5_000, 7] {
            let s = b.lend(len, false);
            assert_eq!(s.len(), len);
            assert!((s.as_ptr() as usize).is_multiple_of(64), "{len} floats");
            s.fill(3.0);
            assert!(b.lend(len, true).iter().all(|&x| x == 0.0), "{len} floats");
        }
    }
}
