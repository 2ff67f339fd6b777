//! Streaming corpus reading: whitespace-separated tokens, plain, gzip, xz,
//! zstd or bzip2 (detected from the magic bytes, not the name), any line
//! length, never the whole file in memory. Archives and compressors we cannot
//! read (zip, 7z, rar, tar, lz4, lzip, Unix compress) are recognised by their
//! magic bytes and refused by name, instead of being read as text.
//!
//! A sentence is a line, cut into pieces of at most `max_sentence` tokens (so
//! text8, one 100 MB line, becomes many sentences, as in gensim). Empty lines
//! yield nothing. A sentence holding invalid UTF-8 is, by the reader's
//! [`InvalidUtf8`] policy, an error that names the file, the line and the byte
//! offset (in the decompressed stream), or skipped and counted.

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// word2vec's and gensim's cap on sentence length.
pub const DEFAULT_MAX_SENTENCE: usize = 10_000;

/// Skipped sentences logged as warnings (per reader, or per call of
/// [`for_each_sentence`]); later ones are only counted.
pub const INVALID_UTF8_WARNINGS: u64 = 5;

/// What to do with a sentence that holds invalid UTF-8.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InvalidUtf8 {
    /// Stop with [`CorpusError::InvalidUtf8`].
    #[default]
    Abort,
    /// Skip the sentence (it yields no tokens) and count it.
    Skip,
}

impl std::fmt::Display for InvalidUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Abort => "abort",
            Self::Skip => "skip",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The OS or decoder error is part of the message, not a source: a
    /// report that prints the chain (`{:#}`) would say it twice.
    #[error("{path}: {}", io_text(.error))]
    Io { path: PathBuf, error: io::Error },
    #[error("{path}: invalid UTF-8 at line {line}, byte offset {offset}")]
    InvalidUtf8 {
        path: PathBuf,
        line: u64,
        offset: u64,
    },
    #[error("{path}: this is {format}, which is not supported as a corpus; corpora are text (UTF-8, whitespace-separated tokens), plain or compressed with gzip, xz, zstd or bzip2: {hint}")]
    Unsupported {
        path: PathBuf,
        format: &'static str,
        hint: &'static str,
    },
}

/// An I/O error reading a corpus, said as its cause: a compressed stream
/// that stops early is a truncated file, whatever the decoder calls it.
fn io_text(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        format!("the file ends in the middle of its compressed data (truncated?): {e}")
    } else {
        e.to_string()
    }
}

/// A file format recognised by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Plain,
    Gzip,
    Xz,
    Zstd,
    Bzip2,
    /// Recognised, not readable: (description, what to do instead).
    Unsupported(&'static str, &'static str),
}

