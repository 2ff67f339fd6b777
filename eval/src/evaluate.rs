//! `colonnade eval`: analogy accuracy ([`analogy`], 3CosAdd and 3CosMul) and
//! word-pair similarity correlation ([`pairs`], Spearman and Pearson) of a
//! vectors file, with the same rules as gensim 4.4's
//! `evaluate_word_analogies` / `evaluate_word_pairs`, so the numbers compare
//! (`tests/python/test_eval_parity.py` checks it). A table by default, JSON
//! with `--json`.

use crate::embeddings::Embeddings;
use crate::{analogy, pairs};
use anyhow::{bail, Context};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// Reading a file; the message names the path (it comes from `fs-err`).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{path}:{line}: {msg}")]
    Parse {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    /// A file with nothing to evaluate in it.
    #[error("{path}: {msg}")]
    Empty { path: PathBuf, msg: String },
}

/// Python's `str.isspace`: Unicode White_Space plus U+001C..U+001F.
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.split()` (no argument).
pub(crate) fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(py_space).filter(|w| !w.is_empty())
}

/// Python's `str.strip()` (no argument).
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// Evaluate vectors on word analogies and word-pair similarity.
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
    if args.analogies.is_empty() && args.similarity.is_empty() {
        bail!("nothing to evaluate: give --analogies FILE and/or --similarity FILE");
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
    let emb = Embeddings::load_logged(&args.vectors)?;
    let mut analogies = Vec::new();
    for set in &analogy_sets {
        let start = Instant::now();
        let r = analogy::evaluate(&emb, set, limit(args.restrict));
        tracing::info!(file = %set.path.display(), questions = r.total.evaluated, seconds = start.elapsed().as_secs_f64(), "analogies evaluated");
        analogies.push(r);
    }
    let similarity = pair_sets
        .iter()
        .map(|set| pairs::evaluate(&emb, set, limit(args.similarity_restrict)))
        .collect();
    Ok(EvalReport {
        vectors: VectorsInfo {
            path: args.vectors.clone(),
            format: emb.format,
            words: emb.len(),
            dim: emb.dim(),
        },
        analogies,
        similarity,
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
    s
}
