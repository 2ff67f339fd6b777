//! The shard boundary's domain types and their wire conversions: the
//! [`Minibatch`] (with its stable [`MinibatchId`] and its [`Windows`]), the
//! [`ShardError`]s a shard reports (each mapped to one gRPC code), the
//! protocol's limits, and the conversions of the model's spec and matrices
//! (`colonnade_common::model`) to and from the wire.

use crate::{decode_u32_into, encode_u32, v1, WireLengthError};
use colonnade_common::model::{Matrix, ModelSpec, Objective, ShardSpec};

/// Largest number of negatives per pair a shard accepts.
pub const MAX_NEGATIVE: u32 = 1024;

/// Largest number of (input, context) pairs one minibatch of the windows
/// form may expand to (a 256-input minibatch with window 5 has ~1,500, with
/// the largest window, 255, at most 130,560).
pub const MAX_WINDOW_PAIRS: u64 = 1 << 21;

/// Largest number of dot products (examples × (1 + negative), over all its
/// minibatches) one `dotprod` or `adjust` call may ask of a shard: 16 MiB of
/// dot products back, and a bounded plan on the shard. The client's defaults
/// ask at most ~123K (skip-gram: 8 minibatches of 256 inputs, window 5,
/// negative 5); `colonnade
/// train` refuses settings whose worst case exceeds it before training.
pub const MAX_CALL_DOTS: u64 = 1 << 22;

/// Largest vector dimension a model may have (word2vec's are 50 to 1,000).
pub const MAX_DIM: u32 = 1 << 16;

/// Largest learning rate a minibatch may carry (word2vec's default is 0.025
/// for skip-gram, 0.05 for CBOW; the divergence tests use 50 to blow a model
/// up on purpose): a larger one is a client bug or an attack.
pub const MAX_ALPHA: f32 = 100.0;

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
    /// A call names something the shard does not hold (an adjust's plan
    /// that was dropped): the caller sends the call again in full.
    #[error("{0}")]
    NotFound(String),
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
            Self::NotFound(_) => tonic::Code::NotFound,
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
        | ShardError::Internal(m)
        | ShardError::NotFound(m)) = e;
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

