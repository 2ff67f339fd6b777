//! The distributed trainer against a plain single-process SGNS reference.
//!
//! The reference below follows word2vec's skip-gram negative-sampling math on
//! full vectors, written out longhand (f64 dot products, explicit sigmoid), with
//! the minibatch semantics of the paper (Fig. 6, section 5.1: all vectors of a
//! minibatch are read at its start and its deltas applied at its end). It shares
//! with the system only what the system's components must agree on bit for bit
//! by design (vocabulary order, seed derivation, the negative distribution
//! and how a call's systematic sample is dealt to its examples (its
//! definition, `word_at` and `Deal::example_of`; the shard walks and deals
//! incrementally), row init);
//! the windowing, subsampling, minibatch grouping, learning-rate schedule and
//! the gradient are its own. In deterministic mode (one minibatch in flight) the
//! distributed run must match it to float tolerance: 1 shard through the tonic
//! service, 3 shards over gRPC, and 2 shards called in process (what
//! `--embedded-shards` trains with).
//!
//! Weights travel as half floats of G ÷ α (API 4); the reference rounds its
//! own f64 weights the same way.
//!
//! CBOW (`p.objective`) is the same loop read the other way round, as word2vec's
//! `-cbow 1` with gensim's `cbow_mean`: per input position, the mean h of its
//! context words' u rows is the input vector, its own word the positive, and
//! every context word gets the position's whole Δh.
//!
//! The row step cap (a row in more than `cap` dot products of one minibatch,
//! cap = max(ROW_STEP_CAP, the widest input position's dot products), has
//! its summed update scaled by `cap / k`) is a design rule both sides share;
//! the reference counts the occurrences itself, and one test runs a
//! head-heavy vocabulary where the cap bites.

use crate::common::{
    assemble, grpc_cluster, max_abs_diff, params, run, run_in_process, run_on_cores, sample_corpus,
    vocab_of, DIM,
};
use colonnade_client::train::TrainParams;
use colonnade_common::corpus::SentenceReader;
use colonnade_common::init::init_input_row;
use colonnade_common::model::Objective;
use colonnade_common::sampler::{Deal, NegativeSampler};
use colonnade_common::seeds::{derive, Purpose};
use colonnade_common::vocab::Vocab;
use colonnade_ps_shard::plan::ROW_STEP_CAP;
use colonnade_ps_shard::{Matrix, ShardCore, SpawnedShard};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Arc;

#[derive(Clone)]
pub(crate) struct Reference {
    pub(crate) u: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// Row updates that the step cap scaled down, over the whole run.
    pub(crate) capped: u64,
}

impl Reference {
    /// The model of run seed `seed` before training: u rows from their
    /// init, v zero.
    pub(crate) fn initial(seed: u64, rows: usize) -> Self {
        let d = DIM as usize;
        let mut m = Reference {
            u: vec![0.0; rows * d],
            v: vec![0.0; rows * d],
            capped: 0,
        };
        for w in 0..rows {
            init_input_row(seed, DIM, w as u64, 0, &mut m.u[w * d..(w + 1) * d]);
        }
        m
    }
}

/// The factor of a row's summed update when it took part in `k` dot products
/// of a minibatch whose steps per row are capped at `cap`.
pub(crate) fn cap_scale(k: usize, cap: Option<usize>) -> f32 {
    if let Some(cap) = cap.filter(|&c| k > c) {
        (cap as f64 / k as f64) as f32
    } else {
        1.0
    }
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One pending minibatch: (input word, its output words) in order, and its seed.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) items: Vec<(u32, Vec<u32>)>,
    pub(crate) seed: u64,
    pub(crate) cbow: bool,
    /// Skip-gram with negatives shared by each position's context words.
    pub(crate) shared: bool,
}

