//! `colonnade eval`: its flags, which evaluations they ask for, and the report
//! (a table by default, JSON with `--json`). The evaluations live below:
//! analogy accuracy ([`analogy`], 3CosAdd and 3CosMul) and word-pair
//! similarity correlation ([`pairs`], Spearman and Pearson) with the same
//! rules as gensim 4.4's `evaluate_word_analogies` / `evaluate_word_pairs`,
//! so the numbers compare (`tests/python/test_eval_parity.py` checks it);
//! node classification ([`classify`], Micro-/Macro-F1 of a one-vs-rest
//! logistic regression as scikit-learn's,
//! `tests/python/test_node_classification.py`); and the recall of planted
//! groups among nearest neighbours ([`groups`]).

use crate::embeddings::RawEmbeddings;
use crate::{analogy, classify, groups, one_vs_rest, pairs};
use anyhow::{bail, Context};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Evaluate vectors on word analogies, word-pair similarity and node classification.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Vectors: our HDF5, word2vec text or word2vec binary (detected from the content).
    #[arg(long, env = "COLONNADE_VECTORS")]
    pub vectors: PathBuf,
    /// Analogy questions (`: section` lines, then `a b c d` lines, as
    /// questions-words.txt); may be repeated or comma-separated.
    #[arg(
        long = "analogies",
        env = "COLONNADE_ANALOGIES",
        value_name = "FILE",
        value_delimiter = ','
    )]
    pub analogies: Vec<PathBuf>,
    /// Word pairs with human scores (`word1<TAB>word2<TAB>score`, `#`
    /// comments); may be repeated or comma-separated.
    #[arg(
        long = "similarity",
        env = "COLONNADE_SIMILARITY",
        value_name = "FILE",
        value_delimiter = ','
    )]
    pub similarity: Vec<PathBuf>,
    /// Analogies: accept question words from, and search among, the first N
    /// rows only (the N most frequent words); 0 means all.
    #[arg(long, env = "COLONNADE_EVAL_RESTRICT", default_value_t = 30_000)]
    pub restrict: usize,
    /// Word pairs: accept words from the first N rows only; 0 means all.
    #[arg(
        long,
        env = "COLONNADE_EVAL_SIMILARITY_RESTRICT",
        default_value_t = 300_000
    )]
    pub similarity_restrict: usize,
    /// Node labels for node classification (`node label` lines, `#`
    /// comments; a node on several lines has several labels; nodes are the
    /// vector file's words): one-vs-rest logistic regression trained on a
    /// fraction of the labelled nodes, Micro-/Macro-F1 on the rest, as
    /// DeepWalk and node2vec evaluate.
    #[arg(long, env = "COLONNADE_LABELS", value_name = "FILE")]
    pub labels: Option<PathBuf>,
    /// Node classification: the labelled fractions to train on, each in (0, 1).
    #[arg(
        long,
        env = "COLONNADE_LABEL_FRACTIONS",
        value_delimiter = ',',
        default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9",
        value_parser = parse_fraction
    )]
    pub label_fractions: Vec<f64>,
    /// Node classification: random splits per fraction (the scores are their
    /// mean; DeepWalk used 10).
    #[arg(
        long,
        env = "COLONNADE_LABEL_SPLITS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub label_splits: u32,
    /// Node classification: seed of the splits.
    #[arg(long, env = "COLONNADE_LABEL_SEED", default_value_t = 1)]
    pub label_seed: u64,
    /// Node classification: inverse L2 regularisation strength of the
    /// logistic regressions (scikit-learn's C).
    #[arg(
        long,
        env = "COLONNADE_LABEL_C",
        default_value_t = 1.0,
        value_parser = parse_positive
    )]
    pub label_c: f64,
    /// Node classification: a logistic regression has converged when the L2
    /// norm of the gradient of mean(log loss) + ½‖w‖²/(C·n) is below this
    /// (scikit-learn's tol bounds the largest component of the same gradient).
    #[arg(
        long,
        env = "COLONNADE_LABEL_TOL",
        default_value_t = one_vs_rest::DEFAULT_TOLERANCE,
        value_parser = parse_positive
    )]
    pub label_tol: f64,
    /// Node classification: L-BFGS iterations per logistic regression at most
    /// (fits stopped here are counted in the report).
    #[arg(
        long,
        env = "COLONNADE_LABEL_MAX_ITER",
        default_value_t = one_vs_rest::DEFAULT_MAX_ITERATIONS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub label_max_iter: u64,
    /// Groups of words that belong together, one group per line, most
    /// popular first (`colonnade synth --groups`): recall of each member's
    /// group among its k nearest neighbours (k = the group's other members).
    #[arg(long, env = "COLONNADE_GROUPS", value_name = "FILE")]
    pub groups: Option<PathBuf>,
    /// Groups: how many of the most popular groups to score, and how many
    /// spread evenly over the whole file.
    #[arg(long, env = "COLONNADE_GROUP_QUERIES", default_value_t = 100)]
    pub group_queries: usize,
    /// Print JSON instead of a table.
    #[arg(long, env = "COLONNADE_JSON")]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct VectorsInfo {
    pub path: PathBuf,
    pub format: colonnade_formats::Format,
    pub words: usize,
    pub dim: usize,
}

