//! The hot loops of a shard, over a planned call ([`Plan`]): [`dotprod_loop`]
//! (paper Fig. 5) and [`adjust_loop`] (Fig. 6). Both walk the dot products
//! grouped by output row ([`RowRuns`]), visiting and locking each distinct
//! row once, and [`fused_loop`], both in one visit, for shards that hold
//! whole vectors. Dot products and weights are indexed by their wire index
//! (positives first, then negatives in the loops' own order), so the
//! negatives' are read and written in sequence. Multiversioned: the kernels
//! inline into a clone compiled for the best SIMD the CPU has, chosen at run
//! time.
//!
//! [`Plan`]: crate::plan::Plan
#![allow(
    unsafe_code,
    reason = "the AVX and AVX-512 kernels, chosen only in clones compiled for them"
)]

use crate::finite::MAX_VALUE_BITS;
use crate::hogwild::HogwildMatrix;
use crate::plan::row_step_scale;
use crate::stale::Pending;
#[cfg(target_arch = "x86_64")]
use colonnade_common::kernels::{Avx, Avx512};
use colonnade_common::kernels::{Portable, Simd, LANES};
use colonnade_common::sgns::applied_weight;
use colonnade_proto::partial_as_sent;
use multiversion::multiversion;
use multiversion::target::match_target;
use std::sync::atomic::AtomicU32;

/// The largest |value| of `row + s·d`, as f32 bits (NaN above any finite
/// value and ∞): each value computed as [`axpy_kernel`] does, mul then add.
///
/// [`axpy_kernel`]: colonnade_common::kernels::axpy_kernel
#[inline(always)]
fn max_bits_after(row: &[f32], s: f32, d: &[f32]) -> u32 {
    let mut m = 0u32;
    for (r, d) in row.iter().zip(d) {
        m = m.max((r + s * d).to_bits() & 0x7fff_ffff);
    }
    m
}

/// row += s·d (mul then add, as [`colonnade_common::kernels::axpy_kernel`]:
/// the same bits), unless a value would pass [`MAX_VALUE_BITS`]: then the
/// row stays as it was. `written` keeps the largest |value| seen (as bits;
/// above [`MAX_VALUE_BITS`] when a row was left unwritten).
#[inline(always)]
fn add_guarded(row: &mut [f32], s: f32, d: &[f32], written: &mut u32) {
    let m = max_bits_after(row, s, d);
    *written = (*written).max(m);
    if m <= MAX_VALUE_BITS {
        for (r, d) in row.iter_mut().zip(d) {
            *r += s * d;
        }
    }
}

/// How many rows ahead of use the loops prefetch (hides cache-miss latency on
/// the random rows of negatives and context words).
const PREFETCH_AHEAD: usize = 8;

/// The runs of a plan that share one output row, in row order: (row, its
/// dot products as (wire index, input position)), prefetching the
/// row [`PREFETCH_AHEAD`] runs ahead. Inlined into both loops, so their
/// multiversioned clones keep the SIMD kernels in line.
struct RowRuns<'a> {
    v: &'a HogwildMatrix,
    plan: &'a [(u32, u32)],
    groups: &'a [(u32, u32)],
    next: usize,
    start: usize,
}

impl<'a> RowRuns<'a> {
    #[inline(always)]
    fn new(v: &'a HogwildMatrix, plan: &'a [(u32, u32)], groups: &'a [(u32, u32)]) -> Self {
        Self {
            v,
            plan,
            groups,
            next: 0,
            start: 0,
        }
    }
}

impl<'a> Iterator for RowRuns<'a> {
    type Item = (usize, &'a [(u32, u32)]);

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let &(row, end) = self.groups.get(self.next)?;
        if let Some(&(ahead, _)) = self.groups.get(self.next + PREFETCH_AHEAD) {
            self.v.prefetch_row(ahead as usize);
        }
        self.next += 1;
        let end = end as usize;
        let run = &self.plan[self.start..end];
        self.start = end;
        Some((row as usize, run))
    }
}

