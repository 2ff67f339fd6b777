//! Many calls in flight on one shard: from `REFRESH_FROM_CALLS` calls
//! waiting for their adjust, a call's adjust refreshes each of its weights
//! for how far its rows moved since its dotprod (this shard's columns'
//! drift of the dot product, times d ÷ its columns: σ(F + δ) from the
//! σ(F) the weight carries) and steps by its own dot products only; the
//! calls before it step as before, by the dot products pending on their
//! rows. Checked against the reference of `reference.rs`, extended here
//! with its own refresh (f64, the exact sigmoid), on 1 and 2 shards; and
//! CBOW's calls, which refresh as soon as another call waits.

use crate::common::{applied_weights, call_alone, model_on_grpc, DIM};
use crate::reference::{
    assert_rows, call_steps, cap_scale, deal_negatives, head_heavy, loads, norm_scale, random_call,
    sigmoid, Pending, Reference,
};
use colonnade_common::model::Objective;
use colonnade_common::sampler::NegativeSampler;
use colonnade_proto::ModelShards;
use colonnade_ps_shard::plan::ROW_STEP_CAP;
use colonnade_ps_shard::stale::{OTHERS_SHARE, REFRESH_FROM_CALLS};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::ops::Range;

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

/// Each shard's columns when the model is split over `shards`.
fn column_split(shards: usize) -> Vec<Range<usize>> {
    (0..shards)
        .map(|i| {
            let r = colonnade_common::model::column_range(DIM, shards as u32, i as u32);
            r.start as usize..r.end as usize
        })
        .collect()
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
        let split = column_split(shards);
        let want = expect(&split, true);
        let stale = expect(&split, false);
        let scale = norm_scale(&want.u).max(norm_scale(&want.v));
        let tol = 2e-3 * scale.max(1e-3);
        let (spawned, fp, first) = model_on_grpc(shards, &counts, p).await;
        let mut pipes: Vec<_> = calls.iter().map(|_| first.pipeline()).collect();
        call_alone(&mut first.pipeline(), std::slice::from_ref(&warm_mb)).await;
        let mut all_dots = Vec::new();
        for (pipe, (_, mb)) in pipes.iter_mut().zip(&calls) {
            let mut dots = Vec::new();
            pipe.dotprod(std::slice::from_ref(mb), &mut dots)
                .await
                .expect("dotprod");
            all_dots.push(dots);
        }
        for ((pipe, (_, mb)), dots) in pipes.iter_mut().zip(&calls).zip(&all_dots) {
            let w = applied_weights(dots, mb.examples());
            pipe.adjust(std::slice::from_ref(mb), &w)
                .await
                .expect("adjust");
        }
        assert_rows(
            &spawned,
            (fp, rows),
            &want,
            (&stale, 10.0),
            tol,
            "the model without the refresh is as close: the crowded calls were not refreshed",
        );
    }
}

/// CBOW's steps of a call in the reference: per input position (its index
/// in `batch.items`) and target, the output row and G = α × the half float
/// of (label − σ(h·v(x))), h the mean of the position's context rows in
/// `state` (the vectors its dotprod read), 0 for a negative equal to its
/// positive.
fn cbow_steps(
    state: &Reference,
    batch: &Pending,
    alpha: f32,
    sampler: &NegativeSampler,
    negative: usize,
) -> Vec<(usize, usize, f32)> {
    let all = 0..DIM as usize;
    let negatives = deal_negatives(batch, sampler, negative);
    let mut steps = Vec::new();
    for (p, ((center, _), negs)) in batch.items.iter().zip(&negatives).enumerate() {
        let targets =
            std::iter::once((*center as usize, 1.0)).chain(negs.iter().map(|&x| (x as usize, 0.0)));
        for (x, label) in targets {
            let f = cbow_dot(state, batch, p, x, all.clone());
            let skip = label == 0.0 && x == *center as usize;
            let g = alpha * half::f16::from_f64(label - sigmoid(f)).to_f32();
            steps.push((p, x, if skip { 0.0 } else { g }));
        }
    }
    steps
}

