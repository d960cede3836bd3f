//! The connection to one downstream server ([`McpTools`] and its [`Connection`]): made on first
//! use and kept, started again (or reconnected) after the server dies or drops it, with a
//! generation so that a failure seen by an old call never drops a newer connection; a stdio
//! server's stderr is logged line by line.

use rmcp::service::{ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use serde_json::Value;
use tokio::sync::Mutex;

use super::exit::ExitWatch;
use super::notifications::{ListWatcher, ProgressRoutes};
use super::oauth::TokenFile;
use super::sse::SseTransport;
use super::trace_headers::{TraceHeaders, http_client};
use super::transport::{McpServerConfig, McpTransport, display_url, lifecycle};
use super::user::UserRoutes;
use rmcp::transport::auth::{AuthClient, AuthorizationManager};

/// Why a connection could not be made; displays as its message.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    /// Nothing another handshake would change (the program does not start, a header is
    /// malformed, the start was cancelled, it timed out): the message.
    #[error("{0}")]
    Final(String),
    /// The handshake failed: another one, over a new connection, may succeed.
    #[error("{0}")]
    Handshake(String),
    /// The server refused the credentials (401), or wants more scope (403), with this
    /// `WWW-Authenticate` challenge: authorizing again may help.
    #[error("{message}")]
    Unauthorized {
        /// What failed, said plainly.
        message: String,
        /// The server's challenge.
        challenge: String,
    },
}

impl StartError {
    /// This error with `detail` (how the server exited, what it said) after its message.
    pub(super) fn with_detail(self, detail: Option<String>) -> Self {
        let Some(detail) = detail else { return self };
        match self {
            StartError::Final(message) => StartError::Final(format!("{message}; {detail}")),
            StartError::Handshake(message) => StartError::Handshake(format!("{message}; {detail}")),
            unauthorized @ StartError::Unauthorized { .. } => unauthorized,
        }
    }

    /// The failure of a handshake, as `what` went.
    pub(super) fn of(error: rmcp::service::ClientInitializeError, what: String) -> Self {
        let message = format!("{what}: {error}");
        match error {
            rmcp::service::ClientInitializeError::Cancelled => StartError::Final(message),
            _ => StartError::Handshake(message),
        }
    }
}

pub(super) type Client = RunningService<RoleClient, ListWatcher>;

/// The live connection and its generation (counted up at each connect), so that a failure seen by
/// an old call never drops a newer connection.
struct Connection {
    pub(super) client: Client,
    pub(super) generation: u64,
    /// The server's process, for a stdio server.
    pub(super) pid: Option<u32>,
}

