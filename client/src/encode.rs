//! `colonnade encode`: a text corpus turned once into word ids of a
//! vocabulary, in parts (the format is `colonnade_common::encoded`'s); and
//! opening such a corpus for training, checked against the vocabulary.
//!
//! One thread reads the text (the same sentences, cut and UTF-8 policy as
//! training), `--threads` threads map batches of sentences to ids, and the
//! parts are written in order, each ending at the batch where it reaches
//! its share of the vocabulary's words.

use crate::flags::InvalidUtf8Arg;
use crate::stream::EncodedSource;
use anyhow::bail;
use colonnade_common::corpus::{for_each_sentence, CorpusError, DEFAULT_MAX_SENTENCE};
use colonnade_common::encoded::{self, Manifest, PartWriter};
use colonnade_common::varint;
use colonnade_common::vocab::{Vocab, VocabCounts};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct EncodeArgs {
    /// Corpus files, as for `train --corpus` (plain or compressed).
    #[arg(long, env = "COLONNADE_CORPUS", value_delimiter = ',', num_args = 1.., required = true)]
    pub corpus: Vec<PathBuf>,
    /// The vocabulary to encode with (`colonnade vocab`); training from the
    /// encoded corpus needs the same file.
    #[arg(long, env = "COLONNADE_VOCAB")]
    pub vocab: PathBuf,
    /// Directory to write (created; it must not hold an encoded corpus yet).
    #[arg(long, env = "COLONNADE_OUTPUT")]
    pub output: PathBuf,
    /// Parts to split it into, of about equal words: worker i of M trains
    /// parts i, i+M, ..., so give a multiple of the workers you will run.
    #[arg(long, env = "COLONNADE_PARTS", default_value_t = 64)]
    pub parts: usize,
    /// Threads that map words to ids (the text is read on one more).
    /// Default: the available cores.
    #[arg(long, env = "COLONNADE_THREADS")]
    pub threads: Option<usize>,
    /// What to do with a sentence holding invalid UTF-8: skip it or abort
    /// (give `vocab` and `encode` the same policy).
    #[arg(long, env = "COLONNADE_INVALID_UTF8", value_enum, default_value_t = InvalidUtf8Arg::Skip)]
    pub invalid_utf8: InvalidUtf8Arg,
}

/// Sentences read, for a mapping thread: their tokens, concatenated, and lengths
/// and each sentence's token count.
#[derive(Default)]
struct TextBatch {
    seq: u64,
    text: String,
    lens: Vec<u32>,
    sentences: Vec<u32>,
}

/// A batch mapped to ids: the encoded sentences and, for each, where it
/// ends in the payload and its tokens and words (so that a part can end at
/// any sentence).
struct IdBatch {
    seq: u64,
    payload: Vec<u8>,
    ends: Vec<SentenceEnd>,
}

#[derive(Clone, Copy)]
struct SentenceEnd {
    offset: usize,
    tokens: u64,
    words: u64,
}

/// Text bytes per batch.
const BATCH_BYTES: usize = 1 << 20;

