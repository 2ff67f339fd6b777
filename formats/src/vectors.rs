//! Reading any vector file back: the format is told by content (the HDF5
//! signature, else a word2vec `V D` header), not by the file name. Rows keep
//! the file's order, which is frequency order for Colonnade's outputs.

use crate::{h5, word2vec, Error};
use memmap2::Mmap;
use ndarray::Array2;
use std::fmt;
use std::path::Path;

/// The first 8 bytes of an HDF5 file (no user block).
const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

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

/// A vector file's words and rows, as stored (row i is word i's vector).
#[derive(Clone, Debug)]
pub struct Vectors {
    pub format: Format,
    pub words: Vec<String>,
    /// [words, dim].
    pub matrix: Array2<f32>,
}

/// Reads `path` in whichever of the formats it holds. word2vec files are
/// memory-mapped while they are parsed.
#[allow(
    unsafe_code,
    reason = "memory-mapping a file is unsafe by API; see SAFETY below"
)]
pub fn read_vectors(path: &Path) -> Result<Vectors, Error> {
    let file = fs_err::File::open(path)?;
    // SAFETY: the map is read-only and lives only while this function
    // parses it; like every reader of these files we assume nobody
    // truncates or rewrites the file meanwhile.
    let map = unsafe { Mmap::map(file.file()) }.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot map `{}` into memory: {e}", path.display()),
        )
    })?;
    let (format, words, matrix) = if map.starts_with(HDF5_SIGNATURE) {
        drop(map);
        let (words, matrix) = h5::read(path)?;
        (Format::Hdf5, words, matrix)
    } else {
        word2vec::read(path, &map)?
    };
    Ok(Vectors {
        format,
        words,
        matrix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        fs_err::write(&p, bytes).expect("write");
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
        let t = read_vectors(&text).expect("text");
        let b = read_vectors(&bin).expect("binary");
        assert_eq!(t.format, Format::Word2vecText);
        assert_eq!(b.format, Format::Word2vecBinary);
        assert_eq!(t.words, b.words);
        assert_eq!(t.words, ["the", "çé", "x"]);
        assert_eq!(t.matrix, b.matrix);
        assert_eq!(t.matrix.row(0).to_vec(), vec![3.0, 4.0]);
        assert_eq!(t.matrix.row(2).to_vec(), vec![1e-3, 0.0]);
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
            fs_err::write(&p, content).expect("write");
            let Err(e) = read_vectors(&p) else {
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
        let e = read_vectors(&p).expect("binary");
        assert_eq!(e.format, Format::Word2vecBinary);
        assert_eq!(e.words, ["ab"]);
    }

    #[test]
    fn errors_name_the_file_and_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = write(dir.path(), "short.txt", b"2 2\na 1 2\nb 1 x\n");
        let msg = read_vectors(&p).expect_err("error").to_string();
        assert!(msg.contains("short.txt") && msg.contains("line 3"), "{msg}");
        let p = write(
            dir.path(),
            "trunc.bin",
            b"2 2\na \x00\x00\x80\x3f\x00\x00\x80\x3fb \x00",
        );
        let msg = read_vectors(&p).expect_err("error").to_string();
        assert!(
            msg.contains("trunc.bin") && msg.contains("record 2"),
            "{msg}"
        );
        let p = write(dir.path(), "junk", b"hello world\n");
        let msg = read_vectors(&p).expect_err("error").to_string();
        assert!(msg.contains("junk") && msg.contains("header"), "{msg}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("absent.h5");
        let e = read_vectors(&p).expect_err("missing");
        assert!(matches!(e, Error::Io(_)), "{e:?}");
        assert!(e.to_string().contains("absent.h5"), "{e}");
    }
}
