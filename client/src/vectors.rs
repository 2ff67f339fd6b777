//! Reading trained vectors back for `eval` and `similar`: our HDF5 layout
//! (`vectors` f32 [V, D], `words` UTF-8 strings [V]), word2vec text and
//! word2vec binary, told apart by content (HDF5 signature; else a `V D` header
//! whose first record either parses as a text line or not). Rows keep the
//! file's order, which is frequency order for our outputs; they are
//! unit-normalised once on load so that every cosine is a dot product.

use memmap2::Mmap;
use ndarray::{Array2, ArrayView1, ArrayView2};
use rayon::prelude::*;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The first 8 bytes of an HDF5 file (no user block).
const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

#[derive(Debug, thiserror::Error)]
pub enum VectorsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    #[error("{path}: HDF5 {what}: {source}")]
    Hdf5 {
        path: PathBuf,
        what: &'static str,
        source: hdf5::Error,
    },
}

/// The vector file formats we read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Hdf5,
    Word2vecText,
    Word2vecBinary,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Hdf5 => "HDF5",
            Format::Word2vecText => "word2vec text",
            Format::Word2vecBinary => "word2vec binary",
        })
    }
}

/// Words and their unit-length vectors, in file order.
pub struct Embeddings {
    pub path: PathBuf,
    pub format: Format,
    words: Vec<String>,
    /// Row i is word i's vector divided by its L2 norm (all-zero rows stay zero).
    unit: Array2<f32>,
    /// Exact word -> first row holding it.
    index: HashMap<String, u32>,
}

/// Case-insensitive lookup over the first `limit` rows, as gensim's
/// `case_insensitive=True` builds it: each word is upper-cased (full Unicode
/// mapping, like Python's `str.upper`) and an upper-cased form maps to its
/// first, i.e. most frequent, row.
pub struct CaseFold {
    map: HashMap<String, u32>,
    /// `canonical[i]`: the row that row i's upper-cased word maps to.
    canonical: Vec<u32>,
}

impl CaseFold {
    /// The row for `word` (already upper-cased), if one of the first `limit` rows has it.
    pub fn get(&self, upper: &str) -> Option<u32> {
        self.map.get(upper).copied()
    }

    /// The row that row `i`'s upper-cased word maps to (`i` below the limit).
    pub fn canonical(&self, i: u32) -> u32 {
        self.canonical[i as usize]
    }

    /// Rows covered (the limit, capped at the vocabulary size).
    pub fn rows(&self) -> usize {
        self.canonical.len()
    }
}

impl Embeddings {
    /// Loads `path`, detecting its format.
    pub fn load(path: &Path) -> Result<Self, VectorsError> {
        let io = |source| VectorsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and lives only while this function
        // parses it; like every reader of these files we assume nobody
        // truncates or rewrites the file meanwhile.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let bytes: &[u8] = &map;
        let (format, words, matrix) = if bytes.starts_with(HDF5_SIGNATURE) {
            drop(map);
            let (w, m) = read_hdf5(path)?;
            (Format::Hdf5, w, m)
        } else {
            let (format, w, m) = read_word2vec(path, bytes)?;
            (format, w, m)
        };
        Ok(Self::from_parts(path, format, words, matrix))
    }

