//! Tools of a downstream MCP server, through `rmcp`: reached as a stdio child process or over
//! streamable HTTP (the client half of code mode for any agent).
//!
//! A connection speaks the revision the server does: 2026-07-28 to a server that answers
//! `server/discover` (no `initialize`; each request carries its `_meta`, and over HTTP the
//! `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers), and `initialize` offering
//! 2025-11-25 to an older one (see `lifecycle` and `McpTools::connect`).
//!
//! Each server's tools become tool definitions under the server's namespace (`tools.<ns>__<name>`
//! in a cell), with their descriptions and input and output schemas. The connection is made on
//! first use and kept; a server that dies or drops the connection fails the calls in flight with
//! a clear error, and the next call starts (or reconnects to) it again.
//!
//! What a cell receives from a call, always what the tool's declaration says, as upstream code
//! mode has it: the `CallToolResult` the server sent (`{ content, structuredContent?, isError?,
//! _meta? }`, the content blocks in their MCP JSON form, so that an image block can go straight to
//! `image(...)`), declared as `CallToolResult<T>` with `T` from the tool's output schema (see
//! [`call_result_to_value`]). A result with `isError: true` resolves (the cell reads `isError`);
//! a protocol failure, a dead server or a call past its timeout rejects with an error that says
//! which.
//!
//! Tasks (long-running tools that answer with a task to poll instead of a result) are followed to
//! their end, so a cell's `await` sees the final result either way:
//! - the 2026-07-28 tasks extension (SEP-2663): the client declares it, and a server may answer
//!   any call with a task; it is polled with `tasks/get`, whose final state carries the result;
//! - the 2025-11-25 revision (SEP-1686), where a tool with `execution.taskSupport: "required"`
//!   answers a plain call with `-32601`: the tool is called again with the `task` augmentation
//!   (and so from then on), polled with `tasks/get`, and its result fetched with `tasks/result`.
//!
//! A call that ends early (the cell was terminated, or the call timed out) cancels its task with
//! `tasks/cancel`. A task that asks for input (elicitation or sampling) is cancelled and the call
//! rejects: a cell has no one to ask.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use codemode_protocol::{JsonText, ResultType, ToolDefinition, ToolKind, ToolName};
use codemode_session::{
    ToolCallContext, ToolError, ToolInvocation, ToolListError, ToolProgress, ToolProvider,
};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelTaskParams, ClientCapabilities, ClientConfig,
    ClientRequest, ContentBlock, CustomRequest, ErrorCode, GetTaskParams, Implementation,
    ServerResult,
};
use rmcp::service::ClientServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

