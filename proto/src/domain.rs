//! The shard boundary's domain types, defined once, and their wire
//! conversions: a shard's [`ShardSpec`], the [`Matrix`] names, the
//! [`Minibatch`] (with its stable [`MinibatchId`]) and the [`ShardError`]s a
//! shard reports (each mapped to one gRPC code).

use crate::{decode_u32_into, encode_u32, v1, WireLengthError};
use colonnade_common::model::ModelSpec;

/// Largest number of negatives per pair a shard accepts.
pub const MAX_NEGATIVE: u32 = 1024;

/// Errors a shard reports; each variant is one gRPC code.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum ShardError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// The model's state is of another lineage than the call's (restored or
    /// restarted since), or a checkpoint barrier was given up.
    #[error("{0}")]
    Aborted(String),
    /// The shard is loading its models, or shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// The shard failed on its side (e.g. it could not write a checkpoint).
    #[error("{0}")]
    Internal(String),
}

impl ShardError {
    /// The gRPC code this error travels as.
    pub fn code(&self) -> tonic::Code {
        match self {
            Self::InvalidArgument(_) => tonic::Code::InvalidArgument,
            Self::FailedPrecondition(_) => tonic::Code::FailedPrecondition,
            Self::ResourceExhausted(_) => tonic::Code::ResourceExhausted,
            Self::Aborted(_) => tonic::Code::Aborted,
            Self::Unavailable(_) => tonic::Code::Unavailable,
            Self::Internal(_) => tonic::Code::Internal,
        }
    }
}

impl From<ShardError> for tonic::Status {
    fn from(e: ShardError) -> Self {
        let code = e.code();
        let (ShardError::InvalidArgument(m)
        | ShardError::FailedPrecondition(m)
        | ShardError::ResourceExhausted(m)
        | ShardError::Aborted(m)
        | ShardError::Unavailable(m)
        | ShardError::Internal(m)) = e;
        tonic::Status::new(code, m)
    }
}

impl From<WireLengthError> for ShardError {
    fn from(e: WireLengthError) -> Self {
        Self::InvalidArgument(e.to_string())
    }
}

/// An [`ShardError::InvalidArgument`] with `msg`.
pub fn invalid_argument(msg: impl Into<String>) -> ShardError {
    ShardError::InvalidArgument(msg.into())
}

use invalid_argument as invalid;

/// A model spec plus one shard's column range [col_start, col_end).
#[derive(Clone, Debug, PartialEq)]
pub struct ShardSpec {
    pub model: ModelSpec,
    pub col_start: u32,
    pub col_end: u32,
}

impl ShardSpec {
    pub fn cols(&self) -> usize {
        (self.col_end - self.col_start) as usize
    }

    /// Bytes of the two matrices this spec needs on this shard: per row its
    /// cells and its 4-byte lock slot.
    pub fn matrix_bytes(&self) -> u64 {
        2 * self
            .model
            .vocab_size
            .saturating_mul(self.cols() as u64 * 4 + 4)
    }

    /// Checks every field, naming the first that is out of range.
    pub fn validate(&self) -> Result<(), ShardError> {
        let m = &self.model;
        if m.vocab_size < 2 || m.vocab_size > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "field `vocab_size`: {} is outside 2..=2^32-1",
                m.vocab_size
            )));
        }
        if m.dim == 0 {
            return Err(invalid("field `dim`: must be positive"));
        }
        if self.col_start >= self.col_end || self.col_end > m.dim {
            return Err(invalid(format!(
                "fields `col_start`/`col_end`: [{}, {}) is not a non-empty column range within dim {}",
                self.col_start, self.col_end, m.dim
            )));
        }
        if m.negative == 0 || m.negative > MAX_NEGATIVE {
            return Err(invalid(format!(
                "field `negative`: {} is outside 1..={MAX_NEGATIVE}",
                m.negative
            )));
        }
        if !(m.sampling_power.is_finite() && (0.0..=2.0).contains(&m.sampling_power)) {
            return Err(invalid(format!(
                "field `sampling_power`: {} is outside [0, 2]",
                m.sampling_power
            )));
        }
        Ok(())
    }
}

