//! Counting a corpus's words exactly, on every core, in a memory budget,
//! for vocabularies of hundreds of millions of distinct words.
//!
//! **Counting.** One thread reads the corpus ([`for_each_sentence`]: the same
//! sentences, cut and UTF-8 policy as training) and routes each token by its
//! hash to one of [`PARTITIONS`] partitions; every partition belongs to one of
//! `threads` counting threads, which keeps it in a hash table of 16-byte
//! entries over a byte arena. A partition that would outgrow its share of
//! the budget is sorted by the words' bytes and spilled to a run file
//! (zstd) in the spill directory, and starts again empty.
//!
//! **Merging.** Each partition's runs and what it holds are merged (a word's
//! counts summed), words under `min_count` dropped, and the rest sorted into
//! the vocabulary's order (count descending, then bytes ascending) — in
//! memory when they fit the budget, else by sorted runs merged again. So the
//! result is exactly [`crate::vocab::Counter`]'s: the same words, counts,
//! order and fingerprint, whatever the budget or thread count.
//!
//! Only the run files are written, in a temporary directory removed at the
//! end.

use crate::corpus::{for_each_sentence, CorpusError, InvalidUtf8};
use crate::varint;
use hashbrown::HashTable;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Partitions of the words, by hash.
pub const PARTITIONS: usize = 64;

/// Bytes of tokens a reader batch carries to a counting thread.
const BATCH_BYTES: usize = 1 << 18;

/// How to count.
#[derive(Clone, Debug)]
pub struct CountOptions {
    /// Counting threads (the corpus is read on one more).
    pub threads: usize,
    /// Bytes the counting tables may take together, and the sort after.
    pub memory_budget: u64,
    /// Where spill runs go (a temporary directory is made inside it;
    /// default: the system's temporary directory).
    pub spill_dir: Option<PathBuf>,
    pub invalid_utf8: InvalidUtf8,
    pub max_sentence: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CountError {
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    #[error("spill file {path}: {source}")]
    Spill {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make a spill directory in {path}: {source} (--spill-dir)")]
    SpillDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a counting thread failed: {0}")]
    Thread(String),
    #[error("the vocabulary's sink failed: {0}")]
    Sink(String),
}

/// Where counting is, for a progress display.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountProgress {
    /// Tokens read.
    pub tokens: u64,
    /// Sentences skipped for invalid UTF-8.
    pub skipped_sentences: u64,
}

fn hash(word: &[u8]) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(word)
}

