//! Word analogies ("a is to b as c is to ?"), scored the way gensim 4.4's
//! `KeyedVectors.evaluate_word_analogies(restrict_vocab=N,
//! case_insensitive=True)` scores them, with 3CosMul
//! (`most_similar_cosmul`'s objective) alongside 3CosAdd:
//!
//! * the file is read line by line; `: name` starts a section (name =
//!   the line without its leading `:`/space characters, stripped); any other
//!   line must split (on whitespace) into exactly 4 words, else it is skipped
//!   as invalid; a question before the first section header is an error, and
//!   so is a file without a single question (naming its first invalid line);
//! * words are upper-cased (as Python's `str.upper`) and looked up among the
//!   first N rows, an upper-cased form meaning its first (most frequent) row;
//!   a question with any word outside that set is skipped (counted per section);
//! * candidates are the first N rows except the rows of a, b and c;
//!   3CosAdd ranks by cos(x, b) + cos(x, c) − cos(x, a) (the order of
//!   cos(x, b − a + c) over unit vectors), 3CosMul by
//!   p(x, b)·p(x, c) / (p(x, a) + 1e-6) with p = (1 + cos) / 2;
//! * of the best 5 candidates (ties: lower row first), the prediction is the
//!   first whose upper-cased word is none of a, b, c (if all 5 are, the 5th);
//!   it is correct when its upper-cased word is d's;
//! * "total" adds up every section; "semantic" and "syntactic" add up the
//!   sections whose names do not / do start with `gram` (the Google set's
//!   first 5 sections are semantic).

use crate::embeddings::{CaseFold, Embeddings};
use crate::error::EvalError;
use crate::knn::{self, row_slice, TopK};
use crate::text::{excerpt, py_split, py_strip};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The format an analogy file must have, for errors.
const FORMAT: &str = "analogy files hold `: section` header lines, each followed by \
    questions of exactly 4 whitespace-separated words `a b c d` (a is to b as c is to d), as questions-words.txt does";

/// Candidates gensim looks at (`most_similar(..., topn=5)`).
const TOPN: usize = 5;
/// Questions scored per pass (bounds the per-task state).
const BLOCK_QUESTIONS: usize = 50_000;
/// Distinct question words per pass (bounds the score block).
const BLOCK_WORDS: usize = 4_096;

/// A question: its line number (1-based) and its 4 words, upper-cased.
#[derive(Clone, Debug)]
pub struct Question {
    pub line: u64,
    pub words: [String; 4],
}

#[derive(Clone, Debug)]
pub struct Section {
    pub name: String,
    pub questions: Vec<Question>,
}

#[derive(Clone, Debug)]
pub struct AnalogySet {
    pub path: PathBuf,
    pub sections: Vec<Section>,
    /// Non-blank lines that are neither a section header nor 4 words.
    pub invalid_lines: u64,
}

impl AnalogySet {
    pub fn load(path: &Path) -> Result<Self, EvalError> {
        Self::parse(path, &fs_err::read(path)?)
    }

    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, EvalError> {
        let err = |line: u64, msg: String| EvalError::Parse {
            path: path.to_path_buf(),
            line,
            msg,
        };
        let mut sections: Vec<Section> = Vec::new();
        let mut invalid_lines = 0;
        let mut first_invalid: Option<(u64, &str)> = None;
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        for (i, raw) in body.split(|b| *b == b'\n').enumerate() {
            let line_no = i as u64 + 1;
            let line =
                std::str::from_utf8(raw).map_err(|e| err(line_no, format!("not UTF-8 ({e})")))?;
            if let Some(rest) = line.strip_prefix(": ") {
                let name = py_strip(rest.trim_start_matches([':', ' ']));
                sections.push(Section {
                    name: name.to_owned(),
                    questions: Vec::new(),
                });
                continue;
            }
            let Some(section) = sections.last_mut() else {
                let shown = excerpt(line);
                return Err(err(
                    line_no,
                    format!("{shown:?} comes before the first `: section` header; {FORMAT}"),
                ));
            };
            let words: Vec<&str> = py_split(line).collect();
            match words[..] {
                [a, b, c, d] => section.questions.push(Question {
                    line: line_no,
                    words: [a, b, c, d].map(str::to_uppercase),
                }),
                [] => {}
                _ => {
                    invalid_lines += 1;
                    first_invalid.get_or_insert((line_no, line));
                }
            }
        }
        if sections.iter().all(|s| s.questions.is_empty()) {
            return Err(match first_invalid {
                Some((line, text)) => {
                    let shown = excerpt(text);
                    err(
                        line,
                        format!("not one question could be read; the first invalid line is {shown:?}; {FORMAT}"),
                    )
                }
                None => EvalError::Empty {
                    path: path.to_path_buf(),
                    msg: format!("no analogy questions in the file; {FORMAT}"),
                },
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            sections,
            invalid_lines,
        })
    }
}

/// Correct answers and accuracy (0 when nothing was evaluated, as gensim).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Score {
    pub correct: u64,
    pub accuracy: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SectionResult {
    pub section: String,
    /// Questions (4-word lines) in the section.
    pub questions: u64,
    /// Questions with every word among the first `restrict` rows.
    pub evaluated: u64,
    /// Questions skipped for a word outside the first `restrict` rows.
    pub skipped: u64,
    pub cos_add: Score,
    pub cos_mul: Score,
}

impl SectionResult {
    fn new(section: &str, questions: u64, skipped: u64, add: u64, mul: u64) -> Self {
        let evaluated = questions - skipped;
        let score = |correct: u64| Score {
            correct,
            accuracy: if evaluated == 0 {
                0.0
            } else {
                correct as f64 / evaluated as f64
            },
        };
        Self {
            section: section.to_owned(),
            questions,
            evaluated,
            skipped,
            cos_add: score(add),
            cos_mul: score(mul),
        }
    }

