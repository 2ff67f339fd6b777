//! A model read from shards' checkpoint directories (`ps-shard --data-dir`),
//! with no shard running: `colonnade export --checkpoint DIR...`.

use anyhow::{bail, Context};
use colonnade_checkpoint::{CheckpointReader, ModelDir};
use colonnade_common::model::Matrix;
use colonnade_common::model::ModelSpec;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One shard's column slice of both matrices, loaded whole.
pub struct LoadedSlice {
    pub cols: Range<u32>,
    pub u: Vec<f32>,
    pub v: Vec<f32>,
}

/// The model found in checkpoint directories, at one version.
pub struct CheckpointModel {
    pub spec: ModelSpec,
    pub fingerprint: u64,
    pub version: u64,
    /// In column order, tiling [0, dim).
    pub slices: Vec<LoadedSlice>,
}

/// The model directory `dir` names: `dir` itself when it holds a model.bin,
/// else the one model under it (or the one with `fingerprint`).
fn model_dir(dir: &Path, fingerprint: Option<u64>) -> anyhow::Result<ModelDir> {
    if dir.join("model.bin").is_file() {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let fp = u64::from_str_radix(&name, 16).with_context(|| {
            format!(
                "{}: a model directory is named by its fingerprint (16 hex digits)",
                dir.display()
            )
        })?;
        let parent = dir.parent().unwrap_or_else(|| Path::new("."));
        return Ok(ModelDir::new(parent, fp));
    }
    let all = ModelDir::list(dir).with_context(|| format!("--checkpoint {}", dir.display()))?;
    let found: Vec<_> = all
        .iter()
        .filter(|m| fingerprint.is_none_or(|f| f == m.fingerprint()))
        .collect();
    let names = || {
        all.iter()
            .map(|m| format!("{:016x}", m.fingerprint()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] if all.is_empty() => bail!(
            "--checkpoint {}: holds no model (no <fingerprint>/model.bin under it)",
            dir.display()
        ),
        [] => bail!(
            "--checkpoint {}: holds no model {:016x}; it holds: {}",
            dir.display(),
            fingerprint.unwrap_or(0),
            names()
        ),
        _ => bail!(
            "--checkpoint {}: holds several models ({}); pick one with --fingerprint",
            dir.display(),
            names()
        ),
    }
}

/// Loads one version of every slice; fails naming the file that is not
/// readable or does not belong with the others.
fn load_version(dirs: &[ModelDir], version: u64) -> anyhow::Result<(Vec<LoadedSlice>, ModelSpec)> {
    let mut slices = Vec::with_capacity(dirs.len());
    let mut first: Option<(PathBuf, u64, serde_json::Value, ModelSpec)> = None;
    for d in dirs {
        let path = d.checkpoint_path(version);
        let reader = CheckpointReader::open(&path)?;
        let h = reader.header().clone();
        let spec = h.spec.model.clone();
        if h.model_fingerprint != d.fingerprint() {
            bail!(
                "{}: holds model {:016x}, its directory says {:016x}",
                path.display(),
                h.model_fingerprint,
                d.fingerprint()
            );
        }
        match &first {
            None => first = Some((path.clone(), h.lineage, h.manifest.clone(), spec.clone())),
            Some((p0, lineage, manifest, spec0)) => {
                if h.lineage != *lineage || h.manifest != *manifest || spec != *spec0 {
                    bail!(
                        "{} and {} are version {version} of different runs (lineage, manifest or spec differ)",
                        p0.display(),
                        path.display()
                    );
                }
            }
        }
        let cols = h.spec.columns();
        let (mut u, mut v) = (Vec::new(), Vec::new());
        reader.read_matrices(|which, _, values| match which {
            Matrix::Input => u.extend_from_slice(values),
            Matrix::Output => v.extend_from_slice(values),
        })?;
        slices.push(LoadedSlice { cols, u, v });
    }
    let spec = first.map(|f| f.3).context("no checkpoint directories")?;
    Ok((slices, spec))
}

/// Finds the model in `dirs` (one per shard) and loads the newest version
/// every one of them holds readable; a version unreadable in one dir falls
/// back to the previous common one, with a warning naming the file. Needs
/// the model's size in memory (both matrices of every slice).
pub fn load(dirs: &[PathBuf], fingerprint: Option<u64>) -> anyhow::Result<CheckpointModel> {
    if dirs.is_empty() {
        bail!("--checkpoint: give at least one directory");
    }
    let models = dirs
        .iter()
        .map(|d| model_dir(d, fingerprint))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let fp = models[0].fingerprint();
    if let Some(other) = models.iter().find(|m| m.fingerprint() != fp) {
        bail!(
            "{} holds model {:016x}, {} holds {fp:016x}",
            other.path().display(),
            other.fingerprint(),
            models[0].path().display()
        );
    }
    let mut common: Option<Vec<u64>> = None;
    for m in &models {
        let v = m.versions()?;
        common = Some(match common {
            None => v,
            Some(c) => c.into_iter().filter(|x| v.contains(x)).collect(),
        });
    }
    let common = common.unwrap_or_default();
    if common.is_empty() {
        bail!(
            "the directories hold no checkpoint version in common ({}): was a checkpoint taken (colonnade train --checkpoint-interval)?",
            models.iter().map(|m| format!("{}: {:?}", m.path().display(), m.versions().unwrap_or_default())).collect::<Vec<_>>().join("; ")
        );
    }
    let mut last_error = None;
    for &version in common.iter().rev() {
        match load_version(&models, version) {
            Ok((mut slices, spec)) => {
                slices.sort_by_key(|s| s.cols.start);
                let mut next = 0;
                for (s, m) in slices.iter().zip(&models) {
                    if s.cols.start != next {
                        bail!(
                            "the checkpoints cover columns up to {next}, then from {} ({}): give every shard's directory, once",
                            s.cols.start,
                            m.path().display()
                        );
                    }
                    next = s.cols.end;
                }
                if next != spec.dim {
                    bail!("the checkpoints cover columns [0, {next}) of dimension {}: a shard's directory is missing", spec.dim);
                }
                return Ok(CheckpointModel {
                    spec,
                    fingerprint: fp,
                    version,
                    slices,
                });
            }
            Err(e) => {
                tracing::warn!(version, error = %format!("{e:#}"), "checkpoint version not readable; trying the previous one");
                last_error = Some(e);
            }
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no readable checkpoint version")))
}
