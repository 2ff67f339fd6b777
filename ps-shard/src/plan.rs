//! The plan of one call on a model ([`Plan`]): the output-side word of
//! every dot product of its minibatches (negatives drawn from each
//! minibatch's seed), grouped by output row so the loops visit each row
//! once, the wire order its dot products and weights travel in, and the
//! step scales of the row step cap ([`row_step_cap`]).

use colonnade_common::model::Objective;
use colonnade_common::sampler::AliasSampler;
use colonnade_common::seeds;
use colonnade_proto::Minibatch;

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

/// The widest digit [`sort_by_row`] sorts on: 2,048 counters a digit, 8 KiB,
/// within L1.
const DIGIT_BITS: u32 = 11;

/// Sorts `keys` (row << 32 | index) stably by row: an LSD radix sort over
/// the bits the keys' rows use (their bitwise or, so no bound is trusted),
/// in as few digits of at most [`DIGIT_BITS`] as they need (a 10K-word
/// vocabulary two of 7 bits, a 69K-word one two of 9, a 20M-word one three
/// of 9, where whole bytes would take 3 and 4 passes), skipping digits that
/// are the same in every key. `tmp` is its second buffer, kept by the caller
/// from call to call, so that a steady-state `dotprod` allocates nothing
/// for the sort (`ps-shard/tests/allocations.rs`).
pub(crate) fn sort_by_row(keys: &mut Vec<u64>, tmp: &mut Vec<u64>) {
    const MAX_DIGITS: usize = u32::BITS.div_ceil(DIGIT_BITS) as usize;
    let n = keys.len();
    let rows_or = (keys.iter().fold(0, |a, &k| a | k) >> 32) as u32;
    let bits = (u32::BITS - rows_or.leading_zeros()).max(1);
    let digits = bits.div_ceil(DIGIT_BITS);
    let width = bits.div_ceil(digits);
    let (digits, buckets, mask) = (digits as usize, 1usize << width, (1u32 << width) - 1);
    let mut counts = [[0u32; 1 << DIGIT_BITS]; MAX_DIGITS];
    for &k in keys.iter() {
        let row = (k >> 32) as u32;
        for (d, c) in counts[..digits].iter_mut().enumerate() {
            c[((row >> (width as usize * d)) & mask) as usize] += 1;
        }
    }
    tmp.clear();
    tmp.resize(n, 0);
    for (d, c) in counts[..digits].iter_mut().enumerate() {
        let c = &mut c[..buckets];
        if c.iter().any(|&x| x as usize == n) {
            continue; // every key has the same digit here (or there are none)
        }
        let mut sum = 0u32;
        for x in c.iter_mut() {
            (*x, sum) = (sum, sum + *x);
        }
        let shift = 32 + width as usize * d;
        for &k in keys.iter() {
            let b = ((k >> shift) as u32 & mask) as usize;
            tmp[c[b] as usize] = k;
            c[b] += 1;
        }
        std::mem::swap(keys, tmp);
    }
}

