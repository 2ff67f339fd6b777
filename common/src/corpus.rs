//! Streaming corpus reading: whitespace-separated tokens, plain, gzip or xz
//! (detected from the magic bytes, not the name), any line length, never the
//! whole file in memory.
//!
//! A sentence is a line, cut into pieces of at most `max_sentence` tokens (so
//! text8, one 100 MB line, becomes many sentences, as in gensim). Empty lines
//! yield nothing. Invalid UTF-8 is an error that names the file, the line and
//! the byte offset (in the decompressed stream).

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// word2vec's and gensim's cap on sentence length.
pub const DEFAULT_MAX_SENTENCE: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: invalid UTF-8 at line {line}, byte offset {offset}")]
    InvalidUtf8 {
        path: PathBuf,
        line: u64,
        offset: u64,
    },
}

/// Opens a corpus file, transparently decompressing gzip and xz.
pub fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, CorpusError> {
    let io_err = |source: io::Error| CorpusError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let magic = reader.fill_buf().map_err(io_err)?;
    let boxed: Box<dyn BufRead + Send> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::bufread::MultiGzDecoder::new(reader),
        ))
    } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Box::new(BufReader::with_capacity(
            1 << 20,
            xz2::bufread::XzDecoder::new_multi_decoder(reader),
        ))
    } else {
        Box::new(reader)
    };
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
        }
    }

    /// The next non-empty sentence, or `None` at the end of the stream.
    pub fn next_sentence(&mut self) -> Result<Option<Sentence<'_>>, CorpusError> {
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
        if self.spans.is_empty() {
            return Ok(None);
        }
        let text = match std::str::from_utf8(&self.text) {
            Ok(t) => t,
            Err(e) => {
                let before = &self.text[..e.valid_up_to()];
                let newlines = before.iter().filter(|&&b| b == b'\n').count() as u64;
                return Err(CorpusError::InvalidUtf8 {
                    path: self.path.clone(),
                    line: self.text_line + newlines,
                    offset: self.text_offset + e.valid_up_to() as u64,
                });
            }
        };
        Ok(Some(Sentence {
            text,
            spans: &self.spans,
        }))
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
                Err(source) => {
                    return Err(CorpusError::Io {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
        Ok(())
    }
}

/// Calls `f` on every sentence of every file, in order.
pub fn for_each_sentence<E>(
    paths: &[PathBuf],
    max_sentence: usize,
    mut f: impl FnMut(&Sentence<'_>) -> Result<(), E>,
) -> Result<(), E>
where
    E: From<CorpusError>,
{
    for path in paths {
        let mut reader = SentenceReader::open(path, max_sentence)?;
        while let Some(sentence) = reader.next_sentence()? {
            f(&sentence)?;
        }
    }
    Ok(())
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
        std::fs::write(&gz_path, gz.finish().expect("gzip")).expect("write");
        let xz_path = dir.path().join("c2.data");
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(plain).expect("xz");
        std::fs::write(&xz_path, xz.finish().expect("xz")).expect("write");
        for p in [gz_path, xz_path] {
            let mut all = Vec::new();
            for_each_sentence::<CorpusError>(&[p], 100, |s| {
                all.push(s.tokens().map(str::to_string).collect::<Vec<_>>());
                Ok(())
            })
            .expect("reads");
            assert_eq!(all, vec![vec!["one", "two"], vec!["three"]]);
        }
    }

    #[test]
    fn missing_file_is_named() {
        let err = SentenceReader::open(Path::new("/nonexistent/corpus.txt"), 10)
            .err()
            .expect("missing file");
        assert!(err.to_string().contains("/nonexistent/corpus.txt"), "{err}");
    }
}