/// CBOW's dot products and deltas of one minibatch: per item, h = the mean
/// of its context rows (f64), against its own word and negatives; Δh goes to
/// every context word. Counts the dot products each row takes part in (a
/// context row, its share of its position's).
#[allow(clippy::too_many_arguments)]
fn cbow_dots(
    u: &[f32],
    v: &[f32],
    batch: &Pending,
    alpha: f32,
    negatives: &[Vec<u32>],
    du: &mut [f32],
    dv: &mut [f32],
    k_u: &mut [usize],
    k_v: &mut [usize],
) {
    let d = DIM as usize;
    for ((center, contexts), negs) in batch.items.iter().zip(negatives) {
        let mut h = vec![0.0f64; d];
        for &c in contexts {
            for (a, x) in h.iter_mut().zip(&u[c as usize * d..(c as usize + 1) * d]) {
                *a += f64::from(*x);
            }
        }
        h.iter_mut().for_each(|a| *a /= contexts.len() as f64);
        let mut dh = vec![0.0f32; d];
        let targets =
            std::iter::once((*center as usize, 1.0)).chain(negs.iter().map(|&x| (x as usize, 0.0)));
        // Each context row is 1/count of h: it counts its share of the
        // position's 1 + negative dot products, rounded up.
        let share = (negs.len() + 1).div_ceil(contexts.len().max(1));
        for &c in contexts {
            k_u[c as usize] += share;
        }
        for (x, label) in targets {
            k_v[x] += 1;
            let f: f64 = (0..d).map(|i| h[i] * f64::from(v[x * d + i])).sum();
            let g = alpha * half::f16::from_f64(label - sigmoid(f)).to_f32();
            // A negative equal to the positive carries no update.
            let g = if label == 0.0 && x == *center as usize {
                0.0
            } else {
                g
            };
            for i in 0..d {
                dh[i] += g * v[x * d + i];
                dv[x * d + i] += g * h[i] as f32;
            }
        }
        for &c in contexts {
            for (a, b) in du[c as usize * d..(c as usize + 1) * d].iter_mut().zip(&dh) {
                *a += b;
            }
        }
    }
}

/// Skip-gram with shared negatives, word2vec C's orientation: per item, each
/// context word's u row against the item's own word (label 1) and the
/// item's negatives (label 0), Δu to the context word, Δv to the target.
#[allow(clippy::too_many_arguments)]
fn shared_dots(
    u: &[f32],
    v: &[f32],
    batch: &Pending,
    alpha: f32,
    negatives: &[Vec<u32>],
    du: &mut [f32],
    dv: &mut [f32],
    k_u: &mut [usize],
    k_v: &mut [usize],
) {
    let d = DIM as usize;
    for ((center, contexts), negs) in batch.items.iter().zip(negatives) {
        for &c in contexts {
            let c = c as usize;
            let targets = std::iter::once((*center as usize, 1.0))
                .chain(negs.iter().map(|&x| (x as usize, 0.0)));
            for (x, label) in targets {
                k_u[c] += 1;
                k_v[x] += 1;
                let f: f64 = (0..d)
                    .map(|i| f64::from(u[c * d + i]) * f64::from(v[x * d + i]))
                    .sum();
                let skip = label == 0.0 && x == *center as usize;
                let g = if skip {
                    0.0
                } else {
                    alpha * half::f16::from_f64(label - sigmoid(f)).to_f32()
                };
                for i in 0..d {
                    du[c * d + i] += g * v[x * d + i];
                    dv[x * d + i] += g * u[c * d + i];
                }
            }
        }
    }
}

