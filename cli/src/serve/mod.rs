//! `codemode mcp`: an MCP server offering the `exec` and `wait` tools (the model-facing tools,
//! code mode for any agent) to any MCP-capable agent, over stdio (default) or streamable HTTP
//! (`--http ADDR`).
//!
//! Each client identity gets its own codemode session (its own cells and stored values): over
//! HTTP the tenant of the token and the session named in `X-Codemode-Session` (a named session is
//! reached by any request that names it) or a fresh unnamed one per MCP session; over stdio
//! `--session`. The store and the downstream tools (`--mcp`) are shared. While `exec` or `wait`
//! waits, the server sends progress notifications (when the client asked for them with a progress
//! token), including the cell's `notify(...)` messages; when a cell finishes in the background, it
//! sends a log message saying so (completion push).
//!
//! A client that declares the MCP tasks extension (SEP-2663) gets an `exec` whose cell outlives
//! its yield time as a task (`CreateTaskResult`) instead of a "still running" result: the server
//! follows the cell to its end, the client polls `tasks/get` (which carries the whole output once
//! the cell ends) without spending the model's turns on `wait`, and `tasks/cancel` terminates the
//! cell. A cell that ends within its yield time is answered at once, as for any client.
//!
//! The parts, in layers, each importing only from the layers below it (the tidy test holds them
//! to it): `args` (the flags); `identity` (who a request is), `results` (a result as MCP),
//! `limits` (the limits and their `Slots`), `progress` (notifications while a call waits), `push`
//! (completion push); `admission` (the one path by which a session or a cell takes its slot) and
//! `cluster` (routing between the servers of a cluster, here in the server, not in the `session`
//! crate); `live` (one open session); `registry` (the open and named sessions) and `tasks`
//! (`exec` as a task); `sessions` (opening, admitting, closing when idle); `handler` (the MCP
//! surface, every method of `CodemodeServer`); and this file: start-up (store, tools, the HTTP
//! gate), the transports and shutdown.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use crate::setup::{DemoTools, SetupError};
use crate::{exit, http};

pub use args::{McpArgs, McpSessions};
use cluster::Cluster;
use handler::{CodemodeServer, exec_tool_description};
use limits::ServerLimits;
use registry::SessionRegistry;
use sessions::Shared;

// The serving layers, bottom to top: each file imports only from the layers below it (the tidy
// test holds them to it).
mod admission;
mod args;
mod identity;
mod limits;
mod progress;
mod push;
mod questions;
mod results;
mod user;

mod cluster;

mod live;

mod registry;
mod retries;
mod tasks;

mod sessions;

mod handler;
mod ops;

