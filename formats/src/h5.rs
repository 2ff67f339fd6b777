//! The HDF5 layout (docs/formats.md), written row block by row block (words
//! and vectors alike, so a 20M-word export never holds all its words as
//! strings) and read back whole, or (`open`, for [`crate::open_vectors`])
//! with `words` in blocks and contiguous `vectors` used in place: datasets `vectors` f32 [V, D] (input vectors), `words` UTF-8
//! strings [V], `counts` u64 [V], optionally `output_vectors` f32 [V, D]
//! (contiguous, or chunked and deflated), and the [`Provenance`] as root
//! attributes.

use crate::staged::Staged;
use crate::{Error, MappedRows, Provenance, Rows};
use hdf5::types::{TypeDescriptor, VarLenUnicode};
use ndarray::{s, Array2, ArrayView2};
use std::path::{Path, PathBuf};

/// Maps an HDF5 error to [`Error::Hdf5`] naming the file and the step.
fn h5_err(path: &Path, what: impl Into<String>) -> impl FnOnce(hdf5::Error) -> Error {
    let (path, what) = (path.to_path_buf(), what.into());
    move |source| Error::Hdf5 { path, what, source }
}

fn format_err(path: &Path, msg: String) -> Error {
    Error::Format {
        path: path.to_path_buf(),
        msg,
    }
}

/// Writes an HDF5 file under a temporary name ([`Staged`]); it gets its
/// name in [`Hdf5Writer::finish`], and a writer dropped before (a failed
/// write) leaves nothing behind.
pub struct Hdf5Writer {
    /// The name the file will have, for messages.
    path: PathBuf,
    file: hdf5::File,
    vectors: hdf5::Dataset,
    output: Option<hdf5::Dataset>,
    words: hdf5::Dataset,
    /// Rows of `words` written so far (they are written in order).
    words_written: usize,
    rows: usize,
    dim: usize,
    /// Declared last: dropped after the HDF5 handles are closed.
    staged: Staged,
}

fn matrix(
    file: &hdf5::File,
    name: &str,
    rows: usize,
    dim: usize,
    compress: Option<u8>,
) -> hdf5::Result<hdf5::Dataset> {
    let builder = file.new_dataset::<f32>().shape([rows, dim]);
    match compress {
        Some(level) => builder
            .chunk([rows.clamp(1, 4096), dim])
            .deflate(level)
            .create(name),
        None => builder.create(name),
    }
}

/// Writes one root attribute: unsigned integers as uint64, other numbers as
/// float64, anything else as a UTF-8 string (JSON text unless a string).
fn write_attribute(file: &hdf5::File, key: &str, value: &serde_json::Value) -> hdf5::Result<()> {
    match value {
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(u) => file.new_attr::<u64>().create(key)?.write_scalar(&u),
            None => file
                .new_attr::<f64>()
                .create(key)?
                .write_scalar(&n.as_f64().unwrap_or(f64::NAN)),
        },
        other => {
            let text = match other {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let text: VarLenUnicode = text
                .parse()
                .map_err(|e| hdf5::Error::from(format!("{e}")))?;
            file.new_attr::<VarLenUnicode>()
                .create(key)?
                .write_scalar(&text)
        }
    }
}

