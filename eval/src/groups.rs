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
use crate::error::EvalError;
use crate::similar::neighbours;
use crate::text::line_of;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A groups file as read: its text, and where each group's line lies in it
/// (16 bytes a group, not a `String` a member: at tens of millions of words
/// the members as strings would take several times the file's own size).
pub struct GroupSet {
    pub path: PathBuf,
    text: String,
    /// Byte range of each group's line (non-empty, not a `#` comment).
    lines: Vec<std::ops::Range<usize>>,
}

impl GroupSet {
    pub fn load(path: &Path) -> Result<Self, EvalError> {
        let bytes = fs_err::read(path)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let line = line_of(e.as_bytes(), e.utf8_error().valid_up_to());
            EvalError::Parse {
                path: path.to_path_buf(),
                line,
                msg: "not UTF-8".into(),
            }
        })?;
        Self::from_text(path, text)
    }

    /// Groups from a file's text (one group of words per line; empty lines
    /// and lines starting with `#` are skipped).
    pub fn from_text(path: &Path, text: String) -> Result<Self, EvalError> {
        let mut lines = Vec::new();
        let mut start = 0;
        for line in text.split('\n') {
            let end = start + line.len();
            if !line.starts_with('#') && line.split_ascii_whitespace().next().is_some() {
                lines.push(start..end);
            }
            start = end + 1;
        }
        if lines.is_empty() {
            return Err(EvalError::Empty {
                path: path.to_path_buf(),
                msg: "no groups (one line of words per group)".into(),
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            text,
            lines,
        })
    }

    /// How many groups.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The members of group `i` (its line's words).
    pub fn members(&self, i: usize) -> impl Iterator<Item = &str> + '_ {
        self.text[self.lines[i].clone()].split_ascii_whitespace()
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
            set.members(l)
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
    let all = set.len();
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
        let set = GroupSet::from_text(
            Path::new("g"),
            "# planted\na0 a1 a2\n\n  \nb0 b1\tc unknown\n".into(),
        )
        .expect("two groups");
        assert_eq!(set.len(), 2);
        let r = recall(&emb, &set, &[0], "popular");
        assert_eq!((r.groups, r.queries), (1, 3));
        assert!((r.recall - 1.0).abs() < 1e-12, "{r:?}");
        // b0, b1: neighbours are each other and an a-row (c is far): 1/2 each;
        // c: its two nearest are a0 (0.7) then a1: 0/2.
        let r = recall(&emb, &set, &[1], "spread");
        assert_eq!((r.groups, r.queries), (1, 3));
        assert!((r.recall - 1.0 / 3.0).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn a_line_that_is_not_utf8_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("groups.txt");
        fs_err::write(&path, b"a b\nc d\ne \xff f\n").expect("write");
        match GroupSet::load(&path) {
            Err(EvalError::Parse { path: p, line, msg }) => {
                assert_eq!((p, line, msg.as_str()), (path, 3, "not UTF-8"));
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("accepted a file that is not UTF-8"),
        }
    }
}
