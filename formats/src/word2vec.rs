//! word2vec's text and binary vector formats, as gensim's
//! `KeyedVectors.load_word2vec_format` reads them: a header line `V D`, then
//! per word `word v1 … vD\n` (text, shortest round-trip decimal) or
//! `word ` + D little-endian f32 + `\n` (binary). Words are UTF-8 and never
//! contain ASCII whitespace (the corpus reader splits on it), so no escaping
//! is needed; a word that does (a vocabulary built some other way) is refused
//! with an error rather than written into a file that would read back wrong.
//!
//! Reading tells text from binary by the first record: it is text when it
//! parses as a text line with D numbers.

use crate::out::{check_word, in_file, Out};
use crate::{Error, Format};
use ndarray::Array2;
use rayon::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How a word2vec file stores its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// ` v1 … vD`: shortest round-trip decimals.
    Text,
    /// ` ` + D little-endian f32.
    Binary,
}

/// Writes a word2vec file, row by row in vocabulary order.
pub struct Word2vecWriter {
    out: Out,
    encoding: Encoding,
}

impl Word2vecWriter {
    /// Creates the file and writes its header for `vocab` rows of `dim` values.
    pub fn create(path: &Path, encoding: Encoding, vocab: u64, dim: u32) -> Result<Self, Error> {
        let mut out = Out::create(path)?;
        writeln!(out.w, "{vocab} {dim}").map_err(|e| in_file(path, e))?;
        Ok(Self { out, encoding })
    }

    pub fn write(&mut self, word: &str, row: &[f32]) -> Result<(), Error> {
        check_word(word, &self.out.path)?;
        let w = &mut self.out.w;
        let written = (|| {
            w.write_all(word.as_bytes())?;
            match self.encoding {
                Encoding::Text => {
                    for x in row {
                        write!(w, " {x}")?;
                    }
                }
                Encoding::Binary => {
                    w.write_all(b" ")?;
                    for x in row {
                        w.write_all(&x.to_le_bytes())?;
                    }
                }
            }
            w.write_all(b"\n")
        })();
        written.map_err(|e| in_file(&self.out.path, e))
    }

    pub fn finish(self) -> Result<PathBuf, Error> {
        self.out.finish()
    }
}

/// Parses the `V D` header line; returns (V, D, offset of the first record).
fn header(path: &Path, bytes: &[u8]) -> Result<(usize, usize, usize), Error> {
    let bad = |msg: String| Error::Format {
        path: path.to_path_buf(),
        msg,
    };
    let end = bytes
        .iter()
        .take(256)
        .position(|b| *b == b'\n')
        .ok_or_else(|| {
            bad("not HDF5 and no word2vec header line `<words> <dim>` at the start".into())
        })?;
    let line = std::str::from_utf8(&bytes[..end])
        .map_err(|_| bad("the word2vec header line is not text".into()))?;
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    let parsed = match fields[..] {
        [v, d] => v.parse::<usize>().ok().zip(d.parse::<usize>().ok()),
        _ => None,
    };
    let (v, d) = parsed.ok_or_else(|| {
        bad(format!(
            "not HDF5, and the first line {line:?} is not a word2vec header `<words> <dim>`"
        ))
    })?;
    if d == 0 && v > 0 {
        return Err(bad("the word2vec header says dimension 0".into()));
    }
    // Every value takes at least one byte (text: a digit; binary: four), so
    // a header promising more values than the file holds is refused before
    // anything is allocated for them.
    let body = bytes.len() - (end + 1);
    if d > body || v.checked_mul(d).is_none_or(|values| values > body) {
        return Err(bad(format!(
            "the word2vec header says {v} words × {d} dimensions, more values than the \
             {body} bytes after it can hold (truncated file, or not word2vec)"
        )));
    }
    Ok((v, d, end + 1))
}

/// Reads a word2vec file (text or binary) whose content is `bytes`.
pub(crate) fn read(path: &Path, bytes: &[u8]) -> Result<(Format, Vec<String>, Array2<f32>), Error> {
    let (v, d, start) = header(path, bytes)?;
    let body = &bytes[start..];
    let first_line = body.split(|b| *b == b'\n').next().unwrap_or(&[]);
    if v == 0 || parse_text_line(first_line, d).is_ok() {
        let (w, m) = read_text(path, body, v, d)?;
        Ok((Format::Word2vecText, w, m))
    } else {
        let (w, m) = read_binary(path, body, v, d)?;
        Ok((Format::Word2vecBinary, w, m))
    }
}

/// One text record: `word v1 … vD`, fields separated by ASCII whitespace.
fn parse_text_line(line: &[u8], dim: usize) -> Result<(String, Vec<f32>), String> {
    let line = std::str::from_utf8(line).map_err(|e| format!("not UTF-8 ({e})"))?;
    let mut fields = line.split_ascii_whitespace();
    let word = fields.next().ok_or("empty line")?;
    let mut row = Vec::with_capacity(dim);
    for f in fields {
        let x = f
            .parse::<f32>()
            .map_err(|_| format!("word {word:?}: {f:?} is not a number"))?;
        row.push(x);
    }
    if row.len() != dim {
        return Err(format!(
            "word {word:?} has {} values, the header says {dim}",
            row.len()
        ));
    }
    Ok((word.to_owned(), row))
}

