//! Negative sampling from the unigram distribution raised to a power (word2vec:
//! count^0.75), by Walker's alias method: O(1) per draw, for vocabularies far
//! beyond word2vec's 1e8-entry table.
//!
//! From a million words on, the table's buckets are *runs* of consecutive
//! word ids with the same count, when that is smaller: a vocabulary in count
//! order (as `colonnade vocab` writes it) has few distinct counts (its long
//! tail is runs of words seen once, twice, ...; docs/benchmarks-history.md,
//! "A shard process at 20M, and the sampler over runs of equal counts"), so
//! the table stays in the caches whatever V is, and a draw picks a run by
//! alias, then a word of the run uniformly by a second value of the stream,
//! with no cache or TLB miss. Otherwise (fewer words, or counts in no
//! order) each bucket is one word: 8 bytes a word; at millions of words a
//! draw's bucket is then a miss, which [`AliasSampler::targets`] prefetches.
//!
//! Shards build the table from the counts the client sends and draw from the
//! minibatch's ChaCha8 stream; construction is plain sequential f64 arithmetic
//! and draws use integer arithmetic only, so every shard and every reference
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

/// Alias table over word ids `0..len`, its buckets single words or runs of
/// equal counts (see the module doc).
#[derive(Clone, Debug)]
pub struct AliasSampler {
    /// Per bucket i: (probability of keeping i scaled to 2^32, u32::MAX
    /// meaning always; the bucket drawn otherwise), side by side so that a
    /// draw touches one cache line (two separate arrays would cost two
    /// misses per draw, and drawing the targets waits on those loads).
    buckets: Box<[(u32, u32)]>,
    /// Runs: bucket k is the words `starts[k]..starts[k + 1]`, all of one
    /// count (`buckets.len() + 1` entries, the last the word count). Empty:
    /// bucket k is word k.
    starts: Box<[u32]>,
    /// Words in all.
    words: u32,
}

impl AliasSampler {
    /// Builds the table for weights count^power: over runs of equal counts
    /// ([`Self::over_runs`]) from [`RUNS_FROM_WORDS`] words on, when that
    /// table is smaller than one bucket per word; else a bucket per word.
    /// Below, a table per word fits the caches, and a draw over runs costs
    /// more (a second value of the stream).
    pub fn new(counts: &[u64], power: f64) -> Result<Self, SamplerError> {
        let runs = counts.chunk_by(|a, b| a == b).count();
        Self::build(
            counts,
            power,
            counts.len() >= RUNS_FROM_WORDS && runs * 12 + 4 <= counts.len() * 8,
        )
    }

    /// [`Self::new`]'s table over runs of equal counts, whatever V and the
    /// number of runs (12 bytes a run).
    pub fn over_runs(counts: &[u64], power: f64) -> Result<Self, SamplerError> {
        Self::build(counts, power, true)
    }

    fn build(counts: &[u64], power: f64, over_runs: bool) -> Result<Self, SamplerError> {
        let n = counts.len();
        let Ok(words) = u32::try_from(n) else {
            return Err(SamplerError::TooLarge(n));
        };
        let positive = counts.iter().filter(|&&c| c > 0).count();
        if positive < 2 {
            return Err(SamplerError::TooFewWords(positive));
        }
        let weight = |c: u64| (c as f64).powf(power);
        let (weights, starts) = if over_runs {
            // A run's weight: its count's, times its words.
            let (mut weights, mut starts) = (Vec::new(), Vec::new());
            let mut start = 0;
            for run in counts.chunk_by(|a, b| a == b) {
                weights.push(weight(run[0]) * run.len() as f64);
                starts.push(start);
                start += run.len() as u32;
            }
            starts.push(words);
            (weights, starts)
        } else {
            (counts.iter().map(|&c| weight(c)).collect(), Vec::new())
        };
        Ok(Self {
            buckets: alias_table(&weights),
            starts: starts.into(),
            words,
        })
    }

    pub fn len(&self) -> usize {
        self.words as usize
    }

    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// Runs of equal counts the table is over, or `None` when each bucket
    /// is one word.
    pub fn runs(&self) -> Option<usize> {
        (!self.starts.is_empty()).then_some(self.buckets.len())
    }

