//! `codemode mcp`: an MCP server offering the `exec` and `wait` tools (the model-facing tools, code mode for any agent) to any
//! MCP-capable agent, over stdio (default) or streamable HTTP (`--http ADDR`).
//!
//! Each MCP session gets its own codemode session (its own cells and stored values); the store and
//! the downstream tools (`--mcp`) are shared. While `exec` or `wait` waits, the server sends
//! progress notifications (when the client asked for them with a progress token), including the
//! cell's `notify(...)` messages; when a cell finishes in the background, it sends a log message
//! saying so (completion push, completion push).
//!
//! A client that declares the MCP tasks extension (SEP-2663) gets an `exec` whose cell outlives
//! its yield time as a task (`CreateTaskResult`) instead of a "still running" result: the server
//! follows the cell to its end, the client polls `tasks/get` (which carries the whole output once
//! the cell ends) without spending the model's turns on `wait`, and `tasks/cancel` terminates the
//! cell. A cell that ends within its yield time is answered at once, as for any client.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use codemode_protocol::{OutputItem, WaitRequest};
use codemode_session::{
    ExecOptions, OutputMode, Session, SessionEvent, Store, StoredBytesBudget, ToolResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::setup::{DemoTools, SessionArgs, SetupError};
use crate::{exit, http};

/// How often a waiting call reports progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// How long an `exec` task lives: a cell still running then is terminated and the task fails;
/// an ended task stays readable as long again.
const EXEC_TASK_TTL: Duration = Duration::from_secs(60 * 60);

/// The poll interval an `exec` task suggests.
const EXEC_TASK_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How long one observation of a task's cell lasts (it ends earlier when the cell ends).
const EXEC_TASK_OBSERVATION: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Serve over streamable HTTP at this address (such as 127.0.0.1:8080, path /mcp) instead of
    /// stdio. Every request must then carry `Authorization: Bearer <token>`.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// HTTP: the tokens, one `TENANT TOKEN` per line; each tenant's stored values are its own.
    /// For one tenant, the environment variable CODEMODE_AUTH_TOKEN serves too.
    #[arg(long, value_name = "PATH")]
    pub auth_token_file: Option<PathBuf>,
    /// HTTP on a loopback address only: serve without tokens (anyone on this machine can run
    /// code through the server).
    #[arg(long)]
    pub no_auth: bool,
    /// HTTP: a browser origin allowed to call the server (such as http://localhost:3000).
    /// Requests from any other origin get 403. Repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// HTTP: another name the server is reached by, accepted in the Host header (its own address
    /// always is). Repeatable.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// The most MCP sessions served at once; the next one is refused until one ends.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SESSIONS)]
    pub max_sessions: usize,
    /// The most cells running (or waiting to be observed) across all sessions.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CELLS)]
    pub max_cells: usize,
    /// The most MCP sessions one tenant may have at once (default: half of --max-sessions when
    /// the server has several tenants, all of it when it has one).
    #[arg(long, value_name = "N")]
    pub max_sessions_per_tenant: Option<usize>,
    /// The most cells one tenant may run at once (default: half of --max-cells when the server
    /// has several tenants, all of it when it has one).
    #[arg(long, value_name = "N")]
    pub max_cells_per_tenant: Option<usize>,
    /// The most bytes of stored values one tenant's open sessions may hold together (default:
    /// half of --max-stored-bytes-total when the server has several tenants, all of it when it
    /// has one).
    #[arg(long, value_name = "BYTES")]
    pub max_stored_bytes_per_tenant: Option<usize>,
    /// The most bytes of stored values all open sessions may hold together: what the server
    /// keeps in memory for them.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_STORED_BYTES_TOTAL)]
    pub max_stored_bytes_total: usize,
    /// HTTP: the most connections open at once; the next waits to be accepted until one closes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// HTTP: how many seconds a client may take to send a request's headers before its
    /// connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = http::DEFAULT_HEADER_READ_TIMEOUT.as_secs())]
    pub header_read_timeout_secs: u64,
    /// After this many seconds without a request, a session's cells are terminated and its
    /// resources freed (its stored values stay in the store).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_IDLE_TIMEOUT_SECS)]
    pub idle_timeout_secs: u64,
    /// HTTP: whether clients get MCP sessions (`on`), or every request stands alone and names
    /// its codemode session in X-Codemode-Session (`off`: a load balancer may send any request to
    /// any server). Default: `off` when --store is a database that several servers share, `on`
    /// otherwise. Clients of MCP 2026-07-28 and later never get MCP sessions.
    #[arg(long, value_name = "on|off")]
    pub mcp_sessions: Option<McpSessions>,
    /// Offer the demo tools echo and sleep too (left out by default: the model sees only the
    /// tools of the servers you configure).
    #[arg(long)]
    pub demo_tools: bool,
    /// Print the description of `exec` the model would be given (with every tool declared), and
    /// exit: a way to check a configuration.
    #[arg(long)]
    pub print_exec_description: bool,
    #[command(flatten)]
    pub session: SessionArgs,
}

/// `--mcp-sessions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum McpSessions {
    /// MCP sessions, as the protocol before 2026-07-28 has them.
    On,
    /// No MCP sessions: every request stands alone.
    Off,
}

