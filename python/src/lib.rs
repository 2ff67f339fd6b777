//! `colonnade._native`, the Python package's native module: Colonnade's own
//! trainer, exporter and file formats, called in this process (no
//! subprocess). [`run`] runs any `colonnade` command from its arguments on a
//! thread of its own, with the GIL released, reporting progress to a Python
//! callback and turning Ctrl-C into a clean stop; [`read_vectors`] and
//! [`write_word2vec`] move vector files to and from numpy-ready bytes.
//!
//! The Python API (gensim's names, `colonnade/__init__.py`) is built on
//! these three functions. This module must never implement training,
//! formats or flags itself: it only calls the client, exporter and formats
//! crates, so the package and the CLI always train and write alike.

use clap::Parser;
use colonnade_client::cli::{Cli, Command};
use colonnade_client::interrupt::Interrupted;
use colonnade_client::models::ModelsCommand;
use colonnade_client::run::{run_train_with, RunHooks};
use colonnade_client::train::Progress;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc, Once};
use std::time::Duration;

/// What a command returns to Python: training, its summary as JSON;
/// `models list`, the shards' models as JSON; the others nothing.
type Outcome = anyhow::Result<Option<String>>;

/// Runs the `colonnade` command `argv` (without the program name), e.g.
/// `["train", "--corpus", "c.txt", "--output", "m.h5"]`, in this process.
/// The command runs on a thread of its own with the GIL released; every
/// `poll_seconds` this thread takes the GIL back to call `on_progress` with
/// a dict of the run's counters and to check for Ctrl-C. Ctrl-C stops
/// training after the minibatches in flight; the vectors trained so far are
/// written (as the CLI does) and `KeyboardInterrupt` is raised. Bad
/// arguments raise `ValueError` with the CLI's message; a failed run
/// raises `RuntimeError` with the whole error chain.
#[pyfunction]
#[pyo3(signature = (argv, on_progress=None, poll_seconds=0.25))]
fn run(
    py: Python<'_>,
    argv: Vec<String>,
    on_progress: Option<Bound<'_, PyAny>>,
    poll_seconds: f64,
) -> PyResult<Option<String>> {
    let cli = Cli::try_parse_from(std::iter::once("colonnade".to_string()).chain(argv))
        .map_err(|e| PyValueError::new_err(e.render().to_string()))?;
    init_logging(&cli);
    let progress = Arc::new(Progress::default());
    let (tx, rx) = mpsc::channel::<Outcome>();
    let hooks = RunHooks {
        progress: Arc::clone(&progress),
        handle_signals: false,
    };
    std::thread::Builder::new()
        .name("colonnade-run".into())
        .spawn(move || {
            let outcome = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(command(cli, hooks)));
            // The receiver waits for this; if it is gone there is no one to tell.
            let _ = tx.send(outcome);
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the run's thread: {e}")))?;
    let poll = Duration::from_secs_f64(poll_seconds.clamp(0.01, 60.0));
    // Waited on with the GIL released, so shared with that closure: a
    // Mutex makes the receiver Sync (only this thread ever locks it).
    let rx = std::sync::Mutex::new(rx);
    let mut interrupt: Option<PyErr> = None;
    let outcome = loop {
        let received = py.detach(|| match rx.lock() {
            Ok(rx) => rx.recv_timeout(poll),
            Err(_) => Err(mpsc::RecvTimeoutError::Disconnected),
        });
        match received {
            Ok(outcome) => break outcome,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(anyhow::anyhow!("the run's thread ended without a result"))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if interrupt.is_none() {
            if let Err(e) = py.check_signals() {
                // Stop after the minibatches in flight; the run then writes
                // what it trained and returns.
                progress.interrupted.store(true, Relaxed);
                interrupt = Some(e);
                continue;
            }
            if let Some(callback) = &on_progress {
                callback.call1((counters(py, &progress)?,))?;
            }
        }
    };
    if let Some(e) = interrupt {
        return match outcome {
            Ok(_) => Err(e),
            Err(err) if err.is::<Interrupted>() => Err(e),
            Err(err) => Err(PyRuntimeError::new_err(format!("{err:#}"))),
        };
    }
    outcome.map_err(|e| {
        if e.is::<Interrupted>() {
            PyKeyboardInterrupt::new_err(format!("{e:#}"))
        } else {
            PyRuntimeError::new_err(format!("{e:#}"))
        }
    })
}

/// Runs one parsed command; what it returns is what [`run`] returns.
async fn command(cli: Cli, hooks: RunHooks) -> Outcome {
    match cli.command {
        Command::Train(args) => {
            let connector = args.connect.connector()?;
            let summary = run_train_with(*args, &connector, hooks).await?;
            Ok(Some(serde_json::to_string(&summary)?))
        }
        Command::Models(args) => match args.command {
            ModelsCommand::List(list) => {
                let connector = list.connect.connector()?;
                let shards =
                    colonnade_client::models::shard_models(&connector, &list.shards).await?;
                Ok(Some(serde_json::json!({ "shards": shards }).to_string()))
            }
            command => {
                colonnade_client::models::run(colonnade_client::models::ModelsArgs { command })
                    .await
                    .map(|()| None)
            }
        },
        _ => colonnade_client::cli::run(cli).await.map(|()| None),
    }
}

/// The run's counters as a dict: tokens and in-vocabulary words read,
/// words left after subsampling, pairs, minibatches, the learning rate, the
/// newest epoch trained (0-based) and each epoch's mean loss so far.
fn counters<'py>(py: Python<'py>, p: &Progress) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tokens", p.tokens.load(Relaxed))?;
    d.set_item("words", p.words.load(Relaxed))?;
    d.set_item("trained_words", p.trained_words.load(Relaxed))?;
    d.set_item("pairs", p.pairs.load(Relaxed))?;
    d.set_item("minibatches", p.minibatches.load(Relaxed))?;
    d.set_item("alpha", p.alpha())?;
    d.set_item("epoch", p.epoch())?;
    d.set_item("epoch_loss", p.epoch_losses())?;
    Ok(d)
}

