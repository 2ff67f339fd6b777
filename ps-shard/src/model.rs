//! One model's column slice on a shard: its two matrices, its negative
//! sampler, and the three operations on them: `dotprod`, `adjust` (paper
//! Fig. 5 and 6, over a call and its [`Plan`]) and `read_rows`
//! for export. Every minibatch is validated completely before any state is
//! touched, so a rejected request leaves the model unchanged.

use crate::finite::{max_abs_bits, MAX_VALUE_BITS};
use crate::hogwild::{HogwildMatrix, Siblings};
use crate::loops::{adjust_loop, dotprod_loop, Contexts, Refresh, Steps, Work};
use crate::plan::Plan;
use crate::stale::Pending;
use colonnade_common::init::init_input_row;
use colonnade_common::kernels::padded;
use colonnade_common::model::{Matrix, ShardSpec};
use colonnade_common::sampler::NegativeSampler;
use colonnade_proto::domain::invalid_argument as invalid;
use colonnade_proto::{validate_spec, Minibatch, ShardError, DIVERGED_PREFIX};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The most characters of a client's divergence report a model keeps (and
/// logs, and shows in `Status`).
const MAX_DIVERGED_CHARS: usize = 2_000;

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
    sampler: NegativeSampler,
    /// The word counts the sampler was built from (kept to rebuild the
    /// initial state, and to write them next to checkpoints).
    pub counts: Arc<[u64]>,
    /// Which state this is: 0 as created, else the id a restore gave it
    /// (relabelled in place when a restore finds it already at the version).
    lineage: AtomicU64,
    /// The checkpoint version this state started from (0: the initial state).
    pub base_version: u64,
    pub stats: ModelStats,
    /// Why training diverged on this state (`None`: it has not): set by the
    /// adjust that reported it; the state takes no training call since.
    diverged: parking_lot::Mutex<Option<String>>,
    /// Whether `diverged` is set: what every training call reads, without
    /// taking the lock.
    is_diverged: AtomicBool,
    /// Dot products pending per row: of calls whose dotprod was served and
    /// whose adjust was not applied yet ([`crate::stale`]).
    pending: Arc<Pending>,
    /// At least the largest |value| either matrix holds, as f32 bits (it
    /// only grows): what an adjust's admission bounds its growth from.
    pub(crate) max_abs: AtomicU32,
    /// The `--num-workers` this state is trained with: the first count a
    /// worker declared since the state began (0: none yet).
    workers: AtomicU32,
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
    /// input positions (a fused call sizes `weights` first), each position's
    /// u row and Δu `stride` floats apart; Δv holds `v_delta` floats.
    pub(crate) fn for_steps(
        &mut self,
        inputs: usize,
        stride: usize,
        v_delta: usize,
    ) -> StepScratch<'_> {
        StepScratch {
            u_rows: self.u_rows.lend(inputs * stride, false),
            u_delta: self.u_delta.lend(inputs * stride, true),
            v_delta: self.v_delta.lend(v_delta, false),
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
        let sampler = NegativeSampler::new(&counts, f64::from(spec.model.sampling_power))
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
        let mut max_abs = 0;
        u.fill_rows(|r, row| {
            init_input_row(seed, dim, r as u64, col_start, row);
            max_abs = max_abs.max(max_abs_bits(row));
        });
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
            diverged: parking_lot::Mutex::new(None),
            is_diverged: AtomicBool::new(false),
            pending: Arc::new(Pending::new(rows)),
            max_abs: AtomicU32::new(max_abs),
            workers: AtomicU32::new(0),
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
        *self.diverged.lock() = None;
        self.is_diverged.store(false, Relaxed);
    }

    /// Records `count` as the `--num-workers` this state is trained with
    /// unless a worker declared one before (0 declares nothing); returns the
    /// recorded count, which the worker compares with its own.
    pub fn declare_workers(&self, count: u32) -> u32 {
        if count == 0 {
            return self.workers.load(Relaxed);
        }
        match self.workers.compare_exchange(0, count, Relaxed, Relaxed) {
            Ok(_) => count,
            Err(recorded) => recorded,
        }
    }

    /// Sets the `--num-workers` of this state (a Restore starts a state
    /// for the workers that restored it).
    pub fn set_workers(&self, count: u32) {
        self.workers.store(count, Relaxed);
    }

    /// Marks this state diverged, as a client found (the first report
    /// stays): it takes no training call from now on.
    pub fn mark_diverged(&self, why: &str) {
        // A client's text: kept to a log line's length.
        let why = why
            .char_indices()
            .nth(MAX_DIVERGED_CHARS)
            .map_or(why, |(end, _)| &why[..end]);
        let mut d = self.diverged.lock();
        if d.is_none() {
            tracing::error!(
                model = format_args!("{:016x}", self.fingerprint),
                "training diverged: {why}; refusing training calls until a restore"
            );
            *d = Some(why.to_owned());
            self.is_diverged.store(true, Relaxed);
        }
    }

    /// Why training diverged on this state, if it did.
    pub fn diverged(&self) -> Option<String> {
        self.diverged.lock().clone()
    }

    /// Refuses training calls on a diverged state: every worker stops with
    /// the one error that says so, instead of training on garbage or
    /// diverging again.
    pub fn check_trainable(&self) -> Result<(), ShardError> {
        if !self.is_diverged.load(Relaxed) {
            return Ok(());
        }
        match &*self.diverged.lock() {
            None => Ok(()),
            Some(why) => Err(ShardError::FailedPrecondition(format!(
                "{DIVERGED_PREFIX}model {:016x} takes no more training ({why}). Roll it back \
                 to its newest checkpoint with `colonnade train --rollback`, or start over with \
                 --restart; either with a lower --alpha, more --sample or fewer minibatches in \
                 flight",
                self.fingerprint
            ))),
        }
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
    /// The dot products pending per row of this model's calls in flight
    /// (counted by the gRPC service: [`crate::stale`]).
    pub fn pending(&self) -> &Arc<Pending> {
        &self.pending
    }

    pub fn held_bytes(&self) -> u64 {
        self.memory_bytes() as u64 + self.counts.len() as u64 * 8
    }

    pub fn memory_bytes(&self) -> usize {
        self.u.memory_bytes()
            + self.v.memory_bytes()
            + self.sampler.memory_bytes()
            + self.counts.len() * crate::stale::PENDING_BYTES_PER_ROW as usize
    }

    pub(crate) fn negative(&self) -> usize {
        self.spec.model.negative as usize
    }

    /// Validates the call `mbs` against this model and plans it: per example
    /// its positive word and the negatives drawn from its minibatch's seed,
    /// grouped for the loops. Shards of one model draw identical plans (same
    /// counts, same seeds), so a caller holding several shards of a model
    /// may plan a call once and pass it to each one's [`Model::dotprod`] and
    /// [`Model::adjust`].
    pub fn plan(&self, mbs: &[Minibatch], plan: &mut Plan) -> Result<(), ShardError> {
        let shared = mbs.first().is_some_and(|mb| mb.shared_negatives);
        for mb in mbs {
            mb.validate(self.spec.model.vocab_size)?;
            if mb.objective != self.spec.model.objective {
                return Err(invalid(format!(
                    "field `cbow`: a {} minibatch for model {:016x}, which trains {}",
                    mb.objective, self.fingerprint, self.spec.model.objective
                )));
            }
            if mb.shared_negatives && mb.objective.is_cbow() {
                return Err(invalid(
                    "fields `cbow`/`shared_negatives`: only skip-gram minibatches share negatives",
                ));
            }
            if mb.shared_negatives != shared {
                return Err(invalid(format!(
                    "field `shared_negatives`: {} of the call's {} minibatches share their \
                     negatives (all or none must)",
                    mbs.iter().filter(|mb| mb.shared_negatives).count(),
                    mbs.len()
                )));
            }
        }
        plan.draw(&self.sampler, self.negative(), self.fingerprint, mbs);
        Ok(())
    }

    /// Whether `plan` was drawn for the call `mbs` on this model (see
    /// [`Plan::fit`]).
    pub fn plan_fits(&self, mbs: &[Minibatch], plan: &Plan) -> bool {
        plan.fit(self.fingerprint, self.negative(), mbs)
    }

    /// Refuses a plan that was not drawn on this model.
    pub(crate) fn check_plan(&self, plan: &Plan) -> Result<(), ShardError> {
        if plan.fingerprint == self.fingerprint
            && plan.len() == plan.examples() * (self.negative() + 1)
        {
            return Ok(());
        }
        Err(invalid(format!(
            "a plan drawn for model {:016x} ({} dot products for {} examples) does not belong \
             to model {:016x}",
            plan.fingerprint,
            plan.len(),
            plan.examples(),
            self.fingerprint,
        )))
    }

    /// Partial dot products of the call `plan` on this shard's columns (paper
    /// Fig. 5), in wire order into `dots` (see [`Plan`]): the examples'
    /// positives u_s(w_I)·v_s(w_O), then every negative u_s(w_I)·v_s(w̃).
    pub fn dotprod(
        &self,
        plan: &Plan,
        scratch: &mut Scratch,
        dots: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        self.check_plan(plan)?;
        let stride = padded(self.spec.cols());
        let u_rows = scratch.u_rows.lend(plan.slots().len() * stride, false);
        dots.clear();
        dots.resize(plan.len(), 0.0);
        dotprod_loop(work(&self.u, &self.v, plan, u_rows, stride), dots);
        self.stats.dotprod_calls.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Applies Δu_s(w_I) += G·v_s(x) and Δv_s(x) += G·u_s(w_I) for every dot
    /// product of the call `plan` (paper Fig. 6), `weights` in wire order,
    /// every vector read at its value at the start of the call (paper 5.1).
    /// One visit per distinct output row x: for each of its dot products, Δu
    /// of the input position += G·v(x) and Δv(x) += G·u(w_I); then v(x) +=
    /// s·Δv(x); u is read first and updated after all rows, u(w) += s·Δu. The
    /// scale s is [`crate::plan::row_step_scale`] of the row's dot-product
    /// count: 1 unless the row takes more stale steps than the row step cap.
    /// The weights are checked before any state is touched.
    ///
    /// With `over_pending` (the gRPC service, where calls of many pipelines
    /// are in flight), each row's scale is of the dot products pending on it
    /// across them ([`crate::stale`]), this call's included, and the call's
    /// are released once applied; else of this call's alone.
    pub fn adjust(
        &self,
        plan: &mut Plan,
        weights: &[f32],
        over_pending: bool,
        s: &mut Scratch,
    ) -> Result<(), ShardError> {
        self.check_plan(plan)?;
        if weights.len() != plan.len() {
            return Err(invalid(format!(
                "field `weights`: {} weights for {} examples × (1 + {} negatives)",
                weights.len(),
                plan.examples(),
                self.negative()
            )));
        }
        self.admit_weights(weights)?;
        // The split loops' scratch rows are zero-padded to whole 16-float
        // chunks (see `crate::loops::dotprod_loop`), and so is Δv.
        let stride = padded(self.spec.cols());
        // A call whose dotprod kept its dot products (a crowded shard) has
        // its weights refreshed for its rows' drift and steps by its own dot
        // products; else, over gRPC, by those pending on its rows.
        let refresh = over_pending && !plan.then.is_empty() && plan.then.len() == plan.len();
        let pending = (over_pending && !refresh).then_some(&*self.pending);
        plan.scale_inputs_for(pending);
        let counted = plan.counted();
        if refresh && s.weights.len() < plan.len() {
            s.weights.resize(plan.len(), 0.0);
        }
        let StepScratch {
            u_rows,
            u_delta,
            v_delta,
            weights: out,
        } = s.for_steps(plan.slots().len(), stride, stride);
        let mut written = 0;
        adjust_loop(
            work(&self.u, &self.v, plan, u_rows, stride),
            Steps {
                weights,
                input_scale: &plan.input_scale,
                cap: plan.cap,
                pending: pending.map(|p| (p.of(false), counted)),
                refresh: refresh.then(|| Refresh {
                    then: &plan.then,
                    out,
                    alphas: &plan.alphas,
                    extrapolate: self.spec.model.dim as f32 / self.spec.cols().max(1) as f32,
                }),
                u_delta,
                v_delta,
                written: &mut written,
            },
        );
        plan.release();
        self.stats.adjust_calls.fetch_add(1, Relaxed);
        self.stats.pairs_adjusted.fetch_add(plan.pairs(), Relaxed);
        self.note_written(written)
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
        let written = max_abs_bits(values);
        if written > MAX_VALUE_BITS {
            return Err(invalid(format!(
                "a value from row {start} is {} (not finite, or beyond ±2^40: the most a shard \
                 holds)",
                f32::from_bits(written)
            )));
        }
        for (i, row) in values.chunks_exact(cols).enumerate() {
            m.with_row_mut(start as usize + i, |r| r.copy_from_slice(row));
        }
        self.max_abs.fetch_max(written, Relaxed);
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

/// What the loops read of a call's plan.
pub(crate) fn work<'a>(
    u: &'a HogwildMatrix,
    v: &'a HogwildMatrix,
    plan: &'a Plan,
    u_rows: &'a mut [f32],
    stride: usize,
) -> Work<'a> {
    Work {
        u,
        v,
        inputs: plan.slots(),
        contexts: plan.objective.is_cbow().then_some(Contexts {
            counts: &plan.context_counts,
            words: &plan.contexts,
        }),
        plan: &plan.plan,
        groups: &plan.groups,
        u_rows,
        stride,
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
        let (mut p, mut s) = (Plan::default(), Scratch::default());
        m.plan(std::slice::from_ref(&good), &mut p).expect("plan");
        m.adjust(&mut p, &[0.1; 12], false, &mut s).expect("adjust");
        let before = snapshot(&m);
        let bad = [
            (minibatch(1, &[0, 1], &[2, 1], &[1, 2, 6]), "`outputs`"),
            (minibatch(1, &[0, 1], &[2], &[1, 2, 3]), "`context_counts`"),
            (minibatch(1, &[0, 1], &[2, 2], &[1, 2, 3]), "`outputs`"),
        ];
        for (mb, field) in bad {
            let e = m
                .plan(&[good.clone(), mb], &mut Plan::default())
                .expect_err(field);
            assert!(e.to_string().contains(field), "{e} should name {field}");
        }
        let e = m
            .adjust(&mut p, &[0.1; 11], false, &mut s)
            .expect_err("short");
        assert!(e.to_string().contains("`weights`"), "{e}");
        let mut nan = vec![0.1; 12];
        nan[4] = f32::NAN;
        let e = m.adjust(&mut p, &nan, false, &mut s).expect_err("nan");
        assert!(e.to_string().contains("not finite"));
        // A plan drawn on another model (here: other negatives) is refused.
        let mut other_spec = spec(0..8);
        other_spec.model.negative = 4;
        let other = Model::new(other_spec, &COUNTS).expect("model");
        let mut q = Plan::default();
        other.plan(&[good], &mut q).expect("plan");
        assert!(m.adjust(&mut q, &[0.1; 15], false, &mut s).is_err());
        assert!(m.dotprod(&q, &mut s, &mut Vec::new()).is_err());
        assert_eq!(snapshot(&m), before);
    }

    #[test]
    fn a_minibatch_of_the_other_objective_is_refused() {
        let m = model();
        let mut mb = minibatch(1, &[0, 1], &[2, 1], &[1, 2, 3]);
        mb.objective = Objective::Cbow;
        let mut p = Plan::default();
        let e = m
            .plan(std::slice::from_ref(&mb), &mut p)
            .expect_err("CBOW on skip-gram");
        assert!(e.to_string().contains("field `cbow`"), "{e}");
        let mut spec = spec(0..8);
        spec.model.objective = Objective::Cbow;
        let cbow = Model::new(spec, &COUNTS).expect("model");
        cbow.plan(std::slice::from_ref(&mb), &mut p)
            .expect("CBOW on CBOW");
        assert_eq!(p.len(), 2 * 4, "one example per input position");
        assert_eq!(p.examples(), 2);
        mb.objective = Objective::SkipGram;
        assert!(!cbow.plan_fits(std::slice::from_ref(&mb), &p));
        assert!(cbow.plan(&[mb], &mut p).is_err());
    }

    #[test]
    fn plans_fit_only_the_call_they_were_drawn_for() {
        let m = model();
        let a = minibatch(9, &[0, 1], &[2, 1], &[1, 2, 3]);
        let b = minibatch(4, &[2], &[2], &[0, 1]);
        let mut p = Plan::default();
        m.plan(&[a.clone(), b.clone()], &mut p).expect("plan");
        assert!(m.plan_fits(&[a.clone(), b.clone()], &p));
        assert_eq!((p.len(), p.examples(), p.pairs()), (5 * 4, 5, 5));
        // Another order, or one minibatch of it, is another call.
        assert!(!m.plan_fits(&[b.clone(), a.clone()], &p));
        assert!(!m.plan_fits(std::slice::from_ref(&a), &p));
        // Same seed, other outputs: the negatives would differ.
        let other = minibatch(9, &[0, 1], &[2, 1], &[4, 5, 2]);
        assert!(!m.plan_fits(&[other, b.clone()], &p));
        // Same seed and outputs, other inputs: the step scales would differ.
        let other = minibatch(9, &[1, 1], &[2, 1], &[1, 2, 3]);
        assert!(!m.plan_fits(&[other, b.clone()], &p));
        // Another learning rate: the weights would differ.
        let mut slower = a;
        slower.alpha = 0.5;
        assert!(!m.plan_fits(&[slower, b], &p));
    }

    /// The wire order: each example's positive first, in request order, then
    /// the negatives by ascending output row.
    #[test]
    fn dot_products_travel_positives_first_then_negatives_by_row() {
        let m = model();
        let a = minibatch(3, &[0, 1], &[2, 1], &[1, 2, 3]);
        let mut b = minibatch(8, &[4], &[1], &[5]);
        b.alpha = 0.25;
        let mut p = Plan::default();
        m.plan(&[a.clone(), b.clone()], &mut p).expect("plan");
        let mut by_wire = vec![u32::MAX; p.len()];
        let mut at = 0;
        for &(row, end) in &p.groups {
            for &(w, _) in &p.plan[at..end as usize] {
                by_wire[w as usize] = row;
            }
            at = end as usize;
        }
        assert!(by_wire.iter().all(|&r| r != u32::MAX), "a wire index each");
        let positives: Vec<u32> = a.outputs.iter().chain(&b.outputs).copied().collect();
        assert_eq!(by_wire[..p.examples()], positives[..]);
        let negatives = &by_wire[p.examples()..];
        assert!(negatives.windows(2).all(|w| w[0] <= w[1]), "{negatives:?}");
        // Each dot product's learning rate is its minibatch's.
        assert_eq!(p.alphas[..4], [a.alpha, a.alpha, a.alpha, 0.25]);
        let (mut ours, mut theirs) = (0, 0);
        for (&(w, pos), _) in p.plan.iter().zip(0..) {
            if w as usize >= p.examples() {
                let expect = if pos < 2 { a.alpha } else { 0.25 };
                assert_eq!(p.alphas[w as usize], expect);
                if pos < 2 {
                    ours += 1
                } else {
                    theirs += 1
                }
            }
        }
        assert_eq!((ours, theirs), (3 * 3, 3));
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

    #[test]
    fn a_diverged_state_refuses_training_until_relabelled() {
        let m = model();
        assert!(m.check_trainable().is_ok());
        m.mark_diverged(&"é".repeat(10_000));
        m.mark_diverged("a later report");
        let why = m.diverged().expect("marked");
        assert_eq!(why.chars().count(), MAX_DIVERGED_CHARS, "kept to its limit");
        assert!(why.starts_with('é'), "the first report stays");
        let err = m.check_trainable().expect_err("refused");
        assert!(err.to_string().contains(DIVERGED_PREFIX), "{err}");
        m.set_lineage(7);
        assert!(m.check_trainable().is_ok() && m.diverged().is_none());
    }
}