/// Checks every field of a shard's spec, naming the first that is out of
/// range (what a shard checks before it creates a model).
pub fn validate_spec(spec: &ShardSpec) -> Result<(), ShardError> {
    let m = &spec.model;
    if m.vocab_size < 2 || m.vocab_size > u64::from(u32::MAX) {
        return Err(invalid(format!(
            "field `vocab_size`: {} is outside 2..=2^32-1",
            m.vocab_size
        )));
    }
    if m.dim == 0 || m.dim > MAX_DIM {
        return Err(invalid(format!(
            "field `dim`: {} is outside 1..={MAX_DIM}",
            m.dim
        )));
    }
    if spec.col_start >= spec.col_end || spec.col_end > m.dim {
        return Err(invalid(format!(
            "fields `col_start`/`col_end`: [{}, {}) is not a non-empty column range within dim {}",
            spec.col_start, spec.col_end, m.dim
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
            cbow: s.model.objective.is_cbow(),
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
                objective: Objective::from_cbow(s.cbow),
            },
            col_start: s.col_start,
            col_end: s.col_end,
        }
    }
}

/// The matrix a wire `matrix` field names.
pub fn matrix_from_wire(value: i32) -> Result<Matrix, ShardError> {
    match v1::Matrix::try_from(value) {
        Ok(v1::Matrix::Input) => Ok(Matrix::Input),
        Ok(v1::Matrix::Output) => Ok(Matrix::Output),
        _ => Err(invalid(format!(
            "field `matrix`: {value} is not INPUT or OUTPUT"
        ))),
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

/// One stretch of a sentence's kept words in a minibatch's [`Windows`]: its
/// length, the offset of its first input position and how many consecutive
/// input positions it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub len: u32,
    pub first: u32,
    pub inputs: u32,
}

/// A minibatch as sentence windows, the form it travels in: the kept words of
/// each sentence stretch it covers (its inputs and their contexts), and per
/// input position its window radius. The shard expands it into (input,
/// context) pairs exactly as the client formed them: the contexts of the
/// input at offset j of a segment are the segment's words at offsets k ≠ j
/// with |k − j| ≤ r, ascending; an input with none is skipped. One id and
/// one byte per trained word cross the wire instead of 2 + w ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Windows {
    pub tokens: Vec<u32>,
    pub segments: Vec<Segment>,
    pub radii: Vec<u8>,
}

impl Windows {
    /// True when there are no input positions (the minibatch travels as
    /// explicit pairs).
    pub fn is_empty(&self) -> bool {
        self.radii.is_empty()
    }

    pub fn clear(&mut self) {
        self.tokens.clear();
        self.segments.clear();
        self.radii.clear();
    }

    /// The context range [lo, hi] of the input at offset `j` of a segment of
    /// `len` words with radius `r`.
    #[inline]
    fn reach(j: usize, r: u8, len: usize) -> (usize, usize) {
        (
            j.saturating_sub(usize::from(r)),
            (j + usize::from(r)).min(len - 1),
        )
    }

    /// Checks the segments against the tokens and radii, naming the field.
    fn check(&self) -> Result<u64, ShardError> {
        let (mut tokens, mut inputs, mut pairs) = (0u64, 0u64, 0u64);
        for (i, seg) in self.segments.iter().enumerate() {
            if u64::from(seg.first) + u64::from(seg.inputs) > u64::from(seg.len) {
                return Err(invalid(format!(
                    "field `segments`: segment {i} has inputs [{}, {}) beyond its {} words",
                    seg.first,
                    u64::from(seg.first) + u64::from(seg.inputs),
                    seg.len
                )));
            }
            let start = inputs as usize;
            inputs += u64::from(seg.inputs);
            if inputs > self.radii.len() as u64 {
                break; // reported below
            }
            for (j, &r) in (seg.first as usize..).zip(&self.radii[start..inputs as usize]) {
                let (lo, hi) = Self::reach(j, r, seg.len as usize);
                pairs += (hi - lo) as u64;
            }
            tokens += u64::from(seg.len);
        }
        if inputs != self.radii.len() as u64 {
            return Err(invalid(format!(
                "field `radii`: {} radii but the segments have {inputs} inputs",
                self.radii.len()
            )));
        }
        if tokens != self.tokens.len() as u64 {
            return Err(invalid(format!(
                "field `tokens`: {} tokens but the segments' lengths sum to {tokens}",
                self.tokens.len()
            )));
        }
        if let Some(i) = self.radii.iter().position(|&r| r == 0) {
            return Err(invalid(format!("field `radii`: radius {i} is 0")));
        }
        if pairs > MAX_WINDOW_PAIRS {
            return Err(ShardError::ResourceExhausted(format!(
                "fields `segments`/`radii`: the windows expand to {pairs} pairs, more than \
                 {MAX_WINDOW_PAIRS} per minibatch"
            )));
        }
        Ok(pairs)
    }

    /// Expands the windows into explicit pairs (`inputs`, `context_counts`,
    /// `outputs`, cleared first), after checking them.
    pub fn expand(
        &self,
        inputs: &mut Vec<u32>,
        context_counts: &mut Vec<u32>,
        outputs: &mut Vec<u32>,
    ) -> Result<(), ShardError> {
        let pairs = self.check()?;
        inputs.clear();
        context_counts.clear();
        outputs.clear();
        outputs.reserve(pairs as usize);
        let (mut offset, mut radii) = (0usize, self.radii.iter());
        for seg in &self.segments {
            let words = &self.tokens[offset..offset + seg.len as usize];
            offset += seg.len as usize;
            for (j, &r) in (seg.first as usize..).zip(radii.by_ref().take(seg.inputs as usize)) {
                let (lo, hi) = Self::reach(j, r, words.len());
                if lo == hi {
                    continue;
                }
                outputs.extend_from_slice(&words[lo..j]);
                outputs.extend_from_slice(&words[j + 1..=hi]);
                inputs.push(words[j]);
                context_counts.push((hi - lo) as u32);
            }
        }
        Ok(())
    }
}

/// One minibatch (paper eq. (3) and Fig. 7): input positions, each with its
/// context words, and the seed of its negative samples; plus what the client
/// fixed when forming it (identity, learning rate, where it starts). The
/// seed, the learning rate and the words cross the wire: as [`Windows`] when
/// the minibatch has them (what the client forms), else as explicit pairs.
///
/// Skip-gram reads it as (input word, context word) pairs, each one example.
/// CBOW ([`Minibatch::objective`]) reads the same words the other way round: each
/// input position is one example, the mean of its context words' input
/// vectors against the position's own word.
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
    /// The same pairs as sentence windows (empty: they travel explicitly).
    pub windows: Windows,
    /// The sentence (index in its epoch, among all workers' sentences) and
    /// the kept position in it of the first input.
    pub sentence: u64,
    pub position: u64,
    /// What it trains (travels; a shard refuses a minibatch of the other
    /// objective).
    pub objective: Objective,
    /// Skip-gram only: its negatives drawn per input position and shared by
    /// the position's context words (word2vec C's orientation; travels).
    /// The same pairs and the same number of dot products.
    pub shared_negatives: bool,
}