pub fn run(args: &EncodeArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    if args.parts == 0 {
        bail!("--parts must be at least 1");
    }
    if args.output.join(encoded::MANIFEST).exists() {
        bail!(
            "{} already holds an encoded corpus ({}): write another directory",
            args.output.display(),
            encoded::MANIFEST
        );
    }
    // Read before the output directory is made: a wrong --vocab leaves nothing behind.
    let vocab = Vocab::load(&args.vocab)
        .map_err(|e| anyhow::anyhow!(e.for_flag("--vocab", &args.vocab)))?;
    fs_err::create_dir_all(&args.output)?;
    let words_per_part = vocab.total_count().div_ceil(args.parts as u64).max(1);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
        .max(1);
    tracing::info!(
        words = vocab.len(),
        vocab_memory = %crate::preflight::human_bytes(vocab.heap_bytes() as u64),
        parts = args.parts,
        threads,
        "encoding"
    );
    let policy = args.invalid_utf8.into();
    let (text_tx, text_rx) = async_channel::bounded::<TextBatch>(threads * 2);
    let (id_tx, id_rx) = std::sync::mpsc::sync_channel::<IdBatch>(threads * 2);
    let out = &args.output;
    let (skipped, manifest_parts, totals) = std::thread::scope(|scope| {
        let vocab = &vocab;
        for _ in 0..threads {
            let (rx, tx) = (text_rx.clone(), id_tx.clone());
            scope.spawn(move || {
                let mut ids = Vec::new();
                while let Ok(b) = rx.recv_blocking() {
                    let mut payload = Vec::with_capacity(b.text.len());
                    let (mut off, mut tok) = (0usize, 0usize);
                    let mut ends = Vec::with_capacity(b.sentences.len());
                    for &n in &b.sentences {
                        ids.clear();
                        for &len in &b.lens[tok..tok + n as usize] {
                            // Token boundaries are char boundaries: the
                            // reader gave valid UTF-8, checked once there.
                            let word = &b.text[off..off + len as usize];
                            off += len as usize;
                            if let Some(id) = vocab.id(word) {
                                ids.push(id);
                            }
                        }
                        tok += n as usize;
                        varint::put(&mut payload, u64::from(n));
                        varint::put(&mut payload, ids.len() as u64);
                        for &id in &ids {
                            varint::put(&mut payload, u64::from(id));
                        }
                        ends.push(SentenceEnd {
                            offset: payload.len(),
                            tokens: u64::from(n),
                            words: ids.len() as u64,
                        });
                    }
                    let batch = IdBatch {
                        seq: b.seq,
                        payload,
                        ends,
                    };
                    if tx.send(batch).is_err() {
                        return;
                    }
                }
            });
        }
        drop(id_tx);
        drop(text_rx);
        // The writer: batches in order into parts.
        let writer = scope.spawn(
            move || -> anyhow::Result<(Vec<encoded::PartInfo>, (u64, u64, u64))> {
                let mut parts = Vec::new();
                let mut pending: BTreeMap<u64, IdBatch> = BTreeMap::new();
                let mut next = 0u64;
                let mut sentence = 0u64;
                let (mut tokens, mut words) = (0u64, 0u64);
                let mut part: Option<PartWriter> = None;
                let mut last_log = Instant::now();
                while let Ok(b) = id_rx.recv() {
                    pending.insert(b.seq, b);
                    while let Some(b) = pending.remove(&next) {
                        next += 1;
                        // Sentences of the batch go into the current part until
                        // it holds its share of the words; then the next begins.
                        let mut from = 0usize;
                        let (mut n, mut t, mut wd) = (0u64, 0u64, 0u64);
                        for (i, e) in b.ends.iter().enumerate() {
                            n += 1;
                            t += e.tokens;
                            wd += e.words;
                            let in_part = part.as_ref().map_or(0, |w| w.info().words);
                            let last = i + 1 == b.ends.len();
                            if in_part + wd >= words_per_part || last {
                                let mut w = match part.take() {
                                    Some(w) => w,
                                    None => PartWriter::create(out, parts.len(), sentence)?,
                                };
                                w.encoded(&b.payload[from..e.offset], n, t, wd)?;
                                sentence += n;
                                tokens += t;
                                words += wd;
                                if w.info().words >= words_per_part {
                                    parts.push(w.finish()?);
                                } else {
                                    part = Some(w);
                                }
                                from = e.offset;
                                (n, t, wd) = (0, 0, 0);
                            }
                        }
                        if last_log.elapsed().as_secs() >= 10 {
                            last_log = Instant::now();
                            tracing::info!(
                                sentences = sentence,
                                tokens,
                                words,
                                parts = parts.len(),
                                "encoding"
                            );
                        }
                    }
                }
                if let Some(w) = part {
                    parts.push(w.finish()?);
                }
                Ok((parts, (sentence, tokens, words)))
            },
        );
        // The reader, on this thread.
        let mut batch = TextBatch::default();
        let mut seq = 0u64;
        let read = for_each_sentence(&args.corpus, DEFAULT_MAX_SENTENCE, policy, |s| {
            for t in s.tokens() {
                batch.text.push_str(t);
                batch.lens.push(t.len() as u32);
            }
            batch.sentences.push(s.len() as u32);
            if batch.text.len() >= BATCH_BYTES {
                batch.seq = seq;
                seq += 1;
                let full = std::mem::take(&mut batch);
                if text_tx.send_blocking(full).is_err() {
                    return Err(CorpusError::Io {
                        path: PathBuf::new(),
                        error: std::io::Error::other("the encoding threads stopped"),
                    });
                }
            }
            Ok::<(), CorpusError>(())
        });
        if read.is_ok() && !batch.sentences.is_empty() {
            batch.seq = seq;
            let _ = text_tx.send_blocking(batch);
        }
        text_tx.close();
        let written = writer
            .join()
            .map_err(|_| anyhow::anyhow!("the writer thread panicked"))??;
        let skipped = read?;
        anyhow::Ok((skipped, written.0, written.1))
    })?;
    let (sentences, tokens, words) = totals;
    let manifest = Manifest {
        format: encoded::FORMAT.into(),
        version: encoded::VERSION,
        vocab_fingerprint: format!("{:016x}", vocab.fingerprint()),
        vocab_words: vocab.len() as u64,
        max_sentence: DEFAULT_MAX_SENTENCE as u64,
        invalid_utf8: format!("{:?}", args.invalid_utf8).to_lowercase(),
        sentences,
        tokens,
        words,
        skipped_sentences: skipped,
        sources: args
            .corpus
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        parts: manifest_parts,
    };
    encoded::write_manifest(&args.output, &manifest)?;
    if words != vocab.total_count() {
        tracing::warn!(
            encoded_words = words,
            vocabulary_words = vocab.total_count(),
            "the corpus holds another number of in-vocabulary words than the vocabulary counted: \
             was it counted from another corpus (or another --invalid-utf8)?"
        );
    }
    let bytes: u64 = manifest.parts.iter().map(|p| p.bytes).sum();
    tracing::info!(
        sentences,
        tokens,
        words,
        parts = manifest.parts.len(),
        bytes,
        bytes_per_word = format!("{:.2}", bytes as f64 / words.max(1) as f64),
        skipped_sentences = skipped,
        seconds = format!("{:.1}", start.elapsed().as_secs_f64()),
        dir = %args.output.display(),
        "encoded"
    );
    Ok(())
}