/// Default of `--max-sessions`.
const DEFAULT_MAX_SESSIONS: usize = 64;
/// Default of `--max-cells`.
const DEFAULT_MAX_CELLS: usize = 256;
/// Default of `--max-connections`.
const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// What all open sessions' stored values may hold together by default: 1 GiB.
const DEFAULT_MAX_STORED_BYTES_TOTAL: usize = 1 << 30;
/// Default of `--idle-timeout-secs`: half an hour.
const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 1800;

/// The header an HTTP client names its session with, so its stored values persist across
/// reconnects and restarts.
const SESSION_HEADER: &str = "x-codemode-session";

/// What every MCP session of this server shares.
struct Shared {
    args: SessionArgs,
    store: Arc<dyn Store>,
    tools: Arc<codemode_host_adapters::CompositeTools>,
    limits: ServerLimits,
    /// What all open sessions' stored values may hold, and each tenant's share of it.
    stored_total: Arc<StoredBytesBudget>,
    stored_per_tenant: std::sync::Mutex<HashMap<String, Arc<StoredBytesBudget>>>,
    /// The codemode sessions open now (for --max-cells and shutdown).
    live: std::sync::Mutex<Vec<std::sync::Weak<LiveSession>>>,
    /// The sessions clients named (X-Codemode-Session), by store key: whichever request or MCP
    /// session names one finds it here, so that cells outlive the request or MCP session that
    /// started them. Each leaves when it idles out.
    named: std::sync::Mutex<HashMap<String, Arc<LiveSession>>>,
    /// Held while a named session is looked up and opened, so that two requests naming it at
    /// once open it once.
    opening_named: tokio::sync::Mutex<()>,
    /// Cancelled on SIGTERM or SIGINT.
    shutting_down: CancellationToken,
}

/// The server-wide limits, and each tenant's share of them.
#[derive(Debug, Clone, Copy)]
struct ServerLimits {
    max_sessions: usize,
    max_cells: usize,
    max_sessions_per_tenant: usize,
    max_cells_per_tenant: usize,
    max_stored_bytes_total: usize,
    max_stored_bytes_per_tenant: usize,
    idle_timeout: Duration,
}

impl ServerLimits {
    fn new(args: &McpArgs, tenants: usize) -> Self {
        let max_sessions = args.max_sessions.max(1);
        let max_cells = args.max_cells.max(1);
        // With several tenants, none may take the whole server by default.
        let share = |whole: usize| {
            if tenants > 1 {
                whole.div_ceil(2)
            } else {
                whole
            }
        };
        ServerLimits {
            max_sessions,
            max_cells,
            max_sessions_per_tenant: args
                .max_sessions_per_tenant
                .unwrap_or_else(|| share(max_sessions))
                .clamp(1, max_sessions),
            max_cells_per_tenant: args
                .max_cells_per_tenant
                .unwrap_or_else(|| share(max_cells))
                .clamp(1, max_cells),
            max_stored_bytes_total: args.max_stored_bytes_total,
            max_stored_bytes_per_tenant: args
                .max_stored_bytes_per_tenant
                .unwrap_or_else(|| share(args.max_stored_bytes_total))
                .min(args.max_stored_bytes_total),
            idle_timeout: Duration::from_secs(args.idle_timeout_secs.max(1)),
        }
    }
}

impl Shared {
    /// The budget all sessions of `tenant` draw their stored values from.
    fn tenant_stored_budget(&self, tenant: &str) -> Arc<StoredBytesBudget> {
        let mut budgets = self
            .stored_per_tenant
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Arc::clone(budgets.entry(tenant.to_owned()).or_insert_with(|| {
            StoredBytesBudget::new(
                "the stored values of your tenant's open sessions (--max-stored-bytes-per-tenant)",
                self.limits.max_stored_bytes_per_tenant,
            )
        }))
    }

    /// The named session with this store key, if open.
    fn named_session(&self, store_key: &str) -> Option<Arc<LiveSession>> {
        self.named
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(store_key)
            .cloned()
    }

    fn live_sessions(&self) -> Vec<Arc<LiveSession>> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        live.retain(|session| session.strong_count() > 0);
        live.iter().filter_map(std::sync::Weak::upgrade).collect()
    }

    /// Terminates every cell of every session and waits for them (stores finish their commits).
    async fn shut_down_sessions(&self) {
        for live in self.live_sessions() {
            live.session.shutdown().await;
        }
    }
}

