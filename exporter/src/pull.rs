//! Pulling column slices from the shards and assembling rows.

use crate::hdf5_out::Hdf5Writer;
use crate::tsv::ProjectorWriter;
use crate::word2vec::{BinaryWriter, TextWriter};
use anyhow::{bail, Context};
use colonnade_common::model::ModelSpec;
use colonnade_common::vocab::Vocab;
use colonnade_proto::v1::shard_client::ShardClient;
use colonnade_proto::v1::{Matrix, ModelStatus, PullRowsRequest, StatusRequest};
use colonnade_proto::{connect, decode_f32};
use std::path::PathBuf;
use tonic::transport::Channel;

/// Rows assembled per step.
const BLOCK_ROWS: u64 = 16_384;

/// A connected shard and the columns it holds.
pub struct ShardHandle {
    pub endpoint: String,
    pub client: ShardClient<Channel>,
    pub col_start: u32,
    pub col_end: u32,
}

/// What to write.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    pub hdf5: Option<PathBuf>,
    pub text: Option<PathBuf>,
    pub binary: Option<PathBuf>,
    /// TensorBoard projector TSV files (vectors; metadata = the words).
    pub tsv_vectors: Option<PathBuf>,
    pub tsv_metadata: Option<PathBuf>,
    /// Also write the output vectors v(w) to HDF5 (`output_vectors`).
    pub include_output: bool,
    /// Deflate level for chunked, compressed HDF5 datasets (None: contiguous).
    pub compress: Option<u8>,
    /// Root attributes: the training configuration and provenance, as JSON.
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug)]
pub struct ExportSummary {
    pub rows: u64,
    pub dim: u32,
    pub files: Vec<PathBuf>,
}

/// Parses a model fingerprint as `colonnade models list` prints it (16 hex
/// digits, an optional `0x`); `flag` names the flag in the error.
pub fn parse_fingerprint(flag: &str, value: &str) -> anyhow::Result<u64> {
    let hex = value.trim();
    let hex = hex
        .strip_prefix("0x")
        .or_else(|| hex.strip_prefix("0X"))
        .unwrap_or(hex);
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!(
            "{flag} {value:?} is not a model fingerprint: expected up to 16 hex digits, \
             as `colonnade models list` shows them"
        );
    }
    u64::from_str_radix(hex, 16)
        .with_context(|| format!("{flag} {value:?} is not a model fingerprint"))
}

/// One line describing a model a shard holds: fingerprint, vocabulary size,
/// dimension, init seed, negatives and vocabulary fingerprint.
pub fn describe_model(m: &ModelStatus) -> String {
    match &m.spec {
        Some(s) => format!(
            "{:016x}: {} words, dim {}, init seed {}, negative {}, vocabulary {:016x}",
            m.model_fingerprint, s.vocab_size, s.dim, s.init_seed, s.negative, s.vocab_fingerprint
        ),
        None => format!("{:016x}: (no spec reported)", m.model_fingerprint),
    }
}

fn list_models(models: &[&ModelStatus]) -> String {
    models
        .iter()
        .map(|m| format!("\n  {}", describe_model(m)))
        .collect()
}

/// Connects to `endpoints`, finds the one model they hold together (or the one
/// with `fingerprint`), and checks that their column ranges tile [0, dim).
pub async fn discover(
    endpoints: &[String],
    fingerprint: Option<u64>,
) -> anyhow::Result<(Vec<ShardHandle>, ModelSpec, u64)> {
    let mut shards = Vec::new();
    let mut model: Option<(ModelSpec, u64)> = None;
    for endpoint in endpoints {
        let mut client = connect(endpoint).await?;
        let status = client
            .status(StatusRequest {})
            .await
            .with_context(|| format!("shard {endpoint}: status failed"))?
            .into_inner();
        let candidates: Vec<_> = status
            .models
            .iter()
            .filter(|m| fingerprint.is_none_or(|f| f == m.model_fingerprint))
            .collect();
        let m = match (candidates.as_slice(), fingerprint) {
            ([one], _) => *one,
            ([], None) => bail!("shard {endpoint} holds no model"),
            ([], Some(f)) if status.models.is_empty() => {
                bail!("shard {endpoint} holds no model (looking for --fingerprint {f:016x})")
            }
            ([], Some(f)) => bail!(
                "shard {endpoint} holds no model with --fingerprint {f:016x}; it holds:{}",
                list_models(&status.models.iter().collect::<Vec<_>>())
            ),
            (several, _) => bail!(
                "shard {endpoint} holds {} models:{}\npick one with --fingerprint HEX, or drop \
                 the ones no longer needed with `colonnade models drop --shards {} --fingerprint HEX`",
                several.len(),
                list_models(several),
                endpoints.join(",")
            ),
        };
        let spec = m
            .spec
            .as_ref()
            .with_context(|| format!("shard {endpoint}: status has no spec"))?;
        let this = ModelSpec {
            vocab_fingerprint: spec.vocab_fingerprint,
            vocab_size: spec.vocab_size,
            dim: spec.dim,
            negative: spec.negative,
            sampling_power: spec.sampling_power,
            init_seed: spec.init_seed,
        };
        if let Some((first, fp)) = &model {
            if *fp != m.model_fingerprint {
                bail!(
                    "shard {endpoint} holds model {:016x}, the first shard holds {fp:016x}",
                    m.model_fingerprint
                );
            }
            debug_assert_eq!(first, &this);
        } else {
            model = Some((this, m.model_fingerprint));
        }
        shards.push(ShardHandle {
            endpoint: endpoint.clone(),
            client,
            col_start: spec.col_start,
            col_end: spec.col_end,
        });
    }
    let (spec, fp) = model.context("no shards given")?;
    shards.sort_by_key(|s| s.col_start);
    let mut next = 0;
    for s in &shards {
        if s.col_start != next {
            bail!("shard {} starts at column {}, expected {next}: the shards do not tile the dimension", s.endpoint, s.col_start);
        }
        next = s.col_end;
    }
    if next != spec.dim {
        bail!(
            "the shards cover columns [0, {next}) of dimension {}",
            spec.dim
        );
    }
    Ok((shards, spec, fp))
}

