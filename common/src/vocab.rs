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
use crate::words::WordTable;
use rustc_hash::FxHashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    /// The OS error is part of the message, not a source: a report that
    /// prints the chain (`{:#}`) would say it twice.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}:{line}: {msg}")]
    Parse {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    /// Not in Colonnade's order or format: [`Vocab::load`] reads such files
    /// whole and sorts them; the streaming readers refuse them.
    #[error("{path}:{line}: {msg}")]
    Order {
        path: PathBuf,
        line: u64,
        msg: String,
    },
    #[error("vocabulary is empty after applying min-count {min_count} (corpus had {distinct} distinct words)")]
    Empty { min_count: u64, distinct: usize },
    #[error("vocabulary of {0} words exceeds the u32 id space")]
    TooLarge(usize),
}

impl VocabError {
    /// This error of the file given by command-line flag `flag` (`--vocab`)
    /// at `path`, naming the flag and the path once: `cannot read --vocab
    /// v.tsv: No such file or directory (os error 2)`, `--vocab v.tsv:3:
    /// invalid count "x"`.
    pub fn for_flag(&self, flag: &str, path: &Path) -> String {
        match self {
            Self::Io { path: p, error } if p == path => {
                format!("cannot read {flag} {}: {error}", path.display())
            }
            Self::Parse { path: p, line, msg } | Self::Order { path: p, line, msg }
                if p == path =>
            {
                match line {
                    0 => format!("{flag} {}: {msg}", path.display()),
                    n => format!("{flag} {}:{n}: {msg}", path.display()),
                }
            }
            other => format!("{flag} {}: {other}", path.display()),
        }
    }
}

/// Longest part of a line or word an error quotes.
const QUOTED_CHARS: usize = 80;