impl From<&ShardSpec> for v1::ModelSpec {
    fn from(s: &ShardSpec) -> Self {
        Self {
            vocab_fingerprint: s.model.vocab_fingerprint,
            vocab_size: s.model.vocab_size,
            dim: s.model.dim,
            col_start: s.col_start,
            col_end: s.col_end,
            negative: s.model.negative,
            sampling_power: s.model.sampling_power,
            init_seed: s.model.init_seed,
        }
    }
}

impl From<&v1::ModelSpec> for ShardSpec {
    fn from(s: &v1::ModelSpec) -> Self {
        Self {
            model: ModelSpec {
                vocab_fingerprint: s.vocab_fingerprint,
                vocab_size: s.vocab_size,
                dim: s.dim,
                negative: s.negative,
                sampling_power: s.sampling_power,
                init_seed: s.init_seed,
            },
            col_start: s.col_start,
            col_end: s.col_end,
        }
    }
}

/// Which of a model's two matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matrix {
    /// The input vectors u(w): the embeddings users get.
    Input,
    /// The output vectors v(w).
    Output,
}

impl Matrix {
    /// The matrix a wire `matrix` field names.
    pub fn from_wire(value: i32) -> Result<Self, ShardError> {
        match v1::Matrix::try_from(value) {
            Ok(v1::Matrix::Input) => Ok(Self::Input),
            Ok(v1::Matrix::Output) => Ok(Self::Output),
            _ => Err(invalid(format!(
                "field `matrix`: {value} is not INPUT or OUTPUT"
            ))),
        }
    }
}

impl From<Matrix> for v1::Matrix {
    fn from(m: Matrix) -> Self {
        match m {
            Matrix::Input => Self::Input,
            Matrix::Output => Self::Output,
        }
    }
}

/// A minibatch's stable name: the worker that formed it, the epoch of its
/// first input and its sequence number among that worker's minibatches of
/// that epoch. The same corpus, vocabulary and flags give every minibatch the
/// same identity (and seed and learning rate) however many threads train it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MinibatchId {
    pub worker: u64,
    pub epoch: u64,
    pub seq: u64,
}

impl std::fmt::Display for MinibatchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "worker {}, epoch {}, minibatch {}",
            self.worker,
            self.epoch + 1,
            self.seq
        )
    }
}

/// One minibatch (paper eq. (3) and Fig. 7): input positions, each with its
/// context words, and the seed of its negative samples; plus what the client
/// fixed when forming it (identity, learning rate, where it starts). Only the
/// seed and the word arrays cross the wire.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Minibatch {
    pub id: MinibatchId,
    /// Seed of the negative-sample stream: identical for dotprod, adjust and
    /// every shard.
    pub seed: u64,
    /// Learning rate α of this minibatch's weights.
    pub alpha: f32,
    /// Input word of each input position.
    pub inputs: Vec<u32>,
    /// Number of context (output) words of each input position.
    pub context_counts: Vec<u32>,
    /// The context words of all input positions, concatenated in input order.
    pub outputs: Vec<u32>,
    /// The sentence (index in its epoch, among all workers' sentences) and
    /// the kept position in it of the first input.
    pub sentence: u64,
    pub position: u64,
}

impl Minibatch {
    /// Its (input, output) pairs.
    pub fn pairs(&self) -> usize {
        self.outputs.len()
    }

    /// Names this minibatch for messages: its identity and where it starts.
    pub fn origin(&self) -> String {
        format!(
            "epoch {}, the minibatch starting at sentence {} (kept word {}; {})",
            self.id.epoch + 1,
            self.sentence,
            self.position,
            self.id
        )
    }

    /// The wire form of this minibatch for model `fingerprint`.
    pub fn to_wire(&self, fingerprint: u64) -> v1::Minibatch {
        v1::Minibatch {
            model_fingerprint: fingerprint,
            seed: self.seed,
            inputs: encode_u32(&self.inputs),
            context_counts: encode_u32(&self.context_counts),
            outputs: encode_u32(&self.outputs),
            lineage: 0,
        }
    }

