//! Node classification, the protocol of DeepWalk (Perozzi et al., KDD 2014,
//! section 6) and node2vec (Grover & Leskovec, KDD 2016, section 4.3): the
//! vectors of a graph's nodes are the features, a one-vs-rest L2-regularised
//! logistic regression is trained on a fraction of the labelled nodes and
//! predicts the others, and Micro-/Macro-F1 are averaged over seeded splits.
//! This module reads the labels file, draws the splits and runs them; the
//! classifier, its predictions and the F1 scores are [`crate::one_vs_rest`]'s.
//!
//! * The labels file holds `node label` lines (two whitespace-separated
//!   fields, any strings; `#` starts a comment line; a node on several lines
//!   has several labels; a repeated pair counts once). Nodes are matched
//!   exactly against the vector file's words; labelled nodes without a
//!   vector are counted and left out.
//! * Split `s` shuffles the nodes that have a vector with ChaCha8 keyed by
//!   the seed, stream `s`; fraction `f` trains on the first `⌊f·n⌋` nodes of
//!   that order and tests on the rest, so the splits are nested across
//!   fractions (as DeepWalk's `scoring.py` reuses its shuffles). The orders are
//!   in the report, so another implementation can use the very same splits.

use crate::error::EvalError;
use crate::one_vs_rest::{f1_scores, fit_binary, top_k, Classifier, Fitted};
use crate::text::{excerpt, utf8};
use anyhow::{bail, Context};
use ndarray_016 as nd;
use ndarray_016::ShapeBuilder as _;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Labelled nodes without a vector named in the report, at most.
const MISSING_EXAMPLES: usize = 10;

/// A labels file: which nodes carry which labels.
#[derive(Clone, Debug)]
pub struct LabelSet {
    pub path: PathBuf,
    /// Node names in order of first appearance.
    pub nodes: Vec<String>,
    /// `node_labels[i]`: node i's label indices, ascending, without repeats.
    pub node_labels: Vec<Vec<u32>>,
    /// Label names in order of first appearance; a label's index is its place here.
    pub labels: Vec<String>,
    /// Distinct (node, label) pairs.
    pub pairs: usize,
}

impl LabelSet {
    pub fn load(path: &Path) -> Result<Self, EvalError> {
        Self::parse(path, &fs_err::read(path)?)
    }

    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, EvalError> {
        let text = utf8(path, bytes)?;
        let mut node_index: HashMap<&str, u32> = HashMap::new();
        let mut label_index: HashMap<&str, u32> = HashMap::new();
        let mut nodes = Vec::new();
        let mut labels = Vec::new();
        let mut node_labels: Vec<Vec<u32>> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [node, label] = fields[..] else {
                return Err(EvalError::Parse {
                    path: path.to_path_buf(),
                    line: i as u64 + 1,
                    msg: format!(
                        "expected `node label` (2 fields), found {} fields in {:?}",
                        fields.len(),
                        excerpt(line)
                    ),
                });
            };
            let n = *node_index.entry(node).or_insert_with(|| {
                nodes.push(node.to_owned());
                node_labels.push(Vec::new());
                (nodes.len() - 1) as u32
            });
            let l = *label_index.entry(label).or_insert_with(|| {
                labels.push(label.to_owned());
                (labels.len() - 1) as u32
            });
            node_labels[n as usize].push(l);
        }
        if nodes.is_empty() {
            return Err(EvalError::Empty {
                path: path.to_path_buf(),
                msg: "no `node label` lines in the labels file".to_owned(),
            });
        }
        for l in &mut node_labels {
            l.sort_unstable();
            l.dedup();
        }
        let pairs = node_labels.iter().map(Vec::len).sum();
        Ok(Self {
            path: path.to_path_buf(),
            nodes,
            node_labels,
            labels,
            pairs,
        })
    }
}

