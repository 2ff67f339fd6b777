//! Channels to shards: a [`Connector`] holds what this process dials with
//! (its TLS settings for `https://` shards and its bearer token), made once
//! from the flags ([`Connector::from_args`]) and handed to whatever connects;
//! [`Connector::connect`] makes a channel with the message-size limits, the
//! HTTP/2 windows and keepalives both sides use, and checks it with one
//! health call so that a TLS mismatch is named at connect time.

use crate::auth::{AuthArgs, Bearer};
use crate::tls::{ClientTls, ClientTlsArgs};
use colonnade_proto::{v1, MAX_MESSAGE_BYTES};

/// A client of a shard: its calls carry the [`Connector`]'s bearer token.
pub type ShardClient = v1::shard_client::ShardClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;

/// How this process reaches shards: TLS settings and the bearer token.
/// The default is plaintext without a token (shards on loopback, tests).
#[derive(Clone, Debug, Default)]
pub struct Connector {
    tls: ClientTls,
    bearer: Bearer,
}

impl Connector {
    /// Reads `--auth-token-file` (or `COLONNADE_AUTH_TOKEN`) and the files of
    /// `--tls-ca`/`--tls-cert`/`--tls-key`; errors name the file or flag.
    pub fn from_args(auth: &AuthArgs, tls: &ClientTlsArgs) -> Result<Self, String> {
        Ok(Self {
            tls: ClientTls::from_args(tls)?,
            bearer: Bearer::new(auth.token()?.as_deref())?,
        })
    }

    /// This connector sending `token` (none: no token).
    pub fn with_token(mut self, token: Option<&str>) -> Result<Self, String> {
        self.bearer = Bearer::new(token)?;
        Ok(self)
    }

    /// The channel settings of a shard at `endpoint` (`host:port` or a URL):
    /// `https://` is TLS with this connector's settings, anything else
    /// plaintext, which is refused when TLS was asked for. `timeout` bounds
    /// the connection and TLS handshake. Errors name the endpoint.
    pub fn endpoint(
        &self,
        endpoint: &str,
        timeout: std::time::Duration,
    ) -> Result<tonic::transport::Endpoint, ConnectError> {
        let https = is_https(endpoint);
        if !https && self.tls.required() {
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
                .tls_config(self.tls.config())
                .map_err(|e| ConnectError::new(endpoint, e))?;
        }
        Ok(channel)
    }

    /// Connects to a shard at `endpoint` (`host:port` or a URL, see
    /// [`Connector::endpoint`]), with the message size limits both sides use
    /// and this connector's bearer token. Errors name the endpoint.
    pub async fn connect(&self, endpoint: &str) -> Result<ShardClient, ConnectError> {
        let channel = self
            .endpoint(endpoint, std::time::Duration::from_secs(5))?
            .tcp_nodelay(true)
            // Responses of several minibatches outgrow HTTP/2's 64 KiB default
            // window; fixed large windows save the WINDOW_UPDATE round trips.
            .initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
            .max_frame_size(HTTP2_MAX_FRAME)
            // A shard that stops answering (SIGSTOP, a partition) is noticed
            // within ~KEEPALIVE × 2 even while no call is in flight.
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true)
            .connect()
            .await
            .map_err(|e| ConnectError::new(endpoint, e))?;
        self.verify(endpoint, channel.clone()).await?;
        Ok(
            v1::shard_client::ShardClient::with_interceptor(channel, self.bearer.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    /// Checks that a new channel reaches a gRPC server, with a health check
    /// of the whole server (which needs no token): a plaintext connection to
    /// a shard that serves TLS connects, and fails only at its first call,
    /// and that is better said here, naming the endpoint.
    async fn verify(
        &self,
        endpoint: &str,
        channel: tonic::transport::Channel,
    ) -> Result<(), ConnectError> {
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
        request.set_timeout(VERIFY_TIMEOUT);
        // The request's timeout is the server's to keep: a stopped shard
        // keeps none, so this side bounds the wait too.
        let answer = tokio::time::timeout(VERIFY_TIMEOUT, health.check(request)).await;
        let Ok(answer) = answer else {
            return Err(ConnectError {
                endpoint: endpoint.to_string(),
                reason: no_answer(VERIFY_TIMEOUT),
                permanent: false,
            });
        };
        match answer {
            Ok(_) => Ok(()),
            // A gRPC server without the health service still answers.
            Err(status) if status.code() == tonic::Code::Unimplemented => Ok(()),
            Err(status) => Err(self.first_call_failed(endpoint, &status)),
        }
    }

    /// The first call on a new channel to `endpoint` failed with `status`:
    /// when the connection itself failed (no gRPC answer, only an HTTP/2 or
    /// transport error such as h2's FRAME_SIZE_ERROR, which is a TLS alert
    /// read as a frame), says what that most likely means (TLS on one side
    /// only, a client certificate missing or refused), and the error is
    /// permanent.
    pub fn first_call_failed(&self, endpoint: &str, status: &tonic::Status) -> ConnectError {
        let mut e = ConnectError::new(endpoint, status_text(status));
        if is_timeout(status, &e.reason) {
            // The shard took the connection and then said nothing: stopped
            // or hung, not a TLS mismatch (which fails at once).
            e.reason = format!("{}: {}", no_answer(KEEPALIVE * 2), e.reason);
            e.permanent = false;
            return e;
        }
        if std::error::Error::source(status).is_some() && !e.permanent {
            let hint = if !is_https(endpoint) {
                PLAINTEXT_TO_TLS
            } else if !self.tls.has_identity() {
                "the shard closed the TLS connection: it may require a client certificate \
                 (mutual TLS); then give --tls-cert and --tls-key"
            } else {
                "the shard closed the TLS connection: it may not accept this client's \
                 certificate (signed by a CA other than the shard's --tls-ca?)"
            };
            e.reason = format!("{} ({hint})", e.reason);
            e.permanent = true;
        }
        e
    }
}

/// How long a new channel's first call (a health check) may wait.
const VERIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The reason given for a shard that accepted a connection and did not
/// answer on it within `waited`.
fn no_answer(waited: std::time::Duration) -> String {
    format!(
        "the shard accepted the connection but did not answer within {waited:?}: it is \
         stopped (SIGSTOP), hung or overloaded"
    )
}

/// Whether a failed first call timed out (a deadline, or the HTTP/2
/// keep-alive ping unanswered), rather than failing on what came back.
fn is_timeout(status: &tonic::Status, text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    matches!(status.code(), tonic::Code::DeadlineExceeded)
        || t.contains("timed out")
        || t.contains("timeout expired")
        || t.contains("keep-alive")
}

/// What a plaintext connection that the shard closed, or answered with
/// something that is not HTTP/2, most likely means.
const PLAINTEXT_TO_TLS: &str = "the shard did not speak plaintext HTTP/2 on this connection: it \
     probably serves TLS; then name it https://host:port and give the CA certificate that \
     signed its certificate with --tls-ca";

fn is_https(endpoint: &str) -> bool {
    endpoint
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
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
/// The largest HTTP/2 frame either side accepts: a call's dot products
/// (hundreds of KB) then travel in a few frames instead of one per 16 KiB,
/// the default.
pub const HTTP2_MAX_FRAME: u32 = 1 << 20;
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
    // A TLS alert read as an HTTP/2 frame header claims a frame of over a
    // megabyte: how a plaintext client of a TLS server fails.
    if t.contains("frame with invalid size") || t.contains("frame_size_error") {
        return Some(PLAINTEXT_TO_TLS);
    }
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
