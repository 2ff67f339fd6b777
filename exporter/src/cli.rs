//! `colonnade-export` / `colonnade export`: export a model from running
//! shards, or from their checkpoint directories with no shard running.

use crate::outputs::{check_outputs, check_space, FlagPath};
use crate::{discover_model, export, model_provenance, Source, Wanted};
use anyhow::bail;
use colonnade_common::vocab::Vocab;
use std::path::PathBuf;

/// The files to write, and how: the output flags of `colonnade train` and
/// `colonnade export`, and what [`crate::export`] takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// HDF5 file to write (`vectors`, `words`, `counts`, attributes).
    #[arg(long = "output", env = "COLONNADE_OUTPUT")]
    pub output: Option<PathBuf>,
    /// Also write word2vec text format here.
    #[arg(long, env = "COLONNADE_OUTPUT_TEXT")]
    pub output_text: Option<PathBuf>,
    /// Also write word2vec binary format here.
    #[arg(long, env = "COLONNADE_OUTPUT_BINARY")]
    pub output_binary: Option<PathBuf>,
    /// Also store the output vectors v(w) in the HDF5 file (`output_vectors`).
    #[arg(long, env = "COLONNADE_EXPORT_OUTPUT_VECTORS")]
    pub output_vectors: bool,
    /// Also write the vectors as TSV for the TensorBoard projector (one row per word, no header).
    #[arg(long, env = "COLONNADE_OUTPUT_TSV_VECTORS")]
    pub output_tsv_vectors: Option<PathBuf>,
    /// Also write the projector's metadata TSV (one word per line, same order).
    #[arg(long, env = "COLONNADE_OUTPUT_TSV_METADATA")]
    pub output_tsv_metadata: Option<PathBuf>,
    /// Chunk and deflate-compress the HDF5 matrices at this level (1-9).
    #[arg(long, env = "COLONNADE_HDF5_COMPRESS", value_parser = clap::value_parser!(u8).range(1..=9))]
    pub hdf5_compress: Option<u8>,
}

impl OutputArgs {
    /// Whether any file is to be written.
    pub fn any(&self) -> bool {
        !self.paths().is_empty()
    }

    /// Every output file given, with its flag (for [`crate::outputs::check_outputs`]).
    pub fn paths(&self) -> Vec<FlagPath<'_>> {
        [
            ("--output", &self.output),
            ("--output-text", &self.output_text),
            ("--output-binary", &self.output_binary),
            ("--output-tsv-vectors", &self.output_tsv_vectors),
            ("--output-tsv-metadata", &self.output_tsv_metadata),
        ]
        .into_iter()
        .filter_map(|(flag, p)| p.as_deref().map(|p| FlagPath::new(flag, p)))
        .collect()
    }
}

/// Export a trained model from running shards, or from their checkpoints.
#[derive(clap::Args, Debug)]
#[group(id = "source", required = true, multiple = false, args = ["shards", "checkpoint"])]
pub struct ExportArgs {
    /// Shard endpoints, comma-separated (any order).
    #[arg(long, env = "COLONNADE_SHARDS", value_delimiter = ',')]
    pub shards: Vec<String>,
    /// Instead of running shards: every shard's data dir (`ps-shard
    /// --data-dir`, or a model directory in it), comma-separated, any order.
    /// The newest checkpoint version all of them hold is exported (an
    /// unreadable one falls back to the previous); needs the model's size in
    /// memory.
    #[arg(long, env = "COLONNADE_CHECKPOINT", value_delimiter = ',')]
    pub checkpoint: Vec<PathBuf>,
    /// The vocabulary file the model was trained with.
    #[arg(long, env = "COLONNADE_VOCAB")]
    pub vocab: PathBuf,
    /// Model fingerprint (hex), when the shards hold several models. Without
    /// it, running shards holding several models export the one trained
    /// with --vocab's vocabulary (refused when more than one was).
    #[arg(long, env = "COLONNADE_FINGERPRINT")]
    pub fingerprint: Option<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub async fn run(args: ExportArgs, connector: &colonnade_setup::Connector) -> anyhow::Result<()> {
    if !args.out.any() {
        bail!("nothing to write: give --output, --output-text, --output-binary or --output-tsv-vectors/--output-tsv-metadata");
    }
    let fingerprint = args
        .fingerprint
        .as_deref()
        .map(|f| crate::parse_fingerprint("--fingerprint", f))
        .transpose()?;
    check_outputs(&[FlagPath::new("--vocab", &args.vocab)], &args.out.paths())?;
    let vocab = Vocab::load(&args.vocab)
        .map_err(|e| anyhow::anyhow!(e.for_flag("--vocab", &args.vocab)))?;
    let word_bytes = vocab.words().map(|w| w.len() as u64).sum();
    if !args.checkpoint.is_empty() {
        let dirs = args.checkpoint.clone();
        let model =
            tokio::task::spawn_blocking(move || crate::checkpoints::load(&dirs, fingerprint))
                .await??;
        check_vocab(&args, &vocab, &model.spec)?;
        check_space(&args.out, vocab.len() as u64, model.spec.dim, word_bytes)?;
        tracing::info!(
            version = model.version,
            fingerprint = format!("{:016x}", model.fingerprint),
            "exporting checkpoint version {}",
            model.version
        );
        let provenance = model_provenance(&model.spec, model.fingerprint, model.slices.len());
        let summary = export(
            Source::Slices(&model.slices),
            model.fingerprint,
            &vocab,
            model.spec.dim,
            &args.out,
            &provenance,
        )
        .await?;
        for f in &summary.files {
            tracing::info!(file = %f.display(), rows = summary.rows, dim = summary.dim, version = model.version, "written");
        }
        return Ok(());
    }
    // Without --fingerprint, the model trained with --vocab: the shards may
    // hold models of other vocabularies (another --min-count, corpus).
    let wanted = match fingerprint {
        Some(f) => Wanted::Model(f),
        None => Wanted::Vocab {
            fingerprint: vocab.fingerprint(),
            words: vocab.len() as u64,
        },
    };
    let found = discover_model(connector, &args.shards, wanted).await;
    let (mut shards, spec, fp) = match (found, wanted) {
        (Err(e), Wanted::Vocab { fingerprint, words }) => {
            return Err(e.context(format!(
                "--vocab {} (vocabulary fingerprint {fingerprint:016x}, {words} words)",
                args.vocab.display()
            )))
        }
        (found, _) => found?,
    };
    check_vocab(&args, &vocab, &spec)?;
    check_space(&args.out, vocab.len() as u64, spec.dim, word_bytes)?;
    let provenance = model_provenance(&spec, fp, shards.len());
    let summary = export(
        Source::Shards(&mut shards),
        fp,
        &vocab,
        spec.dim,
        &args.out,
        &provenance,
    )
    .await?;
    for f in &summary.files {
        tracing::info!(file = %f.display(), rows = summary.rows, dim = summary.dim, "written");
    }
    Ok(())
}

fn check_vocab(
    args: &ExportArgs,
    vocab: &Vocab,
    spec: &colonnade_common::model::ModelSpec,
) -> anyhow::Result<()> {
    if spec.vocab_fingerprint != vocab.fingerprint() || spec.vocab_size != vocab.len() as u64 {
        bail!(
            "{}: vocabulary (fingerprint {:016x}, {} words) is not the one the model was trained with ({:016x}, {} words)",
            args.vocab.display(),
            vocab.fingerprint(),
            vocab.len(),
            spec.vocab_fingerprint,
            spec.vocab_size
        );
    }
    Ok(())
}
