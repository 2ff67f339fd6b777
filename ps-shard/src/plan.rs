//! The plan of one call on a model ([`Plan`]): the output-side word of
//! every dot product of its minibatches (negatives from the call's
//! systematic sample), grouped by output row so the loops visit each row
//! once, the wire order its dot products and weights travel in, and the
//! step scales of the row step cap ([`row_step_cap`]).

use crate::stale::Pending;
use colonnade_common::model::Objective;
use colonnade_common::sampler::{Deal, NegativeSampler};
use colonnade_proto::Minibatch;
use std::sync::Arc;

mod cap;
pub use cap::{
    call_step_cap, cbow_context_load, row_step_cap, row_step_scale, skip_gram_call_step_cap,
    CALL_CAP_MINIBATCHES, ROW_STEP_CAP,
};

/// The widest digit [`sort_by_row`] sorts on: 2,048 counters a digit, 8 KiB,
/// within L1.
const DIGIT_BITS: u32 = 11;

/// The fewest keys [`sort_by_row`] sorts by radix.
const RADIX_FROM: usize = 128;

/// The context words of a position [`Plan::spread`] writes in one
/// fixed-size copy (a window of radius 8 or less); a position with more is
/// written word by word.
const SPREAD_WIDTH: usize = 16;

/// Sorts `keys` (row << 32 | index) stably by row: an LSD radix sort over
/// the bits the keys' rows use (their bitwise or, so no bound is trusted),
/// in as few digits of at most [`DIGIT_BITS`] as they need (a 10K-word
/// vocabulary two of 7 bits, a 69K-word one two of 9, a 20M-word one three
/// of 9, where whole bytes would take 3 and 4 passes), skipping digits that
/// are the same in every key. `tmp` is its second buffer, kept by the caller
/// from call to call, so that a steady-state `dotprod` allocates nothing
/// for the sort (`ps-shard/tests/allocations.rs`). Below
/// [`RADIX_FROM`] keys (a call of a few small minibatches), where zeroing
/// and summing the digits' counters would cost more than the keys, it
/// sorts the keys whole instead: the same order, as every caller's indices
/// are distinct.
pub(crate) fn sort_by_row(keys: &mut Vec<u64>, tmp: &mut Vec<u64>) {
    const MAX_DIGITS: usize = u32::BITS.div_ceil(DIGIT_BITS) as usize;
    let n = keys.len();
    if n < RADIX_FROM {
        keys.sort_unstable();
        return;
    }
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
/// together, one deferred update. Every example (a skip-gram pair: its
/// positive is the context word; a CBOW input position: its position's own
/// word) has 1 + `negative` dot products: its positive, and `negative`
/// negatives dealt to it from the call's systematic sample
/// (`colonnade_common::sampler`), drawn from the seed of the call's first
/// minibatch. The plan groups the dot products by output row, in ascending
/// row order (a row's positives first, in example order, then its
/// negatives), so that the loops visit and lock each distinct output row
/// once per call however often it occurs; the negatives come out of the
/// sample already sorted, and only the positives are sorted here.
///
/// With shared negatives (skip-gram, [`Minibatch::shared_negatives`]) an
/// example is an input position, as in CBOW: its positive is its own word
/// and its `negative` negatives are shared by its context words (word2vec
/// C's orientation: each context word's input row against the position's
/// output rows, Ji et al. 2016). Each of its 1 + `negative` targets is
/// planned once and then spread into one dot product per context word
/// ([`Plan::spread`]), so a call draws, deals and sorts `negative` targets
/// per position instead of per pair, and visits 1 + `negative` output rows
/// per position instead of (1 + `negative`) per pair.
///
/// The dot products and weights of a call travel in its *wire order*, which
/// every shard of the model computes alike: first each example's positive,
/// in request order, then every negative in the order of the sample
/// (ascending output row). A dot product's wire index says where its value
/// and weight are; the negatives, five in six at negative 5, are then read
/// and written in sequence by the loops. A negative equal to its example's
/// positive word is computed but carries no update (its α in the plan is
/// 0), as word2vec skips it. With shared negatives each target's dot
/// products, one per context word of its position in context order, stand
/// where its one dot product would: the positives are then the call's pairs
/// in request order, as in skip-gram.
#[derive(Default)]
pub struct Plan {
    pub(crate) fingerprint: u64,
    /// The seed of the call's first minibatch and its number of minibatches.
    pub(crate) seed: u64,
    pub(crate) minibatches: usize,
    pub(crate) objective: Objective,
    /// Skip-gram with negatives shared by a position's context words.
    pub(crate) shared: bool,
    /// Dot products per example: 1 + negative.
    per_pair: usize,
    /// Dot products in the call.
    dots: usize,
    /// The call's input positions, concatenated over its minibatches: each
    /// one's word, its count of context words and (CBOW) its context words.
    pub(crate) inputs: Vec<u32>,
    pub(crate) context_counts: Vec<u32>,
    pub(crate) contexts: Vec<u32>,
    /// Per minibatch: its seed, its input positions and its outputs (for
    /// [`Plan::fit`]).
    parts: Vec<(u64, u32, u32)>,
    /// Per example: its positive word and its input position.
    positives: Vec<u32>,
    example_position: Vec<u32>,
    /// The positives' sort keys: row << 32 | example, and the radix sort's
    /// second buffer.
    keys: Vec<u64>,
    keys_tmp: Vec<u64>,
    /// Per example: its positive word and input position, side by side (the
    /// deal reads both at scattered examples).
    example_info: Vec<(u32, u32)>,
    /// The negatives in wire order: (row, input position).
    negatives: Vec<(u32, u32)>,
    /// The dot products sorted by output row, each as (wire index, input
    /// position).
    pub(crate) plan: Vec<(u32, u32)>,
    /// Runs of `plan` sharing one output row: (row, end of the run in `plan`).
    pub(crate) groups: Vec<(u32, u32)>,
    /// The call's [`row_step_cap`].
    pub(crate) cap: u64,
    /// Input positions sorted by word: word << 32 | position.
    input_keys: Vec<u64>,
    /// Per input row written: the scale of its Δu (see
    /// [`input_loads`], [`crate::stale`]): skip-gram (either way), per
    /// input slot, one per distinct word ([`Plan::slots`]); CBOW, per context
    /// word entry (each gets its position's Δu).
    pub(crate) input_scale: Vec<f32>,
    /// Skip-gram: per input row entry (a position's word; with shared
    /// negatives, a context word entry), its slot: the index of its word
    /// among the call's distinct input words, whose u row the loops read
    /// and write once per call.
    slot_of: Vec<u32>,
    /// The call's distinct input words in ascending order (skip-gram: one
    /// per slot) and the dot products each takes part in over the call.
    slot_words: Vec<u32>,
    slot_loads: Vec<u64>,
    /// Per input row written: the dot products its word takes part in over
    /// the call (what its scale is of).
    input_load: Vec<u64>,
    /// CBOW: per context word entry, its share of its position's dot
    /// products ([`cbow_context_load`]).
    entry_load: Vec<u32>,
    /// The pending counts this plan's dot products are counted in
    /// ([`crate::stale`]), from its dotprod until its adjust or its drop.
    counted_in: Option<Arc<Pending>>,
    /// Per input position: the learning rate of its minibatch.
    pub(crate) position_alpha: Vec<f32>,
    /// Per wire index: the learning rate its dot product's update takes (its
    /// minibatch's; 0 for a negative equal to its positive).
    pub(crate) alphas: Vec<f32>,
    /// Per wire index: the partial dot product its dotprod computed
    /// ([`Plan::keep_dots`]), against which the adjust measures how far its
    /// rows moved since ([`crate::loops::Refresh`]); empty when the adjust
    /// planned the call anew.
    pub(crate) then: Vec<f32>,
    /// Shared negatives ([`Plan::spread`]): the plan, groups and α per
    /// target before they are spread over the context words, each target's
    /// first wire index, and each position's first context entry.
    targets: Vec<(u32, u32)>,
    target_groups: Vec<(u32, u32)>,
    target_alphas: Vec<f32>,
    target_wire: Vec<u32>,
    context_start: Vec<u32>,
}

impl Plan {
    /// The positive word of each example of `mb`: skip-gram, the context
    /// words; CBOW and shared negatives, the input positions' own words.
    fn positives_of(mb: &Minibatch) -> &[u32] {
        if Self::per_position(mb) {
            &mb.inputs
        } else {
            &mb.outputs
        }
    }

    /// Whether `mb`'s examples are its input positions (CBOW, or skip-gram
    /// with shared negatives) rather than its pairs.
    fn per_position(mb: &Minibatch) -> bool {
        mb.objective.is_cbow() || mb.shared_negatives
    }

    /// Whether this call's examples are its input positions (as
    /// [`Plan::per_position`] of its minibatches).
    fn examples_are_positions(&self) -> bool {
        self.objective.is_cbow() || self.shared
    }

    /// The u row the loops read for each input slot: skip-gram (either
    /// way), each distinct input word of the call once (its Δu summed over
    /// all its entries: a word in many positions or windows is read and
    /// written once per call, not once per entry); CBOW, each input
    /// position's word (the loops read the mean of its context words in its
    /// place).
    pub(crate) fn slots(&self) -> &[u32] {
        if self.objective.is_cbow() {
            &self.inputs
        } else {
            &self.slot_words
        }
    }

    /// Plans the call `mbs` (validated, all of one objective) for model
    /// `fingerprint`: per example its positive word and `negative`
    /// negatives from `sampler` (paper Fig. 5 line 7), grouped by row.
    pub(crate) fn draw(
        &mut self,
        sampler: &NegativeSampler,
        negative: usize,
        fingerprint: u64,
        mbs: &[Minibatch],
    ) {
        self.inputs.clear();
        self.context_counts.clear();
        self.contexts.clear();
        self.parts.clear();
        self.position_alpha.clear();
        self.then.clear();
        self.positives.clear();
        self.example_position.clear();
        self.objective = mbs.first().map_or(Objective::SkipGram, |mb| mb.objective);
        self.shared = mbs.first().is_some_and(|mb| mb.shared_negatives);
        let per_position = self.examples_are_positions();
        for mb in mbs {
            let first = self.inputs.len() as u32;
            self.inputs.extend_from_slice(&mb.inputs);
            self.context_counts.extend_from_slice(&mb.context_counts);
            if per_position {
                self.contexts.extend_from_slice(&mb.outputs);
                self.example_position
                    .extend(first..first + mb.inputs.len() as u32);
            } else {
                for (p, &c) in (first..).zip(&mb.context_counts) {
                    self.example_position
                        .extend(std::iter::repeat_n(p, c as usize));
                }
            }
            self.positives.extend_from_slice(Self::positives_of(mb));
            self.parts
                .push((mb.seed, mb.inputs.len() as u32, mb.outputs.len() as u32));
            self.position_alpha
                .extend(std::iter::repeat_n(mb.alpha, mb.inputs.len()));
        }
        self.fingerprint = fingerprint;
        self.seed = mbs.first().map_or(0, |mb| mb.seed);
        self.minibatches = mbs.len();
        self.per_pair = negative + 1;
        self.scale_inputs(negative as u32);
        self.group(sampler, negative);
    }

    /// The call's row step cap (CBOW: [`call_step_cap`]) and its input
    /// rows' step scales.
    fn scale_inputs(&mut self, negative: u32) {
        let cap = row_step_cap(&self.context_counts, negative);
        self.cap = if self.objective.is_cbow() {
            call_step_cap(cap, self.minibatches)
        } else {
            skip_gram_call_step_cap(cap, self.minibatches)
        };
        let per_pair = u64::from(negative) + 1;
        let per_position = self.examples_are_positions();
        // Per input row entry, its dot products (times `per_entry`): a
        // skip-gram position's word, its pairs; CBOW, a context word's
        // share of its position's ([`cbow_context_load`]).
        let (examples, per_entry) = if self.objective.is_cbow() {
            self.entry_load.clear();
            for &c in &self.context_counts {
                let load = cbow_context_load(per_pair, c);
                self.entry_load
                    .extend(std::iter::repeat_n(load, c as usize));
            }
            (Some(&self.entry_load[..]), 1)
        } else {
            (
                (!per_position).then_some(&self.context_counts[..]),
                per_pair,
            )
        };
        let rows = if per_position {
            &self.contexts
        } else {
            &self.inputs
        };
        input_loads(
            rows,
            examples,
            per_entry,
            (&mut self.input_keys, &mut self.keys_tmp),
            &mut self.input_load,
            &mut self.slot_words,
            &mut self.slot_loads,
            &mut self.slot_of,
        );
        self.scale_inputs_for(None);
    }

    /// Sets the input rows' step scales: of each word's dot products in the
    /// call, or (`pending`: over gRPC) of those pending on it across the
    /// calls in flight ([`crate::stale`]).
    pub(crate) fn scale_inputs_for(&mut self, pending: Option<&Pending>) {
        let (cap, counted) = (self.cap, self.counted_in.is_some());
        let scale_of = |w: u32, k: u64| {
            let load = pending.map_or(k, |p| Pending::load(p.of(true), w, k, counted));
            row_step_scale(load, cap)
        };
        self.input_scale.clear();
        if self.objective.is_cbow() {
            let entries = self.contexts.iter().zip(&self.input_load);
            self.input_scale
                .extend(entries.map(|(&w, &k)| scale_of(w, k)));
        } else {
            let words = self.slot_words.iter().zip(&self.slot_loads);
            self.input_scale
                .extend(words.map(|(&w, &k)| scale_of(w, k)));
        }
    }

    /// Counts the call's dot products as pending on their rows (its dotprod
    /// was served; they stay counted until [`Plan::release`]).
    pub(crate) fn count_in(&mut self, pending: &Arc<Pending>) {
        self.release();
        let v = pending.of(false);
        let mut start = 0;
        for &(row, end) in &self.groups {
            Pending::add(v, row, u64::from(end - start));
            start = end;
        }
        let u = pending.of(true);
        for (&w, &k) in self.slot_words.iter().zip(&self.slot_loads) {
            Pending::add(u, w, k);
        }
        self.counted_in = Some(Arc::clone(pending));
    }

    /// Whether the call's dot products are counted as pending.
    pub(crate) fn counted(&self) -> bool {
        self.counted_in.is_some()
    }

    /// Keeps the call's partial dot products as its dotprod computed them
    /// (wire order), for its adjust ([`Plan::then`]): takes `dots`' buffer
    /// and leaves its own, spent, in its place (no copy).
    pub(crate) fn keep_dots(&mut self, dots: &mut Vec<f32>) {
        std::mem::swap(&mut self.then, dots);
    }

    /// Takes the call's dot products off the pending counts (its adjust is
    /// applied, or will never come); nothing if they are not counted.
    pub(crate) fn release(&mut self) {
        let Some(pending) = self.counted_in.take() else {
            return;
        };
        let v = pending.of(false);
        let mut start = 0;
        for &(row, end) in &self.groups {
            Pending::sub(v, row, u64::from(end - start));
            start = end;
        }
        let u = pending.of(true);
        for (&w, &k) in self.slot_words.iter().zip(&self.slot_loads) {
            Pending::sub(u, w, k);
        }
    }

    /// Groups the call's dot products by output row into `plan` and
    /// `groups`, with each one's wire index and α: the negatives as the
    /// sample yields them (already in row order), each dealt to its example,
    /// then merged with the positives sorted by row.
    fn group(&mut self, sampler: &NegativeSampler, negative: usize) {
        let examples = self.positives.len();
        if self.shared {
            // The targets go where the last call's targets were, so that
            // [`Plan::spread`] gets back the buffers of the last call's dot
            // products, still at their length, and writes over them instead
            // of zeroing them first.
            std::mem::swap(&mut self.plan, &mut self.targets);
            std::mem::swap(&mut self.alphas, &mut self.target_alphas);
        }
        self.keys.clear();
        self.keys.extend(
            self.positives
                .iter()
                .enumerate()
                .map(|(e, &row)| (u64::from(row) << 32) | e as u64),
        );
        // A stable radix sort on the row alone: ties keep example order.
        sort_by_row(&mut self.keys, &mut self.keys_tmp);
        // The positives' α are set by `merge`, the negatives' pushed by
        // `deal_negatives`.
        self.alphas.clear();
        self.alphas.resize(examples, 0.0);
        self.deal_negatives(sampler, negative);
        // (The walk yields every point: this only keeps the α in step with
        // the plan's length should it not.)
        self.alphas.resize(examples * (negative + 1), 0.0);
        self.merge();
        self.dots = examples * (negative + 1);
        if self.shared {
            self.spread();
        } else if !self.objective.is_cbow() {
            // Skip-gram: each dot product's input position to its slot.
            for entry in &mut self.plan {
                entry.1 = self.slot_of[entry.1 as usize];
            }
        }
    }

    /// Shared negatives: spreads each planned target (a position's positive
    /// or one of its negatives) into one dot product per context word of
    /// its position, in context order, at consecutive wire indices where
    /// the target's one would stand (positives first, in position order,
    /// then the negatives in the order of the sample). Groups stay one per
    /// output row: the loops still visit each row once, now for every
    /// context word of every position that targets it.
    fn spread(&mut self) {
        let counts = &self.context_counts;
        self.context_start.clear();
        self.context_start
            .extend(counts.iter().scan(0u32, |at, &c| {
                let first = *at;
                *at += c;
                Some(first)
            }));
        let pairs = self.contexts.len();
        std::mem::swap(&mut self.plan, &mut self.targets);
        std::mem::swap(&mut self.groups, &mut self.target_groups);
        std::mem::swap(&mut self.alphas, &mut self.target_alphas);
        self.dots = pairs * self.per_pair;
        // Written in place into buffers sized for every dot product (and
        // [`SPREAD_WIDTH`] more), not pushed. They are the last call's dot
        // products' (see `group`): resizing them zeroes only what this call
        // has beyond the last one's, where zeroing the whole of both was a
        // few percent of a shard's CPU. A position's dot products are
        // written [`SPREAD_WIDTH`] at a time whatever its context words
        // (fixed-size copies, no loop whose end mispredicts once a target:
        // the spread was 11 % of a shard's CPU over gRPC); what a write puts
        // past the position's own is written over by the next one, or cut.
        self.plan.resize(self.dots + SPREAD_WIDTH, (0, 0));
        self.alphas.resize(self.dots + SPREAD_WIDTH, 0.0);
        // Each target's first wire index and its α over its dot products,
        // in wire order (positives first, in position order, then the
        // negatives in the order of the sample).
        self.target_wire.clear();
        let mut at = 0usize;
        let positions = self.positives.len();
        let wire_positions = (0..positions as u32).chain(self.negatives.iter().map(|&(_, p)| p));
        for (&alpha, p) in self.target_alphas.iter().zip(wire_positions) {
            self.target_wire.push(at as u32);
            let c = counts[p as usize] as usize;
            match self.alphas.get_mut(at..at + SPREAD_WIDTH) {
                Some(out) if c <= SPREAD_WIDTH => out.fill(alpha),
                _ => self.alphas[at..at + c].fill(alpha),
            }
            at += c;
        }
        // Every α the targets' wire indices cover is written above; the α
        // of any they did not cover (should the sample have yielded fewer
        // negatives) are zeroed.
        let covered = at.min(self.dots);
        self.alphas[covered..].fill(0.0);
        self.alphas.truncate(self.dots);
        self.groups.clear();
        let (mut start, mut at) = (0, 0);
        let slot_of = &self.slot_of[..];
        for &(row, end) in &self.target_groups {
            for &(k, p) in &self.targets[start..end as usize] {
                let (wire, first) = (self.target_wire[k as usize], self.context_start[p as usize]);
                let (first, c) = (first as usize, counts[p as usize] as usize);
                let whole = slot_of
                    .get(first..first + SPREAD_WIDTH)
                    .filter(|_| c <= SPREAD_WIDTH)
                    .and_then(|s| <&[u32; SPREAD_WIDTH]>::try_from(s).ok());
                match (whole, self.plan.get_mut(at..at + SPREAD_WIDTH)) {
                    (Some(slots), Some(out)) => {
                        for (i, (o, &s)) in out.iter_mut().zip(slots).enumerate() {
                            *o = (wire.wrapping_add(i as u32), s);
                        }
                    }
                    _ => {
                        let slots = &slot_of[first..first + c];
                        for ((o, &s), w) in self.plan[at..at + c].iter_mut().zip(slots).zip(wire..)
                        {
                            *o = (w, s);
                        }
                    }
                }
                at += c;
            }
            self.groups.push((row, at as u32));
            start = end as usize;
        }
        self.plan.truncate(at);
    }

    /// The call's negatives in wire order into `negatives` (row, input
    /// position) and their α into `alphas`: band k's j-th point of the
    /// sample goes to example (g_k·j + h_k) mod E. The examples a band
    /// visits are scattered over the call, so each one's positive and
    /// position are read from one packed array, prefetched a few steps
    /// ahead.
    fn deal_negatives(&mut self, sampler: &NegativeSampler, negative: usize) {
        const AHEAD: u64 = 16;
        let examples = self.positives.len();
        self.example_info.clear();
        self.example_info.extend(
            self.positives
                .iter()
                .zip(&self.example_position)
                .map(|(&w, &p)| (w, p)),
        );
        self.negatives.clear();
        self.negatives.reserve(examples * negative);
        if examples == 0 {
            return;
        }
        let deal = Deal::new(self.seed, examples as u64, negative as u32, sampler.total());
        let mut words = sampler.walk((examples * negative) as u64, deal.offset);
        let (info, position_alpha) = (&self.example_info[..], &self.position_alpha[..]);
        let (negatives, alphas) = (&mut self.negatives, &mut self.alphas);
        alphas.reserve(examples * negative);
        let e_count = examples as u64;
        for &(g, h) in &deal.bands {
            let (mut e, mut ahead) = (h, (h + AHEAD % e_count * g % e_count) % e_count);
            for _ in 0..examples {
                let Some(row) = words.next() else { break };
                colonnade_common::kernels::prefetch(info.as_ptr().wrapping_add(ahead as usize));
                let (positive, p) = info[e as usize];
                // A negative equal to its example's positive updates nothing.
                alphas.push(if row != positive {
                    position_alpha[p as usize]
                } else {
                    0.0
                });
                negatives.push((row, p));
                e += g;
                if e >= e_count {
                    e -= e_count;
                }
                ahead += g;
                if ahead >= e_count {
                    ahead -= e_count;
                }
            }
        }
    }

    /// Merges the positives (sorted by row, ties in example order) before
    /// the negatives of each row into `plan` (wire index, input position),
    /// and cuts it into runs of one row (`groups`); sets the positives' α.
    fn merge(&mut self) {
        let examples = self.positives.len();
        let (keys, negatives) = (&self.keys[..], &self.negatives[..]);
        let (info, position_alpha) = (&self.example_info[..], &self.position_alpha[..]);
        let alphas = &mut self.alphas;
        self.plan.clear();
        self.groups.clear();
        self.plan.reserve(keys.len() + negatives.len());
        let mut out = Runs {
            run: u64::MAX,
            plan: &mut self.plan,
            groups: &mut self.groups,
        };
        let mut positives = keys.iter().map(|&k| ((k >> 32) as u32, k as u32 as usize));
        let mut next = positives.next();
        for (j, &(row, p)) in negatives.iter().enumerate() {
            while let Some((r, ex)) = next.filter(|&(r, _)| r <= row) {
                let p = info[ex].1;
                alphas[ex] = position_alpha[p as usize];
                out.push(r, ex, p);
                next = positives.next();
            }
            out.push(row, examples + j, p);
        }
        while let Some((r, ex)) = next {
            let p = info[ex].1;
            alphas[ex] = position_alpha[p as usize];
            out.push(r, ex, p);
            next = positives.next();
        }
        out.finish();
    }

    /// Whether this plan was drawn for the call `mbs` on a model with
    /// `fingerprint` and `negative` negatives: same seeds, objective,
    /// positives and inputs (and, CBOW, context words), hence the same
    /// negatives, input rows and step scales; same learning rates. A call it
    /// fits is identical in content to the validated one it was drawn for.
    pub(crate) fn fit(&self, fingerprint: u64, negative: usize, mbs: &[Minibatch]) -> bool {
        if self.fingerprint != fingerprint
            || self.per_pair != negative + 1
            || self.parts.len() != mbs.len()
        {
            return false;
        }
        let (mut position, mut example) = (0usize, 0usize);
        for (&(seed, inputs, outputs), mb) in self.parts.iter().zip(mbs) {
            let (n_in, n_ex) = (inputs as usize, Self::positives_of(mb).len());
            let same = seed == mb.seed
                && mb.objective == self.objective
                && mb.shared_negatives == self.shared
                && n_in == mb.inputs.len()
                && outputs as usize == mb.outputs.len()
                && self.positives.get(example..example + n_ex) == Some(Self::positives_of(mb))
                && self.inputs[position..position + n_in] == mb.inputs[..]
                && self.context_counts[position..position + n_in] == mb.context_counts[..]
                && self.position_alpha[position..position + n_in]
                    .iter()
                    .all(|&a| a.to_bits() == mb.alpha.to_bits());
            if !same {
                return false;
            }
            position += n_in;
            example += n_ex;
        }
        example == self.positives.len()
            && (!self.examples_are_positions()
                || mbs
                    .iter()
                    .flat_map(|mb| &mb.outputs)
                    .eq(self.contexts.iter()))
    }

    /// Bytes of its buffers (their capacities): what keeping it costs.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let u32s = self.inputs.capacity()
            + self.context_counts.capacity()
            + self.contexts.capacity()
            + self.positives.capacity()
            + self.example_position.capacity();
        let u64s = self.keys.capacity() + self.keys_tmp.capacity() + self.input_keys.capacity();
        let u32s = u32s
            + self.target_wire.capacity()
            + self.context_start.capacity()
            + self.slot_of.capacity()
            + self.slot_words.capacity()
            + self.entry_load.capacity();
        let pairs = self.plan.capacity()
            + self.groups.capacity()
            + self.example_info.capacity()
            + self.negatives.capacity()
            + self.targets.capacity()
            + self.target_groups.capacity();
        let f32s = self.input_scale.capacity()
            + self.position_alpha.capacity()
            + self.alphas.capacity()
            + self.then.capacity()
            + self.target_alphas.capacity();
        let u64s = u64s + self.input_load.capacity() + self.slot_loads.capacity();
        u32s * 4
            + u64s * 8
            + pairs * size_of::<(u32, u32)>()
            + f32s * 4
            + self.parts.capacity() * size_of::<(u64, u32, u32)>()
    }

    /// Dot products planned (examples × (1 + negative); shared negatives,
    /// pairs × (1 + negative)).
    pub fn len(&self) -> usize {
        self.dots
    }

    pub fn is_empty(&self) -> bool {
        self.dots == 0
    }

    /// The positive dot products of the call, the first `examples()` in
    /// wire order: one per example (skip-gram: per pair; CBOW: per input
    /// position), and with shared negatives one per pair.
    pub fn examples(&self) -> usize {
        if self.shared {
            self.contexts.len()
        } else {
            self.positives.len()
        }
    }

    /// (input, output) pairs in the call.
    pub fn pairs(&self) -> u64 {
        self.parts
            .iter()
            .map(|&(_, _, outputs)| u64::from(outputs))
            .sum()
    }

    /// The weights G of the call from its scaled weights (G ÷ α, wire
    /// order, as they travel), into `out`: each times its α in the plan.
    pub fn weights(&self, scaled: &[f32], out: &mut Vec<f32>) {
        out.clear();
        self.extend_weights(scaled, out);
    }

    /// [`Plan::weights`] a block at a time: the weights of the scaled
    /// weights `scaled` that follow the `out.len()` already in `out`,
    /// appended to it (the shard's service unpacks the wire's half floats a
    /// block at a time into this, with no array of them between, and checks
    /// each block before: a check inside this product kept it scalar).
    pub fn extend_weights(&self, scaled: &[f32], out: &mut Vec<f32>) {
        let alphas = self.alphas.get(out.len()..).unwrap_or_default();
        out.extend(scaled.iter().zip(alphas).map(|(&g, &a)| a * g));
    }

    /// The output row of every dot product, in wire order (for tests and
    /// checks; the loops read `plan` and `groups`).
    pub fn rows_by_wire(&self) -> Vec<u32> {
        let mut rows = vec![u32::MAX; self.len()];
        let mut at = 0;
        for &(row, end) in &self.groups {
            for &(w, _) in &self.plan[at..end as usize] {
                rows[w as usize] = row;
            }
            at = end as usize;
        }
        rows
    }
}

