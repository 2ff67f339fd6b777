//! Trained vectors as `eval` and `similar` use them: every cosine a dot
//! product with unit rows, an exact word index, and gensim's
//! case-insensitive lookup over the most frequent rows. Rows keep the file's
//! order (frequency order for Colonnade's outputs).
//!
//! Two layouts behind one [`Embeddings`]:
//!
//! * **mapped**: an HDF5 file whose `vectors` are contiguous, uncompressed
//!   native f32 (Colonnade's default output) is used in place from a
//!   read-only memory map ([`colonnade_formats::MappedRows`]). The rows stay
//!   as stored; each row's inverse L2 norm is computed once (4 bytes a row)
//!   and the searches multiply each row's scores by it ([`knn::Base`]).
//!   The matrix costs page cache, shared and evictable, not the process's
//!   own memory.
//! * **loaded**: every other file (compressed or chunked HDF5, word2vec text
//!   and binary) is read into memory and its rows normalised in place.
//!
//! Either way the words live in one [`WordTable`] (one arena, an offset and
//! a 4-byte index slot a word), one entry per row: a word repeated in a
//! foreign file keeps each of its rows, and the index finds its first.
//! A probe row ([`Embeddings::unit_row`]) is normalised the same way in
//! both layouts, so the two agree to the last bit or two of a cosine.

use crate::knn::Base;
use colonnade_common::words::WordTable;
use colonnade_formats::{open_vectors, Format, MappedRows, Rows};
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Words upper-cased at a time by [`Embeddings::case_fold`] (bounds the
/// strings alive at once).
const FOLD_BLOCK: usize = 65_536;

/// A vector file's words and rows as stored (not normalised): what node
/// classification uses, and what [`Embeddings`] are made from.
pub struct RawEmbeddings {
    pub path: PathBuf,
    pub format: Format,
    /// One entry per row.
    words: WordTable,
    rows: Rows,
}

impl RawEmbeddings {
    /// Opens `path` in any format [`colonnade_formats::open_vectors`] reads:
    /// the rows mapped when the file allows it, else loaded.
    pub fn load(path: &Path) -> Result<Self, colonnade_formats::Error> {
        let mut words = WordTable::default();
        let opened = open_vectors(path, |w| {
            words.push_row(w);
        })?;
        debug_assert_eq!(words.len(), opened.rows.view().nrows());
        Ok(Self {
            path: path.to_path_buf(),
            format: opened.format,
            words,
            rows: opened.rows,
        })
    }

    /// [`RawEmbeddings::load`] for the commands: the error names the file
    /// and the load is logged with its layout (`vectors mapped` or `vectors
    /// loaded`), format, shape and time.
    pub fn load_logged(path: &Path) -> anyhow::Result<Self> {
        let start = Instant::now();
        let raw = Self::load(path).map_err(|e| {
            anyhow::anyhow!(e).context(format!("cannot read vectors {}", path.display()))
        })?;
        let seconds = crate::seconds_since(start);
        let (file, format) = (path.display(), raw.format);
        let (words, dim, word_bytes) = (raw.len(), raw.dim(), raw.words.heap_bytes());
        if raw.is_mapped() {
            tracing::info!(%file, %format, words, dim, word_bytes, seconds, "vectors mapped");
        } else {
            tracing::info!(%file, %format, words, dim, word_bytes, seconds, "vectors loaded");
        }
        Ok(raw)
    }

    /// Builds from words and a matrix held in memory, one row per word.
    pub fn from_parts(path: &Path, format: Format, words: &[String], matrix: Array2<f32>) -> Self {
        assert_eq!(words.len(), matrix.nrows(), "one word per row");
        let mut table = WordTable::with_capacity(words.len(), words.iter().map(String::len).sum());
        for w in words {
            table.push_row(w);
        }
        Self {
            path: path.to_path_buf(),
            format,
            words: table,
            rows: Rows::Loaded(matrix),
        }
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.rows.view().ncols()
    }

    /// Whether the rows are used in place from a memory map.
    pub fn is_mapped(&self) -> bool {
        self.rows.is_mapped()
    }

    /// The first row holding exactly `word`.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.words.id(word)
    }

    /// The rows as stored.
    pub fn matrix(&self) -> ArrayView2<'_, f32> {
        self.rows.view()
    }

    /// Unit rows for the searches: loaded rows normalised in place, mapped
    /// rows given their inverse norms (computed in parallel).
    pub fn into_embeddings(self) -> Embeddings {
        let start = Instant::now();
        let unit = match self.rows {
            Rows::Loaded(matrix) => {
                let mut unit = if matrix.is_standard_layout() {
                    matrix
                } else {
                    matrix.as_standard_layout().into_owned()
                };
                let dim = unit.ncols();
                if dim > 0 {
                    let data = unit
                        .as_slice_mut()
                        .expect("a standard-layout matrix is one slice");
                    data.par_chunks_mut(dim).for_each(normalize);
                }
                Unit::Loaded(unit)
            }
            Rows::Mapped(rows) => {
                let dim = rows.dim();
                let inv_norm = if dim > 0 {
                    rows.as_slice().par_chunks(dim).map(inverse_norm).collect()
                } else {
                    vec![1.0; rows.rows()]
                };
                tracing::info!(
                    rows = inv_norm.len(),
                    seconds = crate::seconds_since(start),
                    "row norms computed"
                );
                Unit::Mapped { rows, inv_norm }
            }
        };
        Embeddings {
            path: self.path,
            format: self.format,
            words: self.words,
            unit,
        }
    }
}

