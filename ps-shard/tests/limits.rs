//! Resource exhaustion: every hostile request found by probing a shard on
//! loopback (issue 15's list) must end in a clear `RESOURCE_EXHAUSTED` or
//! `INVALID_ARGUMENT` before the memory or the thread is spent; the shard
//! stays up, keeps serving, and its peak RSS stays under its memory budget
//! plus fixed headroom. A real `ps-shard` process, so that its RSS is its own.

use colonnade_proto::v1::shard_client::ShardClient;
use colonnade_proto::v1::{
    self, AdjustRequest, CreateModelChunk, DotprodRequest, DropModelRequest, PullRowsRequest,
    StatusRequest,
};
use colonnade_proto::{encode_f16, encode_u32, encode_u64, MAX_CALL_DOTS};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Code;

/// The shard's memory budget in these tests.
const BUDGET: u64 = 300_000_000;

/// What the process may take beyond its budget: code, runtime, gRPC buffers,
/// the target cache (256 MiB) and one call's plan.
const HEADROOM: u64 = 700_000_000;

struct Shard {
    child: Child,
    endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Shard {
    fn start() -> Self {
        Self::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let endpoint = format!("127.0.0.1:{port}");
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("shard.log");
        let child = Command::new(env!("CARGO_BIN_EXE_ps-shard"))
            .args(["--listen", &endpoint, "--threads", "1"])
            .args(["--max-model-bytes", &BUDGET.to_string()])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(fs_err::File::create(&log).expect("log file").into_parts().0)
            .spawn()
            .expect("start ps-shard");
        Self {
            child,
            endpoint,
            log,
            _dir: dir,
        }
    }

    /// A field of /proc/<pid>/status in bytes (`VmHWM`: peak RSS).
    fn memory(&self, field: &str) -> u64 {
        let status = fs_err::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("shard status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .unwrap_or_else(|| panic!("{field} in {status}"));
        kib * 1024
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    fn log(&self) -> String {
        fs_err::read_to_string(&self.log).unwrap_or_default()
    }

    /// A client on its own connection, without a message size limit of its
    /// own (so that the shard's are what is tested); retries until the shard
    /// listens, up to `within`.
    async fn client(&self, within: Duration) -> ShardClient<Channel> {
        let start = Instant::now();
        loop {
            let attempt =
                tonic::transport::Endpoint::from_shared(format!("http://{}", self.endpoint))
                    .expect("url")
                    .connect_timeout(Duration::from_secs(2))
                    .connect()
                    .await;
            match attempt {
                Ok(ch) => {
                    let mut c = ShardClient::new(ch)
                        .max_encoding_message_size(usize::MAX)
                        .max_decoding_message_size(usize::MAX);
                    if c.status(StatusRequest {}).await.is_ok() {
                        return c;
                    }
                }
                Err(e) if start.elapsed() > within => panic!("cannot reach the shard: {e}"),
                Err(_) => {}
            }
            assert!(
                start.elapsed() < within,
                "the shard did not answer within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spec(vocab: u64, dim: u32, negative: u32) -> v1::ModelSpec {
    v1::ModelSpec {
        vocab_fingerprint: vocab ^ u64::from(dim) << 40 ^ u64::from(negative) << 56,
        vocab_size: vocab,
        dim,
        col_start: 0,
        col_end: dim,
        negative,
        sampling_power: 0.75,
        init_seed: 1,
        cbow: false,
    }
}

async fn create(c: &mut ShardClient<Channel>, spec: v1::ModelSpec) -> Result<u64, tonic::Status> {
    let counts: Vec<u64> = (0..spec.vocab_size)
        .map(|r| 1_000_000 / (r + 1) + 5)
        .collect();
    let chunks: Vec<CreateModelChunk> = counts
        .chunks(1 << 20)
        .enumerate()
        .map(|(k, part)| CreateModelChunk {
            spec: (k == 0).then_some(spec),
            counts_offset: (k << 20) as u64,
            counts: encode_u64(part),
            num_workers: 0,
        })
        .collect();
    let r = c.create_model(futures::stream::iter(chunks)).await?;
    Ok(r.into_inner().model_fingerprint)
}

/// An explicit-pairs minibatch: one input, `outputs` context words.
fn pairs(fp: u64, outputs: &[u32], alpha: f32) -> v1::Minibatch {
    v1::Minibatch {
        model_fingerprint: fp,
        seed: 7,
        inputs: encode_u32(&[0]),
        context_counts: encode_u32(&[outputs.len() as u32]),
        outputs: encode_u32(outputs),
        alpha,
        ..v1::Minibatch::default()
    }
}

/// Rows `0..100_000` of `matrix` of model `fp`.
fn pull(fp: u64, matrix: v1::Matrix) -> PullRowsRequest {
    PullRowsRequest {
        model_fingerprint: fp,
        matrix: matrix as i32,
        row_start: 0,
        row_end: 100_000,
    }
}

fn expect_code(r: Result<impl std::fmt::Debug, tonic::Status>, code: Code, needle: &str) {
    let e = r.expect_err(needle);
    assert_eq!(e.code(), code, "{needle}: {e:?}");
    assert!(
        e.message().contains(needle),
        "{:?} should name {needle}",
        e.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_end_in_clear_errors_and_the_shard_stays_within_its_budget() {
    let mut shard = Shard::start();
    let mut c = shard.client(Duration::from_secs(30)).await;

    // A 60-byte CreateModel asking for 2 words × 2^28 columns.
    expect_code(
        create(&mut c, spec(2, 1 << 28, 5)).await,
        Code::InvalidArgument,
        "`dim`",
    );

    // Models of 83 MB each (creation peak) against a 300 MB budget for all
    // of them: the fourth is refused, naming the models held and the flag.
    let mut fps = Vec::new();
    for dim in [100, 101, 102] {
        fps.push(
            create(&mut c, spec(100_000, dim, 5))
                .await
                .expect("fits the budget"),
        );
    }
    let refused = create(&mut c, spec(100_000, 103, 5)).await;
    expect_code(refused, Code::ResourceExhausted, "3 other model(s)");
    let refused = create(&mut c, spec(100_000, 103, 5)).await;
    expect_code(refused, Code::ResourceExhausted, &BUDGET.to_string());
    for &fp in &fps[1..] {
        let dropped = c
            .drop_model(DropModelRequest {
                model_fingerprint: fp,
                ..DropModelRequest::default()
            })
            .await;
        assert!(dropped.expect("drop").into_inner().dropped);
    }
    let fp = fps[0];

    // 100 MB of ids in one message: refused by the message limit before
    // being buffered whole.
    let huge: Vec<u32> = (0..25_000_000u32).map(|i| i % 100_000).collect();
    let r = c
        .dotprod(DotprodRequest {
            minibatches: vec![pairs(fp, &huge, 0.025)],
        })
        .await;
    expect_code(r, Code::OutOfRange, "too large");
    drop(huge);

    // 4 MB of ids (under the message limit) asking for 6M dot products: the
    // work limit refuses it at once, before drawing a target.
    let many: Vec<u32> = (0..1_000_000u32).map(|i| i % 100_000).collect();
    let t = Instant::now();
    let r = c
        .dotprod(DotprodRequest {
            minibatches: vec![pairs(fp, &many, 0.025)],
        })
        .await;
    expect_code(r, Code::ResourceExhausted, &MAX_CALL_DOTS.to_string());
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );

    // A model with negative = 1024 and a 1 MB windows minibatch (250K
    // tokens, radius 1: ~500K pairs × 1025 dot products).
    let neg = create(&mut c, spec(1_000, 8, 1024))
        .await
        .expect("small model");
    let tokens: Vec<u32> = (0..250_000u32).map(|i| i % 1_000).collect();
    let windows = v1::Minibatch {
        model_fingerprint: neg,
        seed: 3,
        tokens: encode_u32(&tokens),
        segments: encode_u32(&[250_000, 0, 250_000]),
        radii: vec![1u8; 250_000].into(),
        alpha: 0.025,
        ..v1::Minibatch::default()
    };
    let r = c
        .dotprod(DotprodRequest {
            minibatches: vec![windows],
        })
        .await;
    expect_code(r, Code::ResourceExhausted, "dot products");

    // Weights and learning rates that would blow the rows up.
    let r = c
        .adjust(AdjustRequest {
            minibatches: vec![pairs(fp, &[1], 0.025)],
            scaled_weights: encode_f16(&[2.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
            call: None,
            ..AdjustRequest::default()
        })
        .await;
    expect_code(r, Code::InvalidArgument, "`scaled_weights`");
    let r = c
        .adjust(AdjustRequest {
            minibatches: vec![pairs(fp, &[1], 1e30)],
            scaled_weights: encode_f16(&[0.5, -0.5, -0.5, -0.5, -0.5, -0.5]),
            call: None,
            ..AdjustRequest::default()
        })
        .await;
    expect_code(r, Code::InvalidArgument, "`alpha`");

    // Dotprods whose adjust never comes: 12 calls of 3.6M dot products
    // (~100 MB of targets each) stay within the target cache's bound.
    let big: Vec<u32> = (0..600_000u32).map(|i| (i * 7) % 100_000).collect();
    for seed in 0..12u64 {
        let mut b = pairs(fp, &big, 0.025);
        b.seed = 1000 + seed;
        c.dotprod(DotprodRequest {
            minibatches: vec![b],
        })
        .await
        .expect("a call within the limit");
    }
    assert!(shard.alive(), "the shard died:\n{}", shard.log());
    let peak = shard.memory("VmHWM");
    assert!(
        peak < BUDGET + HEADROOM,
        "peak RSS {peak} bytes after the dotprods without adjust"
    );

    // PullRows streams nobody reads, on their own connection: 16 are
    // served, the 17th is refused, and training calls and model creation
    // still answer (a stream that held a blocking thread would starve them).
    let mut hoarder = shard.client(Duration::from_secs(5)).await;
    let mut held = Vec::new();
    for i in 0..16 {
        let r = hoarder.pull_rows(pull(fp, v1::Matrix::Input)).await;
        held.push(r.unwrap_or_else(|e| panic!("stream {i}: {e:?}")));
    }
    let r = hoarder.pull_rows(pull(fp, v1::Matrix::Input)).await;
    expect_code(r, Code::ResourceExhausted, "PullRows");
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        c.dotprod(DotprodRequest {
            minibatches: vec![pairs(fp, &[1, 2, 3], 0.025)],
        })
        .await
        .expect("dotprod beside the unread streams");
        create(&mut c, spec(1_000, 9, 5))
            .await
            .expect("create beside them")
    })
    .await;
    assert!(answered.is_ok(), "the shard stopped answering");
    drop(held);
    drop(hoarder);
    let read_all = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let pulled = c.pull_rows(pull(fp, v1::Matrix::Output)).await;
            if let Ok(stream) = pulled {
                let mut stream = stream.into_inner();
                let mut rows = 0u64;
                while let Some(block) = stream.message().await.expect("block") {
                    rows += u64::from(block.rows);
                }
                return rows;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert_eq!(read_all.ok(), Some(100_000), "the streams' slots came back");

    // 600 connections that never speak: beyond 512 each displaces the
    // oldest (none carried the token), the silent ones are closed after
    // 10 s; a real client gets in at once.
    let mut idle = Vec::new();
    for _ in 0..600 {
        if let Ok(s) = tokio::net::TcpStream::connect(&shard.endpoint).await {
            idle.push(s);
        }
    }
    let mut late = shard.client(Duration::from_secs(30)).await;
    late.status(StatusRequest {})
        .await
        .expect("status after the flood");
    drop(idle);
    assert!(
        shard
            .log()
            .contains("closed the oldest connection that has not carried the token"),
        "the displacements were not logged:\n{}",
        shard.log()
    );

    assert!(shard.alive(), "the shard died:\n{}", shard.log());
    let peak = shard.memory("VmHWM");
    assert!(peak < BUDGET + HEADROOM, "peak RSS {peak} bytes");
}

/// A free loopback address.
fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    format!("127.0.0.1:{port}")
}

/// The Shard service's health on `addr` (a plaintext health port).
async fn shard_health(addr: &str) -> Option<i32> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .ok()?;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "colonnade.v1.Shard".into(),
        })
        .await
        .ok()?;
    Some(r.into_inner().status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_not_serving_while_the_compute_threads_do_not_answer() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let health = free_addr();
    // Calls past the default --max-call-work: here they are the point.
    let shard = Shard::start_with(&[
        "--health-listen",
        &health,
        "--health-stall-secs",
        "0.5",
        "--max-call-work",
        "1000000000000",
    ]);
    let mut c = shard.client(Duration::from_secs(30)).await;
    // Wide rows: a call's compute at 8,000 dims is long against the time
    // its request takes to arrive, so that calls queue on the one compute
    // thread whatever the machine's speed. (With narrower rows a fast
    // machine finishes each call before the next arrives, and the probes
    // are answered between calls.)
    let fp = create(&mut c, spec(2_000, 8_000, 5))
        .await
        .expect("a model within the budget");
    // Several seconds of work queued on the one compute thread: calls of
    // 3.6M dot products each, sent at once.
    let big: Vec<u32> = (0..600_000u32).map(|i| (i * 7) % 2_000).collect();
    let calls: Vec<_> = (0..6u64)
        .map(|k| {
            let mut c = c.clone();
            let mut b = pairs(fp, &big, 0.025);
            b.seed = 5000 + k;
            tokio::spawn(async move {
                c.dotprod(DotprodRequest {
                    minibatches: vec![b],
                })
                .await
            })
        })
        .collect();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut finished = false;
    while Instant::now() < deadline {
        let status = shard_health(&health).await;
        if seen.last() != Some(&status) {
            seen.push(status);
        }
        finished = calls.iter().all(tokio::task::JoinHandle::is_finished);
        if finished && status == Some(ServingStatus::Serving as i32) && seen.len() > 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(finished, "the calls did not finish; health went {seen:?}");
    for call in calls {
        call.await.expect("task").expect("a call within the limits");
    }
    let serving = Some(ServingStatus::Serving as i32);
    let not_serving = Some(ServingStatus::NotServing as i32);
    let stalled = seen.iter().position(|s| *s == not_serving);
    assert!(
        stalled.is_some_and(|i| seen[..i].contains(&serving) && seen[i..].contains(&serving)),
        "health went {seen:?}: expected SERVING, NOT_SERVING while the calls queued, SERVING \
         again; shard log:\n{}",
        shard.log()
    );
    assert!(
        shard.log().contains("compute threads have not answered"),
        "the stall was not logged:\n{}",
        shard.log()
    );
}

/// Open connections to the shard, from its metrics page.
async fn open_connections(metrics: &str) -> Option<f64> {
    let mut tcp = tokio::net::TcpStream::connect(metrics).await.ok()?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .ok()?;
    let mut page = String::new();
    tcp.read_to_string(&mut page).await.ok()?;
    page.lines()
        .find_map(|l| l.strip_prefix("colonnade_shard_connections "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_call_are_closed_after_the_idle_limit() {
    let metrics = free_addr();
    let shard = Shard::start_with(&[
        "--metrics-listen",
        &metrics,
        "--max-connection-idle-secs",
        "2",
    ]);
    let mut c = shard.client(Duration::from_secs(30)).await;
    // 20 clients that made one call each and then keep their connections
    // open (HTTP/2 pings every second).
    let mut clients = Vec::new();
    for _ in 0..20 {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", shard.endpoint))
            .expect("url")
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_while_idle(true)
            .connect()
            .await
            .expect("connect");
        let mut c = ShardClient::new(ch);
        c.status(StatusRequest {}).await.expect("status");
        clients.push(c);
    }
    let open = open_connections(&metrics).await;
    assert!(
        open.is_some_and(|n| n >= 20.0),
        "open connections: {open:?}"
    );
    // A stream in flight keeps its connection: a PullRows nobody reads
    // (80 MB of rows: more than HTTP/2's windows let the shard send).
    let fp = create(&mut c, spec(100_000, 200, 5)).await.expect("model");
    let mut hoarder = shard.client(Duration::from_secs(5)).await;
    let held = hoarder
        .pull_rows(pull(fp, v1::Matrix::Input))
        .await
        .expect("stream");
    drop(c);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let open = open_connections(&metrics).await;
    assert_eq!(
        open,
        Some(1.0),
        "only the connection with a stream in flight should be left"
    );
    // A client whose connection was closed reconnects on its next call.
    for c in &mut clients {
        c.status(StatusRequest {})
            .await
            .expect("a call after the idle close");
    }
    drop(held);
}
