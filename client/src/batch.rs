//! Minibatch formation, as word2vec reads sentences: frequent words are dropped
//! with word2vec's subsampling probability, then every kept position j gets a
//! window radius r_j uniform in 1..=window and its contexts are the kept
//! positions k ≠ j of the same sentence with |k − j| ≤ r_j. Consecutive input
//! positions, across sentence boundaries, are grouped into minibatches of
//! `minibatch` inputs (paper eq. (3): a minibatch is a set of (sentence,
//! position) pairs). Spanning sentences matters: Wikipedia lines average ~77
//! tokens, ~40 after subsampling, so per-sentence minibatches would be tiny and
//! every RPC's fixed cost would dominate.
//!
//! Subsampling and radii come from the sentence's ChaCha8 stream, keyed by (run
//! seed, epoch, sentence index); a minibatch's negative-sample seed is derived
//! from the sentence seed and the position of its first input. With one
//! minibatch pipeline the whole sequence is deterministic.

use colonnade_common::seeds::{self, derive, Purpose};
use rand::RngCore;
use std::sync::Arc;

/// One minibatch in wire layout, and where it starts in the corpus.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MiniBatch {
    pub inputs: Vec<u32>,
    pub context_counts: Vec<u32>,
    pub outputs: Vec<u32>,
    /// Seed of the negative-sample stream.
    pub seed: u64,
    /// The epoch (from 0), the sentence (index in the epoch, among all
    /// workers' sentences) and the kept position in it of the first input.
    pub epoch: u64,
    pub sentence: u64,
    pub position: u64,
}

impl MiniBatch {
    pub fn pairs(&self) -> usize {
        self.outputs.len()
    }

    /// Names this minibatch for messages: its epoch (counted from 1) and
    /// where in that epoch's sentences it starts.
    pub fn origin(&self) -> String {
        format!(
            "epoch {}, the minibatch starting at sentence {} (kept word {})",
            self.epoch + 1,
            self.sentence,
            self.position
        )
    }
}

/// Reusable sentence-to-minibatch former.
pub struct BatchFormer {
    /// Per word id: keep when a uniform u32 is below this (see `sgns::keep_threshold`).
    pub keep: Arc<[u32]>,
    pub window: u32,
    pub minibatch: usize,
    pub seed: u64,
    kept: Vec<u32>,
    radius: Vec<u32>,
    /// The minibatch being filled.
    current: MiniBatch,
}

impl BatchFormer {
    pub fn new(keep: Arc<[u32]>, window: u32, minibatch: usize, seed: u64) -> Self {
        Self {
            keep,
            window: window.max(1),
            minibatch: minibatch.max(1),
            seed,
            kept: Vec::new(),
            radius: Vec::new(),
            current: MiniBatch::default(),
        }
    }

    /// Subsamples `ids` and forms its minibatches, appending them to `out`.
    /// Returns the number of words kept.
    /// Subsamples sentence `sentence` of `epoch` and adds its input positions
    /// to the minibatch being filled, moving every minibatch that fills up to
    /// `out`. Returns the number of words kept.
    pub fn add_sentence(
        &mut self,
        epoch: u64,
        sentence: u64,
        ids: &[u32],
        out: &mut Vec<MiniBatch>,
    ) -> usize {
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
        for j in 0..n {
            let r = self.radius[j] as usize;
            let lo = j.saturating_sub(r);
            let hi = (j + r).min(n - 1);
            if lo == hi {
                continue; // a one-word sentence: no context
            }
            let current = &mut self.current;
            if current.inputs.is_empty() {
                current.seed = derive(sentence_seed, Purpose::Minibatch, j as u64, 0);
                (current.epoch, current.sentence, current.position) = (epoch, sentence, j as u64);
            }
            let before = current.outputs.len();
            current
                .outputs
                .extend((lo..=hi).filter(|&k| k != j).map(|k| self.kept[k]));
            current.inputs.push(self.kept[j]);
            current
                .context_counts
                .push((current.outputs.len() - before) as u32);
            if current.inputs.len() == self.minibatch {
                out.push(std::mem::take(current));
            }
        }
        n
    }

    /// Moves the partly filled minibatch, if any, to `out`.
    pub fn flush(&mut self, out: &mut Vec<MiniBatch>) {
        if !self.current.inputs.is_empty() {
            out.push(std::mem::take(&mut self.current));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(f: &mut BatchFormer, epoch: u64, sentence: u64, ids: &[u32]) -> Vec<MiniBatch> {
        let mut out = Vec::new();
        f.add_sentence(epoch, sentence, ids, &mut out);
        f.flush(&mut out);
        out
    }

    #[test]
    fn windows_and_batches() {
        let keep: Arc<[u32]> = vec![u32::MAX; 10].into();
        let mut f = BatchFormer::new(keep, 1, 2, 7);
        let out = form(&mut f, 0, 0, &[1, 2, 3, 4, 5]);
        // window 1: radius always 1.
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].inputs, [1, 2]);
        assert_eq!(out[0].context_counts, [1, 2]);
        assert_eq!(out[0].outputs, [2, 1, 3]);
        assert_eq!(out[2].inputs, [5]);
        assert_eq!(out[2].outputs, [4]);
        assert_ne!(out[0].seed, out[1].seed);
        assert_eq!(out, form(&mut f, 0, 0, &[1, 2, 3, 4, 5]), "deterministic");
        let other = form(&mut f, 1, 0, &[1, 2, 3, 4, 5]);
        assert_ne!(out[0].seed, other[0].seed, "epoch changes the seeds");
    }

    #[test]
    fn minibatches_span_sentences_but_windows_do_not() {
        let keep: Arc<[u32]> = vec![u32::MAX; 10].into();
        let mut f = BatchFormer::new(keep, 1, 4, 7);
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
    fn subsampling_drops_words_and_radius_bounds_contexts() {
        let mut keep = vec![u32::MAX; 4];
        keep[0] = 0; // never keep word 0
        let mut f = BatchFormer::new(keep.into(), 5, 1000, 1);
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
