//! The boundary between Colonnade clients, shards and the exporter: the
//! generated `colonnade.v1` gRPC types, the little-endian array codecs used by
//! their `bytes` fields, the domain types of a call with their wire
//! conversions ([`domain`]: minibatch, errors, limits; the model's spec and
//! matrices are `colonnade_common::model`'s) and the one trait a training
//! pipeline reaches a model's shards through ([`shards`]).
//!
//! Numeric arrays are packed as little-endian `u32`/`u64`/`f32` in `bytes` fields.
//! Decoding checks that a field's length is a multiple of the element size and
//! names the field when it is not. This crate is wire types and conversions
//! only: it must never hold training logic (no dot products, weights or
//! updates), process-wide state, channels or credentials (`colonnade-setup`
//! has those), and never depend on a shard's internals.

#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unused_qualifications,
    rust_2018_idioms
)]
pub mod v1 {
    tonic::include_proto!("colonnade.v1");
}

pub mod domain;
pub mod shards;

pub use domain::{
    matrix_from_wire, validate_spec, Minibatch, MinibatchId, Segment, ShardError, Windows,
    MAX_ALPHA, MAX_CALL_DOTS, MAX_DIM, MAX_NEGATIVE,
};
pub use shards::{CallError, ModelShards, DIVERGED_PREFIX};

/// Version of the shard API carried in `StatusResponse.api_version`. 2:
/// dot products and weights travel as one pair-major array. 3: lineages,
/// checkpoints and restore. 4: several minibatches per call, minibatches as
/// sentence windows, weights as half floats scaled by 1/α. 5: from a
/// million words on, negatives drawn from a table over runs of equal counts
/// (`colonnade_common::sampler`). 6: the minibatches of a call planned and
/// applied together, dot products and weights in the call's wire order
/// (positives, then negatives by row), an adjust that names its call. 7:
/// steps scaled by the calls pending on a row, a diverged model refused. 8:
/// DropModel keeps the model's files unless asked (`delete_checkpoints`),
/// and CreateModel loads a model dropped with its files kept (a client of 7
/// meant the files to go, a client of 8 to stay). 9: skip-gram minibatches with negatives shared per
/// window (`Minibatch.shared_negatives`). 10: a column slice's partial dot
/// products as half floats (`DotprodResponse.half_dots`).
pub const API_VERSION: u32 = 10;

/// Largest gRPC message either side accepts or sends (default tonic limit is
/// 4 MiB). The largest real ones are a call's dot products (at most
/// [`MAX_CALL_DOTS`] × 4 bytes), a chunk of counts (8 MiB) and an export
/// block (≲ 4 MiB); anything larger is refused before it is buffered whole.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// A `bytes` field whose length is not a whole number of elements.
#[derive(Debug, thiserror::Error)]
#[error("field `{field}`: {len} bytes is not a multiple of {elem} (little-endian {kind} array)")]
pub struct WireLengthError {
    pub field: &'static str,
    pub len: usize,
    pub elem: usize,
    pub kind: &'static str,
}

use half::slice::HalfFloatSliceExt as _;