pub async fn serve(args: McpArgs) -> ExitCode {
    let demo = if args.demo_tools {
        DemoTools::Offered
    } else {
        DemoTools::LeftOut
    };
    let setup =
        async { Ok::<_, SetupError>((args.session.store().await?, args.session.tools(demo)?)) }
            .await;
    let (store, tools) = match setup {
        Ok(parts) => parts,
        Err(SetupError { message, usage }) => {
            eprintln!("error: {message}");
            return ExitCode::from(if usage { exit::USAGE } else { exit::FAILED });
        }
    };
    // Over HTTP the gate (and its tenants) comes first: the limits depend on how many tenants
    // share the server.
    let gate = match &args.http {
        None => None,
        Some(address) if !args.print_exec_description => match http_gate(&args, address).await {
            Ok(gate) => Some(gate),
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(exit::USAGE);
            }
        },
        Some(_) => None,
    };
    let tenants = gate.as_ref().map_or(1, |(_, gate)| gate.tenants());
    let limits = ServerLimits::new(&args, tenants);
    let shared = Arc::new(Shared {
        args: args.session.clone(),
        store,
        tools,
        limits,
        stored_total: StoredBytesBudget::new(
            "the stored values of all open sessions (--max-stored-bytes-total)",
            limits.max_stored_bytes_total,
        ),
        stored_per_tenant: std::sync::Mutex::new(HashMap::new()),
        live: std::sync::Mutex::new(Vec::new()),
        named: std::sync::Mutex::new(HashMap::new()),
        opening_named: tokio::sync::Mutex::new(()),
        shutting_down: CancellationToken::new(),
    });
    if args.print_exec_description {
        return print_exec_description(&shared).await;
    }
    tokio::spawn(cancel_on_signal(shared.shutting_down.clone()));
    let served = match gate {
        None => serve_stdio(Arc::clone(&shared)).await,
        Some((listener, gate)) => {
            let connections = http::ConnectionLimits {
                max_connections: args.max_connections,
                header_read_timeout: Duration::from_secs(args.header_read_timeout_secs.max(1)),
            };
            let mcp_sessions = args.mcp_sessions.unwrap_or_else(|| {
                let shared_store = args.session.store.as_ref().and_then(|store| store.to_str());
                if shared_store.is_some_and(codemode_host_adapters::is_database_url) {
                    McpSessions::Off
                } else {
                    McpSessions::On
                }
            });
            serve_http(
                Arc::clone(&shared),
                listener,
                gate,
                connections,
                mcp_sessions,
            )
            .await
        }
    };
    // Whatever ended the serving: stop every cell, and let the stores finish their commits;
    // then close the downstream servers (standard input first, so none dies mid-write).
    shared.shut_down_sessions().await;
    codemode_session::ToolProvider::shutdown(shared.tools.as_ref()).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Cancels `token` on SIGTERM or SIGINT.
async fn cancel_on_signal(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for SIGTERM and SIGINT; stop the server by killing it");
        return;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    tracing::info!("shutting down: no new requests; terminating running cells");
    token.cancel();
}

/// Binds the HTTP address and builds its gate, refusing to serve without a token where that is
/// unsafe.
async fn http_gate(
    args: &McpArgs,
    address: &str,
) -> Result<(tokio::net::TcpListener, http::Gate), String> {
    let authentication = http::authentication(
        args.auth_token_file.as_deref(),
        std::env::var("CODEMODE_AUTH_TOKEN")
            .ok()
            .filter(|token| !token.is_empty()),
        args.no_auth,
    )?;
    // Refuse before binding when the address alone says it is not loopback.
    if let Ok(requested) = address.parse::<std::net::SocketAddr>()
        && !requested.ip().is_loopback()
        && !matches!(authentication, Some(http::Authentication::Tokens(_)))
    {
        return Err(format!(
            "{requested} is not a loopback address: anyone who can reach it could run code; set a \
             token with --auth-token-file FILE (lines of TENANT TOKEN) or CODEMODE_AUTH_TOKEN \
             (--no-auth is only for loopback addresses)"
        ));
    }
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| format!("cannot listen on {address}: {error}"))?;
    let bound = listener
        .local_addr()
        .map_err(|error| format!("cannot tell the address bound: {error}"))?;
    let authentication = match authentication {
        Some(http::Authentication::Off) if !bound.ip().is_loopback() => {
            return Err(format!(
                "--no-auth is only for loopback addresses, and {bound} is not one: anyone who can                  reach it could run code; set a token with --auth-token-file FILE (lines of TENANT                  TOKEN) or CODEMODE_AUTH_TOKEN"
            ));
        }
        Some(http::Authentication::Off) => {
            eprintln!(
                "warning: serving {bound} without authentication (--no-auth): any program on this                  machine can run code and call your tools through it"
            );
            http::Authentication::Off
        }
        Some(tokens) => tokens,
        None => {
            return Err(format!(
                "serving MCP over HTTP needs a token, or anyone who can reach {bound} could run                  code: set one with --auth-token-file FILE (lines of TENANT TOKEN) or                  CODEMODE_AUTH_TOKEN{}",
                if bound.ip().is_loopback() {
                    ", or pass --no-auth to serve this loopback address without one"
                } else {
                    ""
                }
            ));
        }
    };
    let gate = http::Gate::new(
        authentication,
        bound,
        &args.allow_hosts,
        &args.allow_origins,
    );
    Ok((listener, gate))
}