/// The format of a stream that starts with `magic` (as many bytes as are
/// available, up to the buffer's size: the tar check needs 262).
fn detect(magic: &[u8]) -> Format {
    const EXTRACT: &str = "extract the text files and pass them to --corpus";
    const RECOMPRESS: &str = "decompress it, or recompress it with gzip, xz or zstd";
    let at = |offset: usize, sig: &[u8]| magic.get(offset..offset + sig.len()) == Some(sig);
    if at(0, &[0x1f, 0x8b]) {
        Format::Gzip
    } else if at(0, &[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Format::Xz
    } else if at(0, &[0x28, 0xb5, 0x2f, 0xfd]) {
        Format::Zstd
    } else if at(0, b"BZh")
        && magic.get(3).is_some_and(|b| (b'1'..=b'9').contains(b))
        // The first block's magic (π), or the end of an empty stream (√π).
        && (at(4, &[0x31, 0x41, 0x59, 0x26, 0x53, 0x59])
            || at(4, &[0x17, 0x72, 0x45, 0x38, 0x50, 0x90]))
    {
        Format::Bzip2
    } else if at(0, b"PK\x03\x04") || at(0, b"PK\x05\x06") || at(0, b"PK\x07\x08") {
        Format::Unsupported("a zip archive", EXTRACT)
    } else if at(0, &[b'7', b'z', 0xbc, 0xaf, 0x27, 0x1c]) {
        Format::Unsupported("a 7z archive", EXTRACT)
    } else if at(0, b"Rar!\x1a\x07") {
        Format::Unsupported("a rar archive", EXTRACT)
    } else if at(257, b"ustar") {
        Format::Unsupported("a tar archive", EXTRACT)
    } else if at(0, &[0x04, 0x22, 0x4d, 0x18]) || at(0, &[0x02, 0x21, 0x4c, 0x18]) {
        Format::Unsupported("lz4-compressed", RECOMPRESS)
    } else if at(0, b"LZIP") {
        Format::Unsupported("lzip-compressed", RECOMPRESS)
    } else if at(0, &[0x1f, 0x9d]) {
        Format::Unsupported("compressed with Unix compress (.Z)", RECOMPRESS)
    } else {
        Format::Plain
    }
}

/// Opens a corpus file, transparently decompressing gzip, xz, zstd and bzip2
/// (concatenated streams too); refuses the archive and compression formats
/// [`detect`] recognises but cannot read, including a tar archive inside a
/// compressed file.
pub fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, CorpusError> {
    let io_err = |error: io::Error| CorpusError::Io {
        path: path.to_path_buf(),
        error,
    };
    let unsupported = |format, hint| CorpusError::Unsupported {
        path: path.to_path_buf(),
        format,
        hint,
    };
    #[allow(
        clippy::disallowed_types,
        clippy::disallowed_methods,
        reason = "CorpusError::Io names the path"
    )]
    let file = std::fs::File::open(path).map_err(io_err)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let magic = reader.fill_buf().map_err(io_err)?;
    let buffered = |r: Box<dyn Read + Send>| -> Box<dyn BufRead + Send> {
        Box::new(BufReader::with_capacity(1 << 20, r))
    };
    let mut boxed: Box<dyn BufRead + Send> = match detect(magic) {
        Format::Plain => return Ok(Box::new(reader)),
        Format::Unsupported(format, hint) => return Err(unsupported(format, hint)),
        Format::Gzip => buffered(Box::new(flate2::bufread::MultiGzDecoder::new(reader))),
        Format::Xz => buffered(Box::new(xz2::bufread::XzDecoder::new_multi_decoder(reader))),
        Format::Zstd => buffered(Box::new(
            zstd::stream::read::Decoder::with_buffer(reader).map_err(io_err)?,
        )),
        Format::Bzip2 => buffered(Box::new(bzip2::bufread::MultiBzDecoder::new(reader))),
    };
    // A compressed archive (.tar.gz, .tar.zst, ...) is refused too. Reading
    // the first block here also reports a corrupt stream before any training.
    let inner = boxed.fill_buf().map_err(io_err)?;
    if let Format::Unsupported(format, hint) = detect(inner) {
        return Err(unsupported(format, hint));
    }
    Ok(boxed)
}

/// Reads sentences from one corpus stream.
pub struct SentenceReader {
    inner: Box<dyn Read + Send>,
    path: PathBuf,
    max_sentence: usize,
    buf: Box<[u8]>,
    buf_pos: usize,
    buf_len: usize,
    /// Raw bytes of the current sentence, from its first token on.
    text: Vec<u8>,
    /// Token spans within `text`.
    spans: Vec<(u32, u32)>,
    in_token: bool,
    token_start: usize,
    /// Offset in the stream of the next byte in `buf[buf_pos..]`.
    offset: u64,
    text_offset: u64,
    line: u64,
    text_line: u64,
    eof: bool,
    invalid_utf8: InvalidUtf8,
    /// Sentences skipped for invalid UTF-8 so far.
    skipped: u64,
    /// Skipped sentences to log as warnings.
    warn_limit: u64,
}

/// One sentence: tokens borrowed from the reader's buffer.
pub struct Sentence<'a> {
    text: &'a str,
    spans: &'a [(u32, u32)],
}

impl<'a> Sentence<'a> {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn tokens(&self) -> impl Iterator<Item = &'a str> + '_ {
        let text = self.text;
        self.spans
            .iter()
            .map(move |&(s, e)| &text[s as usize..e as usize])
    }
}

impl SentenceReader {
    pub fn open(path: &Path, max_sentence: usize) -> Result<Self, CorpusError> {
        let inner = open(path)?;
        Ok(Self::new(inner, path, max_sentence))
    }

    pub fn new(inner: impl Read + Send + 'static, path: &Path, max_sentence: usize) -> Self {
        Self {
            inner: Box::new(inner),
            path: path.to_path_buf(),
            max_sentence: max_sentence.max(1),
            buf: vec![0; 1 << 16].into_boxed_slice(),
            buf_pos: 0,
            buf_len: 0,
            text: Vec::new(),
            spans: Vec::new(),
            in_token: false,
            token_start: 0,
            offset: 0,
            text_offset: 0,
            line: 1,
            text_line: 1,
            eof: false,
            invalid_utf8: InvalidUtf8::Abort,
            skipped: 0,
            warn_limit: INVALID_UTF8_WARNINGS,
        }
    }