/// Plain SGNS over the corpus, one epoch per `p.iter`, deferred minibatch updates.
fn reference_train(vocab: &Vocab, corpus: &Path, p: &TrainParams, cap: bool) -> Reference {
    let d = DIM as usize;
    let n_words = vocab.len();
    let mut model = Reference {
        u: vec![0.0f32; n_words * d],
        v: vec![0.0f32; n_words * d],
        capped: 0,
    };
    for w in 0..n_words {
        init_input_row(p.seed, DIM, w as u64, 0, &mut model.u[w * d..(w + 1) * d]);
    }
    let sampler = NegativeSampler::new(vocab.counts(), 0.75).expect("sampler");
    let total: u64 = vocab.counts().iter().sum();
    // word2vec: keep with probability (sqrt(c/(s·T)) + 1)·(s·T)/c.
    let keep: Vec<f64> = vocab
        .counts()
        .iter()
        .map(|&c| {
            let st = p.sample * total as f64;
            ((c as f64 / st).sqrt() + 1.0) * st / c as f64
        })
        .collect();
    let words_total = u64::from(p.iter) * total;
    let mut words_done = 0u64;
    let alpha = |done: u64| {
        let alpha0 = f64::from(p.alpha);
        (alpha0 * (1.0 - done as f64 / (words_total as f64 + 1.0))).max(alpha0 * 1e-4) as f32
    };
    // Minibatches are consecutive input positions, across sentences and epochs.
    let mut pending = Pending::default();
    for epoch in 0..u64::from(p.iter) {
        let mut reader = SentenceReader::open(corpus, p.max_sentence).expect("corpus");
        let mut index = 0u64;
        while let Some(s) = reader.next_sentence().expect("sentence") {
            let ids: Vec<u32> = s.tokens().filter_map(|t| vocab.id(t)).collect();
            let sentence_seed = derive(p.seed, Purpose::Sentence, epoch, index);
            index += 1;
            let mut rng = ChaCha8Rng::seed_from_u64(sentence_seed);
            let mut kept = Vec::new();
            for &w in &ids {
                let draw = f64::from(rng.next_u32()) / 4_294_967_296.0;
                if keep[w as usize] >= 1.0 || draw < keep[w as usize] {
                    kept.push(w);
                }
            }
            let radius: Vec<usize> = kept
                .iter()
                .map(|_| (p.window - rng.next_u32() % p.window) as usize)
                .collect();
            words_done += ids.len() as u64;
            let mut full = Vec::new();
            for j in 0..kept.len() {
                let lo = j.saturating_sub(radius[j]);
                let hi = (j + radius[j]).min(kept.len() - 1);
                let outputs: Vec<u32> = (lo..=hi).filter(|&k| k != j).map(|k| kept[k]).collect();
                if outputs.is_empty() {
                    continue;
                }
                if pending.items.is_empty() {
                    pending.seed = derive(sentence_seed, Purpose::Minibatch, j as u64, 0);
                    pending.cbow = p.objective.is_cbow();
                    pending.shared = p.shared_negatives;
                }
                pending.items.push((kept[j], outputs));
                if pending.items.len() == p.minibatch {
                    full.push(std::mem::take(&mut pending));
                }
            }
            for batch in full {
                sgd_step(
                    &mut model,
                    &batch,
                    alpha(words_done),
                    &sampler,
                    p.negative as usize,
                    cap,
                );
            }
        }
    }
    if !pending.items.is_empty() {
        sgd_step(
            &mut model,
            &pending,
            alpha(words_done),
            &sampler,
            p.negative as usize,
            cap,
        );
    }
    model
}

/// Every example's negatives (in band order): the minibatch's systematic
/// sample of `examples × negative` points, each the word at its point,
/// point i going to the example its deal gives it (the definitions, not the
/// shard's incremental walk).
pub(crate) fn deal_negatives(
    batch: &Pending,
    sampler: &NegativeSampler,
    negative: usize,
) -> Vec<Vec<u32>> {
    let examples: usize = if batch.cbow || batch.shared {
        batch.items.len()
    } else {
        batch.items.iter().map(|(_, o)| o.len()).sum()
    };
    let n = (examples * negative) as u128;
    let total = sampler.total();
    let deal = Deal::new(batch.seed, examples as u64, negative as u32, total);
    let mut negatives = vec![Vec::with_capacity(negative); examples];
    for i in 0..n {
        let x = ((i * u128::from(total) + u128::from(deal.offset)) / n) as u64;
        let e = deal.example_of(i as u64, examples as u64);
        negatives[e as usize].push(sampler.word_at(x));
    }
    negatives
}

