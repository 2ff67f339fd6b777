//! The model's identity, defined once for every crate: what it trains
//! ([`Objective`]), its spec and fingerprint ([`ModelSpec`]), one shard's
//! part of it ([`ShardSpec`]), its two matrices ([`Matrix`]) and how its
//! columns are split among shards. The wire, the checkpoint files and the
//! provenance of exported files convert to and from these types at their
//! edges.

use serde::{Deserialize, Serialize};
use std::ops::Range;
use xxhash_rust::xxh3::Xxh3;

/// What a model trains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Objective {
    /// Skip-gram: each (input word, context word) pair is one example.
    #[default]
    SkipGram,
    /// CBOW (word2vec's `-cbow 1`, gensim's `sg=0, cbow_mean=1`): the mean
    /// of a position's context words' input vectors predicts its word.
    Cbow,
}

impl Objective {
    /// CBOW when `cbow`, else skip-gram (the wire's and the files' flag).
    pub fn from_cbow(cbow: bool) -> Self {
        if cbow {
            Self::Cbow
        } else {
            Self::SkipGram
        }
    }

    pub fn is_cbow(self) -> bool {
        self == Self::Cbow
    }

    /// Its name in messages and file attributes: `skip-gram` or `cbow`.
    pub fn name(self) -> &'static str {
        match self {
            Self::SkipGram => "skip-gram",
            Self::Cbow => "cbow",
        }
    }
}

impl std::fmt::Display for Objective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Serialized as the boolean `cbow` (absent: skip-gram), as the checkpoint
/// files store it.
mod objective_as_cbow {
    use super::Objective;

    pub fn serialize<S: serde::Serializer>(o: &Objective, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(o.is_cbow())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Objective, D::Error> {
        <bool as serde::Deserialize>::deserialize(d).map(Objective::from_cbow)
    }
}

/// Which of a model's two matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matrix {
    /// The input vectors u(w): the embeddings users get.
    Input,
    /// The output vectors v(w).
    Output,
}

/// Everything that defines a model's parameters, independent of how it is sharded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// [`crate::vocab::Vocab::fingerprint`] of the vocabulary.
    pub vocab_fingerprint: u64,
    pub vocab_size: u64,
    /// Full vector dimension d.
    pub dim: u32,
    /// Negative samples per (input, output) pair.
    pub negative: u32,
    /// Exponent of the unigram distribution for negatives (word2vec: 0.75).
    pub sampling_power: f32,
    /// Seed of the initial input vectors.
    pub init_seed: u64,
    /// What it trains (in the fingerprint when CBOW).
    #[serde(rename = "cbow", with = "objective_as_cbow", default)]
    pub objective: Objective,
}

impl ModelSpec {
    /// The fingerprint every training request carries. It covers the vocabulary,
    /// the counts that define the sampler (through the vocabulary fingerprint),
    /// the dimension, the negatives, the sampling power, the init seed and the
    /// objective (CBOW only, so that a skip-gram model keeps the fingerprint
    /// of files and data dirs written by releases without CBOW), and not the
    /// column split, so every shard of one model holds the same value.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Xxh3::new();
        h.update(b"colonnade-model-v1");
        h.update(&self.vocab_fingerprint.to_le_bytes());
        h.update(&self.vocab_size.to_le_bytes());
        h.update(&self.dim.to_le_bytes());
        h.update(&self.negative.to_le_bytes());
        h.update(&self.sampling_power.to_bits().to_le_bytes());
        h.update(&self.init_seed.to_le_bytes());
        if self.objective.is_cbow() {
            h.update(b"cbow");
        }
        h.digest()
    }
}

/// A model spec plus one shard's column range [col_start, col_end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardSpec {
    #[serde(flatten)]
    pub model: ModelSpec,
    pub col_start: u32,
    pub col_end: u32,
}

impl ShardSpec {
    /// Shard `index` of `shards` of `model`: its [`column_range`].
    pub fn of(model: &ModelSpec, shards: u32, index: u32) -> Self {
        let cols = column_range(model.dim, shards, index);
        Self {
            model: model.clone(),
            col_start: cols.start,
            col_end: cols.end,
        }
    }

    /// Its number of columns.
    pub fn cols(&self) -> usize {
        self.col_end.saturating_sub(self.col_start) as usize
    }

    /// Its columns.
    pub fn columns(&self) -> Range<u32> {
        self.col_start..self.col_end
    }
}

