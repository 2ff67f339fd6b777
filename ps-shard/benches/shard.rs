//! Criterion benches for the shard's hot paths: the `dotprod` and `adjust`
//! handlers' core on a text8-sized model (69K words, 50 columns = d 100 on 2
//! shards), the same call with shared negatives (the default) on the column
//! slice of each shard of a d 100 model split 8, 4, 2 and 1 ways against the
//! fused loop of one embedded shard (what a shard pays per dot product
//! whatever its columns: docs/benchmarks.md, "What a shard pays whatever its
//! columns"), the fused loop at d 128 from a vocabulary that fits L2 to one
//! of 1M words, and the vector kernels they use.
//!
//! `cargo bench -p colonnade-ps-shard` (results in target/criterion).

use colonnade_common::kernels::{axpy, dot};
use colonnade_common::model::ModelSpec;
use colonnade_proto::Minibatch;
use colonnade_ps_shard::model::{Model, Scratch};
use colonnade_ps_shard::plan::Plan;
use colonnade_ps_shard::whole::WholeVectors;
use colonnade_ps_shard::{ShardCore, ShardSpec};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::sync::Arc;

const VOCAB: usize = 69_000;
const COLS: u32 = 50;
const NEGATIVE: u32 = 5;

/// Zipf-like counts of `vocab` words, as a text corpus has.
fn counts(vocab: usize) -> Vec<u64> {
    (0..vocab)
        .map(|r| (10_000_000.0 / (r as f64 + 1.0)).max(5.0) as u64)
        .collect()
}

/// A skip-gram model of `vocab` words and `dim` dimensions, negative 5.
fn model_spec(vocab: usize, dim: u32) -> ModelSpec {
    ModelSpec {
        vocab_fingerprint: 1,
        vocab_size: vocab as u64,
        dim,
        negative: NEGATIVE,
        sampling_power: 0.75,
        init_seed: 1,
        objective: colonnade_common::model::Objective::SkipGram,
    }
}

/// A minibatch of `inputs` input words with 2..=`most_outputs` outputs each,
/// ids drawn Zipf-like over `vocab` (frequent words most often).
fn batch(
    vocab: usize,
    inputs: usize,
    most_outputs: u32,
    seed: u64,
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut zipf = || ((vocab as f64).powf(rng.random::<f64>()) as u32).min(vocab as u32 - 1);
    let ins: Vec<u32> = (0..inputs).map(|_| zipf()).collect();
    let counts: Vec<u32> = (0..inputs)
        .map(|i| 2 + (i as u32 * 7) % (most_outputs - 1))
        .collect();
    let total: u32 = counts.iter().sum();
    let outs: Vec<u32> = (0..total).map(|_| zipf()).collect();
    (ins, counts, outs)
}

/// A call of `minibatches` minibatches of `positions` input positions each,
/// as a worker sends them with shared negatives (the default): positions
/// along a sentence of Zipf-like word ids, each with the words within a
/// radius of 1 ..= 5 (word2vec's shrunk window 5) as its contexts.
fn windows_call(vocab: usize, minibatches: usize, positions: usize, seed: u64) -> Vec<Minibatch> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..minibatches as u64)
        .map(|m| {
            let sentence: Vec<u32> = (0..positions + 10)
                .map(|_| ((vocab as f64).powf(rng.random::<f64>()) as u32).min(vocab as u32 - 1))
                .collect();
            let (mut inputs, mut counts, mut outputs) = (Vec::new(), Vec::new(), Vec::new());
            for j in 5..positions + 5 {
                let r = rng.random_range(1..=5usize);
                let ctx = (j - r..=j + r).filter(|&k| k != j).map(|k| sentence[k]);
                let before = outputs.len();
                outputs.extend(ctx);
                inputs.push(sentence[j]);
                counts.push((outputs.len() - before) as u32);
            }
            Minibatch {
                seed: seed * 1000 + m,
                alpha: 0.0,
                inputs,
                context_counts: counts,
                outputs,
                shared_negatives: true,
                ..Minibatch::default()
            }
        })
        .collect()
}

/// Per dot product, what a shard holding `cols` of a d 100 model's columns
/// spends on the default call (4 minibatches of 256 positions, shared
/// negatives): its plan (the same on every shard), its dotprod and its
/// adjust; and one embedded shard's fused loop on the whole vectors. α is 0
/// and the weights tiny, so the model stays as created however often a
/// bench repeats the call.
fn columns(c: &mut Criterion) {
    const DIM: u32 = 100;
    let mut group = c.benchmark_group("columns");
    let call = windows_call(VOCAB, 4, 256, 11);
    for cols in [13u32, 25, 50, 100] {
        let spec = ShardSpec {
            model: model_spec(VOCAB, DIM),
            col_start: 0,
            col_end: cols,
        };
        let shard = Arc::new(Model::new(spec, &counts(VOCAB)).expect("model"));
        let (mut targets, mut scratch, mut dots) =
            (Plan::default(), Scratch::default(), Vec::new());
        shard.plan(&call, &mut targets).expect("plan");
        group.throughput(Throughput::Elements(targets.len() as u64));
        let mut drawn = Plan::default();
        group.bench_with_input(BenchmarkId::new("plan", cols), &cols, |bench, _| {
            bench.iter(|| shard.plan(black_box(&call), &mut drawn).expect("plan"));
        });
        group.bench_with_input(BenchmarkId::new("dotprod", cols), &cols, |bench, _| {
            bench.iter(|| {
                shard
                    .dotprod(black_box(&targets), &mut scratch, &mut dots)
                    .expect("dotprod")
            });
        });
        let weights: Vec<f32> = (0..targets.len())
            .map(|t| if t < targets.examples() { 1e-6 } else { -1e-6 })
            .collect();
        group.bench_with_input(BenchmarkId::new("adjust", cols), &cols, |bench, _| {
            bench.iter(|| {
                shard
                    .adjust(black_box(&mut targets), &weights, false, &mut scratch)
                    .expect("adjust")
            });
        });
        if cols == DIM {
            let joined = WholeVectors::of(std::slice::from_ref(&shard)).expect("whole vectors");
            group.bench_with_input(BenchmarkId::new("fused", cols), &cols, |bench, _| {
                bench.iter(|| {
                    joined
                        .fused(black_box(&targets), &mut scratch, &mut dots)
                        .expect("fused")
                });
            });
        }
    }
    group.finish();
}

