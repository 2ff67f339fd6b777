//! The shard's training logic, free of transport: models keyed by fingerprint,
//! `dotprod` and `adjust` over this shard's columns (paper Fig. 5 and 6), and
//! row reads for export. Every request is validated completely before any
//! state is touched, so a rejected request leaves the model unchanged.

use crate::hogwild::HogwildMatrix;
use colonnade_common::init::init_input_row;
#[cfg(target_arch = "x86_64")]
use colonnade_common::kernels::Avx;
use colonnade_common::kernels::{Portable, Simd};
use colonnade_common::model::ModelSpec;
use colonnade_common::sampler::AliasSampler;
use colonnade_common::seeds;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use multiversion::multiversion;
use multiversion::target::match_target;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// How many rows ahead of use the loops prefetch (hides cache-miss latency on
/// the random rows of negatives and context words).
const PREFETCH_AHEAD: usize = 8;

/// Largest number of negatives per pair a shard accepts.
pub const MAX_NEGATIVE: u32 = 1024;

/// The least number of deferred gradient steps a row may take from one
/// minibatch before they are scaled down (see [`row_step_cap`]).
pub const ROW_STEP_CAP: u64 = 64;

/// How many deferred gradient steps one row may take from a minibatch: the
/// dot products of its largest input position (`negative + 1` per context
/// word, so 2·window·(negative + 1) in practice: one full window, as
/// word2vec itself defers), and at least [`ROW_STEP_CAP`]. A row that takes
/// part in k dot products of a minibatch receives the sum of k steps all
/// computed from the vectors as they were at the minibatch's start; above
/// the cap, that sum is scaled by `cap / k` (the mean step, taken `cap`
/// times). Without it, head-heavy vocabularies (a few hundred words, a hub
/// node) diverge: their frequent rows take hundreds of stale steps per
/// minibatch (docs/design.md, "Row step cap").
pub fn row_step_cap(context_counts: &[u32], negative: u32) -> u64 {
    let widest = context_counts.iter().copied().max().unwrap_or(0);
    (u64::from(widest) * (u64::from(negative) + 1)).max(ROW_STEP_CAP)
}

/// Errors a shard reports; the service maps each variant to one gRPC code.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ShardError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    ResourceExhausted(String),
}

fn invalid(msg: impl Into<String>) -> ShardError {
    ShardError::InvalidArgument(msg.into())
}

/// A model spec plus this shard's column range.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardSpec {
    pub model: ModelSpec,
    pub col_start: u32,
    pub col_end: u32,
}

impl ShardSpec {
    pub fn cols(&self) -> usize {
        (self.col_end - self.col_start) as usize
    }

    /// Bytes of the two matrices this spec needs on this shard: per row its
    /// cells and its 4-byte lock slot (see `hogwild`).
    pub fn matrix_bytes(&self) -> u64 {
        2 * self.model.vocab_size * (self.cols() as u64 * 4 + 4)
    }

    fn validate(&self) -> Result<(), ShardError> {
        let m = &self.model;
        if m.vocab_size < 2 || m.vocab_size > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "field `vocab_size`: {} is outside 2..=2^32-1",
                m.vocab_size
            )));
        }
        if m.dim == 0 {
            return Err(invalid("field `dim`: must be positive"));
        }
        if self.col_start >= self.col_end || self.col_end > m.dim {
            return Err(invalid(format!(
                "fields `col_start`/`col_end`: [{}, {}) is not a non-empty column range within dim {}",
                self.col_start, self.col_end, m.dim
            )));
        }
        if m.negative == 0 || m.negative > MAX_NEGATIVE {
            return Err(invalid(format!(
                "field `negative`: {} is outside 1..={MAX_NEGATIVE}",
                m.negative
            )));
        }
        if !(m.sampling_power.is_finite() && (0.0..=2.0).contains(&m.sampling_power)) {
            return Err(invalid(format!(
                "field `sampling_power`: {} is outside [0, 2]",
                m.sampling_power
            )));
        }
        Ok(())
    }
}

/// Which of the two matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matrix {
    Input,
    Output,
}

/// A minibatch as the wire carries it (paper Fig. 7: W_input, W_output, seed).
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub fingerprint: u64,
    pub seed: u64,
    pub inputs: &'a [u32],
    /// Number of outputs of each input.
    pub context_counts: &'a [u32],
    /// Outputs of all inputs, concatenated.
    pub outputs: &'a [u32],
}

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
    u: HogwildMatrix,
    v: HogwildMatrix,
    sampler: AliasSampler,
    /// Targets `dotprod` drew, by minibatch seed, for the `adjust` of the same
    /// minibatch. A soft cache: an entry is checked against the batch before
    /// use, and a miss (restart, eviction, another shard thread's clear) just
    /// draws them again from the seed.
    recent_targets: DashMap<u64, Targets>,
    pub stats: ModelStats,
}

