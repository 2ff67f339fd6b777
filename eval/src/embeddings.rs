//! Trained vectors as `eval` and `similar` use them: rows unit-normalised
//! once on load, so that every cosine is a dot product, an exact word index,
//! and gensim's case-insensitive lookup over the most frequent rows. Rows keep
//! the file's order (frequency order for Colonnade's outputs).

use colonnade_formats::{read_vectors, Format, Vectors};
use ndarray::{Array2, ArrayView1, ArrayView2};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    /// Loads `path` in any format [`colonnade_formats::read_vectors`] reads.
    pub fn load(path: &Path) -> Result<Self, colonnade_formats::Error> {
        let v = read_vectors(path)?;
        Ok(Self::from_parts(path, v.format, v.words, v.matrix))
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
        let v = read_logged(path)?;
        Ok(Self::from_parts(path, v.format, v.words, v.matrix))
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

/// The file's words and raw (not normalised) rows, for the commands: the
/// error names the file and the read is logged with its format, shape and time.
pub fn read_logged(path: &Path) -> anyhow::Result<Vectors> {
    let start = std::time::Instant::now();
    let v = read_vectors(path).map_err(|e| {
        anyhow::anyhow!(e).context(format!("cannot read vectors {}", path.display()))
    })?;
    tracing::info!(
        file = %path.display(),
        format = %v.format,
        words = v.words.len(),
        dim = v.matrix.ncols(),
        seconds = start.elapsed().as_secs_f64(),
        "vectors loaded"
    );
    Ok(v)
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
        assert_eq!(cf.canonical(2), 0);
        assert_eq!(cf.canonical(3), 0);
        assert_eq!(cf.get("STRASSE"), None, "row 4 is beyond the limit");
        assert_eq!(e.case_fold(10).get("STRASSE"), Some(4));
    }
}