fn shard() -> (ShardCore, u64) {
    let model = model_spec(VOCAB, 2 * COLS);
    let fp = model.fingerprint();
    let core = ShardCore::new(None);
    core.create_model(
        ShardSpec {
            model,
            col_start: 0,
            col_end: COLS,
        },
        &counts(VOCAB),
    )
    .expect("create");
    (core, fp)
}

fn handlers(c: &mut Criterion) {
    let (core, fp) = shard();
    let model = core.model(fp).expect("model");
    let mut group = c.benchmark_group("shard");
    for inputs in [64usize, 256, 1024] {
        let (ins, ctx, outs) = batch(VOCAB, inputs, 10, inputs as u64);
        let pairs = outs.len();
        let b = Minibatch {
            seed: 7,
            inputs: ins,
            context_counts: ctx,
            outputs: outs,
            ..Minibatch::default()
        };
        let mut scratch = Scratch::default();
        let mut targets = Plan::default();
        let mut dots = Vec::new();
        let call = std::slice::from_ref(&b);
        model.plan(call, &mut targets).expect("plan");
        group.throughput(Throughput::Elements(pairs as u64));
        group.bench_with_input(
            BenchmarkId::new("dotprod_pairs", inputs),
            &inputs,
            |bench, _| {
                bench.iter(|| {
                    model
                        .dotprod(black_box(&targets), &mut scratch, &mut dots)
                        .expect("dotprod")
                });
            },
        );
        let mut drawn = Plan::default();
        group.bench_with_input(
            BenchmarkId::new("plan_pairs", inputs),
            &inputs,
            |bench, _| {
                bench.iter(|| model.plan(black_box(call), &mut drawn).expect("plan"));
            },
        );
        // Wire order: the positives first.
        let weights: Vec<f32> = (0..targets.len())
            .map(|t| if t < targets.examples() { 1e-6 } else { -1e-6 })
            .collect();
        group.bench_with_input(
            BenchmarkId::new("adjust_pairs", inputs),
            &inputs,
            |bench, _| {
                bench.iter(|| {
                    model
                        .adjust(black_box(&mut targets), &weights, false, &mut scratch)
                        .expect("adjust")
                });
            },
        );
    }
    group.finish();
}

fn kernels(c: &mut Criterion) {
    let mut group = c.benchmark_group("kernels");
    for n in [50usize, 100, 300] {
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        let mut y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.01).collect();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("dot", n), &n, |bench, _| {
            bench.iter(|| dot(black_box(&a), black_box(&y)))
        });
        group.bench_with_input(BenchmarkId::new("axpy", n), &n, |bench, _| {
            bench.iter(|| axpy(black_box(1e-7), black_box(&a), &mut y));
        });
    }
    group.finish();
}

/// The fused loop (an embedded shard holding whole vectors) on a graph run's
/// shape: d 128, negative 5, 256 input positions with 2..=20 outputs each
/// (window 10's mean of 11), ids Zipf-like over `vocab`. From 2K words
/// (u and v, 2 MiB together, fit L2) to 1M (1 GiB, of which the repeated
/// call touches about 17 MB, so mostly L3): the time a dot product takes as
/// its rows come from farther away. α is 0, so the
/// model stays as created however often the bench repeats the minibatch;
/// the loop does the same arithmetic as with any other α.
fn fused(c: &mut Criterion) {
    const DIM: u32 = 128;
    let mut group = c.benchmark_group("fused");
    for vocab in [2_000usize, 10_000, 100_000, 1_000_000] {
        let spec = ShardSpec {
            model: model_spec(vocab, DIM),
            col_start: 0,
            col_end: DIM,
        };
        let shard = Arc::new(Model::new(spec, &counts(vocab)).expect("model"));
        let joined = WholeVectors::of(std::slice::from_ref(&shard)).expect("whole vectors");
        let (inputs, context_counts, outputs) = batch(vocab, 256, 20, vocab as u64);
        let b = Minibatch {
            seed: 7,
            alpha: 0.0,
            inputs,
            context_counts,
            outputs,
            ..Minibatch::default()
        };
        let (mut targets, mut scratch, mut dots) =
            (Plan::default(), Scratch::default(), Vec::new());
        shard
            .plan(std::slice::from_ref(&b), &mut targets)
            .expect("plan");
        group.throughput(Throughput::Elements(targets.len() as u64));
        group.bench_with_input(BenchmarkId::new("dots", vocab), &vocab, |bench, _| {
            bench.iter(|| {
                joined
                    .fused(black_box(&targets), &mut scratch, &mut dots)
                    .expect("fused")
            });
        });
    }
    group.finish();
}

criterion_group!(benches, handlers, columns, fused, kernels);
criterion_main!(benches);