/// The partition of a word's hash: other bits than the table uses.
fn partition_of(h: u64) -> usize {
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// A word in a partition: its bytes in the arena and its count.
#[derive(Clone, Copy)]
struct Entry {
    off: u32,
    len: u32,
    count: u64,
}

/// One partition's words: a table over an arena, and the runs it spilled.
struct Partition {
    id: usize,
    arena: Vec<u8>,
    table: HashTable<Entry>,
    runs: Vec<PathBuf>,
    /// Bytes it may take (its share of the budget).
    cap: usize,
}

impl Partition {
    fn new(id: usize, cap: usize) -> Self {
        Self {
            id,
            arena: Vec::new(),
            table: HashTable::new(),
            runs: Vec::new(),
            cap,
        }
    }

    fn bytes(&self) -> usize {
        self.arena.capacity() + self.table.allocation_size()
    }

    /// Counts one occurrence of `word` (of hash `h`), spilling first when
    /// a new word would grow the partition past its share. The sort of a
    /// spill needs 16 bytes an entry more: counted as a second table.
    fn add(&mut self, h: u64, word: &[u8], dir: &Path) -> Result<(), CountError> {
        let Self { arena, table, .. } = self;
        if let Some(e) = table.find_mut(h, |e| {
            &arena[e.off as usize..e.off as usize + e.len as usize] == word
        }) {
            e.count += 1;
            return Ok(());
        }
        let table_full = self.table.len() == self.table.capacity();
        let arena_full = self.arena.len() + word.len() > self.arena.capacity();
        let table_next = if table_full {
            (self.table.allocation_size() * 2).max(1024)
        } else {
            self.table.allocation_size()
        };
        let arena_next = if arena_full {
            (self.arena.capacity() * 2).max(self.arena.len() + word.len())
        } else {
            self.arena.capacity()
        };
        let past_u32 = self.arena.len() + word.len() > u32::MAX as usize;
        if (table_full || arena_full) && (2 * table_next + arena_next > self.cap || past_u32) {
            if !self.table.is_empty() {
                self.spill(dir)?;
            }
            // An empty partition keeps its allocations (within the cap).
            if self.arena.capacity() < word.len() {
                self.arena.reserve(word.len());
            }
        }
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(word);
        let arena = &self.arena;
        self.table.insert_unique(
            h,
            Entry {
                off,
                len: word.len() as u32,
                count: 1,
            },
            |e| hash(&arena[e.off as usize..e.off as usize + e.len as usize]),
        );
        Ok(())
    }

    /// Its entries sorted by the words' bytes.
    fn sorted(&self) -> Vec<Entry> {
        let mut entries: Vec<Entry> = self.table.iter().copied().collect();
        let arena = &self.arena;
        let key = |e: &Entry| &arena[e.off as usize..e.off as usize + e.len as usize];
        entries.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        entries
    }

    /// Writes the partition's words, sorted by bytes, to a new run and
    /// empties it.
    fn spill(&mut self, dir: &Path) -> Result<(), CountError> {
        let path = dir.join(format!("p{:02}-{:05}.run", self.id, self.runs.len()));
        let entries = self.sorted();
        let arena = &self.arena;
        write_run(
            &path,
            entries.iter().map(|e| {
                (
                    &arena[e.off as usize..e.off as usize + e.len as usize],
                    e.count,
                )
            }),
        )?;
        self.runs.push(path);
        self.table.clear();
        self.arena.clear();
        Ok(())
    }
}

/// A run file: (varint length, bytes, varint count) records, zstd.
fn write_run<'a>(
    path: &Path,
    records: impl Iterator<Item = (&'a [u8], u64)>,
) -> Result<(), CountError> {
    let err = |source| CountError::Spill {
        path: path.to_path_buf(),
        source,
    };
    let file = fs_err::File::create(path).map_err(err)?;
    let mut z = zstd::Encoder::new(BufWriter::with_capacity(1 << 20, file), 1).map_err(err)?;
    let mut buf = Vec::with_capacity(64);
    for (word, count) in records {
        buf.clear();
        varint::put(&mut buf, word.len() as u64);
        buf.extend_from_slice(word);
        varint::put(&mut buf, count);
        z.write_all(&buf).map_err(err)?;
    }
    z.finish().and_then(|mut w| w.flush()).map_err(err)
}

/// Reads a run's records back.
struct RunReader {
    path: PathBuf,
    input: BufReader<zstd::Decoder<'static, BufReader<fs_err::File>>>,
}

impl RunReader {
    fn open(path: &Path) -> Result<Self, CountError> {
        let err = |source| CountError::Spill {
            path: path.to_path_buf(),
            source,
        };
        let file = fs_err::File::open(path).map_err(err)?;
        let z = zstd::Decoder::new(file).map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 16, z),
        })
    }

    /// The next record into `word`, with its count; None at the end.
    fn next(&mut self, word: &mut Vec<u8>) -> Result<Option<u64>, CountError> {
        let err = |source| CountError::Spill {
            path: self.path.clone(),
            source,
        };
        let Some(len) = varint::read(&mut self.input).map_err(err)? else {
            return Ok(None);
        };
        word.clear();
        word.resize(len as usize, 0);
        self.input.read_exact(word).map_err(err)?;
        let count = varint::read(&mut self.input)
            .map_err(err)?
            .ok_or_else(|| err(std::io::ErrorKind::UnexpectedEof.into()))?;
        Ok(Some(count))
    }
}

/// Tokens for one counting thread: their hashes, lengths and bytes.
#[derive(Default)]
struct Batch {
    hashes: Vec<u64>,
    lens: Vec<u32>,
    bytes: Vec<u8>,
}

