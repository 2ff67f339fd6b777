//! `colonnade models`: list the models running shards hold, and drop the ones
//! no longer needed. A long-running shard keeps every model a client created
//! on it (each size, seed or vocabulary adds one) until it is dropped. A drop
//! frees the memory and keeps the model's checkpoints on the shards' disks
//! unless asked to delete them: a shard restarted does not load a dropped
//! model, and training it again resumes from its newest checkpoint.

use crate::grpc::same_api;
use crate::preflight::human_bytes;
use anyhow::{bail, Context};
use colonnade_common::model::ShardSpec;
use colonnade_exporter::{describe_model, parse_fingerprint};
use colonnade_proto::v1::{DropModelRequest, ModelStatus, StatusResponse};
use colonnade_setup::{Connector, ShardClient};
use serde::Serialize;
use std::fmt::Write as _;

/// List or drop the models held by running shards.
#[derive(clap::Args, Debug)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelsCommand {
    /// Every model each shard holds: fingerprint, vocabulary, dimension, its
    /// columns, seed, memory and call counts.
    List(ListArgs),
    /// Drop one model from every listed shard, freeing its memory; its
    /// checkpoints stay on the shards' disks unless --delete-checkpoints.
    Drop(DropArgs),
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Shard endpoints, comma-separated host:port.
    #[arg(long, env = "COLONNADE_SHARDS", value_delimiter = ',', required = true)]
    pub shards: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long, env = "COLONNADE_JSON")]
    pub json: bool,
    #[command(flatten, next_help_heading = "Connecting to shards")]
    pub connect: crate::cli::ConnectArgs,
}

#[derive(clap::Args, Debug)]
pub struct DropArgs {
    /// Shard endpoints, comma-separated host:port: the model is dropped from each.
    #[arg(long, env = "COLONNADE_SHARDS", value_delimiter = ',', required = true)]
    pub shards: Vec<String>,
    /// The model to drop (hex, as `colonnade models list` prints it).
    #[arg(long, env = "COLONNADE_FINGERPRINT")]
    pub fingerprint: String,
    /// Also delete the model's files (spec, counts, checkpoints) from each
    /// shard's --data-dir, also those of a model dropped earlier with its
    /// files kept. Without it they stay: a shard restarted does not load the
    /// model, and training the same model on the same shards resumes from its
    /// newest checkpoint.
    #[arg(long, env = "COLONNADE_DELETE_CHECKPOINTS")]
    pub delete_checkpoints: bool,
    #[command(flatten, next_help_heading = "Connecting to shards")]
    pub connect: crate::cli::ConnectArgs,
}

/// One model on one shard, as `models list --json` prints it.
#[derive(Debug, Serialize)]
pub struct ModelInfo {
    pub fingerprint: String,
    pub vocab_size: u64,
    pub vocab_fingerprint: String,
    pub dim: u32,
    pub col_start: u32,
    pub col_end: u32,
    pub negative: u32,
    pub sampling_power: f32,
    pub init_seed: u64,
    /// `skip-gram` or `cbow`.
    pub objective: &'static str,
    pub memory_bytes: u64,
    pub dotprod_calls: u64,
    pub adjust_calls: u64,
    pub pairs_adjusted: u64,
    /// The state's lineage (0: as created) and the checkpoint it started from.
    pub lineage: String,
    pub base_version: u64,
    /// Checkpoint versions on this shard's disk.
    pub checkpoints: Vec<u64>,
    pub checkpoint_error: String,
    /// Why the shard marked the model diverged (empty: it did not); it
    /// refuses training calls until a rollback or restart.
    pub diverged: String,
}

#[derive(Debug, Serialize)]
pub struct ShardModels {
    pub endpoint: String,
    pub version: String,
    pub api_version: u32,
    pub persistent: bool,
    pub models: Vec<ModelInfo>,
}