/// One minibatch: every dot product from the start-of-minibatch vectors, the
/// gradient α(label − σ(f)) applied to u(w_I) and v(x) at the end.
fn sgd_step(
    model: &mut Reference,
    batch: &Pending,
    alpha: f32,
    sampler: &NegativeSampler,
    negative: usize,
    cap: bool,
) {
    let d = DIM as usize;
    let (u, v) = (&mut model.u, &mut model.v);
    let negatives = deal_negatives(batch, sampler, negative);
    let mut du = vec![0.0f32; u.len()];
    let mut dv = vec![0.0f32; v.len()];
    // How many dot products each input and each output row takes part in.
    let mut k_u = vec![0usize; u.len() / d];
    let mut k_v = vec![0usize; v.len() / d];
    // At least ROW_STEP_CAP, and the dot products of the widest input position.
    let widest = batch.items.iter().map(|(_, o)| o.len()).max().unwrap_or(0);
    let cap = cap.then_some((widest * (negative + 1)).max(ROW_STEP_CAP as usize));
    if batch.cbow {
        cbow_dots(
            u, v, batch, alpha, &negatives, &mut du, &mut dv, &mut k_u, &mut k_v,
        );
    }
    if batch.shared {
        shared_dots(
            u, v, batch, alpha, &negatives, &mut du, &mut dv, &mut k_u, &mut k_v,
        );
    }
    let pairs = batch.items.iter().filter(|_| !(batch.cbow || batch.shared));
    let pairs = pairs.flat_map(|(w_in, outputs)| outputs.iter().map(move |&o| (*w_in, o)));
    for ((w_in, w_out), negs) in pairs.zip(&negatives) {
        let w_in = w_in as usize;
        {
            let targets = std::iter::once((w_out as usize, 1.0))
                .chain(negs.iter().map(|&x| (x as usize, 0.0)));
            for (x, label) in targets {
                k_u[w_in] += 1;
                k_v[x] += 1;
                let f: f64 = (0..d)
                    .map(|c| f64::from(u[w_in * d + c]) * f64::from(v[x * d + c]))
                    .sum();
                // The weight travels as a half float of G ÷ α (a wire rule
                // both sides share, like the step cap).
                let scaled = half::f16::from_f64(label - sigmoid(f)).to_f32();
                // A negative equal to the positive carries no update.
                let skip = label == 0.0 && x == w_out as usize;
                let g = if skip { 0.0 } else { alpha * scaled };
                for c in 0..d {
                    du[w_in * d + c] += g * v[x * d + c];
                    dv[x * d + c] += g * u[w_in * d + c];
                }
            }
        }
    }
    for (row, (a, b)) in u.chunks_exact_mut(d).zip(du.chunks_exact(d)).enumerate() {
        let s = cap_scale(k_u[row], cap);
        for (a, b) in a.iter_mut().zip(b) {
            *a += s * b;
        }
    }
    for (row, (a, b)) in v.chunks_exact_mut(d).zip(dv.chunks_exact(d)).enumerate() {
        let s = cap_scale(k_v[row], cap);
        for (a, b) in a.iter_mut().zip(b) {
            *a += s * b;
        }
    }
    model.capped += k_u
        .iter()
        .chain(&k_v)
        .filter(|&&k| cap.is_some_and(|c| k > c))
        .count() as u64;
}

