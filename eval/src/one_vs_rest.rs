//! One-vs-rest multi-label classification of vectors: what node
//! classification ([`crate::classify`]) fits, predicts and scores on each
//! of its splits.
//!
//! * One binary classifier per label (`linfa-logistic`, L-BFGS) minimises
//!   `Σᵢ log(1 + exp(−yᵢ(w·xᵢ + b))) + ½‖w‖²/C` over the training nodes, with
//!   `yᵢ = ±1`, the intercept `b` unpenalised and the vectors as they are in
//!   the file (no scaling), as f64. That is scikit-learn's default
//!   `LogisticRegression()` (lbfgs, L2, `C = 1`), whose objective
//!   `mean(loss) + ½‖w‖²/(C·n)` is the same divided by `C·n`
//!   (`tests/python/test_node_classification.py` checks the agreement). A fit
//!   stops when the L2 norm of the gradient of that mean objective is below
//!   the tolerance (1e-6 by default; scikit-learn's default `tol=1e-4` bounds
//!   the largest component instead, which can leave F1 measurably away from
//!   the converged value). Fits that stop above it are counted. A
//!   label with no positive training node is never predicted, one whose
//!   training nodes are all positive always is, as scikit-learn's
//!   `OneVsRestClassifier` does with its constant predictor.
//! * Each test node gets its `k` highest-scoring labels, `k` its true label
//!   count (scores `w·x + b`, ties to the label seen first in the file).
//!   Micro-F1 counts true and false positives and negatives over all labels;
//!   Macro-F1 is the mean of the per-label F1 over every label in the file, a
//!   label neither true nor predicted in the test nodes scoring 0
//!   (scikit-learn's `f1_score(average="macro")` on the binarised label
//!   matrices, `zero_division` left at its default).

use anyhow::Context;
use linfa::traits::Fit;
use linfa::DatasetBase;
use linfa_logistic::LogisticRegression;
use ndarray_016 as nd;

/// Default `tolerance` of [`fit_binary`] (`colonnade eval --label-tol`).
/// scikit-learn's default stops when the largest component of the same
/// gradient is below 1e-4, a looser test; this one lands closer to the unique
/// optimum, at the cost of more solver iterations.
pub const DEFAULT_TOLERANCE: f64 = 1e-6;
/// Default `max_iterations` of [`fit_binary`] (`colonnade eval --label-max-iter`).
pub const DEFAULT_MAX_ITERATIONS: u64 = 1000;

/// One label's binary classifier.
#[derive(Clone, Debug, PartialEq)]
pub enum Classifier {
    /// No positive training node.
    Never,
    /// Every training node positive.
    Always,
    /// Score `w·x + b`: the log-odds of the label.
    Linear { w: Vec<f64>, b: f64 },
}