/// The tools of one MCP server.
pub struct McpTools {
    pub(super) config: McpServerConfig,
    /// The output schema of each tool that has one, by the server's name for it, as last listed.
    pub(super) output_schemas: parking_lot::Mutex<std::collections::HashMap<String, Value>>,
    connection: Mutex<Option<Connection>>,
    pub(super) generations: std::sync::atomic::AtomicU64,
    /// Grows when the server says its tools changed, and when it is started again.
    pub(super) tools_version: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Tools the server refused outside a task (`taskSupport: "required"` in the 2025-11-25
    /// revision): called as tasks from then on.
    pub(super) task_only: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Where the progress of each call in flight goes, by progress token.
    pub(super) progress: ProgressRoutes,
    /// The users of the calls in flight, for the server's requests of the user.
    pub(super) users: UserRoutes,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl McpTools {
    /// A provider for this server; it connects on first use.
    pub fn new(config: McpServerConfig) -> Self {
        McpTools {
            config,
            output_schemas: parking_lot::Mutex::new(std::collections::HashMap::new()),
            connection: Mutex::new(None),
            generations: std::sync::atomic::AtomicU64::new(0),
            tools_version: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
            task_only: parking_lot::Mutex::new(std::collections::HashSet::new()),
            progress: ProgressRoutes::default(),
            users: UserRoutes::default(),
        }
    }

    pub(super) fn watcher(&self) -> ListWatcher {
        ListWatcher {
            version: std::sync::Arc::clone(&self.tools_version),
            namespace: self.config.namespace.clone(),
            progress: std::sync::Arc::clone(&self.progress),
            users: self.users.clone(),
        }
    }

    /// The server's configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The live client, connecting (or reconnecting) first if needed.
    ///
    /// A kept connection to a stdio server is checked first: a server that died since the last
    /// call may not have been noticed by the connection yet, and its process's state tells at
    /// once (a read of `/proc`, far cheaper than a ping round trip). If it is gone, the server is
    /// started again, so a server killed between two calls costs the next call nothing.
    pub(super) async fn client(&self) -> Result<(rmcp::Peer<RoleClient>, u64), StartError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref() {
            if !live.client.is_closed() && live.pid.is_none_or(process_alive) {
                return Ok((live.client.peer().clone(), live.generation));
            }
            tracing::warn!(server = %self.config.namespace, "the MCP server is gone; starting it again");
            connection.take();
        }
        let (client, pid) = match self.connect_in_time().await {
            // A user at hand authorizes again (the saved tokens were refused, or the server
            // wants more scope), and the server is reached once more.
            Err(StartError::Unauthorized { message, challenge })
                if self.may_reauthorize(&challenge) =>
            {
                self.reauthorize(&challenge).await.map_err(|why| {
                    StartError::Final(format!("{message}; authorizing again failed: {why}"))
                })?;
                self.connect_in_time().await?
            }
            started => started?,
        };
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if generation > 0 {
            // Started again (it crashed, or was shut down): it may offer other tools now.
            self.tools_version
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let peer = client.peer().clone();
        *connection = Some(Connection {
            client,
            generation,
            pid,
        });
        Ok((peer, generation))
    }

    /// [`Self::connect`] within the startup timeout.
    async fn connect_in_time(&self) -> Result<(Client, Option<u32>), StartError> {
        tokio::time::timeout(self.config.connect_timeout, self.connect())
            .await
            .map_err(|_| {
                StartError::Final(format!(
                    "the MCP server \"{}\" did not start within {:.0} s",
                    self.config.namespace,
                    self.config.connect_timeout.as_secs_f64()
                ))
            })?
    }

    /// Whether a refusal with `challenge` is worth authorizing again for: with a user at hand
    /// (`oauth.step_up`), when the server wants more scope, or refused tokens the user saved
    /// (expired past refreshing, or minted by an authorization server it no longer uses).
    pub(super) fn may_reauthorize(&self, challenge: &str) -> bool {
        let saved = match &self.config.transport {
            McpTransport::Http { url, .. } => TokenFile::for_url(url).exists(),
            _ => false,
        };
        self.config.oauth.step_up && (saved || super::oauth::wants_scope(challenge))
    }

    /// Runs the authorization flow again for `challenge`, with the user's browser.
    pub(super) async fn reauthorize(
        &self,
        challenge: &str,
    ) -> Result<(), super::oauth::LoginError> {
        let browser = super::oauth::Browser::from_environment();
        super::oauth::login(&self.config, &browser, Some(challenge))
            .await
            .map(|_| ())
    }

    /// Starts or reaches the server; for a stdio server, also its process id.
    ///
    /// First as [`lifecycle`] says (`server/discover`, falling back to `initialize` when the
    /// server refuses it). A server that answers `server/discover` in some other way (an empty
    /// result, an error rmcp does not take for "legacy", or closing the connection, as some
    /// older servers do with any request before `initialize`) is reached again from the start,
    /// over a new connection (a new process, for a stdio server), with `initialize` alone.
    pub(super) async fn connect(&self) -> Result<(Client, Option<u32>), StartError> {
        match self.start(lifecycle()).await {
            Ok(started) => Ok(started),
            Err(error @ (StartError::Final(_) | StartError::Unauthorized { .. })) => Err(error),
            Err(StartError::Handshake(discover)) => {
                tracing::info!(
                    server = %self.config.namespace,
                    error = %discover,
                    "the MCP server did not take server/discover; connecting again with initialize"
                );
                self.start(rmcp::service::ClientLifecycleMode::Initialize)
                    .await
                    .map_err(|error| match error {
                        unauthorized @ StartError::Unauthorized { .. } => unauthorized,
                        StartError::Final(message) | StartError::Handshake(message) => {
                            // What server/discover met is in the log above; this is the
                            // server's own answer to a plain start.
                            StartError::Final(message)
                        }
                    })
            }
        }
    }

    /// [`Self::connect`] with one lifecycle.
    pub(super) async fn start(
        &self,
        lifecycle: rmcp::service::ClientLifecycleMode,
    ) -> Result<(Client, Option<u32>), StartError> {
        let namespace = &self.config.namespace;
        match &self.config.transport {
            McpTransport::Stdio {
                program,
                args,
                env,
                cwd,
            } => {
                let environment = self.config.environment.as_ref();
                let command = tokio::process::Command::new(program).configure(|command| {
                    if let Some(environment) = environment {
                        command.env_clear().envs(environment.iter().cloned());
                    }
                    command.args(args).envs(env);
                    if let Some(cwd) = cwd {
                        command.current_dir(cwd);
                    }
                });
                let exit = ExitWatch::default();
                let mut command = process_wrap::tokio::CommandWrap::from(command);
                command.wrap(exit.recorder());
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|error| {
                        StartError::Final(format!(
                            "cannot start the MCP server \"{namespace}\" ({program}): {error}"
                        ))
                    })?;
                let tail = StderrTail::default();
                let mut stderr_ended = stderr.map(|stderr| {
                    tokio::spawn(log_stderr(namespace.clone(), stderr, tail.clone()))
                });
                let pid = transport.id();
                if let Some(pid) = pid {
                    exit.watch(pid);
                }
                let failed =
                    format!("the MCP server \"{namespace}\" ({program}) failed to initialise");
                match self.handshake(transport, lifecycle, failed).await {
                    Ok(client) => Ok((client, pid)),
                    Err(error) => {
                        // Why, as the server gave it: how it exited, and its last words.
                        if let Some(ended) = stderr_ended.as_mut() {
                            let _ = tokio::time::timeout(STDERR_GRACE, ended).await;
                        }
                        Err(error.with_detail(exit_detail(&exit, &tail).await))
                    }
                }
            }
            McpTransport::Http { url, headers } => {
                let mut config =
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    );
                config.custom_headers = header_map(namespace, headers)?
                    .into_iter()
                    .filter_map(|(name, value)| Some((name?, value)))
                    .collect();
                let failed = format!(
                    "cannot connect to the MCP server \"{namespace}\" at {}",
                    display_url(url)
                );
                // The user's OAuth tokens, when they logged in and the configuration gives no
                // credentials of its own.
                let configured = headers
                    .keys()
                    .any(|name| name.eq_ignore_ascii_case("authorization"));
                let tokens = TokenFile::for_url(url);
                let started = if !configured && tokens.exists() {
                    let client = self.authorized_client(url, tokens).await.map_err(|why| {
                        StartError::Final(format!("{failed}: the saved OAuth tokens cannot be used ({why}); run `codemode login {namespace}` again"))
                    })?;
                    let transport =
                        StreamableHttpClientTransport::with_client(TraceHeaders(client), config);
                    self.watcher()
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                } else {
                    let transport = StreamableHttpClientTransport::with_client(
                        TraceHeaders(http_client()),
                        config,
                    );
                    self.watcher()
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                };
                match started {
                    Ok(client) => Ok((client, None)),
                    Err(error) => {
                        let challenge = error.auth_challenge().map(str::to_owned);
                        let refused = explain_http_refusal(
                            StartError::of(error, failed.clone()),
                            &failed,
                            namespace,
                            configured,
                        );
                        Err(match challenge {
                            Some(challenge) if !configured => StartError::Unauthorized {
                                message: refused.to_string(),
                                challenge,
                            },
                            _ => refused,
                        })
                    }
                }
            }
            McpTransport::Sse { url, headers } => {
                let failed = format!(
                    "cannot connect to the MCP server \"{namespace}\" at {} (SSE)",
                    display_url(url)
                );
                let transport = SseTransport::connect(url, header_map(namespace, headers)?)
                    .await
                    .map_err(|error| StartError::Final(format!("{failed}: {error}")))?;
                Ok((self.handshake(transport, lifecycle, failed).await?, None))
            }
        }
    }

