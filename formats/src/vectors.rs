//! Reading any vector file back: the format is told by content (the HDF5
//! signature, else a word2vec `V D` header), not by the file name. Rows keep
//! the file's order, which is frequency order for Colonnade's outputs.

use crate::mapped::map_file;
use crate::{h5, word2vec, Error, MappedRows};
use ndarray::{Array2, ArrayView2};
use std::fmt;
use std::io::Read;
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
pub fn read_vectors(path: &Path) -> Result<Vectors, Error> {
    let map = map_file(path)?;
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

/// A vector file's rows as [`open_vectors`] gives them: in place, or read.
#[derive(Debug)]
pub enum Rows {
    /// Used in place from a read-only map of the file (uncompressed HDF5).
    Mapped(MappedRows),
    /// Read into memory (compressed or chunked HDF5, word2vec files).
    Loaded(Array2<f32>),
}

impl Rows {
    /// [words, dim], as stored.
    pub fn view(&self) -> ArrayView2<'_, f32> {
        match self {
            Rows::Mapped(m) => m.view(),
            Rows::Loaded(a) => a.view(),
        }
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, Rows::Mapped(_))
    }
}

/// A vector file opened by [`open_vectors`].
#[derive(Debug)]
pub struct Opened {
    pub format: Format,
    pub rows: Rows,
}

/// Opens `path` in whichever format it holds, for readers of large files:
/// each word is handed to `word` in row order, without all of them ever
/// being held as strings at once for HDF5 (read in blocks), and the rows
/// are used in place when the file allows it ([`Rows::Mapped`]: HDF5 whose
/// `vectors` are contiguous, uncompressed native f32), else read
/// ([`Rows::Loaded`], as [`read_vectors`] reads them).
pub fn open_vectors(path: &Path, mut word: impl FnMut(&str)) -> Result<Opened, Error> {
    let mut signature = [0u8; HDF5_SIGNATURE.len()];
    let mut file = fs_err::File::open(path)?;
    let is_hdf5 = match file.read_exact(&mut signature) {
        Ok(()) => signature == *HDF5_SIGNATURE,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
        Err(e) => return Err(e.into()),
    };
    drop(file);
    if is_hdf5 {
        let rows = h5::open(path, &mut word)?;
        return Ok(Opened {
            format: Format::Hdf5,
            rows,
        });
    }
    let v = read_vectors(path)?;
    for w in &v.words {
        word(w);
    }
    Ok(Opened {
        format: v.format,
        rows: Rows::Loaded(v.matrix),
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
    fn open_maps_contiguous_hdf5_and_loads_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        // More words than one block of `words` reads.
        let rows = 70_000usize;
        let words: Vec<String> = (0..rows).map(|i| format!("w{i}")).collect();
        let values: Vec<f32> = (0..rows * 3).map(|i| i as f32 * 0.5 - 7.0).collect();
        let txt = dir.path().join("v.txt");
        let mut text = format!("{rows} 3\n");
        for (w, r) in words.iter().zip(values.chunks(3)) {
            text += &format!("{w} {} {} {}\n", r[0], r[1], r[2]);
        }
        fs_err::write(&txt, text).expect("write");
        let mut opened = Vec::new();
        for (name, compress) in [("plain.h5", None), ("deflated.h5", Some(4))] {
            let path = dir.path().join(name);
            let provenance = crate::Provenance::default();
            let mut w =
                h5::Hdf5Writer::create(&path, &vec![1; rows], 3, false, compress, &provenance)
                    .expect("create");
            w.write_words(words.iter().map(String::as_str))
                .expect("words");
            w.write_input(0, &values).expect("rows");
            w.finish().expect("finish");
            opened.push(path);
        }
        opened.push(txt);
        for (path, mapped) in opened.iter().zip([true, false, false]) {
            let mut got = Vec::new();
            let o = open_vectors(path, |w| got.push(w.to_owned())).expect("open");
            assert_eq!(o.rows.is_mapped(), mapped, "{}", path.display());
            assert_eq!(got, words);
            assert_eq!(o.rows.view().as_slice(), Some(&values[..]));
        }
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