impl Classifier {
    pub fn score(&self, x: &[f64]) -> f64 {
        match self {
            Self::Never => f64::NEG_INFINITY,
            Self::Always => f64::INFINITY,
            Self::Linear { w, b } => dot(w, x) + b,
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A fitted classifier and the norm of the mean objective's gradient where
/// the solver stopped (0 for the constant ones).
#[derive(Clone, Debug)]
pub struct Fitted {
    pub classifier: Classifier,
    pub gradient_norm: f64,
}

/// Fits `positive` (one flag per row of `x`) by L2-regularised logistic
/// regression with an unpenalised intercept, as the module doc says.
pub fn fit_binary(
    x: nd::ArrayView2<'_, f64>,
    positive: &[bool],
    c: f64,
    tolerance: f64,
    max_iterations: u64,
) -> anyhow::Result<Fitted> {
    let n = positive.len();
    let positives = positive.iter().filter(|p| **p).count();
    if positives == 0 || positives == n {
        return Ok(Fitted {
            classifier: if positives == 0 {
                Classifier::Never
            } else {
                Classifier::Always
            },
            gradient_norm: 0.0,
        });
    }
    let alpha = 1.0 / c;
    let dataset = DatasetBase::new(x, nd::ArrayView1::from(positive));
    let model = LogisticRegression::<f64>::default()
        .alpha(alpha)
        .with_intercept(true)
        .gradient_tolerance(tolerance * n as f64)
        .max_iterations(max_iterations)
        .fit(&dataset)
        .context("logistic regression")?;
    // linfa models the probability of whichever class is the more frequent
    // one in the training labels; turn it into the label's log-odds.
    let sign = if model.labels().pos.class { 1.0 } else { -1.0 };
    let w: Vec<f64> = model.params().iter().map(|v| sign * v).collect();
    let b = sign * model.intercept();
    let gradient_norm = mean_gradient_norm(x, positive, &w, b, alpha);
    Ok(Fitted {
        classifier: Classifier::Linear { w, b },
        gradient_norm,
    })
}

/// `‖∇‖₂` of `(1/n)·[Σᵢ logloss(w·xᵢ + b, yᵢ) + ½α‖w‖²]` at `(w, b)`.
fn mean_gradient_norm(
    x: nd::ArrayView2<'_, f64>,
    positive: &[bool],
    w: &[f64],
    b: f64,
    alpha: f64,
) -> f64 {
    let mut grad: Vec<f64> = w.iter().map(|v| alpha * v).collect();
    let mut grad_b = 0.0;
    for (row, &p) in x.rows().into_iter().zip(positive) {
        let z = row.iter().zip(w).map(|(v, wj)| v * wj).sum::<f64>() + b;
        let residual = sigmoid(z) - if p { 1.0 } else { 0.0 };
        for (g, v) in grad.iter_mut().zip(row.iter()) {
            *g += residual * v;
        }
        grad_b += residual;
    }
    let n = positive.len() as f64;
    (grad.iter().map(|g| g * g).sum::<f64>() + grad_b * grad_b).sqrt() / n
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// The `k` highest of `scores` by index, highest first, ties to the lower index.
pub fn top_k(scores: &[f64], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..scores.len() as u32).collect();
    idx.sort_by(|&a, &b| {
        scores[b as usize]
            .total_cmp(&scores[a as usize])
            .then(a.cmp(&b))
    });
    idx.truncate(k);
    idx
}

/// Micro- and Macro-F1 of predicted against true label sets (label indices
/// below `n_labels`). Macro averages over all `n_labels` labels, a label with
/// no true and no predicted occurrence scoring 0.
pub fn f1_scores(truth: &[Vec<u32>], predicted: &[Vec<u32>], n_labels: usize) -> (f64, f64) {
    debug_assert_eq!(truth.len(), predicted.len());
    let mut tp = vec![0u64; n_labels];
    let mut fp = vec![0u64; n_labels];
    let mut fn_ = vec![0u64; n_labels];
    for (t, p) in truth.iter().zip(predicted) {
        for &l in p {
            if t.contains(&l) {
                tp[l as usize] += 1;
            } else {
                fp[l as usize] += 1;
            }
        }
        for &l in t {
            if !p.contains(&l) {
                fn_[l as usize] += 1;
            }
        }
    }
    let f1 = |tp: u64, fp: u64, fn_: u64| {
        let denominator = 2 * tp + fp + fn_;
        if denominator == 0 {
            0.0
        } else {
            2.0 * tp as f64 / denominator as f64
        }
    };
    let micro = f1(tp.iter().sum(), fp.iter().sum(), fn_.iter().sum());
    let macro_ =
        (0..n_labels).map(|l| f1(tp[l], fp[l], fn_[l])).sum::<f64>() / n_labels.max(1) as f64;
    (micro, macro_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn f1_by_hand_multi_label() {
        // label 0: TP 1 (node 0), FP 1 (node 2)        F1 2/3
        // label 1: TP 1 (node 1), FN 1 (node 0)        F1 2/3
        // label 2: FP 1 (node 0), FN 1 (node 2)        F1 0
        // label 3: never true, never predicted         F1 0
        // micro: TP 2, FP 2, FN 2 -> 4 / 8
        let truth = vec![vec![0, 1], vec![1], vec![2]];
        let predicted = vec![vec![0, 2], vec![1], vec![0]];
        let (micro, macro_) = f1_scores(&truth, &predicted, 4);
        assert!(close(micro, 0.5, 1e-15), "{micro}");
        assert!(close(macro_, 1.0 / 3.0, 1e-15), "{macro_}");
        let (micro, macro_) = f1_scores(&truth, &truth, 3);
        assert_eq!((micro, macro_), (1.0, 1.0));
        let (micro, macro_) = f1_scores(&truth, &truth, 4);
        assert_eq!(micro, 1.0);
        assert!(close(macro_, 0.75, 1e-15), "an absent label scores 0");
    }

    #[test]
    fn top_k_takes_the_highest_ties_to_the_lower_label() {
        let scores = [0.1, 0.9, 0.5, 0.9, f64::NEG_INFINITY, f64::INFINITY];
        assert_eq!(top_k(&scores, 0), Vec::<u32>::new());
        assert_eq!(top_k(&scores, 1), vec![5]);
        assert_eq!(top_k(&scores, 3), vec![5, 1, 3]);
        assert_eq!(top_k(&scores, 4), vec![5, 1, 3, 2]);
        assert_eq!(top_k(&[0.0; 3], 2), vec![0, 1]);
    }

    /// Points x = (s, t) labelled by scikit-learn 1.9.1
    /// `LogisticRegression(C=C, tol=1e-12, max_iter=100000)`.
    fn toy_problem() -> (nd::Array2<f64>, Vec<bool>) {
        let x = nd::arr2(&[
            [0.0, 0.0],
            [1.0, 0.0],
            [0.0, 1.0],
            [1.0, 1.0],
            [2.0, 1.0],
            [0.5, 2.0],
            [1.5, 0.5],
            [0.2, 0.8],
        ]);
        let y = vec![false, false, true, true, true, false, true, false];
        (x, y)
    }

    #[test]
    fn fit_matches_scikit_learn_coefficients() {
        let (x, y) = toy_problem();
        for (c, w_ref, b_ref) in [
            (
                1.0,
                [0.7392994331526401, 0.2039243035809591],
                -0.7301442835966437,
            ),
            (
                0.25,
                [0.2840305730953304, 0.0736515514044989],
                -0.2779128802150784,
            ),
        ] {
            let fitted = fit_binary(x.view(), &y, c, DEFAULT_TOLERANCE, 1000).unwrap();
            let Classifier::Linear { w, b } = &fitted.classifier else {
                panic!("expected a fitted classifier, got {:?}", fitted.classifier)
            };
            for (got, want) in w.iter().zip(w_ref) {
                assert!(close(*got, want, 1e-5), "C={c}: w {w:?} vs {w_ref:?}");
            }
            assert!(close(*b, b_ref, 1e-5), "C={c}: b {b} vs {b_ref}");
            assert!(fitted.gradient_norm < DEFAULT_TOLERANCE);
            // The inverted labels give the opposite log-odds, whichever class
            // linfa takes as its positive one.
            let flipped: Vec<bool> = y.iter().map(|p| !p).collect();
            let Classifier::Linear { w: w2, b: b2 } =
                fit_binary(x.view(), &flipped, c, DEFAULT_TOLERANCE, 1000)
                    .unwrap()
                    .classifier
            else {
                panic!("expected a fitted classifier")
            };
            assert!(close(w2[0], -w[0], 1e-5) && close(b2, -b, 1e-5));
        }
    }

    #[test]
    fn minority_and_majority_positives_score_positive() {
        // linfa models its more frequent class; the score must be the label's.
        let x = nd::Array2::from_shape_fn((9, 1), |(i, _)| i as f64);
        let few: Vec<bool> = (0..9).map(|i| i >= 7).collect();
        let many: Vec<bool> = (0..9).map(|i| i >= 2).collect();
        for positive in [few, many] {
            let c = fit_binary(x.view(), &positive, 10.0, DEFAULT_TOLERANCE, 1000)
                .unwrap()
                .classifier;
            assert!(c.score(&[8.0]) > 0.0 && c.score(&[0.0]) < 0.0, "{c:?}");
        }
        let none = fit_binary(x.view(), &[false; 9], 1.0, DEFAULT_TOLERANCE, 1000)
            .unwrap()
            .classifier;
        assert_eq!(none, Classifier::Never);
        let all = fit_binary(x.view(), &[true; 9], 1.0, DEFAULT_TOLERANCE, 1000)
            .unwrap()
            .classifier;
        assert_eq!(all, Classifier::Always);
    }
}
