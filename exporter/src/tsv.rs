//! The TensorBoard Embedding Projector's input files
//! (<https://projector.tensorflow.org>, "Load"): a vectors TSV with one row
//! per word, D tab-separated values (shortest round-trip decimals), no
//! header; and a metadata TSV with one word per line in the same order (a
//! single column, so no header line, as the projector expects). Words never
//! contain ASCII whitespace (tabs and newlines included), so no escaping is
//! needed; a word that does is refused.

use crate::word2vec::check_word;
use anyhow::Context;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

struct Out {
    path: PathBuf,
    w: BufWriter<File>,
}

impl Out {
    fn create(path: &Path) -> anyhow::Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, file),
        })
    }

    fn finish(mut self) -> anyhow::Result<PathBuf> {
        self.w
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(self.path)
    }
}

/// Writes either file or both; rows arrive in vocabulary order.
pub struct ProjectorWriter {
    vectors: Option<Out>,
    metadata: Option<Out>,
}

impl ProjectorWriter {
    pub fn create(vectors: Option<&Path>, metadata: Option<&Path>) -> anyhow::Result<Self> {
        Ok(Self {
            vectors: vectors.map(Out::create).transpose()?,
            metadata: metadata.map(Out::create).transpose()?,
        })
    }

    pub fn write(&mut self, word: &str, row: &[f32]) -> anyhow::Result<()> {
        if let Some(o) = self.metadata.as_mut() {
            check_word(word, &o.path)?;
            let w = &mut o.w;
            (|| {
                w.write_all(word.as_bytes())?;
                w.write_all(b"\n")
            })()
            .with_context(|| format!("cannot write {}", o.path.display()))?;
        }
        if let Some(o) = self.vectors.as_mut() {
            let w = &mut o.w;
            (|| {
                for (i, x) in row.iter().enumerate() {
                    if i > 0 {
                        w.write_all(b"\t")?;
                    }
                    write!(w, "{x}")?;
                }
                w.write_all(b"\n")
            })()
            .with_context(|| format!("cannot write {}", o.path.display()))?;
        }
        Ok(())
    }

    pub fn finish(self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for o in [self.vectors, self.metadata].into_iter().flatten() {
            files.push(o.finish()?);
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_rows_and_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (v, m) = (dir.path().join("v.tsv"), dir.path().join("m.tsv"));
        let mut w = ProjectorWriter::create(Some(&v), Some(&m)).expect("create");
        w.write("naïve", &[1.5, -0.25]).expect("write");
        w.write("#tag", &[0.1, 3.0]).expect("write");
        assert_eq!(w.finish().expect("finish"), vec![v.clone(), m.clone()]);
        assert_eq!(
            std::fs::read_to_string(&v).expect("read"),
            "1.5\t-0.25\n0.1\t3\n"
        );
        assert_eq!(std::fs::read_to_string(&m).expect("read"), "naïve\n#tag\n");
    }

    #[test]
    fn refuses_whitespace_in_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = dir.path().join("m.tsv");
        let mut w = ProjectorWriter::create(None, Some(&m)).expect("create");
        let err = w.write("a\tb", &[0.0]).expect_err("must refuse");
        let msg = format!("{err:#}");
        assert!(msg.contains("m.tsv") && msg.contains("whitespace"), "{msg}");
    }
}