async fn print_exec_description(shared: &Shared) -> ExitCode {
    let opened = shared
        .args
        .open(
            &shared.args.session,
            Arc::clone(&shared.store),
            Arc::clone(&shared.tools),
            shared.args.config(),
        )
        .await;
    match opened {
        Ok(session) => {
            println!("{}", exec_tool_description(&session));
            session.shutdown().await;
            ExitCode::SUCCESS
        }
        Err(SetupError { message, .. }) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// The description of `exec` as this server offers it.
fn exec_tool_description(session: &Session) -> String {
    format!(
        "{}\n\nPass the source in the `code` argument. `yield_time_ms` and `max_output_tokens` may \
         also be given as arguments; they win over the pragma line.",
        session.exec_description()
    )
}

/// The arguments `exec` takes.
const EXEC_ARGUMENTS: &[&str] = &["code", "yield_time_ms", "max_output_tokens"];

/// The arguments `wait` takes.
const WAIT_ARGUMENTS: &[&str] = &["cell_id", "yield_time_ms", "max_tokens", "terminate"];

/// An error naming every argument `tool` does not take, rather than ignoring them silently.
fn refuse_unknown_arguments(
    tool: &str,
    arguments: &Map<String, Value>,
    known: &[&str],
) -> Result<(), ErrorData> {
    let unknown: Vec<&str> = arguments
        .keys()
        .map(String::as_str)
        .filter(|name| !known.contains(name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ErrorData::invalid_params(
        format!(
            "{tool} does not take {}: its arguments are {}",
            unknown
                .iter()
                .map(|name| format!("\"{name}\""))
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        ),
        None,
    ))
}

/// Arguments the model got wrong, as a tool result with `isError` (not a JSON-RPC error), as the
/// 2025-11-25 revision asks: the model sees the reason and can fix its call.
fn invalid_arguments(error: ErrorData) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.message.into_owned())])
}

/// An optional non-negative integer argument.
fn count_argument(
    tool: &str,
    arguments: &Map<String, Value>,
    name: &str,
) -> Result<Option<u64>, ErrorData> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .filter(|count| *count <= codemode_protocol::MAX_SAFE_INTEGER)
            .map(Some)
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("{tool}: \"{name}\" must be a non-negative integer, not {value}"),
                    None,
                )
            }),
    }
}

async fn serve_stdio(shared: Arc<Shared>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = CodemodeServer::new(Arc::clone(&shared));
    let running = server.serve(crate::stdio::transport()).await?;
    let cancel = running.cancellation_token();
    tokio::select! {
        quit = running.waiting() => { quit?; }
        _ = shared.shutting_down.cancelled() => cancel.cancel(),
    }
    Ok(())
}

async fn serve_http(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    gate: http::Gate,
    connections: http::ConnectionLimits,
    mcp_sessions: McpSessions,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    // The gate checks Host and Origin itself, against the names this server is reached by; the
    // SDK's own Host check gets the same names.
    // A body past the limit is answered with 413 and a message, never dropped.
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(gate.allowed_hosts())
        .with_max_request_body_bytes(crate::stdio::MAX_LINE_BYTES);
    config.cancellation_token = shared.shutting_down.child_token();
    // Without MCP sessions every request is served on its own (clients of 2026-07-28 and later
    // always are): what outlives a request lives in the named sessions.
    config.legacy_session_mode = mcp_sessions == McpSessions::On;
    let factory_shared = Arc::clone(&shared);
    let sessions = Arc::new(LocalSessionManager::default());
    let service: StreamableHttpService<CodemodeServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(CodemodeServer::new(Arc::clone(&factory_shared))),
            Arc::clone(&sessions),
            config,
        );
    // The gate runs first (the outer layer), then the binding of MCP sessions to tenants.
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            http::SessionOwners::new(sessions),
            http::bind_sessions,
        ))
        .layer(axum::middleware::from_fn_with_state(gate, http::guard));
    // A parent process (or a test) reads where the server listens from this line.
    println!("listening on http://{}/mcp", listener.local_addr()?);
    http::serve(listener, router, connections, shared.shutting_down.clone()).await?;
    Ok(())
}

/// One open codemode session, whose tenant it is, when it was last used, and its `exec` tasks
/// (another session's task ids find nothing here).
struct LiveSession {
    session: Session,
    tenant: String,
    last_used: std::sync::Mutex<Instant>,
    tasks: TaskManager,
}

impl LiveSession {
    fn touch(&self) {
        *self
            .last_used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .elapsed()
    }
}

/// Whose stored values an MCP session uses: the store key of its codemode session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    /// Whose token the client holds (over stdio, the one local tenant).
    tenant: String,
    store_key: String,
    /// Whether the client named the session (X-Codemode-Session): then any request or MCP
    /// session that names it reaches it. An unnamed one lives and ends with its MCP session.
    named: bool,
}

impl Identity {
    /// Over stdio, the parent process owns the server: `--session` names the values. Over HTTP,
    /// the tenant of the token, and the session the client names in `X-Codemode-Session` or a
    /// fresh, unguessable one.
    fn of(shared: &Shared, extensions: &rmcp::model::Extensions) -> Result<Self, ErrorData> {
        let Some(parts) = extensions.get::<axum::http::request::Parts>() else {
            return Ok(Identity {
                tenant: LOCAL_TENANT.to_owned(),
                store_key: shared.args.session.clone(),
                named: false,
            });
        };
        let tenant = parts
            .extensions
            .get::<http::Tenant>()
            .map(|tenant| tenant.0.clone())
            .unwrap_or_else(|| http::ANONYMOUS_TENANT.to_owned());
        let (name, named) = match parts.headers.get(SESSION_HEADER) {
            Some(value) => {
                let name = value.to_str().unwrap_or_default();
                http::check_name("session", name)
                    .map_err(|message| ErrorData::invalid_request(message, None))?;
                (name.to_owned(), true)
            }
            None => (
                fresh_session_name().map_err(|message| ErrorData::internal_error(message, None))?,
                false,
            ),
        };
        Ok(Identity {
            store_key: format!("{tenant}/{name}"),
            tenant,
            named,
        })
    }
}