/// What counting a corpus found; [`Counted::vocabulary`] turns it into
/// the vocabulary's entries in order.
pub struct Counted {
    pub tokens: u64,
    pub skipped_sentences: u64,
    /// Runs spilled while counting.
    pub spills: u64,
    partitions: Vec<Partition>,
    budget: u64,
    dir: tempfile::TempDir,
}

/// Counts every token of `paths`, calling `progress` about every million
/// tokens.
pub fn count(
    paths: &[PathBuf],
    options: &CountOptions,
    mut progress: impl FnMut(CountProgress),
) -> Result<Counted, CountError> {
    let threads = options.threads.clamp(1, PARTITIONS);
    let base = options.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("colonnade-count.")
        .tempdir_in(&base)
        .map_err(|source| CountError::SpillDir {
            path: base.clone(),
            source,
        })?;
    // Each partition's share; the batches in flight are small beside it.
    let cap = (options.memory_budget as usize / PARTITIONS).max(1 << 12);
    let spill_dir = dir.path().to_path_buf();
    let mut tokens = 0u64;
    let (skipped, mut partitions) = std::thread::scope(|scope| {
        let mut senders: Vec<SyncSender<Batch>> = Vec::with_capacity(threads);
        let (free_tx, free_rx) = sync_channel::<Batch>(threads * 4);
        let mut workers = Vec::with_capacity(threads);
        for t in 0..threads {
            let (tx, rx): (SyncSender<Batch>, Receiver<Batch>) = sync_channel(2);
            senders.push(tx);
            let free_tx = free_tx.clone();
            let spill_dir = spill_dir.clone();
            workers.push(scope.spawn(move || {
                let mut mine: Vec<Partition> = (t..PARTITIONS)
                    .step_by(threads)
                    .map(|p| Partition::new(p, cap))
                    .collect();
                while let Ok(batch) = rx.recv() {
                    let mut start = 0usize;
                    for (&h, &len) in batch.hashes.iter().zip(&batch.lens) {
                        let word = &batch.bytes[start..start + len as usize];
                        start += len as usize;
                        let p = partition_of(h);
                        mine[p / threads].add(h, word, &spill_dir)?;
                    }
                    let mut batch = batch;
                    batch.hashes.clear();
                    batch.lens.clear();
                    batch.bytes.clear();
                    let _ = free_tx.try_send(batch);
                }
                Ok::<_, CountError>(mine)
            }));
        }
        drop(free_tx);
        let mut batches: Vec<Batch> = (0..threads).map(|_| Batch::default()).collect();
        let mut next_report = 1u64 << 20;
        let send = |t: usize, batches: &mut Vec<Batch>| -> bool {
            let fresh = free_rx.try_recv().unwrap_or_default();
            let full = std::mem::replace(&mut batches[t], fresh);
            senders[t].send(full).is_ok()
        };
        let read = for_each_sentence(paths, options.max_sentence, options.invalid_utf8, |s| {
            for word in s.tokens() {
                let h = hash(word.as_bytes());
                let t = partition_of(h) % threads;
                let b = &mut batches[t];
                b.hashes.push(h);
                b.lens.push(word.len() as u32);
                b.bytes.extend_from_slice(word.as_bytes());
                if b.bytes.len() >= BATCH_BYTES && !send(t, &mut batches) {
                    return Err(CountError::Thread("stopped".into()));
                }
            }
            tokens += s.len() as u64;
            if tokens >= next_report {
                next_report = tokens + (1 << 20);
                progress(CountProgress {
                    tokens,
                    skipped_sentences: 0,
                });
            }
            Ok(())
        });
        let mut sent_all = true;
        for t in 0..threads {
            if !batches[t].hashes.is_empty() {
                sent_all &= send(t, &mut batches);
            }
        }
        drop(senders);
        let mut partitions = Vec::with_capacity(PARTITIONS);
        let mut failure = None;
        for w in workers {
            match w.join() {
                Ok(Ok(mine)) => partitions.extend(mine),
                Ok(Err(e)) => failure = failure.or(Some(e)),
                Err(_) => failure = failure.or(Some(CountError::Thread("panicked".into()))),
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        let skipped = read?;
        debug_assert!(sent_all);
        Ok((skipped, partitions))
    })?;
    partitions.sort_by_key(|p| p.id);
    let spills = partitions.iter().map(|p| p.runs.len() as u64).sum();
    progress(CountProgress {
        tokens,
        skipped_sentences: skipped,
    });
    Ok(Counted {
        tokens,
        skipped_sentences: skipped,
        spills,
        partitions,
        budget: options.memory_budget,
        dir,
    })
}

/// What [`Counted::vocabulary`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VocabStats {
    /// Distinct words in the corpus.
    pub distinct: u64,
    /// Words given to the sink (at least `min_count`, at most `max_vocab`).
    pub kept: u64,
    /// Runs the final sort spilled.
    pub sort_spills: u64,
}

impl Counted {
    /// Bytes the counting tables hold now.
    pub fn table_bytes(&self) -> u64 {
        self.partitions.iter().map(|p| p.bytes() as u64).sum()
    }

    /// Gives `sink` every word seen at least `min_count` times, at most
    /// `max_vocab` of them, in the vocabulary's order (count descending,
    /// then bytes ascending). `sink` returns an error to stop.
    pub fn vocabulary(
        mut self,
        min_count: u64,
        max_vocab: Option<usize>,
        mut sink: impl FnMut(&str, u64) -> Result<(), String>,
    ) -> Result<VocabStats, CountError> {
        let min_count = min_count.max(1);
        let spilled = self.partitions.iter().any(|p| !p.runs.is_empty());
        let mut sorter = Sorter::new(self.dir.path(), self.budget as usize);
        let mut distinct = 0u64;
        let partitions = std::mem::take(&mut self.partitions);
        if spilled {
            // Everything to runs first: what the tables hold is freed
            // before the merge allocates.
            let mut partitions = partitions;
            for p in &mut partitions {
                if !p.table.is_empty() {
                    p.spill(self.dir.path())?;
                }
                p.table = HashTable::new();
                p.arena = Vec::new();
            }
            for p in &partitions {
                let mut merge = Merge::open(&p.runs)?;
                let mut word = Vec::new();
                while let Some(count) = merge.next(&mut word)? {
                    distinct += 1;
                    if count >= min_count {
                        sorter.push(&word, count)?;
                    }
                }
            }
        } else {
            for p in partitions {
                for e in p.table.iter() {
                    distinct += 1;
                    if e.count >= min_count {
                        let word = &p.arena[e.off as usize..e.off as usize + e.len as usize];
                        sorter.push(word, e.count)?;
                    }
                }
            }
        }
        let sort_spills = sorter.runs.len() as u64;
        let limit = max_vocab.map_or(u64::MAX, |m| m as u64);
        let mut kept = 0u64;
        sorter.finish(|word, count| {
            if kept >= limit {
                return Ok(false);
            }
            let word = std::str::from_utf8(word)
                .map_err(|e| CountError::Sink(format!("a counted word is not UTF-8: {e}")))?;
            sink(word, count).map_err(CountError::Sink)?;
            kept += 1;
            Ok(true)
        })?;
        Ok(VocabStats {
            distinct,
            kept,
            sort_spills,
        })
    }
}

/// K-way merge of runs sorted by bytes, summing the counts of equal words.
struct Merge {
    readers: Vec<RunReader>,
    heap: BinaryHeap<Reverse<(Vec<u8>, u64, usize)>>,
}

impl Merge {
    fn open(runs: &[PathBuf]) -> Result<Self, CountError> {
        let mut m = Self {
            readers: Vec::with_capacity(runs.len()),
            heap: BinaryHeap::with_capacity(runs.len()),
        };
        for (i, path) in runs.iter().enumerate() {
            m.readers.push(RunReader::open(path)?);
            m.refill(i)?;
        }
        Ok(m)
    }

    fn refill(&mut self, i: usize) -> Result<(), CountError> {
        let mut word = Vec::new();
        if let Some(count) = self.readers[i].next(&mut word)? {
            self.heap.push(Reverse((word, count, i)));
        }
        Ok(())
    }

    /// The next word (into `word`) and its summed count.
    fn next(&mut self, word: &mut Vec<u8>) -> Result<Option<u64>, CountError> {
        let Some(Reverse((first, mut count, i))) = self.heap.pop() else {
            return Ok(None);
        };
        self.refill(i)?;
        while let Some(Reverse((w, _, _))) = self.heap.peek() {
            if *w != first {
                break;
            }
            if let Some(Reverse((_, c, j))) = self.heap.pop() {
                count += c;
                self.refill(j)?;
            }
        }
        *word = first;
        Ok(Some(count))
    }
}

/// Sorts (word, count) into the vocabulary's order within a budget:
/// in memory, spilling sorted runs when it would pass it.
struct Sorter {
    dir: PathBuf,
    budget: usize,
    arena: Vec<u8>,
    entries: Vec<(u64, u64, u32)>,
    runs: Vec<PathBuf>,
}

impl Sorter {
    fn new(dir: &Path, budget: usize) -> Self {
        Self {
            dir: dir.to_path_buf(),
            budget: budget.max(1 << 20),
            arena: Vec::new(),
            entries: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn bytes(&self) -> usize {
        self.arena.capacity() + self.entries.capacity() * 24
    }

    fn push(&mut self, word: &[u8], count: u64) -> Result<(), CountError> {
        let grows = self.entries.len() == self.entries.capacity()
            || self.arena.len() + word.len() > self.arena.capacity();
        if grows && !self.entries.is_empty() && self.bytes() * 2 > self.budget {
            self.spill()?;
        }
        self.entries
            .push((count, self.arena.len() as u64, word.len() as u32));
        self.arena.extend_from_slice(word);
        Ok(())
    }

    fn sort(&mut self) {
        let arena = &self.arena;
        let key = |e: &(u64, u64, u32)| &arena[e.1 as usize..e.1 as usize + e.2 as usize];
        self.entries
            .sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| key(a).cmp(key(b))));
    }

    fn spill(&mut self) -> Result<(), CountError> {
        self.sort();
        let path = self.dir.join(format!("sort-{:05}.run", self.runs.len()));
        let arena = &self.arena;
        write_run(
            &path,
            self.entries.iter().map(|&(count, off, len)| {
                (&arena[off as usize..off as usize + len as usize], count)
            }),
        )?;
        self.runs.push(path);
        self.entries.clear();
        self.arena.clear();
        Ok(())
    }

    /// Gives every (word, count) in order to `emit`, which returns false to
    /// stop.
    fn finish(
        mut self,
        mut emit: impl FnMut(&[u8], u64) -> Result<bool, CountError>,
    ) -> Result<(), CountError> {
        if self.runs.is_empty() {
            self.sort();
            for &(count, off, len) in &self.entries {
                if !emit(
                    &self.arena[off as usize..off as usize + len as usize],
                    count,
                )? {
                    break;
                }
            }
            return Ok(());
        }
        if !self.entries.is_empty() {
            self.spill()?;
        }
        self.entries = Vec::new();
        self.arena = Vec::new();
        let mut readers = Vec::with_capacity(self.runs.len());
        let mut heap = BinaryHeap::with_capacity(self.runs.len());
        for (i, path) in self.runs.iter().enumerate() {
            let mut r = RunReader::open(path)?;
            let mut word = Vec::new();
            if let Some(count) = r.next(&mut word)? {
                heap.push(Reverse((Reverse(count), word, i)));
            }
            readers.push(r);
        }
        while let Some(Reverse((Reverse(count), word, i))) = heap.pop() {
            if !emit(&word, count)? {
                break;
            }
            let mut next = word;
            if let Some(c) = readers[i].next(&mut next)? {
                heap.push(Reverse((Reverse(c), next, i)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::Counter;

    /// A corpus with a Zipf-ish head, a long tail of once-seen words, and
    /// non-ASCII words.
    fn corpus(dir: &Path) -> PathBuf {
        let path = dir.join("c.txt");
        let mut text = String::new();
        let mut x = 12345u64;
        for s in 0..3000 {
            for j in 0..20 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let r = (x >> 33) % 1000;
                let word = match r {
                    0..=399 => format!("w{}", r % 7),
                    400..=699 => format!("m{}", r % 97),
                    700..=799 => format!("é{}", r % 13),
                    _ => format!("t{s}_{j}"),
                };
                text.push_str(&word);
                text.push(' ');
            }
            text.push('\n');
        }
        fs_err::write(&path, text).expect("write");
        path
    }

    fn vocab_of(
        counted: Counted,
        min_count: u64,
        max_vocab: Option<usize>,
    ) -> (Vec<(String, u64)>, VocabStats) {
        let mut out = Vec::new();
        let stats = counted
            .vocabulary(min_count, max_vocab, |w, c| {
                out.push((w.to_string(), c));
                Ok(())
            })
            .expect("vocabulary");
        (out, stats)
    }

    #[test]
    fn spilling_gives_the_same_vocabulary_as_counting_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = corpus(dir.path());
        let mut reference = Counter::default();
        reference
            .count_files(std::slice::from_ref(&path))
            .expect("count");
        let distinct = reference.distinct() as u64;
        let want = reference.into_vocab(1, None).expect("vocab");
        let want: Vec<(String, u64)> = want
            .words()
            .map(str::to_owned)
            .zip(want.counts().iter().copied())
            .collect();
        for (threads, budget) in [(1, 1u64 << 30), (3, 1 << 30), (1, 1 << 18), (4, 1 << 12)] {
            let options = CountOptions {
                threads,
                memory_budget: budget,
                spill_dir: Some(dir.path().to_path_buf()),
                invalid_utf8: InvalidUtf8::Abort,
                max_sentence: crate::corpus::DEFAULT_MAX_SENTENCE,
            };
            let counted = count(std::slice::from_ref(&path), &options, |_| {}).expect("count");
            assert_eq!(counted.tokens, 60_000);
            let spills = counted.spills;
            assert_eq!(
                spills > 0,
                budget <= 1 << 18,
                "{threads} threads, budget {budget}"
            );
            let (got, stats) = vocab_of(counted, 1, None);
            assert_eq!(stats.distinct, distinct);
            assert_eq!(
                got, want,
                "{threads} threads, budget {budget}: {spills} spills"
            );
        }
        // min-count and max-vocab apply to the merged counts.
        let options = CountOptions {
            threads: 2,
            memory_budget: 1 << 12,
            spill_dir: Some(dir.path().to_path_buf()),
            invalid_utf8: InvalidUtf8::Abort,
            max_sentence: crate::corpus::DEFAULT_MAX_SENTENCE,
        };
        let counted = count(std::slice::from_ref(&path), &options, |_| {}).expect("count");
        let (got, stats) = vocab_of(counted, 2, Some(50));
        let expect: Vec<(String, u64)> = want
            .iter()
            .filter(|(_, c)| *c >= 2)
            .take(50)
            .cloned()
            .collect();
        assert_eq!(got, expect);
        assert_eq!(stats.kept, 50);
        // No run file is left behind.
        let left: Vec<_> = fs_err::read_dir(dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("colonnade-count.")
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn the_final_sort_spills_too_and_keeps_the_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Sorter::new(dir.path(), 1 << 20);
        let mut want = Vec::new();
        for i in 0..100_000u64 {
            let word = format!("k{:x}", i.wrapping_mul(2_654_435_761) % 1_000_003);
            let count = (i * 7919) % 50;
            s.push(word.as_bytes(), count).expect("push");
            want.push((count, word));
        }
        assert!(!s.runs.is_empty(), "a 1 MiB budget spills 100K entries");
        want.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
        });
        let mut got = Vec::new();
        s.finish(|w, c| {
            got.push((c, String::from_utf8(w.to_vec()).expect("utf8")));
            Ok(true)
        })
        .expect("finish");
        assert_eq!(got, want);
    }
}