/// Position `p`'s h (the mean of its context rows) in `m`, on `cols`.
fn cbow_h(m: &Reference, batch: &Pending, p: usize, cols: Range<usize>) -> Vec<f64> {
    let d = DIM as usize;
    let contexts = &batch.items[p].1;
    cols.map(|c| {
        let sum: f64 = contexts
            .iter()
            .map(|&w| f64::from(m.u[w as usize * d + c]))
            .sum();
        sum / contexts.len() as f64
    })
    .collect()
}

/// Σ over `cols` of h(p)·v(x) in `m`, in f64.
fn cbow_dot(m: &Reference, batch: &Pending, p: usize, x: usize, cols: Range<usize>) -> f64 {
    let d = DIM as usize;
    let h = cbow_h(m, batch, p, cols.clone());
    h.iter()
        .zip(cols)
        .map(|(h, c)| h * f64::from(m.v[x * d + c]))
        .sum()
}

/// Applies CBOW `steps` on `cols`, each step's G from `weight(i)`: per
/// position, Δh += G·v(x) and Δv(x) += G·h from the vectors as they are now,
/// then every context row of the position += its Δh. No row here takes
/// enough steps for the row step cap to scale them (checked by the test).
fn apply_cbow(
    m: &mut Reference,
    batch: &Pending,
    steps: &[(usize, usize, f32)],
    weight: impl Fn(usize) -> f32,
    cols: Range<usize>,
) {
    let d = DIM as usize;
    let mut du = vec![0.0f32; m.u.len()];
    let mut dv = vec![0.0f32; m.v.len()];
    for (p, (_, contexts)) in batch.items.iter().enumerate() {
        let h = cbow_h(m, batch, p, cols.clone());
        let mut dh = vec![0.0f32; d];
        for (i, &(_, x, _)) in steps.iter().enumerate().filter(|(_, s)| s.0 == p) {
            let g = weight(i);
            for (j, c) in cols.clone().enumerate() {
                dh[c] += g * m.v[x * d + c];
                dv[x * d + c] += g * h[j] as f32;
            }
        }
        for &w in contexts {
            for c in cols.clone() {
                du[w as usize * d + c] += dh[c];
            }
        }
    }
    for (a, b) in m.u.iter_mut().zip(&du).chain(m.v.iter_mut().zip(&dv)) {
        *a += b;
    }
}