/// A plan being cut into runs of one row, as its entries come in row order.
struct Runs<'a> {
    /// The row of the run being built (`u64::MAX` before the first entry).
    run: u64,
    plan: &'a mut Vec<(u32, u32)>,
    groups: &'a mut Vec<(u32, u32)>,
}

impl Runs<'_> {
    #[inline(always)]
    fn push(&mut self, row: u32, wire: usize, p: u32) {
        if u64::from(row) != self.run {
            if self.run != u64::MAX {
                self.groups.push((self.run as u32, self.plan.len() as u32));
            }
            self.run = u64::from(row);
        }
        self.plan.push((wire as u32, p));
    }

    fn finish(self) {
        if self.run != u64::MAX {
            self.groups.push((self.run as u32, self.plan.len() as u32));
        }
    }
}

/// Per input row written (`rows[i]`, its word), the dot products its word
/// takes part in over the call, the load its Δu's scale is of: counted over
/// all the word's entries (`examples[i]` examples of `per_pair` dot
/// products each; one example per entry when `examples` is `None`), so a
/// word written at many entries is capped as one row; into `words`, the
/// distinct words in ascending order, into `word_loads` their loads, and into `slot_of`,
/// each entry's index in `words`. `keys` is scratch: the entries' sort keys
/// and the radix sort's second buffer.
#[allow(
    clippy::too_many_arguments,
    reason = "the plan's buffers it fills, spelled out"
)]
fn input_loads(
    rows: &[u32],
    examples: Option<&[u32]>,
    per_pair: u64,
    (keys, keys_tmp): (&mut Vec<u64>, &mut Vec<u64>),
    load: &mut Vec<u64>,
    words: &mut Vec<u32>,
    word_loads: &mut Vec<u64>,
    slot_of: &mut Vec<u32>,
) {
    keys.clear();
    keys.extend(
        rows.iter()
            .enumerate()
            .map(|(p, &w)| (u64::from(w) << 32) | p as u64),
    );
    // Stable on the word alone, and the keys are made in entry order: the
    // same order as sorting the whole keys, in two or three passes.
    sort_by_row(keys, keys_tmp);
    load.clear();
    load.resize(rows.len(), 0);
    slot_of.clear();
    slot_of.resize(rows.len(), 0);
    words.clear();
    word_loads.clear();
    for run in keys.chunk_by(|a, b| a >> 32 == b >> 32) {
        let pairs: u64 = run
            .iter()
            .map(|&key| examples.map_or(1, |e| u64::from(e[key as u32 as usize])))
            .sum();
        for &key in run {
            load[key as u32 as usize] = pairs * per_pair;
            slot_of[key as u32 as usize] = words.len() as u32;
        }
        words.push((run[0] >> 32) as u32);
        word_loads.push(pairs * per_pair);
    }
}

#[cfg(test)]
mod tests;
