//! A small model for the crate's unit tests: 6 words, dimension 8, 3 negatives.

use crate::model::Model;
use colonnade_common::model::{Matrix, ModelSpec, Objective, ShardSpec};
use colonnade_proto::Minibatch;
use std::ops::Range;

pub const COUNTS: [u64; 6] = [50, 40, 30, 20, 10, 5];

/// The fixture's spec for columns `cols` of its 8.
pub fn spec(cols: Range<u32>) -> ShardSpec {
    ShardSpec {
        model: ModelSpec {
            vocab_fingerprint: 7,
            vocab_size: COUNTS.len() as u64,
            dim: 8,
            negative: 3,
            sampling_power: 0.75,
            init_seed: 5,
            objective: Objective::SkipGram,
        },
        col_start: cols.start,
        col_end: cols.end,
    }
}

/// A minibatch of explicit pairs: per input, its count of context words.
pub fn minibatch(seed: u64, inputs: &[u32], counts: &[u32], outputs: &[u32]) -> Minibatch {
    Minibatch {
        seed,
        inputs: inputs.to_vec(),
        context_counts: counts.to_vec(),
        outputs: outputs.to_vec(),
        ..Minibatch::default()
    }
}

/// Both matrices of `m`, every row.
pub fn snapshot(m: &Model) -> (Vec<f32>, Vec<f32>) {
    let (mut u, mut v) = (Vec::new(), Vec::new());
    let rows = COUNTS.len() as u64;
    m.read_rows(Matrix::Input, 0, rows, &mut u).expect("rows");
    m.read_rows(Matrix::Output, 0, rows, &mut v).expect("rows");
    (u, v)
}
