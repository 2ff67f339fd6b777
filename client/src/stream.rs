//! The one minibatch stream of a worker: its sentences of every epoch, read
//! on one thread, turned into minibatches there, and handed to the training
//! pipelines in jobs. Each minibatch leaves this module complete: its
//! identity (worker, epoch, sequence number), its negative-sample seed and
//! its learning rate are fixed here, so no pipeline, thread count or timing
//! changes which minibatches exist; pipelines only step them.
//!
//! Formation is word2vec's: frequent words are dropped with word2vec's
//! subsampling probability, then every kept position j gets a window radius
//! r_j uniform in 1..=window and its contexts are the kept positions k ≠ j of
//! the same sentence with |k − j| ≤ r_j. Consecutive input positions, across
//! sentence (and epoch) boundaries, are grouped into minibatches of
//! `minibatch` inputs (paper eq. (3): a minibatch is a set of (sentence,
//! position) pairs). Spanning sentences matters: lines of text such as
//! Wikipedia's are short, shorter still after subsampling, so per-sentence
//! minibatches would be tiny and every RPC's fixed cost would dominate.
//!
//! Subsampling and radii come from the sentence's ChaCha8 stream, keyed by
//! (run seed, epoch, sentence index), the sentence index counting all
//! workers' sentences; a minibatch's seed is derived from the sentence seed
//! and the position of its first input. Its learning rate is word2vec's
//! linear decay at the in-vocabulary words this worker has read when the
//! minibatch is complete.

use colonnade_common::corpus::{InvalidUtf8, SentenceReader, INVALID_UTF8_WARNINGS};
use colonnade_common::encoded::{Manifest, PartReader};
use colonnade_common::model::Objective;
use colonnade_common::seeds::{self, derive, Purpose};
use colonnade_common::sgns::{learning_rate, learning_rate_to};
use colonnade_common::vocab::{Vocab, VocabCounts};
use colonnade_graph::walk::{WalkParams, Walks};
use colonnade_graph::Graph;
use colonnade_proto::domain::{Segment, Windows};
use colonnade_proto::{Minibatch, MinibatchId};
use rand::RngCore;
use std::path::PathBuf;
use std::sync::Arc;

/// word2vec's learning-rate schedule over this worker's share of all epochs.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub alpha0: f32,
    /// gensim's final rate (`--min-alpha`): linear to it; none: word2vec's
    /// schedule.
    pub min_alpha: Option<f32>,
    /// In-vocabulary words this worker reads over all epochs.
    pub words_total: u64,
}

/// Largest window radius: minibatches travel as windows, one byte per radius.
pub const MAX_WINDOW: u32 = u8::MAX as u32;

/// Sentences to minibatches, for one worker.
pub struct BatchFormer {
    /// Per word id: keep when a uniform u32 is below this (see `sgns::keep_threshold`).
    keep: Arc<[u32]>,
    window: u32,
    minibatch: usize,
    seed: u64,
    worker: u64,
    schedule: Schedule,
    /// In-vocabulary words read so far (all epochs).
    words: u64,
    /// The epoch of the last minibatch started, and how many this worker
    /// started in it.
    epoch: u64,
    seq: u64,
    kept: Vec<u32>,
    radius: Vec<u32>,
    /// The minibatch being filled.
    current: Minibatch,
    /// What the minibatches train, and whether they share negatives.
    objective: Objective,
    shared_negatives: bool,
    /// Spent minibatches whose buffers the next ones are formed in, and
    /// where the pipelines give them back.
    stock: Vec<Minibatch>,
    spent: Spent,
}

/// Minibatches the pipelines have stepped, given back to their worker's
/// [`BatchFormer`] so that it forms the next ones in their buffers instead
/// of allocating and growing new ones (at `--minibatch 16`, growing them
/// and freeing them on another thread was 5 % of an embedded run's CPU).
/// Holds at most [`Spent::KEEP`]; what it does not hold is dropped.
#[derive(Clone, Default)]
pub struct Spent(Arc<std::sync::Mutex<Vec<Minibatch>>>);

impl Spent {
    const KEEP: usize = 4096;

    /// Takes `mbs` (leaving it empty) to be formed again.
    pub fn give(&self, mbs: &mut Vec<Minibatch>) {
        if let Ok(mut pool) = self.0.lock() {
            let room = Self::KEEP.saturating_sub(pool.len()).min(mbs.len());
            pool.extend(mbs.drain(..room));
        }
        mbs.clear();
    }

