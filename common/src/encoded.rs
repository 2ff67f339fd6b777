//! The encoded corpus (the paper's preprocessing step): a corpus turned
//! once into word ids of one vocabulary, in parts that workers read
//! directly, each only its own. Training from it needs no word→id map and
//! no tokenizing, and gives the same minibatches as the text (the same
//! sentences, cut and UTF-8 policy, the same sentence numbers).
//!
//! A directory holds `manifest.json` ([`Manifest`]) and the parts
//! `part-NNNNN.ids`. A part is a 16-byte header (`COLNDIDS`, version u32
//! LE, 0u32) then blocks: u32 LE payload length, u64 LE xxh3-64 of the
//! payload, the payload: whole sentences, each `varint tokens` (all tokens
//! read, in and out of the vocabulary), `varint n` and `n` varint word ids.
//! A block is checked before any of its sentences is used.

use crate::varint;
use serde::{Deserialize, Serialize};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"COLNDIDS";
pub const VERSION: u32 = 1;
pub const MANIFEST: &str = "manifest.json";
pub const FORMAT: &str = "colonnade encoded corpus";

/// Payload bytes after which a writer closes its block.
pub const BLOCK_BYTES: usize = 1 << 20;

/// Largest payload a reader accepts (a block holds one sentence at least:
/// 10,000 tokens of 5-byte ids stay far under it).
pub const MAX_BLOCK_BYTES: u32 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum EncodedError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> EncodedError + '_ {
    move |source| EncodedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, msg: impl Into<String>) -> EncodedError {
    EncodedError::Invalid {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// What one part holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartInfo {
    pub file: String,
    /// The corpus-wide number of its first sentence.
    pub first_sentence: u64,
    pub sentences: u64,
    /// Tokens read (in and out of the vocabulary).
    pub tokens: u64,
    /// Word ids (in-vocabulary tokens).
    pub words: u64,
    pub bytes: u64,
}

/// `manifest.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// The vocabulary's fingerprint (16 hex digits) and size.
    pub vocab_fingerprint: String,
    pub vocab_words: u64,
    /// How sentences were cut and invalid UTF-8 treated.
    pub max_sentence: u64,
    pub invalid_utf8: String,
    pub sentences: u64,
    pub tokens: u64,
    pub words: u64,
    pub skipped_sentences: u64,
    /// The text files it was made from.
    pub sources: Vec<String>,
    pub parts: Vec<PartInfo>,
}

impl Manifest {
    /// Reads and checks `DIR/manifest.json`.
    pub fn load(dir: &Path) -> Result<Self, EncodedError> {
        let path = dir.join(MANIFEST);
        let text = fs_err::read_to_string(&path).map_err(io(&path))?;
        let m: Self = serde_json::from_str(&text)
            .map_err(|e| invalid(&path, format!("not an encoded corpus manifest: {e}")))?;
        if m.format != FORMAT || m.version != VERSION {
            return Err(invalid(
                &path,
                format!(
                    "format {:?} version {}, this build reads {FORMAT:?} version {VERSION}",
                    m.format, m.version
                ),
            ));
        }
        let mut next = 0;
        for p in &m.parts {
            if p.first_sentence != next || p.file.contains('/') || p.file.contains('\\') {
                return Err(invalid(&path, format!("part {:?} is out of place", p.file)));
            }
            next += p.sentences;
        }
        if next != m.sentences {
            return Err(invalid(
                &path,
                format!(
                    "the parts hold {next} sentences, the manifest says {}",
                    m.sentences
                ),
            ));
        }
        Ok(m)
    }

    pub fn vocab_fingerprint(&self) -> Option<u64> {
        u64::from_str_radix(&self.vocab_fingerprint, 16).ok()
    }

    /// The parts worker `worker` of `workers` reads: every `workers`-th.
    pub fn parts_of(&self, worker: u64, workers: u64) -> impl Iterator<Item = &PartInfo> + '_ {
        self.parts
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i as u64 % workers.max(1) == worker)
            .map(|(_, p)| p)
    }
}

/// Writes one part.
pub struct PartWriter {
    path: PathBuf,
    out: BufWriter<fs_err::File>,
    block: Vec<u8>,
    info: PartInfo,
}

impl PartWriter {
    pub fn create(dir: &Path, index: usize, first_sentence: u64) -> Result<Self, EncodedError> {
        let file = format!("part-{index:05}.ids");
        let path = dir.join(&file);
        let f = fs_err::File::create(&path).map_err(io(&path))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        out.write_all(MAGIC).map_err(io(&path))?;
        out.write_all(&VERSION.to_le_bytes()).map_err(io(&path))?;
        out.write_all(&0u32.to_le_bytes()).map_err(io(&path))?;
        Ok(Self {
            path,
            out,
            block: Vec::with_capacity(BLOCK_BYTES + 4096),
            info: PartInfo {
                file,
                first_sentence,
                sentences: 0,
                tokens: 0,
                words: 0,
                bytes: 16,
            },
        })
    }

