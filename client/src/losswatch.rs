//! The divergence a dot product does not show: a model that breaks with
//! every |u·v| still under `colonnade_common::sgns::DIVERGED_DOT`, seen in
//! its loss from one epoch to the next ([`LossWatch`]). Counts only:
//! nothing here reads the model.
//!
//! Skip-gram at alpha 0.05 over 5 epochs with 128 minibatches in flight
//! over 2 `ps-shard` processes broke that way in 3 seeds of 3: the sampled
//! loss per example went from 2.9-3.4 in epoch 1 to 5.4-5.5 in epoch 2, no
//! dot product passed 10⁴, and the run ended without an error at 16 %
//! analogy accuracy against gensim's 39 % (docs/benchmarks.md, "Minibatches
//! in flight at alpha 0.05 over five epochs").

/// How far (nats per example) an epoch's mean sampled loss may rise above
/// the epoch before it before the run counts as diverged. Each epoch trains
/// on the same text as the one before, at a lower rate, after it: a healthy
/// model's loss on it falls (or stays level where the rate is low). The
/// broken runs rose 0.8 (3.28 to 4.10, ending at 29 % analogy) and 2.6
/// (2.87 to 5.50, 16 %).
pub const RISE: f64 = 0.25;

/// Sampled examples an epoch needs for its mean to count: below it an
/// epoch (a tiny corpus, a resumed run's part epoch) is not compared.
pub const MIN_EXAMPLES: u64 = 10_000;

/// Sampled calls an epoch needs for its mean to count, beside
/// [`MIN_EXAMPLES`]. A call's examples are one block of text, and a block's
/// loss moves with its text (1.9 to 4.6 nats in a healthy run): an epoch
/// of a few sampled calls (one pipeline samples every 16th call) compares
/// other text, not the model. A 100K-word corpus trained for 300 epochs
/// over 2 `ps-shard` processes (about 34 calls of 8 minibatches of 256
/// words an epoch: two sampled) rose 0.253 from epoch 33 to 34 on a
/// healthy model and was stopped as diverged (CI, 2026-12-08,
/// `test_shard_dying_during_training_fails_the_run_naming_it`). Four
/// sampled calls take 64 calls an epoch: 131K words kept at 2,048 a call.
/// A NaN loss counts in any epoch.
pub const MIN_CALLS: u32 = 4;

/// A rise of the loss from one epoch to the next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rise {
    /// The epoch whose loss rose (0-based).
    pub epoch: u64,
    /// Its mean sampled loss per example, and the epoch before's.
    pub before: f64,
    pub after: f64,
}

/// Watches one worker's sampled loss, epoch by epoch: it has diverged when
/// an epoch's mean loss per example is [`RISE`] above the epoch before's.
/// An epoch is compared once the next one has begun (its first sampled
/// call), so a rise in a run's last epoch is not seen. Within an epoch the
/// loss moves with the text (blocks of one call's examples ranged from 1.9
/// to 4.6 nats in a healthy run at alpha 0.05, and rose above an untrained
/// model's loss early in a run that ended within 0.2 analogy points of
/// gensim), so nothing finer than an epoch is compared.
#[derive(Debug)]
pub struct LossWatch {
    /// Per epoch (0-based): Σ sampled loss, examples and sampled calls.
    epochs: Vec<(f64, u64, u32)>,
    /// Epochs compared with the one before (each once).
    compared: u64,
    /// Examples and sampled calls an epoch needs to be compared.
    min_examples: u64,
    min_calls: u32,
    /// The first epoch this watch saw a call of: a resumed worker's first
    /// epoch may be its last part only, other text than the next epoch's
    /// whole, so it is not compared (unless it is the run's first).
    first: Option<u64>,
    /// Once diverged: the rise.
    tripped: Option<Rise>,
}

impl Default for LossWatch {
    fn default() -> Self {
        Self::new(MIN_EXAMPLES, MIN_CALLS)
    }
}

impl LossWatch {
    /// A watch comparing epochs of at least `min_examples` sampled examples
    /// in at least `min_calls` sampled calls (defaults [`MIN_EXAMPLES`],
    /// [`MIN_CALLS`]).
    pub fn new(min_examples: u64, min_calls: u32) -> Self {
        Self {
            epochs: Vec::new(),
            compared: 0,
            min_examples: min_examples.max(1),
            min_calls: min_calls.max(1),
            first: None,
            tripped: None,
        }
    }

    /// Adds a sampled call of `epoch` (0-based): its summed `loss` over
    /// `examples` examples.
    pub fn add(&mut self, epoch: u64, loss: f64, examples: u64) {
        self.first.get_or_insert(epoch);
        let Ok(e) = usize::try_from(epoch) else {
            return;
        };
        if self.epochs.len() <= e {
            self.epochs.resize(e + 1, (0.0, 0, 0));
        }
        self.epochs[e].0 += loss;
        self.epochs[e].1 += examples;
        self.epochs[e].2 = self.epochs[e].2.saturating_add(1);
    }

    /// Compares every epoch finished before `epoch` (0-based: the one a
    /// call now trains in) with its predecessor, once each. Returns the
    /// rise once (and after) an epoch's loss has risen.
    pub fn check(&mut self, epoch: u64) -> Option<Rise> {
        let first = *self.first.get_or_insert(epoch);
        while self.tripped.is_none() && self.compared + 1 < epoch {
            self.compared += 1;
            let (b, a) = (self.compared - 1, self.compared);
            if first > 0 && b == first {
                continue;
            }
            let Some((after, after_counts)) = self.mean(a) else {
                continue;
            };
            let before = self.mean(b);
            // A NaN loss trips whatever the epoch's size; a rise only
            // between epochs that both count.
            let rose = match before {
                Some((before, true)) if after_counts => after > before + RISE,
                _ => false,
            };
            if after.is_nan() || rose {
                self.tripped = Some(Rise {
                    epoch: a,
                    before: before.map_or(f64::NAN, |(m, _)| m),
                    after,
                });
            }
        }
        self.tripped
    }