impl Minibatch {
    /// Its (input, output) pairs.
    pub fn pairs(&self) -> usize {
        self.outputs.len()
    }

    /// Its training examples, each with 1 + negative dot products:
    /// skip-gram, one per pair; CBOW, one per input position.
    pub fn examples(&self) -> usize {
        if self.objective.is_cbow() {
            self.inputs.len()
        } else {
            self.outputs.len()
        }
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

    /// The wire form of this minibatch for model `fingerprint`: its windows
    /// if it has them, else its explicit pairs.
    pub fn to_wire(&self, fingerprint: u64) -> v1::Minibatch {
        let mut wire = v1::Minibatch {
            model_fingerprint: fingerprint,
            seed: self.seed,
            alpha: self.alpha,
            cbow: self.objective.is_cbow(),
            shared_negatives: self.shared_negatives,
            ..v1::Minibatch::default()
        };
        if self.windows.is_empty() {
            wire.inputs = encode_u32(&self.inputs);
            wire.context_counts = encode_u32(&self.context_counts);
            wire.outputs = encode_u32(&self.outputs);
        } else {
            let w = &self.windows;
            wire.tokens = encode_u32(&w.tokens);
            let segments: Vec<u32> = w
                .segments
                .iter()
                .flat_map(|s| [s.len, s.first, s.inputs])
                .collect();
            wire.segments = encode_u32(&segments);
            wire.radii = bytes::Bytes::copy_from_slice(&w.radii);
        }
        wire
    }

    /// Decodes a wire minibatch into `self`, reusing its arrays (windows are
    /// checked and expanded into explicit pairs); returns the model
    /// fingerprint and the lineage it names. Identity and position do not
    /// travel: they are left at their defaults.
    pub fn decode_from(&mut self, wire: Option<&v1::Minibatch>) -> Result<(u64, u64), ShardError> {
        let b = wire.ok_or_else(|| invalid("field `batch` is missing"))?;
        if b.radii.is_empty() {
            self.windows.clear();
            decode_u32_into("inputs", &b.inputs, &mut self.inputs)?;
            decode_u32_into(
                "context_counts",
                &b.context_counts,
                &mut self.context_counts,
            )?;
            decode_u32_into("outputs", &b.outputs, &mut self.outputs)?;
        } else {
            if !(b.inputs.is_empty() && b.context_counts.is_empty() && b.outputs.is_empty()) {
                return Err(invalid(
                    "fields `radii` and `inputs`/`context_counts`/`outputs`: a minibatch is \
                     either windows or explicit pairs, not both",
                ));
            }
            let w = &mut self.windows;
            decode_u32_into("tokens", &b.tokens, &mut w.tokens)?;
            // The segments' u32 triples, decoded through `inputs` (scratch).
            decode_u32_into("segments", &b.segments, &mut self.inputs)?;
            if !self.inputs.len().is_multiple_of(3) {
                return Err(invalid(format!(
                    "field `segments`: {} values is not a whole number of (len, first, inputs) triples",
                    self.inputs.len()
                )));
            }
            w.segments.clear();
            w.segments
                .extend(self.inputs.chunks_exact(3).map(|t| Segment {
                    len: t[0],
                    first: t[1],
                    inputs: t[2],
                }));
            w.radii.clear();
            w.radii.extend_from_slice(&b.radii);
            w.expand(
                &mut self.inputs,
                &mut self.context_counts,
                &mut self.outputs,
            )?;
        }
        if !(b.alpha.is_finite() && (0.0..=MAX_ALPHA).contains(&b.alpha)) {
            return Err(invalid(format!(
                "field `alpha`: {} is outside [0, {MAX_ALPHA}]",
                b.alpha
            )));
        }
        self.seed = b.seed;
        self.alpha = b.alpha;
        if b.cbow && b.shared_negatives {
            return Err(invalid(
                "fields `cbow`/`shared_negatives`: negatives are shared by a skip-gram \
                 minibatch's context words; a CBOW minibatch has one example per position",
            ));
        }
        self.objective = Objective::from_cbow(b.cbow);
        self.shared_negatives = b.shared_negatives;
        (self.id, self.sentence, self.position) = (MinibatchId::default(), 0, 0);
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
            windows: Windows::default(),
            sentence: 7,
            position: 4,
            objective: Objective::Cbow,
            shared_negatives: false,
        };
        let mut back = Minibatch::default();
        assert_eq!(back.decode_from(Some(&mb.to_wire(42))), Ok((42, 0)));
        assert_eq!(
            (back.seed, &back.inputs, &back.context_counts, &back.outputs),
            (99, &mb.inputs, &mb.context_counts, &mb.outputs)
        );
        assert_eq!(back.objective, Objective::Cbow, "the objective travels");
        assert_eq!(back.examples(), 2, "CBOW: one example per input position");
        assert_eq!(back.validate(4), Ok(3));
        assert!(back
            .validate(3)
            .is_err_and(|e| e.to_string().contains("`outputs`")));
        assert!(back.decode_from(None).is_err());
        // Shared negatives travel with skip-gram, and are refused with CBOW.
        let sg = Minibatch {
            objective: Objective::SkipGram,
            shared_negatives: true,
            ..mb.clone()
        };
        assert_eq!(back.decode_from(Some(&sg.to_wire(42))), Ok((42, 0)));
        assert!(back.shared_negatives, "the sharing travels");
        assert_eq!(back.examples(), 3, "one positive per pair");
        let mut both = sg.to_wire(42);
        both.cbow = true;
        assert!(back
            .decode_from(Some(&both))
            .is_err_and(|e| e.to_string().contains("`shared_negatives`")));
    }