pub(crate) fn norm_scale(x: &[f32]) -> f32 {
    x.iter().map(|a| a.abs()).fold(0.0, f32::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_matches_reference_for_one_and_three_shards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 20_000);
    let vocab = Arc::new(vocab_of(&corpus, 3));
    let p = params(11);
    let reference = reference_train(&vocab, &corpus, &p, true);
    let v = vocab.len() as u64;

    // One shard, in process.
    let (fp, cores1, summary) = run_in_process(1, &vocab, &corpus, &p).await;
    assert!(
        summary.pairs > 10_000,
        "trained only {} pairs",
        summary.pairs
    );
    let u1 = assemble(&cores1, fp, Matrix::Input, v);
    let v1 = assemble(&cores1, fp, Matrix::Output, v);

    // Three shards over gRPC on loopback.
    let (spawned, grpc) = grpc_cluster(3).await;
    let (fp3, _) = run(grpc, &vocab, &corpus, &p).await;
    assert_eq!(
        fp3, fp,
        "the fingerprint does not depend on the shard count"
    );
    let cores: Vec<_> = spawned.iter().map(|s| Arc::clone(&s.core)).collect();
    let u3 = assemble(&cores, fp, Matrix::Input, v);
    let v3 = assemble(&cores, fp, Matrix::Output, v);

    // Two shards called in process, as `--embedded-shards 2` trains.
    let (fp2, cores2, _) = run_in_process(2, &vocab, &corpus, &p).await;
    assert_eq!(fp2, fp);
    let u2 = assemble(&cores2, fp, Matrix::Input, v);
    let v2 = assemble(&cores2, fp, Matrix::Output, v);

    let scale = norm_scale(&reference.u).max(norm_scale(&reference.v));
    let tol = 1e-4 * scale.max(1e-3);
    assert!(
        max_abs_diff(&reference.v, &vec![0.0; reference.v.len()]) > 100.0 * tol,
        "training moved the vectors"
    );
    for (name, got) in [
        ("u 1 shard", &u1),
        ("v 1 shard", &v1),
        ("u 3 shards", &u3),
        ("v 3 shards", &v3),
        ("u 2 shards in process", &u2),
        ("v 2 shards in process", &v2),
    ] {
        let want = if name.starts_with('u') {
            &reference.u
        } else {
            &reference.v
        };
        let diff = max_abs_diff(got, want);
        assert!(
            diff <= tol,
            "{name}: max |distributed − reference| = {diff} > {tol}"
        );
    }
    let diff = max_abs_diff(&u1, &u3);
    assert!(diff <= tol, "1 vs 3 shards differ by {diff}");
    for s in spawned {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_matches_reference_where_the_row_step_cap_bites() {
    // A head-heavy vocabulary (the ~20 most frequent words) and larger
    // minibatches: frequent rows take part in more than ROW_STEP_CAP dot
    // products per minibatch, so the cap scales their updates.
    let mut p = params(5);
    p.minibatch = 64;
    matches_reference_where_the_cap_bites(&p, 100).await;
}

/// CBOW where the cap bites: a context row counts its share of its
/// position's dot products (1/count of them, rounded up), so a frequent
/// context word is scaled later than a skip-gram input in as many windows
/// (the reference counts it longhand; counted in full, as before, the
/// models differ).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbow_matches_reference_where_the_row_step_cap_bites() {
    let mut p = params(7);
    p.objective = Objective::Cbow;
    p.minibatch = 256;
    matches_reference_where_the_cap_bites(&p, 40).await;
}

/// `p` on a head-heavy vocabulary (the ~20 most frequent words), 1 shard
/// over gRPC and 2 in process, against the reference with the cap (which
/// scales more than `min_capped` row updates), and away from it without.
async fn matches_reference_where_the_cap_bites(p: &TrainParams, min_capped: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 20_000);
    let vocab = Arc::new(vocab_of(&corpus, 150));
    assert!(vocab.len() < 40, "{} words", vocab.len());
    let reference = reference_train(&vocab, &corpus, p, true);
    assert!(
        reference.capped > min_capped,
        "the cap scaled only {} row updates",
        reference.capped
    );
    let uncapped = reference_train(&vocab, &corpus, p, false);
    let v = vocab.len() as u64;

    let (spawned, grpc) = grpc_cluster(1).await;
    let (fp, _) = run(grpc, &vocab, &corpus, p).await;
    let core1: Vec<_> = spawned.iter().map(|s| Arc::clone(&s.core)).collect();
    let (_, cores2, _) = run_in_process(2, &vocab, &corpus, p).await;
    let scale = norm_scale(&reference.u).max(norm_scale(&reference.v));
    let tol = 1e-4 * scale.max(1e-3);
    for (name, cores) in [
        ("1 shard over gRPC", core1),
        ("2 shards in process", cores2),
    ] {
        let got_u = assemble(&cores, fp, Matrix::Input, v);
        let got_v = assemble(&cores, fp, Matrix::Output, v);
        for (m, got, want, without) in [
            ("u", &got_u, &reference.u, &uncapped.u),
            ("v", &got_v, &reference.v, &uncapped.v),
        ] {
            let diff = max_abs_diff(got, want);
            assert!(
                diff <= tol,
                "{name} {m}: max |distributed − reference| = {diff} > {tol}"
            );
            let off = max_abs_diff(got, without);
            assert!(
                off > 100.0 * tol,
                "{name} {m}: the uncapped reference is as close ({off}): the cap was not exercised"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_seeds_give_different_models() {
    // Guards the test above against passing trivially.
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 5_000);
    let vocab = Arc::new(vocab_of(&corpus, 3));
    let v = vocab.len() as u64;
    let core = [Arc::new(ShardCore::new(None))];
    let (fa, _) = run_on_cores(&core, &vocab, &corpus, &params(1)).await;
    let (fb, _) = run_on_cores(&core, &vocab, &corpus, &params(2)).await;
    assert_ne!(fa, fb);
    let a = assemble(&core, fa, Matrix::Input, v);
    let b = assemble(&core, fb, Matrix::Input, v);
    assert!(max_abs_diff(&a, &b) > 1e-3);
}

/// `p`'s run on 1 shard in process (the fused step), 2 in process and 3
/// over gRPC against the reference's longhand loop, to float tolerance, and
/// away from the reference of `other` (the same run trained another way),
/// so that the comparison tells the two apart.
async fn matches_reference_not_other(what: &str, p: &TrainParams, other: &TrainParams) {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 20_000);
    let vocab = Arc::new(vocab_of(&corpus, 3));
    let reference = reference_train(&vocab, &corpus, p, true);
    let unlike = reference_train(&vocab, &corpus, other, true);
    let v = vocab.len() as u64;

    // One shard in process: the fused step.
    let (fp, cores1, summary) = run_in_process(1, &vocab, &corpus, p).await;
    assert!(
        summary.pairs > 10_000,
        "trained only {} pairs",
        summary.pairs
    );
    // Two shards in process, three over gRPC.
    let (_, cores2, _) = run_in_process(2, &vocab, &corpus, p).await;
    let (spawned, grpc) = grpc_cluster(3).await;
    let (fp3, _) = run(grpc, &vocab, &corpus, p).await;
    assert_eq!(fp3, fp);
    let cores3: Vec<_> = spawned.iter().map(|s| Arc::clone(&s.core)).collect();

    let scale = norm_scale(&reference.u).max(norm_scale(&reference.v));
    let tol = 1e-4 * scale.max(1e-3);
    for (name, cores) in [
        ("1 shard in process", &cores1),
        ("2 shards in process", &cores2),
        ("3 shards over gRPC", &cores3),
    ] {
        for (m, matrix, want, off_from) in [
            ("u", Matrix::Input, &reference.u, &unlike.u),
            ("v", Matrix::Output, &reference.v, &unlike.v),
        ] {
            let got = assemble(cores, fp, matrix, v);
            let diff = max_abs_diff(&got, want);
            assert!(
                diff <= tol,
                "{what} {name} {m}: max |distributed − reference| = {diff} > {tol}"
            );
            let off = max_abs_diff(&got, off_from);
            assert!(
                off > 100.0 * tol,
                "{what} {name} {m}: as close to the other reference ({off})"
            );
        }
    }
    for s in spawned {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbow_matches_reference_for_one_two_and_three_shards() {
    let mut p = params(13);
    p.objective = Objective::Cbow;
    let mut sg = p.clone();
    sg.objective = Objective::SkipGram;
    matches_reference_not_other("CBOW", &p, &sg).await;
}

/// Shared negatives (`--shared-negatives`), against the reference's own
/// loop for them and away from plain skip-gram of the same run; the same
/// model fingerprint (it is a way to train a skip-gram model).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_negatives_match_reference_for_one_two_and_three_shards() {
    let mut p = params(17);
    p.shared_negatives = true;
    let mut sg = p.clone();
    sg.shared_negatives = false;
    matches_reference_not_other("shared negatives", &p, &sg).await;
}

/// A call's steps in the reference (skip-gram): per dot product its input
/// row, output row and weight G = α × the half float of (label − σ(f)), f
/// from `state` (the vectors its dotprod read), 0 for a negative equal to
/// its positive.
pub(crate) fn call_steps(
    state: &Reference,
    batch: &Pending,
    alpha: f32,
    sampler: &NegativeSampler,
    negative: usize,
) -> Vec<(usize, usize, f32)> {
    let d = DIM as usize;
    let negatives = deal_negatives(batch, sampler, negative);
    let pairs = batch
        .items
        .iter()
        .flat_map(|(w_in, outputs)| outputs.iter().map(move |&o| (*w_in as usize, o as usize)));
    let mut steps = Vec::new();
    for ((w_in, w_out), negs) in pairs.zip(&negatives) {
        let targets = std::iter::once((w_out, 1.0)).chain(negs.iter().map(|&x| (x as usize, 0.0)));
        for (x, label) in targets {
            let f: f64 = (0..d)
                .map(|c| f64::from(state.u[w_in * d + c]) * f64::from(state.v[x * d + c]))
                .sum();
            let scaled = half::f16::from_f64(label - sigmoid(f)).to_f32();
            let skip = label == 0.0 && x == w_out;
            steps.push((w_in, x, if skip { 0.0 } else { alpha * scaled }));
        }
    }
    steps
}

/// Dot products per input and output row among `steps`.
pub(crate) fn loads(steps: &[(usize, usize, f32)], rows: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut k_u, mut k_v) = (vec![0; rows], vec![0; rows]);
    for &(w, x, _) in steps {
        k_u[w] += 1;
        k_v[x] += 1;
    }
    (k_u, k_v)
}

/// Applies a call's `steps` to `model`: Δu(w) += G·v(x) and Δv(x) += G·u(w)
/// from the vectors as they are now (the adjust reads them), then each
/// row's summed delta scaled by `cap_scale` of the dot products pending on
/// it (`load_u`, `load_v`: the call's own and those of the calls still in
/// flight).
pub(crate) fn apply_steps(
    model: &mut Reference,
    steps: &[(usize, usize, f32)],
    load_u: &[usize],
    load_v: &[usize],
    cap: usize,
) {
    let d = DIM as usize;
    let mut du = vec![0.0f32; model.u.len()];
    let mut dv = vec![0.0f32; model.v.len()];
    for &(w, x, g) in steps {
        for c in 0..d {
            du[w * d + c] += g * model.v[x * d + c];
            dv[x * d + c] += g * model.u[w * d + c];
        }
    }
    for (m, delta, load) in [(&mut model.u, &du, load_u), (&mut model.v, &dv, load_v)] {
        for (row, (a, b)) in m.chunks_exact_mut(d).zip(delta.chunks_exact(d)).enumerate() {
            let s = cap_scale(load[row], Some(cap));
            if s < 1.0 {
                model.capped += 1;
            }
            for (a, b) in a.iter_mut().zip(b) {
                *a += s * b;
            }
        }
    }
}

/// The calls-in-flight tests' setting: a head-heavy vocabulary (under 40
/// words) of the sample corpus, the params of seed 7 and their sampler.
pub(crate) struct HeadHeavy {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) vocab: Arc<Vocab>,
    pub(crate) rows: usize,
    pub(crate) p: TrainParams,
    pub(crate) negative: usize,
    pub(crate) sampler: NegativeSampler,
}

pub(crate) fn head_heavy() -> HeadHeavy {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 20_000);
    let vocab = Arc::new(vocab_of(&corpus, 150));
    let rows = vocab.len();
    assert!(rows < 40, "{rows} words: a head-heavy vocabulary");
    let p = params(7);
    let sampler = NegativeSampler::new(vocab.counts(), 0.75).expect("sampler");
    HeadHeavy {
        _dir: dir,
        vocab,
        rows,
        negative: p.negative as usize,
        p,
        sampler,
    }
}