/// At most this many minibatches' targets wait for their `adjust` (the cache
/// is cleared when full; ≲ 250 KB each for 256-input minibatches).
const TARGET_CACHE_ENTRIES: usize = 512;

/// Reusable per-thread buffers, so steady-state requests allocate nothing
/// (paper 6.1.3).
#[derive(Default)]
pub struct Scratch {
    /// Per input position: its u row as the call found it.
    u_rows: Vec<f32>,
    /// Per input position: its accumulated Δu.
    u_delta: Vec<f32>,
    /// One output row's accumulated Δv.
    v_delta: Vec<f32>,
    /// Per dot product, in request order: its value (dotprod) or weight (adjust).
    dots: Vec<f32>,
    targets: Targets,
}

/// The output-side word of every dot product of a batch, in request order
/// (per pair its positive word, then its negatives), whom they belong to, and
/// the same dot products grouped by output row, in ascending row order, so
/// that the loops visit and lock each distinct output row once per call
/// however often it occurs (the negatives of a minibatch repeat the frequent
/// words many times).
#[derive(Default)]
pub struct Targets {
    fingerprint: u64,
    seed: u64,
    /// The batch's inputs and context counts the grouping was made for.
    inputs: Vec<u32>,
    context_counts: Vec<u32>,
    ids: Vec<u32>,
    negs: Vec<u32>,
    /// Input position of each pair.
    input_of_pair: Vec<u32>,
    /// Sort keys: output row << 32 | dot-product index.
    keys: Vec<u64>,
    /// The dot products sorted by output row (ties in request order), each
    /// as (dot-product index, input position).
    plan: Vec<(u32, u32)>,
    /// Runs of `plan` sharing one output row: (row, end of the run in `plan`).
    groups: Vec<(u32, u32)>,
    /// The batch's [`row_step_cap`].
    cap: u64,
    /// Input positions sorted by word: word << 32 | position.
    input_keys: Vec<u64>,
    /// Per input position: the scale of its Δu (see [`input_step_scales`]).
    input_scale: Vec<f32>,
}

impl Targets {
    /// Groups `ids` by output row into `plan` and `groups`, and the inputs
    /// by word into their step scales.
    fn group(&mut self, inputs: &[u32], context_counts: &[u32], per_pair: usize) {
        self.inputs.clear();
        self.inputs.extend_from_slice(inputs);
        self.context_counts.clear();
        self.context_counts.extend_from_slice(context_counts);
        self.cap = row_step_cap(context_counts, per_pair as u32 - 1);
        input_step_scales(
            inputs,
            context_counts,
            per_pair as u64,
            self.cap,
            &mut self.input_keys,
            &mut self.input_scale,
        );
        self.input_of_pair.clear();
        for (p, &c) in context_counts.iter().enumerate() {
            self.input_of_pair
                .extend(std::iter::repeat_n(p as u32, c as usize));
        }
        self.keys.clear();
        self.keys.extend(
            self.ids
                .iter()
                .enumerate()
                .map(|(t, &row)| (u64::from(row) << 32) | t as u64),
        );
        // A stable radix sort on the row alone: ties keep request order.
        radsort::sort_by_key(&mut self.keys, |&key| (key >> 32) as u32);
        self.plan.clear();
        self.groups.clear();
        for (i, &key) in self.keys.iter().enumerate() {
            let (row, t) = ((key >> 32) as u32, key as u32);
            self.plan
                .push((t, self.input_of_pair[t as usize / per_pair]));
            match self.groups.last_mut() {
                Some((last, end)) if *last == row => *end = i as u32 + 1,
                _ => self.groups.push((row, i as u32 + 1)),
            }
        }
    }
}

impl Model {
    pub fn new(spec: ShardSpec, counts: &[u64]) -> Result<Self, ShardError> {
        spec.validate()?;
        if counts.len() as u64 != spec.model.vocab_size {
            return Err(invalid(format!(
                "field `counts`: {} counts for vocab_size {}",
                counts.len(),
                spec.model.vocab_size
            )));
        }
        let sampler = AliasSampler::new(counts, f64::from(spec.model.sampling_power))
            .map_err(|e| invalid(format!("field `counts`: {e}")))?;
        let rows = counts.len();
        let cols = spec.cols();
        let (seed, dim, col_start) = (spec.model.init_seed, spec.model.dim, spec.col_start);
        let no_memory = |e: std::io::Error| {
            ShardError::ResourceExhausted(format!(
                "cannot map {} bytes for {rows} words × {cols} columns: {e}",
                (rows as u64).saturating_mul(cols as u64 * 4)
            ))
        };
        let u = HogwildMatrix::new(rows, cols, |r, row| {
            init_input_row(seed, dim, r as u64, col_start, row)
        })
        .map_err(no_memory)?;
        let v = HogwildMatrix::zeroed(rows, cols).map_err(no_memory)?;
        Ok(Self {
            fingerprint: spec.model.fingerprint(),
            spec,
            u,
            v,
            sampler,
            recent_targets: DashMap::new(),
            stats: ModelStats::default(),
        })
    }

