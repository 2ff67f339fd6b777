//! Planted-structure recall (`eval --groups`): a file of groups of words that
//! were made to co-occur (`colonnade synth --groups`, or any list of known
//! related items, one group per line in popularity order), and how many of
//! each member's k nearest neighbours over the whole vocabulary are its
//! group's other members, k being their number (recall@k, exact search).
//!
//! Scored for two samples of groups: the most popular (`--group-queries`
//! first lines: learnt from many sentences) and as many spread evenly over
//! all lines (mostly the rare tail, seen once or twice).

use crate::embeddings::Embeddings;
use crate::evaluate::EvalError;
use crate::similar::neighbours;
use serde::Serialize;
use std::path::{Path, PathBuf};

pub struct GroupSet {
    pub path: PathBuf,
    pub groups: Vec<Vec<String>>,
}

impl GroupSet {
    pub fn load(path: &Path) -> Result<Self, EvalError> {
        let bytes = fs_err::read(path)?;
        let mut groups = Vec::new();
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = std::str::from_utf8(line).map_err(|_| EvalError::Parse {
                path: path.to_path_buf(),
                line: i as u64 + 1,
                msg: "not UTF-8".into(),
            })?;
            let members: Vec<String> = line.split_ascii_whitespace().map(str::to_owned).collect();
            if !members.is_empty() && !line.starts_with('#') {
                groups.push(members);
            }
        }
        if groups.is_empty() {
            return Err(EvalError::Empty {
                path: path.to_path_buf(),
                msg: "no groups (one line of words per group)".into(),
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            groups,
        })
    }
}

#[derive(Debug, Serialize)]
pub struct SampleRecall {
    /// Which groups: `popular` or `spread`.
    pub sample: String,
    pub groups: usize,
    /// Members searched (those in the vectors, of groups with ≥ 2 there).
    pub queries: usize,
    /// Mean over the queries of |k nearest ∩ group| / k.
    pub recall: f64,
}

#[derive(Debug, Serialize)]
pub struct GroupReport {
    pub file: PathBuf,
    pub groups: usize,
    pub samples: Vec<SampleRecall>,
}

/// Recall of the groups at lines `lines` of `set`.
fn recall(emb: &Embeddings, set: &GroupSet, lines: &[usize], sample: &str) -> SampleRecall {
    // The groups' rows in the vectors (groups with ≥ 2 there), and one
    // query per member: (its row, its group).
    let groups: Vec<Vec<u32>> = lines
        .iter()
        .map(|&l| {
            set.groups[l]
                .iter()
                .filter_map(|w| emb.id(w))
                .collect::<Vec<u32>>()
        })
        .filter(|rows| rows.len() >= 2)
        .collect();
    let queries: Vec<(u32, usize)> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, rows)| rows.iter().map(move |&r| (r, g)))
        .collect();
    let mut total = 0.0;
    // One search per group size (k = members - 1).
    let mut by_k: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (i, &(_, g)) in queries.iter().enumerate() {
        by_k.entry(groups[g].len() - 1).or_default().push(i);
    }
    for (k, idx) in by_k {
        let rows: Vec<u32> = idx.iter().map(|&i| queries[i].0).collect();
        let found = neighbours(emb, &rows, k, f32::NEG_INFINITY);
        for (&i, near) in idx.iter().zip(&found) {
            let group = &groups[queries[i].1];
            let hits = near.iter().filter(|(_, r)| group.contains(r)).count();
            total += hits as f64 / k as f64;
        }
    }
    SampleRecall {
        sample: sample.into(),
        groups: groups.len(),
        queries: queries.len(),
        recall: if queries.is_empty() {
            f64::NAN
        } else {
            total / queries.len() as f64
        },
    }
}

/// Recall of the first `n` groups and of `n` groups spread over all lines.
pub fn evaluate(emb: &Embeddings, set: &GroupSet, n: usize) -> GroupReport {
    let all = set.groups.len();
    let n = n.min(all).max(1);
    let popular: Vec<usize> = (0..n).collect();
    let spread: Vec<usize> = (0..n)
        .map(|i| i * all / n + (all / n) / 2)
        .map(|l| l.min(all - 1))
        .collect();
    GroupReport {
        file: set.path.clone(),
        groups: all,
        samples: vec![
            recall(emb, set, &popular, "popular"),
            recall(emb, set, &spread, "spread"),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    #[test]
    fn recall_counts_group_members_among_neighbours() {
        // Rows 0..3 point one way, 3..6 another; group lines: [a0 a1 a2], [b0 b1 c].
        let words: Vec<String> = ["a0", "a1", "a2", "b0", "b1", "c"]
            .map(String::from)
            .to_vec();
        let m = Array2::from_shape_vec(
            (6, 2),
            vec![
                1.0, 0.0, 0.99, 0.1, 0.98, 0.15, 0.0, 1.0, 0.1, 0.99, 0.7, -0.7,
            ],
        )
        .expect("shape");
        let emb = Embeddings::from_parts(Path::new("t"), colonnade_formats::Format::Hdf5, words, m);
        let set = GroupSet {
            path: "g".into(),
            groups: vec![
                vec!["a0".into(), "a1".into(), "a2".into()],
                vec!["b0".into(), "b1".into(), "c".into(), "unknown".into()],
            ],
        };
        let r = recall(&emb, &set, &[0], "popular");
        assert_eq!((r.groups, r.queries), (1, 3));
        assert!((r.recall - 1.0).abs() < 1e-12, "{r:?}");
        // b0, b1: neighbours are each other and an a-row (c is far): 1/2 each;
        // c: its two nearest are a0 (0.7) then a1: 0/2.
        let r = recall(&emb, &set, &[1], "spread");
        assert_eq!((r.groups, r.queries), (1, 3));
        assert!((r.recall - 1.0 / 3.0).abs() < 1e-12, "{r:?}");
    }
}