/// A CBOW minibatch's input side: per input position, its context words.
#[derive(Clone, Copy)]
pub(crate) struct Contexts<'a> {
    /// Context words per input position.
    pub counts: &'a [u32],
    /// The context words of all positions, concatenated.
    pub words: &'a [u32],
}

/// Reads the input vector of every input position into `u_rows`, one per
/// `stride` floats (at least the columns; the floats past them are zeroed):
/// its word's u row (skip-gram), or the mean of its context words' u rows
/// (CBOW, word2vec's `cbow_mean`: the sum times 1/count).
#[inline(always)]
fn read_input_rows(
    u: &HogwildMatrix,
    inputs: &[u32],
    contexts: Option<Contexts<'_>>,
    u_rows: &mut [f32],
    stride: usize,
) {
    let cols = u.cols();
    let Some(Contexts { counts, words }) = contexts else {
        for (i, (&w_in, row)) in inputs
            .iter()
            .zip(u_rows.chunks_exact_mut(stride))
            .enumerate()
        {
            if let Some(&ahead) = inputs.get(i + PREFETCH_AHEAD) {
                u.prefetch_row(ahead as usize);
            }
            let (row, pad) = row.split_at_mut(cols);
            u.read_row(w_in as usize, row);
            pad.fill(0.0);
        }
        return;
    };
    let mut e = 0;
    for (&c, row) in counts.iter().zip(u_rows.chunks_exact_mut(stride)) {
        row.fill(0.0);
        let row = &mut row[..cols];
        for &w in &words[e..e + c as usize] {
            if let Some(&ahead) = words.get(e + PREFETCH_AHEAD) {
                u.prefetch_row(ahead as usize);
            }
            e += 1;
            u.with_row(w as usize, |r| {
                for (a, b) in row.iter_mut().zip(r) {
                    *a += b;
                }
            });
        }
        if c > 1 {
            let inv = 1.0 / c as f32;
            row.iter_mut().for_each(|a| *a *= inv);
        }
    }
}

/// What both loops read: a validated minibatch's rows and its plan.
pub(crate) struct Work<'a> {
    pub u: &'a HogwildMatrix,
    pub v: &'a HogwildMatrix,
    /// Per input position: its word (skip-gram: its input row).
    pub inputs: &'a [u32],
    /// CBOW: per input position, the context words whose mean is its input
    /// vector (and which its Δu goes to).
    pub contexts: Option<Contexts<'a>>,
    /// (dot-product index, input position), grouped by output row.
    pub plan: &'a [(u32, u32)],
    /// Runs of `plan`: (output row, end of the run).
    pub groups: &'a [(u32, u32)],
    /// Scratch: per input position, its u row as the call found it, one per
    /// `stride` floats.
    pub u_rows: &'a mut [f32],
    /// Floats per input position in `u_rows` (and in the Δu scratch): the
    /// columns, or [`padded`](colonnade_common::kernels::padded) columns for the split loops.
    pub stride: usize,
}

/// The dot products of a validated minibatch into `dots`, pair-major
/// (request order), one visit per distinct output row. No AVX-512 clone:
/// over `ps-shard` processes the split loops are slower with one
/// (docs/benchmarks-history.md, "AVX-512 on rows of whole cache lines").
/// `work.stride` must be [`padded`](colonnade_common::kernels::padded) columns.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub(crate) fn dotprod_loop<'a>(work: Work<'a>, dots: &'a mut [f32]) {
    match_target! {
        // SAFETY: this arm is compiled only into clones for CPUs with AVX.
        "x86_64+avx" => by_width!(work.stride, dotprod_body, unsafe { Avx::new_unchecked() }, work, dots),
        _ => by_width!(work.stride, dotprod_body, Portable, work, dots),
    }
}

/// Calls `$body::<_, N>` with `N` the padded width when it is one the split
/// loops keep in registers (16 … 64 columns: every shard of a d ≤ 256 model
/// split four ways or more), else with `N = 0` (the width read at run time).
macro_rules! by_width {
    ($stride:expr, $body:ident, $($arg:expr),*) => {
        match $stride {
            16 => $body::<_, 16>($($arg),*),
            32 => $body::<_, 32>($($arg),*),
            48 => $body::<_, 48>($($arg),*),
            64 => $body::<_, 64>($($arg),*),
            _ => $body::<_, 0>($($arg),*),
        }
    };
}
use by_width;

