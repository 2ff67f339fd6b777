//! TLS on the shard API (rustls, through tonic): the PEM files of both sides,
//! read and checked once at start so that a wrong file is named before
//! anything connects, the client side's settings for `https://` shards, and
//! the server side's identity and (for mutual TLS) client CA.
//! [`ClientTlsArgs`] are the flags of every process that reaches shards.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// TLS towards shards, for clients and the exporter: shards named
/// `https://host:port` are reached over TLS, checked against `--tls-ca` (or
/// the system's trust store); `--tls-cert`/`--tls-key` present a client
/// certificate to shards that require one (mutual TLS).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientTlsArgs {
    /// CA certificate(s) (PEM) the shards' certificates must chain to, for
    /// shards named `https://host:port`. Without it, the system's trust
    /// store. Giving any --tls-* flag makes a shard named without
    /// `https://` an error rather than a plaintext connection.
    #[arg(long, env = "COLONNADE_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// This process's certificate (PEM), presented to shards that require
    /// mutual TLS (ps-shard --tls-ca); needs --tls-key.
    #[arg(long, env = "COLONNADE_TLS_CERT")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "COLONNADE_TLS_KEY")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl ClientTlsArgs {
    /// Whether any TLS flag was given.
    pub fn any(&self) -> bool {
        self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some()
    }
}

/// Reads a PEM file of certificates (at least one); errors name the flag and
/// the file.
pub fn read_certificates(flag: &str, path: &Path) -> Result<Certificate, String> {
    let pem = fs_read(flag, path)?;
    let n = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|_| ()))
        .collect::<Result<Vec<()>, _>>()
        .map_err(|e| format!("{flag} {}: not a PEM certificate file: {e}", path.display()))?
        .len();
    if n == 0 {
        return Err(format!(
            "{flag} {}: no certificate in it (expected PEM blocks \"BEGIN CERTIFICATE\")",
            path.display()
        ));
    }
    Ok(Certificate::from_pem(pem))
}

/// Reads a certificate chain and its private key (PEM); errors name the
/// flags and the files.
pub fn read_identity(
    cert_flag: &str,
    cert: &Path,
    key_flag: &str,
    key: &Path,
) -> Result<Identity, String> {
    let chain = read_certificates(cert_flag, cert)?;
    let key_pem = fs_read(key_flag, key)?;
    PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "{key_flag} {}: no private key in it ({e}; expected a PEM \"BEGIN PRIVATE KEY\", \
             \"BEGIN EC PRIVATE KEY\" or \"BEGIN RSA PRIVATE KEY\" block)",
            key.display()
        )
    })?;
    Ok(Identity::from_pem(chain.into_inner(), key_pem))
}

fn fs_read(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    fs_err::read(path).map_err(|e| format!("{flag}: {e}"))
}

/// How this process reaches shards: plaintext `host:port` / `http://`, and
/// TLS for `https://` with these settings.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// CA the shards' certificates chain to (else the system's roots).
    ca: Option<Certificate>,
    /// Client certificate for mutual TLS.
    identity: Option<Identity>,
    /// TLS was asked for (a --tls-* flag): plaintext endpoints are refused.
    required: bool,
}

impl ClientTls {
    /// Reads the files of `--tls-ca`, `--tls-cert` and `--tls-key`.
    pub fn from_args(args: &ClientTlsArgs) -> Result<Self, String> {
        let ca = args
            .tls_ca
            .as_deref()
            .map(|p| read_certificates("--tls-ca", p))
            .transpose()?;
        let identity = match (&args.tls_cert, &args.tls_key) {
            (Some(c), Some(k)) => Some(read_identity("--tls-cert", c, "--tls-key", k)?),
            (None, None) => None,
            (Some(_), None) => return Err("--tls-cert needs --tls-key (its private key)".into()),
            (None, Some(_)) => return Err("--tls-key needs --tls-cert".into()),
        };
        Ok(Self {
            ca,
            identity,
            required: args.any(),
        })
    }

    /// Whether a client certificate is presented (mutual TLS).
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// Whether plaintext shard endpoints are refused.
    pub fn required(&self) -> bool {
        self.required
    }

    /// The rustls settings of a channel to an `https://` shard.
    pub fn config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        config = match &self.ca {
            Some(ca) => config.ca_certificate(ca.clone()),
            None => config.with_native_roots(),
        };
        if let Some(id) = &self.identity {
            config = config.identity(id.clone());
        }
        config
    }
}

/// A shard's TLS settings: its certificate and key, and the CA whose client
/// certificates it requires (mutual TLS) when given.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<ServerTlsConfig, String> {
    let mut config = ServerTlsConfig::new()
        .identity(read_identity("--tls-cert", cert, "--tls-key", key)?)
        // A client that opens a connection and never finishes the handshake
        // gives its slot back.
        .timeout(std::time::Duration::from_secs(10));
    if let Some(ca) = client_ca {
        config = config.client_ca_root(read_certificates("--tls-ca", ca)?);
    }
    Ok(config)
}