impl Hdf5Writer {
    /// Creates the file with its datasets, `counts` (one per row) and the
    /// provenance attributes; `words` are written by [`Self::write_words`],
    /// the matrices by [`Self::write_input`] and [`Self::write_output`].
    pub fn create(
        path: &Path,
        counts: &[u64],
        dim: u32,
        output_vectors: bool,
        compress: Option<u8>,
        provenance: &Provenance,
    ) -> Result<Self, Error> {
        let staged = Staged::new(path);
        let file = hdf5::File::create(staged.path()).map_err(h5_err(path, "create"))?;
        let rows = counts.len();
        let d = dim as usize;
        let vectors = matrix(&file, "vectors", rows, d, compress)
            .map_err(h5_err(path, "dataset `vectors`"))?;
        let output = if output_vectors {
            Some(
                matrix(&file, "output_vectors", rows, d, compress)
                    .map_err(h5_err(path, "dataset `output_vectors`"))?,
            )
        } else {
            None
        };
        let words = file
            .new_dataset::<VarLenUnicode>()
            .shape([rows])
            .create("words")
            .map_err(h5_err(path, "dataset `words`"))?;
        file.new_dataset_builder()
            .with_data(counts)
            .create("counts")
            .map_err(h5_err(path, "dataset `counts`"))?;
        let attributes = match serde_json::to_value(provenance) {
            Ok(serde_json::Value::Object(m)) => m,
            other => unreachable!("Provenance serializes to a JSON object, got {other:?}"),
        };
        for (key, value) in &attributes {
            write_attribute(&file, key, value)
                .map_err(h5_err(path, format!("attribute `{key}`")))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            vectors,
            output,
            words,
            words_written: 0,
            rows,
            dim: d,
            staged,
        })
    }

    /// Writes the next `words.len()` entries of `words` (rows
    /// `words_written..`, in order).
    pub fn write_words<'w>(
        &mut self,
        words: impl ExactSizeIterator<Item = &'w str>,
    ) -> Result<(), Error> {
        let start = self.words_written;
        let end = start + words.len();
        if end > self.rows {
            return Err(format_err(
                &self.path,
                format!("{end} words for {} rows", self.rows),
            ));
        }
        let block: Vec<VarLenUnicode> = words
            .map(|w| w.parse::<VarLenUnicode>())
            .collect::<Result<_, _>>()
            .map_err(|e| {
                format_err(
                    &self.path,
                    format!("a word cannot be stored as an HDF5 string: {e}"),
                )
            })?;
        self.words
            .write_slice(&block, s![start..end])
            .map_err(h5_err(&self.path, format!("writing words {start}..{end}")))?;
        self.words_written = end;
        Ok(())
    }

    fn write(
        ds: &hdf5::Dataset,
        path: &Path,
        start: u64,
        block: &[f32],
        dim: usize,
    ) -> Result<(), Error> {
        let rows = block.len() / dim;
        let view = ArrayView2::from_shape((rows, dim), block)
            .map_err(|e| format_err(path, format!("row block: {e}")))?;
        let start = start as usize;
        ds.write_slice(view, s![start..start + rows, ..])
            .map_err(h5_err(
                path,
                format!("writing rows {start}..{}", start + rows),
            ))
    }

    /// Writes rows `start..` of `vectors` (row-major, D wide).
    pub fn write_input(&mut self, start: u64, block: &[f32]) -> Result<(), Error> {
        Self::write(&self.vectors, &self.path, start, block, self.dim)
    }

    /// Writes rows `start..` of `output_vectors`, if the file has them.
    pub fn write_output(&mut self, start: u64, block: &[f32]) -> Result<(), Error> {
        match &self.output {
            Some(ds) => Self::write(ds, &self.path, start, block, self.dim),
            None => Ok(()),
        }
    }

    /// Flushes the file; every row's word must have been written.
    pub fn finish(self) -> Result<PathBuf, Error> {
        if self.words_written != self.rows {
            return Err(format_err(
                &self.path,
                format!(
                    "only {} of {} words were written",
                    self.words_written, self.rows
                ),
            ));
        }
        self.file.flush().map_err(h5_err(&self.path, "flush"))?;
        let Self {
            path,
            file,
            vectors,
            output,
            words,
            staged,
            ..
        } = self;
        drop((vectors, output, words));
        file.close().map_err(h5_err(&path, "close"))?;
        staged.commit().map_err(|e| match e {
            Error::Io(io) => crate::out::in_file(&path, io),
            other => other,
        })
    }
}

/// Entries of `words` read at a time: at most this many HDF5 strings are
/// alive at once, whatever the vocabulary.
const WORD_BLOCK: usize = 65_536;

/// The `vectors` dataset and its shape [rows, dim].
fn vectors_dataset(file: &hdf5::File, path: &Path) -> Result<(hdf5::Dataset, usize, usize), Error> {
    let ds = file
        .dataset("vectors")
        .map_err(h5_err(path, "dataset `vectors`"))?;
    let shape = ds.shape();
    let [rows, dim] = shape[..] else {
        return Err(format_err(
            path,
            format!("dataset `vectors` has shape {shape:?}, expected [words, dim]"),
        ));
    };
    Ok((ds, rows, dim))
}

/// Hands every entry of `words` to `word`, in row order, reading
/// [`WORD_BLOCK`] entries at a time; `words` must have `rows` entries.
fn read_words(
    file: &hdf5::File,
    path: &Path,
    rows: usize,
    word: &mut impl FnMut(&str),
) -> Result<(), Error> {
    let ds = file
        .dataset("words")
        .map_err(h5_err(path, "dataset `words`"))?;
    let shape = ds.shape();
    if shape[..] != [rows] {
        return Err(format_err(
            path,
            format!("dataset `words` has shape {shape:?}, `vectors` has {rows} rows"),
        ));
    }
    for start in (0..rows).step_by(WORD_BLOCK) {
        let end = (start + WORD_BLOCK).min(rows);
        let block = ds
            .read_slice_1d::<VarLenUnicode, _>(s![start..end])
            .map_err(h5_err(
                path,
                format!("reading `words` {start}..{end} (variable-length UTF-8 strings)"),
            ))?;
        for w in &block {
            word(w.as_str());
        }
    }
    Ok(())
}