/// Pulls rows [start, end) of `matrix` from every shard into `out` (row-major, `dim` wide).
async fn pull_block(
    shards: &mut [ShardHandle],
    fingerprint: u64,
    matrix: Matrix,
    start: u64,
    end: u64,
    dim: usize,
    out: &mut Vec<f32>,
) -> anyhow::Result<()> {
    let rows = (end - start) as usize;
    out.clear();
    out.resize(rows * dim, 0.0);
    for shard in shards.iter_mut() {
        let cols = (shard.col_end - shard.col_start) as usize;
        let c0 = shard.col_start as usize;
        let request = PullRowsRequest {
            model_fingerprint: fingerprint,
            matrix: matrix as i32,
            row_start: start,
            row_end: end,
        };
        let mut stream = shard
            .client
            .pull_rows(request)
            .await
            .with_context(|| {
                format!(
                    "shard {}: pull of rows [{start}, {end}) failed",
                    shard.endpoint
                )
            })?
            .into_inner();
        let mut received = 0u64;
        while let Some(block) = stream
            .message()
            .await
            .with_context(|| format!("shard {}: row stream broke", shard.endpoint))?
        {
            let values = decode_f32("values", &block.values)?;
            let n = block.rows as usize;
            if block.row_start != start + received || values.len() != n * cols {
                bail!(
                    "shard {}: malformed row block (start {}, {} rows, {} values for {cols} columns)",
                    shard.endpoint,
                    block.row_start,
                    n,
                    values.len()
                );
            }
            let base = (block.row_start - start) as usize;
            for r in 0..n {
                out[(base + r) * dim + c0..(base + r) * dim + c0 + cols]
                    .copy_from_slice(&values[r * cols..(r + 1) * cols]);
            }
            received += n as u64;
        }
        if received != end - start {
            bail!(
                "shard {}: sent {received} of {} rows",
                shard.endpoint,
                end - start
            );
        }
    }
    Ok(())
}

/// Pulls the model and writes every requested file.
pub async fn export(
    shards: &mut [ShardHandle],
    fingerprint: u64,
    vocab: &Vocab,
    dim: u32,
    opts: &ExportOptions,
) -> anyhow::Result<ExportSummary> {
    let v = vocab.len() as u64;
    let d = dim as usize;
    let mut h5 = opts
        .hdf5
        .as_ref()
        .map(|p| {
            Hdf5Writer::create(
                p,
                vocab,
                dim,
                opts.include_output,
                opts.compress,
                &opts.attributes,
            )
        })
        .transpose()?;
    let mut text = opts
        .text
        .as_ref()
        .map(|p| TextWriter::create(p, v, dim))
        .transpose()?;
    let mut binary = opts
        .binary
        .as_ref()
        .map(|p| BinaryWriter::create(p, v, dim))
        .transpose()?;
    let mut tsv = (opts.tsv_vectors.is_some() || opts.tsv_metadata.is_some())
        .then(|| ProjectorWriter::create(opts.tsv_vectors.as_deref(), opts.tsv_metadata.as_deref()))
        .transpose()?;
    let mut block = Vec::new();
    let mut start = 0;
    while start < v {
        let end = (start + BLOCK_ROWS).min(v);
        pull_block(
            shards,
            fingerprint,
            Matrix::Input,
            start,
            end,
            d,
            &mut block,
        )
        .await?;
        if let Some(w) = h5.as_mut() {
            tokio::task::block_in_place(|| w.write_input(start, &block))?;
        }
        for (i, row) in block.chunks_exact(d).enumerate() {
            let word = vocab.word((start + i as u64) as u32);
            if let Some(w) = text.as_mut() {
                w.write(word, row)?;
            }
            if let Some(w) = binary.as_mut() {
                w.write(word, row)?;
            }
            if let Some(w) = tsv.as_mut() {
                w.write(word, row)?;
            }
        }
        start = end;
    }
    if opts.include_output {
        if let Some(w) = h5.as_mut() {
            let mut start = 0;
            while start < v {
                let end = (start + BLOCK_ROWS).min(v);
                pull_block(
                    shards,
                    fingerprint,
                    Matrix::Output,
                    start,
                    end,
                    d,
                    &mut block,
                )
                .await?;
                tokio::task::block_in_place(|| w.write_output(start, &block))?;
                start = end;
            }
        }
    }
    let mut files = Vec::new();
    if let Some(w) = h5 {
        files.push(w.finish()?);
    }
    if let Some(w) = text {
        files.push(w.finish()?);
    }
    if let Some(w) = binary {
        files.push(w.finish()?);
    }
    if let Some(w) = tsv {
        files.extend(w.finish()?);
    }
    Ok(ExportSummary {
        rows: v,
        dim,
        files,
    })
}
