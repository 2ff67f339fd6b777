//! A real cluster on loopback: export read back from HDF5 equals what the
//! shards hold; hostile and mistaken requests get the documented gRPC codes,
//! name what is wrong and leave the shard's state untouched.

use crate::common::spec_of;
use crate::common::{assemble, grpc_cluster as cluster, params, run, sample_corpus, vocab_of, DIM};
use colonnade_client::cluster::Cluster;
use colonnade_client::grpc::GrpcShards;
use colonnade_common::vocab::Vocab;
use colonnade_exporter::cli::OutputArgs;
use colonnade_exporter::{discover, export, model_provenance, Source};
use colonnade_proto::v1::{self, AdjustRequest, DotprodRequest, Minibatch};
use colonnade_proto::{encode_f16, encode_u32};
use colonnade_ps_shard::{Matrix, SpawnedShard};
use colonnade_setup::Connector;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdf5_export_equals_shard_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 10_000);
    let vocab = Arc::new(vocab_of(&corpus, 2));
    let (spawned, clients) = cluster(3).await;
    let mut p = params(5);
    p.concurrency = 4;
    let (fp, _) = run(clients, &vocab, &corpus, &p).await;

    let endpoints: Vec<String> = spawned.iter().rev().map(SpawnedShard::endpoint).collect();
    let (mut handles, spec, found) = discover(&Connector::default(), &endpoints, None)
        .await
        .expect("discover");
    assert_eq!(found, fp);
    let h5 = dir.path().join("model.h5");
    let out = OutputArgs {
        output: Some(h5.clone()),
        output_vectors: true,
        ..Default::default()
    };
    let provenance = model_provenance(&spec, fp, handles.len());
    export(
        Source::Shards(&mut handles),
        fp,
        &vocab,
        spec.dim,
        &out,
        &provenance,
    )
    .await
    .expect("export");

    let cores: Vec<_> = spawned.iter().map(|s| Arc::clone(&s.core)).collect();
    let v = vocab.len() as u64;
    let file = hdf5::File::open(&h5).expect("open h5");
    let vectors = file.dataset("vectors").expect("vectors");
    assert_eq!(vectors.shape(), vec![vocab.len(), DIM as usize]);
    let got: Vec<f32> = vectors.read_raw().expect("read vectors");
    assert_eq!(
        got,
        assemble(&cores, fp, Matrix::Input, v),
        "HDF5 vectors equal the shards' input rows"
    );
    let out: Vec<f32> = file
        .dataset("output_vectors")
        .expect("output_vectors")
        .read_raw()
        .expect("read");
    assert_eq!(out, assemble(&cores, fp, Matrix::Output, v));
    let words: Vec<hdf5::types::VarLenUnicode> = file
        .dataset("words")
        .expect("words")
        .read_raw()
        .expect("read");
    let words: Vec<String> = words.iter().map(|w| w.as_str().to_string()).collect();
    assert_eq!(words, vocab.words().collect::<Vec<_>>());
    let counts: Vec<u64> = file
        .dataset("counts")
        .expect("counts")
        .read_raw()
        .expect("read");
    assert_eq!(counts, vocab.counts());
    for s in spawned {
        s.stop().await;
    }
}

fn minibatch(fp: u64, inputs: &[u32], counts: &[u32], outputs: &[u32]) -> Minibatch {
    Minibatch {
        model_fingerprint: fp,
        seed: 7,
        inputs: encode_u32(inputs),
        context_counts: encode_u32(counts),
        outputs: encode_u32(outputs),
        alpha: 1.0,
        ..Minibatch::default()
    }
}