fn read_text(
    path: &Path,
    body: &[u8],
    v: usize,
    d: usize,
) -> Result<(Vec<String>, Array2<f32>), Error> {
    let lines: Vec<&[u8]> = body
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take(v)
        .collect();
    // Fewer lines than the header says shows as a short list or an empty last line.
    if lines.len() < v || lines.last().is_some_and(|l| l.is_empty()) {
        let have = lines.iter().filter(|l| !l.is_empty()).count();
        return Err(Error::Format {
            path: path.to_path_buf(),
            msg: format!("word2vec text: the header says {v} words, the file has {have}"),
        });
    }
    let parsed: Vec<(String, Vec<f32>)> = lines
        .par_iter()
        .enumerate()
        .map(|(i, l)| {
            parse_text_line(l, d).map_err(|msg| Error::Format {
                path: path.to_path_buf(),
                msg: format!("line {}: {msg}", i + 2),
            })
        })
        .collect::<Result<_, _>>()?;
    let mut words = Vec::with_capacity(v);
    let mut data = Vec::with_capacity(v * d);
    for (w, row) in parsed {
        words.push(w);
        data.extend_from_slice(&row);
    }
    let matrix = Array2::from_shape_vec((v, d), data).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        msg: format!("word2vec text: {e}"),
    })?;
    Ok((words, matrix))
}

/// word2vec binary records: `word` + b' ' + D little-endian f32, each record
/// optionally followed by b'\n' (read like gensim: newlines before a word are skipped).
fn read_binary(
    path: &Path,
    body: &[u8],
    v: usize,
    d: usize,
) -> Result<(Vec<String>, Array2<f32>), Error> {
    let bad = |msg: String| Error::Format {
        path: path.to_path_buf(),
        msg: format!("word2vec binary: {msg}"),
    };
    let mut words = Vec::with_capacity(v);
    let mut data = vec![0f32; v * d];
    let mut pos = 0usize;
    for (i, row) in data.chunks_exact_mut(d.max(1)).take(v).enumerate() {
        while body.get(pos) == Some(&b'\n') {
            pos += 1;
        }
        let rest = &body[pos..];
        let space = rest
            .iter()
            .take(4096)
            .position(|b| *b == b' ')
            .ok_or_else(|| {
                bad(format!(
                    "record {} of {v}: no word followed by a space (file truncated or not word2vec)",
                    i + 1
                ))
            })?;
        let word = std::str::from_utf8(&rest[..space])
            .map_err(|e| bad(format!("record {}: the word is not UTF-8 ({e})", i + 1)))?;
        let floats = rest.get(space + 1..space + 1 + 4 * d).ok_or_else(|| {
            bad(format!(
                "record {} ({word:?}): truncated, expected {d} float32 values",
                i + 1
            ))
        })?;
        for (x, b) in row.iter_mut().zip(floats.chunks_exact(4)) {
            *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        words.push(word.to_owned());
        pos += space + 1 + 4 * d;
    }
    if words.len() != v {
        return Err(bad(format!(
            "the header says {v} words, read {}",
            words.len()
        )));
    }
    let matrix = Array2::from_shape_vec((v, d), data).map_err(|e| bad(e.to_string()))?;
    Ok((words, matrix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_refuse_words_with_ascii_whitespace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = dir.path().join("v.txt");
        let b = dir.path().join("v.bin");
        let mut text = Word2vecWriter::create(&t, Encoding::Text, 2, 1).expect("create");
        let mut binary = Word2vecWriter::create(&b, Encoding::Binary, 2, 1).expect("create");
        text.write("ok\u{a0}word", &[1.0])
            .expect("NBSP is not ASCII whitespace");
        for bad in ["two words", "tab\there", "new\nline", "cr\r", ""] {
            let e = text.write(bad, &[1.0]).expect_err(bad).to_string();
            assert!(e.contains("v.txt"), "{e}");
            let e = binary.write(bad, &[1.0]).expect_err(bad).to_string();
            assert!(e.contains("v.bin"), "{e}");
        }
    }

    #[test]
    fn written_files_read_back_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let words = ["the", "çé", "x\u{a0}y"];
        let rows = [
            [0.1f32, -3.0e-7, f32::MAX],
            [1.0 / 3.0, -0.0, f32::MIN_POSITIVE],
            [123_456.79, 2.5, -1.0e20],
        ];
        let (t, b) = (dir.path().join("v.txt"), dir.path().join("v.bin"));
        let mut text = Word2vecWriter::create(&t, Encoding::Text, 3, 3).expect("create");
        let mut binary = Word2vecWriter::create(&b, Encoding::Binary, 3, 3).expect("create");
        for (w, r) in words.iter().zip(&rows) {
            text.write(w, r).expect("write");
            binary.write(w, r).expect("write");
        }
        assert_eq!(text.finish().expect("finish"), t);
        assert_eq!(binary.finish().expect("finish"), b);
        for (path, format) in [(&t, Format::Word2vecText), (&b, Format::Word2vecBinary)] {
            let v = crate::read_vectors(path).expect("read");
            assert_eq!(v.format, format);
            assert_eq!(v.words, words);
            let bits: Vec<u32> = v.matrix.iter().map(|x| x.to_bits()).collect();
            let want: Vec<u32> = rows.iter().flatten().map(|x| x.to_bits()).collect();
            assert_eq!(bits, want, "{format}");
        }
    }
}
