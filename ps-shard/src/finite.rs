//! No shard holds a value that is not finite (issue 45): every value stays
//! within ±2^40 ([`MAX_VALUE_BITS`]), so no dot product or step a shard
//! computes overflows. Two guards keep it: an `adjust` is admitted only if
//! it cannot pass the bound from the largest value the model holds
//! ([`Model::admit_weights`], before any row changes), and the loops leave
//! a row unwritten whose update would pass it anyway (concurrent calls; the
//! call then fails, [`Model::note_written`]). Either marks the state
//! diverged: it refuses training and export until a restore.

use crate::model::Model;
use colonnade_proto::domain::invalid_argument as invalid;
use colonnade_proto::ShardError;
use std::sync::atomic::Ordering::Relaxed;

/// The largest |value| a shard stores, as the bits of an f32 (2^40): with
/// every value within it, a dot product of up to `MAX_DIM` (2^16) columns
/// stays below 2^96 and every step's sum below 2^70, far from f32's 2^128,
/// so nothing a shard computes or holds is ever non-finite. A row whose
/// update would pass it (or be NaN) is not written (`crate::loops`' guarded writes).
pub const MAX_VALUE_BITS: u32 = 0x5380_0000;

/// The largest |value| of `values`, as f32 bits.
pub(crate) fn max_abs_bits(values: &[f32]) -> u32 {
    values
        .iter()
        .map(|x| x.to_bits() & 0x7fff_ffff)
        .max()
        .unwrap_or(0)
}

/// Σ|x| over `values`, in eight running sums (one per lane of a 256-bit
/// vector) added at the end: one sum in sequence is a chain of dependent
/// adds the compiler may not reorder (4 cycles each, about 3 % of a shard's
/// CPU over gRPC at 35K weights a call), eight independent ones vectorize.
/// As inexact as the sequential sum (both round), and like it not finite
/// when a value is not: |x| never cancels.
pub(crate) fn abs_sum(values: &[f32]) -> f32 {
    const LANES: usize = 8;
    let (chunks, rest) = values.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for chunk in chunks {
        for (a, x) in acc.iter_mut().zip(chunk) {
            *a += x.abs();
        }
    }
    acc.iter().sum::<f32>() + rest.iter().map(|x| x.abs()).sum::<f32>()
}

impl Model {
    /// Refuses an export of a diverged state (its vectors are garbage),
    /// saying how to roll it back.
    pub fn check_exportable(&self) -> Result<(), ShardError> {
        self.check_trainable().map_err(|e| {
            ShardError::FailedPrecondition(format!(
                "model {:016x} is not exported: {e}",
                self.fingerprint
            ))
        })
    }

    /// Notes the largest |value| of a call's writes (`written`, f32 bits);
    /// one above [`MAX_VALUE_BITS`] means a row was left unwritten: the
    /// state is marked diverged and the call refused.
    pub(crate) fn note_written(&self, written: u32) -> Result<(), ShardError> {
        if written <= MAX_VALUE_BITS {
            self.max_abs.fetch_max(written, Relaxed);
            return Ok(());
        }
        self.mark_diverged(&format!(
            "an adjust would have made a value {} (beyond ±2^40, the most a shard holds); the \
             rows it would have changed were left as they were",
            f32::from_bits(written)
        ));
        self.check_trainable()
    }

