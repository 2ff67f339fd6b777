//! Fuzzing on stable Rust: arbitrary requests through the shard's decode and
//! validation, as tonic hands them to the service. Two sources: raw bytes
//! decoded by prost as a `DotprodRequest`, `AdjustRequest` or
//! `PullRowsRequest` (whatever decodes is served), and structured requests
//! near the valid ones (real fingerprints, ids around the vocabulary's end,
//! windows with odd segments and radii, weights of every magnitude, too
//! many or too few), which reach the deeper checks. Every case must be
//! answered without a panic (a handler panic surfaces as `INTERNAL`), and a
//! rejected `adjust` must leave both matrices bit for bit as they were.
//!
//! CI runs a few thousand cases; `scripts/fuzz.sh [CASES]` runs millions
//! and prints the tally recorded in docs/benchmarks.md, "Fuzzing the shard's
//! requests".

use colonnade_common::model::ModelSpec;
use colonnade_common::model::Objective;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{self, AdjustRequest, DotprodRequest, PullRowsRequest};
use colonnade_proto::{encode_f16, encode_u32};
use colonnade_ps_shard::model::Model;
use colonnade_ps_shard::service::ShardService;
use colonnade_ps_shard::{Matrix, ShardCore, ShardSpec};
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use prost::Message;
use std::collections::BTreeMap;
use std::sync::Arc;
use tonic::{Code, Request};

const VOCAB: u32 = 40;

fn cases() -> u32 {
    std::env::var("COLONNADE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn spec(cbow: bool) -> ShardSpec {
    ShardSpec {
        model: ModelSpec {
            vocab_fingerprint: 3,
            vocab_size: u64::from(VOCAB),
            dim: 8,
            negative: 3,
            sampling_power: 0.75,
            init_seed: 2,
            objective: Objective::from_cbow(cbow),
        },
        col_start: 2,
        col_end: 7,
    }
}

fn snapshot(m: &Model) -> (Vec<u32>, Vec<u32>) {
    let rows = |matrix| {
        let mut out = Vec::new();
        m.read_rows(matrix, 0, u64::from(VOCAB), &mut out)
            .expect("rows");
        out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
    };
    (rows(Matrix::Input), rows(Matrix::Output))
}

/// Word ids: mostly in the vocabulary, some just past it, some anything.
fn id() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0..VOCAB, 1 => VOCAB..VOCAB + 3, 1 => any::<u32>()]
}

/// A byte field: the encoding of some u32s, sometimes with a stray byte.
fn u32_bytes(values: impl Strategy<Value = Vec<u32>>) -> impl Strategy<Value = Vec<u8>> {
    (values, prop::option::weighted(0.1, any::<u8>())).prop_map(|(v, stray)| {
        let mut b = encode_u32(&v).to_vec();
        b.extend(stray);
        b
    })
}

/// A minibatch near the valid ones, for one of `fps` (or another model).
fn minibatch(fps: [u64; 2]) -> impl Strategy<Value = v1::Minibatch> {
    let fingerprint = prop_oneof![4 => Just(fps[0]), 4 => Just(fps[1]), 1 => any::<u64>()];
    let alpha = prop_oneof![
        8 => Just(0.025f32),
        1 => any::<f32>(),
        1 => Just(f32::NAN),
        1 => Just(1e30f32)
    ];
    let explicit = (
        u32_bytes(prop::collection::vec(id(), 0..6)),
        u32_bytes(prop::collection::vec(0u32..5, 0..6)),
        u32_bytes(prop::collection::vec(id(), 0..20)),
    )
        .prop_map(|(inputs, context_counts, outputs)| v1::Minibatch {
            inputs: inputs.into(),
            context_counts: context_counts.into(),
            outputs: outputs.into(),
            ..v1::Minibatch::default()
        });
    let windows = (
        u32_bytes(prop::collection::vec(id(), 0..24)),
        u32_bytes(prop::collection::vec(
            prop_oneof![8 => 0u32..12, 1 => any::<u32>()],
            0..10,
        )),
        prop::collection::vec(prop_oneof![8 => 1u8..4, 1 => any::<u8>()], 0..14),
    )
        .prop_map(|(tokens, segments, radii)| v1::Minibatch {
            tokens: tokens.into(),
            segments: segments.into(),
            radii: radii.into(),
            ..v1::Minibatch::default()
        });
    (
        prop_oneof![explicit, windows],
        fingerprint,
        prop_oneof![8 => Just(0u64), 1 => any::<u64>()],
        any::<u64>(),
        alpha,
        prop::bool::weighted(0.2),
    )
        .prop_map(|(mut mb, fp, lineage, seed, alpha, cbow)| {
            mb.model_fingerprint = fp;
            mb.lineage = lineage;
            mb.seed = seed;
            mb.alpha = alpha;
            mb.cbow = cbow;
            mb
        })
}