    #[test]
    fn windows_expand_within_their_segments() {
        // Segment 1: words [10 11 12 13], inputs at offsets 1, 2 (radii 1, 5);
        // segment 2: [20 21], input at offset 0 (radius 2).
        let w = Windows {
            tokens: vec![10, 11, 12, 13, 20, 21],
            segments: vec![
                Segment {
                    len: 4,
                    first: 1,
                    inputs: 2,
                },
                Segment {
                    len: 2,
                    first: 0,
                    inputs: 1,
                },
            ],
            radii: vec![1, 5, 2],
        };
        let (mut i, mut c, mut o) = (Vec::new(), Vec::new(), Vec::new());
        w.expand(&mut i, &mut c, &mut o).expect("valid");
        assert_eq!(i, [11, 12, 20]);
        assert_eq!(c, [2, 3, 1]);
        assert_eq!(o, [10, 12, 10, 11, 13, 21], "windows never cross segments");
        let mut huge = w.clone();
        huge.tokens = vec![1; 40_000];
        huge.segments = vec![Segment {
            len: 40_000,
            first: 0,
            inputs: 40_000,
        }];
        huge.radii = vec![255; 40_000];
        assert!(matches!(
            huge.expand(&mut i, &mut c, &mut o),
            Err(ShardError::ResourceExhausted(_))
        ));
    }

    #[test]
    fn spec_and_matrix_roundtrip() {
        // The wire's flat fields and the domain's nested spec, both ways.
        let wire = v1::ModelSpec {
            vocab_fingerprint: 1,
            vocab_size: 10,
            dim: 8,
            col_start: 2,
            col_end: 6,
            negative: 5,
            sampling_power: 0.75,
            init_seed: 3,
            cbow: true,
        };
        let spec = ShardSpec::from(&wire);
        assert_eq!(spec.model.objective, Objective::Cbow);
        assert_eq!((spec.columns(), spec.model.dim), (2..6, 8));
        assert_eq!(v1::ModelSpec::from(&spec), wire);
        assert_eq!(validate_spec(&spec), Ok(()));
        for m in [Matrix::Input, Matrix::Output] {
            assert_eq!(matrix_from_wire(v1::Matrix::from(m) as i32), Ok(m));
        }
        assert!(matrix_from_wire(0).is_err());
        let status = tonic::Status::from(ShardError::FailedPrecondition("x".into()));
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    }
}