/// CBOW refreshes as soon as another call waits (`CBOW_REFRESH_FROM_CALLS`,
/// 2): after 20 warm-up calls alone, dotprod A, dotprod B, adjust A, adjust B,
/// where B trains A's positions (other negatives). A found no call waiting
/// and steps from its weights; B found A waiting, so its adjust refreshes
/// each weight for the drift A's adjust gave h·v(x) (per shard, times d ÷
/// its columns) before stepping. Skip-gram keeps `REFRESH_FROM_CALLS` (its
/// 2-call test in `reference.rs` steps without a refresh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbow_refreshes_its_weights_when_another_call_waits() {
    const WARM_CALLS: u64 = 20;
    const WARM_ALPHA: f32 = 0.5;
    const B_ALPHA: f32 = 0.4;
    let h = head_heavy();
    let (vocab, rows, negative, sampler) = (&h.vocab, h.rows, h.negative, &h.sampler);
    let mut p = h.p.clone();
    p.objective = Objective::Cbow;
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let mut call = |seed: u64, alpha: f32| {
        let (mut b, mut mb) = random_call(&mut rng, rows, 8, (2, 4), seed, alpha);
        b.cbow = true;
        mb.objective = Objective::Cbow;
        (b, mb)
    };
    // Warm-up calls alone, so that the rows have grown and A moves F.
    let warm: Vec<_> = (0..WARM_CALLS).map(|j| call(201 + j, WARM_ALPHA)).collect();
    let (a, a_mb) = call(301, WARM_ALPHA);
    let b = Pending {
        items: a.items.clone(),
        seed: 302,
        cbow: true,
        shared: false,
    };
    let b_mb = colonnade_proto::Minibatch {
        seed: 302,
        alpha: B_ALPHA,
        ..a_mb.clone()
    };
    // No row of A (its own dot products and a share of B's pending) nor of
    // B takes more than the row step cap, so none is scaled: per row, a
    // context entry counts its share of its position's 1 + negative dot
    // products, an output row at most every dot product of the call.
    let load = |c: &Pending| {
        let mut k = vec![0usize; rows];
        for (_, contexts) in &c.items {
            for &w in contexts {
                k[w as usize] += (negative + 1).div_ceil(contexts.len());
            }
        }
        k
    };
    let (ka, kb) = (load(&a), load(&b));
    let most_u = ka
        .iter()
        .zip(&kb)
        .map(|(x, y)| x + y.div_ceil(OTHERS_SHARE as usize))
        .max()
        .unwrap_or(0);
    let per_call = (negative + 1) * a.items.len();
    let most = most_u.max(per_call + per_call.div_ceil(OTHERS_SHARE as usize));
    assert!(
        most <= ROW_STEP_CAP as usize,
        "a row takes {most} dot products: the cap would bite"
    );
    let d = DIM as usize;
    let all = 0..d;

    let mut start = Reference::initial(p.seed, rows);
    for (w, _) in &warm {
        let s = cbow_steps(&start, w, WARM_ALPHA, sampler, negative);
        apply_cbow(&mut start, w, &s, |i| s[i].2, all.clone());
    }
    let sa = cbow_steps(&start, &a, WARM_ALPHA, sampler, negative);
    let sb = cbow_steps(&start, &b, B_ALPHA, sampler, negative);
    let mut after_a = start.clone();
    apply_cbow(&mut after_a, &a, &sa, |i| sa[i].2, all.clone());
    let mut stale = after_a.clone();
    apply_cbow(&mut stale, &b, &sb, |i| sb[i].2, all.clone());

    let counts = vocab.counts_only();
    for shards in [1usize, 2] {
        let split = column_split(shards);
        let mut want = after_a.clone();
        for cols in &split {
            let scale = d as f64 / cols.len() as f64;
            let weight = |i: usize| {
                let (q, x, g) = sb[i];
                let drift = (cbow_dot(&after_a, &b, q, x, cols.clone())
                    - cbow_dot(&start, &b, q, x, cols.clone()))
                    * scale;
                // Each position's steps: its positive, then its negatives.
                refreshed(g, B_ALPHA, i.is_multiple_of(negative + 1), drift)
            };
            apply_cbow(&mut want, &b, &sb, weight, cols.clone());
        }
        let scale = norm_scale(&want.u).max(norm_scale(&want.v));
        let tol = 2e-3 * scale.max(1e-3);
        let (spawned, fp, first) = model_on_grpc(shards, &counts, &p).await;
        let (mut pa, mut pb, mut pw) = (first.pipeline(), first.pipeline(), first.pipeline());
        for (_, warm_mb) in &warm {
            call_alone(&mut pw, std::slice::from_ref(warm_mb)).await;
        }
        let (ca, cb) = ([a_mb.clone()], [b_mb.clone()]);
        let (mut da, mut db) = (Vec::new(), Vec::new());
        pa.dotprod(&ca, &mut da).await.expect("dotprod A");
        pb.dotprod(&cb, &mut db).await.expect("dotprod B");
        let wa = applied_weights(&da, a_mb.examples());
        pa.adjust(&ca, &wa).await.expect("adjust A");
        let wb = applied_weights(&db, b_mb.examples());
        pb.adjust(&cb, &wb).await.expect("adjust B");
        assert_rows(
            &spawned,
            (fp, rows),
            &want,
            (&stale, 10.0),
            tol,
            "B stepped by its stale weights: the CBOW call was not refreshed",
        );
    }
}