/// A minibatch in the windows form: `tokens`, (len, first, inputs) triples, radii.
fn windows(fp: u64, tokens: &[u32], segments: &[u32], radii: &[u8]) -> Minibatch {
    Minibatch {
        model_fingerprint: fp,
        seed: 7,
        tokens: encode_u32(tokens),
        segments: encode_u32(segments),
        radii: radii.to_vec().into(),
        alpha: 1.0,
        ..Minibatch::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_rejected_without_state_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 3_000);
    let vocab = vocab_of(&corpus, 2);
    let (spawned, mut grpc) = cluster(1).await;
    let counts = vocab.counts_only();
    let spec = spec_of(&counts, &params(1));
    let fp = grpc
        .create(spec, Arc::clone(&counts), Duration::from_secs(5))
        .await
        .expect("create");
    let core = Arc::clone(&spawned[0].core);
    let v = vocab.len() as u64;
    let before = (
        assemble(&[Arc::clone(&core)], fp, Matrix::Input, v),
        assemble(&[Arc::clone(&core)], fp, Matrix::Output, v),
    );
    let mut client = grpc.shards()[0].client.clone();
    let big = v as u32;

    // Two pairs × (1 + 4 negatives): 10 weights.
    let cases: Vec<(Minibatch, usize, Code, &str)> = vec![
        (
            minibatch(fp, &[0, big], &[1, 1], &[1, 2]),
            10,
            Code::InvalidArgument,
            "`inputs`",
        ),
        (
            minibatch(fp, &[0, 1], &[1, 1], &[1, u32::MAX]),
            10,
            Code::InvalidArgument,
            "`outputs`",
        ),
        (
            minibatch(fp, &[0, 1], &[1], &[1, 2]),
            10,
            Code::InvalidArgument,
            "`context_counts`",
        ),
        (
            minibatch(fp, &[0, 1], &[1, 1], &[1, 2]),
            9,
            Code::InvalidArgument,
            "weights`",
        ),
        (
            minibatch(fp, &[0, 1], &[1, 1], &[1, 2]),
            11,
            Code::InvalidArgument,
            "weights`",
        ),
        // Windows: [0 1] with radius 1 each is the pairs (0,1), (1,0).
        (
            windows(fp, &[0, 1], &[2, 0, 2], &[1]),
            10,
            Code::InvalidArgument,
            "`radii`",
        ),
        (
            windows(fp, &[0, 1], &[2, 0, 2], &[1, 0]),
            10,
            Code::InvalidArgument,
            "`radii`",
        ),
        (
            windows(fp, &[0, 1], &[2, 1, 2], &[1, 1]),
            10,
            Code::InvalidArgument,
            "`segments`",
        ),
        (
            windows(fp, &[0, 1, 2], &[2, 0, 2], &[1, 1]),
            10,
            Code::InvalidArgument,
            "`tokens`",
        ),
        (
            windows(fp, &[0, big], &[2, 0, 2], &[1, 1]),
            10,
            Code::InvalidArgument,
            "`inputs`",
        ),
        (
            windows(fp, &[0, 1], &[2, 0, 2, 3], &[1, 1]),
            10,
            Code::InvalidArgument,
            "`segments`",
        ),
        (
            minibatch(fp ^ 1, &[0, 1], &[1, 1], &[1, 2]),
            10,
            Code::FailedPrecondition,
            "fingerprint",
        ),
    ];
    for (batch, nw, code, needle) in cases {
        let req = AdjustRequest {
            minibatches: vec![batch.clone()],
            scaled_weights: encode_f16(&vec![0.5; nw]),
            call: None,
            ..AdjustRequest::default()
        };
        let err = client.adjust(req).await.expect_err(needle);
        assert_eq!(err.code(), code, "{needle}: {err:?}");
        assert!(
            err.message().contains(needle),
            "{:?} should name {needle}",
            err.message()
        );
        if nw == 10 {
            let err = client
                .dotprod(DotprodRequest {
                    minibatches: vec![batch],
                })
                .await
                .expect_err(needle);
            assert_eq!(err.code(), code);
        }
    }
    // Malformed byte arrays and a missing batch.
    let mut odd = minibatch(fp, &[0], &[1], &[1]);
    odd.outputs = vec![1u8, 2, 3].into();
    let err = client
        .dotprod(DotprodRequest {
            minibatches: vec![odd],
        })
        .await
        .expect_err("odd length");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("`outputs`"), "{}", err.message());
    let err = client
        .dotprod(DotprodRequest {
            minibatches: vec![],
        })
        .await
        .expect_err("no batch");
    assert_eq!(err.code(), Code::InvalidArgument);
    let req = AdjustRequest {
        minibatches: vec![minibatch(fp, &[0], &[1], &[1])],
        scaled_weights: encode_f16(&[f32::INFINITY, 0.0, 0.0, 0.0, 0.0]),
        call: None,
        ..AdjustRequest::default()
    };
    assert_eq!(
        client.adjust(req).await.expect_err("inf").code(),
        Code::InvalidArgument
    );
    // Two minibatches, the second one bad: neither is applied.
    let req = AdjustRequest {
        minibatches: vec![
            minibatch(fp, &[0], &[1], &[1]),
            windows(fp, &[0, 1], &[2, 0, 2], &[1, 0]),
        ],
        scaled_weights: encode_f16(&[0.5; 15]),
        call: None,
        ..AdjustRequest::default()
    };
    let err = client.adjust(req).await.expect_err("second batch");
    assert!(err.message().contains("batch 1"), "{}", err.message());
    let pull = v1::PullRowsRequest {
        model_fingerprint: fp,
        matrix: 1,
        row_start: 0,
        row_end: v + 1,
    };
    assert_eq!(
        client.pull_rows(pull).await.expect_err("rows").code(),
        Code::InvalidArgument
    );

    let after = (
        assemble(&[Arc::clone(&core)], fp, Matrix::Input, v),
        assemble(&[core], fp, Matrix::Output, v),
    );
    assert!(before == after, "rejected requests changed the model");

    // A valid request does change it (so the comparison above can fail).
    let req = AdjustRequest {
        minibatches: vec![
            minibatch(fp, &[0], &[1], &[1]),
            windows(fp, &[0, 1], &[2, 0, 2], &[1, 1]),
        ],
        scaled_weights: encode_f16(&[0.5, -0.5, -0.5, -0.5, -0.5].repeat(3)),
        call: None,
        ..AdjustRequest::default()
    };
    client.adjust(req).await.expect("valid adjust");
    let changed = assemble(&[Arc::clone(&spawned[0].core)], fp, Matrix::Output, v);
    assert!(changed != before.1);
    for s in spawned {
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_with_another_vocabulary_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 3_000);
    let vocab = vocab_of(&corpus, 2);
    let (spawned, mut grpc) = cluster(2).await;
    let counts = vocab.counts_only();
    let spec = spec_of(&counts, &params(1));
    let fp = grpc
        .create(spec.clone(), Arc::clone(&counts), Duration::from_secs(5))
        .await
        .expect("create");

    // Another client with a different vocabulary trains against the same shards:
    // its fingerprint is unknown to them, so dotprod fails with FailedPrecondition.
    let mut pairs: Vec<(String, u64)> = vocab
        .words()
        .map(str::to_owned)
        .zip(vocab.counts().iter().copied())
        .collect();
    pairs[0].1 += 1;
    let other = Vocab::from_pairs(pairs, None).expect("vocab");
    let other_fp = spec_of(&other.counts_only(), &params(1)).fingerprint();
    assert_ne!(other_fp, fp);
    let mut p = params(1);
    p.iter = 1;
    let err = colonnade_client::train::train(
        GrpcShards::new(grpc.shards().to_vec(), other_fp, 4),
        other.counts_only(),
        colonnade_client::stream::Source::Text(vec![corpus.clone()], Arc::new(other)),
        p,
        Arc::default(),
        Arc::default(),
        colonnade_client::train::NoCheckpoints,
    )
    .await
    .expect_err("unknown model");
    let msg = format!("{err:#}");
    let named = spawned.iter().any(|s| msg.contains(&s.endpoint()));
    assert!(
        named && msg.contains("holds no model with fingerprint"),
        "{msg}"
    );

    // The same model with another column split is refused on the shard that holds it.
    let mut endpoints: Vec<String> = spawned.iter().map(SpawnedShard::endpoint).collect();
    endpoints.reverse();
    let mut swapped = Cluster::connect(&Connector::default(), &endpoints, Duration::from_secs(5))
        .await
        .expect("connect");
    let err = swapped
        .create(spec, Arc::clone(&counts), Duration::from_secs(5))
        .await
        .expect_err("columns conflict");
    assert!(format!("{err:#}").contains("columns"), "{err:#}");

    // Exporting with the wrong vocabulary file names the file.
    let bad_vocab = dir.path().join("other.tsv");
    Vocab::from_pairs(vec![("a".into(), 3), ("b".into(), 2)], None)
        .expect("vocab")
        .save(&bad_vocab)
        .expect("save");
    let args = colonnade_exporter::cli::ExportArgs {
        checkpoint: Vec::new(),
        shards: spawned.iter().map(SpawnedShard::endpoint).collect(),
        vocab: bad_vocab.clone(),
        fingerprint: None,
        out: OutputArgs {
            output: Some(dir.path().join("x.h5")),
            ..Default::default()
        },
    };
    let err = colonnade_exporter::cli::run(args, &Connector::default())
        .await
        .expect_err("vocab mismatch");
    assert!(format!("{err:#}").contains("other.tsv"), "{err:#}");
    for s in spawned {
        s.stop().await;
    }
}

