//! Who a request is: its tenant (from the token the HTTP gate checked, or the one local tenant
//! over stdio) and the codemode session it names (`X-Codemode-Session`) or is given.

use codemode_session::{SessionKey, Tenant};
use rmcp::ErrorData;

use crate::http;

/// The header an HTTP client names its session with, so its stored values persist across
/// reconnects and restarts.
pub(super) const SESSION_HEADER: &str = "x-codemode-session";

/// Whose stored values an MCP session uses: the store key of its codemode session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    /// Whose token the client holds (over stdio, the one local tenant).
    pub(super) tenant: Tenant,
    /// Where its stored values are kept: the tenant's session of that name over HTTP, the
    /// `--session` of no tenant over stdio.
    pub(super) key: SessionKey,
    /// Whether the client named the session (X-Codemode-Session): then any request or MCP
    /// session that names it reaches it. An unnamed one lives and ends with its MCP session.
    pub(super) named: bool,
}

impl Identity {
    /// The session's name as the client gave it (`X-Codemode-Session`), if it named one.
    pub(super) fn session_name(&self) -> Option<&str> {
        self.named.then_some(self.key.name.as_str())
    }

    /// Over stdio, the parent process owns the server: `--session` names the values. Over HTTP,
    /// the tenant of the token, and the session the client names in `X-Codemode-Session` or a
    /// fresh, unguessable one.
    pub(super) fn of(
        stdio_session: &str,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Self, ErrorData> {
        let Some(parts) = extensions.get::<axum::http::request::Parts>() else {
            return Ok(Identity {
                tenant: Tenant::new(LOCAL_TENANT),
                key: SessionKey::new(stdio_session.to_owned()),
                named: false,
            });
        };
        let tenant = parts
            .extensions
            .get::<http::Tenant>()
            .cloned()
            .unwrap_or_else(|| Tenant::new(http::ANONYMOUS_TENANT));
        let (name, named) = match parts.headers.get(SESSION_HEADER) {
            Some(value) => {
                let name = value.to_str().unwrap_or_default();
                http::check_name("session", name)
                    .map_err(|message| ErrorData::invalid_request(message, None))?;
                (name.to_owned(), true)
            }
            None => (
                fresh_session_name().map_err(|error| {
                    ErrorData::internal_error(
                        format!("cannot make a session name: no randomness ({error})"),
                        None,
                    )
                })?,
                false,
            ),
        };
        Ok(Identity {
            key: SessionKey::of_tenant(tenant.clone(), name),
            tenant,
            named,
        })
    }
}

/// The tenant of a server over stdio: the parent process that owns it.
pub(super) const LOCAL_TENANT: &str = "local";

/// 128 random bits, as hex: a name no other client can guess.
pub(super) fn fresh_session_name() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(format!(
        "anonymous-{}",
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    ))
}
