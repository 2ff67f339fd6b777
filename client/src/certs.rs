//! `colonnade certs`: a cluster's secrets in one directory: a private CA,
//! one server certificate for the shards (every name they are dialled by),
//! a client certificate for workers and exporters (mutual TLS), the cluster
//! bearer token and an admin token, and, on request, the Kubernetes Secrets
//! holding them. Keys and tokens are written readable by their owner only.

use anyhow::{bail, Context};
use rand::Rng;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct CertsArgs {
    /// Directory to write into (created; existing files are refused unless
    /// --force).
    #[arg(long, env = "COLONNADE_OUT")]
    pub out: PathBuf,
    /// Names clients dial the shards by, comma-separated: host names,
    /// wildcards (`*.colonnade-shard.colonnade.svc.cluster.local`) or IP
    /// addresses. `localhost`, 127.0.0.1 and ::1 are always added.
    #[arg(
        long,
        env = "COLONNADE_HOSTS",
        value_delimiter = ',',
        default_value = "localhost"
    )]
    pub hosts: Vec<String>,
    /// Days the certificates stay valid.
    #[arg(long, env = "COLONNADE_DAYS", default_value_t = 365)]
    pub days: u32,
    /// Also write `secrets.yaml`: the Kubernetes Secrets `colonnade-tls`
    /// and `colonnade-auth` in this namespace.
    #[arg(long, env = "COLONNADE_K8S_NAMESPACE")]
    pub k8s_namespace: Option<String>,
    /// Overwrite files that exist.
    #[arg(long, env = "COLONNADE_FORCE")]
    pub force: bool,
}

/// The files written, by name.
pub const FILES: [&str; 9] = [
    "ca.crt",
    "ca.key",
    "shard.crt",
    "shard.key",
    "client.crt",
    "client.key",
    "token",
    "admin-token",
    "secrets.yaml",
];

pub fn run(args: &CertsArgs) -> anyhow::Result<()> {
    if args.days == 0 {
        bail!("--days must be at least 1");
    }
    fs_err::create_dir_all(&args.out)?;
    if !args.force {
        let existing: Vec<&str> = FILES
            .iter()
            .copied()
            .filter(|f| args.out.join(f).exists())
            .collect();
        if !existing.is_empty() {
            bail!(
                "{} already holds {}: refusing to overwrite a cluster's secrets (write a new \
                 directory to rotate them, or give --force)",
                args.out.display(),
                existing.join(", ")
            );
        }
    }
    let mut hosts: Vec<String> = Vec::new();
    for h in args
        .hosts
        .iter()
        .map(|h| h.trim())
        .chain(["localhost", "127.0.0.1", "::1"])
    {
        if !h.is_empty() && !hosts.iter().any(|x| x.eq_ignore_ascii_case(h)) {
            hosts.push(h.to_string());
        }
    }
    let secrets = make(&hosts, args.days)?;
    let dir = &args.out;
    write(dir, "ca.crt", &secrets.ca_cert, false)?;
    write(dir, "ca.key", &secrets.ca_key, true)?;
    write(dir, "shard.crt", &secrets.shard_cert, false)?;
    write(dir, "shard.key", &secrets.shard_key, true)?;
    write(dir, "client.crt", &secrets.client_cert, false)?;
    write(dir, "client.key", &secrets.client_key, true)?;
    write(dir, "token", &format!("{}\n", secrets.token), true)?;
    write(
        dir,
        "admin-token",
        &format!("{}\n", secrets.admin_token),
        true,
    )?;
    if let Some(ns) = &args.k8s_namespace {
        write(dir, "secrets.yaml", &k8s_secrets(ns, &secrets), true)?;
    }
    println!(
        "wrote a CA, the shards' certificate (for {}), a client certificate and the tokens to {} \
         (valid {} days)",
        hosts.join(", "),
        dir.display(),
        args.days
    );
    Ok(())
}