#[tokio::test]
async fn unreachable_shard_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let err = Cluster::connect(
        &Connector::default(),
        std::slice::from_ref(&addr),
        Duration::from_millis(300),
    )
    .await
    .err()
    .expect("nothing listens");
    assert!(format!("{err:#}").contains(&addr), "{err:#}");
}

/// A CreateModel over the shard's size limit is refused on its first message,
/// before any counts are buffered: here the stream never ends, so a shard that
/// read the counts first would never answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_model_over_the_limit_is_refused_before_the_counts() {
    use futures::StreamExt;
    let shard = SpawnedShard::start(([127, 0, 0, 1], 0).into(), 1, Some(1_000_000))
        .await
        .expect("start shard");
    let mut client = Connector::default()
        .connect(&shard.endpoint())
        .await
        .expect("connect");
    let first = v1::CreateModelChunk {
        spec: Some(v1::ModelSpec {
            vocab_fingerprint: 1,
            vocab_size: 10_000_000,
            dim: 100,
            col_start: 0,
            col_end: 100,
            negative: 5,
            sampling_power: 0.75,
            init_seed: 1,
            cbow: false,
        }),
        counts_offset: 0,
        counts: colonnade_proto::encode_u64(&[5; 1000]),
        num_workers: 0,
    };
    let endless = futures::stream::iter(vec![first]).chain(futures::stream::pending());
    let status = tokio::time::timeout(Duration::from_secs(10), client.create_model(endless))
        .await
        .expect("the shard answered before the stream ended")
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("1000000"), "{}", status.message());
    shard.stop().await;
}