/// The split loops' input rows: per input position, its `stride` floats
/// zero-padded, so that a dot product with an output row (masked to its
/// columns: no copy of the row) runs on whole 16-float chunks. `N` is the
/// stride when known at compile time, else 0.
#[inline(always)]
fn dotprod_body<K: Simd, const N: usize>(k: K, work: Work<'_>, dots: &mut [f32]) {
    let (v, cols) = (work.v, work.u.cols());
    let stride = if N == 0 { work.stride } else { N };
    read_input_rows(work.u, work.inputs, work.contexts, work.u_rows, stride);
    let u_rows = &*work.u_rows;
    for (x, run) in RowRuns::new(v, work.plan, work.groups) {
        // A guard, not a closure: the row's work inlines into this clone.
        // With `N` known, the row is read once into a zero-padded copy
        // (`Simd::padded`), so that each of the run's dot products and Δu
        // updates works on whole 16-float chunks (no masked tail) against
        // the zero-padded input rows; the padding adds only products of
        // zeros, so every sum is bit for bit the unpadded one.
        let row = v.row_mut(x);
        if N == 0 {
            split_run_dots(k, run, u_rows, stride, &row[..cols], dots);
        } else {
            split_run_dots(k, run, u_rows, stride, &k.padded::<N>(&row), dots);
        }
    }
}

/// The partial dot products of one output row's `run` in the split loops,
/// into `dots` by wire index: each input position's `stride`-padded row
/// against `row` (the row's columns, or its padded copy: the same sums).
/// The one computation both [`dotprod_body`] and a refreshing adjust
/// ([`Refresh`]) run, so that rows nothing moved give the same value.
#[inline(always)]
fn split_run_dots<K: Simd>(
    k: K,
    run: &[(u32, u32)],
    u_rows: &[f32],
    stride: usize,
    row: &[f32],
    dots: &mut [f32],
) {
    let len = row.len();
    for &(t, p) in run {
        let p = p as usize * stride;
        dots[t as usize] = k.dot(&u_rows[p..p + len], row);
    }
}

/// What [`adjust_loop`] needs beyond [`Work`].
pub(crate) struct Steps<'a> {
    /// Per dot product, pair-major: its weight G.
    pub weights: &'a [f32],
    /// Per input row written: the scale of its Δu.
    pub input_scale: &'a [f32],
    /// The minibatch's row step cap (see [`crate::plan::row_step_cap`]).
    pub cap: u64,
    /// Over gRPC: the output rows' pending counts ([`crate::stale`]), and
    /// whether this call's dot products are among them. A row's scale is
    /// then of the dot products pending on it, not only its own.
    pub pending: Option<(&'a [AtomicU32], bool)>,
    /// Over gRPC, when the call's dotprod kept its dot products: the
    /// correction of each weight for how far its rows moved since.
    pub refresh: Option<Refresh<'a>>,
    /// Scratch: per input position, its accumulated Δu (zeroed).
    pub u_delta: &'a mut [f32],
    /// Scratch: one output row's accumulated Δv.
    pub v_delta: &'a mut [f32],
    /// Out: the largest |value| written, as f32 bits (see [`add_guarded`]).
    pub written: &'a mut u32,
}

/// Staleness across calls, corrected per dot product: between a call's
/// dotprod and its adjust, the adjusts of other calls in flight move the
/// rows it reads, and the weight G = α·(y − σ(F)) the worker computed from
/// the old F no longer fits. The adjust recomputes this shard's partial dot
/// product from the rows as they are now, takes the drift since the dotprod
/// (`now − then`) times `extrapolate` (the model's dimension over this
/// shard's columns: every shard's columns move alike, so its drift stands
/// for the whole dot product's) and gives the weight of σ(F + δ)
/// ([`refreshed_weight`]). A call alone, whose rows nothing else moved, keeps
/// its weights exactly (the drift is zero: [`split_run_dots`] on the same
/// values).
pub(crate) struct Refresh<'a> {
    /// Per wire index: the partial dot product of the dotprod.
    pub then: &'a [f32],
    /// Per wire index: the refreshed weight (at least the plan's length;
    /// each written before its row's updates read it).
    pub out: &'a mut [f32],
    /// Per wire index: the α of its weight.
    pub alphas: &'a [f32],
    /// The model's dimension over this shard's columns.
    pub extrapolate: f32,
}