macro_rules! le_codec {
    ($encode:ident, $decode:ident, $decode_into:ident, $ty:ty, $n:expr, $kind:expr) => {
        /// Packs values as little-endian bytes (a copy on little-endian
        /// machines).
        pub fn $encode(values: &[$ty]) -> bytes::Bytes {
            if cfg!(target_endian = "little") {
                return bytes::Bytes::copy_from_slice(bytemuck::cast_slice(values));
            }
            let mut out = Vec::with_capacity(values.len() * $n);
            for v in values {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.into()
        }

        /// Unpacks little-endian bytes, naming `field` if the length is wrong.
        pub fn $decode(field: &'static str, raw: &[u8]) -> Result<Vec<$ty>, WireLengthError> {
            let mut out = Vec::new();
            $decode_into(field, raw, &mut out)?;
            Ok(out)
        }

        /// Like the allocating decoder, but reuses `out` (cleared first).
        pub fn $decode_into(
            field: &'static str,
            raw: &[u8],
            out: &mut Vec<$ty>,
        ) -> Result<(), WireLengthError> {
            if raw.len() % $n != 0 {
                return Err(WireLengthError {
                    field,
                    len: raw.len(),
                    elem: $n,
                    kind: $kind,
                });
            }
            out.clear();
            if cfg!(target_endian = "little") {
                out.resize(raw.len() / $n, <$ty>::default());
                bytemuck::cast_slice_mut::<$ty, u8>(out).copy_from_slice(raw);
                return Ok(());
            }
            out.reserve(raw.len() / $n);
            out.extend(raw.chunks_exact($n).map(|c| {
                let mut b = [0u8; $n];
                b.copy_from_slice(c);
                <$ty>::from_le_bytes(b)
            }));
            Ok(())
        }
    };
}

le_codec!(encode_u32, decode_u32, decode_u32_into, u32, 4, "u32");
le_codec!(encode_u64, decode_u64, decode_u64_into, u64, 8, "u64");
le_codec!(encode_f32, decode_f32, decode_f32_into, f32, 4, "f32");

/// Packs values as little-endian half floats, rounded to nearest, converted
/// a block at a time (F16C where the CPU has it: one call per value was a
/// visible share of a worker's time): a worker's scaled weights (each
/// already [`colonnade_common::sgns::wire_scaled_weight`]-exact) and a
/// shard's partial dot products.
pub fn encode_f16(values: &[f32]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(values.len() * 2);
    let mut block = [half::f16::ZERO; F16_BLOCK];
    for chunk in values.chunks(F16_BLOCK) {
        let block = &mut block[..chunk.len()];
        block.convert_from_f32_slice(chunk);
        for h in block.iter_mut() {
            *h = half::f16::from_bits(h.to_bits().to_le());
        }
        out.extend_from_slice(bytemuck::cast_slice(block));
    }
    out.into()
}

/// Values converted between f16 and f32 at a time.
const F16_BLOCK: usize = 256;

/// Unpacks little-endian half floats a block at a time (F16C where the CPU
/// has it), handing `each` the values of every block in order as f32s, so
/// that a caller that transforms them (the shard's weights: times each dot
/// product's α, checked) writes its result once, with no array of the
/// unpacked values between. Names `field` if the length is odd.
pub fn decode_f16_blocks(
    field: &'static str,
    raw: &[u8],
    mut each: impl FnMut(&[f32]),
) -> Result<(), WireLengthError> {
    if !raw.len().is_multiple_of(2) {
        return Err(WireLengthError {
            field,
            len: raw.len(),
            elem: 2,
            kind: "f16",
        });
    }
    let mut block = [half::f16::ZERO; F16_BLOCK];
    let mut values = [0.0f32; F16_BLOCK];
    for bytes in raw.chunks(2 * F16_BLOCK) {
        let n = bytes.len() / 2;
        let (block, values) = (&mut block[..n], &mut values[..n]);
        bytemuck::cast_slice_mut::<half::f16, u8>(block).copy_from_slice(bytes);
        for h in block.iter_mut() {
            *h = half::f16::from_bits(u16::from_le(h.to_bits()));
        }
        block.convert_to_f32_slice(values);
        each(values);
    }
    Ok(())
}

/// A column slice's partial dot product as it reaches the worker (rounded to
/// the nearest half float, `DotprodResponse.half_dots`): what in-process
/// shards of column slices sum, so that they train the model the wire does.
#[inline]
pub fn partial_as_sent(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Sums one shard's dot products into `sums`: `half` (little-endian half
/// floats, a column slice's partials, see [`encode_f16`]) if not empty, else
/// `whole` (little-endian f32, a shard holding every column). Written over
/// for the first shard (`first`), added in place for the others, so that
/// every worker adds the shards' values in shard order. Says which field
/// when it does not hold exactly `sums.len()` values.
pub fn sum_dots_into(
    half: &[u8],
    whole: &[u8],
    sums: &mut [f32],
    first: bool,
) -> Result<(), String> {
    let (field, raw, size) = if half.is_empty() {
        ("dots", whole, 4)
    } else {
        ("half_dots", half, 2)
    };
    if raw.len() != sums.len() * size {
        return Err(format!(
            "field `{field}`: {} bytes, expected {} ({} dot products of {size} bytes)",
            raw.len(),
            sums.len() * size,
            sums.len()
        ));
    }
    let mut at = 0;
    let mut add = |block: &[f32]| {
        let out = &mut sums[at..at + block.len()];
        if first {
            out.copy_from_slice(block);
        } else {
            for (s, v) in out.iter_mut().zip(block) {
                *s += v;
            }
        }
        at += block.len();
    };
    if size == 2 {
        return decode_f16_blocks(field, raw, add).map_err(|e| e.to_string());
    }
    let mut block = [0.0f32; F16_BLOCK];
    for bytes in raw.chunks(4 * F16_BLOCK) {
        let block = &mut block[..bytes.len() / 4];
        for (v, b) in block.iter_mut().zip(bytes.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        add(block);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_length_errors() {
        let v = [1.5f32, -0.0, f32::MAX, 3.25];
        assert_eq!(decode_f32("x", &encode_f32(&v)).expect("decodes"), v);
        let ids = [0u32, 7, u32::MAX];
        assert_eq!(decode_u32("ids", &encode_u32(&ids)).expect("decodes"), ids);
        let counts = [0u64, u64::MAX];
        assert_eq!(
            decode_u64("c", &encode_u64(&counts)).expect("decodes"),
            counts
        );
        let err = decode_u32("inputs", &[1, 2, 3]).expect_err("3 bytes is not a u32 array");
        assert!(err.to_string().contains("`inputs`"), "{err}");
    }

    /// Every value of `raw` times `alpha`, through [`decode_f16_blocks`].
    fn decode_f16_scaled(raw: &[u8], alpha: f32) -> Result<Vec<f32>, WireLengthError> {
        let mut out = Vec::new();
        decode_f16_blocks("w", raw, |block| {
            out.extend(block.iter().map(|&x| alpha * x))
        })?;
        Ok(out)
    }

    #[test]
    fn half_weights_roundtrip_exactly_once_rounded() {
        let scaled: Vec<f32> = [0.999, -0.5, -1e-6, 0.0, 0.3333, -0.99997]
            .iter()
            .map(|&x| colonnade_common::sgns::wire_scaled_weight(x))
            .collect();
        let back = decode_f16_scaled(&encode_f16(&scaled), 0.025).expect("decodes");
        let want: Vec<f32> = scaled.iter().map(|&x| 0.025 * x).collect();
        assert_eq!(back, want, "α × the rounded value, bit for bit");
        assert!((scaled[4] - 0.3333).abs() < 2e-4, "11 significant bits");
        assert!(decode_f16_scaled(&[1, 2, 3], 1.0).is_err_and(|e| e.to_string().contains("`w`")));
    }

    #[test]
    fn floats_travel_as_little_endian_bytes_in_blocks_of_any_length() {
        // IEEE 754: 1.0 and -2.0 as half floats 0x3c00 and 0xc000, 1.0 as a
        // float 0x3f800000, least significant byte first.
        assert_eq!(&encode_f16(&[1.0, -2.0])[..], &[0x00, 0x3c, 0x00, 0xc0]);
        assert_eq!(&encode_f32(&[1.0])[..], &[0x00, 0x00, 0x80, 0x3f]);
        // More values than one conversion block, and not a multiple of it.
        let many: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) / 512.0).collect();
        let back = decode_f16_scaled(&encode_f16(&many), 1.0).expect("decodes");
        assert_eq!(back, many, "values of 9 significant bits are exact in f16");
        let mut f = vec![9.0];
        decode_f32_into("d", &encode_f32(&many), &mut f).expect("decodes");
        assert_eq!(f, many);
    }

    /// The worker's sum of shards' half-float partials: each value rounded
    /// to nearest once (checked against f64 arithmetic on the values'
    /// nearest half floats, found independently by searching the f16
    /// grid), then added in shard order; overflow arrives as infinity.
    #[test]
    fn partials_sum_in_shard_order_from_half_floats() {
        // The nearest half float of x, by its definition: the f16 grid has
        // 10 fraction bits, so the spacing at |x| in [2^e, 2^(e+1)) is
        // 2^(e-10); ties go to the even neighbour.
        fn nearest_half(x: f64) -> f64 {
            if x.abs() >= 65520.0 {
                return x.signum() * f64::INFINITY;
            }
            let e = x.abs().log2().floor().max(-14.0);
            let step = 2f64.powf(e - 10.0);
            let q = x / step;
            let r = q.round();
            let r = if (q - q.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
                r - q.signum()
            } else {
                r
            };
            r * step
        }
        let shard0: Vec<f32> = (0..700).map(|i| (i as f32 * 0.0137).sin() * 7.3).collect();
        let shard1: Vec<f32> = (0..700)
            .map(|i| (i as f32 * 0.029).cos() * -3.1 + 0.001)
            .collect();
        let mut sums = vec![f32::NAN; 700];
        sum_dots_into(&encode_f16(&shard0), &[], &mut sums, true).expect("700 values");
        sum_dots_into(&encode_f16(&shard1), &[], &mut sums, false).expect("700 values");
        for (i, &s) in sums.iter().enumerate() {
            let want = nearest_half(f64::from(shard0[i])) + nearest_half(f64::from(shard1[i]));
            assert_eq!(
                f64::from(s),
                want,
                "value {i}: {} + {}",
                shard0[i],
                shard1[i]
            );
            let exact = f64::from(shard0[i]) + f64::from(shard1[i]);
            assert!(
                (f64::from(s) - exact).abs() <= 2.0 * 2f64.powi(-9),
                "value {i}"
            );
            let in_process = partial_as_sent(shard0[i]) + partial_as_sent(shard1[i]);
            assert_eq!(s, in_process, "value {i}: as in-process slices sum it");
        }
        // A shard holding every column sends f32, summed exactly.
        let mut whole = vec![0.0; 700];
        sum_dots_into(&[], &encode_f32(&shard0), &mut whole, true).expect("700 values");
        assert_eq!(whole, shard0);
        let mut big = vec![0.0; 2];
        sum_dots_into(&encode_f16(&[70000.0, -1e6]), &[], &mut big, true).expect("2 values");
        assert_eq!(big, [f32::INFINITY, f32::NEG_INFINITY]);
        let err = sum_dots_into(&[0; 6], &[], &mut big, false).expect_err("3 values, 2 expected");
        assert!(
            err.contains("`half_dots`") && err.contains("expected 4"),
            "{err}"
        );
        let err = sum_dots_into(&[], &[0; 4], &mut big, false).expect_err("1 value, 2 expected");
        assert!(
            err.contains("`dots`") && err.contains("expected 8"),
            "{err}"
        );
    }
}
