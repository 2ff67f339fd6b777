//! Initial values of the vectors. As in gensim 4, input vectors start uniform
//! in [−1/d, 1/d) and output vectors at zero. (word2vec C draws from
//! [−0.5/d, 0.5/d), a range that costs CBOW analogy accuracy, in gensim as in
//! Colonnade: docs/benchmarks-history.md, "The cause: the initial range of
//! the input vectors".) Component c of u(w) is word c of the ChaCha8 stream
//! `w` under the key derived from the init seed, so any shard computes its
//! columns without the others and the starting model is the same for every
//! shard count.

use crate::seeds::{derive, Purpose};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Writes columns `col_start..col_start + out.len()` of the initial u(word).
pub fn init_input_row(init_seed: u64, dim: u32, word: u64, col_start: u32, out: &mut [f32]) {
    let key = derive(init_seed, Purpose::InitInput, 0, 0);
    let mut rng = ChaCha8Rng::seed_from_u64(key);
    rng.set_stream(word);
    rng.set_word_pos(u128::from(col_start));
    let scale = 2.0 / dim as f32;
    for x in out {
        let unit = (rng.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32);
        *x = (unit - 0.5) * scale; // (2·unit − 1)/d, in [−1/d, 1/d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_column_split_gives_the_same_row() {
        let dim = 37;
        let mut full = vec![0.0; dim as usize];
        init_input_row(9, dim, 12345, 0, &mut full);
        for split in [1u32, 5, 18, 36] {
            let mut a = vec![0.0; split as usize];
            let mut b = vec![0.0; (dim - split) as usize];
            init_input_row(9, dim, 12345, 0, &mut a);
            init_input_row(9, dim, 12345, split, &mut b);
            a.extend(b);
            assert_eq!(a, full);
        }
        assert!(full.iter().all(|x| x.abs() <= 1.0 / dim as f32));
        assert!(full.iter().any(|x| x.abs() > 0.5 / dim as f32));
        let mut other = vec![0.0; dim as usize];
        init_input_row(9, dim, 12346, 0, &mut other);
        assert_ne!(other, full);
    }
}