    /// Sets what to do with a sentence holding invalid UTF-8 (default: abort).
    #[must_use]
    pub fn invalid_utf8(mut self, policy: InvalidUtf8) -> Self {
        self.invalid_utf8 = policy;
        self
    }

    /// Logs at most this many skipped sentences as warnings (default
    /// [`INVALID_UTF8_WARNINGS`]).
    #[must_use]
    pub fn warn_limit(mut self, limit: u64) -> Self {
        self.warn_limit = limit;
        self
    }

    /// Sentences skipped for invalid UTF-8 so far (policy [`InvalidUtf8::Skip`]).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The next non-empty sentence, or `None` at the end of the stream. A
    /// sentence holding invalid UTF-8 is an error, or with
    /// [`InvalidUtf8::Skip`] skipped (counted, and logged while under the
    /// warning limit).
    pub fn next_sentence(&mut self) -> Result<Option<Sentence<'_>>, CorpusError> {
        loop {
            if !self.read_sentence()? {
                return Ok(None);
            }
            let Err(e) = std::str::from_utf8(&self.text) else {
                break;
            };
            let err = self.invalid_utf8_error(&e);
            if self.invalid_utf8 == InvalidUtf8::Abort {
                return Err(err);
            }
            self.skipped += 1;
            if self.skipped <= self.warn_limit {
                tracing::warn!(
                    "{err}: sentence skipped ({} tokens; --invalid-utf8 skip){}",
                    self.spans.len(),
                    if self.skipped == self.warn_limit {
                        "; further ones are counted, not logged"
                    } else {
                        ""
                    }
                );
            }
        }
        // Validated above; checked again rather than trusted without a check.
        let text = std::str::from_utf8(&self.text).map_err(|e| self.invalid_utf8_error(&e))?;
        Ok(Some(Sentence {
            text,
            spans: &self.spans,
        }))
    }

    fn invalid_utf8_error(&self, e: &std::str::Utf8Error) -> CorpusError {
        let before = &self.text[..e.valid_up_to()];
        let newlines = before.iter().filter(|&&b| b == b'\n').count() as u64;
        CorpusError::InvalidUtf8 {
            path: self.path.clone(),
            line: self.text_line + newlines,
            offset: self.text_offset + e.valid_up_to() as u64,
        }
    }

    /// Reads the next non-empty sentence's bytes into `text` and its token
    /// spans into `spans`; false at the end of the stream.
    fn read_sentence(&mut self) -> Result<bool, CorpusError> {
        self.text.clear();
        self.spans.clear();
        self.in_token = false;
        loop {
            if self.buf_pos == self.buf_len {
                if self.eof {
                    break;
                }
                self.refill()?;
                continue;
            }
            let byte = self.buf[self.buf_pos];
            self.buf_pos += 1;
            self.offset += 1;
            if byte.is_ascii_whitespace() {
                if self.in_token {
                    self.end_token();
                }
                if byte == b'\n' {
                    self.line += 1;
                    if !self.spans.is_empty() {
                        break;
                    }
                }
                if !self.text.is_empty() {
                    if self.spans.len() == self.max_sentence {
                        break;
                    }
                    self.text.push(byte);
                }
            } else {
                if self.text.is_empty() {
                    self.text_offset = self.offset - 1;
                    self.text_line = self.line;
                }
                if !self.in_token {
                    self.in_token = true;
                    self.token_start = self.text.len();
                }
                self.text.push(byte);
            }
        }
        if self.in_token {
            self.end_token();
        }
        Ok(!self.spans.is_empty())
    }

    fn end_token(&mut self) {
        self.in_token = false;
        self.spans
            .push((self.token_start as u32, self.text.len() as u32));
    }

    fn refill(&mut self) -> Result<(), CorpusError> {
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => {
                    self.buf_pos = 0;
                    self.buf_len = n;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(CorpusError::Io {
                        path: self.path.clone(),
                        error,
                    })
                }
            }
        }
        Ok(())
    }
}

