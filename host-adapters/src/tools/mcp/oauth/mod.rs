//! OAuth 2.1 to remote servers, as the MCP authorization specification has it, on rmcp's
//! implementation: protected-resource and authorization-server metadata discovery (with the
//! 2025-03-26 fallbacks), a pre-registered client, a client ID metadata document or dynamic
//! registration, PKCE, the resource indicator, the scope of the server's `WWW-Authenticate`
//! challenge, `offline_access` and refresh, and the issuer checks.
//!
//! [`login`] runs the authorization-code flow once, as `codemode login` does: the authorization
//! URL is opened with the user's browser (or printed), the redirect comes back to a loopback port
//! (`callback`), and the tokens go to the user's [`TokenFile`] for the server. A connection to
//! a server with saved tokens sends them, refreshes them as they expire, and saves the new ones
//! (see `connection`). A server that answers 401 to a connection without tokens is down with
//! "run `codemode login NAME`".

mod callback;
mod store;

use rmcp::transport::auth::{AuthorizationManager, AuthorizationRequest, OAuthState};

pub use callback::Browser;
pub use store::{TokenFile, token_folder};

/// How codemode identifies itself to a server's authorization server (an entry's `oauth` keys).
/// By default it registers itself dynamically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OAuthSettings {
    /// A client registered with the authorization server beforehand.
    pub client_id: Option<String>,
    /// The secret of that client, for a confidential one.
    pub client_secret: Option<String>,
    /// The HTTPS URL of codemode's client ID metadata document, where the authorization server
    /// takes one (SEP-991).
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for; empty: what the server's challenge or metadata says.
    pub scopes: Vec<String>,
    /// The loopback port the redirect comes back to; `None`: any free one.
    pub callback_port: Option<u16>,
    /// Whether a call refused for want of scope (403 `insufficient_scope`) runs the flow again
    /// for the scope the server names (step-up), and is made again: for a user at hand
    /// (`codemode run`), never for a server.
    pub step_up: bool,
}

impl OAuthSettings {
    /// These settings with a pre-registered client (and its secret, for a confidential one).
    pub fn with_client(mut self, client_id: String, client_secret: Option<String>) -> Self {
        self.client_id = Some(client_id);
        self.client_secret = client_secret;
        self
    }

    /// These settings with a client ID metadata document's URL.
    pub fn with_client_metadata_url(mut self, url: String) -> Self {
        self.client_metadata_url = Some(url);
        self
    }

    /// These settings asking for `scopes`.
    pub fn with_scopes(mut self, scopes: Vec<String>) -> Self {
        self.scopes = scopes;
        self
    }

    /// These settings with the redirect on loopback port `port`.
    pub fn with_callback_port(mut self, port: u16) -> Self {
        self.callback_port = Some(port);
        self
    }

    /// These settings with step-up authorization on (see [`OAuthSettings::step_up`]).
    pub fn with_step_up(mut self, step_up: bool) -> Self {
        self.step_up = step_up;
        self
    }
}

/// Why a login failed; displays as its message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// The server is not reached over HTTP.
    #[error("the server \"{0}\" is not reached over HTTP: only remote servers log in")]
    NotHttp(String),
    /// The authorization flow failed.
    #[error("authorizing with the server \"{server}\" failed: {why}")]
    Failed {
        /// The server.
        server: String,
        /// Why.
        why: String,
    },
}

/// Runs the authorization-code flow for the HTTP server of `config` (seeded by `challenge`, a
/// `WWW-Authenticate` header the server sent, when there is one), and saves the tokens to the
/// server's [`TokenFile`]. Returns the file.
pub async fn login(
    config: &super::McpServerConfig,
    browser: &Browser,
    challenge: Option<&str>,
) -> Result<TokenFile, LoginError> {
    let server = config.namespace.clone();
    let failed = |why: String| LoginError::Failed {
        server: server.clone(),
        why,
    };
    let url = match &config.transport {
        super::McpTransport::Http { url, .. } => url.clone(),
        _ => return Err(LoginError::NotHttp(server.clone())),
    };
    let challenge = match challenge {
        Some(challenge) => Some(challenge.to_owned()),
        None => probe(&url).await,
    };
    let store = TokenFile::for_url(&url);
    let mut manager = AuthorizationManager::new(url.as_str())
        .await
        .map_err(|error| failed(error.to_string()))?;
    manager.set_credential_store(store.clone());
    let receiver = callback::Receiver::bind(config.oauth.callback_port)
        .await
        .map_err(|error| failed(format!("cannot listen for the redirect: {error}")))?;
    let settings = &config.oauth;
    let mut request = AuthorizationRequest::new(receiver.redirect_uri())
        .with_client_name("codemode")
        .with_initial_scope_selection();
    if !settings.scopes.is_empty() {
        request = request.with_scopes(settings.scopes.clone());
    }
    if let Some(client_id) = &settings.client_id {
        request = request.with_preregistered_client(client_id.clone());
        if let Some(secret) = &settings.client_secret {
            request = request.with_client_secret(secret.clone());
        }
    }
    if let Some(document) = &settings.client_metadata_url {
        request = request.with_client_metadata_url(document.clone());
    }
    if let Some(challenge) = challenge {
        request = request.with_challenge(challenge);
    }
    let mut state = OAuthState::Unauthorized(manager);
    state
        .start_authorization(request)
        .await
        .map_err(|error| failed(error.to_string()))?;
    let authorization_url = state
        .get_authorization_url()
        .await
        .map_err(|error| failed(error.to_string()))?;
    browser
        .open(&server, &authorization_url)
        .map_err(|error| failed(error.to_string()))?;
    let redirected = receiver
        .receive()
        .await
        .map_err(|error| failed(error.to_string()))?;
    state
        .handle_callback_url(&redirected)
        .await
        .map_err(|error| failed(error.to_string()))?;
    Ok(store)
}

/// The `WWW-Authenticate` challenge the server at `url` answers without a token, as a client
/// meets it: at the start of a connection, or (for a server that lets anyone start) at the
/// listing of its tools. `None` when it answers both.
async fn probe(url: &str) -> Option<String> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    let transport = StreamableHttpClientTransport::from_uri(url);
    let client = match ().serve(transport).await {
        Ok(client) => client,
        Err(error) => return error.auth_challenge().map(str::to_owned),
    };
    let challenge = match client.list_all_tools().await {
        Ok(_) => None,
        Err(error) => error.auth_challenge().map(str::to_owned),
    };
    let _ = client.cancel().await;
    challenge
}

/// Whether a `WWW-Authenticate` challenge asks for more scope (`error="insufficient_scope"`).
pub(super) fn wants_scope(challenge: &str) -> bool {
    challenge.contains("insufficient_scope")
}