    pub fn memory_bytes(&self) -> usize {
        self.u.memory_bytes() + self.v.memory_bytes() + self.sampler.memory_bytes()
    }

    /// Checks lengths and ids; returns the number of (input, output) pairs.
    fn validate(&self, b: &Batch<'_>) -> Result<usize, ShardError> {
        if b.fingerprint != self.fingerprint {
            return Err(ShardError::FailedPrecondition(format!(
                "model fingerprint {:016x} does not match this model ({:016x})",
                b.fingerprint, self.fingerprint
            )));
        }
        if b.inputs.len() != b.context_counts.len() {
            return Err(invalid(format!(
                "fields `inputs`/`context_counts`: {} inputs but {} context counts",
                b.inputs.len(),
                b.context_counts.len()
            )));
        }
        let pairs: u64 = b.context_counts.iter().map(|&c| u64::from(c)).sum();
        if pairs != b.outputs.len() as u64 {
            return Err(invalid(format!(
                "field `outputs`: {} outputs but context counts sum to {pairs}",
                b.outputs.len()
            )));
        }
        let v = self.spec.model.vocab_size;
        for (field, ids) in [("inputs", b.inputs), ("outputs", b.outputs)] {
            if let Some((i, &id)) = ids.iter().enumerate().find(|(_, &id)| u64::from(id) >= v) {
                return Err(invalid(format!(
                    "field `{field}`: word id {id} at position {i} is out of range for vocabulary size {v}"
                )));
            }
        }
        Ok(b.outputs.len())
    }

    /// The output-side words of every dot product of `b` (its positives and
    /// the negatives drawn from its seed), checked against this model. Shards
    /// of one model draw identical targets (same counts, same seed), so a
    /// caller holding several shards in process may draw them once and pass
    /// them to every shard's [`Model::dotprod_with`] / [`Model::adjust_with`].
    pub fn draw_targets(&self, b: &Batch<'_>, targets: &mut Targets) -> Result<(), ShardError> {
        self.validate(b)?;
        self.draw(b, targets);
        Ok(())
    }

    /// Partial dot products of `b` on this shard's columns (paper Fig. 5):
    /// `pos` gets u_s(w_I)·v_s(w_O) per pair, `neg` gets u_s(w_I)·v_s(w̃) for
    /// the `negative` samples of each pair, drawn from the batch seed.
    pub fn dotprod(
        &self,
        b: &Batch<'_>,
        scratch: &mut Scratch,
        pos: &mut Vec<f32>,
        neg: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        let pairs = self.validate(b)?;
        let mut targets = std::mem::take(&mut scratch.targets);
        self.draw(b, &mut targets);
        self.dotprod_checked(b, pairs, &targets, scratch, pos, neg);
        if self.recent_targets.len() >= TARGET_CACHE_ENTRIES {
            self.recent_targets.clear();
        }
        self.recent_targets.insert(b.seed, targets);
        Ok(())
    }

    /// [`Model::dotprod`] with the targets already drawn by [`Model::draw_targets`].
    pub fn dotprod_with(
        &self,
        b: &Batch<'_>,
        targets: &Targets,
        scratch: &mut Scratch,
        pos: &mut Vec<f32>,
        neg: &mut Vec<f32>,
    ) -> Result<(), ShardError> {
        let pairs = self.validate(b)?;
        self.check_targets(b, targets, pairs)?;
        self.dotprod_checked(b, pairs, targets, scratch, pos, neg);
        Ok(())
    }

