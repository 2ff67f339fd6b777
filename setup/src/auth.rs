//! Bearer tokens, on both sides of the wire: the flags and files a process
//! reads its token from ([`AuthArgs`]), the header a client sends
//! ([`Bearer`]), and the shard's check of the two roles ([`Tokens`]: the
//! cluster token trains, exports and reads status; the admin token also
//! administers models).

use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

/// The shared bearer token of a cluster: every training, export and admin
/// call to a shard carries it, and a shard given one refuses calls without
/// it (`UNAUTHENTICATED`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// File holding the cluster's bearer token (one line of visible ASCII;
    /// surrounding whitespace is ignored). Shards given a token refuse every
    /// call without it but the gRPC health checks; clients and the exporter
    /// send it. Without this flag the token is read from COLONNADE_AUTH_TOKEN
    /// when that is set.
    #[arg(long, env = "COLONNADE_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<std::path::PathBuf>,
}

impl AuthArgs {
    /// The token: from `--auth-token-file`, else from `COLONNADE_AUTH_TOKEN`,
    /// else none. Errors name the file or the variable.
    pub fn token(&self) -> Result<Option<String>, String> {
        match &self.auth_token_file {
            Some(path) => read_token(path).map(Some),
            None => std::env::var("COLONNADE_AUTH_TOKEN")
                .ok()
                .map(|t| parse_token(&t).map_err(|e| format!("COLONNADE_AUTH_TOKEN: {e}")))
                .transpose(),
        }
    }
}

/// Reads a token file (see [`AuthArgs`]); errors name the file.
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = fs_err::read_to_string(path).map_err(|e| e.to_string())?;
    parse_token(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A token is its text without surrounding whitespace: non-empty visible
/// ASCII (it travels as an HTTP header).
fn parse_token(text: &str) -> Result<String, String> {
    let token = text.trim();
    if token.is_empty() {
        return Err("the token is empty".into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token must be visible ASCII without spaces".into());
    }
    Ok(token.to_string())
}

/// Adds a bearer token to every call of a client (none: calls carry none).
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl Bearer {
    /// The `authorization: Bearer <token>` header of `token`.
    pub fn new(token: Option<&str>) -> Result<Self, String> {
        token
            .map(|t| {
                format!("Bearer {t}")
                    .parse::<AsciiMetadataValue>()
                    .map_err(|e| format!("the token cannot travel as a header: {e}"))
            })
            .transpose()
            .map(Self)
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// The bearer tokens a shard checks (none: every call is served). The
/// server checks the cluster scope of every `Shard` call in an interceptor
/// ([`Tokens::interceptor`]); the admin call checks its own scope.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    /// Needed by every training, export and status call.
    pub cluster: Option<String>,
    /// Needed by admin calls (DropModel) instead of the cluster token, when
    /// set; it also serves every other call.
    pub admin: Option<String>,
}

/// Which token a call needs.
#[derive(Clone, Copy)]
pub enum Scope {
    Cluster,
    Admin,
}

impl Tokens {
    /// Refuses a call without the token its scope needs (`UNAUTHENTICATED`),
    /// comparing in constant time: a cluster call takes the cluster token or
    /// the admin token, an admin call the admin token (the cluster token
    /// when there is no admin token).
    pub fn check(&self, metadata: &MetadataMap, scope: Scope) -> Result<(), Status> {
        use subtle::ConstantTimeEq;
        let accepted = match scope {
            Scope::Admin => [self.admin.as_ref().or(self.cluster.as_ref()), None],
            Scope::Cluster if self.cluster.is_none() => [None, None],
            Scope::Cluster => [self.cluster.as_ref(), self.admin.as_ref()],
        };
        if accepted.iter().all(Option::is_none) {
            return Ok(());
        }
        let got = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let Some(got) = got else {
            return Err(Status::unauthenticated(
                "this shard requires a bearer token and the call carried none (give it with \
                 --auth-token-file or COLONNADE_AUTH_TOKEN)",
            ));
        };
        let ok = accepted
            .iter()
            .flatten()
            .fold(subtle::Choice::from(0), |ok, want| {
                ok | got.as_bytes().ct_eq(want.as_bytes())
            });
        if bool::from(ok) {
            return Ok(());
        }
        Err(Status::unauthenticated(match scope {
            Scope::Cluster => {
                "wrong bearer token (give the cluster's token with --auth-token-file or \
                 COLONNADE_AUTH_TOKEN)"
            }
            Scope::Admin => {
                "wrong bearer token for an admin call (DropModel needs this shard's \
                 --admin-token-file token)"
            }
        }))
    }

    /// The cluster-scope check as a tonic interceptor, run on every call of
    /// the service it wraps (the health service is served without it).
    pub fn interceptor(
        self,
    ) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static
    {
        move |request: Request<()>| {
            self.check(request.metadata(), Scope::Cluster)?;
            Ok(request)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(token: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(t) = token {
            m.insert(
                "authorization",
                format!("Bearer {t}").parse().expect("ascii"),
            );
        }
        m
    }

    #[test]
    fn the_two_roles() {
        let tokens = Tokens {
            cluster: Some("worker".into()),
            admin: Some("admin".into()),
        };
        let ok = |t, s| tokens.check(&with(t), s).is_ok();
        assert!(ok(Some("worker"), Scope::Cluster));
        assert!(
            ok(Some("admin"), Scope::Cluster),
            "the admin token serves every call"
        );
        assert!(
            !ok(Some("worker"), Scope::Admin),
            "the worker token is no admin"
        );
        assert!(ok(Some("admin"), Scope::Admin));
        assert!(!ok(None, Scope::Cluster));
        assert!(!ok(Some("wrong"), Scope::Cluster));
        assert!(Tokens::default().check(&with(None), Scope::Admin).is_ok());
    }

    #[test]
    fn token_files_are_trimmed_and_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        fs_err::write(&path, "  s3cret\n").expect("write");
        assert_eq!(read_token(&path).as_deref(), Ok("s3cret"));
        fs_err::write(&path, "two words").expect("write");
        let e = read_token(&path).expect_err("spaces");
        assert!(e.contains("token"), "{e}");
        assert!(Bearer::new(Some("ok")).is_ok());
    }
}