pub async fn serve(args: McpArgs) -> ExitCode {
    let demo = if args.demo_tools {
        DemoTools::Offered
    } else {
        DemoTools::LeftOut
    };
    let toolset = match crate::toolset::ToolSet::for_args(&args.session, demo, false) {
        Ok(tools) => tools,
        Err(SetupError { message, usage }) => {
            eprintln!("error: {message}");
            return ExitCode::from(if usage { exit::USAGE } else { exit::FAILED });
        }
    };
    // A client's first `tools/list` waits for slow downstream servers only so long (those left
    // arrive later, with `notifications/tools/list_changed`); printing the description waits
    // for all of them.
    if args.startup_window_ms > 0 && !args.print_exec_description {
        toolset
            .provider
            .set_startup_window(Some(Duration::from_millis(args.startup_window_ms)));
    }
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
    // A server of a cluster registers before it serves, and admits the other servers.
    let cluster = match Cluster::join(&args).await {
        Ok(cluster) => cluster,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let gate = match (gate, &cluster) {
        (Some((listener, gate)), Some(cluster)) => match gate.with_cluster_token(cluster.token()) {
            Ok(gate) => Some((listener, gate)),
            Err(message) => {
                eprintln!("error: {message}");
                cluster.leave().await;
                return ExitCode::from(exit::USAGE);
            }
        },
        (gate, _) => gate,
    };
    let tenants = gate.as_ref().map_or(1, |(_, gate)| gate.tenants());
    let limits = ServerLimits::new(&args, tenants);
    // A database holds each tenant to its limit across every server that shares it.
    let store = match args
        .session
        .store(Some(limits.max_stored_bytes_per_tenant))
        .await
    {
        Ok(store) => store,
        Err(SetupError { message, usage }) => {
            eprintln!("error: {message}");
            if let Some(cluster) = &cluster {
                cluster.leave().await;
            }
            return ExitCode::from(if usage { exit::USAGE } else { exit::FAILED });
        }
    };
    let request_state = match retries::state_codec() {
        Ok(codec) => codec,
        Err(message) => {
            eprintln!("error: cannot make the key that seals request state: {message}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let shutting_down = CancellationToken::new();
    let shared = Arc::new(Shared {
        args: args.session.clone(),
        store,
        tools: Arc::clone(&toolset.provider),
        toolset: Arc::new(toolset),
        max_wait: (args.max_wait_ms > 0).then(|| Duration::from_millis(args.max_wait_ms)),
        request_state,
        limits,
        sessions: SessionRegistry::new(&limits),
        cluster,
        trace_content: args.trace_content,
        calls_in_flight: Default::default(),
        answering: http::Answering::new(shutting_down.clone()),
        draining: CancellationToken::new(),
        shutting_down,
    });
    if let Some(cluster) = &shared.cluster {
        cluster.renew_until(shared.shutting_down.clone());
    }
    if args.print_exec_description {
        return print_exec_description(&shared).await;
    }
    crate::telemetry::metrics::observe(Arc::new(Observed(Arc::downgrade(&shared))));
    let ops = ops::Ops::new(Arc::clone(&shared));
    let mut ops_bound = None;
    if let Some(address) = &args.ops_listen {
        match serve_ops(&ops, address, shared.shutting_down.clone()).await {
            Ok(bound) => ops_bound = Some(bound),
            Err(message) => {
                eprintln!("error: {message}");
                if let Some(cluster) = &shared.cluster {
                    cluster.leave().await;
                }
                return ExitCode::from(exit::USAGE);
            }
        }
    }
    tokio::spawn(drain_on_signal(
        Arc::clone(&shared),
        Duration::from_secs(args.drain_timeout),
    ));
    tokio::spawn(reload_on_change(Arc::clone(&shared), args.watch_config));
    let served = match gate {
        None => {
            // Standard output is the MCP channel here.
            if let Some(bound) = ops_bound {
                eprintln!("operations on http://{bound}/");
            }
            serve_stdio(Arc::clone(&shared)).await
        }
        Some((listener, gate)) => {
            let connections = http::ConnectionLimits {
                max_connections: args.max_connections,
                header_read_timeout: Duration::from_secs(args.header_read_timeout_secs.max(1)),
            };
            let mcp_sessions =
                args.mcp_sessions
                    .unwrap_or(if args.session.database_url().is_some() {
                        McpSessions::Off
                    } else {
                        McpSessions::On
                    });
            serve_http(
                Arc::clone(&shared),
                &ops,
                ops_bound,
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
    if let Some(cluster) = &shared.cluster {
        cluster.leave().await;
    }
    codemode_session::ToolProvider::shutdown(shared.tools.as_ref()).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// On SIGTERM, drains: takes no new session or cell, answers `/readyz` with 503, and lets the
/// running cells finish for up to `drain_timeout` (their stored values are committed as they
/// complete) and their results be collected and sent (a `wait` in flight or arriving meanwhile
/// is answered); then, or at once on SIGINT or a second SIGTERM, shuts down (what is left is
/// terminated). A server of a cluster shuts down at once: its sessions go on on the others, as
/// when a server dies.
async fn drain_on_signal(shared: Arc<Shared>, drain_timeout: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for SIGTERM and SIGINT; stop the server by killing it");
        return;
    };
    let drain = tokio::select! {
        _ = terminate.recv() => shared.cluster.is_none(),
        _ = interrupt.recv() => false,
        () = shared.shutting_down.cancelled() => return,
    };
    shared.draining.cancel();
    if drain {
        let running = shared.running_cells();
        tracing::info!(
            running,
            "draining: no new sessions or cells; letting running cells finish for up to {} s",
            drain_timeout.as_secs()
        );
        let deadline = tokio::time::Instant::now() + drain_timeout;
        let mut look = tokio::time::interval(DRAIN_LOOK_EVERY);
        loop {
            tokio::select! {
                _ = look.tick() => {
                    if shared.drained() {
                        tracing::info!("drained: every cell has ended and its result was sent");
                        break;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(
                        running = shared.running_cells(),
                        "the drain timed out (--drain-timeout); terminating the cells left"
                    );
                    break;
                }
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
            }
        }
    }
    tracing::info!("shutting down: terminating what is left");
    shared.shutting_down.cancel();
}

/// How often a drain looks whether cells still run.
const DRAIN_LOOK_EVERY: Duration = Duration::from_millis(100);

/// The server's state as metrics read it (nothing once the server is gone).
struct Observed(std::sync::Weak<Shared>);

impl crate::telemetry::metrics::ServerState for Observed {
    fn cells(&self) -> (u64, u64) {
        let Some(shared) = self.0.upgrade() else {
            return (0, 0);
        };
        let (mut running, mut registered) = (0, 0);
        for live in shared.sessions.live_sessions() {
            running += live.session.running_cells() as u64;
            registered += live.session.active_cells() as u64;
        }
        (running, registered.saturating_sub(running))
    }

    fn engine(&self) -> codemode_engine::EngineStats {
        self.0
            .upgrade()
            .map(|shared| shared.args.engine_stats())
            .unwrap_or_default()
    }

    fn stored_bytes(&self) -> Vec<(String, u64)> {
        let Some(shared) = self.0.upgrade() else {
            return Vec::new();
        };
        let mut by_tenant = std::collections::BTreeMap::<String, u64>::new();
        for live in shared.sessions.live_sessions() {
            *by_tenant.entry(live.tenant.to_string()).or_default() +=
                live.session.stored_bytes() as u64;
        }
        by_tenant.into_iter().collect()
    }

    fn servers(&self) -> Vec<(String, bool)> {
        let Some(shared) = self.0.upgrade() else {
            return Vec::new();
        };
        let down: std::collections::HashSet<String> =
            codemode_session::ToolProvider::unavailable(shared.tools.as_ref())
                .into_iter()
                .map(|unavailable| unavailable.name)
                .collect();
        shared
            .tools
            .names()
            .into_iter()
            .map(|name| {
                let up = !down.contains(&name);
                (name, up)
            })
            .collect()
    }
}

/// Serves `/healthz`, `/readyz` and `/metrics` without a token on `--ops-listen`, until
/// `shutdown`; the address bound.
async fn serve_ops(
    ops: &Arc<ops::Ops>,
    address: &str,
    shutdown: CancellationToken,
) -> Result<std::net::SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| format!("--ops-listen: cannot listen on {address}: {error}"))?;
    let bound = listener
        .local_addr()
        .map_err(|error| format!("--ops-listen: cannot tell the address bound: {error}"))?;
    let router = ops.probes().merge(ops.metrics());
    let limits = http::ConnectionLimits {
        max_connections: 64,
        header_read_timeout: http::DEFAULT_HEADER_READ_TIMEOUT,
    };
    tokio::spawn(async move {
        if let Err(error) = http::serve(listener, router, limits, shutdown).await {
            tracing::error!("--ops-listen stopped serving: {error}");
        }
    });
    Ok(bound)
}

/// How often `--watch-config` looks at the file.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Reads the configuration again on SIGHUP, and with `watch` whenever the file's content changes
/// (looked at every second: no watcher to set up, and an editor's replace-by-rename is seen as
/// any change is). Sessions open now follow the new permissions at once.
async fn reload_on_change(shared: Arc<Shared>, watch: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!(target: "codemode::config", "cannot listen for SIGHUP; the configuration is read once");
        return;
    };
    let path = shared
        .toolset
        .config_path()
        .map(std::path::Path::to_path_buf);
    let content =
        |path: &Option<std::path::PathBuf>| path.as_ref().and_then(|path| std::fs::read(path).ok());
    let mut seen = content(&path);
    let mut look = tokio::time::interval(WATCH_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watching = watch && path.is_some();
    loop {
        tokio::select! {
            _ = hangup.recv() => {}
            _ = look.tick(), if watching => {
                if content(&path) == seen {
                    continue;
                }
            }
            () = shared.shutting_down.cancelled() => return,
        }
        seen = content(&path);
        let Some(shown) = path.as_ref().map(|path| path.display().to_string()) else {
            tracing::info!(target: "codemode::config", "SIGHUP: there is no --config file to read again");
            continue;
        };
        match shared.toolset.reload().await {
            Ok(reloaded) => {
                let permissions = shared.toolset.permissions();
                for live in shared.sessions.live_sessions() {
                    live.session.set_permissions(Arc::clone(&permissions));
                }
                tracing::info!(
                    target: "codemode::config",
                    added = ?reloaded.added,
                    removed = ?reloaded.removed,
                    restarted = ?reloaded.restarted,
                    kept = ?reloaded.kept,
                    "configuration {shown} reloaded"
                );
            }
            Err(error) => {
                tracing::error!(target: "codemode::config", "the configuration was not reloaded, the running one is kept: {error}");
            }
        }
    }
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
                "--no-auth is only for loopback addresses, and {bound} is not one: anyone who can \
                 reach it could run code; set a token with --auth-token-file FILE (lines of TENANT \
                 TOKEN) or CODEMODE_AUTH_TOKEN"
            ));
        }
        Some(http::Authentication::Off) => {
            eprintln!(
                "warning: serving {bound} without authentication (--no-auth): any program on this \
                 machine can run code and call your tools through it"
            );
            http::Authentication::Off
        }
        Some(tokens) => tokens,
        None => {
            return Err(format!(
                "serving MCP over HTTP needs a token, or anyone who can reach {bound} could run \
                 code: set one with --auth-token-file FILE (lines of TENANT TOKEN) or \
                 CODEMODE_AUTH_TOKEN{}",
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
            shared.args.session.as_str().into(),
            Arc::clone(&shared.store),
            Arc::clone(&shared.tools),
            shared.config(),
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

#[allow(clippy::too_many_arguments)] // Each is one part of what is served.
async fn serve_http(
    shared: Arc<Shared>,
    ops: &Arc<ops::Ops>,
    ops_bound: Option<std::net::SocketAddr>,
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
    // `/metrics` is behind the gate too; the probes are not (they say nothing but ready or not).
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .merge(ops.metrics())
        .layer(axum::middleware::from_fn_with_state(
            http::SessionOwners::new(sessions),
            http::bind_sessions,
        ))
        .layer(axum::middleware::from_fn_with_state(gate, http::guard))
        // Outermost: a drain waits for every response to be sent whole.
        .layer(axum::middleware::from_fn_with_state(
            shared.answering.clone(),
            http::track,
        ))
        .merge(ops.probes());
    // A parent process (or a test) reads where the server listens from this line.
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // And, on the next line, where the operator's endpoints are without a token.
    if let Some(bound) = ops_bound {
        println!("operations on http://{bound}/");
    }
    http::serve(listener, router, connections, shared.shutting_down.clone()).await?;
    Ok(())
}
