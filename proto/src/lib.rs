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
/// window (`Minibatch.shared_negatives`).
pub const API_VERSION: u32 = 9;

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

/// Packs scaled weights (each already
/// [`colonnade_common::sgns::wire_scaled_weight`]-exact) as
/// little-endian half floats, converted a block at a time (F16C where the
/// CPU has it: one call per value was a visible share of a worker's time).
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
}