    /// Moves every minibatch held into `into`.
    fn take_all(&self, into: &mut Vec<Minibatch>) {
        if let Ok(mut pool) = self.0.lock() {
            into.append(&mut pool);
        }
    }
}

/// An empty minibatch in `mb`'s buffers: every other field as
/// `Minibatch::default()` leaves it.
fn emptied(mb: Minibatch) -> Minibatch {
    fn cleared<T>(mut v: Vec<T>) -> Vec<T> {
        v.clear();
        v
    }
    let w = mb.windows;
    Minibatch {
        inputs: cleared(mb.inputs),
        context_counts: cleared(mb.context_counts),
        outputs: cleared(mb.outputs),
        windows: Windows {
            tokens: cleared(w.tokens),
            segments: cleared(w.segments),
            radii: cleared(w.radii),
        },
        ..Minibatch::default()
    }
}

impl BatchFormer {
    /// `window` is at most [`MAX_WINDOW`] (radii travel as one byte).
    pub fn new(
        keep: Arc<[u32]>,
        window: u32,
        minibatch: usize,
        seed: u64,
        worker: u64,
        schedule: Schedule,
    ) -> Self {
        Self {
            keep,
            window: window.clamp(1, MAX_WINDOW),
            minibatch: minibatch.max(1),
            seed,
            worker,
            schedule,
            words: 0,
            epoch: 0,
            seq: 0,
            kept: Vec::new(),
            radius: Vec::new(),
            current: Minibatch::default(),
            objective: Objective::SkipGram,
            shared_negatives: false,
            stock: Vec::new(),
            spent: Spent::default(),
        }
    }

    /// Forms the minibatches in the buffers of those given back to `spent`.
    pub fn recycling(mut self, spent: Spent) -> Self {
        self.spent = spent;
        self
    }

    /// Forms minibatches of `objective` (CBOW reads the same windows; see
    /// [`Minibatch::objective`]), skip-gram ones with `shared_negatives`
    /// ([`Minibatch::shared_negatives`]; never CBOW ones).
    pub fn objective(mut self, objective: Objective, shared_negatives: bool) -> Self {
        self.objective = objective;
        self.shared_negatives = shared_negatives && !objective.is_cbow();
        self
    }

    /// Subsamples sentence `sentence` of `epoch` (its in-vocabulary `ids`)
    /// and adds its input positions to the minibatch being filled, moving
    /// every minibatch that fills up to `out`. Returns the number of words kept.
    pub fn add_sentence(
        &mut self,
        epoch: u64,
        sentence: u64,
        ids: &[u32],
        out: &mut Vec<Minibatch>,
    ) -> usize {
        self.words += ids.len() as u64;
        let sentence_seed = derive(self.seed, Purpose::Sentence, epoch, sentence);
        let mut rng = seeds::rng(sentence_seed);
        self.kept.clear();
        self.radius.clear();
        for &w in ids {
            let threshold = self.keep[w as usize];
            let draw = rng.next_u32();
            if threshold == u32::MAX || draw < threshold {
                self.kept.push(w);
            }
        }
        for _ in 0..self.kept.len() {
            self.radius.push(self.window - rng.next_u32() % self.window);
        }
        let n = self.kept.len();
        // The stretch of this sentence the minibatch being filled covers:
        // its first input position and the reach [lo, hi] of its windows.
        let mut open: Option<(usize, usize, usize)> = None;
        for j in 0..n {
            let r = self.radius[j] as usize;
            let lo = j.saturating_sub(r);
            let hi = (j + r).min(n - 1);
            if lo == hi {
                continue; // a one-word sentence: no context
            }
            if self.current.inputs.is_empty() {
                if epoch != self.epoch {
                    (self.epoch, self.seq) = (epoch, 0);
                }
                let current = &mut self.current;
                current.objective = self.objective;
                current.shared_negatives = self.shared_negatives;
                current.id = MinibatchId {
                    worker: self.worker,
                    epoch,
                    seq: self.seq,
                };
                self.seq += 1;
                current.seed = derive(sentence_seed, Purpose::Minibatch, j as u64, 0);
                (current.sentence, current.position) = (sentence, j as u64);
            }
            let current = &mut self.current;
            let before = current.outputs.len();
            current
                .outputs
                .extend((lo..=hi).filter(|&k| k != j).map(|k| self.kept[k]));
            current.inputs.push(self.kept[j]);
            current
                .context_counts
                .push((current.outputs.len() - before) as u32);
            current.windows.radii.push(r as u8);
            open = Some(match open {
                None => (j, lo, hi),
                Some((first, l, h)) => (first, l.min(lo), h.max(hi)),
            });
            if current.inputs.len() == self.minibatch {
                self.close_segment(open.take(), j);
                self.complete(out);
            }
        }
        self.close_segment(open, n.saturating_sub(1));
        n
    }

