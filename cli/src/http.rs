//! The door of `codemode mcp --http`: every request is checked before it reaches MCP.
//!
//! In order: a `Host` that does not name this server gets 403 (the DNS-rebinding guard the MCP
//! transport specification asks for), a present `Origin` that is neither the server's own (the
//! `Host` just checked) nor allowed by `--allow-origin` gets 403 (a web page of another site in
//! the user's browser cannot drive the server), and a missing or wrong
//! `Authorization: Bearer <token>` gets 401. A request that passes carries its tenant (a
//! [`Tenant`] in its extensions) to the MCP handler. Tokens are compared in constant time and never
//! logged.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

/// The tenant a request was authenticated as: stored values are scoped to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

/// The tenant of a server that runs without authentication (`--no-auth`, loopback only).
pub const ANONYMOUS_TENANT: &str = "anonymous";

/// The tenant of the token in `CODEMODE_AUTH_TOKEN`.
pub const DEFAULT_TENANT: &str = "default";

/// The shortest token accepted: a guessable token is no protection.
const MIN_TOKEN_LENGTH: usize = 16;

/// Each tenant's name and token.
type TenantTokens = Vec<(String, Vec<u8>)>;

/// Why a request is turned away: its status and what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn forbidden(message: String) -> Self {
        Refusal {
            status: StatusCode::FORBIDDEN,
            message,
        }
    }

    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"codemode\""),
            );
        }
        response
    }
}

/// Who may come in, and through which names and origins.
#[derive(Clone)]
pub struct Gate {
    /// `(tenant, token)` pairs; `None` when authentication is off (`--no-auth`).
    tokens: Option<Arc<TenantTokens>>,
    /// `host` or `host:port` values a `Host` header may carry.
    allowed_hosts: Arc<HashSet<String>>,
    /// Origins (`scheme://host[:port]`) a request may come from; a request without `Origin`
    /// (not from a browser) is not checked.
    allowed_origins: Arc<HashSet<String>>,
    /// The token the servers of a cluster forward requests with (`--cluster-token-file`): it
    /// admits a request as the tenant named in `X-Codemode-Tenant`, and nothing else does.
    cluster_token: Option<Arc<Vec<u8>>>,
}

/// The header a server of the cluster names the tenant it forwards for.
pub const TENANT_HEADER: &str = "x-codemode-tenant";

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tokens are never printed.
        f.debug_struct("Gate")
            .field("tenants", &self.tokens.as_ref().map(|tokens| tokens.len()))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

/// How the server authenticates, from the flags and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// `(tenant, token)` pairs.
    Tokens(Vec<(String, String)>),
    /// `--no-auth`.
    Off,
}

/// Reads `--auth-token-file` (lines of `TENANT TOKEN`; blank lines and `#` comments skipped) or
/// `CODEMODE_AUTH_TOKEN` (one token, tenant `default`), or `--no-auth`.
pub fn authentication(
    token_file: Option<&Path>,
    environment_token: Option<String>,
    no_auth: bool,
) -> Result<Option<Authentication>, String> {
    if no_auth {
        if token_file.is_some() || environment_token.is_some() {
            return Err("--no-auth was given together with a token; give one or the other".into());
        }
        return Ok(Some(Authentication::Off));
    }
    let mut tokens = Vec::new();
    if let Some(path) = token_file {
        check_private(path)?;
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the token file {}: {error}", path.display()))?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(tenant), Some(token), None) = (words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "{} line {}: expected `TENANT TOKEN`",
                    path.display(),
                    index + 1
                ));
            };
            check_name("tenant", tenant)
                .map_err(|error| format!("{} line {}: {error}", path.display(), index + 1))?;
            check_token(token)
                .map_err(|error| format!("{} line {}: {error}", path.display(), index + 1))?;
            if let Some((other, _)) = tokens.iter().find(|(_, known)| known == token) {
                return Err(format!(
                    "{} line {}: the tenant {tenant} has the same token as {other}; each tenant \
                     needs its own token, or either could read the other's values",
                    path.display(),
                    index + 1
                ));
            }
            tokens.push((tenant.to_owned(), token.to_owned()));
        }
        if tokens.is_empty() {
            return Err(format!("the token file {} has no tokens", path.display()));
        }
    } else if let Some(token) = environment_token {
        check_token(&token).map_err(|error| format!("CODEMODE_AUTH_TOKEN: {error}"))?;
        tokens.push((DEFAULT_TENANT.to_owned(), token));
    }
    Ok((!tokens.is_empty()).then_some(Authentication::Tokens(tokens)))
}