    /// An HTTP client that sends the user's saved OAuth tokens for the server at `url`,
    /// refreshing them as they expire (and saving the new ones).
    async fn authorized_client(
        &self,
        url: &str,
        tokens: TokenFile,
    ) -> Result<AuthClient<reqwest::Client>, rmcp::transport::auth::AuthError> {
        let mut manager = AuthorizationManager::new(url).await?;
        manager.set_credential_store(tokens);
        if manager.initialize_from_store().await?
            && let Some(client_id) = &self.config.oauth.client_id
            && let Some(secret) = &self.config.oauth.client_secret
        {
            // A confidential client refreshes with its secret, which the token file does not keep.
            manager.configure_client(
                rmcp::transport::auth::OAuthClientConfig::new(
                    client_id.clone(),
                    "http://127.0.0.1/callback",
                )
                .with_client_secret(secret.clone()),
            )?;
        }
        Ok(AuthClient::new(http_client(), manager))
    }

    /// Starts the MCP lifecycle over `transport`; `failed` says what failed, for the error.
    pub(super) async fn handshake<T, E, A>(
        &self,
        transport: T,
        lifecycle: rmcp::service::ClientLifecycleMode,
        failed: String,
    ) -> Result<Client, StartError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.watcher()
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .map_err(|error| StartError::of(error, failed))
    }

    /// Ends the connection, if any: a stdio server has its standard input closed, gets 3 s to
    /// exit, then `SIGTERM` and 3 s more, then is killed (the MCP specification's sequence), so
    /// that it is never cut off mid-write. The next call starts it again.
    pub async fn shutdown(&self) {
        let live = self.connection.lock().await.take();
        if let Some(live) = live
            && let Err(error) = live.client.cancel().await
        {
            tracing::warn!(server = %self.config.namespace, %error, "the MCP server did not close cleanly");
        }
    }

    /// Drops the connection of `generation` (if it is still the current one), so that the next
    /// call starts the server again.
    pub(super) async fn forget(&self, generation: u64) {
        let mut connection = self.connection.lock().await;
        if connection
            .as_ref()
            .is_some_and(|live| live.generation == generation)
            && let Some(dead) = connection.take()
        {
            drop(dead.client);
        }
    }
}