/// Opens an encoded corpus for training with the vocabulary of `counts`:
/// the manifest must name that vocabulary and have cut sentences as
/// training does.
pub fn open_for_training(dir: &Path, counts: &VocabCounts) -> anyhow::Result<Arc<EncodedSource>> {
    let manifest = Manifest::load(dir)?;
    let fp = manifest.vocab_fingerprint();
    if fp != Some(counts.fingerprint) || manifest.vocab_words != counts.counts.len() as u64 {
        bail!(
            "{}: encoded with vocabulary {} ({} words), but --vocab is {:016x} ({} words): give \
             the vocabulary it was encoded with",
            dir.join(encoded::MANIFEST).display(),
            manifest.vocab_fingerprint,
            manifest.vocab_words,
            counts.fingerprint,
            counts.counts.len()
        );
    }
    if manifest.max_sentence != DEFAULT_MAX_SENTENCE as u64 {
        bail!(
            "{}: sentences cut at {} tokens, training cuts them at {DEFAULT_MAX_SENTENCE}",
            dir.display(),
            manifest.max_sentence
        );
    }
    Ok(Arc::new(EncodedSource {
        dir: dir.to_path_buf(),
        manifest,
    }))
}

/// Checks, before anything else is started, that the encoded corpus in
/// `dir` is readable and gives each of `workers` workers a part.
pub fn check_workers(dir: &Path, workers: u64) -> anyhow::Result<()> {
    let parts = Manifest::load(dir)?.parts.len() as u64;
    if parts < workers {
        bail!(
            "{}: {parts} part(s) for --num-workers {workers}: every worker needs one; encode it \
             again with --parts {workers} or more",
            dir.display()
        );
    }
    Ok(())
}
