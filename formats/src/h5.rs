//! The HDF5 layout (docs/formats.md), written row block by row block and read
//! back whole: datasets `vectors` f32 [V, D] (input vectors), `words` UTF-8
//! strings [V], `counts` u64 [V], optionally `output_vectors` f32 [V, D]
//! (contiguous, or chunked and deflated), and the [`Provenance`] as root
//! attributes.

use crate::{Error, Provenance};
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

pub struct Hdf5Writer {
    path: PathBuf,
    file: hdf5::File,
    vectors: hdf5::Dataset,
    output: Option<hdf5::Dataset>,
    dim: usize,
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
    /// Creates the file with its datasets, `words`, `counts` and the
    /// provenance attributes; the matrices are filled by
    /// [`Self::write_input`] and [`Self::write_output`].
    pub fn create(
        path: &Path,
        words: &[String],
        counts: &[u64],
        dim: u32,
        output_vectors: bool,
        compress: Option<u8>,
        provenance: &Provenance,
    ) -> Result<Self, Error> {
        debug_assert_eq!(words.len(), counts.len());
        let file = hdf5::File::create(path).map_err(h5_err(path, "create"))?;
        let rows = words.len();
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
        let words: Vec<VarLenUnicode> = words
            .iter()
            .map(|w| w.parse::<VarLenUnicode>())
            .collect::<Result<_, _>>()
            .map_err(|e| {
                format_err(
                    path,
                    format!("a word cannot be stored as an HDF5 string: {e}"),
                )
            })?;
        file.new_dataset_builder()
            .with_data(&words)
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
            dim: d,
        })
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

    pub fn finish(self) -> Result<PathBuf, Error> {
        self.file.flush().map_err(h5_err(&self.path, "flush"))?;
        Ok(self.path)
    }
}

/// Reads `words` and `vectors`.
pub(crate) fn read(path: &Path) -> Result<(Vec<String>, Array2<f32>), Error> {
    let h5 = |what: &'static str| h5_err(path, what);
    let file = hdf5::File::open(path).map_err(h5("open"))?;
    let ds = file.dataset("vectors").map_err(h5("dataset `vectors`"))?;
    let shape = ds.shape();
    let [rows, dim] = shape[..] else {
        return Err(format_err(
            path,
            format!("dataset `vectors` has shape {shape:?}, expected [words, dim]"),
        ));
    };
    let data: Vec<f32> = ds.read_raw().map_err(h5("reading `vectors`"))?;
    let matrix = Array2::from_shape_vec((rows, dim), data)
        .map_err(|e| format_err(path, format!("dataset `vectors`: {e}")))?;
    let words: Vec<VarLenUnicode> = file
        .dataset("words")
        .map_err(h5("dataset `words`"))?
        .read_raw()
        .map_err(h5("reading `words` (variable-length UTF-8 strings)"))?;
    if words.len() != rows {
        return Err(format_err(
            path,
            format!(
                "dataset `words` has {} entries, `vectors` has {rows} rows",
                words.len()
            ),
        ));
    }
    let words = words.iter().map(|w| w.as_str().to_owned()).collect();
    Ok((words, matrix))
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
        };
        let p = provenance(Some(training));
        let mut w =
            Hdf5Writer::create(&path, &words, &[9, 4], 3, true, Some(4), &p).expect("create");
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
        for name in ["sample", "alpha", "sampling_power", "train_seconds"] {
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
    fn export_provenance_has_no_training_attributes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("e.h5");
        let p = provenance(None);
        let w = Hdf5Writer::create(&path, &["a".into()], &[1], 3, false, None, &p).expect("create");
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