/// The plan of one call on a model: its minibatches (all of one model)
/// together, one deferred update. It holds the output-side word of every
/// dot product (per example its positive word, then `negative` negatives
/// drawn from its minibatch's seed: request order) and the same dot
/// products grouped by output row, in ascending row order (ties in request
/// order), so that the loops visit and lock each distinct output row once
/// per call however often it occurs (the negatives repeat the frequent words
/// many times, and more so over several minibatches). An example is a
/// skip-gram pair (its positive: the context word) or a CBOW input position
/// (its positive: the position's own word).
///
/// The dot products and weights of a call travel in its *wire order*,
/// which every shard of the model computes alike: first each example's
/// positive, in request order, then every negative in the order of the
/// plan (ascending output row). A dot product's wire index says where its
/// value and weight are; the negatives, nine in ten at window 5 and
/// negative 5, are then read and written in sequence by the loops.
#[derive(Default)]
pub struct Plan {
    pub(crate) fingerprint: u64,
    /// The seed of the call's first minibatch and its number of minibatches.
    pub(crate) seed: u64,
    pub(crate) minibatches: usize,
    pub(crate) objective: Objective,
    /// The call's input positions, concatenated over its minibatches: each
    /// one's word, its count of context words and (CBOW) its context words.
    pub(crate) inputs: Vec<u32>,
    pub(crate) context_counts: Vec<u32>,
    pub(crate) contexts: Vec<u32>,
    /// Per minibatch: its seed, its input positions and its outputs (for
    /// [`Plan::fit`]).
    parts: Vec<(u64, u32, u32)>,
    /// The output-side word of every dot product, request order.
    pub(crate) ids: Vec<u32>,
    /// Examples in the call.
    pub(crate) examples: usize,
    /// Per dot product (request order): its input position, and its example
    /// when it is a positive (`u32::MAX` for a negative).
    dot_info: Vec<(u32, u32)>,
    /// Sort keys: output row << 32 | dot-product index, and the radix
    /// sort's second buffer.
    keys: Vec<u64>,
    keys_tmp: Vec<u64>,
    /// The dot products sorted by output row (ties in request order), each
    /// as (wire index, input position).
    pub(crate) plan: Vec<(u32, u32)>,
    /// Runs of `plan` sharing one output row: (row, end of the run in `plan`).
    pub(crate) groups: Vec<(u32, u32)>,
    /// The call's [`row_step_cap`] (the largest of its minibatches').
    pub(crate) cap: u64,
    /// Input positions sorted by word: word << 32 | position.
    input_keys: Vec<u64>,
    /// Per input row written: the scale of its Δu (see
    /// [`input_step_scales`]): skip-gram, per input position; CBOW, per
    /// context word entry (each gets its position's Δu).
    pub(crate) input_scale: Vec<f32>,
    /// Per input position: the learning rate of its minibatch.
    pub(crate) position_alpha: Vec<f32>,
    /// Per wire index: the learning rate of its dot product's minibatch.
    pub(crate) alphas: Vec<f32>,
}

impl Plan {
    /// The positive word of each example of `mb`: skip-gram, the context
    /// words; CBOW, the input positions' own words.
    fn positives(mb: &Minibatch) -> &[u32] {
        if mb.objective.is_cbow() {
            &mb.inputs
        } else {
            &mb.outputs
        }
    }

    /// Draws the targets of the call `mbs` (validated, all of one
    /// objective) for model `fingerprint`: per example, its positive word,
    /// then `negative` negatives drawn from its minibatch's seed (paper
    /// Fig. 5 line 7), and plans them.
    pub(crate) fn draw(
        &mut self,
        sampler: &AliasSampler,
        negative: usize,
        fingerprint: u64,
        mbs: &[Minibatch],
    ) {
        self.ids.clear();
        self.inputs.clear();
        self.context_counts.clear();
        self.contexts.clear();
        self.parts.clear();
        self.position_alpha.clear();
        self.objective = mbs.first().map_or(Objective::SkipGram, |mb| mb.objective);
        for mb in mbs {
            let positives = Self::positives(mb);
            sampler.targets(&mut seeds::rng(mb.seed), positives, negative, &mut self.ids);
            self.inputs.extend_from_slice(&mb.inputs);
            self.context_counts.extend_from_slice(&mb.context_counts);
            if mb.objective.is_cbow() {
                self.contexts.extend_from_slice(&mb.outputs);
            }
            self.parts
                .push((mb.seed, mb.inputs.len() as u32, mb.outputs.len() as u32));
            self.position_alpha
                .extend(std::iter::repeat_n(mb.alpha, mb.inputs.len()));
        }
        self.group(negative + 1);
        self.fingerprint = fingerprint;
        self.seed = mbs.first().map_or(0, |mb| mb.seed);
        self.minibatches = mbs.len();
    }