/// Columns of shard `index` among `shards` for dimension `dim`: contiguous,
/// balanced (sizes differ by at most one), in shard order, tiling [0, dim).
pub fn column_range(dim: u32, shards: u32, index: u32) -> Range<u32> {
    debug_assert!(index < shards && shards > 0);
    let (dim, shards, index) = (u64::from(dim), u64::from(shards), u64::from(index));
    let start = dim * index / shards;
    let end = dim * (index + 1) / shards;
    start as u32..end as u32
}

/// Copies one shard's column slice of some rows (`part`, row-major,
/// `cols.len()` wide) into full rows (`full`, row-major, `dim` wide) at
/// columns `cols`: how every reader of a sharded model reassembles vectors.
/// Rows beyond the shorter of the two are left alone.
pub fn place_columns(full: &mut [f32], dim: usize, cols: Range<u32>, part: &[f32]) {
    let (c0, c1) = (cols.start as usize, cols.end as usize);
    let width = c1 - c0;
    if width == 0 {
        return;
    }
    for (row, slice) in full.chunks_exact_mut(dim).zip(part.chunks_exact(width)) {
        row[c0..c1].copy_from_slice(slice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_ranges_tile_the_dimension() {
        for dim in 1..40u32 {
            for shards in 1..=dim.min(9) {
                let mut next = 0;
                for i in 0..shards {
                    let r = column_range(dim, shards, i);
                    assert_eq!(r.start, next);
                    assert!(
                        r.end > r.start,
                        "dim {dim} shards {shards} shard {i} is empty"
                    );
                    next = r.end;
                }
                assert_eq!(next, dim);
            }
        }
    }

    #[test]
    fn fingerprint_covers_every_field() {
        let base = ModelSpec {
            vocab_fingerprint: 1,
            vocab_size: 10,
            dim: 100,
            negative: 5,
            sampling_power: 0.75,
            init_seed: 1,
            objective: Objective::SkipGram,
        };
        let variants = [
            ModelSpec {
                vocab_fingerprint: 2,
                ..base.clone()
            },
            ModelSpec {
                vocab_size: 11,
                ..base.clone()
            },
            ModelSpec {
                dim: 101,
                ..base.clone()
            },
            ModelSpec {
                negative: 6,
                ..base.clone()
            },
            ModelSpec {
                sampling_power: 0.5,
                ..base.clone()
            },
            ModelSpec {
                init_seed: 2,
                ..base.clone()
            },
            ModelSpec {
                objective: Objective::Cbow,
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(v.fingerprint(), base.fingerprint(), "{v:?}");
        }
    }

    #[test]
    fn placed_columns_reassemble_rows_for_any_split() {
        let (rows, dim) = (3usize, 7u32);
        let value = |r: usize, c: usize| (100 * r + c) as f32;
        let want: Vec<f32> = (0..rows)
            .flat_map(|r| (0..dim as usize).map(move |c| value(r, c)))
            .collect();
        for shards in 1..=dim {
            let mut full = vec![f32::NAN; rows * dim as usize];
            for i in 0..shards {
                let cols = column_range(dim, shards, i);
                let part: Vec<f32> = (0..rows)
                    .flat_map(|r| cols.clone().map(move |c| value(r, c as usize)))
                    .collect();
                place_columns(&mut full, dim as usize, cols, &part);
            }
            assert_eq!(full, want, "{shards} shards");
        }
    }

    #[test]
    fn a_shard_spec_serializes_flat_with_the_objective_as_cbow() {
        let spec = ShardSpec {
            model: ModelSpec {
                vocab_fingerprint: 1,
                vocab_size: 10,
                dim: 8,
                negative: 5,
                sampling_power: 0.75,
                init_seed: 3,
                objective: Objective::Cbow,
            },
            col_start: 2,
            col_end: 6,
        };
        let json = serde_json::to_value(&spec).expect("serializes");
        assert_eq!(json["cbow"], true);
        assert_eq!(json["col_start"], 2);
        assert_eq!(json["dim"], 8);
        assert_eq!(
            serde_json::from_value::<ShardSpec>(json).expect("parses"),
            spec
        );
        // A file without a `cbow` field (from a release without CBOW) is skip-gram.
        let old = serde_json::json!({"vocab_fingerprint": 1, "vocab_size": 10, "dim": 8,
            "negative": 5, "sampling_power": 0.75, "init_seed": 3, "col_start": 0, "col_end": 8});
        let parsed: ShardSpec = serde_json::from_value(old).expect("parses");
        assert_eq!(parsed.model.objective, Objective::SkipGram);
        assert_eq!(
            ShardSpec::of(&spec.model, 3, 1).columns(),
            column_range(8, 3, 1)
        );
    }
}