    /// Decodes a wire minibatch into `self`, reusing its arrays; returns the
    /// model fingerprint and the lineage it names. Identity and learning rate
    /// do not travel: they are left at their defaults.
    pub fn decode_from(&mut self, wire: Option<&v1::Minibatch>) -> Result<(u64, u64), ShardError> {
        let b = wire.ok_or_else(|| invalid("field `batch` is missing"))?;
        decode_u32_into("inputs", &b.inputs, &mut self.inputs)?;
        decode_u32_into(
            "context_counts",
            &b.context_counts,
            &mut self.context_counts,
        )?;
        decode_u32_into("outputs", &b.outputs, &mut self.outputs)?;
        self.seed = b.seed;
        (self.id, self.alpha, self.sentence, self.position) = (MinibatchId::default(), 0.0, 0, 0);
        Ok((b.model_fingerprint, b.lineage))
    }

    /// Checks the arrays against each other and a vocabulary of `vocab_size`
    /// words; returns the number of pairs.
    pub fn validate(&self, vocab_size: u64) -> Result<usize, ShardError> {
        if self.inputs.len() != self.context_counts.len() {
            return Err(invalid(format!(
                "fields `inputs`/`context_counts`: {} inputs but {} context counts",
                self.inputs.len(),
                self.context_counts.len()
            )));
        }
        let pairs: u64 = self.context_counts.iter().map(|&c| u64::from(c)).sum();
        if pairs != self.outputs.len() as u64 {
            return Err(invalid(format!(
                "field `outputs`: {} outputs but context counts sum to {pairs}",
                self.outputs.len()
            )));
        }
        for (field, ids) in [("inputs", &self.inputs), ("outputs", &self.outputs)] {
            if let Some((i, &id)) = ids
                .iter()
                .enumerate()
                .find(|(_, &id)| u64::from(id) >= vocab_size)
            {
                return Err(invalid(format!(
                    "field `{field}`: word id {id} at position {i} is out of range for vocabulary size {vocab_size}"
                )));
            }
        }
        Ok(self.outputs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minibatch_wire_roundtrip_keeps_words_and_seed() {
        let mb = Minibatch {
            id: MinibatchId {
                worker: 1,
                epoch: 2,
                seq: 3,
            },
            seed: 99,
            alpha: 0.02,
            inputs: vec![1, 2],
            context_counts: vec![2, 1],
            outputs: vec![2, 3, 1],
            sentence: 7,
            position: 4,
        };
        let mut back = Minibatch::default();
        assert_eq!(back.decode_from(Some(&mb.to_wire(42))), Ok((42, 0)));
        assert_eq!(
            (back.seed, &back.inputs, &back.context_counts, &back.outputs),
            (99, &mb.inputs, &mb.context_counts, &mb.outputs)
        );
        assert_eq!(back.validate(4), Ok(3));
        assert!(back
            .validate(3)
            .is_err_and(|e| e.to_string().contains("`outputs`")));
        assert!(back.decode_from(None).is_err());
    }

    #[test]
    fn spec_and_matrix_roundtrip() {
        let spec = ShardSpec {
            model: ModelSpec {
                vocab_fingerprint: 1,
                vocab_size: 10,
                dim: 8,
                negative: 5,
                sampling_power: 0.75,
                init_seed: 3,
            },
            col_start: 2,
            col_end: 6,
        };
        assert_eq!(ShardSpec::from(&v1::ModelSpec::from(&spec)), spec);
        assert_eq!(spec.validate(), Ok(()));
        for m in [Matrix::Input, Matrix::Output] {
            assert_eq!(Matrix::from_wire(v1::Matrix::from(m) as i32), Ok(m));
        }
        assert!(Matrix::from_wire(0).is_err());
        let status = tonic::Status::from(ShardError::FailedPrecondition("x".into()));
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    }
}
