//! Minibatch formation from one sentence, as word2vec does it: frequent words
//! are dropped with word2vec's subsampling probability, then every kept position
//! j gets a window radius r_j uniform in 1..=window and its contexts are the kept
//! positions k ≠ j with |k − j| ≤ r_j. Consecutive positions are grouped into
//! minibatches of at most `minibatch` inputs (paper eq. (3): a minibatch is a set
//! of (sentence, position) pairs).
//!
//! All randomness comes from the sentence's ChaCha8 stream, keyed by (run seed,
//! epoch, sentence index), so minibatches are the same whatever the threading.

use colonnade_common::seeds::{self, derive, Purpose};
use rand::RngCore;
use std::sync::Arc;

/// One minibatch in wire layout.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MiniBatch {
    pub inputs: Vec<u32>,
    pub context_counts: Vec<u32>,
    pub outputs: Vec<u32>,
    /// Seed of the negative-sample stream.
    pub seed: u64,
}

impl MiniBatch {
    pub fn pairs(&self) -> usize {
        self.outputs.len()
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
        }
    }

    /// Subsamples `ids` and forms its minibatches, appending them to `out`.
    /// Returns the number of words kept.
    pub fn form(
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
        let mut current = MiniBatch::default();
        let mut batch_index = 0u64;
        for j in 0..n {
            let r = self.radius[j] as usize;
            let lo = j.saturating_sub(r);
            let hi = (j + r).min(n - 1);
            let before = current.outputs.len();
            for k in lo..=hi {
                if k != j {
                    current.outputs.push(self.kept[k]);
                }
            }
            let count = current.outputs.len() - before;
            if count == 0 {
                continue;
            }
            current.inputs.push(self.kept[j]);
            current.context_counts.push(count as u32);
            if current.inputs.len() == self.minibatch {
                current.seed = derive(sentence_seed, Purpose::Minibatch, batch_index, 0);
                batch_index += 1;
                out.push(std::mem::take(&mut current));
            }
        }
        if !current.inputs.is_empty() {
            current.seed = derive(sentence_seed, Purpose::Minibatch, batch_index, 0);
            out.push(current);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_batches() {
        let keep: Arc<[u32]> = vec![u32::MAX; 10].into();
        let mut f = BatchFormer::new(keep, 1, 2, 7);
        let mut out = Vec::new();
        assert_eq!(f.form(0, 0, &[1, 2, 3, 4, 5], &mut out), 5);
        // window 1: radius always 1.
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].inputs, [1, 2]);
        assert_eq!(out[0].context_counts, [1, 2]);
        assert_eq!(out[0].outputs, [2, 1, 3]);
        assert_eq!(out[2].inputs, [5]);
        assert_eq!(out[2].outputs, [4]);
        assert_ne!(out[0].seed, out[1].seed);
        let mut again = Vec::new();
        f.form(0, 0, &[1, 2, 3, 4, 5], &mut again);
        assert_eq!(out, again, "deterministic");
        let mut other = Vec::new();
        f.form(1, 0, &[1, 2, 3, 4, 5], &mut other);
        assert_ne!(out[0].seed, other[0].seed, "epoch changes the seeds");
    }

    #[test]
    fn subsampling_drops_words_and_radius_bounds_contexts() {
        let mut keep = vec![u32::MAX; 4];
        keep[0] = 0; // never keep word 0
        let mut f = BatchFormer::new(keep.into(), 5, 1000, 1);
        let mut out = Vec::new();
        let ids: Vec<u32> = (0..400).map(|i| i % 4).collect();
        let kept = f.form(3, 9, &ids, &mut out);
        assert_eq!(kept, 300);
        let b = &out[0];
        assert!(!b.outputs.contains(&0) && !b.inputs.contains(&0));
        assert!(b.context_counts.iter().all(|&c| (1..=10).contains(&c)));
        assert_eq!(
            b.context_counts.iter().sum::<u32>() as usize,
            b.outputs.len()
        );
    }
}