/// The tenant of a server over stdio: the parent process that owns it.
const LOCAL_TENANT: &str = "local";

/// 128 random bits, as hex: a name no other client can guess.
fn fresh_session_name() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|error| format!("cannot make a session name: no randomness ({error})"))?;
    Ok(format!(
        "anonymous-{}",
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    ))
}

/// The handler of one MCP session (without MCP sessions, of one request).
#[derive(Clone)]
struct CodemodeServer {
    shared: Arc<Shared>,
    state: Arc<tokio::sync::Mutex<ServerState>>,
}

/// What one MCP session holds: who it is (fixed at its first request) and, for a session the
/// client did not name, its codemode session while open (closed after the idle timeout, opened
/// again on the next request). A named session lives in [`Shared::named`] instead.
#[derive(Default)]
struct ServerState {
    identity: Option<Identity>,
    live: Option<Arc<LiveSession>>,
}

impl CodemodeServer {
    fn new(shared: Arc<Shared>) -> Self {
        CodemodeServer {
            shared,
            state: Arc::new(tokio::sync::Mutex::new(ServerState::default())),
        }
    }

    /// The codemode session of this MCP session or request, opened on first use (and again
    /// after it idled out), within the server's session limits: a named one from the server's
    /// registry, an unnamed one from this MCP session's state.
    async fn session(
        &self,
        extensions: &rmcp::model::Extensions,
        peer: &Peer<RoleServer>,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        let shared = &self.shared;
        if shared.shutting_down.is_cancelled() {
            return Err(ErrorData::internal_error(
                "the server is shutting down and starts nothing new",
                None,
            ));
        }
        let mut state = self.state.lock().await;
        let identity = match &state.identity {
            Some(identity) => identity.clone(),
            None => {
                let identity = Identity::of(shared, extensions)?;
                state.identity = Some(identity.clone());
                identity
            }
        };
        if identity.named {
            drop(state);
            let _opening = shared.opening_named.lock().await;
            if let Some(live) = shared.named_session(&identity.store_key) {
                live.touch();
                return Ok(live);
            }
            let live = self.open(&identity, peer).await?;
            shared
                .named
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(identity.store_key.clone(), Arc::clone(&live));
            tokio::spawn(close_when_idle(
                Owner::Server(Arc::downgrade(shared), identity.store_key.clone()),
                Arc::downgrade(&live),
                shared.limits.idle_timeout,
            ));
            return Ok(live);
        }
        if let Some(live) = &state.live {
            live.touch();
            return Ok(Arc::clone(live));
        }
        let live = self.open(&identity, peer).await?;
        tokio::spawn(close_when_idle(
            Owner::McpSession(Arc::downgrade(&self.state)),
            Arc::downgrade(&live),
            shared.limits.idle_timeout,
        ));
        state.live = Some(Arc::clone(&live));
        Ok(live)
    }

    /// Opens the codemode session of `identity`, within the server's session limits; completions
    /// of an unnamed session's cells are pushed to `peer`.
    async fn open(
        &self,
        identity: &Identity,
        peer: &Peer<RoleServer>,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        let shared = &self.shared;
        let live = shared.live_sessions();
        let open = live.len();
        if open >= shared.limits.max_sessions {
            return Err(ErrorData::internal_error(
                format!(
                    "the server already serves {open} sessions, its --max-sessions limit of {}; \
                     close one, or try again later",
                    shared.limits.max_sessions
                ),
                None,
            ));
        }
        let yours = live
            .iter()
            .filter(|live| live.tenant == identity.tenant)
            .count();
        if yours >= shared.limits.max_sessions_per_tenant {
            return Err(ErrorData::internal_error(
                format!(
                    "your tenant already has {yours} sessions, the --max-sessions-per-tenant \
                     limit of {}; close one, or try again later",
                    shared.limits.max_sessions_per_tenant
                ),
                None,
            ));
        }
        drop(live);
        let mut config = shared.args.config();
        // A long-running server bounds what it buffers per cell (server output mode).
        config.output_mode = OutputMode::server();
        // Cells of different tenants never share an engine process.
        config.tenant = Some(identity.tenant.clone());
        config.stored_bytes_budgets = vec![
            Arc::clone(&shared.stored_total),
            shared.tenant_stored_budget(&identity.tenant),
        ];
        let session = shared
            .args
            .open(
                &identity.store_key,
                Arc::clone(&shared.store),
                Arc::clone(&shared.tools),
                config,
            )
            .await
            .map_err(|error| ErrorData::internal_error(error.message, None))?;
        let live = Arc::new(LiveSession {
            session,
            tenant: identity.tenant.clone(),
            last_used: std::sync::Mutex::new(Instant::now()),
            tasks: TaskManager::new(),
        });
        shared
            .live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(Arc::downgrade(&live));
        // An unnamed session has one MCP session: it is told. A named one may have many, or
        // none (requests that stand alone): each MCP session subscribes when it starts.
        if !identity.named {
            push_completions(&live.session, peer.clone());
        }
        Ok(live)
    }

