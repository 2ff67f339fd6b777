//! One training run, end to end ([`run_train`]): check the flags and files,
//! reach the running shards (or start embedded ones), prepare what the run
//! reads, create the model, train (over gRPC with recovery and checkpoints,
//! or in process), then export and write the summary.

use crate::checkpointer::GrpcCheckpointer;
use crate::cli::train::{
    calls_in_flight, check_outputs, minibatches_per_call, validate, InFlightBudget, TrainArgs,
};
use crate::cluster::{recoverable, Begin, Cluster, Session, Worker};
use crate::identity::RunRecord;
use crate::interrupt::{Interrupted, Interrupts};
use crate::preflight::{available_memory, check_corpus, embedded_bytes, human_bytes, shard_bytes};
use crate::stream::Source;
use crate::train::{report, train, NoCheckpoints, Progress, Tracker, TrainParams, TrainSummary};
use crate::vocab::available_threads;
use anyhow::{bail, Context};
use colonnade_common::corpus::DEFAULT_MAX_SENTENCE;
use colonnade_common::model::{ModelSpec, Objective};
use colonnade_common::vocab::{Vocab, VocabCounts};
use colonnade_ps_shard::{EmbeddedCluster, InProcessShards};
use colonnade_setup::Connector;
use std::io::IsTerminal;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a run reports to, and whether it takes over Ctrl-C: the command
/// line's run installs its own SIGINT handler ([`Interrupts`]); a run
/// embedded in another program (the Python package) is stopped through
/// `progress.interrupted` by its host, which keeps its own signal handling.
pub struct RunHooks {
    pub progress: Arc<Progress>,
    pub handle_signals: bool,
}

impl RunHooks {
    /// The command line's: a fresh progress, Ctrl-C handled here.
    pub fn command_line() -> Self {
        Self {
            progress: Arc::default(),
            handle_signals: true,
        }
    }
}

/// Runs `colonnade train`: everything that can be checked without reading
/// the corpus is checked first (flags, corpus files, outputs, then the
/// running shards), so mistakes fail in the first second.
pub async fn run_train(args: TrainArgs, connector: &Connector) -> anyhow::Result<TrainSummary> {
    run_train_with(args, connector, RunHooks::command_line()).await
}