impl From<&ModelStatus> for ModelInfo {
    fn from(m: &ModelStatus) -> Self {
        let shard = ShardSpec::from(&m.spec.unwrap_or_default());
        let spec = &shard.model;
        Self {
            fingerprint: format!("{:016x}", m.model_fingerprint),
            vocab_size: spec.vocab_size,
            vocab_fingerprint: format!("{:016x}", spec.vocab_fingerprint),
            dim: spec.dim,
            col_start: shard.col_start,
            col_end: shard.col_end,
            negative: spec.negative,
            sampling_power: spec.sampling_power,
            init_seed: spec.init_seed,
            objective: spec.objective.name(),
            memory_bytes: m.memory_bytes,
            dotprod_calls: m.dotprod_calls,
            adjust_calls: m.adjust_calls,
            pairs_adjusted: m.pairs_adjusted,
            lineage: format!("{:016x}", m.lineage),
            base_version: m.base_version,
            checkpoints: m.checkpoints.iter().map(|c| c.version).collect(),
            checkpoint_error: m.checkpoint_error.clone(),
            diverged: m.diverged.clone(),
        }
    }
}

pub async fn run(args: ModelsArgs) -> anyhow::Result<()> {
    match args.command {
        ModelsCommand::List(a) => list(&a, &a.connect.connector()?).await,
        ModelsCommand::Drop(a) => drop_model(&a, &a.connect.connector()?).await,
    }
}

/// Connects to every shard and asks its status; errors name the shard.
async fn statuses(
    connector: &Connector,
    endpoints: &[String],
) -> anyhow::Result<Vec<(ShardClient, StatusResponse)>> {
    if endpoints.is_empty() {
        bail!("give --shards host:port,...");
    }
    let mut out = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        out.push(colonnade_exporter::shard_status(connector, endpoint).await?);
    }
    Ok(out)
}

async fn list(args: &ListArgs, connector: &Connector) -> anyhow::Result<()> {
    let shards = shard_models(connector, &args.shards).await?;
    if args.json {
        let json = serde_json::to_string_pretty(&serde_json::json!({ "shards": shards }))
            .context("JSON output")?;
        println!("{json}");
    } else {
        print!("{}", table(&shards));
    }
    Ok(())
}

/// Every model each of `endpoints` holds (what `models list` prints);
/// errors name the shard.
pub async fn shard_models(
    connector: &Connector,
    endpoints: &[String],
) -> anyhow::Result<Vec<ShardModels>> {
    Ok(statuses(connector, endpoints)
        .await?
        .into_iter()
        .zip(endpoints)
        .map(|((_, s), endpoint)| ShardModels {
            endpoint: endpoint.clone(),
            version: s.version,
            api_version: s.api_version,
            persistent: s.persistent,
            models: s.models.iter().map(ModelInfo::from).collect(),
        })
        .collect())
}

/// The human-readable listing: one block per shard, one row per model.
pub fn table(shards: &[ShardModels]) -> String {
    let mut s = String::new();
    for shard in shards {
        let _ = writeln!(
            s,
            "shard {} (ps-shard {}, API v{}): {} model{}",
            shard.endpoint,
            shard.version,
            shard.api_version,
            shard.models.len(),
            if shard.models.len() == 1 { "" } else { "s" }
        );
        if shard.models.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "  {:<16}  {:>10}  {:>5}  {:>11}  {:>8}  {:>10}  {:<16}  {:>12}  {:>10}  {:>10}  {:>14}",
            "fingerprint",
            "vocab",
            "dim",
            "columns",
            "negative",
            "init_seed",
            "vocab_fp",
            "memory",
            "dotprods",
            "adjusts",
            "pairs"
        );
        for m in &shard.models {
            let _ = writeln!(
                s,
                "  {:<16}  {:>10}  {:>5}  {:>11}  {:>8}  {:>10}  {:<16}  {:>12}  {:>10}  {:>10}  {:>14}",
                m.fingerprint,
                m.vocab_size,
                m.dim,
                format!("[{}, {})", m.col_start, m.col_end),
                m.negative,
                m.init_seed,
                m.vocab_fingerprint,
                human_bytes(m.memory_bytes),
                m.dotprod_calls,
                m.adjust_calls,
                m.pairs_adjusted
            );
            if !m.diverged.is_empty() {
                let _ = writeln!(
                    s,
                    "    DIVERGED: {} (training refused until `train --rollback` or `--restart`)",
                    m.diverged
                );
            }
        }
    }
    s
}

