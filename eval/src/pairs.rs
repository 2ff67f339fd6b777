//! Word-pair similarity (WordSim-353, SimLex-999, MEN, …), scored the way
//! gensim 4.4's `KeyedVectors.evaluate_word_pairs(restrict_vocab=N,
//! case_insensitive=True, dummy4unknown=False)` scores it:
//!
//! * the file is UTF-8 text (any newline convention); lines starting with `#`
//!   are comments; every other line must split on TAB into exactly 3 fields
//!   `word1, word2, score` with a number as score (surrounding whitespace
//!   allowed), else it is skipped as invalid; the words are taken as they are
//!   (not stripped), upper-cased; a file with no valid line at all is an
//!   error naming its first invalid line (gensim would report 0 pairs);
//! * a pair with a word outside the first N rows (upper-cased lookup, first
//!   row of an upper-cased form) is skipped and counted;
//! * the model's score is the cosine of the two vectors; Spearman's ρ is the
//!   Pearson correlation of the ranks (ties get their average rank, as
//!   `scipy.stats.spearmanr`), reported with Pearson's r.

use crate::embeddings::Embeddings;
use crate::error::EvalError;
use crate::text::{excerpt, py_split, py_strip, utf8};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Pair {
    pub line: u64,
    /// Upper-cased words.
    pub a: String,
    pub b: String,
    pub gold: f64,
}

#[derive(Clone, Debug)]
pub struct PairSet {
    pub path: PathBuf,
    pub pairs: Vec<Pair>,
    /// Non-comment, non-blank lines that are not `word<TAB>word<TAB>number`.
    pub invalid_lines: u64,
}

impl PairSet {
    pub fn load(path: &Path) -> Result<Self, EvalError> {
        Self::parse(path, &fs_err::read(path)?)
    }

    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, EvalError> {
        let text = utf8(path, bytes)?;
        // Python's universal newlines: \r\n and \r end lines too.
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        let mut pairs = Vec::new();
        let mut invalid_lines = 0;
        let mut first_invalid: Option<(u64, &str)> = None;
        let body = text.strip_suffix('\n').unwrap_or(&text);
        for (i, line) in body.split('\n').enumerate() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let parsed = match fields[..] {
                [a, b, score] => parse_py_float(score).map(|gold| Pair {
                    line: i as u64 + 1,
                    a: a.to_uppercase(),
                    b: b.to_uppercase(),
                    gold,
                }),
                _ => None,
            };
            match parsed {
                Some(p) => pairs.push(p),
                None => {
                    invalid_lines += 1;
                    first_invalid.get_or_insert((i as u64 + 1, line));
                }
            }
        }
        if pairs.is_empty() {
            return Err(no_pairs(path, first_invalid));
        }
        Ok(Self {
            path: path.to_path_buf(),
            pairs,
            invalid_lines,
        })
    }
}

/// The error for a file from which no pair parses: its first invalid line,
/// and the format expected.
fn no_pairs(path: &Path, first_invalid: Option<(u64, &str)>) -> EvalError {
    const FORMAT: &str = "word-pair files hold `word1<TAB>word2<TAB>score` lines \
        (exactly 3 TAB-separated fields, a number last; `#` starts a comment), as WordSim-353 and SimLex-999 do";
    let Some((line, text)) = first_invalid else {
        return EvalError::Empty {
            path: path.to_path_buf(),
            msg: format!("no word pairs in the file; {FORMAT}"),
        };
    };
    let shown = excerpt(text);
    let hint = if text.split('\t').count() != 3 && py_split(text).count() == 3 {
        " (this line has 3 fields separated by spaces, not TABs)"
    } else {
        ""
    };
    EvalError::Parse {
        path: path.to_path_buf(),
        line,
        msg: format!(
            "not one word pair could be read; the first invalid line is {shown:?}{hint}; {FORMAT}"
        ),
    }
}

/// Python's `float(s)` for the usual spellings (whitespace around, `inf`, `nan`).
fn parse_py_float(s: &str) -> Option<f64> {
    py_strip(s).parse().ok()
}

#[derive(Clone, Debug, Serialize)]
pub struct PairReport {
    pub file: PathBuf,
    pub restrict: usize,
    /// Valid pairs in the file.
    pub pairs: u64,
    /// Pairs scored (both words among the first `restrict` rows).
    pub evaluated: u64,
    /// Pairs skipped for an unknown word.
    pub skipped: u64,
    /// skipped / pairs, in percent (gensim's `oov_ratio`).
    pub oov_ratio: f64,
    /// None when undefined (fewer than 2 pairs, a constant side, NaN).
    pub spearman: Option<f64>,
    pub pearson: Option<f64>,
    pub invalid_lines: u64,
}