/// The byte offset of `vectors`' values in the file when they can be used in
/// place: one contiguous run (not chunked, compact, virtual or external),
/// unfiltered (not compressed), of native f32, with its storage allocated.
fn in_place_offset(ds: &hdf5::Dataset) -> Option<u64> {
    if ds.layout() != hdf5::dataset::Layout::Contiguous || !ds.filters().is_empty() {
        return None;
    }
    if !ds.dtype().is_ok_and(|t| t.is::<f32>()) {
        return None;
    }
    if !ds.dcpl().is_ok_and(|pl| pl.external().is_empty()) {
        return None;
    }
    ds.offset()
}

/// Reads `words` and `vectors`.
pub(crate) fn read(path: &Path) -> Result<(Vec<String>, Array2<f32>), Error> {
    let file = hdf5::File::open(path).map_err(h5_err(path, "open"))?;
    let (ds, rows, dim) = vectors_dataset(&file, path)?;
    let mut words = Vec::with_capacity(rows);
    read_words(&file, path, rows, &mut |w| words.push(w.to_owned()))?;
    let matrix = read_matrix(&ds, path, rows, dim)?;
    Ok((words, matrix))
}

fn read_matrix(
    ds: &hdf5::Dataset,
    path: &Path,
    rows: usize,
    dim: usize,
) -> Result<Array2<f32>, Error> {
    let data: Vec<f32> = ds.read_raw().map_err(h5_err(path, "reading `vectors`"))?;
    Array2::from_shape_vec((rows, dim), data)
        .map_err(|e| format_err(path, format!("dataset `vectors`: {e}")))
}

/// Opens `path` for reading in place: `words` handed to `word` block by
/// block, `vectors` mapped when [`in_place_offset`] allows, else read.
pub(crate) fn open(path: &Path, word: &mut impl FnMut(&str)) -> Result<Rows, Error> {
    let file = hdf5::File::open(path).map_err(h5_err(path, "open"))?;
    let (ds, rows, dim) = vectors_dataset(&file, path)?;
    read_words(&file, path, rows, word)?;
    if rows > 0 && dim > 0 {
        if let Some(offset) = in_place_offset(&ds) {
            if let Some(mapped) = MappedRows::map(path, offset, rows, dim)? {
                return Ok(Rows::Mapped(mapped));
            }
        }
    }
    Ok(Rows::Loaded(read_matrix(&ds, path, rows, dim)?))
}

