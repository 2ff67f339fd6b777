//! Steady-state heap allocations of the shard's training handlers (paper
//! 6.1.3: a server that allocates per request spends its time in the
//! allocator). dhat's counting allocator (testing mode) wraps the system one; the
//! `dotprod` and `adjust` handlers of [`ShardService`] are called as tonic
//! calls them, with decoded requests (tonic decodes `bytes` fields as slices
//! of its receive buffer: no copy), on a text8-sized model, and every
//! allocation made by any thread while a handler runs is counted.
//!
//! After a warm-up (per-thread buffers and target pools grow to the largest
//! call), a call must allocate a fixed handful of small blocks whatever its
//! size: the blocking task that runs it and the response buffer. Their
//! number must not grow with the minibatches per call or the pairs in them.
//!
//! `cargo test -p colonnade-ps-shard --test allocations -- --nocapture`
//! prints the figures recorded in docs/benchmarks.md, "Allocations per call
//! on a shard".

use colonnade_common::model::ModelSpec;
use colonnade_proto::v1::shard_server::Shard;
use colonnade_proto::v1::{self, AdjustRequest, DotprodRequest};
use colonnade_proto::{encode_f16, Minibatch, Segment, Windows};
use colonnade_ps_shard::service::ShardService;
use colonnade_ps_shard::{ShardCore, ShardSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tonic::Request;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const VOCAB: usize = 69_000;
const COLS: u32 = 50;
const NEGATIVE: u32 = 5;
const INPUTS: usize = 256;

fn counts() -> Vec<u64> {
    (0..VOCAB)
        .map(|r| (10_000_000.0 / (r as f64 + 1.0)).max(5.0) as u64)
        .collect()
}

/// A 256-input minibatch in the windows form the client sends: sentence
/// segments of Zipf-like ids, radii 1..=5, a fresh seed.
fn minibatch(rng: &mut ChaCha8Rng, seed: u64) -> Minibatch {
    let mut w = Windows::default();
    let mut left = INPUTS;
    while left > 0 {
        let inputs = left.min(rng.random_range(5..60));
        let len = inputs + 10;
        w.segments.push(Segment {
            len: len as u32,
            first: 5,
            inputs: inputs as u32,
        });
        for _ in 0..len {
            let id = (VOCAB as f64).powf(rng.random::<f64>()) as u32;
            w.tokens.push(id.min(VOCAB as u32 - 1));
        }
        w.radii
            .extend((0..inputs).map(|_| rng.random_range(1..=5u8)));
        left -= inputs;
    }
    Minibatch {
        seed,
        alpha: 0.025,
        windows: w,
        ..Minibatch::default()
    }
}

/// Pairs × (1 + negative): the dot products (and weights) of a minibatch.
fn dots_of(mb: &Minibatch) -> usize {
    let (mut i, mut c, mut o) = (Vec::new(), Vec::new(), Vec::new());
    mb.windows.expand(&mut i, &mut c, &mut o).expect("windows");
    o.len() * (1 + NEGATIVE as usize)
}

struct Call {
    dotprod: DotprodRequest,
    adjust: AdjustRequest,
}

fn calls(fp: u64, n: usize, per_call: usize, seed: u64) -> Vec<Call> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|c| {
            let mbs: Vec<Minibatch> = (0..per_call)
                .map(|k| minibatch(&mut rng, seed * 1_000_000 + (c * per_call + k) as u64))
                .collect();
            let weights: Vec<f32> = (0..mbs.iter().map(dots_of).sum::<usize>())
                .map(|_| rng.random_range(-1.0..1.0f32))
                .collect();
            let wire: Vec<v1::Minibatch> = mbs.iter().map(|m| m.to_wire(fp)).collect();
            Call {
                dotprod: DotprodRequest {
                    minibatches: wire.clone(),
                },
                adjust: AdjustRequest {
                    minibatches: wire,
                    scaled_weights: encode_f16(&weights),
                    call: None,
                    ..AdjustRequest::default()
                },
            }
        })
        .collect()
}

#[derive(Debug, Default, Clone, Copy)]
struct Count {
    allocs: u64,
    bytes: u64,
}