    /// The dot products of a batch already validated (`pairs` pairs) with
    /// its targets.
    fn dotprod_checked(
        &self,
        b: &Batch<'_>,
        pairs: usize,
        targets: &Targets,
        scratch: &mut Scratch,
        pos: &mut Vec<f32>,
        neg: &mut Vec<f32>,
    ) {
        let n = self.spec.model.negative as usize;
        scratch
            .u_rows
            .resize(b.inputs.len() * self.spec.cols(), 0.0);
        scratch.dots.clear();
        scratch.dots.resize(targets.ids.len(), 0.0);
        dotprod_loop(DotprodWork {
            u: &self.u,
            v: &self.v,
            inputs: b.inputs,
            plan: &targets.plan,
            groups: &targets.groups,
            u_rows: &mut scratch.u_rows,
            dots: &mut scratch.dots,
        });
        pos.clear();
        neg.clear();
        pos.reserve(pairs);
        neg.reserve(pairs * n);
        for per_pair in scratch.dots.chunks_exact(n + 1) {
            pos.push(per_pair[0]);
            neg.extend_from_slice(&per_pair[1..]);
        }
        self.stats.dotprod_calls.fetch_add(1, Relaxed);
    }

    /// Applies Δu_s(w_I) += G·v_s(x) and Δv_s(x) += G·u_s(w_I) for every dot
    /// product of the batch (paper Fig. 6), every vector read at its value at
    /// the start of the call (paper 5.1). One visit per distinct output row
    /// x (the targets are grouped by row): for each of its dot products, Δu of
    /// the input position += G·v(x) and Δv(x) += G·u(w_I); then v(x) +=
    /// s·Δv(x); u is read first and updated after all rows, u(w) += s·Δu. The
    /// scale s is [`row_step_scale`] of the row's dot-product count in this
    /// batch: 1 unless the row takes more stale steps than [`row_step_cap`].
    pub fn adjust(
        &self,
        b: &Batch<'_>,
        pos_weights: &[f32],
        neg_weights: &[f32],
        s: &mut Scratch,
    ) -> Result<(), ShardError> {
        let pairs = self.validate(b)?;
        let mut targets = std::mem::take(&mut s.targets);
        self.cached_targets(b, pairs, &mut targets);
        let result = self.adjust_checked(b, pairs, &targets, pos_weights, neg_weights, s);
        s.targets = targets;
        result
    }

    /// The targets `dotprod` drew for `b` if still cached and consistent
    /// with `b` (same seed and positives, hence the same negatives; same
    /// inputs, hence the same step scales), else drawn again.
    fn cached_targets(&self, b: &Batch<'_>, pairs: usize, targets: &mut Targets) {
        let per_pair = self.spec.model.negative as usize + 1;
        if let Some((_, cached)) = self.recent_targets.remove(&b.seed) {
            let consistent = cached.ids.len() == pairs * per_pair
                && cached.context_counts == b.context_counts
                && cached.inputs == b.inputs
                && cached.ids.iter().step_by(per_pair).eq(b.outputs.iter());
            if consistent {
                *targets = cached;
                return;
            }
        }
        self.draw(b, targets);
    }

    /// [`Model::adjust`] with the targets already drawn by [`Model::draw_targets`].
    pub fn adjust_with(
        &self,
        b: &Batch<'_>,
        targets: &Targets,
        pos_weights: &[f32],
        neg_weights: &[f32],
        s: &mut Scratch,
    ) -> Result<(), ShardError> {
        let pairs = self.validate(b)?;
        self.check_targets(b, targets, pairs)?;
        self.adjust_checked(b, pairs, targets, pos_weights, neg_weights, s)
    }

    /// The updates of a batch already validated (`pairs` pairs) with its
    /// targets; checks the weights before touching any state.
    fn adjust_checked(
        &self,
        b: &Batch<'_>,
        pairs: usize,
        targets: &Targets,
        pos_weights: &[f32],
        neg_weights: &[f32],
        s: &mut Scratch,
    ) -> Result<(), ShardError> {
        let n = self.spec.model.negative as usize;
        if pos_weights.len() != pairs {
            return Err(invalid(format!(
                "field `pos_weights`: {} weights for {pairs} pairs",
                pos_weights.len()
            )));
        }
        if neg_weights.len() != pairs * n {
            return Err(invalid(format!(
                "field `neg_weights`: {} weights for {pairs} pairs × {n} negatives",
                neg_weights.len()
            )));
        }
        for (field, w) in [("pos_weights", pos_weights), ("neg_weights", neg_weights)] {
            if let Some(i) = w.iter().position(|x| !x.is_finite()) {
                return Err(invalid(format!(
                    "field `{field}`: weight {i} is not finite ({})",
                    w[i]
                )));
            }
        }
        let cols = self.spec.cols();
        s.u_rows.resize(b.inputs.len() * cols, 0.0);
        s.u_delta.clear();
        s.u_delta.resize(b.inputs.len() * cols, 0.0);
        s.v_delta.resize(cols, 0.0);
        s.dots.clear();
        for (&g_pos, g_neg) in pos_weights.iter().zip(neg_weights.chunks_exact(n.max(1))) {
            s.dots.push(g_pos);
            s.dots.extend_from_slice(&g_neg[..n]);
        }
        adjust_loop(
            AdjustWork {
                u: &self.u,
                v: &self.v,
                inputs: b.inputs,
                input_scale: &targets.input_scale,
                plan: &targets.plan,
                groups: &targets.groups,
                weights: &s.dots,
                cap: targets.cap,
            },
            &mut s.u_rows,
            &mut s.u_delta,
            &mut s.v_delta,
        );
        self.stats.adjust_calls.fetch_add(1, Relaxed);
        self.stats.pairs_adjusted.fetch_add(pairs as u64, Relaxed);
        Ok(())
    }

