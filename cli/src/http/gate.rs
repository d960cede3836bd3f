//! The gate of `codemode mcp --http`: every request is checked before it reaches MCP.
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
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::tenant::{ANONYMOUS_TENANT, TENANT_HEADER, Tenant};
use super::tokens::{Authentication, MIN_TOKEN_LENGTH};

/// Each tenant's name and token.
type TenantTokens = Vec<(String, Vec<u8>)>;

/// Why a request is turned away: its status and what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl Refusal {
    pub(super) fn forbidden(message: String) -> Self {
        Refusal {
            status: StatusCode::FORBIDDEN,
            message,
        }
    }

    pub(super) fn into_response(self) -> Response {
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
            return Ok(Tenant::new(ANONYMOUS_TENANT));
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
            return Ok(Tenant::from(tenant));
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
            .map(|(name, _)| Tenant::new(name))
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
            Tenant::new("beta")
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
}