    /// Adds the stretch of the current sentence from input position `first`
    /// to `last` (all of them inputs), reaching words [lo, hi], to the
    /// windows of the minibatch being filled.
    fn close_segment(&mut self, open: Option<(usize, usize, usize)>, last: usize) {
        let Some((first, lo, hi)) = open else {
            return;
        };
        let w = &mut self.current.windows;
        w.tokens.extend_from_slice(&self.kept[lo..=hi]);
        w.segments.push(Segment {
            len: (hi - lo + 1) as u32,
            first: (first - lo) as u32,
            inputs: (last - first + 1) as u32,
        });
    }

    /// Fixes the learning rate of the filled minibatch and moves it to `out`.
    fn complete(&mut self, out: &mut Vec<Minibatch>) {
        if self.stock.is_empty() {
            self.spent.take_all(&mut self.stock);
        }
        let next = self.stock.pop().map(emptied).unwrap_or_default();
        let mut mb = std::mem::replace(&mut self.current, next);
        let s = &self.schedule;
        mb.alpha = match s.min_alpha {
            Some(min) => learning_rate_to(s.alpha0, min, self.words, s.words_total),
            None => learning_rate(s.alpha0, self.words, s.words_total),
        };
        out.push(mb);
    }

    /// Moves the partly filled minibatch, if any, to `out`.
    pub fn flush(&mut self, out: &mut Vec<Minibatch>) {
        if !self.current.inputs.is_empty() {
            self.complete(out);
        }
    }
}

/// In-vocabulary words per job sent from the reader to the pipelines.
const JOB_WORDS: u64 = 10_000;

/// Consecutive minibatches of the stream, and the corpus they were formed
/// from (counted when a pipeline takes the job).
#[derive(Default)]
pub struct Job {
    /// Its place in the worker's stream (0, 1, …; all epochs): a training
    /// position counts the jobs done.
    pub index: u64,
    pub minibatches: Vec<Minibatch>,
    /// Corpus tokens read (in and out of vocabulary).
    pub tokens: u64,
    /// In-vocabulary words read.
    pub words: u64,
    /// Words kept by subsampling.
    pub trained_words: u64,
}

/// What a worker's sentences come from, with the vocabulary's counts.
#[derive(Clone)]
pub enum Source {
    /// Text corpus files, read in order every epoch, and the vocabulary
    /// that maps their words to ids.
    Text(Vec<PathBuf>, Arc<Vocab>),
    /// Random walks over a graph, generated from the run seed.
    Walks(Arc<GraphSource>, Arc<VocabCounts>),
    /// An encoded corpus: word ids already, in parts.
    Encoded(Arc<EncodedSource>, Arc<VocabCounts>),
}

impl Source {
    /// The vocabulary's counts and fingerprint.
    pub fn counts(&self) -> Arc<VocabCounts> {
        match self {
            Self::Text(_, vocab) => vocab.counts_only(),
            Self::Walks(_, counts) | Self::Encoded(_, counts) => Arc::clone(counts),
        }
    }

    /// The in-vocabulary words one epoch gives worker `worker` of
    /// `workers`, where the source knows it (an encoded corpus).
    pub fn words_of(&self, worker: u64, workers: u64) -> Option<u64> {
        match self {
            Self::Encoded(e, _) => {
                Some(e.manifest.parts_of(worker, workers).map(|p| p.words).sum())
            }
            _ => None,
        }
    }
}

