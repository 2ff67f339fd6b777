//! Negative sampling from the unigram distribution raised to a power (word2vec:
//! count^0.75), by Walker's alias method: O(V) memory (8 bytes a word) and O(1)
//! per draw, for vocabularies far beyond word2vec's 1e8-entry table.
//!
//! Shards build the table from the counts the client sends and draw from the
//! minibatch's ChaCha8 stream; construction is plain sequential f64 arithmetic
//! and draws use integer comparisons only, so every shard and every reference
//! draws the same negatives.

use rand::RngCore;

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("the sampler needs at least two words with a positive count, got {0}")]
    TooFewWords(usize),
    #[error("vocabulary of {0} words exceeds the u32 id space")]
    TooLarge(usize),
}

/// Alias table over word ids `0..len`.
#[derive(Clone, Debug)]
pub struct AliasSampler {
    /// Per bucket i: (probability of keeping i scaled to 2^32, u32::MAX
    /// meaning always; the word drawn otherwise), side by side so that a draw
    /// touches one cache line (two separate arrays cost two misses per draw;
    /// perf put ~60 % of drawing the targets on those loads).
    buckets: Box<[(u32, u32)]>,
}

impl AliasSampler {
    /// Builds the table for weights count^power.
    pub fn new(counts: &[u64], power: f64) -> Result<Self, SamplerError> {
        let n = counts.len();
        if u32::try_from(n).is_err() {
            return Err(SamplerError::TooLarge(n));
        }
        let positive = counts.iter().filter(|&&c| c > 0).count();
        if positive < 2 {
            return Err(SamplerError::TooFewWords(positive));
        }
        let weights: Vec<f64> = counts.iter().map(|&c| (c as f64).powf(power)).collect();
        let total: f64 = weights.iter().sum();
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let mut small = Vec::new();
        let mut large = Vec::new();
        for (i, &p) in scaled.iter().enumerate() {
            if p < 1.0 {
                small.push(i as u32);
            } else {
                large.push(i as u32);
            }
        }
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s as usize] = l;
            scaled[l as usize] = (scaled[l as usize] + scaled[s as usize]) - 1.0;
            if scaled[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Whatever remains is 1 up to rounding: always keep it.
        for i in small.into_iter().chain(large) {
            scaled[i as usize] = 1.0;
        }
        let buckets = scaled
            .iter()
            .zip(alias)
            .map(|(&p, alias)| {
                let threshold = if p >= 1.0 {
                    u32::MAX
                } else {
                    (p * 4_294_967_296.0) as u32
                };
                (threshold, alias)
            })
            .collect();
        Ok(Self { buckets })
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Memory held by the table.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * 8
    }

    /// One draw from the distribution.
    #[inline]
    pub fn sample<R: RngCore>(&self, rng: &mut R) -> u32 {
        let r = rng.next_u64();
        let bucket = (((r >> 32) * self.buckets.len() as u64) >> 32) as usize;
        let (threshold, alias) = self.buckets[bucket];
        if (r as u32) < threshold || threshold == u32::MAX {
            bucket as u32
        } else {
            alias
        }
    }

    /// Fills `out` with negatives, none equal to `positive` (paper Fig. 5 line 7).
    #[inline]
    pub fn negatives<R: RngCore>(&self, rng: &mut R, positive: u32, out: &mut [u32]) {
        for slot in out {
            let mut w = self.sample(rng);
            let mut tries = 0;
            while w == positive {
                tries += 1;
                if tries == 64 {
                    // A distribution dominated by one word: take its neighbour.
                    w = (positive + 1) % self.buckets.len() as u32;
                    break;
                }
                w = self.sample(rng);
            }
            *slot = w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::rng;

    #[test]
    fn frequencies_follow_count_power() {
        let counts = [1000u64, 500, 100, 10, 1, 0, 7];
        let s = AliasSampler::new(&counts, 0.75).expect("valid counts");
        let mut r = rng(42);
        let draws = 2_000_000;
        let mut hist = [0u64; 7];
        for _ in 0..draws {
            hist[s.sample(&mut r) as usize] += 1;
        }
        let total: f64 = counts.iter().map(|&c| (c as f64).powf(0.75)).sum();
        for (i, &c) in counts.iter().enumerate() {
            let p = (c as f64).powf(0.75) / total;
            let expected = p * draws as f64;
            let sd = (draws as f64 * p * (1.0 - p)).sqrt().max(1.0);
            let got = hist[i] as f64;
            assert!(
                (got - expected).abs() < 5.0 * sd,
                "word {i}: {got} draws, expected {expected:.0} ± {sd:.0}"
            );
        }
        assert_eq!(hist[5], 0, "a zero count is never drawn");
    }

    #[test]
    fn negatives_avoid_the_positive_and_repeat_from_the_seed() {
        let s = AliasSampler::new(&[100, 1], 0.75).expect("valid counts");
        let mut out = [0u32; 50];
        s.negatives(&mut rng(7), 0, &mut out);
        assert!(out.iter().all(|&w| w == 1));
        let s = AliasSampler::new(&[5, 4, 3, 2, 1], 0.75).expect("valid counts");
        let mut a = [0u32; 100];
        let mut b = [0u32; 100];
        s.negatives(&mut rng(3), 2, &mut a);
        s.negatives(&mut rng(3), 2, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|&w| w != 2 && w < 5));
    }

    #[test]
    fn rejects_degenerate_vocabularies() {
        assert!(AliasSampler::new(&[5], 0.75).is_err());
        assert!(AliasSampler::new(&[5, 0, 0], 0.75).is_err());
    }
}