    /// Memory held by the table.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * 8 + self.starts.len() * 4
    }

    /// One draw from the distribution.
    #[inline]
    pub fn sample<R: RngCore>(&self, rng: &mut R) -> u32 {
        self.resolve(|| rng.next_u64())
    }

    /// The bucket a 64-bit draw `r` falls in (its high half).
    #[inline(always)]
    fn bucket(&self, r: u64) -> usize {
        (((r >> 32) * self.buckets.len() as u64) >> 32) as usize
    }

    /// The word of one draw from `draw`: its first value's bucket, or the
    /// bucket's alias when the low half is at or above the bucket's
    /// threshold; over runs, then a word of the run, by the full 64 bits of
    /// a second value.
    #[inline(always)]
    fn resolve(&self, mut draw: impl FnMut() -> u64) -> u32 {
        let r = draw();
        let bucket = self.bucket(r);
        let (threshold, alias) = self.buckets[bucket];
        let k = if (r as u32) < threshold || threshold == u32::MAX {
            bucket as u32
        } else {
            alias
        };
        if self.starts.is_empty() {
            return k;
        }
        // Always the second value, also for a run of one word (it then
        // adds 0): a branch on the run's length mispredicts, and costs
        // more than the second value it would save.
        let (start, end) = (self.starts[k as usize], self.starts[k as usize + 1]);
        start + ((u128::from(draw()) * u128::from(end - start)) >> 64) as u32
    }

    /// Fills `out` with negatives, none equal to `positive` (paper Fig. 5 line 7).
    #[inline]
    pub fn negatives<R: RngCore>(&self, rng: &mut R, positive: u32, out: &mut [u32]) {
        self.negatives_from(|| rng.next_u64(), positive, out);
    }

    /// [`Self::negatives`] from a stream of 64-bit draws.
    #[inline(always)]
    fn negatives_from(&self, mut draw: impl FnMut() -> u64, positive: u32, out: &mut [u32]) {
        for slot in out {
            let mut w = self.resolve(&mut draw);
            let mut tries = 0;
            while w == positive {
                tries += 1;
                if tries == 64 {
                    // A distribution dominated by one word: take its neighbour.
                    w = (positive + 1) % self.words;
                    break;
                }
                w = self.resolve(&mut draw);
            }
            *slot = w;
        }
    }

    /// Appends, per word of `positives`, the word then `negative` negatives
    /// drawn by [`Self::negatives`] from `rng`, in turn. With a bucket per
    /// word, each draw's bucket is prefetched [`DRAW_AHEAD`] draws before it
    /// is read: at millions of words that table is far larger than the
    /// caches, and each bucket read is a cache (and TLB) miss that the draw
    /// would wait for; `rng` is then read `DRAW_AHEAD` values past the last
    /// one used, and must not be drawn from afterwards. (A table over runs
    /// is small and needs no prefetch.)
    pub fn targets<R: RngCore>(
        &self,
        rng: &mut R,
        positives: &[u32],
        negative: usize,
        out: &mut Vec<u32>,
    ) {
        out.reserve(positives.len() * (negative + 1));
        if !self.starts.is_empty() {
            return self.each_target(|| rng.next_u64(), positives, negative, out);
        }
        let mut ahead = [0u64; DRAW_AHEAD];
        for slot in &mut ahead {
            *slot = rng.next_u64();
            prefetch(&self.buckets[self.bucket(*slot)]);
        }
        let mut next = 0;
        let draw = || {
            let r = ahead[next];
            let fresh = rng.next_u64();
            prefetch(&self.buckets[self.bucket(fresh)]);
            ahead[next] = fresh;
            next = (next + 1) % DRAW_AHEAD;
            r
        };
        self.each_target(draw, positives, negative, out);
    }

    /// [`Self::targets`]' words from the stream `draw`.
    #[inline(always)]
    fn each_target(
        &self,
        mut draw: impl FnMut() -> u64,
        positives: &[u32],
        negative: usize,
        out: &mut Vec<u32>,
    ) {
        for &w_out in positives {
            out.push(w_out);
            let start = out.len();
            out.resize(start + negative, 0);
            self.negatives_from(&mut draw, w_out, &mut out[start..]);
        }
    }
}

/// Walker's alias table (Vose's construction) for `weights` (not all zero):
/// per bucket, (threshold scaled to 2^32, u32::MAX meaning always; alias).
fn alias_table(weights: &[f64]) -> Box<[(u32, u32)]> {
    let n = weights.len();
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
    scaled
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
        .collect()
}

/// Vocabularies from which [`AliasSampler::new`] builds its table over runs
/// (a table per word of 8 MiB, beyond a core's L2 cache).
pub const RUNS_FROM_WORDS: usize = 1 << 20;

