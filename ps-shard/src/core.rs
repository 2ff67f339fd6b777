//! The shard's training logic, free of transport: models keyed by fingerprint,
//! `dotprod` and `adjust` over this shard's columns (paper Fig. 5 and 6), and
//! row reads for export. Every request is validated completely before any
//! state is touched, so a rejected request leaves the model unchanged.

use crate::hogwild::HogwildMatrix;
use colonnade_common::init::init_input_row;
use colonnade_common::kernels::{axpy, dot};
use colonnade_common::model::ModelSpec;
use colonnade_common::sampler::AliasSampler;
use colonnade_common::seeds;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// How many rows ahead of use the loops prefetch (hides cache-miss latency on
/// the random rows of negatives and context words).
const PREFETCH_AHEAD: usize = 8;

/// Largest number of negatives per pair a shard accepts.
pub const MAX_NEGATIVE: u32 = 1024;

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

    /// Bytes of the two matrices this spec needs on this shard.
    pub fn matrix_bytes(&self) -> u64 {
        2 * self.model.vocab_size * self.cols() as u64 * 4
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
    pub stats: ModelStats,
}

/// Reusable per-thread buffers, so steady-state requests allocate nothing
/// (paper 6.1.3).
#[derive(Default)]
pub struct Scratch {
    u_row: Vec<f32>,
    v_row: Vec<f32>,
    negs: Vec<u32>,
    /// Per input position: its accumulated Δu.
    u_delta: Vec<f32>,
    /// The output-side word of every dot product, in request order: per pair
    /// its positive word, then its negatives.
    targets: Vec<u32>,
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
        let u = HogwildMatrix::new(rows, cols, |r, row| {
            init_input_row(seed, dim, r as u64, col_start, row)
        });
        let v = HogwildMatrix::new(rows, cols, |_, row| row.fill(0.0));
        Ok(Self {
            fingerprint: spec.model.fingerprint(),
            spec,
            u,
            v,
            sampler,
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
        let n = self.spec.model.negative as usize;
        let cols = self.spec.cols();
        pos.clear();
        neg.clear();
        pos.reserve(pairs);
        neg.reserve(pairs * n);
        scratch.u_row.resize(cols, 0.0);
        scratch.v_row.resize(cols, 0.0);
        self.targets(b, &mut scratch.negs, &mut scratch.targets);
        let targets = &scratch.targets;
        let per_pair = n + 1;
        let mut t = 0;
        for (i, (&w_in, &count)) in b.inputs.iter().zip(b.context_counts).enumerate() {
            if let Some(&next) = b.inputs.get(i + 1) {
                self.u.prefetch_row(next as usize);
            }
            self.u.read_row(w_in as usize, &mut scratch.u_row);
            for _ in 0..count as usize * per_pair {
                if let Some(&ahead) = targets.get(t + PREFETCH_AHEAD) {
                    self.v.prefetch_row(ahead as usize);
                }
                self.v.read_row(targets[t] as usize, &mut scratch.v_row);
                let f = dot(&scratch.u_row, &scratch.v_row);
                if t % per_pair == 0 {
                    pos.push(f);
                } else {
                    neg.push(f);
                }
                t += 1;
            }
        }
        self.stats.dotprod_calls.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Applies Δu_s(w_I) += G·v_s(x) and Δv_s(x) += G·u_s(w_I) for every dot
    /// product of the batch (paper Fig. 6), every vector read at its value at
    /// the start of the call (paper 5.1). Done in three passes, so no per-row
    /// map is needed: (1) Δu per input position from v, nothing written;
    /// (2) v += G·u, u still untouched; (3) u += Δu.
    pub fn adjust(
        &self,
        b: &Batch<'_>,
        pos_weights: &[f32],
        neg_weights: &[f32],
        s: &mut Scratch,
    ) -> Result<(), ShardError> {
        let pairs = self.validate(b)?;
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
        // Pass 1 reads only start-of-call values: Δu for every input position
        // from v. Nothing is written.
        s.u_delta.clear();
        s.u_delta.resize(b.inputs.len() * cols, 0.0);
        s.u_row.resize(cols, 0.0);
        s.v_row.resize(cols, 0.0);
        self.targets(b, &mut s.negs, &mut s.targets);
        let per_pair = n + 1;
        let weight = |t: usize| {
            let (pair, k) = (t / per_pair, t % per_pair);
            if k == 0 {
                pos_weights[pair]
            } else {
                neg_weights[pair * n + k - 1]
            }
        };
        let mut t = 0;
        for (i, &count) in b.context_counts.iter().enumerate() {
            let delta = &mut s.u_delta[i * cols..(i + 1) * cols];
            for _ in 0..count as usize * per_pair {
                if let Some(&ahead) = s.targets.get(t + PREFETCH_AHEAD) {
                    self.v.prefetch_row(ahead as usize);
                }
                self.v.read_row(s.targets[t] as usize, &mut s.v_row);
                axpy(weight(t), &s.v_row, delta);
                t += 1;
            }
        }
        // Pass 2: v(x) += G·u(w_I). u is still at its start-of-call value.
        let mut t = 0;
        for (&w_in, &count) in b.inputs.iter().zip(b.context_counts) {
            self.u.read_row(w_in as usize, &mut s.u_row);
            for _ in 0..count as usize * per_pair {
                if let Some(&ahead) = s.targets.get(t + PREFETCH_AHEAD) {
                    self.v.prefetch_row(ahead as usize);
                }
                self.v
                    .add_scaled_row(s.targets[t] as usize, weight(t), &s.u_row);
                t += 1;
            }
        }
        // Pass 3: u(w_I) += Δu.
        for (i, &w_in) in b.inputs.iter().enumerate() {
            self.u
                .add_row(w_in as usize, &s.u_delta[i * cols..(i + 1) * cols]);
        }
        self.stats.adjust_calls.fetch_add(1, Relaxed);
        self.stats.pairs_adjusted.fetch_add(pairs as u64, Relaxed);
        Ok(())
    }

    /// The output-side words of every dot product of `b`, in request order:
    /// per (input, output) pair, the output word, then its negatives drawn
    /// from the batch seed (paper Fig. 5 line 7). `dotprod` and `adjust` both
    /// call this, so they regenerate identical negatives.
    fn targets(&self, b: &Batch<'_>, negs: &mut Vec<u32>, out: &mut Vec<u32>) {
        let n = self.spec.model.negative as usize;
        negs.resize(n, 0);
        out.clear();
        out.reserve(b.outputs.len() * (n + 1));
        let mut rng = seeds::rng(b.seed);
        for &w_out in b.outputs {
            self.sampler.negatives(&mut rng, w_out, negs);
            out.push(w_out);
            out.extend_from_slice(negs);
        }
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
        spec.validate()?;
        let fingerprint = spec.model.fingerprint();
        if let Some(existing) = self.models.get(&fingerprint) {
            return attach(&existing, &spec);
        }
        if let Some(limit) = self.max_model_bytes {
            if spec.matrix_bytes() > limit {
                return Err(ShardError::ResourceExhausted(format!(
                    "model needs {} bytes for {} words × {} columns × 2 matrices, over this shard's limit of {limit}",
                    spec.matrix_bytes(),
                    spec.model.vocab_size,
                    spec.cols()
                )));
            }
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
