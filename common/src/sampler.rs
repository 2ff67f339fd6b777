//! Negative sampling from the unigram distribution raised to a power
//! (word2vec: count^0.75), the way every shard, client and reference draws
//! a call's negatives.
//!
//! The distribution is integer weights over *runs* of consecutive word ids
//! with one count ([`NegativeSampler`]): a vocabulary in count order (as
//! `colonnade vocab` writes it) has few distinct counts, so the table is a
//! few thousand entries at any V and stays in the caches. A word's weight is
//! ⌊(c / c_max)^power · 2³²⌋, at least 1 for a positive count, and T is
//! their sum.
//!
//! A call's N negatives are a *systematic sample* of that distribution: the
//! points ⌊(i·T + r) / N⌋ for i = 0..N, evenly spaced from one random offset
//! r, each the word whose weight interval holds it ([`NegativeSampler::walk`]).
//! Every word is drawn its expected number of times N·p(w), rounded up or
//! down, and the points ascend, so the words come out in ascending id order:
//! a shard groups a call's dot products by output row without sorting its
//! negatives. The sample is then *dealt* to the call's E examples
//! ([`Deal`]): the points form `negative` bands of E (band k holds the
//! quantiles [k/n, (k+1)/n) of the distribution's mass), and band k gives
//! its j-th point to example (g_k·j + h_k) mod E, a permutation keyed by
//! the call's seed. Each example thus gets one negative from each band: its
//! negatives are drawn from count^power (each band's share of it) as the
//! iid draws of word2vec are, but never all from the head or all from the
//! tail.
//!
//! Everything is integer arithmetic from the counts (plus one `powf` per
//! distinct count), so every shard draws the same negatives.

use crate::seeds;
use rand::RngCore;

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("the sampler needs at least two words with a positive count, got {0}")]
    TooFewWords(usize),
    #[error("vocabulary of {0} words exceeds the u32 id space")]
    TooLarge(usize),
}

/// A run of words `start..start + len` of one count: each weighs `weight`,
/// and the run covers the points `cum..end` (`end = cum + len · weight`).
#[derive(Clone, Copy, Debug)]
struct Run {
    start: u32,
    len: u32,
    weight: u64,
    cum: u64,
    end: u64,
}

/// The unigram^power distribution over word ids `0..len`, as integer
/// weights over runs of equal counts (see the module doc).
#[derive(Clone, Debug)]
pub struct NegativeSampler {
    runs: Box<[Run]>,
    total: u64,
    words: u32,
    /// Per stretch of 2^`shift` points, the run holding its first point:
    /// where [`Walk`] starts its search when a step jumps runs (a call of
    /// few examples steps over many), instead of galloping from the last
    /// one. At least as many stretches as runs, so that a point's run is
    /// about one past its stretch's on average.
    guide: Box<[u32]>,
    shift: u32,
}

impl NegativeSampler {
    /// The distribution count^`power` of `counts` (word id order).
    pub fn new(counts: &[u64], power: f64) -> Result<Self, SamplerError> {
        let Ok(words) = u32::try_from(counts.len()) else {
            return Err(SamplerError::TooLarge(counts.len()));
        };
        let positive = counts.iter().filter(|&&c| c > 0).count();
        if positive < 2 {
            return Err(SamplerError::TooFewWords(positive));
        }
        let max = counts.iter().copied().max().unwrap_or(1) as f64;
        let mut runs = Vec::new();
        let (mut start, mut cum) = (0u32, 0u64);
        for run in counts.chunk_by(|a, b| a == b) {
            let c = run[0];
            let weight = if c == 0 {
                0
            } else {
                (((c as f64 / max).powf(power) * 4_294_967_296.0) as u64).max(1)
            };
            let len = run.len() as u32;
            let end = cum + weight * u64::from(len);
            if weight > 0 {
                runs.push(Run {
                    start,
                    len,
                    weight,
                    cum,
                    end,
                });
            }
            (start, cum) = (start + len, end);
        }
        let (guide, shift) = guide(&runs, cum);
        Ok(Self {
            runs: runs.into(),
            total: cum,
            words,
            guide,
            shift,
        })
    }

    pub fn len(&self) -> usize {
        self.words as usize
    }

    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// T, the sum of the words' weights.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Runs of equal counts in the table.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Memory held by the table.
    pub fn memory_bytes(&self) -> usize {
        self.runs.len() * size_of::<Run>() + self.guide.len() * size_of::<u32>()
    }

    /// The probability of word `w`: its weight over T.
    pub fn probability(&self, w: u32) -> f64 {
        let i = self.runs.partition_point(|r| r.start + r.len <= w);
        match self.runs.get(i) {
            Some(r) if r.start <= w => r.weight as f64 / self.total as f64,
            _ => 0.0,
        }
    }

