//! Graphs as corpora. An edge list (`u v` or `u v w` per line; node ids are
//! any whitespace-free strings; plain or compressed, as a corpus is) is read
//! streaming into a compact CSR layout ([`Graph`]), and random walks over it
//! ([`walk`]: DeepWalk's uniform walks, node2vec's walks biased by p and q)
//! are generated on the fly from the run seed. Each walk is a sentence of node
//! indices, so training needs no walk file, and every worker regenerates the
//! same walks from (seed, epoch, walk index) alone.
//!
//! node2vec's second-order bias is drawn by rejection sampling (as KnightKing,
//! SOSP 2019, does) against the first-order distribution: memory stays
//! linear in the edges, with no per-edge alias tables.
//!
//! This crate turns graphs into sentences of node indices; it must never talk
//! to shards, train, or know about vocabularies.

pub mod walk;

use colonnade_common::corpus::{self, CorpusError};
use rustc_hash::FxHashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// Opening or decompressing the file; names the path.
    #[error(transparent)]
    Open(#[from] CorpusError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {msg}")]
    Parse {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    #[error("{path}: no edges (an edge list has one `u v` or `u v w` line per edge)")]
    Empty { path: PathBuf },
    #[error("{path}: {what} exceed the u32 range this layout indexes by")]
    TooLarge { path: PathBuf, what: &'static str },
}

/// What loading found in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Edge lines read (not counting blank and comment lines).
    pub edges: u64,
    /// Edge lines `u u`, left out (walks do not stay on a node).
    pub self_loops: u64,
    /// Whether any line carried a weight other than 1.
    pub weighted: bool,
}

/// A graph in CSR layout: node `v`'s out-neighbours are
/// `targets[offsets[v]..offsets[v + 1]]`, sorted (for node2vec's adjacency
/// test); an undirected edge is stored in both directions. Weighted graphs
/// also keep, per stored edge, the cumulative weight of the node's
/// neighbours up to and including it (for sampling by weight).
#[derive(Clone, Debug)]
pub struct Graph {
    names: Vec<String>,
    offsets: Vec<u64>,
    targets: Vec<u32>,
    cum_weights: Option<Vec<f32>>,
    directed: bool,
    stats: LoadStats,
}

impl Graph {
    /// Reads an edge list: one edge per line, `u v` or `u v w` (w a
    /// positive finite weight; missing weights are 1), blank lines and lines
    /// starting with `#` or `%` ignored. Undirected unless `directed`.
    /// Self-loops are left out; repeated edges are kept (they add weight).
    pub fn load(path: &Path, directed: bool) -> Result<Self, GraphError> {
        let reader = corpus::open(path)?;
        Self::read(reader, path, directed)
    }

    /// [`Graph::load`] from any reader; `path` names it in errors.
    pub fn read(mut reader: impl BufRead, path: &Path, directed: bool) -> Result<Self, GraphError> {
        let parse = |line: u64, msg: String| GraphError::Parse {
            path: path.to_path_buf(),
            line,
            msg,
        };
        let mut index: FxHashMap<String, u32> = FxHashMap::default();
        let mut names: Vec<String> = Vec::new();
        let mut node = |name: &str| -> Result<u32, GraphError> {
            if let Some(&i) = index.get(name) {
                return Ok(i);
            }
            let i = u32::try_from(names.len())
                .ok()
                .filter(|&i| i < u32::MAX)
                .ok_or_else(|| GraphError::TooLarge {
                    path: path.to_path_buf(),
                    what: "nodes",
                })?;
            index.insert(name.to_owned(), i);
            names.push(name.to_owned());
            Ok(i)
        };
        let (mut src, mut dst, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        let mut stats = LoadStats::default();
        let mut buf = Vec::new();
        let mut line = 0u64;
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|source| GraphError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            line += 1;
            let text = std::str::from_utf8(&buf)
                .map_err(|e| parse(line, format!("invalid UTF-8 at byte {}", e.valid_up_to())))?;
            let text = text.trim();
            if text.is_empty() || text.starts_with('#') || text.starts_with('%') {
                continue;
            }
            let mut fields = text.split_ascii_whitespace();
            let (Some(u), Some(v)) = (fields.next(), fields.next()) else {
                return Err(parse(
                    line,
                    format!("expected `u v` or `u v weight`, found {text:?}"),
                ));
            };
            let w = match fields.next() {
                None => 1.0f32,
                Some(w) => match w.parse::<f32>() {
                    Ok(w) if w.is_finite() && w > 0.0 => w,
                    _ => {
                        return Err(parse(
                            line,
                            format!("weight {w:?} is not a positive finite number"),
                        ))
                    }
                },
            };
            if fields.next().is_some() {
                return Err(parse(
                    line,
                    format!("more than 3 fields (expected `u v` or `u v weight`): {text:?}"),
                ));
            }
            stats.edges += 1;
            let (u, v) = (node(u)?, node(v)?);
            if u == v {
                stats.self_loops += 1;
                continue;
            }
            stats.weighted |= w != 1.0;
            src.push(u);
            dst.push(v);
            weights.push(w);
        }
        if src.is_empty() {
            return Err(GraphError::Empty {
                path: path.to_path_buf(),
            });
        }
        let n = names.len();
        // Stored edges per node, then their places (counting sort by source).
        let mut offsets = vec![0u64; n + 1];
        for (&u, &v) in src.iter().zip(&dst) {
            offsets[u as usize + 1] += 1;
            if !directed {
                offsets[v as usize + 1] += 1;
            }
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let stored = offsets[n];
        if u32::try_from(stored).is_err() && usize::try_from(stored).is_err() {
            return Err(GraphError::TooLarge {
                path: path.to_path_buf(),
                what: "edges",
            });
        }
        let mut cursor: Vec<u64> = offsets[..n].to_vec();
        let mut targets = vec![0u32; stored as usize];
        let mut edge_weights = vec![0f32; if stats.weighted { stored as usize } else { 0 }];
        let mut put = |from: u32, to: u32, w: f32| {
            let at = cursor[from as usize] as usize;
            cursor[from as usize] += 1;
            targets[at] = to;
            if let Some(slot) = edge_weights.get_mut(at) {
                *slot = w;
            }
        };
        for ((&u, &v), &w) in src.iter().zip(&dst).zip(&weights) {
            put(u, v, w);
            if !directed {
                put(v, u, w);
            }
        }
        drop((src, dst, weights));
        // Sort each node's neighbours (with their weights).
        let mut pairs: Vec<(u32, f32)> = Vec::new();
        for v in 0..n {
            let range = offsets[v] as usize..offsets[v + 1] as usize;
            if edge_weights.is_empty() {
                targets[range].sort_unstable();
            } else {
                pairs.clear();
                pairs.extend(
                    targets[range.clone()]
                        .iter()
                        .copied()
                        .zip(edge_weights[range.clone()].iter().copied()),
                );
                pairs.sort_unstable_by_key(|&(t, _)| t);
                let mut acc = 0f32;
                for (i, &(t, w)) in range.zip(&pairs) {
                    acc += w;
                    targets[i] = t;
                    edge_weights[i] = acc;
                }
            }
        }
        Ok(Self {
            names,
            offsets,
            targets,
            cum_weights: stats.weighted.then_some(edge_weights),
            directed,
            stats,
        })
    }

    /// Nodes (every id that appears in an edge line, self-loops included).
    pub fn nodes(&self) -> usize {
        self.names.len()
    }

    /// Stored (directed) edges: an undirected edge counts twice.
    pub fn stored_edges(&self) -> u64 {
        self.targets.len() as u64
    }

    /// The id node `v` had in the file.
    pub fn name(&self, v: u32) -> &str {
        &self.names[v as usize]
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn is_directed(&self) -> bool {
        self.directed
    }

    pub fn is_weighted(&self) -> bool {
        self.cum_weights.is_some()
    }

    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    fn range(&self, v: u32) -> std::ops::Range<usize> {
        self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize
    }

    /// `v`'s out-neighbours, sorted (repeated for repeated edges).
    pub fn neighbors(&self, v: u32) -> &[u32] {
        &self.targets[self.range(v)]
    }

    /// Whether the edge `from -> to` exists (binary search).
    pub fn has_edge(&self, from: u32, to: u32) -> bool {
        self.neighbors(from).binary_search(&to).is_ok()
    }

    /// Bytes the layout holds (offsets, targets, weights; names not counted).
    pub fn layout_bytes(&self) -> u64 {
        (self.offsets.len() * 8
            + self.targets.len() * 4
            + self.cum_weights.as_ref().map_or(0, |w| w.len() * 4)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, directed: bool) -> Result<Graph, GraphError> {
        Graph::read(text.as_bytes(), Path::new("g.edges"), directed)
    }

    #[test]
    fn undirected_csr_with_sorted_neighbours() {
        let g = read("# comment\na b\nc a\n\nb c\nd d\n", false).expect("parses");
        assert_eq!(g.names(), ["a", "b", "c", "d"]);
        assert_eq!(g.neighbors(0), [1, 2]);
        assert_eq!(g.neighbors(1), [0, 2]);
        assert_eq!(g.neighbors(2), [0, 1]);
        assert!(g.neighbors(3).is_empty(), "self-loop left out");
        assert_eq!(g.stored_edges(), 6);
        assert_eq!(
            g.stats(),
            LoadStats {
                edges: 4,
                self_loops: 1,
                weighted: false
            }
        );
        assert!(g.has_edge(2, 1) && !g.has_edge(3, 0));
    }

    #[test]
    fn directed_keeps_one_direction() {
        let g = read("1 2\n2 3\n", true).expect("parses");
        assert_eq!(g.neighbors(0), [1]);
        assert_eq!(g.neighbors(1), [2]);
        assert!(g.neighbors(2).is_empty());
    }

    #[test]
    fn weights_are_cumulative_per_node() {
        let g = read("x z 3\nx y 1.5\n", true).expect("parses");
        assert!(g.is_weighted());
        // x = 0, z = 1, y = 2: sorted by target, z (3) then y (1.5).
        assert_eq!(g.neighbors(0), [1, 2]);
        let w = g.cum_weights.as_ref().expect("weighted");
        assert_eq!(&w[..2], [3.0, 4.5]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = read("a b\nc\n", false).expect_err("one field");
        assert_eq!(
            e.to_string(),
            "g.edges:2: expected `u v` or `u v weight`, found \"c\""
        );
        let e = read("a b -1\n", false).expect_err("negative weight");
        assert!(e.to_string().starts_with("g.edges:1: weight \"-1\""), "{e}");
        let e = read("a b nan\n", false).expect_err("nan");
        assert!(e.to_string().contains("positive finite"), "{e}");
        let e = read("a b 1 2\n", false).expect_err("4 fields");
        assert!(e.to_string().contains("more than 3 fields"), "{e}");
        let e = read("# only a comment\n", false).expect_err("empty");
        assert!(e.to_string().contains("no edges"), "{e}");
        let e =
            Graph::read(&b"a b\n\xff c\n"[..], Path::new("g.edges"), false).expect_err("bad utf-8");
        assert_eq!(e.to_string(), "g.edges:2: invalid UTF-8 at byte 0");
    }
}
