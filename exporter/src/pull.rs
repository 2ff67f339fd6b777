//! Pulling column slices from the shards, assembling rows and handing them
//! to the file writers of `colonnade-formats`.

use crate::checkpoints::LoadedSlice;
use crate::cli::OutputArgs;
use anyhow::{bail, Context};
use colonnade_common::model::{place_columns, Matrix, ModelSpec, ShardSpec};
use colonnade_common::vocab::Vocab;
use colonnade_formats::h5::Hdf5Writer;
use colonnade_formats::tsv::ProjectorWriter;
use colonnade_formats::word2vec::{Encoding, Word2vecWriter};
use colonnade_formats::Provenance;
use colonnade_proto::decode_f32_into;
use colonnade_proto::v1::{self, ModelStatus, PullRowsRequest, StatusRequest, StatusResponse};
use colonnade_setup::{Connector, ShardClient};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Rows assembled per step.
const BLOCK_ROWS: u64 = 16_384;

/// A connected shard and the columns it holds.
pub struct ShardHandle {
    pub endpoint: String,
    pub client: ShardClient,
    pub col_start: u32,
    pub col_end: u32,
}

#[derive(Debug)]
pub struct ExportSummary {
    pub rows: u64,
    pub dim: u32,
    pub files: Vec<PathBuf>,
}