/// An encoded corpus: its directory and manifest.
pub struct EncodedSource {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// A graph, its walks, and each node's vocabulary id.
pub struct GraphSource {
    pub graph: Graph,
    pub walks: WalkParams,
    /// The run seed the walks derive from.
    pub seed: u64,
    /// Per node: its vocabulary id, or `u32::MAX` when it is not in the
    /// vocabulary (seen fewer than --min-count times).
    pub vocab_ids: Vec<u32>,
}

impl GraphSource {
    pub fn walks(&self) -> Walks<'_> {
        Walks::new(&self.graph, self.walks, self.seed)
    }
}

/// What the stream of one worker is made from.
pub struct StreamParams {
    pub source: Source,
    pub iter: u32,
    pub worker_index: u64,
    pub num_workers: u64,
    pub max_sentence: usize,
    pub invalid_utf8: InvalidUtf8,
    /// Resume: the first `jobs` jobs were trained before (they are formed,
    /// for the schedule and the sequence numbers, but not sent), the last
    /// minibatch of them being `last`.
    pub skip: Skip,
}

/// The part of the stream a resumed worker does not train again.
#[derive(Clone, Copy, Debug, Default)]
pub struct Skip {
    pub jobs: u64,
    pub last: Option<MinibatchId>,
}

/// Sentences to jobs: fills the job being formed, hands it on when it holds
/// [`JOB_WORDS`] words (dropping the jobs a resumed worker trained before).
struct Jobs<'a, F: FnMut(Job) -> bool> {
    former: BatchFormer,
    job: Job,
    next_index: u64,
    skip: Skip,
    last_skipped: Option<MinibatchId>,
    send: &'a mut F,
}

impl<F: FnMut(Job) -> bool> Jobs<'_, F> {
    /// Adds sentence `index` of `epoch`: `tokens` read, `ids` of them in
    /// the vocabulary. False when training stopped.
    fn add(&mut self, epoch: u64, index: u64, tokens: usize, ids: &[u32]) -> anyhow::Result<bool> {
        let job = &mut self.job;
        let kept = self
            .former
            .add_sentence(epoch, index, ids, &mut job.minibatches);
        job.tokens += tokens as u64;
        job.words += ids.len() as u64;
        job.trained_words += kept as u64;
        if job.words >= JOB_WORDS {
            return self.emit();
        }
        Ok(true)
    }

    /// Sends the job being formed (or drops it while skipping).
    fn emit(&mut self) -> anyhow::Result<bool> {
        let mut job = std::mem::take(&mut self.job);
        job.index = self.next_index;
        self.next_index += 1;
        if job.index < self.skip.jobs {
            if let Some(m) = job.minibatches.last() {
                self.last_skipped = Some(m.id);
            }
            return Ok(true);
        }
        if job.index == self.skip.jobs && self.skip.jobs > 0 && self.last_skipped != self.skip.last
        {
            let shown =
                |m: Option<MinibatchId>| m.map_or_else(|| "none".to_string(), |m| m.to_string());
            anyhow::bail!(
                "cannot resume: the checkpoint's position (job {}, last minibatch: {}) does not \
                 match this worker's stream (last minibatch: {}): the corpus, the vocabulary, \
                 the worker split or the training flags changed since the checkpoint; give the \
                 same ones, or --restart",
                self.skip.jobs,
                shown(self.skip.last),
                shown(self.last_skipped)
            );
        }
        Ok((self.send)(job))
    }

    /// Sends what is left.
    fn finish(mut self) -> anyhow::Result<()> {
        self.former.flush(&mut self.job.minibatches);
        if self.job.tokens > 0 || !self.job.minibatches.is_empty() {
            self.emit()?;
        }
        Ok(())
    }
}

