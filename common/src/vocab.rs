//! The vocabulary: words and their corpus counts, in the order that defines word
//! ids (count descending, then bytes ascending: a pure function of the counts),
//! and its fingerprint.
//!
//! File format (`vocab.tsv`): UTF-8, an optional first line
//! `# colonnade vocabulary ...`, then one `word<TAB>count` per line, the word
//! taken literally (any bytes but ASCII whitespace, so `#tag` and `</s>` are
//! words). word2vec's `-save-vocab` files (`word count`, space-separated, with
//! its `</s>` marker skipped) load too. Loading re-sorts, so every component
//! that loads the same counts assigns the same ids.

use crate::corpus::{for_each_sentence, CorpusError, InvalidUtf8, DEFAULT_MAX_SENTENCE};
use rustc_hash::FxHashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::Xxh3;

#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    #[error(transparent)]
    Corpus(#[from] CorpusError),
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
    #[error("vocabulary is empty after applying min-count {min_count} (corpus had {distinct} distinct words)")]
    Empty { min_count: u64, distinct: usize },
    #[error("vocabulary of {0} words exceeds the u32 id space")]
    TooLarge(usize),
}

#[derive(Clone, Debug)]
pub struct Vocab {
    words: Vec<String>,
    counts: Vec<u64>,
    index: FxHashMap<String, u32>,
}

/// Streaming word counter.
#[derive(Default)]
pub struct Counter {
    counts: FxHashMap<String, u64>,
    pub tokens: u64,
    /// What [`Counter::count_files`] does with a sentence holding invalid
    /// UTF-8 (default: abort). Training must read the corpus with the same
    /// policy, so that a skipped sentence is neither counted nor trained.
    pub invalid_utf8: InvalidUtf8,
    /// Sentences skipped for invalid UTF-8 (policy [`InvalidUtf8::Skip`]).
    pub skipped_sentences: u64,
}

impl Counter {
    /// A counter that treats invalid UTF-8 by `invalid_utf8`.
    pub fn new(invalid_utf8: InvalidUtf8) -> Self {
        Self {
            invalid_utf8,
            ..Self::default()
        }
    }

    pub fn add(&mut self, word: &str) {
        self.tokens += 1;
        if let Some(c) = self.counts.get_mut(word) {
            *c += 1;
        } else {
            self.counts.insert(word.to_owned(), 1);
        }
    }

    /// Counts every token of the given corpus files. Sentences are cut as
    /// training cuts them ([`DEFAULT_MAX_SENTENCE`] tokens), so with
    /// [`InvalidUtf8::Skip`] both drop the same tokens.
    pub fn count_files(&mut self, paths: &[PathBuf]) -> Result<(), CorpusError> {
        let policy = self.invalid_utf8;
        let skipped = for_each_sentence(paths, DEFAULT_MAX_SENTENCE, policy, |s| {
            for t in s.tokens() {
                self.add(t);
            }
            Ok::<(), CorpusError>(())
        })?;
        self.skipped_sentences += skipped;
        Ok(())
    }

    pub fn distinct(&self) -> usize {
        self.counts.len()
    }

    /// The vocabulary of words seen at least `min_count` times, at most
    /// `max_vocab` of the most frequent.
    pub fn into_vocab(self, min_count: u64, max_vocab: Option<usize>) -> Result<Vocab, VocabError> {
        let distinct = self.counts.len();
        let pairs = self
            .counts
            .into_iter()
            .filter(|(_, c)| *c >= min_count.max(1));
        let vocab = Vocab::from_pairs(pairs.collect(), max_vocab)?;
        if vocab.is_empty() {
            return Err(VocabError::Empty {
                min_count,
                distinct,
            });
        }
        Ok(vocab)
    }
}

impl Vocab {
    /// Builds the vocabulary from (word, count) pairs in any order.
    pub fn from_pairs(
        mut pairs: Vec<(String, u64)>,
        max_vocab: Option<usize>,
    ) -> Result<Self, VocabError> {
        pairs.sort_unstable_by(|a, b| {
            b.1.cmp(&a.1)
                .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
        });
        if let Some(max) = max_vocab {
            pairs.truncate(max);
        }
        if u32::try_from(pairs.len()).is_err() {
            return Err(VocabError::TooLarge(pairs.len()));
        }
        let mut index = FxHashMap::with_capacity_and_hasher(pairs.len(), Default::default());
        let mut words = Vec::with_capacity(pairs.len());
        let mut counts = Vec::with_capacity(pairs.len());
        for (i, (w, c)) in pairs.into_iter().enumerate() {
            index.insert(w.clone(), i as u32);
            words.push(w);
            counts.push(c);
        }
        Ok(Self {
            words,
            counts,
            index,
        })
    }