/// The provenance of a model on shards: what `colonnade export` records,
/// and what `colonnade train` extends with its run.
pub fn model_provenance(spec: &ModelSpec, model_fingerprint: u64, shards: usize) -> Provenance {
    Provenance {
        colonnade_version: env!("CARGO_PKG_VERSION").into(),
        model_fingerprint,
        vocab_fingerprint: spec.vocab_fingerprint,
        dim: spec.dim.into(),
        negative: spec.negative.into(),
        init_seed: spec.init_seed,
        shards: shards as u64,
        objective: spec.objective.name().into(),
        training: None,
    }
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

/// Connects to the shard at `endpoint` and asks its status; errors name it.
pub async fn shard_status(
    connector: &Connector,
    endpoint: &str,
) -> anyhow::Result<(ShardClient, StatusResponse)> {
    let mut client = connector.connect(endpoint).await?;
    let status = client
        .status(StatusRequest {})
        .await
        .with_context(|| format!("shard {endpoint}: status failed"))?
        .into_inner();
    Ok((client, status))
}

/// Connects to `endpoints`, finds the one model they hold together (or the one
/// with `fingerprint`), and checks that their column ranges tile [0, dim).
pub async fn discover(
    connector: &Connector,
    endpoints: &[String],
    fingerprint: Option<u64>,
) -> anyhow::Result<(Vec<ShardHandle>, ModelSpec, u64)> {
    let wanted = match fingerprint {
        Some(f) => Wanted::Model(f),
        None => Wanted::Only,
    };
    discover_model(connector, endpoints, wanted).await
}

/// Which model [`discover_model`] looks for on every shard.
#[derive(Clone, Copy, Debug)]
pub enum Wanted {
    /// The only model the shards hold.
    Only,
    /// The model with this fingerprint (`--fingerprint`).
    Model(u64),
    /// The one model trained with this vocabulary: its fingerprint and
    /// word count (`export --vocab` without `--fingerprint`).
    Vocab { fingerprint: u64, words: u64 },
}

impl Wanted {
    fn matches(self, m: &ModelStatus) -> bool {
        match self {
            Wanted::Only => true,
            Wanted::Model(f) => m.model_fingerprint == f,
            Wanted::Vocab { fingerprint, words } => m
                .spec
                .as_ref()
                .is_some_and(|s| s.vocab_fingerprint == fingerprint && s.vocab_size == words),
        }
    }
}

/// [`discover`], looking for the model `wanted` names: fails naming the
/// shard, and listing its models, when it holds none or several.
pub async fn discover_model(
    connector: &Connector,
    endpoints: &[String],
    wanted: Wanted,
) -> anyhow::Result<(Vec<ShardHandle>, ModelSpec, u64)> {
    let mut shards = Vec::new();
    let mut model: Option<(ModelSpec, u64)> = None;
    for endpoint in endpoints {
        let (client, status) = shard_status(connector, endpoint).await?;
        let candidates: Vec<_> = status.models.iter().filter(|m| wanted.matches(m)).collect();
        let all = || list_models(&status.models.iter().collect::<Vec<_>>());
        let m = match (candidates.as_slice(), wanted) {
            ([one], _) => *one,
            ([], Wanted::Only) => bail!("shard {endpoint} holds no model"),
            ([], Wanted::Model(f)) if status.models.is_empty() => {
                bail!("shard {endpoint} holds no model (looking for --fingerprint {f:016x})")
            }
            ([], Wanted::Vocab { fingerprint, words }) if status.models.is_empty() => bail!(
                "shard {endpoint} holds no model (looking for one trained with --vocab's \
                 vocabulary {fingerprint:016x}, {words} words)"
            ),
            ([], Wanted::Model(f)) => bail!(
                "shard {endpoint} holds no model with --fingerprint {f:016x}; it holds:{}",
                all()
            ),
            ([], Wanted::Vocab { fingerprint, words }) => bail!(
                "shard {endpoint} holds no model trained with --vocab's vocabulary \
                 ({fingerprint:016x}, {words} words); it holds:{}",
                all()
            ),
            (several, Wanted::Vocab { fingerprint, .. }) => bail!(
                "shard {endpoint} holds {} models trained with --vocab's vocabulary \
                 ({fingerprint:016x}):{}\npick one with --fingerprint HEX, or drop the ones no \
                 longer needed with `colonnade models drop --shards {} --fingerprint HEX`",
                several.len(),
                list_models(several),
                endpoints.join(",")
            ),
            (several, _) => bail!(
                "shard {endpoint} holds {} models:{}\npick one with --fingerprint HEX, or drop \
                 the ones no longer needed with `colonnade models drop --shards {} --fingerprint HEX`",
                several.len(),
                list_models(several),
                endpoints.join(",")
            ),
        };
        if !m.diverged.is_empty() {
            bail!(
                "shard {endpoint}: model {:016x}: training diverged on it ({}): its vectors \
                 are not usable. Roll it back with the same `colonnade train` command and \
                 --rollback (to the newest checkpoint every shard holds) or --restart, then \
                 train and export again",
                m.model_fingerprint,
                m.diverged
            );
        }
        let spec = m
            .spec
            .as_ref()
            .map(ShardSpec::from)
            .with_context(|| format!("shard {endpoint}: status has no spec"))?;
        let this = spec.model.clone();
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

/// Where an export reads rows from.
pub enum Source<'a> {
    /// Running shards, pulled block by block.
    Shards(&'a mut [ShardHandle]),
    /// Slices loaded from checkpoint files, in column order.
    Slices(&'a [LoadedSlice]),
}

impl Source<'_> {
    /// Rows [start, end) of `matrix`, full width, into `out`.
    async fn block(
        &mut self,
        fingerprint: u64,
        matrix: Matrix,
        start: u64,
        end: u64,
        dim: usize,
        out: &mut Vec<f32>,
    ) -> anyhow::Result<()> {
        match self {
            // Each shard's columns of the rows, placed into full rows.
            Source::Shards(shards) => {
                let rows = (end - start) as usize;
                out.clear();
                out.resize(rows * dim, 0.0);
                for shard in shards.iter_mut() {
                    pull_retrying(shard, fingerprint, matrix, start, end, dim, out).await?;
                }
                Ok(())
            }
            Source::Slices(slices) => {
                out.clear();
                out.resize((end - start) as usize * dim, 0.0);
                for s in slices.iter() {
                    let cols = (s.cols.end - s.cols.start) as usize;
                    let m = if matrix == Matrix::Input { &s.u } else { &s.v };
                    let part = &m[start as usize * cols..end as usize * cols];
                    place_columns(out, dim, s.cols.clone(), part);
                }
                Ok(())
            }
        }
    }
}

/// How long a pull refused for the shard's stream limit (RESOURCE_EXHAUSTED:
/// other exporters' streams are open) is tried again before the export
/// fails.
pub const PULL_RETRY: Duration = Duration::from_secs(60);

/// Pulls `shard`'s columns of rows [start, end) into the full rows `out`;
/// while the shard refuses for its open-stream limit, backs off and tries
/// again, up to [`PULL_RETRY`]. A diverged model is refused with what to do.
async fn pull_retrying(
    shard: &mut ShardHandle,
    fingerprint: u64,
    matrix: Matrix,
    start: u64,
    end: u64,
    dim: usize,
    out: &mut [f32],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + PULL_RETRY;
    let mut backoff = Duration::from_millis(100);
    loop {
        let status = match pull_once(shard, fingerprint, matrix, start, end, dim, out).await {
            Ok(()) => return Ok(()),
            Err(Pulled::Failed(e)) => return Err(e),
            Err(Pulled::Status(s)) => s,
        };
        let what = format!(
            "shard {}: pull of rows [{start}, {end}) failed: {}: {}",
            shard.endpoint,
            status.code(),
            colonnade_proto::shards::status_cause(&status)
        );
        if status.code() == tonic::Code::FailedPrecondition
            && status
                .message()
                .starts_with(colonnade_proto::DIVERGED_PREFIX)
        {
            bail!(
                "{what}\nmodel {fingerprint:016x} diverged while training: its vectors are not \
                 usable. Roll it back with `colonnade train ... --rollback` (to the newest \
                 checkpoint every shard holds) or --restart, then train and export again"
            );
        }
        if status.code() != tonic::Code::ResourceExhausted {
            bail!("{what}");
        }
        if Instant::now() + backoff > deadline {
            bail!(
                "{what}\nthe shard kept refusing for {PULL_RETRY:?}: other exports are \
                 reading from it (or left streams unread); try again when they are done"
            );
        }
        tracing::warn!(shard = %shard.endpoint, retry_in_ms = backoff.as_millis() as u64, "the shard has too many row streams open; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// How one pull failed: a status the shard answered (which may be retried
/// or explained), or anything else.
enum Pulled {
    Status(tonic::Status),
    Failed(anyhow::Error),
}

/// One attempt of [`pull_retrying`].
async fn pull_once(
    shard: &mut ShardHandle,
    fingerprint: u64,
    matrix: Matrix,
    start: u64,
    end: u64,
    dim: usize,
    out: &mut [f32],
) -> Result<(), Pulled> {
    let cols = (shard.col_end - shard.col_start) as usize;
    let request = PullRowsRequest {
        model_fingerprint: fingerprint,
        matrix: v1::Matrix::from(matrix) as i32,
        row_start: start,
        row_end: end,
    };
    let mut stream = shard
        .client
        .pull_rows(request)
        .await
        .map_err(Pulled::Status)?
        .into_inner();
    let mut received = 0u64;
    let mut values = Vec::new();
    while let Some(block) = stream.message().await.map_err(Pulled::Status)? {
        decode_f32_into("values", &block.values, &mut values)
            .map_err(|e| Pulled::Failed(e.into()))?;
        let n = block.rows as usize;
        if block.row_start != start + received
            || received + n as u64 > end - start
            || values.len() != n * cols
        {
            return Err(Pulled::Failed(anyhow::anyhow!(
                "shard {}: malformed row block (start {}, {} rows, {} values for {cols} columns)",
                shard.endpoint,
                block.row_start,
                n,
                values.len()
            )));
        }
        let base = (block.row_start - start) as usize;
        place_columns(
            &mut out[base * dim..(base + n) * dim],
            dim,
            shard.col_start..shard.col_end,
            &values,
        );
        received += n as u64;
    }
    if received != end - start {
        return Err(Pulled::Failed(anyhow::anyhow!(
            "shard {}: sent {received} of {} rows",
            shard.endpoint,
            end - start
        )));
    }
    Ok(())
}

/// Reads the model from `source` block by block and writes every file `out`
/// asks for; an HDF5 file gets `provenance` as its attributes.
pub async fn export(
    mut source: Source<'_>,
    fingerprint: u64,
    vocab: &Vocab,
    dim: u32,
    out: &OutputArgs,
    provenance: &Provenance,
) -> anyhow::Result<ExportSummary> {
    let v = vocab.len() as u64;
    let d = dim as usize;
    let mut h5 = out
        .output
        .as_ref()
        .map(|p| {
            Hdf5Writer::create(
                p,
                vocab.counts(),
                dim,
                out.output_vectors,
                out.hdf5_compress,
                provenance,
            )
        })
        .transpose()?;
    let mut text = out
        .output_text
        .as_ref()
        .map(|p| Word2vecWriter::create(p, Encoding::Text, v, dim))
        .transpose()?;
    let mut binary = out
        .output_binary
        .as_ref()
        .map(|p| Word2vecWriter::create(p, Encoding::Binary, v, dim))
        .transpose()?;
    let tsv_vectors = out.output_tsv_vectors.as_deref();
    let tsv_metadata = out.output_tsv_metadata.as_deref();
    let mut tsv = (tsv_vectors.is_some() || tsv_metadata.is_some())
        .then(|| ProjectorWriter::create(tsv_vectors, tsv_metadata))
        .transpose()?;
    let mut block = Vec::new();
    let mut start = 0;
    while start < v {
        let end = (start + BLOCK_ROWS).min(v);
        source
            .block(fingerprint, Matrix::Input, start, end, d, &mut block)
            .await?;
        if let Some(w) = h5.as_mut() {
            tokio::task::block_in_place(|| {
                w.write_words((start as u32..end as u32).map(|i| vocab.word(i)))?;
                w.write_input(start, &block)
            })?;
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
    if out.output_vectors {
        if let Some(w) = h5.as_mut() {
            let mut start = 0;
            while start < v {
                let end = (start + BLOCK_ROWS).min(v);
                source
                    .block(fingerprint, Matrix::Output, start, end, d, &mut block)
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
