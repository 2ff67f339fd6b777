//! Skip-gram with negative sampling: the client-side math between `dotprod`
//! and `adjust` (paper eq. (4), (5) and Fig. 7 line 25), the learning-rate
//! schedule and frequent-word subsampling, as in word2vec.
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
}