    /// Whether this plan was drawn for the call `mbs` on a model with
    /// `fingerprint` and `negative` negatives: same objective, seeds and
    /// positives, hence the same negatives; same inputs (and, CBOW, context
    /// words), hence the same input rows and step scales; same learning
    /// rates. A call it fits is identical in content to the validated one
    /// it was drawn for.
    pub(crate) fn fit(&self, fingerprint: u64, negative: usize, mbs: &[Minibatch]) -> bool {
        let per_pair = negative + 1;
        let examples: usize = mbs.iter().map(Minibatch::examples).sum();
        if self.fingerprint != fingerprint
            || self.parts.len() != mbs.len()
            || self.ids.len() != examples * per_pair
        {
            return false;
        }
        let (mut position, mut dot) = (0usize, 0usize);
        for (&(seed, inputs, outputs), mb) in self.parts.iter().zip(mbs) {
            let (n_in, n_dots) = (inputs as usize, mb.examples() * per_pair);
            let same = seed == mb.seed
                && mb.objective == self.objective
                && n_in == mb.inputs.len()
                && outputs as usize == mb.outputs.len()
                && self.inputs[position..position + n_in] == mb.inputs[..]
                && self.context_counts[position..position + n_in] == mb.context_counts[..]
                && self.position_alpha[position..position + n_in]
                    .iter()
                    .all(|&a| a.to_bits() == mb.alpha.to_bits())
                && self.ids[dot..dot + n_dots]
                    .iter()
                    .step_by(per_pair)
                    .eq(Self::positives(mb).iter());
            if !same {
                return false;
            }
            position += n_in;
            dot += n_dots;
        }
        !self.objective.is_cbow()
            || self.contexts.len() == mbs.iter().map(|mb| mb.outputs.len()).sum::<usize>()
                && mbs
                    .iter()
                    .flat_map(|mb| &mb.outputs)
                    .eq(self.contexts.iter())
    }

    /// Groups `ids` by output row into `plan` and `groups` (with every dot
    /// product's wire index), and the input rows by word into their step
    /// scales.
    fn group(&mut self, per_pair: usize) {
        let cbow = self.objective.is_cbow();
        let negative = per_pair as u32 - 1;
        self.cap = row_step_cap(&self.context_counts, negative);
        // The input rows a call writes: skip-gram, each position's word
        // (with all its pairs' dot products); CBOW, each context word entry
        // (with its position's 1 + negative).
        let (rows, examples) = if cbow {
            (&self.contexts, None)
        } else {
            (&self.inputs, Some(&self.context_counts[..]))
        };
        input_step_scales(
            rows,
            examples,
            per_pair as u64,
            self.cap,
            &mut self.input_keys,
            &mut self.input_scale,
        );
        // Per dot product, its input position and (positives) its example,
        // found in one pass: the plan below then needs no division.
        self.dot_info.clear();
        let mut example = 0u32;
        for (p, &c) in self.context_counts.iter().enumerate() {
            // A position's examples: CBOW one, skip-gram one per context word.
            let n = if cbow { 1 } else { c };
            for _ in 0..n {
                self.dot_info.push((p as u32, example));
                self.dot_info
                    .extend(std::iter::repeat_n((p as u32, u32::MAX), per_pair - 1));
                example += 1;
            }
        }
        self.examples = example as usize;
        self.keys.clear();
        self.keys.extend(
            self.ids
                .iter()
                .enumerate()
                .map(|(t, &row)| (u64::from(row) << 32) | t as u64),
        );
        // A stable radix sort on the row alone: ties keep request order.
        sort_by_row(&mut self.keys, &mut self.keys_tmp);
        // Two passes over locals: pushing to several vectors of `self` in
        // one loop reloads their lengths and capacities at every key (a
        // store through one might change another's).
        let (keys, dot_info, position_alpha) = (&self.keys, &self.dot_info, &self.position_alpha);
        let alphas = &mut self.alphas;
        alphas.clear();
        alphas.resize(keys.len(), 0.0);
        let mut negatives = self.examples as u32;
        self.plan.clear();
        self.plan.extend(keys.iter().map(|&key| {
            let (p, e) = dot_info[key as u32 as usize];
            let wire = if e == u32::MAX {
                negatives += 1;
                negatives - 1
            } else {
                e
            };
            alphas[wire as usize] = position_alpha[p as usize];
            (wire, p)
        }));
        let groups = &mut self.groups;
        groups.clear();
        let mut end = 0u32;
        for run in keys.chunk_by(|a, b| a >> 32 == b >> 32) {
            end += run.len() as u32;
            groups.push(((run[0] >> 32) as u32, end));
        }
    }