async fn drop_model(args: &DropArgs, connector: &Connector) -> anyhow::Result<()> {
    let fingerprint = parse_fingerprint("--fingerprint", &args.fingerprint)?;
    // Every shard is asked first, so an unknown fingerprint or an unreachable
    // shard stops before anything is dropped.
    let shards = statuses(connector, &args.shards).await?;
    // A shard of API 7 deletes the files a drop is now told to keep.
    for ((_, s), endpoint) in shards.iter().zip(&args.shards) {
        same_api(endpoint, s)?;
    }
    let holds = |s: &StatusResponse| s.models.iter().any(|m| m.model_fingerprint == fingerprint);
    let listing = |shards: &[(ShardClient, StatusResponse)]| {
        let mut held = String::new();
        for ((_, s), endpoint) in shards.iter().zip(&args.shards) {
            if s.models.is_empty() {
                let _ = write!(held, "\n  shard {endpoint}: no models");
            }
            for m in &s.models {
                let _ = write!(held, "\n  shard {endpoint}: {}", describe_model(m));
            }
        }
        held
    };
    // The files of a model dropped earlier are on disk only, where a status
    // does not list them: deleting them asks every shard.
    if !args.delete_checkpoints && !shards.iter().any(|(_, s)| holds(s)) {
        bail!(
            "no shard holds a model with --fingerprint {fingerprint:016x}; the shards hold:{}",
            listing(&shards)
        );
    }
    let held_before = listing(&shards);
    let mut dropped = Vec::new();
    let mut absent = Vec::new();
    let mut deleted = Vec::new();
    let mut kept = Vec::new();
    for ((mut client, _), endpoint) in shards.into_iter().zip(&args.shards) {
        let resp = client
            .drop_model(DropModelRequest {
                model_fingerprint: fingerprint,
                delete_checkpoints: args.delete_checkpoints,
            })
            .await
            .with_context(|| {
                format!(
                    "shard {endpoint}: dropping model {fingerprint:016x} failed{}",
                    if dropped.is_empty() {
                        String::new()
                    } else {
                        format!(" (already dropped from {})", dropped.join(", "))
                    }
                )
            })?
            .into_inner();
        if resp.dropped {
            dropped.push(endpoint.clone());
        } else {
            absent.push(endpoint.clone());
        }
        if resp.checkpoints_deleted {
            deleted.push(format!("{endpoint} ({})", resp.model_dir));
        } else if !resp.model_dir.is_empty() && (resp.dropped || !resp.checkpoints_kept.is_empty())
        {
            let versions = match resp.checkpoints_kept.as_slice() {
                [] => "no checkpoint yet".to_string(),
                v => format!(
                    "version{} {}",
                    if v.len() == 1 { "" } else { "s" },
                    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                ),
            };
            kept.push(format!("{endpoint}: {versions} in {}", resp.model_dir));
        }
    }
    if dropped.is_empty() && deleted.is_empty() {
        bail!(
            "no shard holds a model with --fingerprint {fingerprint:016x}, in memory or in its \
             data dir; the shards hold:{held_before}"
        );
    }
    if !dropped.is_empty() {
        println!(
            "dropped model {fingerprint:016x} from {}",
            dropped.join(", ")
        );
    }
    if !deleted.is_empty() {
        println!(
            "deleted the files of model {fingerprint:016x} from the data dirs of {}",
            deleted.join(", ")
        );
    }
    if !kept.is_empty() {
        println!(
            "its checkpoints stay on disk ({}): a shard restarted does not load the model, \
             training it again on these shards resumes from them, and `colonnade models drop \
             --shards {} --fingerprint {fingerprint:016x} --delete-checkpoints` deletes them",
            kept.join("; "),
            args.shards.join(",")
        );
    }
    // Held by no shard (files only): the deletion says it all.
    if !absent.is_empty() && !dropped.is_empty() {
        println!("not held by {}", absent.join(", "));
    }
    Ok(())
}