/// Reads the root attributes back into a [`Provenance`] (attributes it does
/// not know are ignored).
pub fn read_provenance(path: &Path) -> Result<Provenance, Error> {
    let file = hdf5::File::open(path).map_err(h5_err(path, "open"))?;
    let mut fields = serde_json::Map::new();
    for name in file.attr_names().map_err(h5_err(path, "attribute names"))? {
        let attr = file
            .attr(&name)
            .map_err(h5_err(path, format!("attribute `{name}`")))?;
        let ty = attr
            .dtype()
            .and_then(|t| t.to_descriptor())
            .map_err(h5_err(path, format!("type of attribute `{name}`")))?;
        let value = match ty {
            TypeDescriptor::Unsigned(_) => attr.read_scalar::<u64>().map(Into::into),
            TypeDescriptor::Float(_) => attr.read_scalar::<f64>().map(Into::into),
            TypeDescriptor::VarLenUnicode => attr
                .read_scalar::<VarLenUnicode>()
                .map(|s| s.as_str().into()),
            _ => continue,
        }
        .map_err(h5_err(path, format!("reading attribute `{name}`")))?;
        fields.insert(name, value);
    }
    serde_json::from_value(fields.into())
        .map_err(|e| format_err(path, format!("root attributes: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Training;

    fn provenance(training: Option<Training>) -> Provenance {
        Provenance {
            colonnade_version: "9.9.9".into(),
            model_fingerprint: 0x00ab_cdef_0123_4567,
            vocab_fingerprint: 0xfedc_ba98_7654_3210,
            dim: 3,
            negative: 5,
            init_seed: 7,
            shards: 2,
            objective: "cbow".into(),
            training,
        }
    }

    fn descriptor(file: &hdf5::File, name: &str) -> TypeDescriptor {
        file.attr(name)
            .and_then(|a| a.dtype())
            .and_then(|t| t.to_descriptor())
            .expect(name)
    }

    #[test]
    fn writes_datasets_and_typed_attributes_that_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.h5");
        let words = ["the".to_owned(), "naïve".to_owned()];
        let training = Training {
            window: 5,
            min_count: 1,
            sample: 0.0,
            alpha: 0.025,
            iter: 2,
            minibatch: 256,
            seed: 7,
            sampling_power: 0.75,
            train_words: 1000,
            train_seconds: 1.5,
            config_json: r#"{"params":{}}"#.into(),
            status: "interrupted".into(),
            progress: 0.5,
        };
        let p = provenance(Some(training));
        let mut w = Hdf5Writer::create(&path, &[9, 4], 3, true, Some(4), &p).expect("create");
        w.write_words(words[..1].iter().map(String::as_str))
            .expect("word 0");
        w.write_words(words[1..].iter().map(String::as_str))
            .expect("word 1");
        w.write_input(0, &[1.0, 2.0, 3.0]).expect("row 0");
        w.write_input(1, &[4.0, 5.0, 6.0]).expect("row 1");
        w.write_output(0, &[0.5; 6]).expect("output");
        assert_eq!(w.finish().expect("finish"), path);

        let file = hdf5::File::open(&path).expect("open");
        assert_eq!(
            file.attr("model_fingerprint")
                .and_then(|a| a.read_scalar::<VarLenUnicode>())
                .expect("fingerprint")
                .as_str(),
            "00abcdef01234567"
        );
        for name in [
            "dim",
            "negative",
            "init_seed",
            "shards",
            "window",
            "train_words",
        ] {
            assert!(
                matches!(descriptor(&file, name), TypeDescriptor::Unsigned(_)),
                "{name}"
            );
        }
        for name in [
            "sample",
            "alpha",
            "sampling_power",
            "train_seconds",
            "progress",
        ] {
            assert!(
                matches!(descriptor(&file, name), TypeDescriptor::Float(_)),
                "{name}"
            );
        }
        for name in [
            "colonnade_version",
            "vocab_fingerprint",
            "config_json",
            "objective",
            "status",
        ] {
            assert_eq!(
                descriptor(&file, name),
                TypeDescriptor::VarLenUnicode,
                "{name}"
            );
        }
        let counts: Vec<u64> = file
            .dataset("counts")
            .and_then(|d| d.read_raw())
            .expect("counts");
        assert_eq!(counts, [9, 4]);
        let output: Vec<f32> = file
            .dataset("output_vectors")
            .and_then(|d| d.read_raw())
            .expect("output_vectors");
        assert_eq!(output, [0.5; 6]);

        let (got_words, m) = read(&path).expect("read");
        assert_eq!(got_words, words);
        assert_eq!(m.as_slice(), Some(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0][..]));
        assert_eq!(read_provenance(&path).expect("provenance"), p);
    }

    #[test]
    fn refuses_to_finish_with_words_missing_or_to_take_too_many() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.h5");
        let mut w =
            Hdf5Writer::create(&path, &[3, 2], 2, false, None, &provenance(None)).expect("create");
        let e = w
            .write_words(["a", "b", "c"].into_iter())
            .expect_err("3 words for 2 rows");
        assert!(e.to_string().contains("3 words for 2 rows"), "{e}");
        w.write_words(["a"].into_iter()).expect("word 0");
        let e = w.finish().expect_err("a word missing");
        assert!(e.to_string().contains("only 1 of 2 words"), "{e}");
    }

    #[test]
    fn export_provenance_has_no_training_attributes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("e.h5");
        let p = provenance(None);
        let mut w = Hdf5Writer::create(&path, &[1], 3, false, None, &p).expect("create");
        w.write_words(["a"].into_iter()).expect("words");
        w.finish().expect("finish");
        let file = hdf5::File::open(&path).expect("open");
        let mut names = file.attr_names().expect("names");
        names.sort();
        assert_eq!(
            names,
            [
                "colonnade_version",
                "dim",
                "init_seed",
                "model_fingerprint",
                "negative",
                "objective",
                "shards",
                "vocab_fingerprint"
            ]
        );
        assert_eq!(read_provenance(&path).expect("provenance"), p);
    }
}