/// How the server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program to run.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it, on top of the inherited environment.
        env: BTreeMap<String, String>,
        /// Its working directory; the current one when `None`.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint, such as `http://127.0.0.1:8080/mcp`.
    Http {
        /// The server's URL (`http://host:port/mcp`).
        url: String,
        /// Headers sent with every request (an `Authorization` header, for instance).
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// A stdio server: `program` with `args`, in the inherited environment.
    pub fn stdio(program: impl Into<String>, args: Vec<String>) -> Self {
        McpTransport::Stdio {
            program: program.into(),
            args,
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// A stdio server from a command line such as `node "my server.js" --flag`, split into words
    /// as a POSIX shell would (quotes and backslashes), without running a shell. `None` when the
    /// line names no program or its quotes do not close.
    pub fn stdio_command(command_line: &str) -> Option<Self> {
        let mut words = shlex::split(command_line)?.into_iter();
        let program = words.next()?;
        Some(McpTransport::stdio(program, words.collect()))
    }

    /// A streamable HTTP server at `url`, with no extra headers.
    pub fn http(url: impl Into<String>) -> Self {
        McpTransport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        }
    }
}

/// How a connection starts: `server/discover` first, speaking 2026-07-28 (no `initialize`,
/// each request carrying its protocol version, client info and capabilities in `_meta`, and over
/// HTTP the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers) to a server that answers
/// it; to a server of an older revision, which refuses the method, `initialize` offering
/// 2025-11-25, which it knows (and may answer with an older one it speaks).
fn lifecycle() -> rmcp::service::ClientLifecycleMode {
    rmcp::service::ClientLifecycleMode::Auto {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
    }
}

/// Why a connection could not be made; displays as its message.
#[derive(Debug, thiserror::Error)]
enum StartError {
    /// Nothing another handshake would change (the program does not start, a header is
    /// malformed, the start was cancelled, it timed out): the message.
    #[error("{0}")]
    Final(String),
    /// The handshake failed: another one, over a new connection, may succeed.
    #[error("{0}")]
    Handshake(String),
}

impl StartError {
    /// The failure of a handshake, as `what` went.
    fn of(error: rmcp::service::ClientInitializeError, what: String) -> Self {
        let message = format!("{what}: {error}");
        match error {
            rmcp::service::ClientInitializeError::Cancelled => StartError::Final(message),
            _ => StartError::Handshake(message),
        }
    }
}

/// One downstream server.
#[derive(Debug, Clone)]
pub struct McpServerConfig {
    /// The namespace of its tools: `tools.<namespace>__<tool>`.
    pub namespace: String,
    /// How to reach the server.
    pub transport: McpTransport,
    /// How long one call may take before it fails.
    pub call_timeout: Duration,
    /// How long starting and initialising the connection may take.
    pub connect_timeout: Duration,
    /// The whole environment a stdio server starts with, before its transport's `env`; `None`:
    /// this process's environment.
    pub environment: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
}

impl McpServerConfig {
    /// A server whose tools appear under `namespace`, reached through `transport`.
    pub fn new(namespace: impl Into<String>, transport: McpTransport) -> Self {
        McpServerConfig {
            namespace: namespace.into(),
            transport,
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            environment: None,
        }
    }

    /// This configuration with the whole environment a stdio server starts with (the
    /// transport's `env` still goes on top), instead of this process's.
    pub fn with_environment(
        mut self,
        environment: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Self {
        self.environment = Some(environment.into_iter().collect());
        self
    }

    /// This configuration with another per-call timeout.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }
}

type Client = RunningService<RoleClient, ListWatcher>;

/// The client side of a connection: counts the server's `notifications/tools/list_changed`, and
/// hands its progress notifications to the calls they belong to.
#[derive(Debug, Clone)]
struct ListWatcher {
    version: std::sync::Arc<std::sync::atomic::AtomicU64>,
    namespace: String,
    progress: ProgressRoutes,
}

/// The calls in flight that asked for progress, by their progress token: where each one's
/// progress goes, and the tool's name for the message.
type ProgressRoutes = std::sync::Arc<
    std::sync::Mutex<
        std::collections::HashMap<rmcp::model::NumberOrString, (ToolProgress, String)>,
    >,
>;

impl rmcp::ClientHandler for ListWatcher {
    fn get_info(&self) -> ClientConfig {
        // Declares the tasks extension: a server may answer a call with a task to poll.
        let mut capabilities = ClientCapabilities::default();
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                Default::default(),
            );
        // What `initialize` offers a server of an older revision: the newest one that has
        // `initialize` (a 2026-07-28 server is reached with `server/discover` instead).
        ClientConfig::new(
            capabilities,
            Implementation::new("codemode", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
    }

    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        tracing::info!(server = %self.namespace, "the MCP server's tools changed; they are listed again for the next cell");
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        let route = self
            .progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&params.progress_token.0)
            .cloned();
        if let Some((progress, tool)) = route {
            progress.report(progress_text(
                &tool,
                params.progress,
                params.total,
                params.message,
            ));
        }
        std::future::ready(())
    }
}

/// A downstream progress notification as the cell's watchers read it:
/// `tools.<tool>: <progress>[/<total>][ <message>]`.
fn progress_text(tool: &str, progress: f64, total: Option<f64>, message: Option<String>) -> String {
    let number = |value: f64| {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            format!("{}", value as i64)
        } else {
            format!("{value}")
        }
    };
    let mut text = format!("tools.{tool}: {}", number(progress));
    if let Some(total) = total {
        text.push('/');
        text.push_str(&number(total));
    }
    if let Some(message) = message.filter(|message| !message.trim().is_empty()) {
        text.push(' ');
        text.push_str(&message);
    }
    text
}

/// Routes a call's progress notifications while it is in flight.
struct ProgressRoute {
    routes: ProgressRoutes,
    token: rmcp::model::NumberOrString,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&self.token);
    }
}

/// The live connection and its generation (counted up at each connect), so that a failure seen by
/// an old call never drops a newer connection.
struct Connection {
    client: Client,
    generation: u64,
    /// The server's process, for a stdio server.
    pid: Option<u32>,
}