    /// Refuses a new cell when the server runs its --max-cells limit of cells already, or the
    /// tenant its share.
    fn check_cell_limit(&self, tenant: &str) -> Result<(), ErrorData> {
        let live = self.shared.live_sessions();
        let yours: usize = live
            .iter()
            .filter(|live| live.tenant == tenant)
            .map(|live| live.session.active_cells())
            .sum();
        let running: usize = live.iter().map(|live| live.session.active_cells()).sum();
        if running >= self.shared.limits.max_cells {
            return Err(ErrorData::internal_error(
                format!(
                    "the server already runs {running} cells, its --max-cells limit of {}; wait \
                     for one to finish, or terminate one with wait {{\"terminate\": true}}",
                    self.shared.limits.max_cells
                ),
                None,
            ));
        }
        if yours >= self.shared.limits.max_cells_per_tenant {
            return Err(ErrorData::internal_error(
                format!(
                    "your tenant already runs {yours} cells, the --max-cells-per-tenant limit of \
                     {}; wait for one to finish, or terminate one with wait {{\"terminate\": true}}",
                    self.shared.limits.max_cells_per_tenant
                ),
                None,
            ));
        }
        Ok(())
    }

    async fn exec(
        &self,
        arguments: Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parsed = (|| {
            refuse_unknown_arguments("exec", &arguments, EXEC_ARGUMENTS)?;
            let Some(Value::String(code)) = arguments.get("code") else {
                return Err(ErrorData::invalid_params(
                    "exec takes {\"code\": \"<JavaScript source>\"}: the code argument is missing or not a string",
                    None,
                ));
            };
            let options = ExecOptions::default()
                .with_yield_time_ms(count_argument("exec", &arguments, "yield_time_ms")?)
                .with_max_output_tokens(count_argument("exec", &arguments, "max_output_tokens")?);
            Ok((code, options))
        })();
        let (code, options) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return Ok(invalid_arguments(error).into()),
        };
        let as_task = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        let live = self.session(&context.extensions, &context.peer).await?;
        self.check_cell_limit(&live.tenant)?;
        let session = &live.session;
        let call_id = format!("mcp-{}", request_id_text(&context));
        let progress = Progress::start(&context, session, Watched::Call(call_id.clone()));
        let tools_before = session.tools();
        let result = session.exec_tool_with(&call_id, code, options).await;
        live.touch();
        progress.stop();
        // A downstream server's tools changed and the session listed them again for this cell:
        // `exec`'s description (which declares them) changed too, so tell the client.
        if !Arc::ptr_eq(&tools_before, &session.tools())
            && let Err(error) = context.peer.notify_tool_list_changed().await
        {
            tracing::debug!(%error, "cannot tell the client that the tools changed");
        }
        if as_task && let Some(cell_id) = result.running_cell_id.clone() {
            let max_tokens = options.max_output_tokens;
            let options = TaskOptions::new()
                .with_ttl_ms(duration_ms(EXEC_TASK_TTL))
                .with_poll_interval_ms(duration_ms(EXEC_TASK_POLL_INTERVAL))
                .with_status_message(format!("cell {cell_id} is running"));
            let tasks = live.tasks.clone();
            let task = tasks.spawn(options, move |task| {
                Box::pin(follow_cell(live, cell_id, result, max_tokens, task))
            });
            return Ok(CreateTaskResult::new(task).into());
        }
        Ok(to_call_tool_result(result).into())
    }

    async fn wait(
        &self,
        arguments: Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let parsed = refuse_unknown_arguments("wait", &arguments, WAIT_ARGUMENTS).and_then(|()| {
            serde_json::from_value::<WaitRequest>(Value::Object(arguments)).map_err(|error| {
                ErrorData::invalid_params(
                    format!("wait takes {{\"cell_id\": \"<id>\", \"yield_time_ms\"?, \"max_tokens\"?, \"terminate\"?}}: {error}"),
                    None,
                )
            })
        });
        let request = match parsed {
            Ok(request) => request,
            Err(error) => return Ok(invalid_arguments(error)),
        };
        let live = self.session(&context.extensions, &context.peer).await?;
        let session = &live.session;
        let progress = Progress::start(&context, session, Watched::Cell(request.cell_id.clone()));
        let result = session.wait_tool(request).await;
        live.touch();
        progress.stop();
        Ok(to_call_tool_result(result))
    }
}

