//! Negative sampling from the unigram distribution raised to a power (word2vec:
//! count^0.75), by Walker's alias method: O(V) memory (8 bytes a word) and O(1)
//! per draw, for vocabularies far beyond word2vec's 1e8-entry table.
//!
//! Shards build the table from the counts the client sends and draw from the
//! minibatch's ChaCha8 stream; construction is plain sequential f64 arithmetic
//! and draws use integer comparisons only, so every shard and every reference
//! draws the same negatives.

use crate::kernels::prefetch;
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
        self.resolve(rng.next_u64())
    }

    /// The bucket a 64-bit draw `r` falls in (its high half).
    #[inline(always)]
    fn bucket(&self, r: u64) -> usize {
        (((r >> 32) * self.buckets.len() as u64) >> 32) as usize
    }

    /// The word a 64-bit draw `r` gives: its bucket, or the bucket's alias
    /// when the low half is at or above the bucket's threshold.
    #[inline(always)]
    fn resolve(&self, r: u64) -> u32 {
        let bucket = self.bucket(r);
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
        self.negatives_from(|| rng.next_u64(), positive, out);
    }

    /// [`Self::negatives`] from a stream of 64-bit draws (one per sample).
    #[inline(always)]
    fn negatives_from(&self, mut draw: impl FnMut() -> u64, positive: u32, out: &mut [u32]) {
        for slot in out {
            let mut w = self.resolve(draw());
            let mut tries = 0;
            while w == positive {
                tries += 1;
                if tries == 64 {
                    // A distribution dominated by one word: take its neighbour.
                    w = (positive + 1) % self.buckets.len() as u32;
                    break;
                }
                w = self.resolve(draw());
            }
            *slot = w;
        }
    }

    /// Appends, per word of `positives`, the word then `negative` negatives
    /// drawn by [`Self::negatives`] from `rng`, in turn: the same words,
    /// but each draw's bucket is prefetched [`DRAW_AHEAD`] draws before it
    /// is read. At millions of words the table is far larger than the
    /// caches, and each bucket read was a cache (and TLB) miss that the
    /// draw waited for. Reads `DRAW_AHEAD` values past the last one used
    /// from `rng`, which must not be drawn from afterwards.
    pub fn targets<R: RngCore>(
        &self,
        rng: &mut R,
        positives: &[u32],
        negative: usize,
        out: &mut Vec<u32>,
    ) {
        let mut ahead = [0u64; DRAW_AHEAD];
        for slot in &mut ahead {
            *slot = rng.next_u64();
            prefetch(&self.buckets[self.bucket(*slot)]);
        }
        let mut next = 0;
        let mut draw = || {
            let r = ahead[next];
            let fresh = rng.next_u64();
            prefetch(&self.buckets[self.bucket(fresh)]);
            ahead[next] = fresh;
            next = (next + 1) % DRAW_AHEAD;
            r
        };
        out.reserve(positives.len() * (negative + 1));
        for &w_out in positives {
            out.push(w_out);
            let start = out.len();
            out.resize(start + negative, 0);
            self.negatives_from(&mut draw, w_out, &mut out[start..]);
        }
    }
}

/// How many draws ahead [`AliasSampler::targets`] prefetches buckets.
const DRAW_AHEAD: usize = 16;

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

    /// The prefetching batch draw gives exactly the words of the plain one,
    /// rejections (positives drawn as their own negatives) included.
    #[test]
    fn targets_draw_as_negatives_does() {
        let zipf: Vec<u64> = (1..=5000u64).map(|r| 1_000_000 / r).collect();
        for (counts, negative) in [
            (&zipf[..], 5),
            (&zipf[..], 1),
            (&[100, 1][..], 3), // every negative of word 0 is a retry
            (&[1000, 1, 1][..], 15),
        ] {
            let s = AliasSampler::new(counts, 0.75).expect("valid counts");
            let positives: Vec<u32> = (0..300u32)
                .map(|i| (i * 7919) % counts.len() as u32)
                .collect();
            let mut want = Vec::new();
            let mut plain = rng(11);
            let mut negs = vec![0; negative];
            for &p in &positives {
                s.negatives(&mut plain, p, &mut negs);
                want.push(p);
                want.extend_from_slice(&negs);
            }
            let mut got = vec![42];
            s.targets(&mut rng(11), &positives, negative, &mut got);
            assert_eq!(got[0], 42, "appends");
            assert_eq!(
                &got[1..],
                &want[..],
                "{} words, {negative} negatives",
                counts.len()
            );
        }
    }

    #[test]
    fn rejects_degenerate_vocabularies() {
        assert!(AliasSampler::new(&[5], 0.75).is_err());
        assert!(AliasSampler::new(&[5, 0, 0], 0.75).is_err());
    }
}