/// The tools of one MCP server.
pub struct McpTools {
    config: McpServerConfig,
    /// The output schema of each tool that has one, by the server's name for it, as last listed.
    output_schemas: std::sync::Mutex<std::collections::HashMap<String, Value>>,
    connection: Mutex<Option<Connection>>,
    generations: std::sync::atomic::AtomicU64,
    /// Grows when the server says its tools changed, and when it is started again.
    tools_version: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Tools the server refused outside a task (`taskSupport: "required"` in the 2025-11-25
    /// revision): called as tasks from then on.
    task_only: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Where the progress of each call in flight goes, by progress token.
    progress: ProgressRoutes,
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
            output_schemas: std::sync::Mutex::new(std::collections::HashMap::new()),
            connection: Mutex::new(None),
            generations: std::sync::atomic::AtomicU64::new(0),
            tools_version: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)),
            task_only: std::sync::Mutex::new(std::collections::HashSet::new()),
            progress: ProgressRoutes::default(),
        }
    }

    fn watcher(&self) -> ListWatcher {
        ListWatcher {
            version: std::sync::Arc::clone(&self.tools_version),
            namespace: self.config.namespace.clone(),
            progress: std::sync::Arc::clone(&self.progress),
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
    async fn client(&self) -> Result<(rmcp::Peer<RoleClient>, u64), StartError> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref() {
            if !live.client.is_closed() && live.pid.is_none_or(process_alive) {
                return Ok((live.client.peer().clone(), live.generation));
            }
            tracing::warn!(server = %self.config.namespace, "the MCP server is gone; starting it again");
            connection.take();
        }
        let (client, pid) = tokio::time::timeout(self.config.connect_timeout, self.connect())
            .await
            .map_err(|_| {
                StartError::Final(format!(
                    "the MCP server \"{}\" did not start within {:.0} s",
                    self.config.namespace,
                    self.config.connect_timeout.as_secs_f64()
                ))
            })??;
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

    /// Starts or reaches the server; for a stdio server, also its process id.
    ///
    /// First as [`lifecycle`] says (`server/discover`, falling back to `initialize` when the
    /// server refuses it). A server that answers `server/discover` in some other way (an empty
    /// result, an error rmcp does not take for "legacy", or closing the connection, as some
    /// older servers do with any request before `initialize`) is reached again from the start,
    /// over a new connection (a new process, for a stdio server), with `initialize` alone.
    async fn connect(&self) -> Result<(Client, Option<u32>), StartError> {
        match self.start(lifecycle()).await {
            Ok(started) => Ok(started),
            Err(error @ StartError::Final(_)) => Err(error),
            Err(StartError::Handshake(discover)) => {
                tracing::info!(
                    server = %self.config.namespace,
                    error = %discover,
                    "the MCP server did not take server/discover; connecting again with initialize"
                );
                self.start(rmcp::service::ClientLifecycleMode::Initialize)
                    .await
                    .map_err(|error| match error {
                        StartError::Final(message) | StartError::Handshake(message) => {
                            StartError::Final(format!(
                                "{message} (and before that, with server/discover: {discover})"
                            ))
                        }
                    })
            }
        }
    }

    /// [`Self::connect`] with one lifecycle.
    async fn start(
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
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|error| {
                        StartError::Final(format!(
                            "cannot start the MCP server \"{namespace}\" ({program}): {error}"
                        ))
                    })?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(namespace.clone(), stderr));
                }
                let pid = transport.id();
                let failed =
                    format!("the MCP server \"{namespace}\" ({program}) failed to initialise");
                Ok((self.handshake(transport, lifecycle, failed).await?, pid))
            }
            McpTransport::Http { url, headers } => {
                let mut config =
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    );
                for (name, value) in headers {
                    let name = http::HeaderName::try_from(name.as_str()).map_err(|error| {
                        StartError::Final(format!(
                            "the MCP server \"{namespace}\" has a bad header name {name:?}: {error}"
                        ))
                    })?;
                    let value = http::HeaderValue::try_from(value.as_str()).map_err(|error| {
                        StartError::Final(format!("the MCP server \"{namespace}\" has a bad value for header {name}: {error}"))
                    })?;
                    config.custom_headers.insert(name, value);
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                let failed = format!("cannot connect to the MCP server \"{namespace}\" at {url}");
                Ok((self.handshake(transport, lifecycle, failed).await?, None))
            }
        }
    }

    /// Starts the MCP lifecycle over `transport`; `failed` says what failed, for the error.
    async fn handshake<T, E, A>(
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
    async fn forget(&self, generation: u64) {
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

impl McpTools {
    /// Sends `request` and waits for its answer. The server's progress notifications for it go to
    /// the call's progress (for as long as the call lasts, a task's polling included); dropped
    /// before the answer, it tells the server that the request is cancelled.
    async fn send(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        request: ClientRequest,
        progress: &CallProgress,
    ) -> Result<ServerResult, ServiceError> {
        let handle = peer
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await?;
        // rmcp gives each request its own progress token: route that one.
        self.progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(
                handle.progress_token.0.clone(),
                (progress.progress.clone(), progress.tool.clone()),
            );
        progress
            .routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(ProgressRoute {
                routes: std::sync::Arc::clone(&self.progress),
                token: handle.progress_token.0.clone(),
            });
        let mut abandoned = SpawnOnDrop::new(notify_cancelled(peer.clone(), handle.id.clone()));
        let answer = handle.await_response().await;
        abandoned.disarm();
        answer
    }

    /// One `tools/call`, followed to its result when the server answers with a task.
    async fn call_once(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
    ) -> Result<CallToolResult, CallFailure> {
        let name = params.name.as_ref();
        let task_only = self
            .task_only
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(name);
        if task_only {
            return self.call_as_augmented_task(peer, params, progress).await;
        }
        let request =
            ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params.clone()));
        match self.send(peer, request, progress).await {
            Ok(ServerResult::CallToolResult(result)) if refused_outside_a_task(&result) => {
                self.call_as_task_from_now_on(peer, params, progress).await
            }
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(ServerResult::EmptyResult(_)) => Ok(CallToolResult::success(Vec::new())),
            Ok(ServerResult::CreateTaskResult(created)) => {
                follow_task(
                    peer,
                    TaskProtocol::Extension,
                    created.task.task_id,
                    poll_interval(created.task.poll_interval_ms),
                )
                .await
            }
            Ok(ServerResult::InputRequiredResult(_)) => Err(CallFailure::Refused(
                "the tool asked for input (elicitation or sampling), which a cell cannot give"
                    .to_owned(),
            )),
            Ok(_) => Err(CallFailure::Service(ServiceError::UnexpectedResponse)),
            // `tools/call` exists, so "method not found" is the 2025-11-25 revision's answer to a
            // tool with `taskSupport: "required"` called without the task augmentation.
            Err(ServiceError::McpError(error)) if error.code == ErrorCode::METHOD_NOT_FOUND => {
                self.call_as_task_from_now_on(peer, params, progress).await
            }
            Err(error) => Err(CallFailure::Service(error)),
        }
    }

    /// Remembers that the tool runs only as a task, and calls it as one.
    async fn call_as_task_from_now_on(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
    ) -> Result<CallToolResult, CallFailure> {
        let name = params.name.as_ref();
        tracing::debug!(server = %self.config.namespace, tool = name, "the tool runs only as a task; calling it as one");
        self.task_only
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_owned());
        self.call_as_augmented_task(peer, params, progress).await
    }

    /// A `tools/call` with the 2025-11-25 task augmentation (`"task": {"ttl": …}`), followed to
    /// its result.
    async fn call_as_augmented_task(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
    ) -> Result<CallToolResult, CallFailure> {
        let mut request = serde_json::to_value(params).map_err(|error| {
            CallFailure::Refused(format!("cannot write the task request: {error}"))
        })?;
        let ttl = u64::try_from(self.config.call_timeout.as_millis()).unwrap_or(u64::MAX);
        request["task"] = json!({ "ttl": ttl });
        let request = ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(request)));
        let created = self
            .send(peer, request, progress)
            .await
            .map_err(CallFailure::Service)?;
        let created = to_json(&created)?;
        let task = created.get("task").unwrap_or(&created);
        let Some(task_id) = task.get("taskId").and_then(Value::as_str) else {
            // A server may still answer with the result itself.
            return serde_json::from_value(created.clone()).map_err(|_| {
                CallFailure::Refused(format!(
                    "the server answered a task call with neither a task nor a result: {created}"
                ))
            });
        };
        let interval = poll_interval(task.get("pollInterval").and_then(Value::as_u64));
        follow_task(peer, TaskProtocol::Augmented, task_id.to_owned(), interval).await
    }
}