/// The rows in one of the two layouts (see the module doc).
enum Unit {
    /// Row i is word i's vector divided by its L2 norm (all-zero rows stay zero).
    Loaded(Array2<f32>),
    /// The file's rows, and `inv_norm[i]` = 1 / row i's L2 norm (1 for an
    /// all-zero row).
    Mapped {
        rows: MappedRows,
        inv_norm: Vec<f32>,
    },
}

/// Words and their unit-length vectors, in file order.
pub struct Embeddings {
    pub path: PathBuf,
    pub format: Format,
    /// One entry per row.
    words: WordTable,
    unit: Unit,
}

/// Case-insensitive lookup over the first `limit` rows, as gensim's
/// `case_insensitive=True` builds it: each word is upper-cased (full Unicode
/// mapping, like Python's `str.upper`) and an upper-cased form maps to its
/// first, i.e. most frequent, row.
pub struct CaseFold {
    /// The distinct upper-cased forms, in order of first row.
    uppers: WordTable,
    /// `first_row[id]`: the row of upper-cased form `id`'s first occurrence.
    first_row: Vec<u32>,
    /// `canonical[i]`: the row that row i's upper-cased word maps to.
    canonical: Vec<u32>,
}

impl CaseFold {
    /// The row for `word` (already upper-cased), if one of the first `limit` rows has it.
    pub fn get(&self, upper: &str) -> Option<u32> {
        self.uppers.id(upper).map(|id| self.first_row[id as usize])
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
    /// Loads `path` in any format [`colonnade_formats::open_vectors`] reads
    /// (the rows mapped when the file allows it).
    pub fn load(path: &Path) -> Result<Self, colonnade_formats::Error> {
        Ok(RawEmbeddings::load(path)?.into_embeddings())
    }

    /// Builds from words and a raw (not normalised) matrix, one row per word.
    pub fn from_parts(
        path: &Path,
        format: Format,
        words: Vec<String>,
        matrix: Array2<f32>,
    ) -> Self {
        RawEmbeddings::from_parts(path, format, &words, matrix).into_embeddings()
    }

    /// [`Embeddings::load`] for the commands: the error names the file and
    /// the load is logged with its layout, format, shape and time.
    pub fn load_logged(path: &Path) -> anyhow::Result<Self> {
        Ok(RawEmbeddings::load_logged(path)?.into_embeddings())
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn dim(&self) -> usize {
        match &self.unit {
            Unit::Loaded(m) => m.ncols(),
            Unit::Mapped { rows, .. } => rows.dim(),
        }
    }

    /// Whether the rows are used in place from a memory map.
    pub fn is_mapped(&self) -> bool {
        matches!(self.unit, Unit::Mapped { .. })
    }

    /// The words in row order.
    pub fn words(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.words.iter()
    }

    pub fn word(&self, i: u32) -> &str {
        self.words.get(i)
    }

    /// The first row holding exactly `word`.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.words.id(word)
    }

    /// All rows, as the searches ([`crate::knn::scan`]) score against them.
    pub fn base(&self) -> Base<'_> {
        match &self.unit {
            Unit::Loaded(m) => Base::unit(m.view()),
            Unit::Mapped { rows, inv_norm } => Base::scaled(rows.view(), inv_norm),
        }
    }