/// `text` quoted for an error message, cut after [`QUOTED_CHARS`]
/// characters with its length in bytes: the offending "word" of a corpus
/// given as a vocabulary is its whole first line (100 MB for text8), and
/// an error must not echo it.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// The vocabulary: its words (compactly, [`WordTable`]) and their counts
/// with the fingerprint ([`VocabCounts`], shared with whoever needs only
/// those).
#[derive(Clone, Debug)]
pub struct Vocab {
    words: WordTable,
    counts: Arc<VocabCounts>,
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
        let bytes = pairs.iter().map(|(w, _)| w.len()).sum();
        let mut words = WordTable::with_capacity(pairs.len(), bytes);
        let mut counts = Vec::with_capacity(pairs.len());
        for (w, c) in pairs {
            // Callers pass distinct words (a counter's keys, checked files).
            let _ = words.push(&w);
            counts.push(c);
        }
        Ok(Self::from_sorted(words, counts))
    }

    /// A vocabulary from words already in Colonnade's order (count
    /// descending, then bytes ascending) and their counts; an entry out of
    /// order is an error.
    pub fn from_ordered(words: WordTable, counts: Vec<u64>) -> Result<Self, VocabError> {
        if words.len() != counts.len() {
            return Err(VocabError::Order {
                path: PathBuf::new(),
                line: 0,
                msg: format!("{} words, {} counts", words.len(), counts.len()),
            });
        }
        for i in 1..words.len() {
            let (a, b) = (i as u32 - 1, i as u32);
            let ordered = counts[i - 1] > counts[i]
                || (counts[i - 1] == counts[i]
                    && words.get(a).as_bytes() < words.get(b).as_bytes());
            if !ordered {
                return Err(VocabError::Order {
                    path: PathBuf::new(),
                    line: i as u64 + 1,
                    msg: format!(
                        "{} out of order after {}",
                        quoted(words.get(b)),
                        quoted(words.get(a))
                    ),
                });
            }
        }
        if u32::try_from(words.len()).is_err() {
            return Err(VocabError::TooLarge(words.len()));
        }
        Ok(Self::from_sorted(words, counts))
    }

    /// A vocabulary from words already in Colonnade's order and their counts.
    fn from_sorted(words: WordTable, counts: Vec<u64>) -> Self {
        debug_assert_eq!(words.len(), counts.len());
        let mut h = Xxh3::new();
        for (w, c) in words.iter().zip(&counts) {
            h.update(w.as_bytes());
            h.update(&[0xff]);
            h.update(&c.to_le_bytes());
        }
        let counts = VocabCounts::new(counts, h.digest());
        Self {
            words,
            counts: Arc::new(counts),
        }
    }

    /// Loads a vocabulary file (see the module docs for the format): one
    /// in Colonnade's order is read entry by entry into the compact tables;
    /// any other (word2vec's `-save-vocab`, a hand-made file) is read whole
    /// and sorted.
    pub fn load(path: &Path) -> Result<Self, VocabError> {
        match Self::load_sorted(path) {
            Err(VocabError::Order { .. }) => Self::load_any_order(path),
            other => other,
        }
    }

    /// [`Vocab::load`] of a file in Colonnade's order.
    fn load_sorted(path: &Path) -> Result<Self, VocabError> {
        let mut reader = VocabReader::open(path)?;
        let mut words = WordTable::default();
        let mut counts = Vec::new();
        while let Some((word, count)) = reader.next_entry()? {
            if let Err(first) = words.push(word) {
                let msg = format!("duplicate word {} (the word of id {first})", quoted(word));
                return Err(VocabError::Parse {
                    path: path.to_path_buf(),
                    line: reader.lineno,
                    msg,
                });
            }
            counts.push(count);
        }
        reader.finish()?;
        Self::at_least_two(Self::from_sorted(words, counts), path)
    }

    fn at_least_two(vocab: Self, path: &Path) -> Result<Self, VocabError> {
        if vocab.len() < 2 {
            return Err(VocabError::Parse {
                path: path.to_path_buf(),
                line: 0,
                msg: format!("a vocabulary needs at least 2 words, found {}", vocab.len()),
            });
        }
        if u32::try_from(vocab.len()).is_err() {
            return Err(VocabError::TooLarge(vocab.len()));
        }
        Ok(vocab)
    }

    /// [`Vocab::load`] of a file in any order: read whole, then sorted.
    fn load_any_order(path: &Path) -> Result<Self, VocabError> {
        let io_err = |error| VocabError::Io {
            path: path.to_path_buf(),
            error,
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
                // A corpus given as the vocabulary ends here, on its first line.
                return Err(parse(format!(
                    "invalid word {}: empty or contains whitespace the corpus reader splits on \
                     (a vocabulary file has one `word<TAB>count` per line, as `colonnade vocab` \
                     writes it: is this a corpus?)",
                    quoted(word)
                )));
            }
            if let Some(why) = crate::words::unwritable(word) {
                return Err(parse(format!("word {} {why}", quoted(word))));
            }
            let count: u64 = count
                .trim()
                .parse()
                .map_err(|e| parse(format!("invalid count {}: {e}", quoted(count))))?;
            if let Some(prev) = seen.insert(word.to_owned(), lineno) {
                return Err(parse(format!(
                    "duplicate word {} (first on line {prev})",
                    quoted(word)
                )));
            }
            pairs.push((word.to_owned(), count));
        }
        Self::at_least_two(Self::from_pairs(pairs, None)?, path)
    }

    /// Writes the vocabulary file.
    pub fn save(&self, path: &Path) -> Result<(), VocabError> {
        let mut w = VocabWriter::create(path)?;
        for (word, count) in self.words.iter().zip(self.counts()) {
            w.push(word, *count)?;
        }
        w.finish().map(|_| ())
    }

    /// xxh3-64 over (word bytes, 0xFF, count as u64 LE) in id order.
    pub fn fingerprint(&self) -> u64 {
        self.counts.fingerprint
    }

    pub fn id(&self, word: &str) -> Option<u32> {
        self.words.id(word)
    }

    pub fn word(&self, id: u32) -> &str {
        self.words.get(id)
    }

    /// The words in id order.
    pub fn words(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.words.iter()
    }

    pub fn counts(&self) -> &[u64] {
        &self.counts.counts
    }

    /// The counts and the fingerprint, without the words.
    pub fn counts_only(&self) -> Arc<VocabCounts> {
        Arc::clone(&self.counts)
    }

    /// Σ counts: word2vec's `train_words`.
    pub fn total_count(&self) -> u64 {
        self.counts.total
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.words.heap_bytes() + self.counts.counts.capacity() * 8
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// Writes a vocabulary file entry by entry, without holding it: the
/// entries go to a temporary file beside it, and [`VocabWriter::finish`]
/// writes the header (which needs their number and fingerprint) and then
/// them, under a temporary name renamed when complete. The caller gives
/// them in Colonnade's order; a writer dropped unfinished leaves no file.
pub struct VocabWriter {
    path: PathBuf,
    body_path: PathBuf,
    /// None once finished.
    body: Option<BufWriter<fs_err::File>>,
    hasher: Xxh3,
    words: u64,
}

impl VocabWriter {
    pub fn create(path: &Path) -> Result<Self, VocabError> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".entries.tmp");
        let body_path = path.with_file_name(name);
        let file = fs_err::File::create(&body_path).map_err(|error| VocabError::Io {
            path: body_path.clone(),
            error,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            body_path,
            body: Some(BufWriter::with_capacity(1 << 20, file)),
            hasher: Xxh3::new(),
            words: 0,
        })
    }

    pub fn push(&mut self, word: &str, count: u64) -> Result<(), VocabError> {
        self.hasher.update(word.as_bytes());
        self.hasher.update(&[0xff]);
        self.hasher.update(&count.to_le_bytes());
        self.words += 1;
        let body_path = &self.body_path;
        let body = self.body.as_mut().ok_or_else(|| VocabError::Io {
            path: body_path.clone(),
            error: std::io::Error::other("the vocabulary writer has finished"),
        })?;
        writeln!(body, "{word}\t{count}").map_err(|error| VocabError::Io {
            path: body_path.clone(),
            error,
        })
    }

    /// Writes the file: the header, then the entries. Returns the number of
    /// words and the fingerprint.
    pub fn finish(mut self) -> Result<(u64, u64), VocabError> {
        let fingerprint = self.hasher.digest();
        let body_err = |error| VocabError::Io {
            path: self.body_path.clone(),
            error,
        };
        if let Some(body) = self.body.take() {
            if let Err(e) = body.into_inner() {
                let _ = fs_err::remove_file(&self.body_path);
                return Err(body_err(e.into_error()));
            }
        }
        let out_err = |error| VocabError::Io {
            path: self.path.clone(),
            error,
        };
        // The whole file under a temporary name, renamed when complete: a
        // full disk leaves no truncated vocabulary behind.
        let mut name = std::ffi::OsString::from(".");
        name.push(self.path.file_name().unwrap_or_default());
        name.push(format!(".colonnade-tmp-{}", std::process::id()));
        let staged = self.path.with_file_name(name);
        let written = (|| {
            let file = fs_err::File::create(&staged)?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            writeln!(
                out,
                "# colonnade vocabulary v1: word<TAB>count; {} words, fingerprint {fingerprint:016x}",
                self.words
            )?;
            let mut entries = fs_err::File::open(&self.body_path)?;
            std::io::copy(&mut entries, &mut out)?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            fs_err::rename(&staged, &self.path)
        })();
        let _ = fs_err::remove_file(&self.body_path);
        if let Err(e) = written {
            let _ = fs_err::remove_file(&staged);
            return Err(out_err(e));
        }
        Ok((self.words, fingerprint))
    }
}