/// Whether `result` is a server's refusal to run the tool outside a task: "method not found"
/// (`-32601`), which the official TypeScript SDK sends as an error result
/// (`MCP error -32601: Tool … requires task augmentation …`) rather than a JSON-RPC error.
fn refused_outside_a_task(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
        && result.content.iter().any(|block| match block {
            ContentBlock::Text(text) => {
                text.text.starts_with("MCP error -32601") && text.text.contains("task")
            }
            _ => false,
        })
}

/// Where one call's progress goes, and the progress tokens routed there while it lasts.
struct CallProgress {
    progress: ToolProgress,
    /// The tool's global name, for the messages.
    tool: String,
    routes: std::sync::Mutex<Vec<ProgressRoute>>,
}

/// Work to start on the async runtime when dropped before it is disarmed: telling a server that
/// something it runs for a call nobody waits for any more is cancelled.
struct SpawnOnDrop(Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>);

impl SpawnOnDrop {
    fn new(work: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        SpawnOnDrop(Some(Box::pin(work)))
    }

    /// What it would have undone ended normally: nothing to do.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for SpawnOnDrop {
    fn drop(&mut self) {
        if let Some(work) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(work);
        }
    }
}

/// Tells the server that request `id`, whose answer nobody waits for any more, is cancelled.
async fn notify_cancelled(peer: rmcp::Peer<RoleClient>, id: rmcp::model::RequestId) {
    let notice = rmcp::model::CancelledNotificationParam::new(
        Some(id),
        Some("the cell no longer waits for this call".to_owned()),
    );
    if let Err(error) = peer.notify_cancelled(notice).await {
        tracing::debug!(%error, "cannot tell the server that a call is cancelled");
    }
}