impl ServerHandler for CodemodeServer {
    // Logging is deprecated in the SDK but still the standard way to push a message unprompted
    // (completion push); see `push_log`.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_tasks()
                .build(),
        )
        .with_instructions(
            "Run JavaScript that orchestrates tools with `exec`; pick up scripts still running with `wait`.",
        )
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let live = self.session(&context.extensions, &context.peer).await?;
        live.tasks
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // An exec task never asks for input; this answers unknown ids and stray responses alike.
        let live = self.session(&context.extensions, &context.peer).await?;
        live.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let live = self.session(&context.extensions, &context.peer).await?;
        live.tasks.cancel_task(&request.task_id)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Open the session now, so that completion push starts with it; a named session, which
        // other MCP sessions may share, tells each of them.
        match self.session(&context.extensions, &context.peer).await {
            Err(error) => {
                tracing::warn!(error = %error.message, "cannot open the session of a new MCP client");
            }
            Ok(live) => {
                let named = self
                    .state
                    .lock()
                    .await
                    .identity
                    .as_ref()
                    .is_some_and(|identity| identity.named);
                if named {
                    push_completions(&live.session, context.peer.clone());
                }
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let live = self.session(&context.extensions, &context.peer).await?;
        let session = &live.session;
        let exec_schema = json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "JavaScript (or TypeScript) source, optionally starting with a // @exec: {...} pragma line."
                },
                "yield_time_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "How long to wait for the script before returning; wins over the pragma."
                },
                "max_output_tokens": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The output budget of the result; wins over the pragma."
                }
            },
            "required": ["code"],
            "additionalProperties": false
        });
        let exec = Tool::new("exec", exec_tool_description(session), object(exec_schema));
        let wait = Tool::new(
            "wait",
            session.wait_description(),
            object(session.wait_input_schema()),
        );
        Ok(ListToolsResult::with_all_items(vec![exec, wait]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            "exec" => return self.exec(arguments, context).await,
            "wait" => self.wait(arguments, context).await?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("there is no tool named {other:?}; this server offers exec and wait"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// An `exec` task: observes cell `cell_id` until it ends and answers with everything it showed,
/// from `first` (the `exec` observation that made the task) on. `tasks/cancel` terminates the
/// cell; so does the task being dropped before the cell ends (its time to live ran out, or the
/// server stops).
async fn follow_cell(
    live: Arc<LiveSession>,
    cell_id: String,
    first: ToolResult,
    max_tokens: Option<u64>,
    task: TaskContext,
) -> Result<CallToolResult, TaskExit> {
    let mut terminate = TerminateOnDrop {
        live: Some(Arc::clone(&live)),
        cell_id: cell_id.clone(),
    };
    let began = Instant::now();
    let mut items = first.items;
    loop {
        let request = WaitRequest {
            cell_id: cell_id.clone(),
            yield_time_ms: Some(duration_ms(EXEC_TASK_OBSERVATION)),
            max_tokens,
            terminate: false,
        };
        let observed = tokio::select! {
            observed = live.session.wait_tool(request) => observed,
            () = task.cancelled() => {
                terminate.disarm();
                let request = WaitRequest { cell_id: cell_id.clone(), yield_time_ms: None, max_tokens, terminate: true };
                live.session.wait_tool(request).await;
                live.touch();
                tracing::info!(cell = %cell_id, "the client cancelled an exec task; its cell was terminated");
                return Err(TaskExit::Cancelled);
            }
        };
        live.touch();
        let ended = observed.running_cell_id.is_none();
        items.extend(observed.items);
        if ended {
            terminate.disarm();
            return Ok(to_call_tool_result(ToolResult::new(
                items,
                observed.is_error,
            )));
        }
        task.set_status_message(format!(
            "cell {cell_id} has been running for {:.0} s",
            began.elapsed().as_secs_f64()
        ));
    }
}

/// Terminates the cell of an `exec` task that is dropped before the cell ends.
struct TerminateOnDrop {
    live: Option<Arc<LiveSession>>,
    cell_id: String,
}

impl TerminateOnDrop {
    /// The cell ended, or is terminated already.
    fn disarm(&mut self) {
        self.live = None;
    }
}

impl Drop for TerminateOnDrop {
    fn drop(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cell_id = std::mem::take(&mut self.cell_id);
        runtime.spawn(async move {
            tracing::info!(cell = %cell_id, "an exec task ended before its cell (its time to live ran out, or the server stops); terminating the cell");
            let request = WaitRequest {
                cell_id,
                yield_time_ms: None,
                max_tokens: None,
                terminate: true,
            };
            live.session.wait_tool(request).await;
        });
    }
}

/// A duration in whole milliseconds, as the task fields carry it.
fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Completion push: tells the client about cells that finish while nobody waits on them, for as
/// long as the session lives.
fn push_completions(session: &Session, peer: Peer<RoleServer>) {
    let mut events = session.subscribe();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let SessionEvent::CellFinished {
                cell_id,
                error_text,
            } = event
            {
                let status = if error_text.is_some() {
                    "failed"
                } else {
                    "completed"
                };
                let message = format!(
                    "Cell {cell_id} {status} in the background; call wait with cell_id \"{cell_id}\" for its output."
                );
                if push_log(
                    &peer,
                    json!({"cell_id": cell_id, "status": status, "message": message}),
                )
                .await
                .is_err()
                {
                    break;
                }
            }
        }
    });
}

/// Who holds a session open: an MCP session (an unnamed session), or the server's registry of
/// named sessions, under its store key.
enum Owner {
    McpSession(std::sync::Weak<tokio::sync::Mutex<ServerState>>),
    Server(std::sync::Weak<Shared>, String),
}