impl Refresh<'_> {
    /// The weight of dot product `t`, `g` as the worker sent it, given its
    /// partial dot product `now`.
    #[inline(always)]
    fn weight(&self, t: usize, g: f32, now: f32) -> f32 {
        let (Some(&then), Some(&alpha)) = (self.then.get(t), self.alphas.get(t)) else {
            return g;
        };
        let drift = (now - then) * self.extrapolate;
        refreshed_weight(g, alpha, drift)
    }
}

/// Drifts up to which [`refreshed_weight`] takes σ(F + δ) from its
/// second-order expansion.
const SMALL_DRIFT: f32 = 0.25;

/// G = α·w with F moved by `drift` (see [`Refresh`]): σ(F) read off the
/// weight (1 − w for a positive, −w for a negative), and σ(F + δ) from it
/// exactly, σ·e^δ / (1 − σ + σ·e^δ), so that a weight the worker computed
/// far out on the sigmoid's tail still turns when its rows have moved.
#[inline(always)]
pub(crate) fn refreshed_weight(g: f32, alpha: f32, drift: f32) -> f32 {
    if drift == 0.0 || alpha <= 0.0 || g == 0.0 {
        return g;
    }
    let w = g / alpha;
    let positive = w > 0.0;
    let s = if positive { 1.0 - w } else { -w };
    let moved = if drift.abs() <= SMALL_DRIFT {
        // σ(F + δ) = σ + σ'δ + σ''δ²/2 + O(δ³), σ' = σ(1 − σ), σ''/2 = σ'(½ − σ):
        // within 7e-4 of the exact value up to SMALL_DRIFT, below the
        // weight's own f16 rounding, at no exp or division.
        (s + s * (1.0 - s) * drift * (1.0 + (0.5 - s) * drift)).clamp(0.0, 1.0)
    } else {
        let e = drift.clamp(-30.0, 30.0).exp();
        s * e / (1.0 - s + s * e)
    };
    alpha * if positive { 1.0 - moved } else { -moved }
}

/// The updates of a validated minibatch (see [`crate::model::Model::adjust`]).
/// Each output row's Δv and each input word's Δu is scaled by
/// [`row_step_scale`] of its dot-product count. No AVX-512 clone, as
/// [`dotprod_loop`]; `work.stride` must be [`padded`](colonnade_common::kernels::padded) columns, and so must
/// be the Δu scratch's stride and `v_delta`'s length.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
pub(crate) fn adjust_loop<'a>(work: Work<'a>, steps: Steps<'a>) {
    match_target! {
        // SAFETY: this arm is compiled only into clones for CPUs with AVX.
        "x86_64+avx" => by_width!(work.stride, adjust_body, unsafe { Avx::new_unchecked() }, work, steps),
        _ => by_width!(work.stride, adjust_body, Portable, work, steps),
    }
}

#[inline(always)]
fn adjust_body<K: Simd, const N: usize>(k: K, work: Work<'_>, steps: Steps<'_>) {
    let (u, v, inputs, contexts) = (work.u, work.v, work.inputs, work.contexts);
    let stride = if N == 0 { work.stride } else { N };
    let u_rows = work.u_rows;
    let Steps {
        weights,
        input_scale,
        cap,
        pending,
        mut refresh,
        u_delta,
        v_delta,
        written,
    } = steps;
    read_input_rows(u, inputs, contexts, u_rows, stride);
    let u_rows = &*u_rows;
    for (x, run) in RowRuns::new(v, work.plan, work.groups) {
        let own = run.len() as u64;
        let load = pending.map_or(own, |(counts, counted)| {
            Pending::load(counts, x as u32, own, counted)
        });
        let scale = row_step_scale(load, cap);
        // A guard, not a closure: the row's work inlines into this clone.
        let mut row = v.row_mut(x);
        let padded = k.padded::<N>(&row);
        let read: &[f32] = if N == 0 { &row } else { &padded };
        // The run's weights: as sent, or refreshed for the rows' drift (all
        // of the run's dot products first, so that none waits on another).
        let weights = match refresh.as_mut() {
            Some(r) => {
                split_run_dots(k, run, u_rows, stride, read, r.out);
                for &(t, _) in run {
                    let t = t as usize;
                    r.out[t] = r.weight(t, weights[t], r.out[t]);
                }
                &*r.out
            }
            None => weights,
        };
        if N == 0 {
            update_row(
                k, &mut row, scale, run, weights, u_rows, u_delta, v_delta, written,
            );
        } else {
            update_fixed_row::<K, N>(
                k, &mut row, &padded, scale, run, weights, u_rows, u_delta, written,
            );
        }
    }
    add_input_deltas(u, inputs, contexts, u_delta, input_scale, stride, written);
}