/// [`run_train`] reporting to `hooks.progress`, with or without taking
/// over Ctrl-C.
pub async fn run_train_with(
    mut args: TrainArgs,
    connector: &Connector,
    hooks: RunHooks,
) -> anyhow::Result<TrainSummary> {
    // No running shards named: one embedded shard, the single-machine mode.
    if args.shards.is_empty() && args.embedded_shards.is_none() {
        args.embedded_shards = Some(1);
    }
    validate(&args)?;
    let progress = hooks.progress;
    let interrupts = if hooks.handle_signals {
        Interrupts::install(Arc::clone(&progress))
    } else {
        Interrupts::inert()
    };
    if args.graph.graph.is_none() && args.encoded.is_none() {
        check_corpus(&args.corpus, args.vocab.is_some(), args.iter)?;
    }
    if let Some(dir) = &args.encoded {
        crate::encode::check_workers(dir, args.num_workers)?;
    }
    check_outputs(&args)?;
    let timeout = Duration::from_secs(args.connect_timeout_secs);
    let remote = match args.embedded_shards {
        None => Some(Cluster::connect(connector, &args.shards, timeout).await?),
        Some(_) => None,
    };
    let (words, source) = tokio::task::block_in_place(|| crate::source::prepare(&args))?;
    let vocab = source.counts();
    let spec = model_spec(&vocab, &args);
    let threads = args.threads.unwrap_or_else(available_threads).max(1);
    let shard_count = args
        .embedded_shards
        .or(remote.as_ref().map(Cluster::len))
        .unwrap_or(1);
    check_memory(&spec, shard_count, args.embedded_shards.is_some())?;
    if args.out.any() {
        // Known only now: refused before training if the files cannot fit.
        let word_bytes = words.as_ref().map_or(vocab.len() as u64, |w| {
            w.words().map(|w| w.len() as u64).sum()
        });
        colonnade_exporter::outputs::check_space(
            &args.out,
            vocab.len() as u64,
            args.size,
            word_bytes,
        )?;
    }
    let embedded = match args.embedded_shards {
        Some(n) => Some(
            EmbeddedCluster::start(n, threads)
                .await
                .context("cannot start an embedded shard on 127.0.0.1")?,
        ),
        None => None,
    };
    let mut cluster = match (remote, &embedded) {
        (Some(cluster), _) => cluster,
        // Embedded shards serve plaintext on loopback, without a token.
        (None, Some(e)) => Cluster::connect(&Connector::default(), &e.endpoints(), timeout).await?,
        (None, None) => bail!("give --embedded-shards N or --shards host:port,..."),
    };
    let retry = Duration::from_secs(args.retry_timeout);
    cluster.declare_workers(args.num_workers);
    let fingerprint = cluster
        .create(spec.clone(), Arc::clone(&vocab), retry)
        .await?;
    if !args.restart {
        cluster.check_workers()?;
    }
    tracing::info!(
        shards = cluster.len(),
        words = vocab.len(),
        dim = args.size,
        fingerprint = format!("{fingerprint:016x}"),
        "model ready on every shard"
    );
    let in_process = embedded.as_ref().filter(|_| !args.embedded_grpc);
    let params = train_params(&args, threads, in_process.is_some());
    if in_process.is_none() {
        let (calls, per_call) = (params.concurrency, params.minibatches_per_call);
        tracing::info!(
            "minibatches in flight from this worker: {} ({calls} calls x {per_call} per call; \
             --in-flight and --minibatches-per-call)",
            calls * per_call
        );
    }
    if let Some(addr) = args.metrics_listen {
        colonnade_setup::metrics::serve(addr).map_err(anyhow::Error::msg)?;
    }
    // In-vocabulary words this worker reads over all epochs: what the
    // progress display counts (out-of-vocabulary tokens are not in it).
    let expected = u64::from(args.iter)
        * source
            .words_of(args.worker_index, args.num_workers)
            .unwrap_or(vocab.total_count() / args.num_workers);
    let reporter = tokio::spawn(report(
        Arc::clone(&progress),
        expected,
        args.iter,
        std::io::stderr().is_terminal(),
    ));
    interrupts.training(embedded.is_some());
    let result = match in_process {
        Some(e) => {
            let shards = InProcessShards::new(&e.cores(), fingerprint)?;
            let run = train(
                shards,
                Arc::clone(&vocab),
                source,
                params.clone(),
                Arc::clone(&progress),
                Arc::default(),
                NoCheckpoints,
            );
            run.await.map(|summary| Trained {
                summary,
                final_checkpoint: None,
            })
        }
        None => train_with_recovery(&args, &cluster, source, &params, &progress).await,
    };
    // The final checkpoint's failure costs no output: reported after them.
    let (result, final_checkpoint) = match result {
        Ok(Trained {
            summary,
            final_checkpoint,
        }) => (Ok(summary), final_checkpoint),
        Err(e) => (Err(e), None),
    };
    progress.finish();
    interrupts.writing();
    let reached = reporter.await.ok();
    let mut summary = result?;
    summary.progress_reached = reached;
    if !summary.finished_before {
        report_trained(&summary, args.iter);
    }
    if summary.invalid_utf8_sentences_skipped > 0 {
        eprintln!(
            "skipped {} sentence(s) holding invalid UTF-8 (--invalid-utf8 skip; the warnings above name the first)",
            summary.invalid_utf8_sentences_skipped
        );
    }
    if !args.out.any() && embedded.is_none() {
        // The model stays on the shards: say how to get the vectors.
        let vocab = match args.vocab.as_ref().or(args.save_vocab.as_ref()) {
            Some(v) => format!("--vocab {}", v.display()),
            None => "--vocab FILE (train with --save-vocab FILE to keep it)".into(),
        };
        eprintln!(
            "the model stays on the shards; write its vectors with: colonnade export --shards {} \
             {vocab} --output model.h5",
            args.shards.join(",")
        );
    }
    if args.out.any() {
        let start = Instant::now();
        let provenance = provenance(&args, &params, &spec, fingerprint, &summary, cluster.len());
        // An encoded corpus trained without the words: read them now.
        let words = match (words, &args.vocab) {
            (Some(w), _) => w,
            (None, Some(path)) => Arc::new(
                tokio::task::block_in_place(|| Vocab::load(path))
                    .map_err(|e| anyhow::anyhow!(e.for_flag("--vocab", path)))?,
            ),
            (None, None) => bail!("no vocabulary to export the words of"),
        };
        let out = cluster.export(&words, &args.out, &provenance).await?;
        for f in &out.files {
            tracing::info!(file = %f.display(), rows = out.rows, dim = out.dim, seconds = colonnade_setup::log::seconds(start.elapsed()), "written");
        }
    }
    if let Some(path) = &args.summary {
        let json = serde_json::to_string_pretty(&summary).context("summary")?;
        write_whole(path, json.as_bytes())
            .with_context(|| format!("cannot write --summary {}", path.display()))?;
    }
    if let Some(e) = embedded {
        e.stop().await;
    }
    if summary.interrupted {
        let written = args.out.paths();
        return Err(Interrupted(format!(
            "training was interrupted at {:.1} % of its words; the vectors trained until then \
             are in {} (their provenance says status \"interrupted\" and the progress)",
            100.0 * summary.progress_reached.unwrap_or(0.0),
            written
                .iter()
                .map(|p| p.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    }
    if let Some(FinalCheckpoint { error: e, heals }) = final_checkpoint {
        let written = args.out.paths();
        let outputs = if written.is_empty() {
            String::new()
        } else {
            format!(
                " (the outputs were written: {})",
                written
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let what = format!(
            "the final checkpoint could not be taken{outputs}: the model is complete on the \
             running shards, but the newest checkpoint on their disks is an earlier one"
        );
        if heals || written.is_empty() {
            // The shards did not answer within --retry-timeout, or nothing
            // but the shards holds the vectors: the run did not end well.
            return Err(e.context(what));
        }
        // Asking again gets the same answer (a shard without --data-dir, a
        // full disk), and the outputs asked for are written: the run did
        // what it was asked; the checkpoint is reported, not fatal.
        eprintln!("warning: {what}: {e:#}");
    }
    Ok(summary)
}

/// Writes `bytes` to `path` whole or not at all (a temporary file beside
/// it, renamed).
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let staged = colonnade_formats::staged::Staged::new(path);
    fs_err::write(staged.path(), bytes)?;
    staged.commit()?;
    Ok(())
}

/// What [`train_with_recovery`] trained, and why its final checkpoint
/// failed, if it did: the outputs are written first, then that is reported.
struct Trained {
    summary: TrainSummary,
    final_checkpoint: Option<FinalCheckpoint>,
}

/// Why the final checkpoint was not taken, and whether asking again could
/// have mended it (the shards unreachable until --retry-timeout ran out).
struct FinalCheckpoint {
    error: anyhow::Error,
    heals: bool,
}

/// Whether a failed final checkpoint may succeed when tried again: a shard
/// unreachable, restarting or of another lineage may come back; a shard
/// that keeps no checkpoints (started without --data-dir), could not write
/// one (INTERNAL: a full disk) or refuses the request will answer the same.
fn final_checkpoint_heals(e: &anyhow::Error) -> bool {
    if e.is::<crate::checkpointer::WorkersMismatch>() {
        return false;
    }
    match e.downcast_ref::<colonnade_proto::CallError>() {
        Some(c) => {
            recoverable(e)
                && !matches!(
                    c.code,
                    tonic::Code::Internal | tonic::Code::FailedPrecondition
                )
        }
        None => true,
    }
}

/// Logs and prints what training did.
fn report_trained(summary: &TrainSummary, epochs: u32) {
    tracing::info!(
        words = summary.tokens.saturating_sub(summary.resumed_tokens),
        words_in_all = summary.tokens,
        seconds = format!("{:.1}", summary.seconds),
        words_per_sec = format!("{:.0}", summary.tokens_per_second),
        trained_words = summary.trained_words,
        pairs = summary.pairs,
        loss = summary
            .final_loss
            .map(|l| format!("{l:.4}"))
            .unwrap_or_default(),
        "training done"
    );
    eprintln!("{}", trained_line(summary, epochs));
}

/// What the run trained, as the last line says it: this process's words
/// and rate, and where a resumed run started.
fn trained_line(summary: &TrainSummary, epochs: u32) -> String {
    let words = summary.tokens.saturating_sub(summary.resumed_tokens);
    let epochs = format!("{epochs} epoch{}", if epochs == 1 { "" } else { "s" });
    let what = if summary.interrupted {
        format!("{epochs}, interrupted")
    } else {
        epochs
    };
    let resumed = if summary.resumed_from_version > 0 {
        format!(
            "; resumed from checkpoint version {}, {} words in all",
            summary.resumed_from_version, summary.tokens
        )
    } else {
        String::new()
    };
    format!(
        "trained {words} words ({what}) in {:.1} s: {:.0} words/s{resumed}",
        summary.seconds, summary.tokens_per_second
    )
}

/// The model `args` asks for, on the vocabulary `vocab`.
fn model_spec(vocab: &VocabCounts, args: &TrainArgs) -> ModelSpec {
    ModelSpec {
        vocab_fingerprint: vocab.fingerprint(),
        vocab_size: vocab.len() as u64,
        dim: args.size,
        negative: args.negative,
        sampling_power: args.sampling_power,
        init_seed: args.seed,
        objective: Objective::from_cbow(args.cbow),
    }
}

/// The training parameters of `args`, with `threads` training threads.
fn train_params(args: &TrainArgs, threads: usize, in_process: bool) -> TrainParams {
    let budget = InFlightBudget::of(args.cbow, args.alpha).for_layout(
        threads,
        args.num_workers,
        args.in_flight,
    );
    let calls = calls_in_flight(args.in_flight, threads, args.num_workers, budget);
    TrainParams {
        window: args.window,
        negative: args.negative,
        sample: args.sample(),
        alpha: args.alpha,
        min_alpha: args.min_alpha,
        iter: args.iter,
        // In-process shards compute on the pipeline's own thread: one each.
        concurrency: if in_process { threads } else { calls },
        minibatches_per_call: if in_process {
            1
        } else {
            let per_call =
                minibatches_per_call(args.minibatches_per_call, calls, args.num_workers, budget);
            match args.minibatches_per_call {
                Some(_) => per_call,
                None => per_call.min(args.most_minibatches_per_call()),
            }
        },
        minibatch: args.minibatch(in_process),
        seed: args.seed,
        worker_index: args.worker_index,
        num_workers: args.num_workers,
        max_sentence: DEFAULT_MAX_SENTENCE,
        invalid_utf8: args.invalid_utf8.into(),
        objective: Objective::from_cbow(args.cbow),
        shared_negatives: args.shared_negatives(),
    }
}

/// Trains through shards over gRPC, surviving their loss: agrees with the
/// shards on one state of the model (resuming from the newest checkpoint),
/// takes checkpoints while training, and on a failure that can pass
/// (a shard unreachable, restarting, not answering) reconciles again and
/// goes on from the position the agreed state holds.
async fn train_with_recovery(
    args: &TrainArgs,
    cluster: &Cluster,
    source: Source,
    params: &TrainParams,
    progress: &Arc<Progress>,
) -> anyhow::Result<Trained> {
    let start = Instant::now();
    let retry = Duration::from_secs(args.retry_timeout);
    let mut final_checkpoint = None;
    // Reads the first MiB of each input: off the async threads, as the
    // corpus checks before it are.
    let record = Arc::new(tokio::task::block_in_place(|| RunRecord::of(args))?);
    let worker = Worker {
        index: args.worker_index,
        count: args.num_workers,
    };
    let mut session = cluster
        .reconcile(
            worker,
            Begin::from_flags(args.restart, args.rollback),
            None,
            false,
            retry,
        )
        .await?;
    let interval = match args.checkpoint_interval {
        Some(0) => None,
        Some(s) if !session.persistent => bail!(
            "--checkpoint-interval {s}: not every shard keeps checkpoints; start each \
             ps-shard with --data-dir DIR (or give --checkpoint-interval 0)"
        ),
        Some(s) => Some(Duration::from_secs(s)),
        None => session.persistent.then(|| Duration::from_secs(300)),
    };
    let resumed_from = session.version;
    let resumed_tokens = session.position.tokens;
    progress.resumed_tokens.store(resumed_tokens, Relaxed);
    progress
        .resumed_words
        .store(session.position.words, Relaxed);
    check_existing(args, cluster, &session, &record)?;
    if session.version > 0 {
        let msg = if session.finished {
            format!(
                "worker {}'s part of model {:016x} is already trained to the end (checkpoint \
                 version {}, {} words read): nothing to train; give --restart to train it afresh",
                args.worker_index,
                cluster.fingerprint().unwrap_or_default(),
                session.version,
                session.position.words,
            )
        } else {
            format!(
                "resuming from checkpoint version {} of the model: worker {} at job {} ({} words \
                 of its part read); give --restart to start afresh",
                session.version, args.worker_index, session.position.jobs, session.position.words,
            )
        };
        tracing::info!("{msg}");
        eprintln!("{msg}");
    }
    let (mut recoveries, mut words_retrained) = (0u64, 0u64);
    let mut checkpointer: Option<GrpcCheckpointer> = None;
    let mut finish_deadline: Option<Instant> = None;
    let call_timeout = Duration::from_secs(args.call_timeout.max(1));
    let summary = loop {
        let tracker = Arc::new(Tracker::new(session.position));
        progress.tokens.store(session.position.tokens, Relaxed);
        progress.words.store(session.position.words, Relaxed);
        progress
            .trained_words
            .store(session.position.trained_words, Relaxed);
        let shards = cluster.pipelines(session.lineage, call_timeout)?;
        let ckpt = match interval {
            Some(i) => Some(GrpcCheckpointer::new(
                cluster,
                session.lineage,
                worker,
                Arc::clone(&record),
                i,
                session.version,
                shards.checkpoint_pending(),
            )?),
            None => None,
        };
        let result = if session.finished {
            Ok(None)
        } else {
            let vocab = source.counts();
            let (source, params, progress) = (source.clone(), params.clone(), Arc::clone(progress));
            let tracker = Arc::clone(&tracker);
            let run = match ckpt.clone() {
                Some(c) => train(shards, vocab, source, params, progress, tracker, c).await,
                None => {
                    train(
                        shards,
                        vocab,
                        source,
                        params,
                        progress,
                        tracker,
                        NoCheckpoints,
                    )
                    .await
                }
            };
            run.map(Some)
        };
        if let Some(c) = &ckpt {
            if let Some(p) = &checkpointer {
                c.taken.fetch_add(p.taken.load(Relaxed), Relaxed);
                c.pause_max.fetch_max(p.pause_max.load(Relaxed), Relaxed);
            }
            checkpointer = Some(c.clone());
        }
        match result {
            Ok(summary) => {
                let position = summary.as_ref().map_or(session.position, |s| s.position);
                let Some(c) = checkpointer.as_ref().filter(|_| !session.finished) else {
                    break summary;
                };
                // This worker's part is done: recorded (so later barriers do
                // not wait for it) and on disk, before it exits. Until then a
                // rollback could undo its last minibatches with no worker left
                // to train them again.
                let Err(e) = c.finish(position).await else {
                    break summary;
                };
                if !final_checkpoint_heals(&e) {
                    // Asking again gets the same answer (a shard without
                    // --data-dir, a full disk): the model is complete in
                    // the shards' memory; the outputs are written, then
                    // this is reported.
                    tracing::error!(error = %format!("{e:#}"), "the final checkpoint could not be taken; the newest checkpoint on disk is an earlier one");
                    final_checkpoint = Some(FinalCheckpoint {
                        error: e,
                        heals: false,
                    });
                    break summary;
                }
                let giving_up = finish_deadline.get_or_insert_with(|| Instant::now() + retry);
                if Instant::now() >= *giving_up {
                    tracing::error!(error = %format!("{e:#}"), "the final checkpoint could not be taken within --retry-timeout");
                    final_checkpoint = Some(FinalCheckpoint {
                        error: e.context(format!(
                            "not taken within --retry-timeout {}s",
                            args.retry_timeout
                        )),
                        heals: true,
                    });
                    break summary;
                }
                tracing::warn!(error = %format!("{e:#}"), "the final checkpoint was not taken; reconciling and trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                let before = session.lineage;
                session = cluster
                    .reconcile(worker, Begin::Resume, None, true, retry)
                    .await
                    .context("recovery failed")?;
                if session.lineage == before && !session.restored {
                    // Nothing was lost: the stream is at its end, try again.
                    session.position = position;
                    session.finished = false;
                } else {
                    // Rolled back: train this worker's part again from the
                    // checkpoint's position.
                    recoveries += 1;
                    words_retrained += position.words.saturating_sub(session.position.words);
                }
            }
            Err(e) if recoverable(&e) => {
                recoveries += 1;
                metrics::counter!("colonnade_client_recoveries_total").increment(1);
                let reached = progress.words.load(Relaxed);
                let failed_at = tracker.position();
                tracing::warn!(error = %format!("{e:#}"), "training interrupted; reconciling with the shards (--retry-timeout {}s)", args.retry_timeout);
                eprintln!("training interrupted: {e:#}; recovering");
                let before = session.lineage;
                // With checkpoints, a failure rolls the model back to the
                // newest one (a minibatch may be half applied); without, the
                // state is kept and this worker goes on where it was.
                session = cluster
                    .reconcile(
                        worker,
                        Begin::Resume,
                        Some(before),
                        interval.is_none(),
                        retry,
                    )
                    .await
                    .context("recovery failed")?;
                if session.lineage == before && !session.restored {
                    session.position = failed_at;
                    session.finished = false;
                }
                words_retrained += reached.saturating_sub(session.position.words);
                tracing::warn!(
                    version = session.version,
                    lineage = format!("{:016x}", session.lineage),
                    jobs = session.position.jobs,
                    "training resumes"
                );
            }
            Err(e) => return Err(e),
        }
    };
    let mut summary = match summary {
        Some(s) => s,
        None => finished_summary(&session, progress),
    };
    summary.resumed_tokens = resumed_tokens;
    // The whole of this process's training, recoveries included.
    summary.seconds = start.elapsed().as_secs_f64();
    summary.tokens_per_second =
        summary.tokens.saturating_sub(resumed_tokens) as f64 / summary.seconds.max(1e-9);
    summary.resumed_from_version = resumed_from;
    summary.recoveries = recoveries;
    summary.words_retrained = words_retrained;
    if let Some(c) = &checkpointer {
        summary.checkpoints = c.taken.load(Relaxed);
        summary.checkpoint_pause_max_seconds = f64::from_bits(c.pause_max.load(Relaxed));
    }
    Ok(Trained {
        summary,
        final_checkpoint,
    })
}

/// The summary of a worker whose part a checkpoint already records finished.
fn finished_summary(session: &Session, progress: &Progress) -> TrainSummary {
    let p = session.position;
    TrainSummary {
        tokens: p.tokens,
        words: p.words,
        trained_words: p.trained_words,
        pairs: 0,
        minibatches: 0,
        bytes_sent: 0,
        bytes_received: 0,
        seconds: 0.0,
        tokens_per_second: 0.0,
        final_loss: progress.take_loss(),
        epoch_loss: Vec::new(),
        invalid_utf8_sentences_skipped: 0,
        progress_reached: None,
        position: p,
        resumed_from_version: session.version,
        recoveries: 0,
        words_retrained: 0,
        checkpoints: 0,
        checkpoint_pause_max_seconds: 0.0,
        resumed_tokens: p.tokens,
        finished_before: true,
        interrupted: false,
    }
}

/// The one rule for a model the shards already hold, before this worker
/// trains it: a checkpoint's run resumes only with the same inputs and
/// epochs (a finished one is then left as it is), and a model trained on
/// shards that keep no checkpoints is not trained again from the start of
/// its schedule by a lone worker.
fn check_existing(
    args: &TrainArgs,
    cluster: &Cluster,
    session: &Session,
    record: &RunRecord,
) -> anyhow::Result<()> {
    let fingerprint = cluster.fingerprint().unwrap_or_default();
    if session.version > 0 {
        match &session.record {
            Some(r) => record.check_resume(r, fingerprint, session.version, session.finished)?,
            None => tracing::warn!(
                version = session.version,
                "checkpoint version {} does not record the corpus and epochs it was trained \
                 with (written by an older release): resuming without checking them",
                session.version
            ),
        }
    } else if session.trained && !session.persistent && args.num_workers == 1 {
        // One worker, no checkpoints: only an earlier run trained it, and
        // where that run stopped is not known.
        bail!(
            "model {fingerprint:016x} on the shards has already been trained, and the shards \
             keep no checkpoints (no ps-shard --data-dir), so where that run stopped is not \
             known: training it again would restart its learning rate on trained vectors. \
             Export it (colonnade export --shards ... --vocab ...), give --restart to train it \
             afresh, or a different --seed to train a separate model"
        );
    }
    Ok(())
}

/// Logs the memory the model needs per shard and in total; with embedded
/// shards, refuses a model larger than the memory this process can get,
/// before anything is allocated.
fn check_memory(spec: &ModelSpec, shards: usize, embedded: bool) -> anyhow::Result<()> {
    if !embedded {
        let per_shard = shard_bytes(spec, shards as u32);
        let total = per_shard.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let largest = per_shard.iter().copied().max().unwrap_or(0);
        tracing::info!(
            words = spec.vocab_size,
            dim = spec.dim,
            shards,
            per_shard = %human_bytes(largest),
            total = %human_bytes(total),
            "memory estimate: 2 matrices x words x (columns x 4 + 4 bytes) + 16 bytes x words (sampler, counts) per shard"
        );
        return Ok(());
    }
    let total = embedded_bytes(spec, shards as u32);
    tracing::info!(
        words = spec.vocab_size,
        dim = spec.dim,
        shards,
        total = %human_bytes(total),
        "memory estimate: 2 matrices x words x (dim x 4 + 4 bytes), shared by the embedded shards, + 16 bytes x words (sampler, counts) per shard"
    );
    if let Some((available, source)) = available_memory() {
        if total > available {
            bail!(
                "the model needs {} ({} words x {} dimensions over {shards} embedded shard(s)) \
                 but this process can get only {} ({source}). Use a smaller --size, fewer \
                 words (--max-vocab, a higher --min-count), or remote shards (--shards) on \
                 machines with more memory",
                human_bytes(total),
                spec.vocab_size,
                spec.dim,
                human_bytes(available)
            );
        }
    }
    Ok(())
}

/// The provenance of the trained model: what the shards hold, and the run.
fn provenance(
    args: &TrainArgs,
    params: &TrainParams,
    spec: &ModelSpec,
    fingerprint: u64,
    summary: &TrainSummary,
    shards: usize,
) -> colonnade_formats::Provenance {
    let graph = args.graph.graph.as_ref().map(|path| {
        let w = args.graph.walk_params();
        serde_json::json!({
            "path": path,
            "directed": args.graph.directed,
            "walks_per_node": w.walks_per_node,
            "walk_length": w.walk_length,
            "p": w.p,
            "q": w.q,
        })
    });
    let config = serde_json::json!({ "params": params, "corpus": args.corpus, "graph": graph, "summary": summary });
    colonnade_formats::Provenance {
        training: Some(colonnade_formats::Training {
            window: args.window.into(),
            min_count: args.min_count(),
            sample: args.sample(),
            alpha: args.alpha.into(),
            iter: args.iter.into(),
            minibatch: params.minibatch as u64,
            seed: args.seed,
            sampling_power: args.sampling_power.into(),
            train_words: summary.tokens,
            train_seconds: summary.seconds,
            config_json: config.to_string(),
            status: if summary.interrupted {
                "interrupted"
            } else {
                "complete"
            }
            .into(),
            progress: if summary.interrupted {
                summary.progress_reached.unwrap_or(0.0)
            } else {
                1.0
            },
        }),
        ..colonnade_exporter::model_provenance(spec, fingerprint, shards)
    }
}