    /// Bytes of its buffers (their capacities): what keeping it costs.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let u32s = self.inputs.capacity()
            + self.context_counts.capacity()
            + self.contexts.capacity()
            + self.ids.capacity();
        let u64s = self.keys.capacity() + self.keys_tmp.capacity() + self.input_keys.capacity();
        let pairs = self.plan.capacity() + self.groups.capacity() + self.dot_info.capacity();
        let f32s =
            self.input_scale.capacity() + self.position_alpha.capacity() + self.alphas.capacity();
        u32s * 4
            + u64s * 8
            + pairs * size_of::<(u32, u32)>()
            + f32s * 4
            + self.parts.capacity() * size_of::<(u64, u32, u32)>()
    }

    /// Dot products planned (examples × (1 + negative)).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Examples in the call: the first `examples()` dot products in wire
    /// order are their positives.
    pub fn examples(&self) -> usize {
        self.examples
    }

    /// (input, output) pairs in the call.
    pub fn pairs(&self) -> u64 {
        self.parts
            .iter()
            .map(|&(_, _, outputs)| u64::from(outputs))
            .sum()
    }

    /// The weights G of the call from its scaled weights (G ÷ α, wire
    /// order, as they travel), into `out`: each times its minibatch's α.
    pub fn weights(&self, scaled: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(scaled.iter().zip(&self.alphas).map(|(&g, &a)| a * g));
    }
}

/// Per input row written (`rows[i]`, its word), the scale of its Δu: a
/// word's dot products are counted over all its entries in the minibatch
/// (`examples[i]` examples of `per_pair` dot products each; one example per
/// entry when `examples` is `None`), so a word written at many entries is
/// capped as one row. `keys` is scratch.
fn input_step_scales(
    rows: &[u32],
    examples: Option<&[u32]>,
    per_pair: u64,
    cap: u64,
    keys: &mut Vec<u64>,
    scale: &mut Vec<f32>,
) {
    keys.clear();
    keys.extend(
        rows.iter()
            .enumerate()
            .map(|(p, &w)| (u64::from(w) << 32) | p as u64),
    );
    keys.sort_unstable();
    scale.clear();
    scale.resize(rows.len(), 1.0);
    for run in keys.chunk_by(|a, b| a >> 32 == b >> 32) {
        let pairs: u64 = run
            .iter()
            .map(|&key| examples.map_or(1, |e| u64::from(e[key as u32 as usize])))
            .sum();
        let s = row_step_scale(pairs * per_pair, cap);
        for &key in run {
            scale[key as u32 as usize] = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sort_by_row;
    use proptest::prelude::*;

    proptest! {
        /// Keys carry their index in the low half, so the stable sort by row
        /// is the plain sort of the whole keys.
        #[test]
        fn sort_by_row_is_a_stable_sort_on_the_row(
            rows in prop::collection::vec(prop_oneof![0u32..300, 0u32..100_000, any::<u32>()], 0..2000)
        ) {
            let mut keys: Vec<u64> =
                rows.iter().enumerate().map(|(t, &r)| (u64::from(r) << 32) | t as u64).collect();
            let mut want = keys.clone();
            want.sort_unstable();
            let mut tmp = vec![7; 3];
            sort_by_row(&mut keys, &mut tmp);
            prop_assert_eq!(keys, want);
        }
    }
}