/// A shard of an older API (here a stand-in that answers `Status` as a v4
/// ps-shard does, and nothing else): a worker of this release refuses it
/// by name before creating anything, since its negatives would differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_of_another_api_version_is_refused() {
    use v1::shard_server::{Shard, ShardServer};
    struct OldShard;
    type Reply<T> = Result<tonic::Response<T>, tonic::Status>;
    #[tonic::async_trait]
    impl Shard for OldShard {
        type PullRowsStream = futures::stream::Empty<Result<v1::RowBlock, tonic::Status>>;
        async fn create_model(
            &self,
            _: tonic::Request<tonic::Streaming<v1::CreateModelChunk>>,
        ) -> Reply<v1::CreateModelResponse> {
            Err(tonic::Status::unimplemented("old shard"))
        }
        async fn dotprod(&self, _: tonic::Request<DotprodRequest>) -> Reply<v1::DotprodResponse> {
            Err(tonic::Status::unimplemented("old shard"))
        }
        async fn adjust(&self, _: tonic::Request<AdjustRequest>) -> Reply<v1::AdjustResponse> {
            Err(tonic::Status::unimplemented("old shard"))
        }
        async fn pull_rows(
            &self,
            _: tonic::Request<v1::PullRowsRequest>,
        ) -> Reply<Self::PullRowsStream> {
            Err(tonic::Status::unimplemented("old shard"))
        }
        async fn status(&self, _: tonic::Request<v1::StatusRequest>) -> Reply<v1::StatusResponse> {
            Ok(tonic::Response::new(v1::StatusResponse {
                version: "0.1.0-api4".into(),
                api_version: colonnade_proto::API_VERSION - 1,
                ..Default::default()
            }))
        }
        async fn drop_model(
            &self,
            _: tonic::Request<v1::DropModelRequest>,
        ) -> Reply<v1::DropModelResponse> {
            Err(tonic::Status::unimplemented("old shard"))
        }
        async fn checkpoint(
            &self,
            _: tonic::Request<v1::CheckpointRequest>,
        ) -> Reply<v1::CheckpointResponse> {
            Err(tonic::Status::unimplemented("old shard"))
        }
        async fn restore(
            &self,
            _: tonic::Request<v1::RestoreRequest>,
        ) -> Reply<v1::RestoreResponse> {
            Err(tonic::Status::unimplemented("old shard"))
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let old = listener.local_addr().expect("addr").to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ShardServer::new(OldShard))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 3_000);
    let (spawned, _) = cluster(1).await;
    let (shards, output) = (
        format!("{},{old}", spawned[0].endpoint()),
        dir.path().join("v.h5"),
    );
    let out = train_cli(&corpus, &shards, vec!["--output".into(), output.into()]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let want = format!(
        "shard {old} speaks shard API v{} (ps-shard 0.1.0-api4), this client v{}",
        colonnade_proto::API_VERSION - 1,
        colonnade_proto::API_VERSION
    );
    assert!(err.contains(&want), "{err}");
    assert!(!dir.path().join("v.h5").exists());
    for s in spawned {
        s.stop().await;
    }
}