    /// Row `i` divided by its L2 norm (borrowed when the rows are loaded, a
    /// normalised copy when they are mapped).
    pub fn unit_row(&self, i: u32) -> Cow<'_, [f32]> {
        let i = i as usize;
        match &self.unit {
            Unit::Loaded(m) => Cow::Borrowed(
                m.row(i)
                    .to_slice()
                    .expect("rows of a standard-layout matrix are contiguous"),
            ),
            Unit::Mapped { rows, .. } => {
                let dim = rows.dim();
                let mut row = rows.as_slice()[i * dim..(i + 1) * dim].to_vec();
                normalize(&mut row);
                Cow::Owned(row)
            }
        }
    }

    /// The unit rows of `rows`, one probe row each, for [`crate::knn::scan`].
    pub fn probes(&self, rows: &[u32]) -> Array2<f32> {
        let dim = self.dim();
        let mut probes = Array2::<f32>::zeros((rows.len(), dim));
        if dim > 0 {
            let data = probes.as_slice_mut().expect("a new matrix is one slice");
            for (dst, &r) in data.chunks_exact_mut(dim).zip(rows) {
                dst.copy_from_slice(&self.unit_row(r));
            }
        }
        probes
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
        let mut uppers = WordTable::default();
        let mut first_row = Vec::new();
        let mut canonical = Vec::with_capacity(n);
        for start in (0..n).step_by(FOLD_BLOCK) {
            let end = (start + FOLD_BLOCK).min(n);
            let block: Vec<String> = (start..end)
                .into_par_iter()
                .map(|i| self.word(i as u32).to_uppercase())
                .collect();
            for (i, u) in (start..end).zip(&block) {
                let row = match uppers.push(u) {
                    Ok(_) => {
                        first_row.push(i as u32);
                        i as u32
                    }
                    Err(id) => first_row[id as usize],
                };
                canonical.push(row);
            }
        }
        CaseFold {
            uppers,
            first_row,
            canonical,
        }
    }
}

/// A row's L2 norm, accumulated in f64.
fn norm(row: &[f32]) -> f32 {
    row.iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt() as f32
}

/// Divides `row` by its L2 norm (an all-zero row stays zero).
fn normalize(row: &mut [f32]) {
    let norm = norm(row);
    if norm > 0.0 {
        for x in row {
            *x /= norm;
        }
    }
}

/// What a mapped row's scores are multiplied by: 1 / its L2 norm, or 1 for
/// the rows [`normalize`] leaves as they are (all zero).
fn inverse_norm(row: &[f32]) -> f32 {
    let norm = norm(row);
    if norm > 0.0 {
        1.0 / norm
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(cf.get("THE"), Some(1));
        assert_eq!(cf.canonical(1), 1);
        assert_eq!(cf.canonical(2), 0);
        assert_eq!(cf.canonical(3), 0);
        assert_eq!(cf.get("STRASSE"), None, "row 4 is beyond the limit");
        assert_eq!(e.case_fold(10).get("STRASSE"), Some(4));
    }

    #[test]
    fn a_repeated_word_keeps_its_rows_and_finds_the_first() {
        let words = ["a", "b", "a"].map(String::from).to_vec();
        let m = Array2::from_shape_fn((3, 2), |(i, j)| (i + j) as f32);
        let e = Embeddings::from_parts(Path::new("mem"), Format::Word2vecText, words, m);
        assert_eq!(e.len(), 3);
        assert_eq!(e.word(2), "a");
        assert_eq!(e.id("a"), Some(0));
        assert_eq!(e.words().collect::<Vec<_>>(), ["a", "b", "a"]);
    }
}