/// [`update_row`] with Δv in `N / 16` register lanes (`N` the padded
/// columns), held through the run: the same operations in the same order.
#[allow(clippy::too_many_arguments, reason = "the loops' state, spelled out")]
#[inline(always)]
fn update_fixed_row<K: Simd, const N: usize>(
    k: K,
    row: &mut [f32],
    padded: &[f32; N],
    scale: f32,
    run: &[(u32, u32)],
    weights: &[f32],
    u_rows: &[f32],
    u_delta: &mut [f32],
    written: &mut u32,
) {
    let cols = row.len();
    let mut dv = [k.lanes_zero(); 4];
    for &(t, p) in run {
        let (g, p) = (weights[t as usize], p as usize * N);
        // Δu += G·v(x) on whole chunks: the padding lanes add G·0.
        let (ud, _) = u_delta[p..p + N].as_chunks_mut::<LANES>();
        for (d, r) in ud.iter_mut().zip(padded.as_chunks::<LANES>().0) {
            let sum = k.lanes_axpy(k.lanes_load(d), g, r);
            k.lanes_store(sum, d);
        }
        let (ur, _) = u_rows[p..p + N].as_chunks::<LANES>();
        for (acc, x) in dv.iter_mut().zip(ur) {
            *acc = k.lanes_axpy(*acc, g, x);
        }
    }
    // v(x) + scale·Δv on whole chunks (mul, then add: exact when the scale
    // is 1; the padding lanes are 0 + scale·0), written back as
    // [`add_guarded`] does: not at all if a value would pass MAX_VALUE_BITS.
    let mut new = [0.0f32; N];
    let (out, _) = new.as_chunks_mut::<LANES>();
    for ((acc, r), o) in dv.iter().zip(padded.as_chunks::<LANES>().0).zip(out) {
        let mut d = [0.0f32; LANES];
        k.lanes_store(*acc, &mut d);
        k.lanes_store(k.lanes_axpy(k.lanes_load(r), scale, &d), o);
    }
    let m = new
        .iter()
        .fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
    *written = (*written).max(m);
    if m <= MAX_VALUE_BITS {
        row.copy_from_slice(&new[..cols]);
    }
}

/// One output row's updates: per dot product of its `run`, Δu of the input
/// position += G·v(x) and Δv(x) += G·u(w_I); then v(x) += `scale`·Δv(x).
/// Scratch rows (`u_rows`, `u_delta`) are `v_delta.len()` floats apart: the
/// columns, or the split loops' padded stride.
#[allow(clippy::too_many_arguments, reason = "the loops' state, spelled out")]
#[inline(always)]
fn update_row<K: Simd>(
    k: K,
    row: &mut [f32],
    scale: f32,
    run: &[(u32, u32)],
    weights: &[f32],
    u_rows: &[f32],
    u_delta: &mut [f32],
    v_delta: &mut [f32],
    written: &mut u32,
) {
    let (cols, stride) = (row.len(), v_delta.len());
    v_delta.fill(0.0);
    for &(t, p) in run {
        let (g, p) = (weights[t as usize], p as usize * stride);
        k.axpy(g, row, &mut u_delta[p..p + cols]);
        k.axpy(g, &u_rows[p..p + stride], v_delta);
    }
    // scale · Δv, exact when the scale is 1 (axpy's operations)
    add_guarded(row, scale, &v_delta[..cols], written);
}