    fn check_targets(&self, b: &Batch<'_>, t: &Targets, pairs: usize) -> Result<(), ShardError> {
        let per_pair = self.spec.model.negative as usize + 1;
        if t.fingerprint != self.fingerprint
            || t.seed != b.seed
            || t.ids.len() != pairs * per_pair
            || t.context_counts != b.context_counts
            || t.inputs != b.inputs
        {
            return Err(invalid(format!(
                "targets drawn for model {:016x} seed {} ({} ids) do not belong to this batch \
                 (model {:016x}, seed {}, {pairs} pairs)",
                t.fingerprint,
                t.seed,
                t.ids.len(),
                self.fingerprint,
                b.seed
            )));
        }
        Ok(())
    }

    /// The output-side words of every dot product of `b`, in request order:
    /// per (input, output) pair, the output word, then its negatives drawn
    /// from the batch seed (paper Fig. 5 line 7). `dotprod` and `adjust` both
    /// get their targets from here (`adjust` via the cache when it can), so
    /// they use identical negatives. `b` must be validated.
    fn draw(&self, b: &Batch<'_>, t: &mut Targets) {
        let n = self.spec.model.negative as usize;
        t.negs.resize(n, 0);
        t.ids.clear();
        t.ids.reserve(b.outputs.len() * (n + 1));
        let mut rng = seeds::rng(b.seed);
        for &w_out in b.outputs {
            self.sampler.negatives(&mut rng, w_out, &mut t.negs);
            t.ids.push(w_out);
            t.ids.extend_from_slice(&t.negs);
        }
        t.group(b.inputs, b.context_counts, n + 1);
        t.fingerprint = self.fingerprint;
        t.seed = b.seed;
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

/// Reads the u rows of every input position into `u_rows`.
#[inline(always)]
fn read_input_rows(u: &HogwildMatrix, inputs: &[u32], u_rows: &mut [f32]) {
    let cols = u.cols();
    for (i, (&w_in, row)) in inputs.iter().zip(u_rows.chunks_exact_mut(cols)).enumerate() {
        if let Some(&ahead) = inputs.get(i + PREFETCH_AHEAD) {
            u.prefetch_row(ahead as usize);
        }
        u.read_row(w_in as usize, row);
    }
}

/// What [`dotprod_loop`] works on: a validated batch's rows and grouped targets.
struct DotprodWork<'a> {
    u: &'a HogwildMatrix,
    v: &'a HogwildMatrix,
    inputs: &'a [u32],
    plan: &'a [(u32, u32)],
    groups: &'a [(u32, u32)],
    u_rows: &'a mut [f32],
    dots: &'a mut [f32],
}

/// The dot products of a validated batch, into `dots` in request order, one
/// visit per distinct output row. Multiversioned: the kernels inline into a
/// clone compiled for the best SIMD the CPU has, chosen at run time (the
/// `Avx` kernels where the clone has AVX, see `colonnade_common::kernels`).
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
fn dotprod_loop<'a>(work: DotprodWork<'a>) {
    match_target! {
        // SAFETY: this arm is compiled only into clones for CPUs with AVX.
        "x86_64+avx" => dotprod_body(unsafe { Avx::new_unchecked() }, work),
        _ => dotprod_body(Portable, work),
    }
}

#[inline(always)]
fn dotprod_body<K: Simd>(k: K, work: DotprodWork<'_>) {
    let DotprodWork {
        u,
        v,
        inputs,
        plan,
        groups,
        u_rows,
        dots,
    } = work;
    let cols = u.cols();
    read_input_rows(u, inputs, u_rows);
    let u_rows = &*u_rows;
    let mut start = 0usize;
    for (g, &(x, end)) in groups.iter().enumerate() {
        if let Some(&(ahead, _)) = groups.get(g + PREFETCH_AHEAD) {
            v.prefetch_row(ahead as usize);
        }
        let end = end as usize;
        v.with_row(x as usize, |row| {
            for &(t, p) in &plan[start..end] {
                let p = p as usize;
                dots[t as usize] = k.dot(&u_rows[p * cols..(p + 1) * cols], row);
            }
        });
        start = end;
    }
}