    /// Epoch `e`'s mean sampled loss per example, if it has any, and
    /// whether it counts: `min_examples` in `min_calls` calls.
    fn mean(&self, e: u64) -> Option<(f64, bool)> {
        let &(sum, n, calls) = self.epochs.get(usize::try_from(e).ok()?)?;
        let counts = n >= self.min_examples && calls >= self.min_calls;
        (n > 0).then(|| (sum / n as f64, counts))
    }

    /// Each epoch's mean sampled loss per example (none without examples),
    /// as the run's summary reports them.
    pub fn means(&self) -> Vec<Option<f64>> {
        (0..self.epochs.len() as u64)
            .map(|e| self.mean(e).map(|(m, _)| m))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sampled call, checked as the worker checks it, then counted.
    fn call(w: &mut LossWatch, epoch: u64, loss: f64, examples: u64) -> Option<Rise> {
        let rise = w.check(epoch);
        w.add(epoch, loss, examples);
        rise
    }

    /// Feeds each epoch of `means` as calls of 1,000 examples, `calls` each.
    fn feed(w: &mut LossWatch, means: &[f64], calls: u64) -> Option<Rise> {
        let mut last = None;
        for (e, &m) in means.iter().enumerate() {
            for _ in 0..calls {
                last = call(w, e as u64, m * 1_000.0, 1_000);
            }
        }
        last
    }

    #[test]
    fn a_falling_or_level_loss_never_trips() {
        let mut w = LossWatch::default();
        assert_eq!(feed(&mut w, &[3.3, 2.9, 2.8, 2.8, 2.75, 2.95], 20), None);
        assert_eq!(w.compared, 4, "the last epoch is not compared");
    }

    #[test]
    fn an_epoch_whose_loss_rose_trips_when_the_next_begins() {
        let mut w = LossWatch::default();
        // The broken run of docs/benchmarks.md: 2.87, then 5.50.
        assert_eq!(
            feed(&mut w, &[2.87, 5.50], 20),
            None,
            "epoch 2 not done yet"
        );
        let rise = call(&mut w, 2, 5.4 * 1_000.0, 1_000).expect("epoch 3 begun");
        assert_eq!(rise.epoch, 1);
        assert!((rise.before - 2.87).abs() < 1e-9 && (rise.after - 5.50).abs() < 1e-9);
        assert_eq!(
            call(&mut w, 2, 1.0, 1),
            Some(rise),
            "once tripped, it stays"
        );
        // A rise just above RISE trips, one at it does not.
        let mut w = LossWatch::default();
        assert_eq!(feed(&mut w, &[3.0, 3.0 + RISE, 3.0], 20), None);
        let mut w = LossWatch::default();
        assert!(feed(&mut w, &[3.0, 3.0 + RISE + 0.01, 3.0], 20).is_some());
    }

    #[test]
    fn small_epochs_and_a_skipped_epoch_count_for_nothing() {
        let mut w = LossWatch::default();
        // 5 calls of 1,000: under MIN_EXAMPLES.
        assert_eq!(feed(&mut w, &[3.0, 9.0, 3.0], 5), None);
        let mut w = LossWatch::new(100, 1);
        assert!(feed(&mut w, &[3.0, 9.0, 3.0], 5).is_some());
        // A worker resumed in epoch 3: epochs 1 and 2 have no examples, and
        // epoch 3 may be its end only (harder text than the whole, here).
        // One sampled call an epoch here: MIN_CALLS is tested on its own.
        let mut w = LossWatch::new(MIN_EXAMPLES, 1);
        assert_eq!(call(&mut w, 2, 2.0 * 20_000.0, 20_000), None);
        assert_eq!(call(&mut w, 3, 3.0 * 20_000.0, 20_000), None);
        assert_eq!(
            call(&mut w, 4, 9.0 * 20_000.0, 20_000),
            None,
            "epoch 3 not compared"
        );
        assert!(call(&mut w, 5, 1.0, 1).is_some(), "epoch 5 against 4");
    }

    /// Epochs of fewer than [`MIN_CALLS`] sampled calls compare blocks of
    /// text, not the model: not compared, however many examples; from
    /// [`MIN_CALLS`] they are. The rise of the CI run that stopped a healthy
    /// model (2.117 to 2.370, two sampled calls an epoch) among them.
    #[test]
    fn epochs_of_a_few_sampled_calls_are_not_compared() {
        let calls = u64::from(MIN_CALLS);
        for (few, trips) in [(1, false), (calls - 1, false), (calls, true)] {
            let mut w = LossWatch::default();
            let mut last = None;
            for (e, m) in [2.117, 2.370, 2.2].into_iter().enumerate() {
                for _ in 0..few {
                    last = call(&mut w, e as u64, m * 20_000.0, 20_000);
                }
            }
            assert_eq!(last.is_some(), trips, "{few} sampled calls an epoch");
        }
    }

    #[test]
    fn a_nan_loss_trips() {
        let mut w = LossWatch::new(1, 1);
        assert_eq!(call(&mut w, 0, 3.0, 1), None);
        assert_eq!(call(&mut w, 1, f64::NAN, 1), None);
        let rise = call(&mut w, 2, 3.0, 1).expect("NaN is no healthy loss");
        assert!(rise.after.is_nan());
    }
}
