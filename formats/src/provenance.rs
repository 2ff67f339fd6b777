//! The record of where a vector file came from: what `colonnade train` and
//! `colonnade export` know about the model and the run. The HDF5 writer
//! stores each field as a root attribute of the same name (docs/formats.md
//! lists them): `u64` fields as uint64 scalars, `f64` fields as float64
//! scalars, strings (the fingerprints as 16 hex digits) as variable-length
//! UTF-8 scalars.

use serde::{Deserialize, Serialize};

/// Written by `train` and `export` alike: what the shards hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Version of the binary that wrote the file.
    pub colonnade_version: String,
    /// The model's id on the shards.
    #[serde(with = "hex16")]
    pub model_fingerprint: u64,
    /// Fingerprint of the vocabulary (as in the vocabulary file's header).
    #[serde(with = "hex16")]
    pub vocab_fingerprint: u64,
    /// Vector dimension D.
    pub dim: u64,
    /// Negative samples per context word.
    pub negative: u64,
    /// Seed of the initial vectors.
    pub init_seed: u64,
    /// Number of shards the model was split over.
    pub shards: u64,
    /// The training objective: `skip-gram` or `cbow` (absent, in files of
    /// releases without CBOW: skip-gram).
    #[serde(default = "skip_gram")]
    pub objective: String,
    /// The run that trained the model: known to `train` only.
    #[serde(flatten)]
    pub training: Option<Training>,
}

/// The training run, as `colonnade train` was configured and what it did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Training {
    /// Maximum skip length.
    pub window: u64,
    /// Minimum count when the corpus was counted.
    pub min_count: u64,
    /// Subsampling threshold.
    pub sample: f64,
    /// Starting learning rate.
    pub alpha: f64,
    /// Epochs.
    pub iter: u64,
    /// Input words per minibatch.
    pub minibatch: u64,
    /// Run seed.
    pub seed: u64,
    /// Exponent of the unigram distribution for negatives.
    pub sampling_power: f64,
    /// Corpus tokens read during training.
    pub train_words: u64,
    /// Training wall time.
    pub train_seconds: f64,
    /// `{"params": …, "corpus": [files], "summary": …}` as JSON text: the
    /// full training parameters and run summary.
    pub config_json: String,
    /// `complete`, or `interrupted` when training was stopped early (Ctrl-C)
    /// and the file holds the vectors trained until then (absent in files
    /// of earlier releases: complete).
    #[serde(default = "complete")]
    pub status: String,
    /// The fraction of the run's words trained: 1 when complete.
    #[serde(default = "whole")]
    pub progress: f64,
}

fn complete() -> String {
    "complete".into()
}

fn whole() -> f64 {
    1.0
}

fn skip_gram() -> String {
    "skip-gram".into()
}

/// A `u64` as exactly 16 lowercase hex digits.
mod hex16 {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{value:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = String::deserialize(d)?;
        u64::from_str_radix(&text, 16).map_err(D::Error::custom)
    }
}