/// A call of `positions` input positions with `contexts.0 ..= contexts.1`
/// context words each, every word drawn uniformly from `rows`: as the
/// reference reads it and as it travels.
pub(crate) fn random_call(
    rng: &mut ChaCha8Rng,
    rows: usize,
    positions: usize,
    contexts: (u32, u32),
    seed: u64,
    alpha: f32,
) -> (Pending, colonnade_proto::Minibatch) {
    let mut batch = Pending {
        seed,
        ..Pending::default()
    };
    let mut mb = colonnade_proto::Minibatch {
        seed,
        alpha,
        ..Default::default()
    };
    for _ in 0..positions {
        let w = rng.next_u32() % rows as u32;
        let n = contexts.0 + rng.next_u32() % (contexts.1 - contexts.0 + 1);
        let outputs: Vec<u32> = (0..n).map(|_| rng.next_u32() % rows as u32).collect();
        mb.inputs.push(w);
        mb.context_counts.push(n);
        mb.outputs.extend(&outputs);
        batch.items.push((w, outputs));
    }
    (batch, mb)
}

/// Every row of both matrices of model `fp` (`rows` words) on the shards
/// `spawned` against `want`, within `tol`, and against `without`,
/// which must be more than `far` × `tol` off (`why` says what it means if
/// not).
pub(crate) fn assert_rows(
    spawned: &[SpawnedShard],
    (fp, rows): (u64, usize),
    want: &Reference,
    (without, far): (&Reference, f32),
    tol: f32,
    why: &str,
) {
    let cores: Vec<_> = spawned.iter().map(|s| Arc::clone(&s.core)).collect();
    let shards = cores.len();
    for (m, matrix, want, without) in [
        ("u", Matrix::Input, &want.u, &without.u),
        ("v", Matrix::Output, &want.v, &without.v),
    ] {
        let got = assemble(&cores, fp, matrix, rows as u64);
        let diff = max_abs_diff(&got, want);
        assert!(
            diff <= tol,
            "{shards} shard(s) {m}: max |distributed − reference| = {diff} > {tol}"
        );
        let off = max_abs_diff(&got, without);
        assert!(
            off > far * tol,
            "{shards} shard(s) {m}: only {off} off: {why}"
        );
    }
}