    /// Refuses, before any row changes, an adjust whose `weights` could
    /// grow a value past ±2^40: every value is at most the largest the model
    /// holds, L, and an adjust adds to each at most L × Σ|weight| (each step
    /// scale is at most 1), so it is admitted while L × (1 + Σ|weight|) ≤
    /// 2^40. A refused call marks the state diverged. Checks that the
    /// weights are finite in the same pass.
    pub(crate) fn admit_weights(&self, weights: &[f32]) -> Result<(), ShardError> {
        let sum = abs_sum(weights);
        if !sum.is_finite() {
            if let Some(i) = weights.iter().position(|x| !x.is_finite()) {
                return Err(invalid(format!(
                    "field `weights`: weight {i} is not finite ({})",
                    weights[i]
                )));
            }
        }
        let held = f64::from(f32::from_bits(self.max_abs.load(Relaxed)));
        let bound = held * (1.0 + f64::from(sum));
        if bound <= f64::from(f32::from_bits(MAX_VALUE_BITS)) {
            return Ok(());
        }
        self.mark_diverged(&format!(
            "an adjust with Σ|α × weight| = {sum} on values up to {held} could make a value \
             {bound:e}, beyond ±2^40 (the most a shard holds); it was refused, nothing applied"
        ));
        self.check_trainable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{minibatch, snapshot, spec, COUNTS};
    use crate::model::Scratch;
    use crate::plan::Plan;
    use colonnade_proto::DIVERGED_PREFIX;

    fn model() -> Model {
        Model::new(spec(0..8), &COUNTS).expect("model")
    }

    /// The eight-lane sum against a sum in f64, at every length around the
    /// lanes (tails of 0 to 7), and not finite when a value is not.
    #[test]
    fn abs_sum_is_the_sum_of_magnitudes_and_keeps_non_finite_values() {
        for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 1000, 35_001] {
            let values: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 997.0)
                .collect();
            let exact: f64 = values.iter().map(|&x| f64::from(x.abs())).sum();
            let got = f64::from(abs_sum(&values));
            assert!(
                (got - exact).abs() <= 1e-5 * exact.max(1.0),
                "{n}: {got} vs {exact}"
            );
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 5, 8, 20] {
                let mut values = vec![0.25f32; 21];
                values[at] = bad;
                assert!(!abs_sum(&values).is_finite(), "{bad} at {at}");
            }
        }
    }

    /// Adjusts of α·G = 100 on every dot product, each within the limits:
    /// refused before any value passes ±2^40, the refused one not applied,
    /// the state marked diverged (no training, no export).
    #[test]
    fn poisoning_adjusts_are_refused_before_a_value_passes_the_bound() {
        let m = model();
        let mb = minibatch(1, &[0, 1], &[1, 1], &[1, 2]);
        let (mut p, mut s) = (Plan::default(), Scratch::default());
        let mut refused = None;
        for i in 0..30 {
            m.plan(std::slice::from_ref(&mb), &mut p).expect("plan");
            let before = snapshot(&m);
            let weights = vec![100.0; p.len()];
            if let Err(e) = m.adjust(&mut p, &weights, false, &mut s) {
                assert_eq!(snapshot(&m), before, "a refused adjust changes nothing");
                refused = Some((i, e));
                break;
            }
        }
        let (i, e) = refused.expect("refused within 30 adjusts");
        assert!(i > 1, "the first adjusts are fine: refused at {i}");
        assert!(e.to_string().starts_with(DIVERGED_PREFIX), "{e}");
        let (u, v) = snapshot(&m);
        let bound = f32::from_bits(MAX_VALUE_BITS);
        assert!(u
            .iter()
            .chain(&v)
            .all(|x| x.is_finite() && x.abs() <= bound));
        assert!(m.check_trainable().is_err());
        let e = m.check_exportable().expect_err("no export");
        assert!(e.to_string().contains("--rollback"), "{e}");
    }

    /// A row whose update would pass the bound is left as it was, even when
    /// the admission did not see its value (a concurrent call wrote it).
    #[test]
    fn a_row_that_would_pass_the_bound_is_not_written() {
        let m = model();
        let big = f32::from_bits(MAX_VALUE_BITS) / 2.0;
        m.v.with_row_mut(1, |r| r.fill(big)); // unseen by the admission
        let mb = minibatch(1, &[0], &[1], &[1]);
        let (mut p, mut s) = (Plan::default(), Scratch::default());
        m.plan(std::slice::from_ref(&mb), &mut p).expect("plan");
        let before = snapshot(&m);
        // Δu(0) = 4·v(1) = 2^41 per column: beyond the bound.
        let weights = vec![4.0; p.len()];
        let e = m
            .adjust(&mut p, &weights, false, &mut s)
            .expect_err("refused");
        assert!(e.to_string().starts_with(DIVERGED_PREFIX), "{e}");
        assert_eq!(snapshot(&m).0[..8], before.0[..8], "u(0) unchanged");
        assert!(m.diverged().is_some());
    }
}