/// u(w) += s·Δu for every input row written, after all rows: skip-gram,
/// each position's word; CBOW, each of its context words, each getting the
/// position's whole Δu (as word2vec and gensim's `cbow_mean` do). Each
/// position's Δu is the first columns of its `stride` floats.
#[inline(always)]
fn add_input_deltas(
    u: &HogwildMatrix,
    inputs: &[u32],
    contexts: Option<Contexts<'_>>,
    u_delta: &mut [f32],
    input_scale: &[f32],
    stride: usize,
    written: &mut u32,
) {
    let cols = u.cols();
    let Some(Contexts { counts, words }) = contexts else {
        for ((&w_in, delta), &scale) in inputs
            .iter()
            .zip(u_delta.chunks_exact_mut(stride))
            .zip(input_scale)
        {
            let delta = &mut delta[..cols];
            if scale != 1.0 {
                delta.iter_mut().for_each(|d| *d *= scale);
            }
            u.with_row_mut(w_in as usize, |row| add_guarded(row, 1.0, delta, written));
        }
        return;
    };
    let mut e = 0;
    for (&c, delta) in counts.iter().zip(u_delta.chunks_exact(stride)) {
        let delta = &delta[..cols];
        for &w in &words[e..e + c as usize] {
            // s·d is exactly d when the scale is 1
            let s = input_scale[e];
            e += 1;
            u.with_row_mut(w as usize, |row| add_guarded(row, s, delta, written));
        }
    }
}

/// What [`fused_loop`] needs beyond [`Work`]: [`Steps`] without the weights,
/// which it computes from the dot products as it goes.
pub(crate) struct FusedSteps<'a> {
    /// Per wire index: the learning rate of its dot product's minibatch.
    pub alphas: &'a [f32],
    /// The call's examples: wire indices below it are positives.
    pub positives: usize,
    /// Per input row written: the scale of its Δu.
    pub input_scale: &'a [f32],
    /// The call's row step cap.
    pub cap: u64,
    /// Out: the dot products, in wire order.
    pub dots: &'a mut [f32],
    /// Scratch: per dot product, its weight G.
    pub weights: &'a mut [f32],
    /// Scratch: per input position, its accumulated Δu (zeroed).
    pub u_delta: &'a mut [f32],
    /// Scratch: one output row's accumulated Δv.
    pub v_delta: &'a mut [f32],
    /// Where each shard's columns end, in shard order (the last is `cols`):
    /// a dot product is the sum of the shards' partial ones, in shard
    /// order, as a client sums them.
    pub ends: &'a [usize],
    /// Out: the largest |value| written, as f32 bits (see [`add_guarded`]).
    pub written: &'a mut u32,
}

/// [`fused_loop`]'s body with the dot products of `$k`, written out in each
/// function compiled for a target (a macro, not a function): the per-row
/// closure then inherits that function's target features. In a helper
/// function, which has none, it would run the axpys without AVX whenever
/// LLVM leaves it out of line (docs/benchmarks-history.md, "AVX-512 on rows
/// of whole cache lines").
macro_rules! fused_body {
    ($k:expr, $work:expr, $steps:expr) => {{
        let k = $k;
        let Work {
            u,
            v,
            inputs,
            contexts,
            plan,
            groups,
            u_rows,
            stride,
        } = $work;
        let FusedSteps {
            alphas,
            positives,
            input_scale,
            cap,
            dots,
            weights,
            u_delta,
            v_delta,
            ends,
            written,
        } = $steps;
        let a = Portable; // as in adjust_loop
        debug_assert_eq!(stride, u.cols(), "the fused loop reads unpadded rows");
        read_input_rows(u, inputs, contexts, u_rows, stride);
        let u_rows = &*u_rows;
        // Per row, in one hold of its lock: its dot products, their
        // weights, its updates. (Two holds, one for the dots and one for the
        // updates, would cost two more locked instructions per row, each
        // waiting on memory: docs/benchmarks-history.md, "Prefetched negative
        // draws and one lock hold per row".)
        for (x, run) in RowRuns::new(v, plan, groups) {
            let scale = row_step_scale(run.len() as u64, cap);
            v.with_row_mut(x, |row| {
                run_dots(k, run, u_rows, ends, row, dots);
                for &(t, _) in run {
                    let (t, f) = (t as usize, dots[t as usize]);
                    weights[t] = alphas[t] * applied_weight(f, t < positives);
                }
                update_row(
                    a, row, scale, run, weights, u_rows, u_delta, v_delta, written,
                )
            });
        }
        add_input_deltas(u, inputs, contexts, u_delta, input_scale, stride, written);
    }};
}