    fn sum<'a>(name: &str, parts: impl Iterator<Item = &'a SectionResult>) -> Self {
        let (mut q, mut s, mut a, mut m) = (0, 0, 0, 0);
        for p in parts {
            q += p.questions;
            s += p.skipped;
            a += p.cos_add.correct;
            m += p.cos_mul.correct;
        }
        Self::new(name, q, s, a, m)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct AnalogyReport {
    pub file: PathBuf,
    /// Rows searched and accepted as question words.
    pub restrict: usize,
    pub sections: Vec<SectionResult>,
    pub semantic: SectionResult,
    pub syntactic: SectionResult,
    pub total: SectionResult,
    pub invalid_lines: u64,
}

/// A question resolved to rows (canonical rows of the upper-cased words).
#[derive(Clone, Copy)]
struct Resolved {
    rows: [u32; 4],
    section: usize,
}

/// The prediction rule of gensim's loop over `most_similar`'s top 5.
fn correct(top: &TopK, fold: &CaseFold, q: &Resolved) -> bool {
    let ignore = &q.rows[..3];
    let mut predicted = None;
    for &(_, row) in top.items() {
        let c = fold.canonical(row);
        predicted = Some(c);
        if !ignore.contains(&c) {
            break;
        }
    }
    predicted == Some(q.rows[3])
}

pub fn evaluate(emb: &Embeddings, set: &AnalogySet, restrict: usize) -> AnalogyReport {
    let fold = emb.case_fold(restrict);
    let rows = fold.rows();
    let mut resolved = Vec::new();
    let mut skipped = vec![0u64; set.sections.len()];
    for (si, section) in set.sections.iter().enumerate() {
        for q in &section.questions {
            let found: Vec<u32> = q.words.iter().filter_map(|w| fold.get(w)).collect();
            match found[..] {
                [a, b, c, d] => resolved.push(Resolved {
                    rows: [a, b, c, d],
                    section: si,
                }),
                _ => skipped[si] += 1,
            }
        }
    }
    let mut add = vec![0u64; set.sections.len()];
    let mut mul = vec![0u64; set.sections.len()];
    let base = emb.base().head(rows);
    let mut rest = &resolved[..];
    while !rest.is_empty() {
        // A block: as many questions as fit the limits on questions and words.
        let mut probe_of: HashMap<u32, usize> = HashMap::new();
        let mut n = 0;
        for q in rest.iter().take(BLOCK_QUESTIONS) {
            let new = q.rows[..3]
                .iter()
                .filter(|r| !probe_of.contains_key(r))
                .count();
            if n > 0 && probe_of.len() + new > BLOCK_WORDS {
                break;
            }
            for r in &q.rows[..3] {
                let next = probe_of.len();
                probe_of.entry(*r).or_insert(next);
            }
            n += 1;
        }
        let (block, tail) = rest.split_at(n);
        rest = tail;
        let mut probe_rows = vec![0u32; probe_of.len()];
        for (&row, &p) in &probe_of {
            probe_rows[p] = row;
        }
        let probes = emb.probes(&probe_rows);
        let tasks: Vec<([usize; 3], [u32; 3])> = block
            .iter()
            .map(|q| {
                let [a, b, c, _] = q.rows;
                ([a, b, c].map(|r| probe_of[&r]), [a, b, c])
            })
            .collect();
        let init = [TopK::new(TOPN), TopK::new(TOPN)];
        let tops = knn::scan(
            base,
            probes.view(),
            block.len(),
            &init,
            |t, scores, start, top, buf| {
                let ([pa, pb, pc], [ra, rb, rc]) = tasks[t];
                let (sa, sb, sc) = (scores.row(pa), scores.row(pb), scores.row(pc));
                let (sa, sb, sc) = (row_slice(&sa), row_slice(&sb), row_slice(&sc));
                let triples = || sa.iter().zip(sb.iter()).zip(sc.iter());
                let skip = |row: u32| row == ra || row == rb || row == rc;
                let [add, mul] = top;
                buf.clear();
                buf.extend(triples().map(|((a, b), c)| b + c - a));
                add.push_slice(start, buf, skip);
                let p = |x: f32| (1.0 + x) / 2.0;
                buf.clear();
                buf.extend(triples().map(|((a, b), c)| (p(*b) * p(*c)) / (p(*a) + 1e-6)));
                mul.push_slice(start, buf, skip);
            },
        );
        for (q, [t_add, t_mul]) in block.iter().zip(&tops) {
            add[q.section] += u64::from(correct(t_add, &fold, q));
            mul[q.section] += u64::from(correct(t_mul, &fold, q));
        }
    }
    let sections: Vec<SectionResult> = set
        .sections
        .iter()
        .enumerate()
        .map(|(i, s)| {
            SectionResult::new(
                &s.name,
                s.questions.len() as u64,
                skipped[i],
                add[i],
                mul[i],
            )
        })
        .collect();
    let syntactic = |s: &&SectionResult| s.section.starts_with("gram");
    AnalogyReport {
        file: set.path.clone(),
        restrict: rows,
        semantic: SectionResult::sum("semantic", sections.iter().filter(|s| !syntactic(s))),
        syntactic: SectionResult::sum("syntactic", sections.iter().filter(syntactic)),
        total: SectionResult::sum("total", sections.iter()),
        sections,
        invalid_lines: set.invalid_lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colonnade_formats::Format;
    use ndarray::Array2;

    fn emb(words: &[&str], rows: &[[f32; 2]]) -> Embeddings {
        let m = Array2::from_shape_fn((rows.len(), 2), |(i, j)| rows[i][j]);
        Embeddings::from_parts(
            Path::new("mem"),
            Format::Hdf5,
            words.iter().map(|w| (*w).to_owned()).collect(),
            m,
        )
    }

    #[test]
    fn parses_like_gensim() {
        let text = "junk before? no: a question line first is an error\n";
        assert!(AnalogySet::parse(Path::new("q.txt"), text.as_bytes()).is_err());
        let text =
            ": :capital  \na b c d\n\nonly three words\nÄ b\u{2003}c d e\n: gram1-x\nA B C D\n";
        let set = AnalogySet::parse(Path::new("q.txt"), text.as_bytes()).expect("parse");
        assert_eq!(set.sections.len(), 2);
        assert_eq!(set.sections[0].name, "capital");
        assert_eq!(set.sections[0].questions.len(), 1);
        assert_eq!(set.sections[0].questions[0].words, ["A", "B", "C", "D"]);
        assert_eq!(set.sections[1].name, "gram1-x");
        assert_eq!(set.invalid_lines, 2);
    }

    #[test]
    fn a_file_without_one_question_is_an_error_naming_the_first_bad_line() {
        let text = ": capital\nathens,greece,baghdad,iraq\nparis france\n";
        let e = AnalogySet::parse(Path::new("q.csv"), text.as_bytes())
            .expect_err("no question parses")
            .to_string();
        assert!(
            e.contains("q.csv:2") && e.contains("athens,greece") && e.contains("`a b c d`"),
            "{e}"
        );
        let e = AnalogySet::parse(Path::new("h.txt"), b": only\n: headers\n\n")
            .expect_err("no questions")
            .to_string();
        assert!(
            e.contains("h.txt") && e.contains("no analogy questions"),
            "{e}"
        );
        let e = AnalogySet::parse(Path::new("p.tsv"), b"tiger\tcat\t7.35\n")
            .expect_err("a pairs file")
            .to_string();
        assert!(e.contains("p.tsv:1") && e.contains("`: section`"), "{e}");
    }

    #[test]
    fn three_cos_add_and_mul_on_a_tiny_space() {
        // Expected counts are gensim 4.4's on the same vectors (its
        // evaluate_word_analogies, and most_similar_cosmul in the same loop).
        let e = emb(
            &["man", "woman", "king", "queen", "King", "apple", "Woman"],
            &[
                [1.0, 0.1],
                [1.0, 0.5],
                [0.6, 0.8],
                [0.5, 1.0],
                [0.6, 0.81],
                [-1.0, 0.0],
                // Along king + woman − man: the best 3CosAdd candidate, but
                // it upper-cases to a question word, so it is passed over.
                [0.399, 0.917],
            ],
        );
        let text =
            ": family\nman king woman queen\nman woman king queen\n: gram\nman apple king pear\n";
        let set = AnalogySet::parse(Path::new("q.txt"), text.as_bytes()).expect("parse");
        let r = evaluate(&e, &set, 30_000);
        assert_eq!(r.restrict, 7);
        assert_eq!(r.sections[0].evaluated, 2);
        assert_eq!(r.sections[1].skipped, 1);
        assert_eq!((r.total.questions, r.total.evaluated), (3, 2));
        assert_eq!(r.semantic.questions, 2);
        assert_eq!(r.syntactic.skipped, 1);
        assert_eq!(r.sections[0].cos_add.correct, 2);
        // 3CosMul prefers "apple", opposite to "man": p(x, man) ≈ 0.
        assert_eq!(r.sections[0].cos_mul.correct, 0);
        assert_eq!(r.total.cos_add.accuracy, 1.0);
        // Within the first 4 rows only "queen" is left.
        let r = evaluate(&e, &set, 4);
        assert_eq!(r.restrict, 4);
        assert_eq!(r.sections[0].cos_add.correct, 2);
        assert_eq!(r.sections[0].cos_mul.correct, 2);
    }
}