/// The scale of a row's summed update when it takes part in `k` dot products
/// of one minibatch: 1 up to `cap` (see [`row_step_cap`]), then `cap / k`.
#[inline]
pub fn row_step_scale(k: u64, cap: u64) -> f32 {
    if k > cap {
        (cap as f64 / k as f64) as f32
    } else {
        1.0
    }
}

/// Per input position, the scale of its Δu: an input word's dot products are
/// counted over all its positions in the batch (`context_counts[p]` pairs of
/// `per_pair` dot products each), so a word at many positions is capped as
/// one row. `keys` is scratch.
fn input_step_scales(
    inputs: &[u32],
    context_counts: &[u32],
    per_pair: u64,
    cap: u64,
    keys: &mut Vec<u64>,
    scale: &mut Vec<f32>,
) {
    keys.clear();
    keys.extend(
        inputs
            .iter()
            .enumerate()
            .map(|(p, &w)| (u64::from(w) << 32) | p as u64),
    );
    keys.sort_unstable();
    scale.clear();
    scale.resize(inputs.len(), 1.0);
    for run in keys.chunk_by(|a, b| a >> 32 == b >> 32) {
        let pairs: u64 = run
            .iter()
            .map(|&key| u64::from(context_counts[key as u32 as usize]))
            .sum();
        let s = row_step_scale(pairs * per_pair, cap);
        for &key in run {
            scale[key as u32 as usize] = s;
        }
    }
}

/// What [`adjust_loop`] reads: a validated batch's rows, grouped targets and
/// weights (per dot product, in request order).
struct AdjustWork<'a> {
    u: &'a HogwildMatrix,
    v: &'a HogwildMatrix,
    inputs: &'a [u32],
    /// Per input position: the scale of its Δu.
    input_scale: &'a [f32],
    plan: &'a [(u32, u32)],
    groups: &'a [(u32, u32)],
    weights: &'a [f32],
    /// See [`row_step_cap`].
    cap: u64,
}

/// The updates of a validated batch (see [`Model::adjust`]). Each output
/// row's Δv and each input word's Δu is scaled by [`row_step_scale`] of its
/// dot-product count. Multiversioned like [`dotprod_loop`].
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
fn adjust_loop<'a>(
    work: AdjustWork<'a>,
    u_rows: &'a mut [f32],
    u_delta: &'a mut [f32],
    v_delta: &'a mut [f32],
) {
    let AdjustWork {
        u,
        v,
        inputs,
        input_scale,
        plan,
        groups,
        weights,
        cap,
    } = work;
    let k = Portable; // adjust only needs axpy, which LLVM vectorizes fully
    let cols = u.cols();
    read_input_rows(u, inputs, u_rows);
    let u_rows = &*u_rows;
    let mut start = 0usize;
    for (g, &(x, end)) in groups.iter().enumerate() {
        if let Some(&(ahead, _)) = groups.get(g + PREFETCH_AHEAD) {
            v.prefetch_row(ahead as usize);
        }
        let end = end as usize;
        let scale = row_step_scale((end - start) as u64, cap);
        v.with_row_mut(x as usize, |row| {
            v_delta.fill(0.0);
            for &(t, p) in &plan[start..end] {
                let (g, p) = (weights[t as usize], p as usize);
                k.axpy(g, row, &mut u_delta[p * cols..(p + 1) * cols]);
                k.axpy(g, &u_rows[p * cols..(p + 1) * cols], v_delta);
            }
            // scale · Δv, exact when the scale is 1
            k.axpy(scale, &*v_delta, row);
        });
        start = end;
    }
    for ((&w_in, delta), &scale) in inputs
        .iter()
        .zip(u_delta.chunks_exact_mut(cols))
        .zip(input_scale)
    {
        if scale != 1.0 {
            delta.iter_mut().for_each(|d| *d *= scale);
        }
        u.add_row(w_in as usize, delta);
    }
}

/// All models this shard holds, keyed by fingerprint.
#[derive(Default)]
pub struct ShardCore {
    models: DashMap<u64, Arc<Model>>,
    /// Refuse models whose matrices would exceed this many bytes.
    pub max_model_bytes: Option<u64>,
}

/// What `create_model` did.
#[derive(Debug, PartialEq, Eq)]
pub struct Created {
    pub fingerprint: u64,
    pub existed: bool,
}

impl ShardCore {
    pub fn new(max_model_bytes: Option<u64>) -> Self {
        Self {
            models: DashMap::new(),
            max_model_bytes,
        }
    }