    /// Builds from words and a raw (not normalised) matrix, one row per word.
    pub fn from_parts(
        path: &Path,
        format: Format,
        words: Vec<String>,
        matrix: Array2<f32>,
    ) -> Self {
        let mut unit = matrix;
        let dim = unit.ncols();
        if dim > 0 {
            if let Some(data) = unit.as_slice_mut() {
                data.par_chunks_mut(dim).for_each(normalize);
            }
        }
        let mut index = HashMap::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            index.entry(w.clone()).or_insert(i as u32);
        }
        Self {
            path: path.to_path_buf(),
            format,
            words,
            unit,
            index,
        }
    }

    /// [`Embeddings::load`] for the commands: the error names the file and
    /// the load is logged with its format, shape and time.
    pub fn load_logged(path: &Path) -> anyhow::Result<Self> {
        let start = std::time::Instant::now();
        let emb = Self::load(path).map_err(|e| {
            anyhow::anyhow!(e).context(format!("cannot read vectors {}", path.display()))
        })?;
        tracing::info!(
            file = %path.display(),
            format = %emb.format,
            words = emb.len(),
            dim = emb.dim(),
            seconds = start.elapsed().as_secs_f64(),
            "vectors loaded"
        );
        Ok(emb)
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.unit.ncols()
    }

    pub fn words(&self) -> &[String] {
        &self.words
    }

    pub fn word(&self, i: u32) -> &str {
        &self.words[i as usize]
    }

    /// The first row holding exactly `word`.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.index.get(word).copied()
    }

    /// All unit rows.
    pub fn unit(&self) -> ArrayView2<'_, f32> {
        self.unit.view()
    }

    pub fn unit_row(&self, i: u32) -> ArrayView1<'_, f32> {
        self.unit.row(i as usize)
    }

    /// Cosine similarity of rows `a` and `b` (accumulated in f64).
    pub fn cosine(&self, a: u32, b: u32) -> f64 {
        self.unit_row(a)
            .iter()
            .zip(self.unit_row(b).iter())
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum()
    }

    /// The case-insensitive lookup over the first `limit` rows.
    pub fn case_fold(&self, limit: usize) -> CaseFold {
        let n = limit.min(self.len());
        let uppers: Vec<String> = self.words[..n]
            .par_iter()
            .map(|w| w.to_uppercase())
            .collect();
        let mut map = HashMap::with_capacity(n);
        let mut canonical = Vec::with_capacity(n);
        for (i, u) in uppers.into_iter().enumerate() {
            canonical.push(*map.entry(u).or_insert(i as u32));
        }
        CaseFold { map, canonical }
    }
}

fn normalize(row: &mut [f32]) {
    let norm = row
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt() as f32;
    if norm > 0.0 {
        for x in row {
            *x /= norm;
        }
    }
}