/// Sends `tasks/cancel` for a task whose call nobody waits for any more.
async fn cancel_task(peer: rmcp::Peer<RoleClient>, protocol: TaskProtocol, task_id: String) {
    let sent = match protocol {
        TaskProtocol::Extension => peer
            .cancel_task(CancelTaskParams::new(task_id.clone()))
            .await
            .map(drop),
        TaskProtocol::Augmented => peer
            .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                "tasks/cancel",
                Some(json!({ "taskId": task_id })),
            )))
            .await
            .map(drop),
    };
    match sent {
        Ok(()) => tracing::info!(
            %task_id,
            "cancelled the task of a call the cell no longer waits for"
        ),
        Err(error) => {
            tracing::debug!(%task_id, %error, "cannot cancel the task of an abandoned call")
        }
    }
}

/// How a call failed, before it is put in words for the cell.
enum CallFailure {
    /// The request or its connection failed.
    Service(ServiceError),
    /// The server answered, and what it answered cannot become a result.
    Refused(String),
}

/// Which revision's task protocol a task follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskProtocol {
    /// The 2026-07-28 tasks extension (SEP-2663): `tasks/get` carries the result.
    Extension,
    /// The 2025-11-25 revision (SEP-1686): `tasks/result` carries the result.
    Augmented,
}

/// The shortest and longest pause between two polls of a task, whatever the server suggests.
const TASK_POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(5));

/// The pause between polls: the server's suggestion within [`TASK_POLL_BOUNDS`], 200 ms without
/// one.
fn poll_interval(suggested_ms: Option<u64>) -> Duration {
    suggested_ms
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_millis(200))
        .clamp(TASK_POLL_BOUNDS.0, TASK_POLL_BOUNDS.1)
}

fn to_json(result: &ServerResult) -> Result<Value, CallFailure> {
    serde_json::to_value(result)
        .map_err(|error| CallFailure::Refused(format!("cannot read the server's answer: {error}")))
}

/// Polls task `task_id` until it ends and returns its result. Dropped before then (the cell was
/// terminated, or the call timed out), it cancels the task.
async fn follow_task(
    peer: &rmcp::Peer<RoleClient>,
    protocol: TaskProtocol,
    task_id: String,
    mut interval: Duration,
) -> Result<CallToolResult, CallFailure> {
    let mut cancel = SpawnOnDrop::new(cancel_task(peer.clone(), protocol, task_id.clone()));
    loop {
        tokio::time::sleep(interval).await;
        let state = match protocol {
            TaskProtocol::Extension => peer
                .get_task(GetTaskParams::new(task_id.clone()))
                .await
                .map_err(CallFailure::Service)
                .and_then(|state| {
                    serde_json::to_value(&state).map_err(|error| {
                        CallFailure::Refused(format!("cannot read the task's state: {error}"))
                    })
                })?,
            TaskProtocol::Augmented => to_json(
                &peer
                    .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                        "tasks/get",
                        Some(json!({ "taskId": task_id })),
                    )))
                    .await
                    .map_err(CallFailure::Service)?,
            )?,
        };
        if let Some(suggested) = state
            .get("pollIntervalMs")
            .or_else(|| state.get("pollInterval"))
            .and_then(Value::as_u64)
        {
            interval = poll_interval(Some(suggested));
        }
        let message = state
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(|message| format!(" ({message})"))
            .unwrap_or_default();
        match state.get("status").and_then(Value::as_str) {
            Some("working") => continue,
            Some("input_required") => {
                return Err(CallFailure::Refused(format!(
                    "the tool's task asked for input{message} (elicitation or sampling), which a \
                     cell cannot give; the task was cancelled"
                )));
            }
            Some("cancelled") => {
                cancel.disarm();
                return Err(CallFailure::Refused(format!(
                    "the server cancelled the tool's task{message}"
                )));
            }
            Some("completed") if protocol == TaskProtocol::Extension => {
                cancel.disarm();
                let result = state.get("result").cloned().unwrap_or(Value::Null);
                return serde_json::from_value(result).map_err(|error| {
                    CallFailure::Refused(format!("the task's result is not a tool result: {error}"))
                });
            }
            Some("failed") if protocol == TaskProtocol::Extension => {
                cancel.disarm();
                let why = state
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("no reason given{message}"));
                return Err(CallFailure::Refused(format!(
                    "the tool's task failed: {why}"
                )));
            }
            Some("completed" | "failed") => {
                cancel.disarm();
                let result = peer
                    .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                        "tasks/result",
                        Some(json!({ "taskId": task_id })),
                    )))
                    .await
                    .map_err(CallFailure::Service)?;
                return match result {
                    ServerResult::CallToolResult(result) => Ok(result),
                    other => Err(CallFailure::Refused(format!(
                        "the task's result is not a tool result: {}",
                        to_json(&other)?
                    ))),
                };
            }
            other => {
                return Err(CallFailure::Refused(format!(
                    "the server reported the task in a state this client does not know: {other:?}"
                )));
            }
        }
    }
}