/// Refuses a token file that users other than its owner may read or write: anyone who can
/// read it can act as every tenant in it.
fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(path)
        .map_err(|error| format!("cannot read the token file {}: {error}", path.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "the token file {} may be read or written by other users (mode {mode:03o}), who \
             could then act as its tenants; make it private with: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// The secret in `path` (its first line, trimmed), from a file only its owner may read or write.
pub fn read_secret(path: &Path) -> Result<String, String> {
    check_private(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let secret = text.lines().next().unwrap_or_default().trim().to_owned();
    if secret.is_empty() {
        return Err(format!("{} holds no secret", path.display()));
    }
    Ok(secret)
}

fn check_token(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_LENGTH {
        return Err(format!(
            "a token must be at least {MIN_TOKEN_LENGTH} characters (make one with: openssl rand \
             -hex 32)"
        ));
    }
    Ok(())
}

/// A tenant or session name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot, so that
/// it is safe in a file name.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "the {what} name {name:?} is not valid: use 1 to 64 letters, digits, '.', '_' or '-', \
             not starting with '.'"
        ))
    }
}

impl Gate {
    /// The gate of a server bound to `bound`, with what the user allowed beyond it.
    pub fn new(
        authentication: Authentication,
        bound: SocketAddr,
        extra_hosts: &[String],
        origins: &[String],
    ) -> Self {
        let port = bound.port();
        let mut hosts: HashSet<String> = HashSet::new();
        let mut names = vec![match bound.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        }];
        if bound.ip().is_loopback() {
            names.extend([
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
                "[::1]".to_owned(),
            ]);
        }
        names.extend(extra_hosts.iter().cloned());
        for name in names {
            let name = name.to_ascii_lowercase();
            hosts.insert(format!("{name}:{port}"));
            hosts.insert(name);
        }
        Gate {
            tokens: match authentication {
                Authentication::Tokens(tokens) => Some(Arc::new(
                    tokens
                        .into_iter()
                        .map(|(tenant, token)| (tenant, token.into_bytes()))
                        .collect(),
                )),
                Authentication::Off => None,
            },
            allowed_hosts: Arc::new(hosts),
            allowed_origins: Arc::new(
                origins
                    .iter()
                    .map(|origin| origin.trim_end_matches('/').to_ascii_lowercase())
                    .collect(),
            ),
            cluster_token: None,
        }
    }

    /// This gate, also admitting the servers of a cluster that present `token` (with the tenant
    /// they forward for). Refused when the gate has no tenant tokens, or `token` is one of them:
    /// a tenant must never be able to speak for another.
    pub fn with_cluster_token(mut self, token: String) -> Result<Self, String> {
        let Some(tokens) = &self.tokens else {
            return Err(
                "a cluster needs tenant tokens (--auth-token-file): --no-auth cannot be clustered"
                    .to_owned(),
            );
        };
        if token.len() < MIN_TOKEN_LENGTH {
            return Err(format!(
                "the cluster token is too short: use at least {MIN_TOKEN_LENGTH} characters"
            ));
        }
        if tokens
            .iter()
            .any(|(_, tenant)| bool::from(tenant.as_slice().ct_eq(token.as_bytes())))
        {
            return Err(
                "the cluster token is also a tenant's token: give the servers a secret of their own"
                    .to_owned(),
            );
        }
        self.cluster_token = Some(Arc::new(token.into_bytes()));
        Ok(self)
    }

    /// How many tenants hold tokens (1 without authentication).
    pub fn tenants(&self) -> usize {
        self.tokens.as_ref().map_or(1, |tokens| tokens.len())
    }

    /// The `host` and `host:port` values a `Host` header may carry.
    pub fn allowed_hosts(&self) -> Vec<String> {
        self.allowed_hosts.iter().cloned().collect()
    }

    /// The tenant a request is admitted as, or the response that refuses it.
    fn admit(&self, headers: &HeaderMap) -> Result<Tenant, Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .map(str::to_ascii_lowercase);
        let host = match host {
            Some(host) if self.allowed_hosts.contains(&host) => host,
            other => {
                return Err(Refusal::forbidden(format!(
                    "the Host header {:?} does not name this server; if it is reached by that \
                     name, start it with --allow-host NAME",
                    other.unwrap_or_default()
                )));
            }
        };
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
            let origin = origin.trim_end_matches('/');
            // A page of the server's own origin (the Host just checked) may call it: a rebinding
            // page has a foreign Host, refused above.
            let same_origin = ["http://", "https://"]
                .iter()
                .any(|scheme| origin.strip_prefix(scheme) == Some(host.as_str()));
            if !same_origin && !self.allowed_origins.contains(origin) {
                return Err(Refusal::forbidden(format!(
                    "requests from the origin {origin:?} are not allowed; a browser page may use \
                     this server only if it is started with --allow-origin {origin}"
                )));
            }
        }
        let Some(tokens) = &self.tokens else {
            return Ok(Tenant(ANONYMOUS_TENANT.to_owned()));
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default()
            .as_bytes();
        // Every token is compared, in constant time, whatever matches.
        let mut tenant = None;
        for (name, token) in tokens.iter() {
            if bool::from(presented.ct_eq(token)) {
                tenant = Some(name.clone());
            }
        }
        if let Some(tenant) = tenant {
            return Ok(Tenant(tenant));
        }
        let refused = || Refusal {
            status: StatusCode::UNAUTHORIZED,
            message: "missing or wrong token: send Authorization: Bearer <token>".to_owned(),
        };
        // Another server of the cluster, forwarding for a tenant this server knows.
        let Some(cluster_token) = &self.cluster_token else {
            return Err(refused());
        };
        if !bool::from(presented.ct_eq(cluster_token.as_slice())) {
            return Err(refused());
        }
        let named = headers
            .get(TENANT_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        tokens
            .iter()
            .find(|(name, _)| name == named)
            .map(|(name, _)| Tenant(name.clone()))
            .ok_or_else(|| Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: format!(
                    "a server of the cluster must name a tenant this server knows in \
                     X-Codemode-Tenant, not {named:?}"
                ),
            })
    }
}

