//! A small model for the crate's unit tests: 6 words, dimension 8, 3 negatives.

use crate::model::Model;
use colonnade_common::model::ModelSpec;
use colonnade_proto::{Matrix, ShardSpec};
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
            cbow: false,
        },
        col_start: cols.start,
        col_end: cols.end,
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
