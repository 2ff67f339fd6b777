//! The gRPC side of the training boundary ([`ModelShards`]): a shard
//! reached over gRPC ([`GrpcShard`]), the one way every call reaches all of a
//! model's shards at once ([`broadcast`], answers in shard order), and
//! [`GrpcShards`], one training pipeline's handle, which sums the partial dot
//! products in shard order.

use anyhow::bail;
use colonnade_proto::v1::{self, AdjustRequest, DotprodRequest};
use colonnade_proto::{encode_f16, sum_dots_into, CallError, Minibatch, MinibatchId, ModelShards};
use colonnade_setup::ShardClient;
use prost::Message;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A shard reached over gRPC.
#[derive(Clone)]
pub struct GrpcShard {
    pub endpoint: String,
    pub client: ShardClient,
}

/// Makes `call` on every shard at once; the answers come back in shard
/// order.
pub async fn broadcast<T, F, Fut>(shards: &[GrpcShard], call: F) -> Vec<Result<T, tonic::Status>>
where
    F: Fn(ShardClient) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    futures::future::join_all(shards.iter().map(|s| call(s.client.clone())))
        .await
        .into_iter()
        .map(|r| r.map(tonic::Response::into_inner))
        .collect()
}

/// `message` with a deadline.
pub fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(timeout);
    r
}

/// Fails, naming the shard, when `status` (of the shard at `endpoint`) is
/// of another shard API than this client's: shards of another API may draw
/// other negatives from the same seed (APIs 4 and 5 sample large
/// vocabularies differently) or read calls otherwise, and their partial dot
/// products would not add up, silently.
pub fn same_api(endpoint: &str, status: &v1::StatusResponse) -> anyhow::Result<()> {
    if status.api_version != colonnade_proto::API_VERSION {
        bail!(
            "shard {endpoint} speaks shard API v{} (ps-shard {}), this client v{} (colonnade {}): \
             run one Colonnade release on every shard and worker of a model",
            status.api_version,
            status.version,
            colonnade_proto::API_VERSION,
            env!("CARGO_PKG_VERSION"),
        );
    }
    Ok(())
}

/// The gRPC side of the training boundary: one pipeline's handle on the
/// shards of model `fingerprint`, in shard order. It encodes a minibatch
/// once for `dotprod` and keeps it for the `adjust` that follows.
pub struct GrpcShards {
    shards: Arc<[GrpcShard]>,
    fingerprint: u64,
    negative: usize,
    /// The lineage of the model state this worker trains (see `recovery`).
    lineage: u64,
    /// Every call's deadline: a shard that stops answering fails the call.
    timeout: Duration,
    /// The newest checkpoint version a shard said other workers wait for.
    pending: Arc<std::sync::atomic::AtomicU64>,
    /// The last call's minibatches in wire form (and their identities),
    /// from their `dotprod` for their `adjust`, and how the adjust names
    /// the call to the shards that kept its plan.
    wire: Vec<v1::Minibatch>,
    wire_ids: Vec<(MinibatchId, u64)>,
    call: Option<v1::CallRef>,
    /// A divergence to report with the next adjust.
    diverged: Option<String>,
    sent: u64,
    received: u64,
}

impl GrpcShards {
    pub fn new(shards: Vec<GrpcShard>, fingerprint: u64, negative: u32) -> Self {
        Self {
            shards: shards.into(),
            fingerprint,
            negative: negative as usize,
            lineage: 0,
            timeout: DEFAULT_CALL_TIMEOUT,
            pending: Arc::default(),
            wire: Vec::new(),
            wire_ids: Vec::new(),
            call: None,
            diverged: None,
            sent: 0,
            received: 0,
        }
    }

    /// Trains the model state of `lineage`: a shard holding another refuses.
    pub fn with_lineage(mut self, lineage: u64) -> Self {
        self.lineage = lineage;
        self
    }

    /// Every call fails after `timeout` without an answer.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Where shards' "checkpoint pending" answers are recorded.
    pub fn checkpoint_pending(&self) -> Arc<std::sync::atomic::AtomicU64> {
        Arc::clone(&self.pending)
    }

    /// The wire form of `mbs`: the one the last `dotprod` encoded, when it
    /// was for the same minibatches.
    fn wire(&self, mbs: &[Minibatch]) -> Vec<v1::Minibatch> {
        let same = self.wire_ids.len() == mbs.len()
            && self
                .wire_ids
                .iter()
                .zip(mbs)
                .all(|(&(id, seed), mb)| id == mb.id && seed == mb.seed);
        if same {
            return self.wire.clone();
        }
        mbs.iter()
            .map(|mb| {
                let mut wire = mb.to_wire(self.fingerprint);
                wire.lineage = self.lineage;
                wire
            })
            .collect()
    }

    fn failed(&self, i: usize, call: &'static str, status: &tonic::Status) -> CallError {
        metrics::counter!(
            "colonnade_client_call_errors_total",
            "method" => call,
            "code" => code_name(status.code()),
        )
        .increment(1);
        CallError::from_status(&self.shards[i].endpoint, i, self.shards.len(), call, status)
    }
}

