//! Skip-gram with negative sampling: the client-side math between `dotprod`
//! and `adjust` (paper eq. (4), (5) and Fig. 7 line 25), the learning-rate
//! schedule and frequent-word subsampling, as in word2vec; the weights as
//! they travel (half floats, [`scaled_weight`]) and the rule for a model that
//! has blown up ([`is_diverged`]).
//!
//! For a pair (w_I, w_O) with negatives w̃, the objective is
//! log σ(u(w_I)·v(w_O)) + Σ log σ(−u(w_I)·v(w̃)). Its gradient with respect to
//! u(w_I) is (1 − σ(F⁺))·v(w_O) − Σ σ(F⁻)·v(w̃), and with respect to v(w_O)
//! and v(w̃) the same weights times u(w_I). So the shard needs only the
//! weights G⁺ = α(1 − σ(F⁺)) and G⁻ = −ασ(F⁻), and applies
//! Δu += G·v, Δv += G·u for every dot product it computed.

/// σ(x) = 1 / (1 + e^−x).
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Weight of a positive pair: α(1 − σ(F⁺)).
#[inline]
pub fn positive_weight(alpha: f32, f: f32) -> f32 {
    alpha * (1.0 - sigmoid(f))
}

/// Weight of a negative pair: −ασ(F⁻).
#[inline]
pub fn negative_weight(alpha: f32, f: f32) -> f32 {
    -alpha * sigmoid(f)
}

/// −log σ(x), stable for large |x|.
#[inline]
pub fn neg_log_sigmoid(x: f32) -> f32 {
    if x > 0.0 {
        (-x).exp().ln_1p()
    } else {
        -x + x.exp().ln_1p()
    }
}

/// word2vec's linear decay: α₀·(1 − progress), floored at α₀·1e-4, where
/// progress = words processed / (epochs · words per epoch + 1).
/// gensim's schedule, `--min-alpha`: linear from `alpha0` at the start to
/// `min_alpha` at the end of `words_total` words (and not below it).
pub fn learning_rate_to(alpha0: f32, min_alpha: f32, words_done: u64, words_total: u64) -> f32 {
    let progress = (words_done as f64 / words_total.max(1) as f64).min(1.0);
    let (a, b) = (f64::from(alpha0), f64::from(min_alpha));
    (a - (a - b) * progress).max(b) as f32
}

pub fn learning_rate(alpha0: f32, words_done: u64, words_total: u64) -> f32 {
    let progress = words_done as f64 / (words_total as f64 + 1.0);
    let alpha = f64::from(alpha0) * (1.0 - progress);
    alpha.max(f64::from(alpha0) * 1e-4) as f32
}

/// word2vec's probability of keeping an occurrence of a word seen `count` times
/// among `total` training words: (√(c/(s·T)) + 1)·(s·T)/c, capped at 1; 1 when
/// `sample` is 0 (no subsampling).
pub fn keep_probability(count: u64, total: u64, sample: f64) -> f64 {
    if sample <= 0.0 || count == 0 {
        return 1.0;
    }
    let threshold = sample * total as f64;
    let c = count as f64;
    (((c / threshold).sqrt() + 1.0) * threshold / c).min(1.0)
}

/// [`keep_probability`] as a u32 threshold: keep when a uniform u32 is below it
/// (`u32::MAX` means always keep).
pub fn keep_threshold(count: u64, total: u64, sample: f64) -> u32 {
    let p = keep_probability(count, total, sample);
    if p >= 1.0 {
        u32::MAX
    } else {
        (p * 4_294_967_296.0) as u32
    }
}

/// A weight divided by its minibatch's α, as it travels (see
/// `AdjustRequest.scaled_weights`): the nearest IEEE half float, widened.
/// Clients compute their weights as α × this value for every path (in
/// process too), so that a model trains bit for bit the same whether its
/// shards are in this process or behind the wire.
///
/// Rounded in place with integer arithmetic rather than through a half-float
/// library's conversions, which are out-of-line calls per weight. Equal to
/// `half::f16::from_f32(x).to_f32()` for every f32 (NaN to a NaN), which a
/// test checks for all 2^32 of them.
#[inline]
pub fn wire_scaled_weight(x: f32) -> f32 {
    /// The smallest normal half float, 2^−14.
    const MIN_NORMAL: f32 = 6.103_515_6e-5;
    /// The largest finite half float.
    const MAX: f32 = 65504.0;
    if x.is_nan() {
        return x;
    }
    if x.abs() < MIN_NORMAL {
        // Half subnormals are the multiples of 2^−24, and so are the f32s of
        // magnitude in [0.5, 1): adding ±0.5 rounds x to one of them (to
        // nearest, ties to even), and taking it away again is exact.
        let s = 0.5f32.copysign(x);
        return ((x + s) - s).copysign(x);
    }
    // Normal: keep 10 of the 23 fraction bits, to nearest, ties to even (a
    // carry into the exponent is the right result too).
    let bits = x.to_bits();
    let rounded = f32::from_bits((bits + 0x0fff + ((bits >> 13) & 1)) & !0x1fff);
    if rounded.abs() > MAX {
        f32::INFINITY.copysign(x)
    } else {
        rounded
    }
}