/// Closes a session nobody has used for `idle_timeout`: its cells are terminated and its
/// resources freed. It opens again (with the same stored values) on the next request that needs
/// it. Ends when the session or its owner is gone.
async fn close_when_idle(owner: Owner, live: std::sync::Weak<LiveSession>, idle_timeout: Duration) {
    let check_every = (idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::time::sleep(check_every).await;
        let Some(session) = live.upgrade() else {
            return;
        };
        if session.idle_for() < idle_timeout {
            continue;
        }
        let released = match &owner {
            Owner::McpSession(state) => {
                let Some(state) = state.upgrade() else {
                    return;
                };
                let mut state = state.lock().await;
                let current = state
                    .live
                    .as_ref()
                    .is_some_and(|current| Arc::ptr_eq(current, &session));
                if current {
                    state.live = None;
                }
                current
            }
            Owner::Server(shared, store_key) => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                // Under the opening lock: a request that names it now opens a new one after.
                let _opening = shared.opening_named.lock().await;
                let mut named = shared
                    .named
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let current = named
                    .get(store_key)
                    .is_some_and(|current| Arc::ptr_eq(current, &session));
                if current {
                    named.remove(store_key);
                }
                current
            }
        };
        if !released {
            return;
        }
        tracing::info!(
            idle_secs = idle_timeout.as_secs(),
            "closing a session that was idle past --idle-timeout-secs"
        );
        session.session.shutdown().await;
        return;
    }
}

#[allow(deprecated)]
/// Sends a log message to the client. MCP logging is deprecated in the SDK, but it is still the
/// one standard way for a server to tell a client something unprompted.
async fn push_log(peer: &Peer<RoleServer>, data: Value) -> Result<(), rmcp::ServiceError> {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
    let mut message = LoggingMessageNotificationParam::new(LoggingLevel::Info, data);
    message.logger = Some("codemode".to_owned());
    peer.notify_logging_message(message).await
}

fn object(schema: Value) -> Map<String, Value> {
    match schema {
        Value::Object(object) => object,
        _ => Map::new(),
    }
}

fn request_id_text(context: &RequestContext<RoleServer>) -> String {
    serde_json::to_value(&context.id)
        .map(|id| match id {
            Value::String(text) => text,
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Which notifications belong to a waiting call.
enum Watched {
    /// Those of the cell `exec` starts with this call id.
    Call(String),
    /// Those of this cell.
    Cell(String),
}

/// Progress notifications for one waiting call, when the client gave a progress token.
struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(context: &RequestContext<RoleServer>, session: &Session, watched: Watched) -> Self {
        let Some(token) = context.meta.get_progress_token() else {
            return Progress { task: None };
        };
        let peer = context.peer.clone();
        let mut events = session.subscribe();
        let began = Instant::now();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
            ticks.tick().await;
            let mut step = 0.0;
            loop {
                let message = tokio::select! {
                    _ = ticks.tick() => format!("running for {:.0} s", began.elapsed().as_secs_f64()),
                    event = events.recv() => match event {
                        Ok(SessionEvent::Notification { cell_id, call_id, text }) => {
                            let ours = match &watched {
                                Watched::Call(id) => *id == call_id,
                                Watched::Cell(id) => *id == cell_id,
                            };
                            if !ours {
                                continue;
                            }
                            text
                        }
                        Ok(_) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                };
                step += 1.0;
                let notification =
                    ProgressNotificationParam::new(token.clone(), step).with_message(message);
                if peer.notify_progress(notification).await.is_err() {
                    return;
                }
            }
        });
        Progress { task: Some(task) }
    }

    fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

/// A model-facing result as an MCP tool result: text as text blocks, images and audio as theirs.
fn to_call_tool_result(result: ToolResult) -> CallToolResult {
    let content: Vec<ContentBlock> = result
        .items
        .into_iter()
        .map(|item| match item {
            OutputItem::Text { text } => ContentBlock::text(text),
            OutputItem::Image(image) => match split_data_url(&image.image_url) {
                Some((mime, data)) => ContentBlock::image(data, mime),
                None => ContentBlock::text(format!(
                    "[image that is not a base64 data URL: {} bytes]",
                    image.image_url.len()
                )),
            },
            OutputItem::Audio(audio) => match split_data_url(&audio.audio_url) {
                Some((mime, data)) => ContentBlock::audio(data, mime),
                None => ContentBlock::text(format!(
                    "[audio that is not a base64 data URL: {} bytes]",
                    audio.audio_url.len()
                )),
            },
        })
        .collect();
    if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

/// `data:<mime>;base64,<data>` as (mime, data).
fn split_data_url(url: &str) -> Option<(String, String)> {
    let rest = url
        .get(..5)
        .filter(|scheme| scheme.eq_ignore_ascii_case("data:"))
        .map(|_| &url[5..])?;
    let (header, data) = rest.split_once(',')?;
    let mime = header.strip_suffix(";base64")?;
    Some((mime.to_owned(), data.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_into_mime_and_data() {
        assert_eq!(
            split_data_url("data:image/png;base64,AAA="),
            Some(("image/png".into(), "AAA=".into()))
        );
        assert_eq!(
            split_data_url("DATA:audio/wav;base64,UklG"),
            Some(("audio/wav".into(), "UklG".into()))
        );
        assert_eq!(split_data_url("data:text/plain,hello"), None);
        assert_eq!(split_data_url("https://x"), None);
    }
}