fn read_hdf5(path: &Path) -> Result<(Vec<String>, Array2<f32>), VectorsError> {
    let h5 = |what: &'static str| {
        move |source| VectorsError::Hdf5 {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    let format = |msg: String| VectorsError::Format {
        path: path.to_path_buf(),
        msg,
    };
    let file = hdf5::File::open(path).map_err(h5("open"))?;
    let ds = file.dataset("vectors").map_err(h5("dataset `vectors`"))?;
    let shape = ds.shape();
    let [rows, dim] = shape[..] else {
        return Err(format(format!(
            "dataset `vectors` has shape {shape:?}, expected [words, dim]"
        )));
    };
    let data: Vec<f32> = ds.read_raw().map_err(h5("reading `vectors`"))?;
    let matrix = Array2::from_shape_vec((rows, dim), data)
        .map_err(|e| format(format!("dataset `vectors`: {e}")))?;
    let words: Vec<hdf5::types::VarLenUnicode> = file
        .dataset("words")
        .map_err(h5("dataset `words`"))?
        .read_raw()
        .map_err(h5("reading `words` (variable-length UTF-8 strings)"))?;
    if words.len() != rows {
        return Err(format(format!(
            "dataset `words` has {} entries, `vectors` has {rows} rows",
            words.len()
        )));
    }
    let words = words.iter().map(|w| w.as_str().to_owned()).collect();
    Ok((words, matrix))
}

/// Parses the `V D` header line; returns (V, D, offset of the first record).
fn w2v_header(path: &Path, bytes: &[u8]) -> Result<(usize, usize, usize), VectorsError> {
    let bad = |msg: String| VectorsError::Format {
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

fn read_word2vec(
    path: &Path,
    bytes: &[u8],
) -> Result<(Format, Vec<String>, Array2<f32>), VectorsError> {
    let (v, d, start) = w2v_header(path, bytes)?;
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
) -> Result<(Vec<String>, Array2<f32>), VectorsError> {
    let lines: Vec<&[u8]> = body
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take(v)
        .collect();
    // Fewer lines than the header says shows as a short list or an empty last line.
    if lines.len() < v || lines.last().is_some_and(|l| l.is_empty()) {
        let have = lines.iter().filter(|l| !l.is_empty()).count();
        return Err(VectorsError::Format {
            path: path.to_path_buf(),
            msg: format!("word2vec text: the header says {v} words, the file has {have}"),
        });
    }
    let parsed: Vec<(String, Vec<f32>)> = lines
        .par_iter()
        .enumerate()
        .map(|(i, l)| {
            parse_text_line(l, d).map_err(|msg| VectorsError::Format {
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
    let matrix = Array2::from_shape_vec((v, d), data).map_err(|e| VectorsError::Format {
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
) -> Result<(Vec<String>, Array2<f32>), VectorsError> {
    let bad = |msg: String| VectorsError::Format {
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
    use std::io::Write;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        let mut f = File::create(&p).expect("create");
        f.write_all(bytes).expect("write");
        p
    }

    #[test]
    fn reads_text_and_binary_alike() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = write(
            dir.path(),
            "v.txt",
            "3 2\nthe 3 4\nçé 0 -2\nx 1e-3 0\n".as_bytes(),
        );
        let mut bin = b"3 2\n".to_vec();
        for (w, r) in [("the", [3f32, 4.]), ("çé", [0., -2.]), ("x", [1e-3, 0.])] {
            bin.extend_from_slice(w.as_bytes());
            bin.push(b' ');
            for x in r {
                bin.extend_from_slice(&x.to_le_bytes());
            }
            bin.push(b'\n');
        }
        let bin = write(dir.path(), "v.bin", &bin);
        let t = Embeddings::load(&text).expect("text");
        let b = Embeddings::load(&bin).expect("binary");
        assert_eq!(t.format, Format::Word2vecText);
        assert_eq!(b.format, Format::Word2vecBinary);
        assert_eq!(t.words(), b.words());
        assert_eq!(t.words(), ["the", "çé", "x"]);
        assert_eq!(t.unit(), b.unit());
        assert_eq!(t.unit_row(0).to_vec(), vec![0.6, 0.8]);
        assert_eq!(t.unit_row(1).to_vec(), vec![0.0, -1.0]);
        assert_eq!(t.id("çé"), Some(1));
    }

    #[test]
    fn a_header_larger_than_the_file_is_refused_before_allocating() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, content) in [
            ("huge.bin", &b"1000000000 1000000\nw \x00\x00\x80\x3f"[..]),
            ("wide.txt", &b"1 1000000000000\nw 1.0\n"[..]),
            (
                "overflow.txt",
                &b"18446744073709551615 18446744073709551615\nw 1\n"[..],
            ),
        ] {
            let p = dir.path().join(name);
            std::fs::write(&p, content).expect("write");
            let Err(e) = Embeddings::load(&p) else {
                panic!("{name}: loaded");
            };
            let e = e.to_string();
            assert!(e.contains(name) && e.contains("more values than"), "{e}");
        }
    }

    #[test]
    fn binary_whose_first_floats_look_like_text_is_still_binary() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 0x20202020 is "    ": a float whose bytes are spaces.
        let mut bin = b"1 3\nab ".to_vec();
        for _ in 0..3 {
            bin.extend_from_slice(b"    ");
        }
        bin.push(b'\n');
        let p = write(dir.path(), "odd.bin", &bin);
        let e = Embeddings::load(&p).expect("binary");
        assert_eq!(e.format, Format::Word2vecBinary);
        assert_eq!(e.words(), ["ab"]);
    }

    #[test]
    fn errors_name_the_file_and_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write(dir.path(), "short.txt", b"2 2\na 1 2\nb 1 x\n");
        let msg = Embeddings::load(&p).err().expect("error").to_string();
        assert!(msg.contains("short.txt") && msg.contains("line 3"), "{msg}");
        let p = write(
            dir.path(),
            "trunc.bin",
            b"2 2\na \x00\x00\x80\x3f\x00\x00\x80\x3fb \x00",
        );
        let msg = Embeddings::load(&p).err().expect("error").to_string();
        assert!(
            msg.contains("trunc.bin") && msg.contains("record 2"),
            "{msg}"
        );
        let p = write(dir.path(), "junk", b"hello world\n");
        let msg = Embeddings::load(&p).err().expect("error").to_string();
        assert!(msg.contains("junk") && msg.contains("header"), "{msg}");
    }

    #[test]
    fn case_fold_keeps_the_most_frequent_variant() {
        let words = ["Paris", "the", "paris", "PARIS", "straße"];
        let m = Array2::from_shape_fn((5, 2), |(i, j)| (i * 2 + j + 1) as f32);
        let e = Embeddings::from_parts(
            Path::new("mem"),
            Format::Hdf5,
            words.iter().map(|w| (*w).to_owned()).collect(),
            m,
        );
        let cf = e.case_fold(4);
        assert_eq!(cf.get("PARIS"), Some(0));
        assert_eq!(cf.canonical(2), 0);
        assert_eq!(cf.canonical(3), 0);
        assert_eq!(cf.get("STRASSE"), None, "row 4 is beyond the limit");
        assert_eq!(e.case_fold(10).get("STRASSE"), Some(4));
    }
}
