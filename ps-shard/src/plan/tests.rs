//! The plan against its definitions.

use super::*;
use proptest::prelude::*;

/// The plan against the definitions: positives in example order, then
/// point i of the sample (the word at ⌊(i·T + r)/N⌋) dealt to example
/// `Deal::example_of(i)`, each with its example's input position; a
/// negative equal to its example's positive carries α 0; the groups
/// ascend by row.
#[test]
fn a_plan_deals_the_sample_as_defined() {
    let counts: Vec<u64> = (1..=60u64)
        .map(|r| 6000 / r)
        .chain([3, 3, 2, 2, 1])
        .collect();
    let sampler = NegativeSampler::new(&counts, 0.75).expect("sampler");
    for (cbow, negative) in [(false, 5usize), (true, 3), (false, 1)] {
        let objective = Objective::from_cbow(cbow);
        let mk = |seed, alpha, inputs: &[u32], counts: &[u32], outputs: &[u32]| Minibatch {
            seed,
            alpha,
            inputs: inputs.to_vec(),
            context_counts: counts.to_vec(),
            outputs: outputs.to_vec(),
            objective,
            ..Minibatch::default()
        };
        let call = [
            mk(
                11,
                0.5,
                &[0, 1, 7, 0],
                &[2, 1, 3, 1],
                &[1, 2, 0, 3, 4, 0, 9],
            ),
            mk(12, 0.25, &[2, 64], &[1, 2], &[0, 5, 6]),
        ];
        let mut plan = Plan::default();
        plan.draw(&sampler, negative, 9, &call);
        let e_count = plan.examples();
        assert_eq!(e_count, if cbow { 6 } else { 10 });
        assert_eq!(plan.len(), e_count * (negative + 1));
        let rows = plan.rows_by_wire();
        let position_of: Vec<u32> = {
            let mut p = vec![u32::MAX; plan.len()];
            for &(w, pos) in &plan.plan {
                p[w as usize] = pos;
            }
            p
        };
        let positives: Vec<u32> = call
            .iter()
            .flat_map(|mb| if cbow { &mb.inputs } else { &mb.outputs })
            .copied()
            .collect();
        let example_position: Vec<u32> = if cbow {
            (0..6).collect()
        } else {
            vec![0, 0, 1, 2, 2, 2, 3, 4, 5, 5]
        };
        let alpha_of = |p: u32| if p < 4 { 0.5 } else { 0.25 };
        // A dot product's input slot: CBOW, its position; skip-gram, its
        // input word's slot (one per distinct word of the call).
        let inputs: Vec<u32> = call.iter().flat_map(|mb| mb.inputs.clone()).collect();
        let input_of = |slot: u32| {
            if cbow {
                slot
            } else {
                plan.slots()[slot as usize]
            }
        };
        let example_input = |e: usize| {
            let p = example_position[e];
            if cbow {
                p
            } else {
                inputs[p as usize]
            }
        };
        assert_eq!(rows[..e_count], positives[..]);
        let n = (e_count * negative) as u128;
        let deal = Deal::new(11, e_count as u64, negative as u32, sampler.total());
        for i in 0..e_count * negative {
            let x =
                ((i as u128 * u128::from(sampler.total()) + u128::from(deal.offset)) / n) as u64;
            let e = deal.example_of(i as u64, e_count as u64) as usize;
            let w = e_count + i;
            assert_eq!(rows[w], sampler.word_at(x), "negative {i}");
            assert_eq!(input_of(position_of[w]), example_input(e), "negative {i}");
            let alpha = if rows[w] == positives[e] {
                0.0
            } else {
                alpha_of(example_position[e])
            };
            assert_eq!(plan.alphas[w], alpha, "negative {i}");
        }
        for e in 0..e_count {
            assert_eq!(input_of(position_of[e]), example_input(e));
            assert_eq!(plan.alphas[e], alpha_of(example_position[e]));
        }
        assert!(plan
            .groups
            .windows(2)
            .all(|g| g[0].0 < g[1].0 && g[0].1 < g[1].1));
        assert_eq!(plan.groups.last().map(|g| g.1 as usize), Some(plan.len()));
    }
}