/// The middleware: admits the request (with its [`Tenant`]) or answers it with 401 or 403.
pub async fn guard(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    match gate.admit(request.headers()) {
        Ok(tenant) => {
            request.extensions_mut().insert(tenant);
            next.run(request).await
        }
        Err(refusal) => {
            tracing::warn!(
                status = refusal.status.as_u16(),
                path = %request.uri().path(),
                "refused an HTTP request"
            );
            refusal.into_response()
        }
    }
}

/// The tenant each MCP session belongs to, bound at the response that created the session: a
/// request that names a session of another tenant (in `Mcp-Session-Id`) gets 404, whatever its
/// method, and reaches nothing.
#[derive(Clone)]
pub struct SessionOwners {
    owners: Arc<std::sync::Mutex<std::collections::HashMap<String, Tenant>>>,
    /// The MCP sessions alive now, to forget the owners of those that ended.
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
}

impl std::fmt::Debug for SessionOwners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOwners").finish_non_exhaustive()
    }
}

/// The header that names an MCP session.
const MCP_SESSION_HEADER: &str = "mcp-session-id";

/// How many owners are remembered before those of ended sessions are forgotten.
const OWNERS_BEFORE_PRUNING: usize = 1024;

impl SessionOwners {
    /// Owners of the sessions `sessions` holds.
    pub fn new(
        sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    ) -> Self {
        SessionOwners {
            owners: Arc::default(),
            sessions,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Tenant>> {
        self.owners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn remember(&self, session: String, tenant: Tenant) {
        let crowded = {
            let mut owners = self.lock();
            owners.entry(session).or_insert(tenant);
            owners.len() > OWNERS_BEFORE_PRUNING
        };
        if crowded {
            let alive: HashSet<String> = self
                .sessions
                .sessions
                .read()
                .await
                .keys()
                .map(|id| id.to_string())
                .collect();
            self.lock().retain(|session, _| alive.contains(session));
        }
    }
}

/// The middleware behind [`guard`]: binds each MCP session to the tenant that created it.
pub async fn bind_sessions(
    State(owners): State<SessionOwners>,
    request: Request,
    next: Next,
) -> Response {
    let tenant = request
        .extensions()
        .get::<Tenant>()
        .cloned()
        .unwrap_or_else(|| Tenant(ANONYMOUS_TENANT.to_owned()));
    let named = request
        .headers()
        .get(MCP_SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &named {
        let owner = owners.lock().get(session).cloned();
        if owner.is_some_and(|owner| owner != tenant) {
            tracing::warn!(
                method = %request.method(),
                "refused a request for another tenant's MCP session"
            );
            // The same answer as for a session that does not exist: nothing tells the client
            // that the id is in use.
            return Refusal {
                status: StatusCode::NOT_FOUND,
                message: "no such session".to_owned(),
            }
            .into_response();
        }
    }
    let deleting = request.method() == axum::http::Method::DELETE;
    let response = next.run(request).await;
    if let Some(created) = response
        .headers()
        .get(MCP_SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
    {
        owners.remember(created.to_owned(), tenant).await;
    }
    let mut response = response;
    if deleting
        && response.status().is_success()
        && let Some(session) = named
    {
        owners.lock().remove(&session);
        // The session is gone, not queued for going: 200, which the official SDKs expect (the
        // Python SDK warns "Session termination failed: 202" otherwise).
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
    }
    response
}

/// How long a client may take to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What bounds the connections of the server.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: std::time::Duration,
}

/// Serves `router` on `listener` until `shutdown`, with at most `limits.max_connections`
/// connections open (the next waits to be accepted until one closes) and a deadline for each
/// request's headers, so that clients that connect and send nothing, or send slowly, cannot hold the
/// server. On shutdown, open connections finish their requests (for at most 10 s).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, or a connection reset before it was accepted: wait a
                    // little rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that sends nothing, or breaks the protocol, ends its own connection.
            let _ = watched.await;
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {
            tracing::warn!("connections still open 10 s after shutdown began; closing them");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn gate() -> Gate {
        Gate::new(
            Authentication::Tokens(vec![
                ("alpha".into(), "a".repeat(20)),
                ("beta".into(), "b".repeat(20)),
            ]),
            "127.0.0.1:8080".parse().unwrap(),
            &[],
            &["http://localhost:3000".into()],
        )
    }

    #[test]
    fn the_token_picks_the_tenant_and_a_wrong_one_is_unauthorized() {
        let bearer = |token: &str| format!("Bearer {token}");
        assert_eq!(
            gate()
                .admit(&headers(&[
                    ("host", "127.0.0.1:8080"),
                    ("authorization", &bearer(&"b".repeat(20)))
                ]))
                .unwrap(),
            Tenant("beta".into())
        );
        for wrong in [bearer("nope"), bearer(&"a".repeat(19)), "a".repeat(20)] {
            let refused = gate()
                .admit(&headers(&[
                    ("host", "localhost:8080"),
                    ("authorization", &wrong),
                ]))
                .unwrap_err();
            assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        }
    }

    #[test]
    fn a_foreign_host_or_origin_is_forbidden() {
        let token = format!("Bearer {}", "a".repeat(20));
        let forbidden =
            |pairs: &[(&'static str, &str)]| gate().admit(&headers(pairs)).unwrap_err().status;
        assert_eq!(
            forbidden(&[("host", "evil.example:8080"), ("authorization", &token)]),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            forbidden(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://evil.example"),
                ("authorization", &token)
            ]),
            StatusCode::FORBIDDEN
        );
        assert!(
            gate()
                .admit(&headers(&[
                    ("host", "127.0.0.1:8080"),
                    ("origin", "http://localhost:3000"),
                    ("authorization", &token)
                ]))
                .is_ok()
        );
    }

    #[test]
    fn a_page_of_the_servers_own_origin_may_call_it_and_no_other() {
        let token = format!("Bearer {}", "a".repeat(20));
        let admitted = |host: &str, origin: &str| {
            gate()
                .admit(&headers(&[
                    ("host", host),
                    ("origin", origin),
                    ("authorization", &token),
                ]))
                .map_err(|refusal| refusal.status)
        };
        for (host, origin) in [
            ("127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("localhost:8080", "http://localhost:8080/"),
            ("[::1]:8080", "https://[::1]:8080"),
        ] {
            assert!(admitted(host, origin).is_ok(), "{host} {origin}");
        }
        // Same host, another port or name: another origin.
        for (host, origin) in [
            ("127.0.0.1:8080", "http://127.0.0.1:9999"),
            ("127.0.0.1:8080", "http://localhost:8080"),
            ("127.0.0.1:8080", "http://127.0.0.1:8080.evil.example"),
            ("127.0.0.1:8080", "null"),
        ] {
            assert_eq!(
                admitted(host, origin).unwrap_err(),
                StatusCode::FORBIDDEN,
                "{host} {origin}"
            );
        }
        // A rebinding page: its Host is the attacker's name, whatever its Origin says.
        assert_eq!(
            admitted("evil.example:8080", "http://evil.example:8080").unwrap_err(),
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn token_files_name_tenants_and_refuse_weak_tokens() {
        let folder = std::env::temp_dir().join(format!("codemode-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join("tokens");
        let write = |text: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        write(&format!(
            "# tenants\nalpha {}\n\nbeta {}\n",
            "x".repeat(16),
            "y".repeat(32)
        ));
        let Some(Authentication::Tokens(tokens)) =
            authentication(Some(&path), None, false).unwrap()
        else {
            panic!("tokens expected");
        };
        assert_eq!(tokens.len(), 2);
        write("alpha short\n");
        assert!(
            authentication(Some(&path), None, false)
                .unwrap_err()
                .contains("at least 16")
        );
        write("bad/name xxxxxxxxxxxxxxxxxxxx\n");
        assert!(
            authentication(Some(&path), None, false)
                .unwrap_err()
                .contains("not valid")
        );
        write(&format!(
            "alpha {}\nbeta {}\n",
            "z".repeat(20),
            "z".repeat(20)
        ));
        let shared = authentication(Some(&path), None, false).unwrap_err();
        assert!(shared.contains("same token as alpha"), "{shared}");
        write(&format!("alpha {}\n", "z".repeat(20)));
        for mode in [0o640, 0o604, 0o620] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let open = authentication(Some(&path), None, false).unwrap_err();
            assert!(open.contains("chmod 600"), "{mode:o}: {open}");
        }
        assert_eq!(authentication(None, None, false).unwrap(), None);
        assert_eq!(
            authentication(None, None, true).unwrap(),
            Some(Authentication::Off)
        );
    }

    #[test]
    fn names_are_checked_before_they_reach_a_file_path() {
        assert!(check_name("session", "work-1.a_b").is_ok());
        for bad in ["", "../x", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name("session", bad).is_err(), "{bad:?}");
        }
    }
}
