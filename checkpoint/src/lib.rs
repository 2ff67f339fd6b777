//! The on-disk form of a shard's models (`ps-shard --data-dir DIR`):
//! `DIR/<fingerprint>/model.bin` (spec and word counts, written once) and
//! `DIR/<fingerprint>/v<version>.ckpt` (both matrices of the shard's column
//! slice, with the manifest of the workers' positions), and
//! `DIR/<fingerprint>/dropped` while the model is dropped from its shard's
//! memory with its files kept. Every file is
//! written crash-safe (a `.tmp` file, fsync, rename, fsync of the directory)
//! and checksummed (xxh3-64 of the header and of the payload), so a reader
//! detects truncation at open and corruption before it trusts a value.
//!
//! This crate only reads and writes files: it never holds training state,
//! never depends on the network stack or on HDF5 (the shard binary links it).
//! The spec it stores is the domain's [`ShardSpec`], serialized as its flat
//! fields (`cbow` for the objective).

use colonnade_common::model::{Matrix, ShardSpec};
use serde::{Deserialize, Serialize};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Format version of both file kinds.
pub const FORMAT: u32 = 1;
const CHECKPOINT_MAGIC: &[u8; 8] = b"COLCKPT\0";
const MODEL_MAGIC: &[u8; 8] = b"COLMODL\0";
/// Largest header accepted (JSON; a manifest of many workers fits easily).
const MAX_HEADER: u32 = 64 << 20;
/// Bytes converted per write or read call.
const CHUNK: usize = 1 << 20;

/// Values in one matrix of `spec`'s slice, if it fits in memory's address space.
fn cells(spec: &ShardSpec) -> Option<u64> {
    spec.model.vocab_size.checked_mul(spec.cols() as u64)
}

/// The header of a checkpoint file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub model_fingerprint: u64,
    pub spec: ShardSpec,
    /// xxh3-64 of the word counts (little-endian u64s) the negative sampler
    /// was built from.
    pub counts_fingerprint: u64,
    pub version: u64,
    /// Id of the model state's lineage when this version was taken.
    pub lineage: u64,
    /// Every worker's training position at this version (JSON the shard and
    /// client define; see docs/formats.md).
    pub manifest: serde_json::Value,
    pub written_unix_ms: u64,
}

/// The header of `model.bin`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ModelHeader {
    model_fingerprint: u64,
    spec: ShardSpec,
    counts: u64,
}