#[async_trait::async_trait]
impl ToolProvider for McpTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let (peer, generation) = self
            .client()
            .await
            .map_err(|error| ToolListError::unavailable(error.to_string()))?;
        // What the server says of using its tools (its `instructions`): part of each tool's
        // description, as a cell reads it in `ALL_TOOLS`.
        let instructions = peer
            .peer_info()
            .and_then(|info| info.instructions.clone())
            .filter(|instructions| !instructions.trim().is_empty());
        let tools = match peer.list_all_tools().await {
            Ok(tools) => tools,
            Err(error) => {
                self.forget(generation).await;
                return Err(ToolListError::unavailable(format!(
                    "cannot list the tools of the MCP server \"{}\": {error}",
                    self.config.namespace
                )));
            }
        };
        let schemas = tools
            .iter()
            .filter_map(|tool| {
                let schema = tool.output_schema.as_ref()?;
                Some((tool.name.to_string(), Value::Object((**schema).clone())))
            })
            .collect();
        *self
            .output_schemas
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = schemas;
        Ok(tools
            .into_iter()
            .map(|tool| ToolDefinition {
                result_type: Some(ResultType::CallToolResult),
                name: ToolName::namespaced(&self.config.namespace, tool.name.as_ref()),
                description: with_instructions(
                    tool.description
                        .as_deref()
                        .or(tool.title.as_deref())
                        .unwrap_or_default(),
                    instructions.as_deref(),
                ),
                kind: ToolKind::Function,
                input_schema: Some(Value::Object((*tool.input_schema).clone())),
                output_schema: tool
                    .output_schema
                    .map(|schema| Value::Object((*schema).clone())),
            })
            .collect())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        let ToolCallContext {
            cancellation,
            progress,
            ..
        } = context;
        let global_name = call.name.global_name();
        // rmcp sends a tree: the argument's text becomes one here, where it is sent.
        let input = call.input_value()?;
        let arguments: Option<Map<String, Value>> = match input {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments),
            Some(other) => {
                return Err(ToolError::invalid_arguments(format!(
                    "tools.{global_name} takes an object argument (MCP tool arguments are named), \
                     got {other}"
                )));
            }
        };
        let mut params = CallToolRequestParams::new(call.name.name.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // The server's progress notifications for this call reach the cell's watchers.
        let progress = CallProgress {
            progress,
            tool: global_name.clone(),
            routes: std::sync::Mutex::new(Vec::new()),
        };
        // A request that could not be sent never reached the server: reconnect and send it once
        // more. A connection that closed after sending is not retried (the call may have run).
        let mut attempts_left = 2;
        let answer = loop {
            attempts_left -= 1;
            let (peer, generation) = self
                .client()
                .await
                .map_err(|error| ToolError::unavailable(error.to_string()))?;
            // Dropping the request (on cancellation or timeout) tells the server to cancel it.
            let answer = tokio::select! {
                answer = tokio::time::timeout(self.config.call_timeout, self.call_once(&peer, &params, &progress)) => answer,
                _ = cancellation.cancelled() => return Err(ToolError::cancelled(format!("tools.{global_name} was cancelled"))),
            };
            match answer {
                Ok(Err(CallFailure::Service(ServiceError::TransportSend(_))))
                    if attempts_left > 0 =>
                {
                    self.forget(generation).await;
                }
                other => break (other, generation),
            }
        };
        let (answer, generation) = answer;
        match answer {
            Err(_) => Err(ToolError::unavailable(format!(
                "tools.{global_name} timed out: the MCP server \"{}\" did not answer within {:.1} s",
                self.config.namespace,
                self.config.call_timeout.as_secs_f64()
            ))),
            Ok(Err(CallFailure::Refused(why))) => Err(ToolError::failed(format!(
                "tools.{global_name} failed: {why}"
            ))),
            Ok(Err(CallFailure::Service(error))) => {
                let dead = matches!(
                    error,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                );
                if dead {
                    self.forget(generation).await;
                    Err(ToolError::unavailable(format!(
                        "tools.{global_name} failed: the MCP server \"{}\" is not running (it exited \
                         or closed the connection); the next call starts it again",
                        self.config.namespace
                    )))
                } else {
                    Err(ToolError::failed(format!(
                        "tools.{global_name} failed: {error}"
                    )))
                }
            }
            Ok(Ok(result)) => {
                let schema = self
                    .output_schemas
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .get(&call.name.name)
                    .cloned();
                call_result_to_value(result, schema.as_ref())
                    .map(|value| JsonText::from(&value))
                    .map_err(|why| ToolError::failed(format!("tools.{global_name}: {why}")))
            }
        }
    }

    fn tools_version(&self) -> u64 {
        self.tools_version.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn shutdown(&self) {
        McpTools::shutdown(self).await;
    }
}

