//! The boundary between Colonnade clients, shards and the exporter: the
//! generated `colonnade.v1` gRPC types, the little-endian array codecs used by
//! their `bytes` fields, the domain types both sides share with their wire
//! conversions ([`domain`]: spec, minibatch, matrix, errors) and the one trait
//! a training pipeline reaches a model's shards through ([`shards`]).
//!
//! Numeric arrays are packed as little-endian `u32`/`u64`/`f32` in `bytes` fields.
//! Decoding checks that a field's length is a multiple of the element size and
//! names the field when it is not. This crate must never hold training logic
//! (no dot products, weights or updates) and never depend on a shard's internals.

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
pub mod tls;

pub use domain::{
    Matrix, Minibatch, MinibatchId, RowLayout, Segment, ShardError, ShardSpec, Windows, MAX_ALPHA,
    MAX_CALL_DOTS, MAX_DIM, MAX_NEGATIVE, ROW_LOCK_APART_BYTES, ROW_LOCK_BYTES,
};
pub use shards::{CallError, ModelShards};

/// Version of the shard API carried in `StatusResponse.api_version`. 2:
/// dot products and weights travel as one pair-major array. 3: lineages,
/// checkpoints and restore. 4: several minibatches per call, minibatches as
/// sentence windows, weights as half floats scaled by 1/α. 5: from a
/// million words on, negatives drawn from a table over runs of equal counts
/// (`colonnade_common::sampler`); a client refuses shards of another version.
pub const API_VERSION: u32 = 5;

/// Largest gRPC message either side accepts or sends (default tonic limit is
/// 4 MiB). The largest real ones are a call's dot products (at most
/// [`MAX_CALL_DOTS`] × 4 bytes), a chunk of counts (8 MiB) and an export
/// block (≲ 4 MiB); anything larger is refused before it is buffered whole.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// A client of a shard: its calls carry the process's bearer token, if any
/// ([`set_auth_token`]).
pub type ShardClient = v1::shard_client::ShardClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;

/// The bearer token this process sends to shards (set once, at start).
static AUTH_TOKEN: std::sync::OnceLock<Option<tonic::metadata::AsciiMetadataValue>> =
    std::sync::OnceLock::new();

/// Sets the token every later [`connect`] sends as `authorization: Bearer
/// <token>` (call once, before connecting; later calls are ignored).
pub fn set_auth_token(token: Option<&str>) -> Result<(), String> {
    let value = token
        .map(|t| {
            format!("Bearer {t}")
                .parse::<tonic::metadata::AsciiMetadataValue>()
                .map_err(|e| format!("the token cannot travel as a header: {e}"))
        })
        .transpose()?;
    let _ = AUTH_TOKEN.set(value);
    Ok(())
}

/// Sets the token of `auth` (`--auth-token-file`, else
/// `COLONNADE_AUTH_TOKEN`) as this process's, as the binaries do at start.
pub fn use_auth(auth: &colonnade_common::config::AuthArgs) -> Result<(), String> {
    set_auth_token(auth.token()?.as_deref())
}

/// Adds the process's bearer token to every call.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// This process's TLS settings for shards (set once, at start).
static TLS: std::sync::OnceLock<tls::ClientTls> = std::sync::OnceLock::new();

/// Sets how every later [`connect`] reaches `https://` shards (call once,
/// before connecting; later calls are ignored).
pub fn set_tls(settings: tls::ClientTls) {
    let _ = TLS.set(settings);
}

/// Reads the files of `--tls-ca`/`--tls-cert`/`--tls-key` and sets them as
/// this process's, as the binaries do at start; errors name the file.
pub fn use_tls(args: &colonnade_common::config::ClientTlsArgs) -> Result<(), String> {
    set_tls(tls::ClientTls::from_args(args)?);
    Ok(())
}

/// The channel settings of a shard at `endpoint` (`host:port` or a URL):
/// `https://` is TLS with this process's settings ([`set_tls`]), anything
/// else plaintext, which is refused when TLS was asked for. `timeout` bounds
/// the connection and TLS handshake. Errors name the endpoint.
pub fn shard_endpoint(
    endpoint: &str,
    timeout: std::time::Duration,
) -> Result<tonic::transport::Endpoint, ConnectError> {
    let settings = TLS.get().cloned().unwrap_or_default();
    let https = endpoint
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if !https && settings.required() {
        return Err(ConnectError::new(
            endpoint,
            "it is named without https:// but TLS was asked for (--tls-ca, --tls-cert or \
             COLONNADE_TLS_*): name TLS shards https://host:port",
        ));
    }
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let mut channel = tonic::transport::Endpoint::from_shared(url)
        .map_err(|e| ConnectError::new(endpoint, e))?
        .connect_timeout(timeout);
    if https {
        channel = channel
            .tls_config(settings.config())
            .map_err(|e| ConnectError::new(endpoint, e))?;
    }
    Ok(channel)
}

