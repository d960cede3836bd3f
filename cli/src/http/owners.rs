//! The owners of MCP sessions: each MCP session id is bound to the tenant that opened it, and a
//! request of another tenant naming it gets 404 (as if it did not exist), so that a session id
//! is no key to another tenant's cells.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

use super::gate::Refusal;
use super::tenant::{ANONYMOUS_TENANT, Tenant};

/// The tenant each MCP session belongs to, bound at the response that created the session: a
/// request that names a session of another tenant (in `Mcp-Session-Id`) gets 404, whatever its
/// method, and reaches nothing.
#[derive(Clone)]
pub struct SessionOwners {
    owners: Arc<parking_lot::Mutex<std::collections::HashMap<String, Tenant>>>,
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

    async fn remember(&self, session: String, tenant: Tenant) {
        let crowded = {
            let mut owners = self.owners.lock();
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
            self.owners
                .lock()
                .retain(|session, _| alive.contains(session));
        }
    }
}

/// The middleware behind [`guard`](super::guard): binds each MCP session to the tenant that created it.
pub async fn bind_sessions(
    State(owners): State<SessionOwners>,
    request: Request,
    next: Next,
) -> Response {
    let tenant = request
        .extensions()
        .get::<Tenant>()
        .cloned()
        .unwrap_or_else(|| Tenant::new(ANONYMOUS_TENANT));
    let named = request
        .headers()
        .get(MCP_SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(session) = &named {
        let owner = owners.owners.lock().get(session).cloned();
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
        owners.owners.lock().remove(&session);
        // The session is gone, not queued for going: 200, which the official SDKs expect (the
        // Python SDK warns "Session termination failed: 202" otherwise).
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
    }
    response
}