impl Drop for VocabWriter {
    fn drop(&mut self) {
        if self.body.take().is_some() {
            let _ = fs_err::remove_file(&self.body_path);
        }
    }
}

/// A vocabulary file read entry by entry in id order, holding one line at
/// a time: for the components that need each word once, in order (the
/// exporter writing 20M words), or only the counts ([`VocabCounts`]). The
/// file must be in Colonnade's order (count descending, then bytes
/// ascending), as `colonnade vocab` and [`Vocab::save`] write it: an entry
/// out of order is an error naming its line, and when the first line holds
/// the fingerprint, [`VocabReader::finish`] checks it. Files in another order
/// (word2vec's `-save-vocab`) load with [`Vocab::load`], which sorts.
pub struct VocabReader {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    line: Vec<u8>,
    lineno: u64,
    /// The previous entry's count and word, for the order check.
    prev_count: u64,
    prev_word: Vec<u8>,
    entries: u64,
    hasher: Xxh3,
    /// From the header line: the number of words and the fingerprint.
    header: Option<(u64, u64)>,
}

impl VocabReader {
    /// Opens `path` and reads its header line, if any.
    pub fn open(path: &Path) -> Result<Self, VocabError> {
        #[allow(
            clippy::disallowed_types,
            clippy::disallowed_methods,
            reason = "VocabError::Io names the path"
        )]
        let file = std::fs::File::open(path).map_err(|error| VocabError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            reader: Box::new(std::io::BufReader::with_capacity(1 << 20, file)),
            line: Vec::new(),
            lineno: 0,
            prev_count: u64::MAX,
            prev_word: Vec::new(),
            entries: 0,
            hasher: Xxh3::new(),
            header: None,
        })
    }

    /// Words and fingerprint the header line announces, once it is read (after
    /// the first [`VocabReader::next`]).
    pub fn header(&self) -> Option<(u64, u64)> {
        self.header
    }

    fn error(&self, msg: String) -> VocabError {
        VocabError::Parse {
            path: self.path.clone(),
            line: self.lineno,
            msg,
        }
    }

    /// The next entry (word, count), or None at the end of the file.
    pub fn next_entry(&mut self) -> Result<Option<(&str, u64)>, VocabError> {
        loop {
            self.line.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|error| VocabError::Io {
                    path: self.path.clone(),
                    error,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.lineno += 1;
            let mut raw: &[u8] = &self.line;
            raw = raw.strip_suffix(b"\n").unwrap_or(raw);
            raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            if raw.is_empty() {
                continue;
            }
            if self.lineno == 1 && raw.starts_with(b"# colonnade vocabulary") {
                self.header = parse_header(raw);
                continue;
            }
            let Some(tab) = raw.iter().position(|&b| b == b'\t') else {
                return Err(VocabError::Order {
                    path: self.path.clone(),
                    line: self.lineno,
                    msg: "expected `word<TAB>count` (a file in word2vec's `word count` format \
                          loads whole, with `Vocab::load`)"
                        .into(),
                });
            };
            let (word, count) = (&raw[..tab], &raw[tab + 1..]);
            let word =
                std::str::from_utf8(word).map_err(|e| self.error(format!("invalid UTF-8: {e}")))?;
            if word.is_empty() || word.bytes().any(|b| b.is_ascii_whitespace()) {
                return Err(self.error(format!(
                    "invalid word {}: empty or contains whitespace the corpus reader splits on",
                    quoted(word)
                )));
            }
            if let Some(why) = crate::words::unwritable(word) {
                return Err(self.error(format!("word {} {why}", quoted(word))));
            }
            let count: u64 = std::str::from_utf8(count)
                .ok()
                .and_then(|c| c.trim().parse().ok())
                .ok_or_else(|| {
                    self.error(format!(
                        "invalid count {}",
                        quoted(&String::from_utf8_lossy(count))
                    ))
                })?;
            let in_order = count < self.prev_count
                || (count == self.prev_count && word.as_bytes() > self.prev_word.as_slice());
            if !in_order {
                return Err(VocabError::Order {
                    path: self.path.clone(),
                    line: self.lineno,
                    msg: format!(
                        "{} ({count}) is out of order after {} ({}): entries must be by count \
                     descending, then bytes ascending, as `colonnade vocab` writes them",
                        quoted(word),
                        quoted(&String::from_utf8_lossy(&self.prev_word)),
                        self.prev_count
                    ),
                });
            }
            self.prev_count = count;
            self.prev_word.clear();
            self.prev_word.extend_from_slice(word.as_bytes());
            self.hasher.update(word.as_bytes());
            self.hasher.update(&[0xff]);
            self.hasher.update(&count.to_le_bytes());
            self.entries += 1;
            let word = std::str::from_utf8(&self.prev_word)
                .map_err(|e| self.error(format!("invalid UTF-8: {e}")))?;
            return Ok(Some((word, count)));
        }
    }

    /// Ends the reading: the number of entries and the fingerprint of what
    /// was read, checked against the header's when the whole file was read.
    pub fn finish(self) -> Result<(u64, u64), VocabError> {
        let fingerprint = self.hasher.digest();
        if let Some((words, expected)) = self.header {
            if words != self.entries || expected != fingerprint {
                return Err(VocabError::Parse {
                    path: self.path,
                    line: 1,
                    msg: format!(
                        "the header announces {words} words with fingerprint {expected:016x}, the \
                         file holds {} with fingerprint {fingerprint:016x}: it was changed after \
                         it was written",
                        self.entries
                    ),
                });
            }
        }
        Ok((self.entries, fingerprint))
    }
}