/// Rust's own log lines go to stderr only when `RUST_LOG` asks for them:
/// a library is quiet by default (the Python layer logs progress through
/// `logging`).
fn init_logging(cli: &Cli) {
    static ONCE: Once = Once::new();
    if std::env::var_os("RUST_LOG").is_some() {
        let format = cli.log.log_format;
        ONCE.call_once(|| colonnade_setup::log::init(format));
    }
}

/// Reads a vector file in any format Colonnade reads (HDF5, word2vec text
/// or binary, told by content): `(words, data, rows, dim)`, where `data`
/// is a bytearray of the rows as little-endian f32, row-major
/// (`numpy.frombuffer` views it, writable, without a copy). Errors name
/// the file.
#[pyfunction]
fn read_vectors(
    py: Python<'_>,
    path: PathBuf,
) -> PyResult<(Vec<String>, Py<PyByteArray>, usize, usize)> {
    let vectors = py
        .detach(|| colonnade_formats::read_vectors(&path))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let (rows, dim) = vectors.matrix.dim();
    // The readers build row-major arrays, so this borrows (no copy).
    let matrix = vectors.matrix.as_standard_layout();
    let values = matrix.as_slice().ok_or_else(|| {
        PyRuntimeError::new_err(format!(
            "{path:?}: its vectors are not one contiguous array"
        ))
    })?;
    let data = PyByteArray::new(py, bytemuck::cast_slice(values));
    Ok((vectors.words, data.unbind(), rows, dim))
}

/// Writes `words` and their rows (`data`: rows × dim little-endian f32,
/// row-major) as a word2vec file, text or binary, with the writer the CLI's
/// `--output-text` and `--output-binary` use: whole or not at all.
#[pyfunction]
fn write_word2vec(
    py: Python<'_>,
    path: PathBuf,
    words: Vec<String>,
    data: &[u8],
    dim: usize,
    binary: bool,
) -> PyResult<()> {
    if dim == 0 || data.len() != words.len() * dim * 4 {
        return Err(PyValueError::new_err(format!(
            "{} words of dimension {dim} need {} bytes of float32, not {}",
            words.len(),
            words.len() * dim * 4,
            data.len()
        )));
    }
    // Python's bytes need not be 4-byte aligned: copied into f32s.
    let rows: Vec<f32> = bytemuck::pod_collect_to_vec(data);
    py.detach(|| {
        let encoding = if binary {
            colonnade_formats::word2vec::Encoding::Binary
        } else {
            colonnade_formats::word2vec::Encoding::Text
        };
        let mut out = colonnade_formats::word2vec::Word2vecWriter::create(
            &path,
            encoding,
            words.len() as u64,
            dim as u32,
        )?;
        for (word, row) in words.iter().zip(rows.chunks_exact(dim)) {
            out.write(word, row)?;
        }
        out.finish().map(|_| ())
    })
    .map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(read_vectors, m)?)?;
    m.add_function(wrap_pyfunction!(write_word2vec, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