/// The protocol's settings (`colonnade eval --label-*`).
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Labelled fractions, each in (0, 1).
    pub fractions: Vec<f64>,
    /// Seeded splits per fraction.
    pub splits: usize,
    pub seed: u64,
    /// Inverse regularisation strength, scikit-learn's `C`.
    pub c: f64,
    /// Stop a fit when `‖∇‖₂` of `mean(loss) + ½‖w‖²/(C·n)` is below this
    /// (linfa's test is on the summed objective, so it gets this times `n`;
    /// by default [`crate::one_vs_rest::DEFAULT_TOLERANCE`]).
    pub tolerance: f64,
    /// L-BFGS iterations per fit at most (by default
    /// [`crate::one_vs_rest::DEFAULT_MAX_ITERATIONS`]).
    pub max_iterations: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LabelReport {
    pub file: PathBuf,
    /// Label names; the index of a label is its place here.
    pub labels: Vec<String>,
    /// Distinct nodes in the labels file.
    pub labelled_nodes: usize,
    /// Labelled nodes that have a vector: the nodes split, trained and tested on.
    pub nodes_with_vectors: usize,
    /// Labelled nodes without a vector, left out.
    pub nodes_without_vectors: usize,
    /// A few of those, in file order.
    pub nodes_without_vectors_examples: Vec<String>,
    pub c: f64,
    pub seed: u64,
    pub gradient_tolerance: f64,
    pub max_iterations: u64,
    /// Logistic regressions fitted (constant predictors not counted).
    pub fits: usize,
    /// Fits that stopped with the gradient above the tolerance.
    pub fits_not_converged: usize,
    /// The largest `‖∇ mean objective‖₂` left by any fit.
    pub max_gradient_norm: f64,
    /// One row per fraction, in the order given.
    pub fractions: Vec<FractionResult>,
    /// Split `s` trains on the first `train` nodes of `splits[s].order`
    /// (for each fraction's `train`) and tests on the rest.
    pub splits: Vec<SplitOrder>,
    pub seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SplitOrder {
    pub split: usize,
    /// Every node with a vector, shuffled.
    pub order: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FractionResult {
    pub fraction: f64,
    /// Training nodes per split, ⌊fraction · nodes_with_vectors⌋.
    pub train: usize,
    pub test: usize,
    pub micro_f1: Spread,
    pub macro_f1: Spread,
    /// In split order.
    pub per_split: Vec<SplitScore>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SplitScore {
    pub micro_f1: f64,
    pub macro_f1: f64,
    /// Labels without a positive training node (never predicted).
    pub labels_never_predicted: usize,
    /// Labels whose training nodes are all positive (always predicted).
    pub labels_always_predicted: usize,
}

/// Mean, sample standard deviation (n − 1; 0 for one value), min and max.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(xs: &[f64]) -> Self {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let std = if xs.len() > 1 {
            (xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Self {
            mean,
            std,
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Training nodes for a fraction of `n` (Python's `int(fraction * n)`).
pub fn train_size(fraction: f64, n: usize) -> usize {
    (fraction * n as f64).floor() as usize
}

/// The node order of split `split`: 0..n shuffled by ChaCha8 keyed by
/// `seed`, stream `split`.
pub fn split_order(n: usize, seed: u64, split: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(split);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut rng);
    order
}

/// Runs the protocol on the labelled nodes that have a vector: `row_of`
/// gives a word's (first) row in `matrix` (the file's raw rows).
pub fn evaluate(
    set: &LabelSet,
    row_of: impl Fn(&str) -> Option<u32>,
    matrix: ndarray::ArrayView2<'_, f32>,
    protocol: &Protocol,
    vectors_path: &Path,
) -> anyhow::Result<LabelReport> {
    let start = Instant::now();
    // Nodes with a vector, in file order: (node index in `set`, row).
    let mut matched = Vec::with_capacity(set.nodes.len());
    let mut missing = Vec::new();
    for (i, node) in set.nodes.iter().enumerate() {
        match row_of(node) {
            Some(row) => matched.push((i, row as usize)),
            None => missing.push(i),
        }
    }
    if matched.is_empty() {
        bail!(
            "none of the {} labelled nodes of {} is a word of {} (e.g. {:?}); node names must equal the vector file's words",
            set.nodes.len(),
            set.path.display(),
            vectors_path.display(),
            set.nodes[0]
        );
    }
    if !missing.is_empty() {
        tracing::warn!(
            file = %set.path.display(),
            missing = missing.len(),
            labelled = set.nodes.len(),
            first = %set.nodes[missing[0]],
            "labelled nodes without a vector are left out"
        );
    }
    let n = matched.len();
    let dim = matrix.ncols();
    let mut features = nd::Array2::<f64>::zeros((n, dim));
    for (k, &(node, row)) in matched.iter().enumerate() {
        let src = matrix.row(row);
        if let Some(bad) = src.iter().position(|v| !v.is_finite()) {
            bail!(
                "{}: the vector of node {:?} has a non-finite value in column {bad}",
                vectors_path.display(),
                set.nodes[node]
            );
        }
        for (dst, v) in features.row_mut(k).iter_mut().zip(src.iter()) {
            *dst = f64::from(*v);
        }
    }
    let truth: Vec<&[u32]> = matched
        .iter()
        .map(|&(node, _)| set.node_labels[node].as_slice())
        .collect();
    for &f in &protocol.fractions {
        let train = train_size(f, n);
        if train == 0 || train == n {
            bail!(
                "labelled fraction {f} of the {n} labelled nodes with a vector leaves {} training and {} test nodes; both need at least one",
                train,
                n - train
            );
        }
    }
    let orders: Vec<Vec<u32>> = (0..protocol.splits)
        .map(|s| split_order(n, protocol.seed, s as u64))
        .collect();
    let n_labels = set.labels.len();
    let mut fits = 0;
    let mut not_converged = 0;
    let mut max_gradient_norm: f64 = 0.0;
    let mut fractions = Vec::with_capacity(protocol.fractions.len());
    for &fraction in &protocol.fractions {
        let train = train_size(fraction, n);
        let mut per_split = Vec::with_capacity(orders.len());
        for (s, order) in orders.iter().enumerate() {
            let split_start = Instant::now();
            let (train_rows, test_rows) = order.split_at(train);
            // Column-major: linfa's gradient multiplies by the transpose,
            // which is then row-major and runs contiguous dot products.
            let mut x_train = nd::Array2::<f64>::zeros((train, dim).f());
            x_train.assign(&features.select(nd::Axis(0), &to_usize(train_rows)));
            let classifiers = (0..n_labels as u32)
                .into_par_iter()
                .map(|l| {
                    let positive: Vec<bool> = train_rows
                        .iter()
                        .map(|&r| truth[r as usize].contains(&l))
                        .collect();
                    fit_binary(
                        x_train.view(),
                        &positive,
                        protocol.c,
                        protocol.tolerance,
                        protocol.max_iterations,
                    )
                    .with_context(|| {
                        format!(
                            "label {:?}, fraction {fraction}, split {s}",
                            set.labels[l as usize]
                        )
                    })
                })
                .collect::<anyhow::Result<Vec<Fitted>>>()?;
            // linfa stopped on its own sum of the same gradient; a rounding
            // difference must not count a converged fit as stopped short.
            let tolerance = protocol.tolerance * (1.0 + 1e-9);
            let mut never = 0;
            let mut always = 0;
            for fitted in &classifiers {
                match fitted.classifier {
                    Classifier::Never => never += 1,
                    Classifier::Always => always += 1,
                    Classifier::Linear { .. } => {
                        fits += 1;
                        if fitted.gradient_norm >= tolerance {
                            not_converged += 1;
                        }
                        max_gradient_norm = max_gradient_norm.max(fitted.gradient_norm);
                    }
                }
            }
            let predicted: Vec<Vec<u32>> = test_rows
                .par_iter()
                .map(|&r| {
                    let x = features.row(r as usize);
                    let x = x
                        .as_slice()
                        .expect("rows of a standard-layout array are contiguous");
                    let scores: Vec<f64> =
                        classifiers.iter().map(|c| c.classifier.score(x)).collect();
                    top_k(&scores, truth[r as usize].len())
                })
                .collect();
            let test_truth: Vec<Vec<u32>> = test_rows
                .iter()
                .map(|&r| truth[r as usize].to_vec())
                .collect();
            let (micro_f1, macro_f1) = f1_scores(&test_truth, &predicted, n_labels);
            tracing::debug!(
                fraction,
                split = s,
                micro_f1,
                macro_f1,
                seconds = crate::seconds_since(split_start),
                "node classification split"
            );
            per_split.push(SplitScore {
                micro_f1,
                macro_f1,
                labels_never_predicted: never,
                labels_always_predicted: always,
            });
        }
        let micro: Vec<f64> = per_split.iter().map(|s| s.micro_f1).collect();
        let macro_: Vec<f64> = per_split.iter().map(|s| s.macro_f1).collect();
        tracing::info!(
            fraction,
            train,
            micro_f1 = Spread::of(&micro).mean,
            macro_f1 = Spread::of(&macro_).mean,
            "node classification"
        );
        fractions.push(FractionResult {
            fraction,
            train,
            test: n - train,
            micro_f1: Spread::of(&micro),
            macro_f1: Spread::of(&macro_),
            per_split,
        });
    }
    if not_converged > 0 {
        tracing::warn!(
            not_converged,
            fits,
            max_gradient_norm,
            tolerance = protocol.tolerance,
            "some logistic regressions stopped above the gradient tolerance"
        );
    }
    let node_name = |r: &u32| set.nodes[matched[*r as usize].0].clone();
    Ok(LabelReport {
        file: set.path.clone(),
        labels: set.labels.clone(),
        labelled_nodes: set.nodes.len(),
        nodes_with_vectors: n,
        nodes_without_vectors: missing.len(),
        nodes_without_vectors_examples: missing
            .iter()
            .take(MISSING_EXAMPLES)
            .map(|&i| set.nodes[i].clone())
            .collect(),
        c: protocol.c,
        seed: protocol.seed,
        gradient_tolerance: protocol.tolerance,
        max_iterations: protocol.max_iterations,
        fits,
        fits_not_converged: not_converged,
        max_gradient_norm,
        fractions,
        splits: orders
            .iter()
            .enumerate()
            .map(|(split, order)| SplitOrder {
                split,
                order: order.iter().map(node_name).collect(),
            })
            .collect(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn to_usize(rows: &[u32]) -> Vec<usize> {
    rows.iter().map(|&r| r as usize).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::one_vs_rest::{DEFAULT_MAX_ITERATIONS, DEFAULT_TOLERANCE};
    use ndarray::Array2;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    fn labels(text: &str) -> Result<LabelSet, EvalError> {
        LabelSet::parse(Path::new("g.labels"), text.as_bytes())
    }

    #[test]
    fn splits_are_seeded_permutations() {
        let a = split_order(50, 1, 0);
        assert_eq!(a, split_order(50, 1, 0), "same seed and split, same order");
        assert_ne!(a, split_order(50, 1, 1), "another split");
        assert_ne!(a, split_order(50, 2, 0), "another seed");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<u32>>());
        // Golden: rand 0.9's Fisher-Yates over ChaCha8 (seed 1, stream 0).
        // A change here changes every published split.
        assert_eq!(split_order(10, 1, 0), vec![3, 8, 5, 2, 7, 9, 6, 0, 4, 1]);
    }

    #[test]
    fn train_size_is_pythons_int_of_the_product() {
        assert_eq!(train_size(0.1, 10_312), 1031);
        assert_eq!(train_size(0.9, 10), 9);
        assert_eq!(
            train_size(0.29, 100),
            28,
            "0.29 * 100 is 28.999999999999996"
        );
    }

    #[test]
    fn labels_parse_multi_label_comments_and_repeats() {
        let set =
            labels("# node label\n3 b\n\n1 a\n3 a\r\n  # indented comment\n3 b\n7\tc\n").unwrap();
        assert_eq!(set.nodes, ["3", "1", "7"]);
        assert_eq!(set.labels, ["b", "a", "c"]);
        assert_eq!(set.node_labels, vec![vec![0, 1], vec![1], vec![2]]);
        assert_eq!(set.pairs, 4, "the repeated pair counts once");
    }

    #[test]
    fn label_file_errors_name_file_and_line() {
        let e = labels("1 a\n# c\n2\n").unwrap_err().to_string();
        assert!(e.starts_with("g.labels:3: "), "{e}");
        assert!(e.contains("found 1 fields"), "{e}");
        let e = labels("1 a\n2 b extra\n").unwrap_err().to_string();
        assert!(e.starts_with("g.labels:2: "), "{e}");
        let e = LabelSet::parse(Path::new("g.labels"), b"1 a\n2 b\n3 \xff\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("g.labels:3: not UTF-8"), "{e}");
        let e = labels("# only a comment\n\n").unwrap_err().to_string();
        assert!(e.starts_with("g.labels: no `node label` lines"), "{e}");
    }

    /// Three well-separated clusters of 20 nodes, 2 dims; cluster 2 nodes
    /// carry labels "x" and "y", the others one label each.
    fn separable() -> (LabelSet, Vec<String>, Array2<f32>) {
        let centres = [[10.0f32, 0.0], [-10.0, 0.0], [0.0, 10.0]];
        let mut text = String::new();
        let mut words = Vec::new();
        let mut rows = Vec::new();
        for i in 0..60usize {
            let c = i % 3;
            let jitter = (i as f32 * 0.37).sin();
            rows.push([centres[c][0] + jitter, centres[c][1] - jitter]);
            words.push(format!("n{i}"));
            match c {
                0 => text += &format!("n{i} x\n"),
                1 => text += &format!("n{i} z\n"),
                _ => text += &format!("n{i} x\nn{i} y\n"),
            }
        }
        // A word without a label and a labelled node without a vector.
        words.push("lonely".to_owned());
        rows.push([0.0, 0.0]);
        text += "ghost z\n";
        let matrix = Array2::from_shape_fn((rows.len(), 2), |(i, j)| rows[i][j]);
        (labels(&text).unwrap(), words, matrix)
    }

    fn protocol(fractions: &[f64], splits: usize) -> Protocol {
        Protocol {
            fractions: fractions.to_vec(),
            splits,
            seed: 1,
            c: 1.0,
            tolerance: DEFAULT_TOLERANCE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
        }
    }

    #[test]
    fn separable_problem_scores_one() {
        let (set, words, matrix) = separable();
        let r = evaluate(
            &set,
            first_row(&words),
            matrix.view(),
            &protocol(&[0.3, 0.5, 0.9], 3),
            Path::new("v.txt"),
        )
        .unwrap();
        assert_eq!(r.labelled_nodes, 61);
        assert_eq!(r.nodes_with_vectors, 60);
        assert_eq!(r.nodes_without_vectors, 1);
        assert_eq!(r.nodes_without_vectors_examples, ["ghost"]);
        assert_eq!(r.fits_not_converged, 0);
        assert_eq!(r.splits.len(), 3);
        assert_eq!(r.splits[0].order.len(), 60);
        assert_ne!(r.splits[0].order, r.splits[1].order);
        let trains: Vec<(usize, usize)> = r.fractions.iter().map(|f| (f.train, f.test)).collect();
        assert_eq!(trains, [(18, 42), (30, 30), (54, 6)]);
        for f in &r.fractions {
            assert_eq!(f.per_split.len(), 3);
            assert_eq!(f.micro_f1.mean, 1.0, "fraction {}", f.fraction);
            assert_eq!(f.macro_f1.mean, 1.0, "fraction {}", f.fraction);
            assert_eq!(f.micro_f1.std, 0.0);
        }
    }

    #[test]
    fn a_label_missing_from_training_is_never_predicted() {
        // "rare" is on one node only: whenever that node is in the test set,
        // the classifier for "rare" has no positive example.
        let text = "a p\nb p\nc q\nd q\ne rare\n";
        let set = labels(text).unwrap();
        let words: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let matrix = nd_matrix(&[[1.0, 0.0], [1.1, 0.1], [-1.0, 0.0], [-1.1, 0.1], [0.0, 5.0]]);
        let r = evaluate(
            &set,
            first_row(&words),
            matrix.view(),
            &protocol(&[0.8], 5),
            Path::new("v"),
        )
        .unwrap();
        for (s, score) in r.fractions[0].per_split.iter().enumerate() {
            let test_node = r.splits[s].order[4].as_str();
            assert_eq!(score.labels_never_predicted, usize::from(test_node == "e"));
        }
    }

    /// A word's first row in `words`.
    fn first_row(words: &[String]) -> impl Fn(&str) -> Option<u32> + '_ {
        |w| words.iter().position(|x| x == w).map(|i| i as u32)
    }

    fn nd_matrix(rows: &[[f32; 2]]) -> Array2<f32> {
        Array2::from_shape_fn((rows.len(), 2), |(i, j)| rows[i][j])
    }

    #[test]
    fn no_matching_node_and_empty_splits_are_errors() {
        let (set, _, matrix) = separable();
        let words: Vec<String> = (0..61).map(|i| format!("other{i}")).collect();
        let e = evaluate(
            &set,
            first_row(&words),
            matrix.view(),
            &protocol(&[0.5], 1),
            Path::new("v.txt"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("none of the 61 labelled nodes of g.labels is a word of v.txt"),
            "{e}"
        );
        let (set, words, matrix) = separable();
        let e = evaluate(
            &set,
            first_row(&words),
            matrix.view(),
            &protocol(&[0.01], 1),
            Path::new("v"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("leaves 0 training and 60 test nodes"), "{e}");
    }

    #[test]
    fn spread_uses_the_sample_deviation() {
        let s = Spread::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.mean, s.min, s.max), (2.5, 1.0, 4.0));
        assert!(close(s.std, (5.0f64 / 3.0).sqrt(), 1e-15));
        assert_eq!(Spread::of(&[0.3]).std, 0.0);
    }
}