/// Calls `f` on every sentence of every file, in order; with
/// [`InvalidUtf8::Skip`], returns the number of sentences skipped for invalid
/// UTF-8 (the first [`INVALID_UTF8_WARNINGS`] of all files logged).
pub fn for_each_sentence<E>(
    paths: &[PathBuf],
    max_sentence: usize,
    invalid_utf8: InvalidUtf8,
    mut f: impl FnMut(&Sentence<'_>) -> Result<(), E>,
) -> Result<u64, E>
where
    E: From<CorpusError>,
{
    let mut skipped = 0;
    for path in paths {
        let mut reader = SentenceReader::open(path, max_sentence)?
            .invalid_utf8(invalid_utf8)
            .warn_limit(INVALID_UTF8_WARNINGS.saturating_sub(skipped));
        while let Some(sentence) = reader.next_sentence()? {
            f(&sentence)?;
        }
        skipped += reader.skipped();
    }
    Ok(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sentences(data: &[u8], max: usize) -> Result<Vec<Vec<String>>, CorpusError> {
        let mut r = SentenceReader::new(io::Cursor::new(data.to_vec()), Path::new("mem.txt"), max);
        let mut out = Vec::new();
        while let Some(s) = r.next_sentence()? {
            out.push(s.tokens().map(str::to_string).collect());
        }
        Ok(out)
    }

    #[test]
    fn splits_lines_and_caps_length() {
        let got = sentences(b"  a bb\tccc \n\n\r\n d e f g h\n", 3).expect("valid");
        assert_eq!(
            got,
            vec![vec!["a", "bb", "ccc"], vec!["d", "e", "f"], vec!["g", "h"]]
        );
        assert!(sentences(b"", 3).expect("valid").is_empty());
        assert!(sentences(b"\n\n  \n", 3).expect("valid").is_empty());
        let got = sentences("héllo wörld".as_bytes(), 10).expect("valid");
        assert_eq!(got, vec![vec!["héllo", "wörld"]]);
    }

    #[test]
    fn invalid_utf8_names_file_line_and_offset() {
        let err = sentences(b"ok line\nbad \xff token\n", 10).expect_err("invalid utf-8");
        let msg = err.to_string();
        assert!(
            msg.contains("mem.txt") && msg.contains("line 2") && msg.contains("offset 12"),
            "{msg}"
        );
    }

    #[test]
    fn long_line_streams_in_pieces() {
        // 100 MB on one line, like text8: read in 10,000-token sentences.
        let word = b"abcdefghi ";
        let reps = 10_000_000;
        struct Repeat(&'static [u8], usize, usize);
        impl Read for Repeat {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let mut n = 0;
                while n < out.len() && self.1 < self.2 {
                    let i = self.1 % self.0.len();
                    out[n] = self.0[i];
                    n += 1;
                    self.1 += 1;
                }
                Ok(n)
            }
        }
        let mut r =
            SentenceReader::new(Repeat(word, 0, word.len() * reps), Path::new("big"), 10_000);
        let (mut count, mut tokens) = (0, 0);
        while let Some(s) = r.next_sentence().expect("valid") {
            count += 1;
            tokens += s.len();
            assert!(s.len() <= 10_000);
        }
        assert_eq!(tokens, reps);
        assert_eq!(count, reps / 10_000);
    }

    #[test]
    fn reads_gzip_and_xz_by_magic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = b"one two\nthree\n";
        let gz_path = dir.path().join("c.data");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(plain).expect("gzip");
        fs_err::write(&gz_path, gz.finish().expect("gzip")).expect("write");
        let xz_path = dir.path().join("c2.data");
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(plain).expect("xz");
        fs_err::write(&xz_path, xz.finish().expect("xz")).expect("write");
        for p in [gz_path, xz_path] {
            let mut all = Vec::new();
            for_each_sentence::<CorpusError>(&[p], 100, InvalidUtf8::Abort, |s| {
                all.push(s.tokens().map(str::to_string).collect::<Vec<_>>());
                Ok(())
            })
            .expect("reads");
            assert_eq!(all, vec![vec!["one", "two"], vec!["three"]]);
        }
    }

    fn read_all(path: &Path) -> Result<Vec<Vec<String>>, CorpusError> {
        let mut all = Vec::new();
        for_each_sentence::<CorpusError>(&[path.to_path_buf()], 100, InvalidUtf8::Abort, |s| {
            all.push(s.tokens().map(str::to_string).collect::<Vec<_>>());
            Ok(())
        })?;
        Ok(all)
    }

    #[test]
    fn reads_zstd_and_bzip2_by_magic_with_concatenated_streams() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (part1, part2) = (b"one two\n".as_slice(), "thrée\nfour\n".as_bytes());
        let zst = |data: &[u8]| zstd::encode_all(data, 3).expect("zstd");
        let bz2 = |data: &[u8]| {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            e.write_all(data).expect("bzip2");
            e.finish().expect("bzip2")
        };
        for (name, compress) in [
            ("c.zst", &zst as &dyn Fn(&[u8]) -> Vec<u8>),
            ("c.bz2", &bz2),
        ] {
            // Two streams back to back, as `cat a.zst b.zst` or pbzip2 write.
            let mut data = compress(part1);
            data.extend(compress(part2));
            let path = dir.path().join(name);
            fs_err::write(&path, data).expect("write");
            assert_eq!(
                read_all(&path).expect(name),
                vec![vec!["one", "two"], vec!["thrée"], vec!["four"]],
                "{name}"
            );
        }
    }

    #[test]
    fn unreadable_archives_are_named_not_invalid_utf8() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut tar = vec![0u8; 1024];
        tar[..9].copy_from_slice(b"words.txt");
        tar[257..263].copy_from_slice(b"ustar\0");
        let mut tar_gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        tar_gz.write_all(&tar).expect("gzip");
        let cases: [(&str, Vec<u8>, &str); 6] = [
            (
                "c.zip",
                b"PK\x03\x04\x14\x00\x00\x00\x08\x00garbage".to_vec(),
                "zip archive",
            ),
            (
                "c.7z",
                b"7z\xbc\xaf\x27\x1c\x00\x04garbage".to_vec(),
                "7z archive",
            ),
            (
                "c.lz4",
                b"\x04\x22\x4d\x18\x64\x40\xa7garbage".to_vec(),
                "lz4",
            ),
            ("c.tar", tar.clone(), "tar archive"),
            ("c.tar.gz", tar_gz.finish().expect("gzip"), "tar archive"),
            (
                "c.rar",
                b"Rar!\x1a\x07\x01\x00garbage".to_vec(),
                "rar archive",
            ),
        ];
        for (name, data, format) in cases {
            let path = dir.path().join(name);
            fs_err::write(&path, data).expect("write");
            let msg = read_all(&path).expect_err(name).to_string();
            assert!(
                msg.contains(&path.display().to_string())
                    && msg.contains(format)
                    && msg.contains("not supported")
                    && !msg.contains("UTF-8 at"),
                "{name}: {msg}"
            );
        }
        // Text that merely starts like a magic number is still text.
        let path = dir.path().join("bzh.txt");
        fs_err::write(&path, "BZh9 is a word\nPK too\n").expect("write");
        assert_eq!(read_all(&path).expect("text").len(), 2);
    }

    fn skipping(data: &[u8], max: usize) -> (Vec<Vec<String>>, u64) {
        let mut r = SentenceReader::new(io::Cursor::new(data.to_vec()), Path::new("mem.txt"), max)
            .invalid_utf8(InvalidUtf8::Skip);
        let mut out = Vec::new();
        while let Some(s) = r.next_sentence().expect("skip never fails on UTF-8") {
            out.push(s.tokens().map(str::to_string).collect());
        }
        (out, r.skipped())
    }

    #[test]
    fn skip_policy_drops_only_the_bad_sentences_and_counts_them() {
        let (got, skipped) = skipping(b"ok line\nbad \xff token\nnext \xc3\x28\nlast one\n", 10);
        assert_eq!(got, vec![vec!["ok", "line"], vec!["last", "one"]]);
        assert_eq!(skipped, 2);
        // On a long line only the 3-token piece holding the bad byte goes.
        let (got, skipped) = skipping(b"a b c d \xff e f g h i\nj\n", 3);
        assert_eq!(
            got,
            vec![
                vec!["a", "b", "c"],
                vec!["f", "g", "h"],
                vec!["i"],
                vec!["j"]
            ]
        );
        assert_eq!(skipped, 1);
        // A bad byte at the very end of the stream, no newline.
        let (got, skipped) = skipping(b"x y\nz \xfe", 10);
        assert_eq!((got, skipped), (vec![vec!["x".to_string(), "y".into()]], 1));
        // The default policy still aborts.
        assert!(sentences(b"ok\n\xff\n", 10).is_err());
    }

    #[test]
    fn for_each_sentence_sums_skips_over_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.txt");
        let b = dir.path().join("b.txt");
        fs_err::write(&a, b"one \xff\ntwo\n").expect("write");
        fs_err::write(&b, b"\xc0 x\nthree\n\xff\n").expect("write");
        let mut words = Vec::new();
        let skipped = for_each_sentence::<CorpusError>(&[a, b], 100, InvalidUtf8::Skip, |s| {
            words.extend(s.tokens().map(str::to_string));
            Ok(())
        })
        .expect("skips");
        assert_eq!(
            (words, skipped),
            (vec!["two".to_string(), "three".into()], 3)
        );
    }

    #[test]
    fn missing_file_is_named() {
        let err = SentenceReader::open(Path::new("/nonexistent/corpus.txt"), 10)
            .err()
            .expect("missing file");
        assert!(err.to_string().contains("/nonexistent/corpus.txt"), "{err}");
    }
}