/// Connects to a shard at `endpoint` (`host:port` or a URL, see
/// [`shard_endpoint`]), with the message size limits both sides use and the
/// process's bearer token. Errors name the endpoint.
pub async fn connect(endpoint: &str) -> Result<ShardClient, ConnectError> {
    let channel = shard_endpoint(endpoint, std::time::Duration::from_secs(5))?
        .tcp_nodelay(true)
        // Responses of several minibatches outgrow HTTP/2's 64 KiB default
        // window; fixed large windows save the WINDOW_UPDATE round trips
        // (docs/benchmarks.md, netsim).
        .initial_stream_window_size(HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
        // A shard that stops answering (SIGSTOP, a partition) is noticed
        // within ~KEEPALIVE × 2 even while no call is in flight.
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .keep_alive_while_idle(true)
        .connect()
        .await
        .map_err(|e| ConnectError::new(endpoint, e))?;
    verify(endpoint, channel.clone()).await?;
    let bearer = Bearer(AUTH_TOKEN.get().cloned().flatten());
    Ok(
        v1::shard_client::ShardClient::with_interceptor(channel, bearer)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
    )
}

/// Checks that a new channel reaches a gRPC server, with a health check of
/// the whole server (which needs no token): a plaintext connection to a
/// shard that serves TLS connects, and fails only at its first call, and
/// that is better said here, naming the endpoint.
async fn verify(endpoint: &str, channel: tonic::transport::Channel) -> Result<(), ConnectError> {
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
    request.set_timeout(std::time::Duration::from_secs(10));
    let status = match health.check(request).await {
        Ok(_) => return Ok(()),
        // A gRPC server without the health service still answers.
        Err(status) if status.code() == tonic::Code::Unimplemented => return Ok(()),
        Err(status) => status,
    };
    let mut e = ConnectError::new(endpoint, status_text(&status));
    // The connection itself failed right after it was made.
    if std::error::Error::source(&status).is_some() && !e.permanent {
        let https = endpoint
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
        let client_cert = TLS.get().is_some_and(tls::ClientTls::has_identity);
        let hint = if !https {
            "the shard closed the plaintext connection: it may serve TLS only; then name it \
             https://host:port"
        } else if !client_cert {
            "the shard closed the TLS connection: it may require a client certificate (mutual \
             TLS); then give --tls-cert and --tls-key"
        } else {
            "the shard closed the TLS connection: it may not accept this client's certificate \
             (signed by a CA other than the shard's --tls-ca?)"
        };
        e.reason = format!("{} ({hint})", e.reason);
        e.permanent = true;
    }
    Err(e)
}

/// A status's message and its causes, on one line.
fn status_text(status: &tonic::Status) -> String {
    use std::error::Error;
    match status.source() {
        Some(source) => explain(source),
        None => status.message().to_string(),
    }
}

/// HTTP/2 flow-control windows of every channel to a shard and of the shard's
/// server, per stream (call) and per connection: room for the largest
/// training call in flight without waiting for a window update.
pub const HTTP2_STREAM_WINDOW: u32 = 8 << 20;
pub const HTTP2_CONNECTION_WINDOW: u32 = 32 << 20;

/// HTTP/2 keepalive ping interval and timeout of every channel to a shard.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(10);

/// A shard that could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to shard {endpoint}: {reason}")]
pub struct ConnectError {
    pub endpoint: String,
    /// What failed, innermost cause first, and a hint when the failure has
    /// a known cause (TLS on one side only, an untrusted certificate).
    pub reason: String,
    /// Trying again will not help (a TLS or naming mismatch), unlike a
    /// shard that is not up yet.
    pub permanent: bool,
}

impl ConnectError {
    fn new(endpoint: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        let e = e.into();
        let reason = explain(&*e);
        Self {
            endpoint: endpoint.to_string(),
            permanent: tls_hint(&reason).is_some() || reason.contains("https://"),
            reason,
        }
    }
}

/// An error's chain as one line (outermost first), with a hint when it is a
/// TLS failure whose cause is known.
pub fn explain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e;
    while let Some(next) = cur.source() {
        let s = next.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = next;
    }
    let text = parts.join(": ");
    match tls_hint(&text) {
        Some(hint) if !text.contains(hint) => format!("{text} ({hint})"),
        _ => text,
    }
}

