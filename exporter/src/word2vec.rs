//! word2vec's text and binary vector formats, as gensim's
//! `KeyedVectors.load_word2vec_format` reads them: a header line `V D`, then
//! per word `word v1 … vD\n` (text, shortest round-trip decimal) or
//! `word ` + D little-endian f32 + `\n` (binary). Words are UTF-8 and never
//! contain ASCII whitespace (the corpus reader splits on it), so no escaping
//! is needed; a word that does (a vocabulary built some other way) is refused
//! with an error rather than written into a file that would read back wrong.

use anyhow::{bail, Context};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Refuses a word that a whitespace-separated format cannot hold.
pub fn check_word(word: &str, path: &Path) -> anyhow::Result<()> {
    if word.is_empty() {
        bail!("{}: cannot write an empty word", path.display());
    }
    if let Some(c) = word.bytes().find(u8::is_ascii_whitespace) {
        bail!(
            "{}: the word {word:?} contains ASCII whitespace ({c:#04x}); this format separates fields by whitespace",
            path.display()
        );
    }
    Ok(())
}

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
        check_word(word, &self.0.path)?;
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
        check_word(word, &self.0.path)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_refuse_words_with_ascii_whitespace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = dir.path().join("v.txt");
        let b = dir.path().join("v.bin");
        let mut text = TextWriter::create(&t, 2, 1).expect("create");
        let mut binary = BinaryWriter::create(&b, 2, 1).expect("create");
        text.write("ok\u{a0}word", &[1.0])
            .expect("NBSP is not ASCII whitespace");
        for bad in ["two words", "tab\there", "new\nline", "cr\r", ""] {
            let e = format!("{:#}", text.write(bad, &[1.0]).expect_err(bad));
            assert!(e.contains("v.txt"), "{e}");
            let e = format!("{:#}", binary.write(bad, &[1.0]).expect_err(bad));
            assert!(e.contains("v.bin"), "{e}");
        }
    }
}
