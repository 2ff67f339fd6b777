//! The TensorBoard Embedding Projector's input files
//! (<https://projector.tensorflow.org>, "Load"): a vectors TSV with one row
//! per word, D tab-separated values (shortest round-trip decimals), no
//! header; and a metadata TSV with one word per line in the same order (a
//! single column, so no header line, as the projector expects). Words never
//! contain ASCII whitespace (tabs and newlines included), so no escaping is
//! needed; a word that does is refused.

use crate::out::{check_word, in_file, Out};
use crate::Error;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes either file or both; rows arrive in vocabulary order.
pub struct ProjectorWriter {
    vectors: Option<Out>,
    metadata: Option<Out>,
}

impl ProjectorWriter {
    pub fn create(vectors: Option<&Path>, metadata: Option<&Path>) -> Result<Self, Error> {
        Ok(Self {
            vectors: vectors.map(Out::create).transpose()?,
            metadata: metadata.map(Out::create).transpose()?,
        })
    }

    pub fn write(&mut self, word: &str, row: &[f32]) -> Result<(), Error> {
        if let Some(o) = self.metadata.as_mut() {
            check_word(word, &o.path)?;
            let w = &mut o.w;
            (|| {
                w.write_all(word.as_bytes())?;
                w.write_all(b"\n")
            })()
            .map_err(|e| in_file(&o.path, e))?;
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
            .map_err(|e| in_file(&o.path, e))?;
        }
        Ok(())
    }

    pub fn finish(self) -> Result<Vec<PathBuf>, Error> {
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
            fs_err::read_to_string(&v).expect("read"),
            "1.5\t-0.25\n0.1\t3\n"
        );
        assert_eq!(fs_err::read_to_string(&m).expect("read"), "naïve\n#tag\n");
    }

    #[test]
    fn refuses_whitespace_in_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = dir.path().join("m.tsv");
        let mut w = ProjectorWriter::create(None, Some(&m)).expect("create");
        let err = w.write("a\tb", &[0.0]).expect_err("must refuse");
        let msg = err.to_string();
        assert!(msg.contains("m.tsv") && msg.contains("whitespace"), "{msg}");
    }
}
