//! Rows of a vector file used in place: the file mapped read-only and a
//! contiguous run of native f32 values viewed as a [rows, dim] matrix, so a
//! 20M × 100 matrix costs page cache (shared, evictable), not 8 GB of the
//! process's own memory. The one place this crate maps a file
//! ([`map_file`], also for parsing word2vec files).

#![allow(
    unsafe_code,
    reason = "mapping a file and viewing its bytes as f32 are unsafe by API; see the SAFETY comments"
)]

use crate::Error;
use memmap2::Mmap;
use ndarray::ArrayView2;
use std::path::Path;

/// Maps `path` read-only; the error names the file.
pub(crate) fn map_file(path: &Path) -> Result<Mmap, Error> {
    let file = fs_err::File::open(path)?;
    // SAFETY: the map is read-only and private to this process, but the
    // file itself is not locked: another process that truncates or
    // rewrites it while it is mapped makes the bytes change under us (or
    // a read fault with SIGBUS past a truncation). That is the contract of
    // every mapped reader (numpy's memmap, h5py's direct reads); vector
    // files are written once and then only read.
    let map = unsafe { Mmap::map(file.file()) }.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot map `{}` into memory: {e}", path.display()),
        )
    })?;
    Ok(map)
}

/// A file's rows [rows, dim] of f32, read in place from a read-only map.
pub struct MappedRows {
    map: Mmap,
    /// Byte offset of row 0 in the map (a multiple of 4: checked).
    offset: usize,
    rows: usize,
    dim: usize,
}

impl std::fmt::Debug for MappedRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedRows")
            .field("offset", &self.offset)
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .finish()
    }
}

impl MappedRows {
    /// Maps `path` and views `rows × dim` f32 values (native byte order)
    /// from byte `offset` on. `Ok(None)` when the values are not 4-byte
    /// aligned in the map (the caller then reads them instead); an error when
    /// the file is shorter than the rows.
    pub(crate) fn map(
        path: &Path,
        offset: u64,
        rows: usize,
        dim: usize,
    ) -> Result<Option<Self>, Error> {
        let map = map_file(path)?;
        let bytes = rows
            .checked_mul(dim)
            .and_then(|n| n.checked_mul(size_of::<f32>()));
        let end = usize::try_from(offset)
            .ok()
            .zip(bytes)
            .and_then(|(o, b)| o.checked_add(b));
        let (Ok(offset), Some(end)) = (usize::try_from(offset), end) else {
            return Err(Error::Format {
                path: path.to_path_buf(),
                msg: format!("{rows} × {dim} values at byte {offset} overflow the address space"),
            });
        };
        if end > map.len() {
            return Err(Error::Format {
                path: path.to_path_buf(),
                msg: format!(
                    "{rows} × {dim} values at byte {offset} end at byte {end}, past the end of the file ({} bytes)",
                    map.len()
                ),
            });
        }
        if !map[offset..].as_ptr().cast::<f32>().is_aligned() {
            return Ok(None);
        }
        Ok(Some(Self {
            map,
            offset,
            rows,
            dim,
        }))
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The values, row-major.
    pub fn as_slice(&self) -> &[f32] {
        let bytes = &self.map[self.offset..self.offset + self.rows * self.dim * size_of::<f32>()];
        // SAFETY: `bytes` lies inside the map (checked in `map`: offset +
        // rows·dim·4 ≤ length) and starts 4-byte aligned (checked there too);
        // every bit pattern is a valid f32; the slice borrows `self`, which
        // owns the map, so it cannot outlive it. The map is read-only, so no
        // `&mut` to these bytes exists in this process (changes by other
        // processes: see the SAFETY comment in `map`).
        unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), self.rows * self.dim) }
    }

    /// The rows as a [rows, dim] matrix.
    pub fn view(&self) -> ArrayView2<'_, f32> {
        ArrayView2::from_shape((self.rows, self.dim), self.as_slice())
            .expect("rows × dim values, checked when mapped")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_the_values_in_place_and_refuses_a_short_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("raw");
        let mut bytes = b"head".to_vec();
        for x in [1.0f32, 2.0, 3.0, -4.0, 5.5, 6.0] {
            bytes.extend_from_slice(&x.to_ne_bytes());
        }
        fs_err::write(&path, &bytes).expect("write");
        let m = MappedRows::map(&path, 4, 2, 3)
            .expect("map")
            .expect("aligned");
        assert_eq!(m.view().row(1).to_vec(), [-4.0, 5.5, 6.0]);
        assert!(
            MappedRows::map(&path, 2, 2, 3).expect("map").is_none(),
            "offset 2 is not 4-byte aligned"
        );
        let e = MappedRows::map(&path, 4, 3, 3).expect_err("short");
        assert!(e.to_string().contains("past the end"), "{e}");
    }
}