/// A status code's name as a metric label (tonic's spelling).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "Ok",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Deadline of a training call (a minibatch takes milliseconds).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl ModelShards for GrpcShards {
    const BLOCKING: bool = false;

    fn pipeline(&self) -> Self {
        Self {
            shards: Arc::clone(&self.shards),
            fingerprint: self.fingerprint,
            negative: self.negative,
            lineage: self.lineage,
            timeout: self.timeout,
            pending: Arc::clone(&self.pending),
            wire: Vec::new(),
            wire_ids: Vec::new(),
            call: None,
            diverged: None,
            sent: 0,
            received: 0,
        }
    }

    fn negative(&self) -> usize {
        self.negative
    }

    async fn dotprod(&mut self, mbs: &[Minibatch], dots: &mut Vec<f32>) -> Result<(), CallError> {
        let req = DotprodRequest {
            minibatches: self.wire(mbs),
        };
        self.sent += req.encoded_len() as u64 * self.shards.len() as u64;
        let start = Instant::now();
        let timeout = self.timeout;
        let responses = broadcast(&self.shards, |mut client| {
            let req = with_timeout(req.clone(), timeout);
            async move { client.dotprod(req).await }
        })
        .await;
        metrics::histogram!("colonnade_client_call_seconds", "method" => "dotprod")
            .record(start.elapsed().as_secs_f64());
        let expected: usize = mbs
            .iter()
            .map(|mb| mb.examples() * (self.negative + 1))
            .sum();
        dots.clear();
        dots.resize(expected, 0.0);
        for (i, resp) in responses.into_iter().enumerate() {
            let resp = resp.map_err(|e| self.failed(i, "dotprod", &e))?;
            self.received += resp.encoded_len() as u64;
            // Shard 0's dot products, then each other shard's added in place,
            // in shard order, straight from their bytes (a column slice's
            // half floats, a whole shard's f32).
            if let Err(msg) = sum_dots_into(&resp.half_dots, &resp.dots, dots, i == 0) {
                let status = tonic::Status::internal(format!("bad response: {msg}"));
                return Err(self.failed(i, "dotprod", &status));
            }
        }
        self.call = mbs.first().map(|mb| v1::CallRef {
            model_fingerprint: self.fingerprint,
            lineage: self.lineage,
            seed: mb.seed,
            minibatches: mbs.len() as u32,
            dots: expected as u64,
        });
        self.wire = req.minibatches;
        self.wire_ids.clear();
        self.wire_ids.extend(mbs.iter().map(|mb| (mb.id, mb.seed)));
        Ok(())
    }

    /// Sends the call's weights naming the call (its shards kept its plan
    /// from the `dotprod`); a shard that no longer holds the plan answers
    /// NOT_FOUND and is sent the adjust again with the call's minibatches.
    async fn adjust(&mut self, mbs: &[Minibatch], scaled: &[f32]) -> Result<(), CallError> {
        let scaled_weights = encode_f16(scaled);
        let same_call = self.call.filter(|_| {
            self.wire_ids.len() == mbs.len()
                && self
                    .wire_ids
                    .iter()
                    .zip(mbs)
                    .all(|(&(id, seed), mb)| id == mb.id && seed == mb.seed)
        });
        let diverged = self.diverged.take().unwrap_or_default();
        let named = AdjustRequest {
            minibatches: Vec::new(),
            scaled_weights: scaled_weights.clone(),
            call: same_call,
            diverged: diverged.clone(),
        };
        let full = |shards: &Self| AdjustRequest {
            minibatches: shards.wire(mbs),
            scaled_weights: scaled_weights.clone(),
            call: None,
            diverged: diverged.clone(),
        };
        let req = if same_call.is_some() {
            named
        } else {
            full(self)
        };
        let timeout = self.timeout;
        let start = Instant::now();
        let mut results = {
            self.sent += req.encoded_len() as u64 * self.shards.len() as u64;
            broadcast(&self.shards, |mut client| {
                let req = with_timeout(req.clone(), timeout);
                async move { client.adjust(req).await }
            })
            .await
        };
        let missed: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.as_ref().is_err_and(|e| e.code() == tonic::Code::NotFound))
            .map(|(i, _)| i)
            .collect();
        if !missed.is_empty() && same_call.is_some() {
            let again = full(self);
            for &i in &missed {
                self.sent += again.encoded_len() as u64;
                let mut client = self.shards[i].client.clone();
                results[i] = client
                    .adjust(with_timeout(again.clone(), timeout))
                    .await
                    .map(tonic::Response::into_inner);
            }
        }
        metrics::histogram!("colonnade_client_call_seconds", "method" => "adjust")
            .record(start.elapsed().as_secs_f64());
        for (i, res) in results.into_iter().enumerate() {
            let pending = res
                .map_err(|e| self.failed(i, "adjust", &e))?
                .checkpoint_pending;
            if pending != 0 {
                self.pending
                    .fetch_max(pending, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.call = None;
        Ok(())
    }

    fn note_divergence(&mut self, why: &str) {
        self.diverged = Some(why.to_owned());
    }

    fn wire_bytes(&self) -> (u64, u64) {
        (self.sent, self.received)
    }
}