pub fn evaluate(emb: &Embeddings, set: &PairSet, restrict: usize) -> PairReport {
    let fold = emb.case_fold(restrict);
    let mut gold = Vec::new();
    let mut model = Vec::new();
    for p in &set.pairs {
        if let (Some(a), Some(b)) = (fold.get(&p.a), fold.get(&p.b)) {
            gold.push(p.gold);
            model.push(emb.cosine(a, b));
        }
    }
    let total = set.pairs.len() as u64;
    let evaluated = gold.len() as u64;
    PairReport {
        file: set.path.clone(),
        restrict: fold.rows(),
        pairs: total,
        evaluated,
        skipped: total - evaluated,
        oov_ratio: if total == 0 {
            0.0
        } else {
            (total - evaluated) as f64 / total as f64 * 100.0
        },
        spearman: spearman(&gold, &model),
        pearson: pearson(&gold, &model),
        invalid_lines: set.invalid_lines,
    }
}

/// Pearson's r; None for fewer than 2 points, a constant side or NaN.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len();
    if n < 2 || n != y.len() {
        return None;
    }
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    let r = sxy / (sxx.sqrt() * syy.sqrt());
    r.is_finite().then(|| r.clamp(-1.0, 1.0))
}

/// 1-based ranks, ties sharing their average rank (`scipy.stats.rankdata`).
pub fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; x.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && x[order[j]] == x[order[i]] {
            j += 1;
        }
        // Positions i..j (0-based) share the mean of ranks i+1..=j.
        let rank = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = rank;
        }
        i = j;
    }
    ranks
}

/// Spearman's ρ; None where Pearson's r of the ranks is undefined or any value is NaN.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.iter().chain(y).any(|v| v.is_nan()) {
        return None;
    }
    pearson(&average_ranks(x), &average_ranks(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_average_ties() {
        assert_eq!(
            average_ranks(&[3.0, 1.0, 3.0, 2.0, 3.0]),
            vec![4.0, 1.0, 4.0, 2.0, 4.0]
        );
    }

    #[test]
    fn correlations() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [2.0, 4.0, 5.0, 4.5, 10.0];
        // scipy.stats.pearsonr / spearmanr on the same data.
        let r = pearson(&x, &y).expect("r");
        assert!((r - 0.879_452_954_966_893).abs() < 1e-12, "{r}");
        let rho = spearman(&x, &y).expect("rho");
        assert!((rho - 0.9).abs() < 1e-12, "{rho}");
        assert_eq!(pearson(&x, &[1.0; 5]), None);
        assert_eq!(pearson(&[1.0], &[1.0]), None);
    }

    #[test]
    fn parses_like_gensim() {
        let text = "# comment\nTiger\tcat\t7.35\r\nx\ty\n\na\tb\t 1e1 \nq\tr\tnope\n#\ta\tb\t1\nsp ace\tw\tinf";
        let set = PairSet::parse(Path::new("p.tsv"), text.as_bytes()).expect("parse");
        let got: Vec<(&str, &str, f64)> = set
            .pairs
            .iter()
            .map(|p| (p.a.as_str(), p.b.as_str(), p.gold))
            .collect();
        assert_eq!(
            got,
            vec![
                ("TIGER", "CAT", 7.35),
                ("A", "B", 10.0),
                ("SP ACE", "W", f64::INFINITY)
            ]
        );
        assert_eq!(set.invalid_lines, 2);
    }

    #[test]
    fn a_file_without_one_pair_is_an_error_naming_the_first_bad_line() {
        let text = "# MEN-style, space-separated\nsun sunlight 50\nautomobile car 50\n";
        let e = PairSet::parse(Path::new("men.txt"), text.as_bytes())
            .expect_err("no pair parses")
            .to_string();
        assert!(
            e.contains("men.txt:2")
                && e.contains("sun sunlight 50")
                && e.contains("not TABs")
                && e.contains("word1<TAB>word2<TAB>score"),
            "{e}"
        );
        let e = PairSet::parse(Path::new("empty.tsv"), b"# only a comment\n\n")
            .expect_err("no pairs")
            .to_string();
        assert!(
            e.contains("empty.tsv") && e.contains("no word pairs"),
            "{e}"
        );
    }
}
