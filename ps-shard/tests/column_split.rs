//! Column partitioning is exact: for any split of the dimension among shards,
//! the partial dot products summed in shard order equal the full dot product,
//! and `adjust` on S shards equals `adjust` on one shard column by column,
//! for skip-gram and for CBOW (whose input vectors are means of context rows,
//! taken column by column on each shard).

use colonnade_common::kernels::dot_scalar;
use colonnade_common::model::place_columns;
use colonnade_common::model::ModelSpec;
use colonnade_common::model::Objective;
use colonnade_proto::Minibatch;
use colonnade_ps_shard::model::Scratch;
use colonnade_ps_shard::plan::Plan;
use colonnade_ps_shard::{Matrix, ShardCore, ShardSpec};
use proptest::prelude::*;

const COUNTS: [u64; 9] = [90, 70, 50, 40, 30, 20, 10, 5, 2];

fn model_spec(dim: u32, cbow: bool) -> ModelSpec {
    ModelSpec {
        vocab_fingerprint: 3,
        vocab_size: COUNTS.len() as u64,
        dim,
        negative: 3,
        sampling_power: 0.75,
        init_seed: 99,
        objective: Objective::from_cbow(cbow),
    }
}

/// Shards for the column cut points `cuts` (sorted, inside 1..dim).
fn shards(dim: u32, cbow: bool, cuts: &[u32]) -> Vec<ShardCore> {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(dim);
    bounds
        .windows(2)
        .map(|w| {
            let core = ShardCore::new(None);
            core.create_model(
                ShardSpec {
                    model: model_spec(dim, cbow),
                    col_start: w[0],
                    col_end: w[1],
                },
                &COUNTS,
            )
            .expect("create");
            core
        })
        .collect()
}

fn rows(cores: &[ShardCore], fp: u64, m: Matrix, dim: u32) -> Vec<f32> {
    let d = dim as usize;
    let n = COUNTS.len();
    let mut full = vec![0.0; n * d];
    for core in cores {
        let model = core.model(fp).expect("model");
        let mut part = Vec::new();
        model.read_rows(m, 0, n as u64, &mut part).expect("rows");
        place_columns(
            &mut full,
            d,
            model.spec.col_start..model.spec.col_end,
            &part,
        );
    }
    full
}

fn batch_strategy() -> impl Strategy<Value = (Vec<u32>, Vec<u32>, Vec<u32>)> {
    proptest::collection::vec((0u32..9, proptest::collection::vec(0u32..9, 1..5)), 1..6).prop_map(
        |items| {
            let inputs = items.iter().map(|i| i.0).collect();
            let counts = items.iter().map(|i| i.1.len() as u32).collect();
            let outputs = items.into_iter().flat_map(|i| i.1).collect();
            (inputs, counts, outputs)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn partial_dots_sum_to_the_full_dot(
        dim in 2u32..40,
        raw_cuts in proptest::collection::btree_set(1u32..40, 0..5),
        (inputs, counts, outputs) in batch_strategy(),
        seed in any::<u64>(),
        cbow in any::<bool>(),
    ) {
        let cuts: Vec<u32> = raw_cuts.into_iter().filter(|&c| c < dim).collect();
        let split = shards(dim, cbow, &cuts);
        let whole = shards(dim, cbow, &[]);
        let fp = model_spec(dim, cbow).fingerprint();
        let (mut s, mut t) = (Scratch::default(), Plan::default());
        // Train a little first so v is not all zeros.
        let pairs = if cbow { inputs.len() } else { outputs.len() };
        let mb = |seed| Minibatch { seed, inputs: inputs.clone(), context_counts: counts.clone(), outputs: outputs.clone(), objective: Objective::from_cbow(cbow), ..Minibatch::default() };
        for core in split.iter().chain(&whole) {
            let model = core.model(fp).expect("model");
            let b = mb(seed ^ 1);
            model.plan(std::slice::from_ref(&b), &mut t).expect("plan");
            // Wire order: the examples' positives first, then the negatives.
            let weights: Vec<f32> = (0..pairs * 4).map(|i| if i < pairs { 0.3 } else { -0.2 }).collect();
            model.adjust(&mut t, &weights, false, &mut s).expect("adjust");
        }
        let b = mb(seed);
        // Wire-order sums: per example its positive, then every negative.
        let mut sum = vec![0.0f32; pairs * 4];
        for core in &split {
            let model = core.model(fp).expect("model");
            let mut dots = Vec::new();
            model.plan(std::slice::from_ref(&b), &mut t).expect("plan");
            model.dotprod(&t, &mut s, &mut dots).expect("dotprod");
            sum.iter_mut().zip(&dots).for_each(|(a, x)| *a += x);
        }
        let model = whole[0].model(fp).expect("model");
        let mut dots1 = Vec::new();
        model.plan(std::slice::from_ref(&b), &mut t).expect("plan");
        model.dotprod(&t, &mut s, &mut dots1).expect("dotprod");
        // Independent check of the positive dots from the assembled rows.
        let u = rows(&split, fp, Matrix::Input, dim);
        let v = rows(&split, fp, Matrix::Output, dim);
        let d = dim as usize;
        let row = |m: &[f32], w: u32| m[w as usize * d..(w as usize + 1) * d].to_vec();
        let mut k = 0;
        for (i, &w_in) in inputs.iter().enumerate() {
            let contexts = &outputs[k..k + counts[i] as usize];
            if cbow {
                // The mean of the context rows, against the position's own word.
                let mut h = vec![0.0f32; d];
                for &c in contexts {
                    h.iter_mut().zip(row(&u, c)).for_each(|(a, x)| *a += x);
                }
                h.iter_mut().for_each(|a| *a /= contexts.len() as f32);
                let full = dot_scalar(&h, &row(&v, w_in));
                prop_assert!((sum[i] - full).abs() <= 1e-6, "position {i}: {} vs {full}", sum[i]);
            } else {
                for &w_out in contexts {
                    let full = dot_scalar(&row(&u, w_in), &row(&v, w_out));
                    prop_assert!((sum[k] - full).abs() <= 1e-6, "pair {k}: {} vs {full}", sum[k]);
                    k += 1;
                }
            }
            if cbow {
                k += contexts.len();
            }
        }
        for (a, b) in sum.iter().zip(&dots1) {
            prop_assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
        }
        // The split model equals the unsplit one column by column after adjust.
        prop_assert_eq!(rows(&split, fp, Matrix::Input, dim).len(), rows(&whole, fp, Matrix::Input, dim).len());
        for m in [Matrix::Input, Matrix::Output] {
            let (a, b) = (rows(&split, fp, m, dim), rows(&whole, fp, m, dim));
            for (x, y) in a.iter().zip(&b) {
                prop_assert!((x - y).abs() <= 1e-6, "{m:?}: {x} vs {y}");
            }
        }
    }
}
