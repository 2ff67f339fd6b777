//! Many calls in flight on one shard: from `REFRESH_FROM_CALLS` calls
//! waiting for their adjust, a call's adjust refreshes each of its weights
//! for how far its rows moved since its dotprod (this shard's columns'
//! drift of the dot product, times d ÷ its columns: σ(F + δ) from the
//! σ(F) the weight carries) and steps by its own dot products only; the
//! calls before it step as before, by the dot products pending on their
//! rows. Checked against the reference of `reference.rs`, extended here
//! with its own refresh (f64, the exact sigmoid), on 1 and 2 shards.

use crate::common::{grpc_cluster, DIM};
use crate::reference::{
    assert_rows, call_steps, cap_scale, head_heavy, loads, norm_scale, random_call, sigmoid,
    Reference,
};
use colonnade_common::sgns::applied_weight;
use colonnade_proto::ModelShards;
use colonnade_ps_shard::plan::ROW_STEP_CAP;
use colonnade_ps_shard::stale::{OTHERS_SHARE, REFRESH_FROM_CALLS};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::ops::Range;
use std::sync::Arc;

/// Σ over `cols` of u(w)·v(x), in f64.
fn dot(m: &Reference, w: usize, x: usize, cols: Range<usize>) -> f64 {
    let d = DIM as usize;
    cols.map(|c| f64::from(m.u[w * d + c]) * f64::from(m.v[x * d + c]))
        .sum()
}

/// Applies `steps` (Δu(w) += G·v(x), Δv(x) += G·u(w) from the vectors as
/// they are now) on `cols` only, each step's G from `weight(i)`, each row's
/// summed delta scaled by `cap_scale` of its load.
fn apply_on(
    m: &mut Reference,
    steps: &[(usize, usize, f32)],
    weight: impl Fn(usize) -> f32,
    (load_u, load_v): (&[usize], &[usize]),
    cap: usize,
    cols: Range<usize>,
) {
    let d = DIM as usize;
    let mut du = vec![0.0f32; m.u.len()];
    let mut dv = vec![0.0f32; m.v.len()];
    for (i, &(w, x, _)) in steps.iter().enumerate() {
        let g = weight(i);
        for c in cols.clone() {
            du[w * d + c] += g * m.v[x * d + c];
            dv[x * d + c] += g * m.u[w * d + c];
        }
    }
    for (mat, delta, load) in [(&mut m.u, &du, load_u), (&mut m.v, &dv, load_v)] {
        for (row, (a, b)) in mat
            .chunks_exact_mut(d)
            .zip(delta.chunks_exact(d))
            .enumerate()
        {
            let s = cap_scale(load[row], Some(cap));
            for c in cols.clone() {
                a[c] += s * b[c];
            }
        }
    }
}