/// CBOW: a call of several minibatches scales a row as its minibatches
/// would be as calls of their own in flight together (each counting the
/// others one in OTHERS_SHARE), not as one minibatch with all their dot
/// products; one minibatch with as many on the row is still scaled, and a
/// skip-gram call keeps one cap for the whole call.
#[test]
fn a_cbow_call_of_several_minibatches_scales_rows_as_calls_in_flight_would() {
    let counts: Vec<u64> = (1..=40u64).map(|r| 4000 / r).collect();
    let sampler = NegativeSampler::new(&counts, 0.75).expect("sampler");
    let negative = 5;
    // Word 0 the one context word of `n` positions (CBOW) or the input of
    // `n` positions with one context word each (skip-gram): n × 6 dot
    // products on its input row, against a cap of 64.
    let mk = |cbow: bool| {
        move |seed, n: usize| Minibatch {
            seed,
            alpha: 0.025,
            inputs: if cbow {
                (1..=n as u32).collect()
            } else {
                vec![0; n]
            },
            context_counts: vec![1; n],
            outputs: if cbow {
                vec![0; n]
            } else {
                (1..=n as u32).collect()
            },
            objective: Objective::from_cbow(cbow),
            ..Minibatch::default()
        }
    };
    let scale_of_word_0 = |call: &[Minibatch]| {
        let mut plan = Plan::default();
        plan.draw(&sampler, negative, 9, call);
        plan.input_scale[0]
    };
    let cbow = mk(true);
    assert_eq!(scale_of_word_0(&[cbow(1, 10)]), 1.0, "60 of 64");
    // Three minibatches of 42: as calls in flight, 42 + 2 × 42 / 4 = 63
    // each, within the cap: 126 dot products unscaled.
    assert_eq!(scale_of_word_0(&[cbow(1, 7), cbow(2, 7), cbow(3, 7)]), 1.0);
    // One minibatch of the same 126: scaled to the cap.
    let one = scale_of_word_0(&[cbow(1, 21)]);
    assert!((one - 64.0 / 126.0).abs() < 1e-6, "{one}");
    // Three of 60 (60 + 30 each): beyond, scaled to the call's cap of
    // 64 · 3 · 4 / 6 = 128.
    let more = scale_of_word_0(&[cbow(1, 10), cbow(2, 10), cbow(3, 10)]);
    assert!((more - 128.0 / 180.0).abs() < 1e-6, "{more}");
    // Skip-gram: the three of 42 against the one cap.
    let sg = mk(false);
    let three = scale_of_word_0(&[sg(1, 7), sg(2, 7), sg(3, 7)]);
    assert!((three - 64.0 / 126.0).abs() < 1e-6, "{three}");
    assert_eq!(call_step_cap(64, 1), 64);
    assert_eq!(call_step_cap(64, 4), 146, "64 · 16 / 7");
    assert_eq!(call_step_cap(64, 16), 146, "counted up to 4 minibatches");
    // Skip-gram past 4 minibatches: 4 + 4 of 30 (5 positions × 6) on word
    // 0 is 240 dot products against the call's cap of 64 · 32 / 20 = 102
    // (the 4 past the 4th counted one in 4: 120 + 30 = 150 per 64), where
    // one cap for the call would scale it to 64 / 240.
    let eight: Vec<Minibatch> = (1..=8).map(|seed| sg(seed, 5)).collect();
    let scaled = scale_of_word_0(&eight);
    assert!((scaled - 102.0 / 240.0).abs() < 1e-6, "{scaled}");
    let four: Vec<Minibatch> = (1..=4).map(|seed| sg(seed, 5)).collect();
    let kept = scale_of_word_0(&four);
    assert!(
        (kept - 64.0 / 120.0).abs() < 1e-6,
        "up to 4, one cap: {kept}"
    );
    assert_eq!(skip_gram_call_step_cap(64, 1), 64);
    assert_eq!(skip_gram_call_step_cap(64, 4), 64);
    assert_eq!(skip_gram_call_step_cap(64, 8), 102, "64 · 32 / 20");
    assert_eq!(skip_gram_call_step_cap(64, 16), 146, "64 · 64 / 28");
    assert_eq!(skip_gram_call_step_cap(64, 256), 244, "below 4 caps");
}

/// Shared negatives: every target of the call's CBOW-layout plan (its
/// positions' own words and the negatives dealt to them, checked against
/// the definitions above) becomes one dot product per context word of
/// its position, at consecutive wire indices in context order, with the
/// target's row and α; the positives are the call's pairs.
#[test]
fn shared_negatives_spread_each_target_over_its_contexts() {
    let counts: Vec<u64> = (1..=40u64).map(|r| 4000 / r).collect();
    let sampler = NegativeSampler::new(&counts, 0.75).expect("sampler");
    let negative = 3;
    let mk = |seed, alpha, inputs: &[u32], counts: &[u32], outputs: &[u32], cbow| Minibatch {
        seed,
        alpha,
        inputs: inputs.to_vec(),
        context_counts: counts.to_vec(),
        outputs: outputs.to_vec(),
        objective: Objective::from_cbow(cbow),
        shared_negatives: !cbow,
        ..Minibatch::default()
    };
    let call = |cbow| {
        [
            mk(
                5,
                0.5,
                &[0, 1, 7, 0],
                &[2, 1, 3, 1],
                &[1, 2, 0, 3, 4, 0, 9],
                cbow,
            ),
            mk(6, 0.25, &[2, 30], &[1, 2], &[0, 5, 6], cbow),
        ]
    };
    let (mut shared, mut cbow) = (Plan::default(), Plan::default());
    shared.draw(&sampler, negative, 9, &call(false));
    cbow.draw(&sampler, negative, 9, &call(true));
    let context_counts = [2u32, 1, 3, 1, 1, 2];
    let slots_of = |p: &Plan| {
        let mut s = vec![u32::MAX; p.len()];
        for &(w, slot) in &p.plan {
            s[w as usize] = slot;
        }
        s
    };
    let (rows, slots, alphas) = spread_by_hand(&cbow, &context_counts);
    assert_eq!(shared.len(), 10 * (negative + 1));
    assert_eq!(shared.examples(), 10, "one positive per pair");
    assert_eq!(shared.rows_by_wire(), rows);
    // Each dot product's input slot holds its context word, read once.
    let words: Vec<u32> = slots_of(&shared)
        .iter()
        .map(|&s| shared.slots()[s as usize])
        .collect();
    let contexts: Vec<u32> = slots.iter().map(|&e| shared.contexts[e as usize]).collect();
    assert_eq!(words, contexts);
    assert_eq!(shared.alphas, alphas);
    let mut distinct = shared.contexts.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(shared.slots(), &distinct[..], "one slot per distinct word");
    assert!(shared
        .groups
        .windows(2)
        .all(|g| g[0].0 < g[1].0 && g[0].1 < g[1].1));
    // Negative rows are drawn per position: 6 × 3, not 10 × 3.
    assert_eq!(shared.negatives.len(), 6 * negative);
    assert!(shared.fit(9, negative, &call(false)));
    let mut unshared = call(false);
    unshared[1].shared_negatives = false;
    assert!(!shared.fit(9, negative, &unshared));
}

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