/// `# colonnade vocabulary v1: ...; N words, fingerprint HEX`.
fn parse_header(line: &[u8]) -> Option<(u64, u64)> {
    let line = std::str::from_utf8(line).ok()?;
    let (_, tail) = line.rsplit_once("; ")?;
    let (words, fp) = tail.split_once(" words, fingerprint ")?;
    Some((
        words.trim().parse().ok()?,
        u64::from_str_radix(fp.trim(), 16).ok()?,
    ))
}

/// A vocabulary's counts in id order and its fingerprint, without its words:
/// what training needs when the corpus is already word ids (8 bytes a word
/// rather than a hash map of strings).
#[derive(Clone, Debug)]
pub struct VocabCounts {
    pub counts: Vec<u64>,
    pub fingerprint: u64,
    /// Σ counts.
    pub total: u64,
}

impl VocabCounts {
    /// Reads the counts of a vocabulary file in Colonnade's order
    /// ([`VocabReader`]).
    pub fn load(path: &Path) -> Result<Self, VocabError> {
        let mut reader = VocabReader::open(path)?;
        let mut counts = Vec::new();
        while let Some((_, c)) = reader.next_entry()? {
            counts.push(c);
        }
        let (entries, fingerprint) = reader.finish()?;
        if entries < 2 {
            return Err(VocabError::Parse {
                path: path.to_path_buf(),
                line: 0,
                msg: format!("a vocabulary needs at least 2 words, found {entries}"),
            });
        }
        if u32::try_from(entries).is_err() {
            return Err(VocabError::TooLarge(entries as usize));
        }
        Ok(Self::new(counts, fingerprint))
    }

    fn new(counts: Vec<u64>, fingerprint: u64) -> Self {
        let total = counts.iter().sum();
        Self {
            counts,
            fingerprint,
            total,
        }
    }

    /// Σ counts: word2vec's `train_words`.
    pub fn total_count(&self) -> u64 {
        self.total
    }

    /// The fingerprint of the vocabulary (words and counts).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

#[cfg(test)]
mod tests;