/// How many draws ahead [`AliasSampler::targets`] prefetches buckets.
const DRAW_AHEAD: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::rng;

    /// Draws `draws` words and checks each word's share against
    /// count^0.75 / Σ within 5 standard deviations; zero counts never drawn.
    fn check_frequencies(s: &AliasSampler, counts: &[u64], draws: u64) {
        let mut r = rng(42);
        let mut hist = vec![0u64; counts.len()];
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
            if c == 0 {
                assert_eq!(hist[i], 0, "word {i}: a zero count is never drawn");
            }
        }
    }

    #[test]
    fn frequencies_follow_count_power() {
        // Every count different: a bucket per word.
        let counts = [1000u64, 500, 100, 10, 1, 0, 7];
        let s = AliasSampler::new(&counts, 0.75).expect("valid counts");
        assert_eq!(s.runs(), None);
        check_frequencies(&s, &counts, 2_000_000);
        // Fewer words than RUNS_FROM_WORDS: a bucket per word, runs or not.
        let ones = [3u64, 1, 1, 1, 1, 1, 1, 1];
        assert_eq!(AliasSampler::new(&ones, 0.75).expect("valid").runs(), None);
    }

    #[test]
    fn frequencies_follow_count_power_over_runs() {
        // Runs of equal counts (a zero run inside, counts out of order).
        let counts = [1000u64, 500, 100, 10, 10, 10, 10, 1, 1, 1, 0, 0, 7, 7];
        let s = AliasSampler::over_runs(&counts, 0.75).expect("valid counts");
        assert_eq!(s.runs(), Some(7));
        assert_eq!(s.memory_bytes(), 7 * 8 + 8 * 4);
        check_frequencies(&s, &counts, 2_000_000);
        // A long tail of ones behind a Zipf head, as real vocabularies end.
        let mut zipf: Vec<u64> = (1..=200u64).map(|r| 100_000 / r).collect();
        zipf.resize(3000, 1);
        let s = AliasSampler::over_runs(&zipf, 0.75).expect("valid counts");
        assert_eq!(s.runs(), Some(201), "200 distinct head counts and the tail");
        check_frequencies(&s, &zipf, 4_000_000);
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

    /// The batch draw (prefetching, with a bucket per word) gives exactly
    /// the words of the plain one, rejections (positives drawn as their own
    /// negatives) included, in both layouts.
    #[test]
    fn targets_draw_as_negatives_does() {
        let zipf: Vec<u64> = (1..=5000u64).map(|r| 1_000_000 / r).collect();
        for (counts, negative) in [
            (&zipf[..], 5),
            (&zipf[..], 1),
            (&[100, 1][..], 3), // every negative of word 0 is a retry
            (&[1000, 1, 1][..], 15),
            (&[1000, 1, 1, 1, 1, 1][..], 15),
        ] {
            for s in [
                AliasSampler::new(counts, 0.75).expect("valid counts"),
                AliasSampler::over_runs(counts, 0.75).expect("valid counts"),
            ] {
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
                    "{} words, {negative} negatives, runs {:?}",
                    counts.len(),
                    s.runs()
                );
            }
        }
    }

    /// A million-word vocabulary in count order gets the table over runs;
    /// the same counts out of order (as many runs as words), a bucket per
    /// word.
    #[test]
    fn large_sorted_vocabularies_get_the_table_over_runs() {
        let mut counts: Vec<u64> = (1..=1000u64).map(|r| 1_000_000 / r).collect();
        counts.resize(RUNS_FROM_WORDS, 1);
        let s = AliasSampler::new(&counts, 0.75).expect("valid counts");
        assert_eq!(
            s.runs(),
            Some(1001),
            "1000 distinct head counts and the tail"
        );
        assert_eq!(s.memory_bytes(), 1001 * 12 + 4);
        let alternating: Vec<u64> = (0..RUNS_FROM_WORDS as u64).map(|i| 1 + i % 2).collect();
        let s = AliasSampler::new(&alternating, 0.75).expect("valid counts");
        assert_eq!(s.runs(), None);
        assert_eq!(s.memory_bytes(), RUNS_FROM_WORDS * 8);
    }

    #[test]
    fn rejects_degenerate_vocabularies() {
        assert!(AliasSampler::new(&[5], 0.75).is_err());
        assert!(AliasSampler::new(&[5, 0, 0], 0.75).is_err());
    }
}