/// A cluster's secrets, as PEM text and tokens.
pub struct Secrets {
    pub ca_cert: String,
    pub ca_key: String,
    pub shard_cert: String,
    pub shard_key: String,
    pub client_cert: String,
    pub client_key: String,
    pub token: String,
    pub admin_token: String,
}

/// Makes a CA and, signed by it, a server certificate for `hosts` and a
/// client certificate, valid from an hour ago for `days` days; and two
/// tokens of 256 random bits each.
pub fn make(hosts: &[String], days: u32) -> anyhow::Result<Secrets> {
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::hours(1);
    let not_after = now + time::Duration::days(i64::from(days));

    let mut ca = CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
    ca.distinguished_name
        .push(DnType::CommonName, "colonnade cluster CA");
    ca.distinguished_name
        .push(DnType::OrganizationName, "colonnade");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let ca_cert = ca.self_signed(&ca_key).context("signing the CA")?;
    let issuer = Issuer::new(ca, ca_key);

    let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
        let mut p = CertificateParams::new(names)
            .with_context(|| format!("certificate names for {cn} (--hosts)"))?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.distinguished_name
            .push(DnType::OrganizationName, "colonnade");
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![usage];
        p.use_authority_key_identifier_extension = true;
        p.not_before = not_before;
        p.not_after = not_after;
        let key = KeyPair::generate().context("generating a key")?;
        let cert = p
            .signed_by(&key, &issuer)
            .with_context(|| format!("signing the {cn} certificate"))?;
        anyhow::Ok((cert.pem(), key.serialize_pem()))
    };
    let (shard_cert, shard_key) = leaf(
        hosts.to_vec(),
        "colonnade shard",
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (client_cert, client_key) = leaf(
        Vec::new(),
        "colonnade client",
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    Ok(Secrets {
        ca_cert: ca_cert.pem(),
        ca_key: issuer.key().serialize_pem(),
        shard_cert,
        shard_key,
        client_cert,
        client_key,
        token: random_token(),
        admin_token: random_token(),
    })
}

/// 256 random bits from the operating system's generator, as hex.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `name` in `dir`, readable only by its owner when `private`.
fn write(dir: &Path, name: &str, text: &str, private: bool) -> anyhow::Result<()> {
    let path = dir.join(name);
    let mut options = fs_err::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use fs_err::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = options.open(&path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    #[cfg(unix)]
    {
        // `mode` applies only to a file it creates.
        use std::os::unix::fs::PermissionsExt;
        let mode = if private { 0o600 } else { 0o644 };
        fs_err::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The Kubernetes Secrets of a cluster: `colonnade-tls` (the CA, the
/// shards' and the clients' certificates and keys) and `colonnade-auth`
/// (the tokens, as the environment the pods read), as `stringData`.
fn k8s_secrets(namespace: &str, s: &Secrets) -> String {
    // A YAML literal block: the text's lines, indented under the key.
    let block = |text: &str| {
        let lines: Vec<String> = text.lines().map(|l| format!("    {l}")).collect();
        format!("|\n{}", lines.join("\n"))
    };
    format!(
        "# Made by `colonnade certs`: kubectl apply -f secrets.yaml\n\
         apiVersion: v1\n\
         kind: Secret\n\
         metadata:\n  name: colonnade-tls\n  namespace: {namespace}\n\
         type: Opaque\n\
         stringData:\n  ca.crt: {}\n  shard.crt: {}\n  shard.key: {}\n  client.crt: {}\n  \
         client.key: {}\n\
         ---\n\
         apiVersion: v1\n\
         kind: Secret\n\
         metadata:\n  name: colonnade-auth\n  namespace: {namespace}\n\
         type: Opaque\n\
         stringData:\n  COLONNADE_AUTH_TOKEN: \"{}\"\n  admin-token: \"{}\"\n",
        block(&s.ca_cert),
        block(&s.shard_cert),
        block(&s.shard_key),
        block(&s.client_cert),
        block(&s.client_key),
        s.token,
        s.admin_token,
    )
}