/// G = α·w refreshed for a drift δ of F: σ = 1 − w (positive) or −w
/// (negative), and the weight of σ(logit σ + δ).
fn refreshed(g: f32, alpha: f32, positive: bool, drift: f64) -> f32 {
    if g == 0.0 {
        return 0.0;
    }
    let w = f64::from(g) / f64::from(alpha);
    let s = if positive { 1.0 - w } else { -w };
    if s <= 0.0 || s >= 1.0 {
        return g;
    }
    let moved = sigmoid((s / (1.0 - s)).ln() + drift);
    alpha * (if positive { 1.0 - moved } else { -moved }) as f32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowded_shard_refreshes_weights_for_the_drift_of_their_rows() {
    let h = head_heavy();
    let (vocab, rows, p, negative, sampler) = (&h.vocab, h.rows, &h.p, h.negative, &h.sampler);
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut call = |seed: u64, alpha: f32| random_call(&mut rng, rows, 24, (2, 4), seed, alpha);
    let (warm, warm_mb) = call(101, 0.05);
    // The calls in flight together: the first REFRESH_FROM_CALLS − 1 find
    // fewer waiting at their dotprod (theirs included) than the threshold.
    let calls: Vec<_> = (0..REFRESH_FROM_CALLS + 2)
        .map(|j| call(1_000 + 7 * j as u64, 0.05 - 0.002 * j as f32))
        .collect();
    let cap = (4 * (negative + 1)).max(ROW_STEP_CAP as usize);
    let d = DIM as usize;

    // The reference: the warm-up alone, then every call's steps from the
    // same state (their dotprods), applied in order.
    let mut start = Reference::initial(p.seed, rows);
    let steps = call_steps(&start, &warm, 0.05, sampler, negative);
    let (ku, kv) = loads(&steps, rows);
    let all = 0..d;
    apply_on(
        &mut start,
        &steps,
        |i| steps[i].2,
        (&ku, &kv),
        cap,
        all.clone(),
    );
    let steps: Vec<_> = calls
        .iter()
        .map(|(b, mb)| call_steps(&start, b, mb.alpha, sampler, negative))
        .collect();
    let load: Vec<_> = steps.iter().map(|s| loads(s, rows)).collect();
    let positive = |i: usize| i.is_multiple_of(negative + 1);
    // `refresh`: whether the crowded calls refresh (false: the rule before).
    let expect = |split: &[Range<usize>], refresh: bool| {
        let mut m = Reference {
            capped: 0,
            ..start.clone()
        };
        for (j, s) in steps.iter().enumerate() {
            let (own_u, own_v) = &load[j];
            if refresh && j + 1 >= REFRESH_FROM_CALLS {
                let alpha = calls[j].1.alpha;
                let before = m.clone();
                for cols in split {
                    let scale = d as f64 / cols.len() as f64;
                    let weight = |i: usize| {
                        let (w, x, g) = s[i];
                        let drift = (dot(&before, w, x, cols.clone())
                            - dot(&start, w, x, cols.clone()))
                            * scale;
                        refreshed(g, alpha, positive(i), drift)
                    };
                    apply_on(&mut m, s, weight, (own_u, own_v), cap, cols.clone());
                }
            } else {
                // Each row's load: its own dot products and a share of
                // those of the calls still pending (adjusted after this one).
                type Loads = (Vec<usize>, Vec<usize>);
                let with_others = |pick: fn(&Loads) -> &Vec<usize>| -> Vec<usize> {
                    pick(&load[j])
                        .iter()
                        .enumerate()
                        .map(|(r, k)| {
                            let o: usize = load[j + 1..].iter().map(|l| pick(l)[r]).sum();
                            k + o.div_ceil(OTHERS_SHARE as usize)
                        })
                        .collect()
                };
                let (with_u, with_v) = (with_others(|l| &l.0), with_others(|l| &l.1));
                apply_on(&mut m, s, |i| s[i].2, (&with_u, &with_v), cap, all.clone());
            }
        }
        m
    };

    let counts = vocab.counts_only();
    for shards in [1usize, 2] {
        let split: Vec<Range<usize>> = (0..shards)
            .map(|i| {
                let r = colonnade_common::model::column_range(DIM, shards as u32, i as u32);
                r.start as usize..r.end as usize
            })
            .collect();
        let want = expect(&split, true);
        let stale = expect(&split, false);
        let scale = norm_scale(&want.u).max(norm_scale(&want.v));
        let tol = 2e-3 * scale.max(1e-3);
        let (spawned, mut cluster) = grpc_cluster(shards).await;
        let fp = cluster
            .create(
                crate::common::spec_of(&counts, p),
                Arc::clone(&counts),
                std::time::Duration::from_secs(5),
            )
            .await
            .expect("create model");
        let first = cluster
            .pipelines(0, std::time::Duration::from_secs(30))
            .expect("pipelines");
        let weights = |dots: &[f32], examples: usize| -> Vec<f32> {
            dots.iter()
                .enumerate()
                .map(|(t, &f)| applied_weight(f, t < examples))
                .collect()
        };
        let mut pipes: Vec<_> = calls.iter().map(|_| first.pipeline()).collect();
        let mut warm_pipe = first.pipeline();
        let mut dots = Vec::new();
        let warm_call = [warm_mb.clone()];
        warm_pipe
            .dotprod(&warm_call, &mut dots)
            .await
            .expect("dotprod");
        let w = weights(&dots, warm_mb.examples());
        warm_pipe.adjust(&warm_call, &w).await.expect("adjust");
        let mut all_dots = Vec::new();
        for (pipe, (_, mb)) in pipes.iter_mut().zip(&calls) {
            let mut dots = Vec::new();
            pipe.dotprod(std::slice::from_ref(mb), &mut dots)
                .await
                .expect("dotprod");
            all_dots.push(dots);
        }
        for ((pipe, (_, mb)), dots) in pipes.iter_mut().zip(&calls).zip(&all_dots) {
            let w = weights(dots, mb.examples());
            pipe.adjust(std::slice::from_ref(mb), &w)
                .await
                .expect("adjust");
        }
        let cores: Vec<_> = spawned.iter().map(|s| Arc::clone(&s.core)).collect();
        assert_rows(
            &cores,
            (fp, rows),
            &want,
            (&stale, 10.0),
            tol,
            "the model without the refresh is as close: the crowded calls were not refreshed",
        );
    }
}