    /// Creates the model, or attaches to it if this shard already holds the same
    /// model with the same columns (its trained state is kept).
    pub fn create_model(&self, spec: ShardSpec, counts: &[u64]) -> Result<Created, ShardError> {
        let fingerprint = spec.model.fingerprint();
        if let Some(existing) = self.admit(&spec)? {
            return Ok(existing);
        }
        let model = Arc::new(Model::new(spec.clone(), counts)?);
        match self.models.entry(fingerprint) {
            Entry::Occupied(e) => attach(e.get(), &spec),
            Entry::Vacant(e) => {
                e.insert(model);
                Ok(Created {
                    fingerprint,
                    existed: false,
                })
            }
        }
    }

    /// Whether `spec` may be created here, checked before its counts are
    /// received: the spec is valid and fits `max_model_bytes`; `Some` when
    /// this shard already holds the model (attaching to it is allowed).
    pub fn admit(&self, spec: &ShardSpec) -> Result<Option<Created>, ShardError> {
        spec.validate()?;
        if let Some(existing) = self.models.get(&spec.model.fingerprint()) {
            return attach(&existing, spec).map(Some);
        }
        if let Some(limit) = self.max_model_bytes {
            if spec.matrix_bytes() > limit {
                return Err(ShardError::ResourceExhausted(format!(
                    "model needs {} bytes for {} words × ({} columns + a row lock) × 2 matrices, over this shard's limit of {limit}",
                    spec.matrix_bytes(),
                    spec.model.vocab_size,
                    spec.cols()
                )));
            }
        }
        Ok(None)
    }

    pub fn model(&self, fingerprint: u64) -> Result<Arc<Model>, ShardError> {
        self.models
            .get(&fingerprint)
            .map(|m| Arc::clone(&m))
            .ok_or_else(|| {
                let held: Vec<String> = self
                    .models
                    .iter()
                    .map(|m| format!("{:016x}", m.key()))
                    .collect();
                ShardError::FailedPrecondition(format!(
                "this shard holds no model with fingerprint {fingerprint:016x} (it holds: [{}]); \
                 was it created with another vocabulary or configuration, or restarted?",
                held.join(", ")
            ))
            })
    }

    pub fn models(&self) -> Vec<Arc<Model>> {
        let mut all: Vec<_> = self.models.iter().map(|m| Arc::clone(&m)).collect();
        all.sort_by_key(|m| m.fingerprint);
        all
    }

    pub fn drop_model(&self, fingerprint: u64) -> bool {
        self.models.remove(&fingerprint).is_some()
    }
}