    /// Loads a vocabulary file (see the module docs for the format).
    pub fn load(path: &Path) -> Result<Self, VocabError> {
        let io_err = |source| VocabError::Io {
            path: path.to_path_buf(),
            source,
        };
        #[allow(
            clippy::disallowed_types,
            clippy::disallowed_methods,
            reason = "VocabError::Io names the path"
        )]
        let file = std::fs::File::open(path).map_err(io_err)?;
        let reader = std::io::BufReader::new(file);
        let mut pairs = Vec::new();
        let mut seen = FxHashMap::default();
        for (i, line) in reader.split(b'\n').enumerate() {
            let lineno = i as u64 + 1;
            let parse = |msg: String| VocabError::Parse {
                path: path.to_path_buf(),
                line: lineno,
                msg,
            };
            let raw = line.map_err(io_err)?;
            let line =
                std::str::from_utf8(&raw).map_err(|e| parse(format!("invalid UTF-8: {e}")))?;
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() || (lineno == 1 && line.starts_with("# colonnade vocabulary")) {
                continue;
            }
            // Our format is word<TAB>count, the word taken literally; word2vec's
            // is `word count` with `</s>` as its sentence marker.
            let (word, count) = match line.split_once('\t') {
                Some(pair) => pair,
                None => {
                    let (word, count) = line
                        .rsplit_once(' ')
                        .ok_or_else(|| parse("expected `word<TAB>count`".into()))?;
                    if word == "</s>" {
                        continue;
                    }
                    (word, count)
                }
            };
            if word.is_empty() || word.bytes().any(|b| b.is_ascii_whitespace()) {
                return Err(parse(format!(
                    "invalid word {word:?}: empty or contains whitespace the corpus reader splits on"
                )));
            }
            let count: u64 = count
                .trim()
                .parse()
                .map_err(|e| parse(format!("invalid count {count:?}: {e}")))?;
            if let Some(prev) = seen.insert(word.to_owned(), lineno) {
                return Err(parse(format!(
                    "duplicate word {word:?} (first on line {prev})"
                )));
            }
            pairs.push((word.to_owned(), count));
        }
        let vocab = Self::from_pairs(pairs, None)?;
        if vocab.len() < 2 {
            return Err(VocabError::Parse {
                path: path.to_path_buf(),
                line: 0,
                msg: format!("a vocabulary needs at least 2 words, found {}", vocab.len()),
            });
        }
        Ok(vocab)
    }

    /// Writes the vocabulary file.
    pub fn save(&self, path: &Path) -> Result<(), VocabError> {
        let io_err = |source| VocabError::Io {
            path: path.to_path_buf(),
            source,
        };
        #[allow(
            clippy::disallowed_types,
            clippy::disallowed_methods,
            reason = "VocabError::Io names the path"
        )]
        let file = std::fs::File::create(path).map_err(io_err)?;
        let mut out = BufWriter::new(file);
        writeln!(
            out,
            "# colonnade vocabulary v1: word<TAB>count; {} words, fingerprint {:016x}",
            self.len(),
            self.fingerprint()
        )
        .map_err(io_err)?;
        for (w, c) in self.words.iter().zip(&self.counts) {
            writeln!(out, "{w}\t{c}").map_err(io_err)?;
        }
        out.flush().map_err(io_err)
    }

    /// xxh3-64 over (word bytes, 0xFF, count as u64 LE) in id order.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Xxh3::new();
        for (w, c) in self.words.iter().zip(&self.counts) {
            h.update(w.as_bytes());
            h.update(&[0xff]);
            h.update(&c.to_le_bytes());
        }
        h.digest()
    }

    pub fn id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    pub fn word(&self, id: u32) -> &str {
        &self.words[id as usize]
    }

    pub fn words(&self) -> &[String] {
        &self.words
    }

    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Σ counts: word2vec's `train_words`.
    pub fn total_count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_count_desc_then_bytes() {
        let v = Vocab::from_pairs(
            vec![
                ("b".into(), 3),
                ("a".into(), 3),
                ("z".into(), 9),
                ("é".into(), 3),
                ("c".into(), 1),
            ],
            Some(4),
        )
        .expect("valid");
        assert_eq!(v.words(), ["z", "a", "b", "é"]);
        assert_eq!(v.id("b"), Some(2));
        assert_eq!(v.id("c"), None);
    }

    #[test]
    fn save_load_roundtrip_keeps_fingerprint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("v.tsv");
        let v = Vocab::from_pairs(
            vec![("x".into(), 5), ("yé".into(), 7), ("w".into(), 5)],
            None,
        )
        .expect("valid");
        v.save(&p).expect("save");
        let back = Vocab::load(&p).expect("load");
        assert_eq!(back.words(), v.words());
        assert_eq!(back.fingerprint(), v.fingerprint());
        fs_err::write(&p, "</s> 10\nthe 5\nof 4\n").expect("write");
        assert_eq!(
            Vocab::load(&p).expect("word2vec format").words(),
            ["the", "of"]
        );
    }

    #[test]
    fn counting_skips_invalid_sentences_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("c.txt");
        fs_err::write(&p, b"a a b\nb \xff c\na c\n").expect("write");
        let mut abort = Counter::default();
        let e = abort
            .count_files(std::slice::from_ref(&p))
            .expect_err("aborts by default");
        assert!(e.to_string().contains("line 2"), "{e}");
        let mut skip = Counter::new(InvalidUtf8::Skip);
        skip.count_files(&[p]).expect("skips");
        assert_eq!((skip.tokens, skip.skipped_sentences), (5, 1));
        let v = skip.into_vocab(1, None).expect("vocab");
        assert_eq!(v.words(), ["a", "b", "c"]);
        assert_eq!(v.counts(), [3, 1, 1]);
    }

    #[test]
    fn bad_files_name_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("v.tsv");
        fs_err::write(&p, "a\t1\nb\tx\n").expect("write");
        let e = Vocab::load(&p).expect_err("bad count").to_string();
        assert!(e.contains("v.tsv:2") && e.contains("count"), "{e}");
        fs_err::write(&p, "a\t1\na\t2\n").expect("write");
        let e = Vocab::load(&p).expect_err("duplicate").to_string();
        assert!(e.contains("duplicate"), "{e}");
    }
}