/// A start refused for want of credentials, said plainly: rmcp's "Auth required" is the
/// server's 401, "Insufficient scope" its 403. Without configured credentials, the way out is
/// `codemode login`.
fn explain_http_refusal(
    error: StartError,
    failed: &str,
    namespace: &str,
    configured: bool,
) -> StartError {
    let message = error.to_string();
    let explained = if message.contains("Auth required") && configured {
        "the server answered HTTP 401 Unauthorized: it refused the credentials in the server's \
         \"headers\""
            .to_owned()
    } else if message.contains("Auth required") {
        format!(
            "the server answered HTTP 401 Unauthorized: it needs authorization; run `codemode \
             login {namespace}` (OAuth), or give a token in the server's \"headers\" \
             (\"Authorization\": \"Bearer ${{TOKEN}}\", the token in the environment)"
        )
    } else if message.contains("Insufficient scope") {
        "the server answered HTTP 403 Forbidden: the credentials lack the scope it needs".to_owned()
    } else {
        return error;
    };
    StartError::Final(format!("{failed}: {explained}"))
}

/// A server's configured headers as HTTP headers; a name or value HTTP cannot carry is an error
/// naming the header (never its value).
fn header_map(
    namespace: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<http::HeaderMap, StartError> {
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::try_from(name.as_str()).map_err(|error| {
            StartError::Final(format!(
                "the MCP server \"{namespace}\" has a bad header name {name:?}: {error}"
            ))
        })?;
        let mut value = http::HeaderValue::try_from(value.as_str()).map_err(|error| {
            StartError::Final(format!(
                "the MCP server \"{namespace}\" has a bad value for header {name}: {error}"
            ))
        })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(map)
}

/// The longest line of a server's standard error that is logged whole.
pub(super) const MAX_STDERR_LINE: usize = 2000;

/// How many of a server's last stderr lines the reason it is down quotes.
const TAIL_LINES: usize = 5;
/// How long a server that failed its handshake is given to finish writing to stderr and exit.
const STDERR_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The last lines a stdio server wrote to its standard error.
#[derive(Debug, Default, Clone)]
pub(super) struct StderrTail(
    std::sync::Arc<parking_lot::Mutex<std::collections::VecDeque<String>>>,
);

impl StderrTail {
    fn push(&self, line: &str) {
        let mut lines = self.0.lock();
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.to_owned());
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().iter().cloned().collect()
    }
}

/// How a stdio server that failed to start ended, and its last stderr lines: "exited with
/// status 1; its stderr ended: …". `None` when there is nothing to say.
async fn exit_detail(exit: &ExitWatch, tail: &StderrTail) -> Option<String> {
    let mut exited = None;
    // The process may still be on its way out: watch it briefly.
    for _ in 0..50 {
        if let Some(ended) = exit.ended() {
            exited = Some(format!("it exited {ended}"));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let lines = tail.lines();
    let said = (!lines.is_empty()).then(|| format!("its stderr ended: {}", lines.join(" | ")));
    match (exited, said) {
        (None, None) => None,
        (Some(exited), None) => Some(exited),
        (None, Some(said)) => Some(said),
        (Some(exited), Some(said)) => Some(format!("{exited}; {said}")),
    }
}

/// Logs what a stdio server writes to its standard error, a line at a time, each naming the
/// server, instead of letting it spill onto the terminal; the last lines are kept in `tail`.
pub(super) async fn log_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: StderrTail,
) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                let mut line = line;
                if line.len() > MAX_STDERR_LINE {
                    let end = (0..=MAX_STDERR_LINE)
                        .rev()
                        .find(|&end| line.is_char_boundary(end))
                        .unwrap_or(0);
                    line.truncate(end);
                    line.push_str(" […]");
                }
                tail.push(&line);
                tracing::info!(target: "codemode::downstream", server = %server, "{line}");
            }
            Ok(None) => break,
            // Not UTF-8, or the pipe failed: nothing more to log as lines.
            Err(_) => break,
        }
    }
}

/// Whether process `pid` is still running: it exists and is not a zombie (exited, not yet
/// reaped). Where `/proc` cannot be read for another reason, assume it runs.
pub(super) fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn a_process_is_alive_until_it_exits() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }
}