    /// The word whose weight interval holds point `x` (< T), by binary
    /// search: what [`Self::walk`] yields for that point.
    pub fn word_at(&self, x: u64) -> u32 {
        let i = self.runs.partition_point(|r| r.end <= x);
        let r = &self.runs[i.min(self.runs.len() - 1)];
        r.start + ((x.saturating_sub(r.cum)) / r.weight).min(u64::from(r.len) - 1) as u32
    }

    /// The words at the `n` points ⌊(i·T + r) / n⌋, i = 0..n, in ascending
    /// order; `r` is in [0, T) (see [`Deal::offset`]).
    pub fn walk(&self, n: u64, r: u64) -> Walk<'_> {
        let n = n.max(1);
        Walk {
            runs: &self.runs,
            guide: &self.guide,
            shift: self.shift,
            run: 0,
            x: r / n,
            rem: r % n,
            step: self.total / n,
            step_rem: self.total % n,
            n,
            left: n,
        }
    }
}

/// The words of a systematic sample, in ascending order (see
/// [`NegativeSampler::walk`]): the point advances by T/n (its remainder
/// carried), and the run holding it is found from the previous one,
/// galloping over runs the step jumps.
pub struct Walk<'a> {
    runs: &'a [Run],
    guide: &'a [u32],
    shift: u32,
    run: usize,
    /// The current point, and the remainder of (i·T + r) mod n.
    x: u64,
    rem: u64,
    step: u64,
    step_rem: u64,
    n: u64,
    /// Points not yet yielded.
    left: u64,
}

impl Iterator for Walk<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let x = self.x;
        if self.runs[self.run].end <= x {
            // Start from the guide's run for x's stretch when it is further
            // on (it never passes x's run), then gallop to a run ending
            // past x and search back.
            let g = self.guide.get((x >> self.shift) as usize);
            self.run = self.run.max(g.map_or(0, |&g| g as usize));
        }
        if self.runs[self.run].end <= x {
            let mut hi = 1;
            while self.run + hi < self.runs.len() && self.runs[self.run + hi].end <= x {
                hi *= 2;
            }
            let lo = self.run + hi / 2;
            let hi = (self.run + hi).min(self.runs.len() - 1);
            self.run = lo + self.runs[lo..hi].partition_point(|r| r.end <= x);
        }
        let r = &self.runs[self.run];
        let word = if r.len == 1 {
            r.start
        } else {
            r.start + ((x - r.cum) / r.weight) as u32
        };
        self.rem += self.step_rem;
        self.x += self.step + u64::from(self.rem >= self.n);
        if self.rem >= self.n {
            self.rem -= self.n;
        }
        Some(word)
    }
}

/// The guide of `runs` (total weight `total`) and its shift: per stretch
/// of 2^shift points, at least as many stretches as runs, the index of the
/// run holding the stretch's first point.
fn guide(runs: &[Run], total: u64) -> (Box<[u32]>, u32) {
    let stretches = runs.len().next_power_of_two().max(1) as u64;
    let bits = u64::BITS - total.saturating_sub(1).leading_zeros();
    let shift = bits.saturating_sub(stretches.trailing_zeros());
    let mut guide = Vec::with_capacity(stretches as usize);
    let mut run = 0usize;
    for b in 0..=(total.saturating_sub(1) >> shift) {
        let first = b << shift;
        while run + 1 < runs.len() && runs[run].end <= first {
            run += 1;
        }
        guide.push(run as u32);
    }
    (guide.into(), shift)
}

/// How a call's sorted negatives are dealt to its examples (see the module
/// doc): the sample's offset, and per band its permutation of the examples.
#[derive(Clone, Debug, Default)]
pub struct Deal {
    /// The systematic sample's offset r, in [0, T).
    pub offset: u64,
    /// Per band k: (g_k, h_k), band k's point j going to example
    /// (g_k·j + h_k) mod E, with g_k coprime to E.
    pub bands: Vec<(u64, u64)>,
}

impl Deal {
    /// The deal of a call with seed `seed` (its first minibatch's), `examples`
    /// examples and `negative` negatives each, over a distribution of total
    /// weight `total`, drawn from the call's ChaCha8 stream.
    pub fn new(seed: u64, examples: u64, negative: u32, total: u64) -> Self {
        let mut rng = seeds::rng(seed);
        let offset = ((u128::from(rng.next_u64()) * u128::from(total)) >> 64) as u64;
        let e = examples.max(1);
        let bands = (0..negative)
            .map(|_| {
                let mut g = 1 + ((u128::from(rng.next_u64()) * u128::from(e - 1)) >> 64) as u64;
                while gcd(g, e) != 1 {
                    g = g % (e - 1).max(1) + 1;
                }
                let h = ((u128::from(rng.next_u64()) * u128::from(e)) >> 64) as u64;
                (g % e, h)
            })
            .collect();
        Self { offset, bands }
    }