/// Calls in flight together over gRPC, in a fixed order on 1 and 2 shards:
/// a warm-up call alone (v is zero before it), then dotprod A, dotprod B,
/// adjust A, adjust B. Both read the model as the warm-up left it; A's adjust
/// finds B's dot products pending too, so each of its rows is scaled by the
/// cap over its own dot products on it and a quarter of B's (the design's
/// share of other calls', defined here independently of the shard's
/// constant); B's finds A's applied and
/// released, so its rows are scaled by its own, its weights still from the
/// state before A (docs/design.md, "Staleness across calls in flight").
/// The reference computes all of it from its own definitions; a run with
/// each call scaled by its own dot products only (the rule before calls in
/// flight were counted) must be far off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_scale_each_row_by_the_dot_products_pending_on_it() {
    use colonnade_proto::ModelShards;
    let HeadHeavy {
        _dir,
        vocab,
        rows,
        p,
        negative,
        sampler,
    } = head_heavy();
    // Three calls of 72 input positions with 3 to 6 context words each, all
    // words drawn uniformly: ~55 dot products per row and call, so a row is
    // mostly within the cap (64: the widest position has 6 × 5) in one call
    // and beyond it with a quarter of another's.
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut call = |seed: u64, alpha: f32| random_call(&mut rng, rows, 72, (3, 6), seed, alpha);
    let (warm, warm_mb) = call(101, 0.05);
    let (a, a_mb) = call(202, 0.05);
    let (b, b_mb) = call(303, 0.04);
    let cap = 6 * (negative + 1).max(1);
    let cap = cap.max(ROW_STEP_CAP as usize);

    // The reference: the warm-up alone, then A and B from the same state.
    let mut want = Reference::initial(p.seed, rows);
    let steps = call_steps(&want, &warm, 0.05, &sampler, negative);
    let (ku, kv) = loads(&steps, rows);
    apply_steps(&mut want, &steps, &ku, &kv, cap);
    let steps_a = call_steps(&want, &a, 0.05, &sampler, negative);
    let steps_b = call_steps(&want, &b, 0.04, &sampler, negative);
    let ((ka_u, ka_v), (kb_u, kb_v)) = (loads(&steps_a, rows), loads(&steps_b, rows));
    const OTHERS_SHARE: usize = 4;
    let both = |x: &[usize], y: &[usize]| {
        x.iter()
            .zip(y)
            .map(|(p, q)| p + q.div_ceil(OTHERS_SHARE))
            .collect::<Vec<_>>()
    };
    let mut alone = Reference {
        u: want.u.clone(),
        v: want.v.clone(),
        capped: 0,
    };
    want.capped = 0;
    apply_steps(
        &mut want,
        &steps_a,
        &both(&ka_u, &kb_u),
        &both(&ka_v, &kb_v),
        cap,
    );
    apply_steps(&mut want, &steps_b, &kb_u, &kb_v, cap);
    assert!(want.capped > 10, "only {} rows scaled", want.capped);
    apply_steps(&mut alone, &steps_a, &ka_u, &ka_v, cap);
    apply_steps(&mut alone, &steps_b, &kb_u, &kb_v, cap);

    let counts = vocab.counts_only();
    let scale = norm_scale(&want.u).max(norm_scale(&want.v));
    let tol = 1e-4 * scale.max(1e-3);
    for shards in [1, 2] {
        let (spawned, fp, mut first) = crate::common::model_on_grpc(shards, &counts, &p).await;
        let mut second = first.pipeline();
        let (mut dots, mut dots_b) = (Vec::new(), Vec::new());
        crate::common::call_alone(&mut first, std::slice::from_ref(&warm_mb)).await;
        let (call_a, call_b) = ([a_mb.clone()], [b_mb.clone()]);
        first.dotprod(&call_a, &mut dots).await.expect("dotprod A");
        second
            .dotprod(&call_b, &mut dots_b)
            .await
            .expect("dotprod B");
        let w = crate::common::applied_weights(&dots, a_mb.examples());
        first.adjust(&call_a, &w).await.expect("adjust A");
        let w = crate::common::applied_weights(&dots_b, b_mb.examples());
        second.adjust(&call_b, &w).await.expect("adjust B");

        assert_rows(
            &spawned,
            (fp, rows),
            &want,
            (&alone, 100.0),
            tol,
            "scaling each call by its own dot products only is as close: the pending counts \
             were not exercised",
        );
    }
}