    /// Appends a sentence: `tokens` read, `ids` of them in the vocabulary.
    pub fn sentence(&mut self, tokens: u64, ids: &[u32]) -> Result<(), EncodedError> {
        varint::put(&mut self.block, tokens);
        varint::put(&mut self.block, ids.len() as u64);
        for &id in ids {
            varint::put(&mut self.block, u64::from(id));
        }
        self.info.sentences += 1;
        self.info.tokens += tokens;
        self.info.words += ids.len() as u64;
        if self.block.len() >= BLOCK_BYTES {
            self.flush_block()?;
        }
        Ok(())
    }

    /// Appends sentences already encoded (as [`PartWriter::sentence`] would),
    /// with their counts.
    pub fn encoded(
        &mut self,
        payload: &[u8],
        sentences: u64,
        tokens: u64,
        words: u64,
    ) -> Result<(), EncodedError> {
        self.block.extend_from_slice(payload);
        self.info.sentences += sentences;
        self.info.tokens += tokens;
        self.info.words += words;
        if self.block.len() >= BLOCK_BYTES {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<(), EncodedError> {
        if self.block.is_empty() {
            return Ok(());
        }
        let len = u32::try_from(self.block.len())
            .ok()
            .filter(|&l| l <= MAX_BLOCK_BYTES)
            .ok_or_else(|| invalid(&self.path, "a block passed its size limit"))?;
        let sum = xxhash_rust::xxh3::xxh3_64(&self.block);
        let e = io(&self.path);
        self.out.write_all(&len.to_le_bytes()).map_err(&e)?;
        self.out.write_all(&sum.to_le_bytes()).map_err(&e)?;
        self.out.write_all(&self.block).map_err(&e)?;
        self.info.bytes += 12 + self.block.len() as u64;
        self.block.clear();
        Ok(())
    }

    pub fn info(&self) -> &PartInfo {
        &self.info
    }

    /// Writes the last block and syncs the file.
    pub fn finish(mut self) -> Result<PartInfo, EncodedError> {
        self.flush_block()?;
        let e = io(&self.path);
        self.out.flush().map_err(&e)?;
        self.out.get_ref().sync_all().map_err(&e)?;
        Ok(self.info)
    }
}

/// Reads one part's sentences, checking every block before its sentences
/// are used, and what the manifest says of the part.
pub struct PartReader {
    path: PathBuf,
    input: BufReader<fs_err::File>,
    block: Vec<u8>,
    pos: usize,
    info: PartInfo,
    vocab_words: u64,
    sentences: u64,
    tokens: u64,
    words: u64,
}

impl PartReader {
    pub fn open(dir: &Path, info: &PartInfo, vocab_words: u64) -> Result<Self, EncodedError> {
        let path = dir.join(&info.file);
        let f = fs_err::File::open(&path).map_err(io(&path))?;
        let len = f.metadata().map_err(io(&path))?.len();
        if len != info.bytes {
            return Err(invalid(
                &path,
                format!(
                    "{len} bytes, the manifest says {} (truncated or replaced?)",
                    info.bytes
                ),
            ));
        }
        let mut input = BufReader::with_capacity(1 << 20, f);
        let mut header = [0u8; 16];
        input.read_exact(&mut header).map_err(io(&path))?;
        if &header[..8] != MAGIC || header[8..12] != VERSION.to_le_bytes() {
            return Err(invalid(
                &path,
                "not a part of an encoded corpus (bad header)",
            ));
        }
        Ok(Self {
            path,
            input,
            block: Vec::new(),
            pos: 0,
            info: info.clone(),
            vocab_words,
            sentences: 0,
            tokens: 0,
            words: 0,
        })
    }

    fn next_block(&mut self) -> Result<bool, EncodedError> {
        let mut head = [0u8; 12];
        let mut got = 0;
        while got < head.len() {
            let n = self.input.read(&mut head[got..]).map_err(io(&self.path))?;
            if n == 0 {
                if got == 0 {
                    return Ok(false);
                }
                return Err(invalid(&self.path, "the file ends inside a block header"));
            }
            got += n;
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let sum = u64::from_le_bytes([
            head[4], head[5], head[6], head[7], head[8], head[9], head[10], head[11],
        ]);
        if len > MAX_BLOCK_BYTES {
            return Err(invalid(
                &self.path,
                format!("a block of {len} bytes: corrupt"),
            ));
        }
        self.block.resize(len as usize, 0);
        self.input
            .read_exact(&mut self.block)
            .map_err(io(&self.path))?;
        if xxhash_rust::xxh3::xxh3_64(&self.block) != sum {
            return Err(invalid(
                &self.path,
                format!(
                    "a block's checksum does not match (corrupt) after sentence {} of the part",
                    self.sentences
                ),
            ));
        }
        self.pos = 0;
        Ok(true)
    }

    /// The next sentence: its tokens read and its word ids (into `ids`);
    /// None at the end, once the part is checked against the manifest.
    pub fn next_sentence(&mut self, ids: &mut Vec<u32>) -> Result<Option<u64>, EncodedError> {
        if self.pos >= self.block.len() && !self.next_block()? {
            let (s, t, w) = (self.sentences, self.tokens, self.words);
            if (s, t, w) != (self.info.sentences, self.info.tokens, self.info.words) {
                return Err(invalid(
                    &self.path,
                    format!(
                        "holds {s} sentences, {t} tokens, {w} words; the manifest says {}, {}, {}",
                        self.info.sentences, self.info.tokens, self.info.words
                    ),
                ));
            }
            return Ok(None);
        }
        let mut rest = &self.block[self.pos..];
        let bad =
            |what: &str| invalid(&self.path, format!("{what} in sentence {}", self.sentences));
        let tokens = varint::take(&mut rest).ok_or_else(|| bad("a cut varint"))?;
        let n = varint::take(&mut rest).ok_or_else(|| bad("a cut varint"))?;
        if n > tokens {
            return Err(bad("more ids than tokens"));
        }
        ids.clear();
        for _ in 0..n {
            let id = varint::take(&mut rest).ok_or_else(|| bad("a cut varint"))?;
            if id >= self.vocab_words {
                return Err(bad(&format!(
                    "word id {id} past the vocabulary's {}",
                    self.vocab_words
                )));
            }
            ids.push(id as u32);
        }
        self.pos = self.block.len() - rest.len();
        self.sentences += 1;
        self.tokens += tokens;
        self.words += n;
        Ok(Some(tokens))
    }
}

/// Writes `manifest.json` (to a temporary name, then renamed: a directory
/// with a manifest is complete).
pub fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), EncodedError> {
    let path = dir.join(MANIFEST);
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    let text = serde_json::to_string_pretty(manifest)
        .map_err(|e| invalid(&path, format!("cannot serialize: {e}")))?;
    fs_err::write(&tmp, text).map_err(io(&tmp))?;
    fs_err::rename(&tmp, &path).map_err(io(&path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_part(dir: &Path, sentences: &[(u64, Vec<u32>)]) -> PartInfo {
        let mut w = PartWriter::create(dir, 0, 0).expect("create");
        for (t, ids) in sentences {
            w.sentence(*t, ids).expect("sentence");
        }
        w.finish().expect("finish")
    }

    fn read_part(dir: &Path, info: &PartInfo) -> Result<Vec<(u64, Vec<u32>)>, EncodedError> {
        let mut r = PartReader::open(dir, info, 1_000_000)?;
        let mut out = Vec::new();
        let mut ids = Vec::new();
        while let Some(t) = r.next_sentence(&mut ids)? {
            out.push((t, ids.clone()));
        }
        Ok(out)
    }

    #[test]
    fn parts_round_trip_across_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sentences: Vec<(u64, Vec<u32>)> = (0..50_000u32)
            .map(|s| {
                let ids: Vec<u32> = (0..s % 17).map(|j| (s * 31 + j * 977) % 999_999).collect();
                (ids.len() as u64 + u64::from(s % 3), ids)
            })
            .collect();
        let info = write_part(dir.path(), &sentences);
        assert!(info.bytes > BLOCK_BYTES as u64, "several blocks");
        assert_eq!(read_part(dir.path(), &info).expect("read"), sentences);
    }

    #[test]
    fn corruption_and_truncation_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sentences: Vec<(u64, Vec<u32>)> = (0..1000).map(|s| (3, vec![s, s + 1])).collect();
        let info = write_part(dir.path(), &sentences);
        let path = dir.path().join(&info.file);
        let good = fs_err::read(&path).expect("read");
        let mut flipped = good.clone();
        flipped[100] ^= 0x10;
        fs_err::write(&path, &flipped).expect("write");
        let e = read_part(dir.path(), &info)
            .expect_err("flipped")
            .to_string();
        assert!(
            e.contains("part-00000.ids") && e.contains("checksum"),
            "{e}"
        );
        fs_err::write(&path, &good[..good.len() - 5]).expect("write");
        let e = read_part(dir.path(), &info).expect_err("cut").to_string();
        assert!(e.contains("truncated"), "{e}");
        fs_err::write(&path, &good).expect("write");
        // Ids past the vocabulary.
        let mut r = PartReader::open(dir.path(), &info, 5).expect("open");
        let mut ids = Vec::new();
        let mut err = None;
        for _ in 0..10 {
            if let Err(e) = r.next_sentence(&mut ids) {
                err = Some(e.to_string());
                break;
            }
        }
        assert!(err.is_some_and(|e| e.contains("past the vocabulary")));
    }
}