    /// The example that point `i` of the sample goes to (`examples` E):
    /// band i / E's permutation of i mod E. The shard's plan finds the same
    /// examples incrementally; this is the definition.
    pub fn example_of(&self, i: u64, examples: u64) -> u64 {
        let (k, j) = ((i / examples) as usize, i % examples);
        let (g, h) = self.bands[k];
        ((u128::from(g) * u128::from(j) + u128::from(h)) % u128::from(examples)) as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample's words against `counts`: each word drawn ⌊N·p⌋ or ⌈N·p⌉
    /// times, words in ascending order, zero counts never drawn.
    fn check_sample(counts: &[u64], n: u64, seed: u64) {
        let s = NegativeSampler::new(counts, 0.75).expect("valid counts");
        let r = Deal::new(seed, n, 1, s.total()).offset;
        let words: Vec<u32> = s.walk(n, r).collect();
        assert_eq!(words.len() as u64, n);
        assert!(words.windows(2).all(|w| w[0] <= w[1]), "ascending");
        let mut hist = vec![0u64; counts.len()];
        for &w in &words {
            hist[w as usize] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let expected = n as f64 * s.probability(i as u32);
            let got = hist[i] as f64;
            assert!(
                got >= expected.floor() - 1.0 && got <= expected.ceil() + 1.0,
                "word {i} (count {c}): {got} points, expected {expected:.2}"
            );
            if c == 0 {
                assert_eq!(hist[i], 0);
            }
        }
        for (i, &w) in words.iter().enumerate() {
            // The walk's incremental point is the definition's.
            let x = ((u128::from(i as u64) * u128::from(s.total()) + u128::from(r)) / u128::from(n))
                as u64;
            assert_eq!(w, s.word_at(x), "point {i}");
        }
    }

    #[test]
    fn a_systematic_sample_draws_each_word_its_expected_number_of_times() {
        check_sample(&[1000, 500, 100, 10, 1, 0, 7], 10_000, 1);
        check_sample(&[1000, 500, 100, 10, 10, 10, 1, 1, 0, 0, 7, 7], 977, 2);
        let mut zipf: Vec<u64> = (1..=200u64).map(|r| 100_000 / r).collect();
        zipf.resize(3000, 1);
        check_sample(&zipf, 7_000, 3);
        check_sample(&zipf, 13, 4);
        let s = NegativeSampler::new(&zipf, 0.75).expect("valid");
        assert_eq!(s.runs(), 201, "200 distinct head counts and the tail");
    }

    /// Small samples step over many runs at a time, where the walk starts
    /// from its guide: every point still lands in the run a binary search
    /// over all runs finds, at every sample size, from any offset.
    #[test]
    fn the_walk_finds_each_points_run_however_far_it_steps() {
        let counts: Vec<u64> = (1..=30_000u64).map(|r| 10_000_000 / r + 1).collect();
        let s = NegativeSampler::new(&counts, 0.75).expect("valid");
        assert!(s.runs() > 5_000, "many runs: {}", s.runs());
        for n in [1u64, 2, 7, 80, 1_000, 50_000] {
            for seed in 0..20 {
                let r = Deal::new(seed, n, 1, s.total()).offset;
                for (i, w) in s.walk(n, r).enumerate() {
                    let x = ((u128::from(i as u64) * u128::from(s.total()) + u128::from(r))
                        / u128::from(n)) as u64;
                    assert_eq!(w, s.word_at(x), "n {n}, seed {seed}, point {i}");
                }
            }
        }
        for r in [0, 1, s.total() / 2, s.total() - 1] {
            let last = s.walk(1, r).next();
            assert_eq!(last, Some(s.word_at(r)), "one point at {r}");
        }
    }

    #[test]
    fn probabilities_follow_count_power() {
        let counts = [1000u64, 500, 100, 10, 1, 0, 7];
        let s = NegativeSampler::new(&counts, 0.75).expect("valid");
        let total: f64 = counts.iter().map(|&c| (c as f64).powf(0.75)).sum();
        for (i, &c) in counts.iter().enumerate() {
            let want = (c as f64).powf(0.75) / total;
            assert!((s.probability(i as u32) - want).abs() < 1e-9, "word {i}");
        }
    }

    /// Every example gets one point of every band, and the bands' points
    /// go to all the examples.
    #[test]
    fn a_deal_gives_each_example_one_point_of_each_band() {
        for (examples, negative) in [(1u64, 5u32), (7, 5), (12, 3), (100, 1), (97, 15)] {
            let deal = Deal::new(
                examples * 31 + u64::from(negative),
                examples,
                negative,
                1 << 40,
            );
            let mut got = vec![Vec::new(); examples as usize];
            for i in 0..examples * u64::from(negative) {
                got[deal.example_of(i, examples) as usize].push(i / examples);
            }
            for (e, bands) in got.iter().enumerate() {
                let want: Vec<u64> = (0..u64::from(negative)).collect();
                assert_eq!(bands, &want, "example {e} of {examples}");
            }
        }
    }

    #[test]
    fn rejects_degenerate_vocabularies() {
        assert!(NegativeSampler::new(&[5], 0.75).is_err());
        assert!(NegativeSampler::new(&[5, 0, 0], 0.75).is_err());
    }
}