/// Forms this worker's minibatches of every epoch, in order, sending them in
/// jobs of ~[`JOB_WORDS`] words; stops early (without error) when the
/// receiving side closes. Returns the sentences skipped for invalid UTF-8 in
/// one epoch (the same ones are skipped in every epoch; only the first epoch
/// logs them).
pub fn form_minibatches(
    p: &StreamParams,
    former: BatchFormer,
    mut send: impl FnMut(Job) -> bool,
) -> anyhow::Result<u64> {
    let mut jobs = Jobs {
        former,
        job: Job::default(),
        next_index: 0,
        skip: p.skip,
        last_skipped: None,
        send: &mut send,
    };
    let mine = |index: u64| index % p.num_workers == p.worker_index;
    let mut skipped = 0u64;
    let mut ids = Vec::new();
    for epoch in 0..u64::from(p.iter) {
        match &p.source {
            Source::Text(corpus, vocab) => {
                let mut sentence = 0u64;
                for path in corpus {
                    let warnings = if epoch == 0 {
                        INVALID_UTF8_WARNINGS.saturating_sub(skipped)
                    } else {
                        0
                    };
                    let mut reader = SentenceReader::open(path, p.max_sentence)?
                        .invalid_utf8(p.invalid_utf8)
                        .warn_limit(warnings);
                    while let Some(s) = reader.next_sentence()? {
                        let index = sentence;
                        sentence += 1;
                        if !mine(index) {
                            continue;
                        }
                        ids.clear();
                        ids.extend(s.tokens().filter_map(|t| vocab.id(t)));
                        if !jobs.add(epoch, index, s.len(), &ids)? {
                            return Ok(skipped); // training stopped; its error is reported instead
                        }
                    }
                    if epoch == 0 {
                        skipped += reader.skipped();
                    }
                }
            }
            Source::Encoded(e, counts) => {
                let words = counts.counts.len() as u64;
                for part in e.manifest.parts_of(p.worker_index, p.num_workers) {
                    let mut reader = PartReader::open(&e.dir, part, words)?;
                    let mut index = part.first_sentence;
                    while let Some(tokens) = reader.next_sentence(&mut ids)? {
                        if !jobs.add(epoch, index, tokens as usize, &ids)? {
                            return Ok(skipped);
                        }
                        index += 1;
                    }
                }
            }
            Source::Walks(g, _) => {
                let go_on = g.walks().for_each(epoch, mine, |index, walk| {
                    ids.clear();
                    ids.extend(
                        walk.iter()
                            .map(|&v| g.vocab_ids[v as usize])
                            .filter(|&id| id != u32::MAX),
                    );
                    jobs.add(epoch, index, walk.len(), &ids)
                })?;
                if !go_on {
                    return Ok(skipped);
                }
            }
        }
    }
    jobs.finish()?;
    Ok(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn former(keep: Vec<u32>, window: u32, minibatch: usize, seed: u64) -> BatchFormer {
        let schedule = Schedule {
            alpha0: 0.025,
            min_alpha: None,
            words_total: 1000,
        };
        BatchFormer::new(keep.into(), window, minibatch, seed, 0, schedule)
    }

    fn form(f: &mut BatchFormer, epoch: u64, sentence: u64, ids: &[u32]) -> Vec<Minibatch> {
        let mut out = Vec::new();
        f.add_sentence(epoch, sentence, ids, &mut out);
        f.flush(&mut out);
        out
    }

    #[test]
    fn windows_and_batches() {
        let mut f = former(vec![u32::MAX; 10], 1, 2, 7);
        let out = form(&mut f, 0, 0, &[1, 2, 3, 4, 5]);
        // window 1: radius always 1.
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].inputs, [1, 2]);
        assert_eq!(out[0].context_counts, [1, 2]);
        assert_eq!(out[0].outputs, [2, 1, 3]);
        assert_eq!(out[2].inputs, [5]);
        assert_eq!(out[2].outputs, [4]);
        assert_ne!(out[0].seed, out[1].seed);
        let ids: Vec<u64> = out.iter().map(|m| m.id.seq).collect();
        assert_eq!(
            ids,
            [0, 1, 2],
            "sequence numbers count the epoch's minibatches"
        );
        // All three are complete once the sentence's 5 words are read.
        assert!(out.iter().all(|m| m.alpha == learning_rate(0.025, 5, 1000)));
        let again = form(
            &mut former(vec![u32::MAX; 10], 1, 2, 7),
            0,
            0,
            &[1, 2, 3, 4, 5],
        );
        assert_eq!(out, again, "deterministic");
        let other = form(&mut f, 1, 0, &[1, 2, 3, 4, 5]);
        assert_ne!(out[0].seed, other[0].seed, "epoch changes the seeds");
    }

    /// Minibatches formed in the buffers of spent ones, given back in any
    /// state, are the ones a former without any forms.
    #[test]
    fn recycled_minibatches_are_formed_as_new_ones() {
        let sentences: Vec<Vec<u32>> = (0..40u32)
            .map(|s| (0..(3 + s % 11)).map(|i| (s * 7 + i * 3) % 10).collect())
            .collect();
        let spent = Spent::default();
        let mut fresh = former(vec![u32::MAX / 2; 10], 3, 5, 9);
        let mut recycling = former(vec![u32::MAX / 2; 10], 3, 5, 9).recycling(spent.clone());
        for (i, ids) in sentences.iter().enumerate() {
            let want = form(&mut fresh, 0, i as u64, ids);
            let mut got = form(&mut recycling, 0, i as u64, ids);
            assert_eq!(got, want, "sentence {i}");
            // Give them back as a pipeline leaves them, fields and all.
            spent.give(&mut got);
            assert!(got.is_empty());
        }
        assert!(
            !recycling.stock.is_empty() || !spent.0.lock().expect("pool").is_empty(),
            "the former kept the minibatches given back"
        );
    }

    #[test]
    fn minibatches_span_sentences_but_windows_do_not() {
        let mut f = former(vec![u32::MAX; 10], 1, 4, 7);
        let mut out = Vec::new();
        f.add_sentence(0, 0, &[1, 2, 3], &mut out);
        assert!(out.is_empty(), "3 inputs do not fill a minibatch of 4");
        f.add_sentence(0, 1, &[9], &mut out); // no context: no input
        f.add_sentence(0, 2, &[4, 5, 6], &mut out);
        f.flush(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].inputs, [1, 2, 3, 4]);
        assert_eq!((out[0].sentence, out[0].position), (0, 0));
        assert_eq!((out[1].sentence, out[1].position), (2, 1));
        // word 3 ends sentence 0: its only context is 2, never 4 of the next sentence.
        assert_eq!(out[0].outputs, [2, 1, 3, 2, 5]);
        assert_eq!(out[1].inputs, [5, 6]);
    }

    #[test]
    fn windows_expand_to_the_explicit_pairs_and_travel_compactly() {
        // Subsampled sentences of 0..30 words, minibatches of 7 inputs (so
        // they split sentences), window 5.
        let keep: Vec<u32> = (0..50)
            .map(|w| if w % 3 == 0 { u32::MAX / 2 } else { u32::MAX })
            .collect();
        let mut f = former(keep, 5, 7, 3);
        let mut out = Vec::new();
        let mut rng = seeds::rng(5);
        for s in 0..60 {
            let len = rng.next_u32() % 30;
            let ids: Vec<u32> = (0..len).map(|_| rng.next_u32() % 50).collect();
            f.add_sentence(0, s, &ids, &mut out);
        }
        f.flush(&mut out);
        assert!(out.len() > 20, "{} minibatches", out.len());
        let (mut tokens, mut inputs) = (0, 0);
        for mb in &out {
            let (mut i, mut c, mut o) = (Vec::new(), Vec::new(), Vec::new());
            mb.windows
                .expand(&mut i, &mut c, &mut o)
                .expect("valid windows");
            assert_eq!((&i, &c, &o), (&mb.inputs, &mb.context_counts, &mb.outputs));
            let mut back = Minibatch::default();
            back.decode_from(Some(&mb.to_wire(1))).expect("decodes");
            assert_eq!(
                (&back.inputs, &back.context_counts, &back.outputs, back.seed),
                (&mb.inputs, &mb.context_counts, &mb.outputs, mb.seed)
            );
            assert_eq!(back.alpha, mb.alpha);
            tokens += mb.windows.tokens.len();
            inputs += mb.inputs.len();
        }
        // One id per input, plus the window margins where a minibatch
        // starts or ends inside a sentence.
        assert!(tokens < inputs * 2, "{tokens} ids for {inputs} inputs");
    }

    #[test]
    fn subsampling_drops_words_and_radius_bounds_contexts() {
        let mut keep = vec![u32::MAX; 4];
        keep[0] = 0; // never keep word 0
        let mut f = former(keep, 5, 1000, 1);
        let mut out = Vec::new();
        let ids: Vec<u32> = (0..400).map(|i| i % 4).collect();
        assert_eq!(f.add_sentence(3, 9, &ids, &mut out), 300);
        f.flush(&mut out);
        let b = &out[0];
        assert!(!b.outputs.contains(&0) && !b.inputs.contains(&0));
        assert!(b.context_counts.iter().all(|&c| (1..=10).contains(&c)));
        assert_eq!(
            b.context_counts.iter().sum::<u32>() as usize,
            b.outputs.len()
        );
    }
}