/// The weight ÷ α of a dot product F, as it travels: 1 − σ(F) for a
/// positive pair, −σ(F) for a negative, each [`wire_scaled_weight`]-rounded.
/// The one definition every path applies: the client weighing summed dot
/// products, and shards in process weighing their own in one visit per row
/// (the fused step).
#[inline]
pub fn scaled_weight(f: f32, positive: bool) -> f32 {
    wire_scaled_weight(if positive {
        positive_weight(1.0, f)
    } else {
        negative_weight(1.0, f)
    })
}

/// Largest |u·v| a healthy model shows: σ saturates beyond ±20, so SGNS
/// stops pushing dot products long before this; a larger one (or a NaN)
/// means the vectors have blown up, and training on would only spread
/// garbage (or NaN) through them.
pub const DIVERGED_DOT: f32 = 1e4;

/// Whether dot product `f` is one a healthy model never shows (NaN, ±∞, or
/// |f| > [`DIVERGED_DOT`]). Every path applies one rule to it: such a dot
/// product carries no update (its weight is 0), the minibatch's other dot
/// products are applied, and training stops with an error naming the
/// minibatch ([`diverged_at`]).
#[inline]
pub fn is_diverged(f: f32) -> bool {
    f.is_nan() || f.abs() > DIVERGED_DOT
}

/// The weight ÷ α of dot product `f` under the divergence rule:
/// [`scaled_weight`], or 0 for a diverged one ([`is_diverged`]).
#[inline]
pub fn applied_weight(f: f32, positive: bool) -> f32 {
    if is_diverged(f) {
        0.0
    } else {
        scaled_weight(f, positive)
    }
}

/// The first diverged dot product of a minibatch's `dots` ([`is_diverged`]),
/// if any.
pub fn diverged_at(dots: &[f32]) -> Option<f32> {
    // A branch-free pass first (it vectorizes): healthy minibatches end here.
    if !dots.iter().fold(false, |any, &f| any | is_diverged(f)) {
        return None;
    }
    dots.iter().copied().find(|&f| is_diverged(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_and_loss() {
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-7);
        assert!((positive_weight(0.1, 0.0) - 0.05).abs() < 1e-7);
        assert!((negative_weight(0.1, 0.0) + 0.05).abs() < 1e-7);
        for x in [-30.0f32, -2.0, 0.0, 1.5, 30.0] {
            let direct = -(sigmoid(x) as f64).ln();
            assert!((neg_log_sigmoid(x) as f64 - direct).abs() < 1e-5, "{x}");
        }
    }

    #[test]
    fn schedule_matches_word2vec() {
        assert_eq!(learning_rate_to(0.025, 0.0001, 0, 100), 0.025);
        assert!((learning_rate_to(0.025, 0.0001, 50, 100) - 0.01255).abs() < 1e-7);
        assert_eq!(learning_rate_to(0.025, 0.0001, 100, 100), 0.0001);
        assert_eq!(learning_rate_to(0.025, 0.0001, 500, 100), 0.0001);
        assert_eq!(learning_rate(0.025, 0, 100), 0.025);
        assert!((learning_rate(0.025, 50, 99) - 0.0125).abs() < 1e-6);
        assert!((learning_rate(0.025, 1000, 100) - 0.025e-4).abs() < 1e-9);
    }

    #[test]
    fn subsampling_matches_word2vec_formula() {
        // word2vec: ran = (sqrt(cn / (sample * train_words)) + 1) * (sample * train_words) / cn
        let (c, t, s) = (100_000u64, 17_000_000u64, 1e-4);
        let ran = ((c as f64 / (s * t as f64)).sqrt() + 1.0) * (s * t as f64) / c as f64;
        assert!((keep_probability(c, t, s) - ran).abs() < 1e-12);
        assert_eq!(keep_probability(5, t, s), 1.0);
        assert_eq!(keep_threshold(5, t, 0.0), u32::MAX);
    }

    /// `wire_scaled_weight` rounds as `half` does, for every f32: both
    /// halves of the bit patterns on two threads, as 2^32 conversions take
    /// a while even in release.
    #[test]
    fn wire_rounding_equals_half_for_every_f32() {
        let check = |range: std::ops::RangeInclusive<u32>| {
            for bits in range {
                let x = f32::from_bits(bits);
                let (ours, theirs) = (wire_scaled_weight(x), half::f16::from_f32(x).to_f32());
                let same = ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan());
                assert!(
                    same,
                    "{x:e} ({bits:#010x}): {ours:e} against half's {theirs:e}"
                );
            }
        };
        std::thread::scope(|s| {
            s.spawn(|| check(0..=0x7fff_ffff));
            check(0x8000_0000..=u32::MAX);
        });
    }

    #[test]
    fn a_diverged_dot_product_carries_no_weight() {
        for f in [f32::NAN, f32::INFINITY, -f32::INFINITY, 1.5e4, -1e5] {
            assert!(is_diverged(f), "{f}");
            assert_eq!(applied_weight(f, true), 0.0);
            assert_eq!(applied_weight(f, false), 0.0);
        }
        assert!(!is_diverged(DIVERGED_DOT) && !is_diverged(-3.0));
        assert_eq!(applied_weight(-3.0, true), scaled_weight(-3.0, true));
        assert_eq!(diverged_at(&[0.5, 2.0e4, f32::NAN]), Some(2.0e4));
        assert_eq!(diverged_at(&[0.5, -2.0]), None);
    }
}
