//! word2vec's text and binary vector formats, as gensim's
//! `KeyedVectors.load_word2vec_format` reads them: a header line `V D`, then
//! per word `word v1 … vD\n` (text, shortest round-trip decimal) or
//! `word ` + D little-endian f32 + `\n` (binary). Words are UTF-8 and never
//! contain whitespace (the corpus reader splits on it), so no escaping is needed.

use anyhow::Context;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

struct Out {
    path: PathBuf,
    w: BufWriter<File>,
}

impl Out {
    fn create(path: &Path, vocab: u64, dim: u32) -> anyhow::Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        writeln!(w, "{vocab} {dim}").with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            w,
        })
    }

    fn finish(mut self) -> anyhow::Result<PathBuf> {
        self.w
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(self.path)
    }
}

pub struct TextWriter(Out);

impl TextWriter {
    pub fn create(path: &Path, vocab: u64, dim: u32) -> anyhow::Result<Self> {
        Out::create(path, vocab, dim).map(Self)
    }

    pub fn write(&mut self, word: &str, row: &[f32]) -> anyhow::Result<()> {
        let w = &mut self.0.w;
        let res = (|| {
            w.write_all(word.as_bytes())?;
            for x in row {
                write!(w, " {x}")?;
            }
            w.write_all(b"\n")
        })();
        res.with_context(|| format!("cannot write {}", self.0.path.display()))
    }

    pub fn finish(self) -> anyhow::Result<PathBuf> {
        self.0.finish()
    }
}

pub struct BinaryWriter(Out);

impl BinaryWriter {
    pub fn create(path: &Path, vocab: u64, dim: u32) -> anyhow::Result<Self> {
        Out::create(path, vocab, dim).map(Self)
    }

    pub fn write(&mut self, word: &str, row: &[f32]) -> anyhow::Result<()> {
        let w = &mut self.0.w;
        let res = (|| {
            w.write_all(word.as_bytes())?;
            w.write_all(b" ")?;
            for x in row {
                w.write_all(&x.to_le_bytes())?;
            }
            w.write_all(b"\n")
        })();
        res.with_context(|| format!("cannot write {}", self.0.path.display()))
    }

    pub fn finish(self) -> anyhow::Result<PathBuf> {
        self.0.finish()
    }
}