/// What went wrong, always naming the file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Corrupt { path: PathBuf, what: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, what: impl Into<String>) -> CheckpointError {
    CheckpointError::Corrupt {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

/// The fingerprint of a model's word counts.
pub fn counts_fingerprint(counts: &[u64]) -> u64 {
    let mut h = Xxh3::new();
    for c in counts {
        h.update(&c.to_le_bytes());
    }
    h.digest()
}

/// What writing a checkpoint cost.
#[derive(Clone, Copy, Debug)]
pub struct WriteStats {
    pub bytes: u64,
    pub seconds: f64,
}

/// A writer that checksums the payload it passes on.
struct Summed<W: Write> {
    inner: W,
    hash: Xxh3,
    bytes: u64,
}

impl<W: Write> Summed<W> {
    fn put(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.hash.update(buf);
        self.bytes += buf.len() as u64;
        self.inner.write_all(buf)
    }
}

/// Writes `<path>.tmp` with `body`, syncs it, renames it to `path` and syncs
/// the directory; on any error removes the temporary file.
fn write_atomically(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<fs_err::File>) -> std::io::Result<()>,
) -> Result<u64, CheckpointError> {
    let tmp = temporary(path);
    let result = (|| -> std::io::Result<u64> {
        let file = fs_err::File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(CHUNK, file);
        body(&mut w)?;
        let file = w
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        let len = file.metadata()?.len();
        drop(file);
        fs_err::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            fs_err::File::open(dir)?.sync_all()?;
        }
        Ok(len)
    })();
    match result {
        Ok(len) => Ok(len),
        Err(source) => {
            let _ = fs_err::remove_file(&tmp);
            Err(CheckpointError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    }
}

fn temporary(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Magic, format, header length, header JSON, header checksum.
fn write_header(w: &mut impl Write, magic: &[u8; 8], json: &[u8]) -> std::io::Result<()> {
    w.write_all(magic)?;
    w.write_all(&FORMAT.to_le_bytes())?;
    w.write_all(&(json.len() as u32).to_le_bytes())?;
    w.write_all(json)?;
    w.write_all(&xxh3_64(json).to_le_bytes())
}

fn put_f32s<W: Write>(w: &mut Summed<W>, values: &[f32]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(CHUNK);
    for chunk in values.chunks(CHUNK / 4) {
        buf.clear();
        for v in chunk {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        w.put(&buf)?;
    }
    Ok(())
}

/// Reads and checks magic, format, header and its checksum; returns the
/// header JSON and the offset of the payload.
fn read_header(
    path: &Path,
    r: &mut impl Read,
    magic: &[u8; 8],
    file_len: u64,
) -> Result<(Vec<u8>, u64), CheckpointError> {
    let mut fixed = [0u8; 16];
    r.read_exact(&mut fixed).map_err(|_| {
        corrupt(
            path,
            format!("truncated: {file_len} bytes, shorter than a header"),
        )
    })?;
    if &fixed[..8] != magic {
        return Err(corrupt(
            path,
            format!(
                "bad magic {:?}: not a {} file",
                String::from_utf8_lossy(&fixed[..8]),
                String::from_utf8_lossy(&magic[..7])
            ),
        ));
    }
    let format = u32::from_le_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]);
    if format != FORMAT {
        return Err(corrupt(
            path,
            format!("format version {format}, this build reads {FORMAT}"),
        ));
    }
    let len = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]);
    if len > MAX_HEADER || 16 + u64::from(len) + 8 > file_len {
        return Err(corrupt(
            path,
            format!("truncated or corrupt: a {len}-byte header does not fit in {file_len} bytes"),
        ));
    }
    let mut json = vec![0u8; len as usize];
    r.read_exact(&mut json).map_err(io(path))?;
    let mut sum = [0u8; 8];
    r.read_exact(&mut sum).map_err(io(path))?;
    let stored = u64::from_le_bytes(sum);
    let computed = xxh3_64(&json);
    if stored != computed {
        return Err(corrupt(
            path,
            format!("header checksum mismatch (stored {stored:016x}, computed {computed:016x}): the file is corrupt"),
        ));
    }
    Ok((json, 16 + u64::from(len) + 8))
}

/// Reads `payload` bytes in chunks, passing each to `f`, then checks the
/// trailing checksum.
fn read_payload(
    path: &Path,
    r: &mut impl Read,
    payload: u64,
    mut f: impl FnMut(&[u8]),
) -> Result<(), CheckpointError> {
    let mut hash = Xxh3::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = payload;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        r.read_exact(&mut buf[..n]).map_err(io(path))?;
        hash.update(&buf[..n]);
        f(&buf[..n]);
        left -= n as u64;
    }
    let mut sum = [0u8; 8];
    r.read_exact(&mut sum).map_err(io(path))?;
    let (stored, computed) = (u64::from_le_bytes(sum), hash.digest());
    if stored != computed {
        return Err(corrupt(
            path,
            format!("checksum mismatch in the payload (stored {stored:016x}, computed {computed:016x}): the file is corrupt"),
        ));
    }
    Ok(())
}

/// One model's directory in a data dir.
#[derive(Clone, Debug)]
pub struct ModelDir {
    path: PathBuf,
    fingerprint: u64,
}