/// [`dotprod_loop`], the weights and [`adjust_loop`] of a minibatch on
/// whole vectors (one shard's, or the column slices of in-process shards
/// side by side, `ends` marking them: the summed dot products are final),
/// in one visit per output row. Bit for bit what the two loops give on
/// each shard with the client's weights (from the summed partial dot
/// products) in between: a row's dot products read u as the call
/// found it (`u_rows`) and the row before its own update, as `dotprod` does
/// (each row is visited once, and u is updated after all rows); the same
/// kernels compute them. A diverged dot product (beyond
/// `colonnade_common::sgns::DIVERGED_DOT`, or NaN)
/// adds no update; the caller fails the run on it.
pub(crate) fn fused_loop<'a>(work: Work<'a>, steps: FusedSteps<'a>) {
    // AVX-512 only when every shard's partial dot product starts on a
    // 64-byte boundary of the row: on packed rows nearly every 512-bit load
    // straddles two lines, and a clone of the loops gains nothing there
    // (docs/benchmarks-history.md, "The plan's sort, and three loop
    // experiments").
    #[cfg(target_arch = "x86_64")]
    if work.v.lines_aligned() && steps.ends.iter().all(|e| e.is_multiple_of(16)) {
        if let Some(k) = Avx512::detect() {
            // SAFETY: `k` exists only on CPUs with AVX-512F.
            return unsafe { fused_avx512(k, work, steps) };
        }
    }
    fused_narrow(work, steps)
}

/// [`fused_loop`] compiled for AVX-512F, on rows of whole cache lines.
///
/// # Safety
/// The CPU must have AVX-512F (`k` proves it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fused_avx512(k: Avx512, work: Work<'_>, steps: FusedSteps<'_>) {
    fused_body!(k, work, steps)
}

/// [`fused_loop`] for every other row and CPU: the best of AVX2+FMA, AVX,
/// NEON and the baseline, chosen at run time.
#[multiversion(targets("x86_64+avx2+fma", "x86_64+avx", "aarch64+neon"))]
fn fused_narrow<'a>(work: Work<'a>, steps: FusedSteps<'a>) {
    match_target! {
        // SAFETY: this arm is compiled only into clones for CPUs with AVX.
        "x86_64+avx" => fused_body!(unsafe { Avx::new_unchecked() }, work, steps),
        _ => fused_body!(Portable, work, steps),
    }
}

/// The dot products of one output row's run, with `k` (as [`dotprod_body`]):
/// per shard's columns (`ends`), its partial dot product, summed in shard
/// order; when there are several, each rounded to the half float that
/// carries it over the wire (`colonnade_proto::partial_as_sent`).
#[inline(always)]
fn run_dots<K: Simd>(
    k: K,
    run: &[(u32, u32)],
    u_rows: &[f32],
    ends: &[usize],
    row: &[f32],
    dots: &mut [f32],
) {
    let cols = row.len();
    for &(t, p) in run {
        let u = &u_rows[p as usize * cols..(p as usize + 1) * cols];
        let (&first, rest) = ends.split_first().unwrap_or((&cols, &[]));
        let mut dot = k.dot(&u[..first], &row[..first]);
        if !rest.is_empty() {
            // Column slices: their partials as the wire carries them.
            dot = partial_as_sent(dot);
        }
        let mut start = first;
        for &end in rest {
            dot += partial_as_sent(k.dot(&u[start..end], &row[start..end]));
            start = end;
        }
        dots[t as usize] = dot;
    }
}