/// What a TLS failure's message means for whoever runs the client.
fn tls_hint(text: &str) -> Option<&'static str> {
    let t = text.to_ascii_lowercase();
    if t.contains("invalidcontenttype") || t.contains("corrupt message") {
        Some("the shard answered in plaintext: it serves no TLS, so name it without https://")
    } else if t.contains("notvalidforname") || t.contains("not valid for name") {
        Some(
            "the shard's certificate does not name the host this client dialled: name the \
             shard by a host its certificate lists (colonnade certs --hosts)",
        )
    } else if t.contains("unknownissuer") || t.contains("invalid peer certificate") {
        Some(
            "the shard's certificate is not signed by a CA this client trusts: give the \
             cluster's CA with --tls-ca",
        )
    } else if t.contains("certificaterequired") || t.contains("certificate required") {
        Some(
            "the shard requires a client certificate (mutual TLS): give --tls-cert and \
             --tls-key",
        )
    } else {
        None
    }
}

/// A `bytes` field whose length is not a whole number of elements.
#[derive(Debug, thiserror::Error)]
#[error("field `{field}`: {len} bytes is not a multiple of {elem} (little-endian {kind} array)")]
pub struct WireLengthError {
    pub field: &'static str,
    pub len: usize,
    pub elem: usize,
    pub kind: &'static str,
}

macro_rules! le_codec {
    ($encode:ident, $decode:ident, $decode_into:ident, $ty:ty, $n:expr, $kind:expr) => {
        /// Packs values as little-endian bytes.
        pub fn $encode(values: &[$ty]) -> bytes::Bytes {
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

/// A weight divided by its minibatch's α, as it travels (see
/// `AdjustRequest.scaled_weights`): the nearest IEEE half float, widened.
/// Clients compute their weights as α × this value for every path (in
/// process too), so that a model trains bit for bit the same whether its
/// shards are in this process or behind the wire.
///
/// Rounded in place rather than through `half`'s conversions, which are
/// two calls a weight (to functions compiled for F16C, chosen at run time):
/// 3 % of the CPU of an embedded graph run. (`half`'s software path,
/// `from_f32_const`/`to_f32_const`, inlines but branches per bit field:
/// 5.0 ns a value against 4.1 ns dispatched and 0.8 ns here, over a
/// million weights.) Equal to
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
/// products, and one whole shard in process weighing its own
/// ([`ModelShards::fused_step`]).
#[inline]
pub fn scaled_weight(f: f32, positive: bool) -> f32 {
    use colonnade_common::sgns::{negative_weight, positive_weight};
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

/// Packs scaled weights (each already [`wire_scaled_weight`]-exact) as
/// little-endian half floats.
pub fn encode_f16(values: &[f32]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(values.len() * 2);
    for &v in values {
        out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
    }
    out.into()
}

/// Unpacks little-endian half floats into `out` (cleared first) as
/// `alpha × value`, naming `field` if the length is odd.
pub fn decode_f16_scaled_into(
    field: &'static str,
    raw: &[u8],
    alpha: f32,
    out: &mut Vec<f32>,
) -> Result<(), WireLengthError> {
    if !raw.len().is_multiple_of(2) {
        return Err(WireLengthError {
            field,
            len: raw.len(),
            elem: 2,
            kind: "f16",
        });
    }
    out.clear();
    out.extend(
        raw.chunks_exact(2)
            .map(|c| alpha * half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
    );
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

    /// `wire_scaled_weight` rounds as `half` does, for every f32: both
    /// halves of the bit patterns on two threads (~10 s in release).
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
    fn half_weights_roundtrip_exactly_once_rounded() {
        let scaled: Vec<f32> = [0.999, -0.5, -1e-6, 0.0, 0.3333, -0.99997]
            .iter()
            .map(|&x| wire_scaled_weight(x))
            .collect();
        let mut back = Vec::new();
        decode_f16_scaled_into("w", &encode_f16(&scaled), 0.025, &mut back).expect("decodes");
        let want: Vec<f32> = scaled.iter().map(|&x| 0.025 * x).collect();
        assert_eq!(back, want, "α × the rounded value, bit for bit");
        assert!((scaled[4] - 0.3333).abs() < 2e-4, "11 significant bits");
        assert!(decode_f16_scaled_into("w", &[1, 2, 3], 1.0, &mut back)
            .is_err_and(|e| e.to_string().contains("`w`")));
    }
}