/// Weights: mostly valid scaled weights, some of any size.
fn weights() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![8 => -1.0f32..=1.0, 1 => any::<f32>(), 1 => Just(1.0001f32)],
        0..80,
    )
    .prop_map(|w| encode_f16(&w).to_vec())
}

/// A valid dotprod + adjust for model `k` of `fps` (0 skip-gram, 1 CBOW),
/// then, in some cases, one thing broken: an id past the vocabulary, a
/// weight too many, a weight too large or another objective.
fn valid_calls(fps: [u64; 2]) -> impl Strategy<Value = Case> {
    let pairs = prop::collection::vec((0..VOCAB, prop::collection::vec(0..VOCAB, 1..4)), 1..5);
    (
        0usize..2,
        pairs,
        any::<u64>(),
        prop::collection::vec(-1.0f32..=1.0, 80),
        prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
    )
        .prop_map(move |(k, pairs, seed, w, broken)| {
            let inputs: Vec<u32> = pairs.iter().map(|p| p.0).collect();
            let counts: Vec<u32> = pairs.iter().map(|p| p.1.len() as u32).collect();
            let mut outputs: Vec<u32> = pairs.iter().flat_map(|p| p.1.clone()).collect();
            let cbow = k == 1;
            let examples = if cbow { inputs.len() } else { outputs.len() };
            let mut weights = w[..examples * 4].to_vec();
            match broken {
                1 => outputs[0] = VOCAB,
                2 => weights.push(0.5),
                3 => weights[0] = 2.0,
                _ => {}
            }
            let mb = v1::Minibatch {
                model_fingerprint: fps[k],
                seed,
                inputs: encode_u32(&inputs),
                context_counts: encode_u32(&counts),
                outputs: encode_u32(&outputs),
                alpha: 0.025,
                cbow: cbow != (broken == 4),
                ..v1::Minibatch::default()
            };
            Case::Calls(vec![mb], encode_f16(&weights).to_vec())
        })
}

#[derive(Debug, Clone)]
enum Case {
    /// Raw bytes decoded as each request type.
    Raw(Vec<u8>),
    /// A dotprod and an adjust of the same minibatches.
    Calls(Vec<v1::Minibatch>, Vec<u8>),
    Pull(PullRowsRequest),
}

fn case(fps: [u64; 2]) -> impl Strategy<Value = Case> {
    let pull = (
        prop_oneof![Just(fps[0]), any::<u64>()],
        -1i32..4,
        prop_oneof![0u64..50, any::<u64>()],
        prop_oneof![0u64..50, any::<u64>()],
    )
        .prop_map(|(fp, matrix, row_start, row_end)| {
            Case::Pull(PullRowsRequest {
                model_fingerprint: fp,
                matrix,
                row_start,
                row_end,
            })
        });
    // A valid request's encoding with a few bytes overwritten: decodes
    // far more often than random bytes, into odd field values and lengths.
    let mutated = (
        valid_calls(fps),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    )
        .prop_map(|(calls, flips)| {
            let Case::Calls(batches, weights) = calls else {
                unreachable!("valid_calls makes calls")
            };
            let mut bytes = AdjustRequest {
                minibatches: batches,
                scaled_weights: weights.into(),
                call: None,
                ..AdjustRequest::default()
            }
            .encode_to_vec();
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            Case::Raw(bytes)
        });
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..256).prop_map(Case::Raw),
        2 => mutated,
        3 => (prop::collection::vec(minibatch(fps), 0..4), weights())
            .prop_map(|(b, w)| Case::Calls(b, w)),
        3 => valid_calls(fps),
        1 => pull,
    ]
}

