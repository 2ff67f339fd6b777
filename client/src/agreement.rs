//! What the shards' statuses of a model say, for [`crate::cluster::Cluster::reconcile`]:
//! the newest checkpoint version all of them hold, a worker's position in
//! that version's manifest, the lineage a restore gives, and a description
//! of a disagreement. Pure functions of the statuses: no calls.

use crate::cluster::Worker;
use crate::grpc::GrpcShard;
use crate::identity::RunRecord;
use crate::train::Position;
use anyhow::{bail, Context};
use colonnade_proto::v1::ModelStatus;
use std::collections::BTreeSet;

/// This worker's position in the manifest of `version` (0: the start),
/// whether its part was finished there, and the run it recorded.
pub(crate) fn position_in(
    models: &[&ModelStatus],
    version: u64,
    worker: Worker,
) -> anyhow::Result<(Position, bool, Option<RunRecord>)> {
    if version == 0 {
        return Ok((Position::default(), false, None));
    }
    let manifest = models
        .iter()
        .flat_map(|m| &m.checkpoints)
        .find(|c| c.version == version)
        .map(|c| c.manifest.clone())
        .context("no shard returned the manifest of the common version")?;
    let m: Manifest = serde_json::from_slice(&manifest)
        .with_context(|| format!("the manifest of checkpoint version {version} is not readable"))?;
    if m.num_workers != worker.count {
        bail!(
            "checkpoint version {version} was taken with --num-workers {}, this worker has {}: \
             give the same, or --restart",
            m.num_workers,
            worker.count
        );
    }
    let w = m
        .workers
        .iter()
        .find(|w| w.worker == worker.index)
        .with_context(|| {
            format!(
                "checkpoint version {version} has no position of worker {}",
                worker.index
            )
        })?;
    let position = if w.position.is_null() {
        Position::default()
    } else {
        serde_json::from_value(w.position.clone()).with_context(|| {
            format!(
                "the position of worker {} in checkpoint {version}",
                worker.index
            )
        })?
    };
    // Manifests of releases before the record have none; one unreadable is
    // treated the same (the position above was readable).
    let record = w
        .position
        .get("run")
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    Ok((position, w.finished, record))
}

/// The manifest a shard writes with every checkpoint version.
#[derive(serde::Deserialize)]
struct Manifest {
    num_workers: u64,
    workers: Vec<ManifestWorker>,
}

#[derive(serde::Deserialize)]
struct ManifestWorker {
    worker: u64,
    finished: bool,
    #[serde(default)]
    position: serde_json::Value,
}

/// The newest checkpoint version every shard holds (0 if none).
pub(crate) fn common_version(models: &[&ModelStatus]) -> u64 {
    let mut sets = models.iter().map(|m| {
        m.checkpoints
            .iter()
            .map(|c| c.version)
            .collect::<BTreeSet<u64>>()
    });
    let Some(first) = sets.next() else {
        return 0;
    };
    sets.fold(first, |a, b| a.intersection(&b).copied().collect())
        .into_iter()
        .next_back()
        .unwrap_or(0)
}

/// The lineage a restore to `version` from `lineages` gives: the same for
/// every worker that reconciles the same disagreement, so concurrent
/// reconcilers converge instead of restoring each other's restores.
pub(crate) fn next_lineage(fingerprint: u64, version: u64, lineages: &BTreeSet<u64>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&fingerprint.to_le_bytes());
    h.update(&version.to_le_bytes());
    for l in lineages {
        h.update(&l.to_le_bytes());
    }
    h.digest().max(1)
}

pub(crate) fn describe(shards: &[GrpcShard], models: &[&ModelStatus]) -> String {
    shards
        .iter()
        .zip(models)
        .map(|(s, m)| {
            format!(
                "{}: lineage {:016x} from version {}, {} adjusts since, versions {:?}",
                s.endpoint,
                m.lineage,
                m.base_version,
                m.adjusts_since_base,
                m.checkpoints.iter().map(|c| c.version).collect::<Vec<_>>()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