fn snapshot() -> Count {
    let stats = dhat::HeapStats::get();
    Count {
        allocs: stats.total_blocks,
        bytes: stats.total_bytes,
    }
}

fn since(c: Count) -> Count {
    let now = snapshot();
    Count {
        allocs: now.allocs - c.allocs,
        bytes: now.bytes - c.bytes,
    }
}

/// Runs `calls` (dotprod then adjust each) and returns what the dotprod and
/// the adjust handlers allocated in all, and the response bytes.
async fn run(s: &ShardService, calls: Vec<Call>) -> (Count, Count, u64) {
    let (mut d, mut a, mut response) = (Count::default(), Count::default(), 0u64);
    for call in calls {
        let req = Request::new(call.dotprod);
        let before = snapshot();
        let resp = s.dotprod(req).await.expect("dotprod");
        let got = since(before);
        response += (resp.get_ref().dots.len() + resp.get_ref().half_dots.len()) as u64;
        drop(resp);
        d.allocs += got.allocs;
        d.bytes += got.bytes;
        let req = Request::new(call.adjust);
        let before = snapshot();
        let resp = s.adjust(req).await.expect("adjust");
        let got = since(before);
        drop(resp);
        a.allocs += got.allocs;
        a.bytes += got.bytes;
    }
    (d, a, response)
}

#[test]
fn steady_state_calls_allocate_a_fixed_handful_whatever_their_size() {
    // One compute thread, as `ps-shard --threads 1`; tonic's reactor is
    // replaced by a current-thread runtime: nothing else allocates meanwhile.
    let _profiler = dhat::Profiler::builder().testing().build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .expect("runtime");
    let core = Arc::new(ShardCore::new(None));
    let spec = ShardSpec {
        model: ModelSpec {
            vocab_fingerprint: 11,
            vocab_size: VOCAB as u64,
            dim: 2 * COLS,
            negative: NEGATIVE,
            sampling_power: 0.75,
            init_seed: 3,
            objective: colonnade_common::model::Objective::SkipGram,
        },
        col_start: 0,
        col_end: COLS,
    };
    let fp = core
        .create_model(spec, &counts())
        .expect("model")
        .fingerprint;
    let s = ShardService::new(core, 1);

    let mut report = Vec::new();
    rt.block_on(async {
        // Warm-up with the largest calls: buffers and pools reach their size.
        run(&s, calls(fp, 40, 16, 1)).await;
        run(&s, calls(fp, 40, 1, 2)).await;
        for (per_call, n) in [(1usize, 200usize), (4, 100), (16, 40)] {
            let (d, a, response) = run(&s, calls(fp, n, per_call, 10 + per_call as u64)).await;
            let n64 = n as u64;
            report.push((per_call, d.allocs as f64 / n as f64, a.allocs as f64 / n as f64));
            println!(
                "{per_call:>2} minibatch(es)/call: dotprod {:.2} allocations ({:.0} B, response {:.0} B), \
                 adjust {:.2} allocations ({:.0} B) per call",
                d.allocs as f64 / n as f64,
                d.bytes as f64 / n as f64,
                response as f64 / n as f64,
                a.allocs as f64 / n as f64,
                a.bytes as f64 / n as f64,
            );
            // Beyond the response buffer, a call allocates only small fixed
            // blocks (the blocking task): under 4 KiB whatever its size.
            assert!(
                d.bytes <= response + 4096 * n64,
                "dotprod allocated {} B for {} B of responses over {n} calls of {per_call}",
                d.bytes,
                response
            );
            assert!(
                a.bytes <= 4096 * n64,
                "adjust allocated {} B over {n} calls of {per_call} minibatches",
                a.bytes
            );
        }
    });
    // The number of allocations per call does not grow with its size (16×
    // the minibatches, ~16× the pairs), and stays a handful.
    let (_, d1, a1) = report[0];
    for &(per_call, d, a) in &report {
        assert!(
            d <= d1 + 0.5 && a <= a1 + 0.5,
            "{per_call} minibatches per call: {d:.2}/{a:.2} allocations vs {d1:.2}/{a1:.2} for one"
        );
        assert!(d <= 8.0 && a <= 8.0, "{per_call} per call: {d:.2}/{a:.2}");
    }
}