/// The worker's default calls in flight over gRPC, as it reports them:
/// skip-gram keeps 2 calls of 8 per thread (32 minibatches at 2 threads)
/// while the calls stay under the shards' crowd, 4 calls of 4 past it,
/// CBOW 8 minibatches in all (2 calls of 4), the most measured to train 5
/// epochs at word2vec's CBOW defaults without diverging; a given
/// `--in-flight` is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_keeps_cbow_at_8_minibatches_in_flight_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let corpus = sample_corpus(dir.path(), 3_000);
    let (spawned, _) = cluster(2).await;
    let shards = spawned
        .iter()
        .map(|s| s.endpoint())
        .collect::<Vec<_>>()
        .join(",");
    for (flags, want) in [
        (
            &["--threads", "2"][..],
            "minibatches in flight from this worker: 32 (4 calls x 8 per call",
        ),
        // 8 threads' calls would crowd the shards (REFRESH_FROM_CALLS),
        // where calls of 8 diverged: 4 calls of 4 per thread.
        (
            &["--threads", "8"][..],
            "minibatches in flight from this worker: 128 (32 calls x 4 per call",
        ),
        // Given calls of 8 on crowded shards are kept, with a warning.
        (
            &["--threads", "8", "--minibatches-per-call", "8"][..],
            "calls of 8 minibatches in flight across the workers crowd the shards",
        ),
        // Under the crowd a given call of 8 is the default's layout.
        (
            &["--threads", "2", "--minibatches-per-call", "8"][..],
            "minibatches in flight from this worker: 32 (4 calls x 8 per call",
        ),
        (
            &["--cbow", "--threads", "2"][..],
            "minibatches in flight from this worker: 8 (2 calls x 4 per call",
        ),
        (
            &["--cbow", "--threads", "2", "--in-flight", "3"][..],
            "minibatches in flight from this worker: 6 (6 calls x 1 per call",
        ),
        (
            &["--cbow", "--threads", "8"][..],
            "minibatches in flight from this worker: 8 (8 calls x 1 per call",
        ),
    ] {
        let mut args: Vec<std::ffi::OsString> = vec!["--restart".into()];
        args.extend(flags.iter().map(Into::into));
        let out = train_cli(&corpus, &shards, args).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: want {want:?} in\n{err}");
        // Only given calls of 8 on crowded shards are warned of.
        let crowd = "crowd the shards";
        assert_eq!(
            err.contains(crowd),
            want.contains(crowd),
            "{flags:?}:\n{err}"
        );
    }
    for s in spawned {
        s.stop().await;
    }
}

/// `colonnade train` on `corpus` (d 8, 1 epoch) against `shards`, with
/// `args` after the common flags.
async fn train_cli(
    corpus: &std::path::Path,
    shards: &str,
    args: Vec<std::ffi::OsString>,
) -> std::process::Output {
    let (corpus, shards) = (corpus.to_owned(), shards.to_owned());
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_colonnade"))
            .arg("train")
            .arg("--corpus")
            .arg(&corpus)
            .args(["--min-count", "2", "--size", "8", "--iter", "1"])
            .args(["--shards", &shards])
            .args(&args)
            .output()
    })
    .await
    .expect("join")
    .expect("run colonnade train")
}