#[derive(Debug, Serialize)]
pub struct EvalReport {
    pub vectors: VectorsInfo,
    pub analogies: Vec<analogy::AnalogyReport>,
    pub similarity: Vec<pairs::PairReport>,
    /// Node classification, with `--labels`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<classify::LabelReport>,
    /// Planted-group recall, with `--groups`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<groups::GroupReport>,
}

/// A flag's value as a number (whitespace around it allowed).
fn parse_number(s: &str) -> Result<f64, String> {
    s.trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a number ({e})"))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let f = parse_number(s)?;
    if f > 0.0 && f < 1.0 {
        Ok(f)
    } else {
        Err(format!("{s} is not a fraction strictly between 0 and 1"))
    }
}

fn parse_positive(s: &str) -> Result<f64, String> {
    let x = parse_number(s)?;
    if x > 0.0 && x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{s} is not a positive finite number"))
    }
}

fn limit(n: usize) -> usize {
    if n == 0 {
        usize::MAX
    } else {
        n
    }
}

/// Loads the vectors and every test file, evaluates, returns the report.
pub fn evaluate(args: &EvalArgs) -> anyhow::Result<EvalReport> {
    if args.analogies.is_empty()
        && args.similarity.is_empty()
        && args.labels.is_none()
        && args.groups.is_none()
    {
        bail!(
            "nothing to evaluate: give --analogies FILE, --similarity FILE, --labels FILE and/or \
             --groups FILE"
        );
    }
    // Read the (small) test files first: a typo fails before a long load.
    let analogy_sets = args
        .analogies
        .iter()
        .map(|p| analogy::AnalogySet::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let pair_sets = args
        .similarity
        .iter()
        .map(|p| pairs::PairSet::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let label_set = args
        .labels
        .as_deref()
        .map(classify::LabelSet::load)
        .transpose()?;
    let group_set = args
        .groups
        .as_deref()
        .map(groups::GroupSet::load)
        .transpose()?;
    let vectors = RawEmbeddings::load_logged(&args.vectors)?;
    let info = VectorsInfo {
        path: args.vectors.clone(),
        format: vectors.format,
        words: vectors.len(),
        dim: vectors.dim(),
    };
    // Classification uses the raw rows; the searches below, unit rows.
    let labels = label_set
        .map(|set| {
            let protocol = classify::Protocol {
                fractions: args.label_fractions.clone(),
                splits: args.label_splits as usize,
                seed: args.label_seed,
                c: args.label_c,
                tolerance: args.label_tol,
                max_iterations: args.label_max_iter,
            };
            classify::evaluate(
                &set,
                |w| vectors.id(w),
                vectors.matrix(),
                &protocol,
                &args.vectors,
            )
            .with_context(|| format!("node classification with {}", set.path.display()))
        })
        .transpose()?;
    if analogy_sets.is_empty() && pair_sets.is_empty() && group_set.is_none() {
        return Ok(EvalReport {
            vectors: info,
            analogies: Vec::new(),
            similarity: Vec::new(),
            labels,
            groups: None,
        });
    }
    let emb = vectors.into_embeddings();
    let mut analogies = Vec::new();
    for set in &analogy_sets {
        let start = Instant::now();
        let r = analogy::evaluate(&emb, set, limit(args.restrict));
        tracing::info!(file = %set.path.display(), questions = r.total.evaluated, seconds = crate::seconds_since(start), "analogies evaluated");
        analogies.push(r);
    }
    let similarity = pair_sets
        .iter()
        .map(|set| pairs::evaluate(&emb, set, limit(args.similarity_restrict)))
        .collect();
    let groups = group_set.map(|set| {
        let start = Instant::now();
        let r = groups::evaluate(&emb, &set, args.group_queries);
        tracing::info!(file = %set.path.display(), groups = r.groups, seconds = crate::seconds_since(start), "groups evaluated");
        r
    });
    Ok(EvalReport {
        vectors: info,
        analogies,
        similarity,
        labels,
        groups,
    })
}

pub fn run(args: &EvalArgs) -> anyhow::Result<()> {
    let report = evaluate(args)?;
    let out = if args.json {
        serde_json::to_string_pretty(&report).context("JSON report")? + "\n"
    } else {
        table(&report)
    };
    print!("{out}");
    Ok(())
}

fn pct(s: &analogy::Score) -> String {
    format!("{:6.2}%", 100.0 * s.accuracy)
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.4}"))
}

/// The human-readable report.
pub fn table(r: &EvalReport) -> String {
    let mut s = String::new();
    let v = &r.vectors;
    let _ = writeln!(
        s,
        "vectors: {} ({}, {} words, {} dims)",
        v.path.display(),
        v.format,
        v.words,
        v.dim
    );
    for a in &r.analogies {
        let _ = writeln!(
            s,
            "\nanalogies: {} (first {} words; case-insensitive)",
            a.file.display(),
            a.restrict
        );
        let width = a
            .sections
            .iter()
            .map(|x| x.section.chars().count())
            .max()
            .unwrap_or(0)
            .max(10);
        let _ = writeln!(
            s,
            "{:<width$}  {:>9}  {:>7}  {:>16}  {:>16}",
            "section", "questions", "skipped", "3CosAdd", "3CosMul"
        );
        let row = |s: &mut String, x: &analogy::SectionResult| {
            let _ = writeln!(
                s,
                "{:<width$}  {:>9}  {:>7}  {} {:>8}  {} {:>8}",
                x.section,
                x.questions,
                x.skipped,
                pct(&x.cos_add),
                format!("({})", x.cos_add.correct),
                pct(&x.cos_mul),
                format!("({})", x.cos_mul.correct),
            );
        };
        for x in &a.sections {
            row(&mut s, x);
        }
        let _ = writeln!(s, "{}", "-".repeat(width + 58));
        for x in [&a.semantic, &a.syntactic, &a.total] {
            row(&mut s, x);
        }
        let _ = writeln!(
            s,
            "{} of {} questions skipped for words outside the first {} ({:.1}%); accuracy is over the {} evaluated{}",
            a.total.skipped,
            a.total.questions,
            a.restrict,
            if a.total.questions == 0 { 0.0 } else { 100.0 * a.total.skipped as f64 / a.total.questions as f64 },
            a.total.evaluated,
            if a.invalid_lines > 0 { format!("; {} invalid lines ignored", a.invalid_lines) } else { String::new() },
        );
    }
    if !r.similarity.is_empty() {
        let width = r
            .similarity
            .iter()
            .map(|p| p.file.display().to_string().chars().count())
            .max()
            .unwrap_or(0)
            .max(4);
        let _ = writeln!(
            s,
            "\nword similarity (case-insensitive)\n{:<width$}  {:>6}  {:>7}  {:>8}  {:>8}",
            "file", "pairs", "skipped", "spearman", "pearson"
        );
        for p in &r.similarity {
            let _ = writeln!(
                s,
                "{:<width$}  {:>6}  {:>7}  {:>8}  {:>8}",
                p.file.display().to_string(),
                p.pairs,
                p.skipped,
                opt(p.spearman),
                opt(p.pearson)
            );
        }
    }
    if let Some(g) = &r.groups {
        let _ = writeln!(
            s,
            "\nplanted groups: {} ({} groups; recall of a member's group among its k nearest, k = the others)",
            g.file.display(),
            g.groups
        );
        let _ = writeln!(
            s,
            "{:<8}  {:>7}  {:>8}  {:>7}",
            "sample", "groups", "queries", "recall"
        );
        for x in &g.samples {
            let _ = writeln!(
                s,
                "{:<8}  {:>7}  {:>8}  {:>7.4}",
                x.sample, x.groups, x.queries, x.recall
            );
        }
    }
    if let Some(l) = &r.labels {
        labels_table(&mut s, l);
    }
    s
}

fn labels_table(s: &mut String, l: &classify::LabelReport) {
    let _ = writeln!(
        s,
        "\nnode classification: {} ({} labels; one-vs-rest logistic regression, C={}; mean ± std over {} splits, seed {})",
        l.file.display(),
        l.labels.len(),
        l.c,
        l.splits.len(),
        l.seed
    );
    let _ = writeln!(
        s,
        "{:>8}  {:>7}  {:>7}  {:>17}  {:>17}",
        "fraction", "train", "test", "micro-F1", "macro-F1"
    );
    for f in &l.fractions {
        let _ = writeln!(
            s,
            "{:>8}  {:>7}  {:>7}  {:>8.4} ± {:.4}  {:>8.4} ± {:.4}",
            format!("{:.0}%", 100.0 * f.fraction),
            f.train,
            f.test,
            f.micro_f1.mean,
            f.micro_f1.std,
            f.macro_f1.mean,
            f.macro_f1.std
        );
    }
    let _ = write!(
        s,
        "{} labelled nodes, {} with a vector",
        l.labelled_nodes, l.nodes_with_vectors
    );
    if l.nodes_without_vectors > 0 {
        let _ = write!(
            s,
            "; {} without one are left out (e.g. {})",
            l.nodes_without_vectors,
            l.nodes_without_vectors_examples.join(", ")
        );
    }
    let _ = writeln!(s);
    if l.fits_not_converged > 0 {
        let _ = writeln!(
            s,
            "{} of {} logistic regressions stopped with the gradient above {:e} (largest {:.2e})",
            l.fits_not_converged, l.fits, l.gradient_tolerance, l.max_gradient_norm
        );
    }
}