impl ModelDir {
    pub fn new(data_dir: &Path, fingerprint: u64) -> Self {
        Self {
            path: data_dir.join(format!("{fingerprint:016x}")),
            fingerprint,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Every model directory under `data_dir` (other names are skipped,
    /// with a warning).
    pub fn list(data_dir: &Path) -> Result<Vec<ModelDir>, CheckpointError> {
        let mut out = Vec::new();
        for entry in fs_err::read_dir(data_dir).map_err(io(data_dir))? {
            let entry = entry.map_err(io(data_dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            match u64::from_str_radix(&name, 16) {
                Ok(fp) if name.len() == 16 && entry.path().is_dir() => {
                    out.push(Self::new(data_dir, fp))
                }
                _ => {
                    tracing::warn!(path = %entry.path().display(), "not a model directory; skipped")
                }
            }
        }
        out.sort_by_key(|d| d.fingerprint);
        Ok(out)
    }

    fn model_path(&self) -> PathBuf {
        self.path.join("model.bin")
    }

    /// Writes `model.bin`: the spec, the model fingerprint and the counts.
    pub fn write_model(
        &self,
        fingerprint: u64,
        spec: &ShardSpec,
        counts: &[u64],
    ) -> Result<(), CheckpointError> {
        fs_err::create_dir_all(&self.path).map_err(io(&self.path))?;
        let header = ModelHeader {
            model_fingerprint: fingerprint,
            spec: spec.clone(),
            counts: counts.len() as u64,
        };
        let json =
            serde_json::to_vec(&header).map_err(|e| corrupt(&self.model_path(), e.to_string()))?;
        write_atomically(&self.model_path(), |w| {
            write_header(w, MODEL_MAGIC, &json)?;
            let mut s = Summed {
                inner: &mut *w,
                hash: Xxh3::new(),
                bytes: 0,
            };
            let mut buf = Vec::with_capacity(CHUNK);
            for chunk in counts.chunks(CHUNK / 8) {
                buf.clear();
                for c in chunk {
                    buf.extend_from_slice(&c.to_le_bytes());
                }
                s.put(&buf)?;
            }
            let sum = s.hash.digest();
            w.write_all(&sum.to_le_bytes())
        })?;
        Ok(())
    }

    /// Reads `model.bin` (checksums verified): fingerprint, spec, counts.
    pub fn read_model(&self) -> Result<(u64, ShardSpec, Vec<u64>), CheckpointError> {
        let path = self.model_path();
        let file = fs_err::File::open(&path).map_err(io(&path))?;
        let len = file.metadata().map_err(io(&path))?.len();
        let mut r = BufReader::with_capacity(CHUNK, file);
        let (json, offset) = read_header(&path, &mut r, MODEL_MAGIC, len)?;
        let h: ModelHeader = serde_json::from_slice(&json)
            .map_err(|e| corrupt(&path, format!("header is not valid: {e}")))?;
        let payload = h.counts.checked_mul(8);
        if payload.and_then(|p| p.checked_add(offset + 8)) != Some(len) {
            return Err(corrupt(
                &path,
                format!(
                    "truncated or corrupt: {len} bytes, expected {offset} + 8 × {} + 8",
                    h.counts
                ),
            ));
        }
        let mut counts = Vec::with_capacity(h.counts as usize);
        read_payload(&path, &mut r, h.counts * 8, |b| {
            counts.extend(b.chunks_exact(8).map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                u64::from_le_bytes(a)
            }));
        })?;
        if counts.len() as u64 != h.spec.model.vocab_size {
            return Err(corrupt(
                &path,
                format!(
                    "{} counts for {} words",
                    counts.len(),
                    h.spec.model.vocab_size
                ),
            ));
        }
        Ok((h.model_fingerprint, h.spec, counts))
    }

    pub fn checkpoint_path(&self, version: u64) -> PathBuf {
        self.path.join(format!("v{version:010}.ckpt"))
    }

    /// Versions present (from file names, ascending; not verified).
    pub fn versions(&self) -> Result<Vec<u64>, CheckpointError> {
        let mut out = Vec::new();
        if !self.path.is_dir() {
            return Ok(out);
        }
        for entry in fs_err::read_dir(&self.path).map_err(io(&self.path))? {
            let entry = entry.map_err(io(&self.path))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(v) = name
                .strip_prefix('v')
                .and_then(|n| n.strip_suffix(".ckpt"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                out.push(v);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Writes version `header.version` from a copy of both matrices (each
    /// rows × cols, row-major), crash-safe.
    pub fn write_checkpoint(
        &self,
        header: &Header,
        u: &[f32],
        v: &[f32],
    ) -> Result<WriteStats, CheckpointError> {
        let path = self.checkpoint_path(header.version);
        let cells = cells(&header.spec);
        if cells != Some(u.len() as u64) || cells != Some(v.len() as u64) {
            return Err(corrupt(
                &path,
                format!(
                    "refusing to write matrices of {} and {} values for {} rows × {} columns",
                    u.len(),
                    v.len(),
                    header.spec.model.vocab_size,
                    header.spec.cols()
                ),
            ));
        }
        let start = std::time::Instant::now();
        fs_err::create_dir_all(&self.path).map_err(io(&self.path))?;
        let json = serde_json::to_vec(header).map_err(|e| corrupt(&path, e.to_string()))?;
        let bytes = write_atomically(&path, |w| {
            write_header(w, CHECKPOINT_MAGIC, &json)?;
            let mut s = Summed {
                inner: &mut *w,
                hash: Xxh3::new(),
                bytes: 0,
            };
            put_f32s(&mut s, u)?;
            put_f32s(&mut s, v)?;
            let sum = s.hash.digest();
            w.write_all(&sum.to_le_bytes())
        })?;
        Ok(WriteStats {
            bytes,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Removes every version for which `remove(version)` holds.
    pub fn remove_versions(&self, remove: impl Fn(u64) -> bool) -> Result<(), CheckpointError> {
        for v in self.versions()? {
            if remove(v) {
                let p = self.checkpoint_path(v);
                fs_err::remove_file(&p).map_err(io(&p))?;
            }
        }
        Ok(())
    }

    /// Removes unfinished writes (`*.tmp`).
    pub fn clean_temporaries(&self) -> Result<(), CheckpointError> {
        if !self.path.is_dir() {
            return Ok(());
        }
        for entry in fs_err::read_dir(&self.path).map_err(io(&self.path))? {
            let p = entry.map_err(io(&self.path))?.path();
            if p.extension().is_some_and(|e| e == "tmp") {
                fs_err::remove_file(&p).map_err(io(&p))?;
            }
        }
        Ok(())
    }

    fn dropped_path(&self) -> PathBuf {
        self.path.join("dropped")
    }

    /// Marks the model dropped from its shard's memory with its files kept
    /// (crash-safe): a shard starting on the data dir leaves it on disk
    /// instead of loading it, until the model is created again.
    pub fn mark_dropped(&self) -> Result<(), CheckpointError> {
        write_atomically(&self.dropped_path(), |w| {
            w.write_all(
                b"dropped from the shard's memory with its checkpoints kept (`colonnade models \
                  drop`); creating the model again loads it\n",
            )
        })
        .map(drop)
    }

    /// Whether the model is dropped with its files kept ([`ModelDir::mark_dropped`]).
    pub fn is_dropped(&self) -> bool {
        self.dropped_path().is_file()
    }

    /// Removes the dropped mark (the model is held again), durably: a
    /// restart then loads it.
    pub fn unmark_dropped(&self) -> Result<(), CheckpointError> {
        let path = self.dropped_path();
        if path.exists() {
            fs_err::remove_file(&path).map_err(io(&path))?;
            fs_err::File::open(&self.path)
                .and_then(|d| d.sync_all())
                .map_err(io(&self.path))?;
        }
        Ok(())
    }

    /// Removes the whole model directory.
    pub fn remove_all(&self) -> Result<(), CheckpointError> {
        if self.path.exists() {
            fs_err::remove_dir_all(&self.path).map_err(io(&self.path))?;
        }
        Ok(())
    }
}

/// A checkpoint file opened for reading, its header verified.
pub struct CheckpointReader {
    path: PathBuf,
    header: Header,
    reader: BufReader<fs_err::File>,
}

impl CheckpointReader {
    /// Opens `path` and verifies magic, format, header checksum and that the
    /// file's length is exactly what the header implies (truncation).
    pub fn open(path: &Path) -> Result<Self, CheckpointError> {
        let file = fs_err::File::open(path).map_err(io(path))?;
        let len = file.metadata().map_err(io(path))?.len();
        let mut reader = BufReader::with_capacity(CHUNK, file);
        let (json, offset) = read_header(path, &mut reader, CHECKPOINT_MAGIC, len)?;
        let header: Header = serde_json::from_slice(&json)
            .map_err(|e| corrupt(path, format!("header is not valid: {e}")))?;
        let expected = cells(&header.spec)
            .and_then(|c| c.checked_mul(8))
            .and_then(|p| p.checked_add(offset + 8));
        if expected != Some(len) {
            return Err(corrupt(
                path,
                format!(
                    "truncated or corrupt: {len} bytes, expected {} for {} rows × {} columns",
                    expected.map_or_else(|| "more than 2^64".into(), |e| e.to_string()),
                    header.spec.model.vocab_size,
                    header.spec.cols()
                ),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            header,
            reader,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Streams u then v in blocks of whole rows to `sink(matrix, first
    /// row, values)`, then verifies the payload checksum: a caller loads
    /// into a fresh buffer and discards it on error.
    pub fn read_matrices(
        mut self,
        mut sink: impl FnMut(Matrix, u64, &[f32]),
    ) -> Result<(), CheckpointError> {
        let cols = self.header.spec.cols().max(1);
        let cells = cells(&self.header.spec).unwrap_or(0);
        let row_bytes = cols * 4;
        // Whole rows per block, about CHUNK bytes.
        let rows_per_block = (CHUNK / row_bytes).max(1);
        let mut values: Vec<f32> = Vec::with_capacity(rows_per_block * cols);
        let mut pending: Vec<u8> = Vec::with_capacity(rows_per_block * row_bytes + CHUNK);
        let mut emitted: u64 = 0; // cells passed to the sink, both matrices
        let path = self.path.clone();
        let mut flush = |pending: &mut Vec<u8>, all: bool| {
            let whole = if all {
                pending.len()
            } else {
                pending.len() / row_bytes * row_bytes
            };
            if whole == 0 {
                return;
            }
            let mut at = 0;
            while at < whole {
                // Never let a block cross from u into v.
                let matrix_left = if emitted < cells {
                    cells - emitted
                } else {
                    2 * cells - emitted
                };
                let n = ((whole - at) / 4)
                    .min(rows_per_block * cols)
                    .min(matrix_left as usize);
                values.clear();
                values.extend(
                    pending[at..at + n * 4]
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
                let (which, first) = if emitted < cells {
                    (Matrix::Input, emitted / cols as u64)
                } else {
                    (Matrix::Output, (emitted - cells) / cols as u64)
                };
                sink(which, first, &values);
                emitted += n as u64;
                at += n * 4;
            }
            pending.drain(..whole);
        };
        read_payload(&path, &mut self.reader, cells * 8, |b| {
            pending.extend_from_slice(b);
            flush(&mut pending, false);
        })?;
        flush(&mut pending, true);
        Ok(())
    }
}

/// Opens `path` and reads both matrices (verified).
pub fn read_checkpoint(path: &Path) -> Result<(Header, Vec<f32>, Vec<f32>), CheckpointError> {
    let reader = CheckpointReader::open(path)?;
    let header = reader.header().clone();
    let (mut u, mut v) = (Vec::new(), Vec::new());
    reader.read_matrices(|which, _, values| match which {
        Matrix::Input => u.extend_from_slice(values),
        Matrix::Output => v.extend_from_slice(values),
    })?;
    Ok((header, u, v))
}

#[cfg(test)]
mod tests;