/// The longest line of a server's standard error that is logged whole.
const MAX_STDERR_LINE: usize = 2000;

/// Logs what a stdio server writes to its standard error, a line at a time, each naming the
/// server, instead of letting it spill onto the terminal.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
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
fn process_alive(pid: u32) -> bool {
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

/// Checks `value` against `schema` as codemode reads schemas ([`codemode_protocol::schema`]): the
/// keywords a tool's TypeScript declaration shows, so that a value that passes is what the model
/// was told to expect. `at` names where `value` is, for the message.
pub fn check_against_schema(
    value: &Value,
    schema: &Value,
    at: &str,
) -> Result<(), codemode_protocol::schema::SchemaMismatch> {
    codemode_protocol::schema::check(value, &codemode_protocol::schema::Schema::read(schema), at)
}

/// Why a tool's result cannot be handed to the cell (the call then rejects with this text).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallResultError {
    /// Its `structuredContent` is not what the tool's output schema (and so its declaration)
    /// says.
    #[error("the server's structuredContent does not match the tool's output schema: {0}")]
    SchemaMismatch(codemode_protocol::schema::SchemaMismatch),
    /// It cannot be written as JSON.
    #[error("cannot read the tool's result: {0}")]
    Unreadable(serde_json::Error),
}

/// A tool's description with its server's instructions after it (the tool's own text first, so
/// that a one-line summary still says what the tool does).
fn with_instructions(description: &str, instructions: Option<&str>) -> String {
    match instructions {
        None => description.to_owned(),
        Some(instructions) if description.trim().is_empty() => instructions.trim().to_owned(),
        Some(instructions) => format!(
            "{}\n\nFrom the server's instructions: {}",
            description.trim_end(),
            instructions.trim()
        ),
    }
}