/// The CBOW plan `cbow` spread by hand over each position's context words
/// (`context_counts`): per dot product in wire order, its row, its context
/// entry (the index of its context word among the call's) and its α.
fn spread_by_hand(cbow: &Plan, context_counts: &[u32]) -> (Vec<u32>, Vec<u32>, Vec<f32>) {
    let first: Vec<u32> = context_counts
        .iter()
        .scan(0, |a, &c| {
            *a += c;
            Some(*a - c)
        })
        .collect();
    let mut cbow_positions = vec![u32::MAX; cbow.len()];
    for &(w, p) in &cbow.plan {
        cbow_positions[w as usize] = p;
    }
    let cbow_rows = cbow.rows_by_wire();
    let (mut rows, mut entries, mut alphas) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..cbow.len() {
        let p = cbow_positions[k] as usize;
        for j in 0..context_counts[p] {
            rows.push(cbow_rows[k]);
            entries.push(first[p] + j);
            alphas.push(cbow.alphas[k]);
        }
    }
    (rows, entries, alphas)
}

/// The spread against the CBOW plan of the same call (its targets, one per
/// position, each spread by hand over the position's context words), on
/// calls whose positions have 1 to 20 context words (the spread writes up
/// to `SPREAD_WIDTH` of them in one copy and more one by one), planned one
/// after another into the same plans, a large call, a small one, then a
/// large one again: what a write puts past a position's own dot products
/// never survives into the plan, whatever the last call left in the buffers.
#[test]
fn shared_negatives_spread_matches_the_cbow_plan_at_every_width() {
    let counts: Vec<u64> = (1..=300u64).map(|r| 90_000 / r).collect();
    let sampler = NegativeSampler::new(&counts, 0.75).expect("sampler");
    let negative = 5;
    let call = |seed: u64, positions: u32, cbow: bool| -> Vec<Minibatch> {
        (0..3u64)
            .map(|m| {
                let inputs: Vec<u32> = (0..positions).map(|p| (p * 37 + m as u32) % 300).collect();
                let context_counts: Vec<u32> = (0..positions)
                    .map(|p| 1 + (p * 7 + m as u32) % 20)
                    .collect();
                let n: u32 = context_counts.iter().sum();
                let outputs: Vec<u32> = (0..n).map(|i| (i * 13 + 5) % 300).collect();
                Minibatch {
                    seed: seed + m,
                    alpha: 0.5 / (m + 1) as f32,
                    inputs,
                    context_counts,
                    outputs,
                    objective: Objective::from_cbow(cbow),
                    shared_negatives: !cbow,
                    ..Minibatch::default()
                }
            })
            .collect()
    };
    let (mut shared, mut cbow) = (Plan::default(), Plan::default());
    for (seed, positions) in [(11, 90), (12, 7), (13, 120)] {
        shared.draw(&sampler, negative, 9, &call(seed, positions, false));
        cbow.draw(&sampler, negative, 9, &call(seed, positions, true));
        let context_counts: Vec<u32> = call(seed, positions, true)
            .iter()
            .flat_map(|mb| mb.context_counts.clone())
            .collect();
        let (rows, entries, alphas) = spread_by_hand(&cbow, &context_counts);
        let pairs: usize = context_counts.iter().map(|&c| c as usize).sum();
        assert_eq!(shared.len(), pairs * (negative + 1), "{seed}");
        assert_eq!(shared.plan.len(), shared.len(), "{seed}");
        assert_eq!(shared.rows_by_wire(), rows, "{seed}");
        let mut words = vec![u32::MAX; shared.len()];
        for &(w, slot) in &shared.plan {
            words[w as usize] = shared.slots()[slot as usize];
        }
        let contexts: Vec<u32> = entries
            .iter()
            .map(|&e| shared.contexts[e as usize])
            .collect();
        assert_eq!(words, contexts, "{seed}");
        assert_eq!(shared.alphas, alphas, "{seed}");
    }
}