/// Counts answers by call and code.
type Tally = BTreeMap<(&'static str, String), u64>;

fn answered<T>(
    tally: &mut Tally,
    call: &'static str,
    r: &Result<T, tonic::Status>,
) -> Result<(), TestCaseError> {
    let code = r.as_ref().err().map_or(Code::Ok, tonic::Status::code);
    *tally.entry((call, format!("{code:?}"))).or_default() += 1;
    match r {
        Err(e) if matches!(e.code(), Code::Internal | Code::Unknown) => Err(TestCaseError::fail(
            format!("{call} answered {:?}: {} (a panic?)", e.code(), e.message()),
        )),
        _ => Ok(()),
    }
}

#[test]
fn arbitrary_requests_never_panic_and_rejected_ones_change_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let core = Arc::new(ShardCore::new(Some(100_000_000)));
    let counts: Vec<u64> = (0..u64::from(VOCAB)).map(|r| 1000 / (r + 1) + 1).collect();
    let fps = [false, true].map(|cbow| {
        core.create_model(spec(cbow), &counts)
            .expect("model")
            .fingerprint
    });
    let models = fps.map(|fp| core.model(fp).expect("model"));
    let service = ShardService::new(Arc::clone(&core), 1);
    let tally = std::cell::RefCell::new(Tally::new());
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let n = cases();
    let result = runner.run(&case(fps), |case| {
        rt.block_on(async {
            match case {
                Case::Raw(bytes) => {
                    if let Ok(req) = DotprodRequest::decode(&bytes[..]) {
                        let r = service.dotprod(Request::new(req)).await;
                        answered(&mut tally.borrow_mut(), "dotprod (raw)", &r)?;
                    }
                    if let Ok(req) = AdjustRequest::decode(&bytes[..]) {
                        let before = models.each_ref().map(|m| snapshot(m));
                        let r = service.adjust(Request::new(req)).await;
                        answered(&mut tally.borrow_mut(), "adjust (raw)", &r)?;
                        if r.is_err() {
                            prop_assert!(models.each_ref().map(|m| snapshot(m)) == before);
                        }
                    }
                    if let Ok(req) = PullRowsRequest::decode(&bytes[..]) {
                        let r = service.pull_rows(Request::new(req)).await;
                        answered(&mut tally.borrow_mut(), "pull_rows (raw)", &r)?;
                    }
                }
                Case::Calls(batches, weights) => {
                    let r = service
                        .dotprod(Request::new(DotprodRequest {
                            minibatches: batches.clone(),
                        }))
                        .await;
                    answered(&mut tally.borrow_mut(), "dotprod", &r)?;
                    let before = models.each_ref().map(|m| snapshot(m));
                    let r = service
                        .adjust(Request::new(AdjustRequest {
                            minibatches: batches,
                            scaled_weights: weights.into(),
                            call: None,
                            ..AdjustRequest::default()
                        }))
                        .await;
                    answered(&mut tally.borrow_mut(), "adjust", &r)?;
                    let after = models.each_ref().map(|m| snapshot(m));
                    if r.is_err() {
                        prop_assert!(after == before, "a rejected adjust changed the model");
                    }
                    // Issue 45: no sequence of accepted calls leaves a value
                    // the next dot product could overflow on.
                    for (u, v) in &after {
                        let bad = u
                            .iter()
                            .chain(v)
                            .map(|&b| f32::from_bits(b))
                            .find(|x| !(x.is_finite() && x.abs() <= 2f32.powi(40)));
                        prop_assert!(bad.is_none(), "the model holds {bad:?} after an adjust");
                    }
                }
                Case::Pull(req) => {
                    let r = service.pull_rows(Request::new(req)).await;
                    answered(&mut tally.borrow_mut(), "pull_rows", &r)?;
                    if let Ok(stream) = r {
                        let blocks: Vec<_> = stream.into_inner().collect().await;
                        for b in &blocks {
                            answered(&mut tally.borrow_mut(), "pull_rows block", b)?;
                        }
                    }
                }
            }
            Ok(())
        })
    });
    let tally = tally.into_inner();
    println!("{n} cases; answers by call and code:");
    for ((call, code), count) in &tally {
        println!("  {call:<18} {code:<18} {count}");
    }
    let accepted = tally
        .get(&("adjust", "Ok".to_string()))
        .copied()
        .unwrap_or(0);
    if let Err(e) = result {
        panic!("{e}");
    }
    // The structured cases must reach the end of the path, not only its
    // first check: some adjusts are valid and applied.
    assert!(accepted > 0, "no structured adjust was accepted: {tally:?}");
}