/// What a cell receives for a tool's result, as upstream code mode has it: the MCP
/// `CallToolResult` as the server sent it (`content`, and `structuredContent`, `isError` and
/// `_meta` when it sent them; a result with `isError: true` resolves too), declared as
/// `CallToolResult<T>` (`codemode_protocol::MCP_TYPES_DECLARATION`). The protocol's
/// `resultType` is not part of it. For a tool with an output schema, `structuredContent` (when
/// present) is checked against the schema, so that `T` is true of what the cell gets; a value
/// that does not match rejects, naming where.
pub fn call_result_to_value(
    result: CallToolResult,
    output_schema: Option<&Value>,
) -> Result<Value, CallResultError> {
    if let (Some(schema), Some(structured)) = (output_schema, &result.structured_content) {
        check_against_schema(structured, schema, "structuredContent")
            .map_err(CallResultError::SchemaMismatch)?;
    }
    let mut value = serde_json::to_value(&result).map_err(CallResultError::Unreadable)?;
    if let Value::Object(fields) = &mut value {
        fields.remove("resultType");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_the_call_tool_result_the_server_sent() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("3"),
            ContentBlock::image("AA==", "image/png"),
            ContentBlock::text("and more"),
        ]);
        result.structured_content = Some(json!({"sum": 3}));
        assert_eq!(
            call_result_to_value(result, None).unwrap(),
            json!({
                "content": [
                    {"type": "text", "text": "3"},
                    {"type": "image", "data": "AA==", "mimeType": "image/png"},
                    {"type": "text", "text": "and more"}
                ],
                "structuredContent": {"sum": 3},
                "isError": false
            })
        );
        let mut bare = CallToolResult::success(Vec::new());
        bare.is_error = None;
        assert_eq!(
            call_result_to_value(bare, None).unwrap(),
            json!({"content": []})
        );
    }

    #[test]
    fn an_error_result_resolves_with_is_error() {
        let result = CallToolResult::error(vec![
            ContentBlock::text("no such file"),
            ContentBlock::text("(at /x)"),
        ]);
        assert_eq!(
            call_result_to_value(result, None).unwrap(),
            json!({
                "content": [
                    {"type": "text", "text": "no such file"},
                    {"type": "text", "text": "(at /x)"}
                ],
                "isError": true
            })
        );
    }

    #[test]
    fn structured_content_is_checked_against_the_output_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "sum": {"type": "number"},
                "unit": {"enum": ["m", "s"]},
                "parts": {"type": "array", "items": {"type": "integer"}},
                "note": {"type": "string", "nullable": true}
            },
            "required": ["sum"],
            "additionalProperties": false
        });
        let with = |structured: Value| {
            let mut result = CallToolResult::success(vec![ContentBlock::text("…")]);
            result.structured_content = Some(structured);
            call_result_to_value(result, Some(&schema))
        };
        let good = json!({"sum": 3.5, "unit": "m", "parts": [1, 2], "note": null});
        assert_eq!(with(good.clone()).unwrap()["structuredContent"], good);
        for (bad, why) in [
            (json!({"unit": "m"}), "structuredContent.sum is missing"),
            (
                json!({"sum": "3"}),
                "structuredContent.sum should be number, and is a string",
            ),
            (
                json!({"sum": 1, "unit": "h"}),
                "structuredContent.unit is \"h\", not one of",
            ),
            (
                json!({"sum": 1, "parts": [1, 2.5]}),
                "structuredContent.parts[1] should be integer",
            ),
            (
                json!({"sum": 1, "extra": true}),
                "structuredContent.extra is not a property",
            ),
            (
                json!([1]),
                "structuredContent should be object, and is an array",
            ),
        ] {
            let error = with(bad).unwrap_err().to_string();
            assert!(
                error.contains("does not match the tool's output schema") && error.contains(why),
                "{error}"
            );
        }
        // No structured content: the declaration's `structuredContent?` holds.
        let without = call_result_to_value(CallToolResult::success(Vec::new()), Some(&schema));
        assert_eq!(without.unwrap(), json!({"content": [], "isError": false}));
    }

    #[test]
    fn a_refusal_outside_a_task_is_told_from_other_errors() {
        let refusal = CallToolResult::error(vec![ContentBlock::text(
            "MCP error -32601: Tool simulate-research-query requires task augmentation \
             (taskSupport: 'required')",
        )]);
        assert!(refused_outside_a_task(&refusal));
        let other = CallToolResult::error(vec![ContentBlock::text("MCP error -32602: bad topic")]);
        assert!(!refused_outside_a_task(&other));
        let success = CallToolResult::success(vec![ContentBlock::text(
            "MCP error -32601: a task, quoted in a successful result",
        )]);
        assert!(!refused_outside_a_task(&success));
    }

    #[test]
    fn progress_reads_as_the_tool_its_count_and_its_message() {
        assert_eq!(
            progress_text("fs__copy", 1.0, Some(4.0), Some("copying".to_owned())),
            "tools.fs__copy: 1/4 copying"
        );
        assert_eq!(progress_text("x", 0.5, None, None), "tools.x: 0.5");
        assert_eq!(
            progress_text("x", 2.0, None, Some("  ".to_owned())),
            "tools.x: 2"
        );
    }

    #[test]
    fn task_polls_follow_the_server_within_bounds() {
        assert_eq!(poll_interval(None), Duration::from_millis(200));
        assert_eq!(poll_interval(Some(1000)), Duration::from_secs(1));
        assert_eq!(poll_interval(Some(0)), TASK_POLL_BOUNDS.0);
        assert_eq!(poll_interval(Some(u64::MAX)), TASK_POLL_BOUNDS.1);
    }

    #[test]
    fn a_process_is_alive_until_it_exits() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }

    #[test]
    fn command_lines_split_into_program_and_arguments_as_a_shell_would() {
        assert_eq!(
            McpTransport::stdio_command("node  server.js --port 1"),
            Some(McpTransport::stdio(
                "node",
                vec!["server.js".into(), "--port".into(), "1".into()]
            ))
        );
        assert_eq!(
            McpTransport::stdio_command(r#""/opt/my tools/server" --name 'a b' c\ d"#),
            Some(McpTransport::stdio(
                "/opt/my tools/server",
                vec!["--name".into(), "a b".into(), "c d".into()]
            ))
        );
        assert_eq!(McpTransport::stdio_command("   "), None);
        assert_eq!(McpTransport::stdio_command("node 'unclosed"), None);
    }
}