fn attach(existing: &Model, spec: &ShardSpec) -> Result<Created, ShardError> {
    if existing.spec != *spec {
        return Err(ShardError::FailedPrecondition(format!(
            "this shard already holds model {:016x} with columns [{}, {}), asked for [{}, {})",
            existing.fingerprint,
            existing.spec.col_start,
            existing.spec.col_end,
            spec.col_start,
            spec.col_end
        )));
    }
    Ok(Created {
        fingerprint: existing.fingerprint,
        existed: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cols: std::ops::Range<u32>) -> ShardSpec {
        ShardSpec {
            model: ModelSpec {
                vocab_fingerprint: 7,
                vocab_size: 6,
                dim: 8,
                negative: 3,
                sampling_power: 0.75,
                init_seed: 5,
            },
            col_start: cols.start,
            col_end: cols.end,
        }
    }

    const COUNTS: [u64; 6] = [50, 40, 30, 20, 10, 5];

    fn snapshot(m: &Model) -> (Vec<f32>, Vec<f32>) {
        let (mut u, mut v) = (Vec::new(), Vec::new());
        m.read_rows(Matrix::Input, 0, 6, &mut u).expect("rows");
        m.read_rows(Matrix::Output, 0, 6, &mut v).expect("rows");
        (u, v)
    }

    #[test]
    fn bad_requests_leave_state_untouched() {
        let core = ShardCore::new(None);
        let created = core.create_model(spec(0..8), &COUNTS).expect("create");
        let m = core.model(created.fingerprint).expect("model");
        let (inputs, ctx, outs) = ([0u32, 1], [2u32, 1], [1u32, 2, 3]);
        let good = Batch {
            fingerprint: m.fingerprint,
            seed: 1,
            inputs: &inputs,
            context_counts: &ctx,
            outputs: &outs,
        };
        let mut s = Scratch::default();
        m.adjust(&good, &[0.1; 3], &[-0.1; 9], &mut s)
            .expect("adjust");
        let before = snapshot(&m);
        let bad_id = [1u32, 2, 6];
        let cases: Vec<(Batch<'_>, usize, usize, &str)> = vec![
            (
                Batch {
                    outputs: &bad_id,
                    ..good
                },
                3,
                9,
                "`outputs`",
            ),
            (
                Batch {
                    context_counts: &[2],
                    ..good
                },
                3,
                9,
                "`context_counts`",
            ),
            (
                Batch {
                    context_counts: &[2, 2],
                    ..good
                },
                3,
                9,
                "`outputs`",
            ),
            (good, 2, 9, "`pos_weights`"),
            (good, 3, 8, "`neg_weights`"),
            (
                Batch {
                    fingerprint: 1,
                    ..good
                },
                3,
                9,
                "fingerprint",
            ),
        ];
        for (batch, np, nn, field) in cases {
            let e = m
                .adjust(&batch, &vec![0.1; np], &vec![-0.1; nn], &mut s)
                .expect_err(field);
            assert!(e.to_string().contains(field), "{e} should name {field}");
            let (mut p, mut n) = (Vec::new(), Vec::new());
            if np == 3 && nn == 9 {
                assert!(m.dotprod(&batch, &mut s, &mut p, &mut n).is_err());
            }
        }
        let e = m
            .adjust(&good, &[0.1, f32::NAN, 0.1], &[-0.1; 9], &mut s)
            .expect_err("nan");
        assert!(e.to_string().contains("not finite"));
        assert_eq!(snapshot(&m), before);
    }

    #[test]
    fn adjust_uses_dotprods_targets_only_when_they_match_the_batch() {
        let fresh = || {
            let core = ShardCore::new(None);
            let fp = core
                .create_model(spec(0..8), &COUNTS)
                .expect("create")
                .fingerprint;
            core.model(fp).expect("model")
        };
        let (inputs, ctx) = ([0u32, 1], [2u32, 1]);
        let batch = |outs: &'static [u32], fp| Batch {
            fingerprint: fp,
            seed: 9,
            inputs: &inputs,
            context_counts: &ctx,
            outputs: outs,
        };
        let mut s = Scratch::default();
        let (mut p, mut n) = (Vec::new(), Vec::new());
        let (w_pos, w_neg) = ([0.3f32, -0.2, 0.1], [-0.1f32; 9]);
        // Cached (dotprod first) and drawn again (adjust alone): same update.
        let (a, b) = (fresh(), fresh());
        a.dotprod(&batch(&[1, 2, 3], a.fingerprint), &mut s, &mut p, &mut n)
            .expect("dotprod");
        a.adjust(&batch(&[1, 2, 3], a.fingerprint), &w_pos, &w_neg, &mut s)
            .expect("adjust");
        b.adjust(&batch(&[1, 2, 3], b.fingerprint), &w_pos, &w_neg, &mut s)
            .expect("adjust");
        assert_eq!(snapshot(&a), snapshot(&b));
        assert_ne!(
            snapshot(&a),
            snapshot(&fresh()),
            "the adjust changed the model"
        );
        // A batch reusing the seed with other outputs must not get the cached
        // targets of the first one.
        let (c, d) = (fresh(), fresh());
        c.dotprod(&batch(&[1, 2, 3], c.fingerprint), &mut s, &mut p, &mut n)
            .expect("dotprod");
        c.adjust(&batch(&[4, 5, 2], c.fingerprint), &w_pos, &w_neg, &mut s)
            .expect("adjust");
        d.adjust(&batch(&[4, 5, 2], d.fingerprint), &w_pos, &w_neg, &mut s)
            .expect("adjust");
        assert_eq!(snapshot(&c), snapshot(&d));
    }

    #[test]
    fn create_is_idempotent_and_guards_columns() {
        let core = ShardCore::new(None);
        let a = core.create_model(spec(0..4), &COUNTS).expect("create");
        assert!(!a.existed);
        let b = core.create_model(spec(0..4), &COUNTS).expect("attach");
        assert_eq!(
            b,
            Created {
                fingerprint: a.fingerprint,
                existed: true
            }
        );
        assert!(matches!(
            core.create_model(spec(4..8), &COUNTS),
            Err(ShardError::FailedPrecondition(_))
        ));
        assert!(matches!(
            core.create_model(spec(0..9), &COUNTS),
            Err(ShardError::InvalidArgument(_))
        ));
        let limited = ShardCore::new(Some(10));
        assert!(matches!(
            limited.create_model(spec(0..4), &COUNTS),
            Err(ShardError::ResourceExhausted(_))
        ));
        assert!(core.drop_model(a.fingerprint));
        assert!(core.model(a.fingerprint).is_err());
    }
}
