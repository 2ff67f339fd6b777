//! The HDF5 output (layout in docs/formats.md).

use anyhow::Context;
use colonnade_common::vocab::Vocab;
use hdf5::types::VarLenUnicode;
use ndarray::{s, ArrayView2};
use std::path::{Path, PathBuf};

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

impl Hdf5Writer {
    pub fn create(
        path: &Path,
        vocab: &Vocab,
        dim: u32,
        include_output: bool,
        compress: Option<u8>,
        attributes: &serde_json::Map<String, serde_json::Value>,
    ) -> anyhow::Result<Self> {
        let ctx = || format!("cannot write HDF5 file {}", path.display());
        let file = hdf5::File::create(path).with_context(ctx)?;
        let rows = vocab.len();
        let d = dim as usize;
        let vectors = matrix(&file, "vectors", rows, d, compress).with_context(ctx)?;
        let output = if include_output {
            Some(matrix(&file, "output_vectors", rows, d, compress).with_context(ctx)?)
        } else {
            None
        };
        let words: Vec<VarLenUnicode> = vocab
            .words()
            .iter()
            .map(|w| w.parse::<VarLenUnicode>())
            .collect::<Result<_, _>>()
            .with_context(|| {
                format!(
                    "{}: a word cannot be stored as an HDF5 string",
                    path.display()
                )
            })?;
        file.new_dataset_builder()
            .with_data(&words)
            .create("words")
            .with_context(ctx)?;
        file.new_dataset_builder()
            .with_data(vocab.counts())
            .create("counts")
            .with_context(ctx)?;
        for (key, value) in attributes {
            match value {
                serde_json::Value::Number(n) if n.is_u64() => file
                    .new_attr::<u64>()
                    .create(key.as_str())
                    .and_then(|a| a.write_scalar(&n.as_u64().unwrap_or(0))),
                serde_json::Value::Number(n) if n.is_i64() => file
                    .new_attr::<i64>()
                    .create(key.as_str())
                    .and_then(|a| a.write_scalar(&n.as_i64().unwrap_or(0))),
                serde_json::Value::Number(n) => file
                    .new_attr::<f64>()
                    .create(key.as_str())
                    .and_then(|a| a.write_scalar(&n.as_f64().unwrap_or(f64::NAN))),
                other => {
                    let text = match other {
                        serde_json::Value::String(s) => s.clone(),
                        v => v.to_string(),
                    };
                    let text: VarLenUnicode = text
                        .parse()
                        .map_err(|e| hdf5::Error::from(format!("{e}")))?;
                    file.new_attr::<VarLenUnicode>()
                        .create(key.as_str())
                        .and_then(|a| a.write_scalar(&text))
                }
            }
            .with_context(|| format!("{}: cannot write attribute {key}", path.display()))?;
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
    ) -> anyhow::Result<()> {
        let rows = block.len() / dim;
        let view = ArrayView2::from_shape((rows, dim), block).context("block shape")?;
        let start = start as usize;
        ds.write_slice(view, s![start..start + rows, ..])
            .with_context(|| format!("cannot write rows {start}.. of {}", path.display()))
    }

    pub fn write_input(&mut self, start: u64, block: &[f32]) -> anyhow::Result<()> {
        Self::write(&self.vectors, &self.path, start, block, self.dim)
    }

    pub fn write_output(&mut self, start: u64, block: &[f32]) -> anyhow::Result<()> {
        match &self.output {
            Some(ds) => Self::write(ds, &self.path, start, block, self.dim),
            None => Ok(()),
        }
    }

    pub fn finish(self) -> anyhow::Result<PathBuf> {
        self.file
            .flush()
            .with_context(|| format!("cannot flush {}", self.path.display()))?;
        Ok(self.path)
    }
}
