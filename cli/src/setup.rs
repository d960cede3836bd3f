//! What `run` and `mcp` share: the flags that choose limits, the store and the tools, and how a
//! session is built from them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use codemode_host_adapters::{
    CompositeTools, FileStore, InProcessTools, McpServerConfig, McpTransport, MemoryStore,
    PostgresStore,
};
use codemode_protocol::normalize_identifier;
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{Session, SessionConfig, SessionKey, Store};
use serde_json::{Value, json};

use crate::node_engine::{self, NodeEngine};

/// Limits, store and tools.
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// The JavaScript heap of a cell, in MiB.
    #[arg(long, value_name = "N")]
    pub heap_limit_mb: Option<usize>,
    /// The CPU time a cell may use, in milliseconds (waiting uses none).
    #[arg(long, value_name = "N")]
    pub cpu_limit_ms: Option<u64>,
    /// Where stored values live: a directory (the file store: later runs with the same path see
    /// them), or a PostgreSQL database, `postgres://USER@HOST:PORT/DATABASE`, that several
    /// servers share. Without it, values live in memory only.
    #[arg(long, value_name = "PATH|URL")]
    pub store: Option<PathBuf>,
    /// The most bytes (keys and JSON text) one session's stored values may hold; a cell whose
    /// writes would pass it completes with its values unsaved, and says so.
    #[arg(long, value_name = "BYTES", default_value_t = codemode_protocol::limits::DEFAULT_MAX_STORED_BYTES_PER_SESSION)]
    pub max_stored_bytes: usize,
    /// The most tool calls one cell may make; the next call is refused naming the limit, so a
    /// runaway loop cannot hammer a downstream server.
    #[arg(long, value_name = "N", default_value_t = codemode_protocol::limits::DEFAULT_MAX_TOOL_CALLS_PER_CELL)]
    pub max_tool_calls: u64,
    /// The most calls of tools that are not read-only (no `readOnlyHint: true`) one cell may
    /// make; the next is refused with a clear error. No limit by default.
    #[arg(long, value_name = "N")]
    pub max_writes_per_cell: Option<u64>,
    /// The session whose stored values to use.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub session: String,
    /// A downstream MCP server over stdio, as 'COMMAND ARGS' or 'NAME=COMMAND ARGS'; its tools
    /// join the cell's tools as tools.NAME__TOOL (NAME defaults to the program's name).
    /// Repeatable.
    #[arg(long = "mcp", value_name = "COMMAND")]
    pub mcp: Vec<String>,
    /// Downstream MCP servers from a JSON file in the `mcpServers` form MCP clients use
    /// (`command`, `args`, `env`, `cwd`; or `url`, `headers`); each server's tools join the cell's
    /// tools as tools.NAME__TOOL.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The JavaScript engine of the cells: V8 (the default: JIT speed on heavy cells), or
    /// QuickJS (no system library, a fresh runtime in a fraction of a millisecond, small memory,
    /// slower on heavy computation). The default comes from `CODEMODE_ENGINE` when it is set;
    /// a build without V8, and --isolation in-process (V8 runs only in engine processes), run
    /// QuickJS.
    #[arg(long, value_enum, value_name = "ENGINE", env = "CODEMODE_ENGINE")]
    pub engine: Option<JsEngine>,
    /// Where cells run: in sandboxed engine processes (the default: a cell that crashes its
    /// engine ends only its own process), or in this process (faster to start, but a fatal
    /// error in the engine ends the whole program).
    #[arg(long, value_enum, value_name = "WHERE", default_value_t = Isolation::Process)]
    pub isolation: Isolation,
    /// Live cells per engine process (with --isolation process): a crash or hard stop ends at
    /// most this many cells.
    #[arg(long, value_name = "N", default_value_t = codemode_engine_process::DEFAULT_CELLS_PER_PROCESS)]
    pub cells_per_process: usize,
    /// Run engine processes as this user (with --isolation process): for a server started as root,
    /// so that native code in an engine process holds no file of root's (see SECURITY.md). The
    /// user must be able to read this program, and for V8 cells `node` and the engine library.
    #[arg(long, value_name = "USER")]
    pub engine_user: Option<String>,
    /// The engine library on the V8 of the pinned official Node 24 (V8 13.6) that V8 engine
    /// processes run (they become that `node` loading it). By default the one installed beside
    /// this program, or for this user by `cargo xtask setup-v8`.
    #[arg(long, value_name = "PATH", env = "CODEMODE_V8_LIBRARY")]
    pub v8_library: Option<PathBuf>,
    /// The `node` binary that loads the engine library (by default the `node` beside it).
    #[arg(long, value_name = "PATH", env = "CODEMODE_NODE")]
    pub node: Option<PathBuf>,
}

/// Where cells run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// In sandboxed child engine processes.
    Process,
    /// In this process: QuickJS cells only (the pinned Node 24's V8 is reachable only from an
    /// engine process).
    InProcess,
}

/// The JavaScript engine of the cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JsEngine {
    /// V8: the pinned Node 24's V8 13.6, in engine processes that are that `node` loading the
    /// engine library.
    V8,
    /// QuickJS-NG, built into this program.
    #[value(name = "quickjs")]
    QuickJs,
}

impl JsEngine {
    /// The engine of a cell when none is named: V8 when this program has it.
    pub const DEFAULT: JsEngine = if cfg!(feature = "v8") {
        JsEngine::V8
    } else {
        JsEngine::QuickJs
    };

    /// The engine's name on the command line (and in the engine-host arguments).
    pub fn name(self) -> &'static str {
        match self {
            JsEngine::V8 => "v8",
            JsEngine::QuickJs => "quickjs",
        }
    }
}

/// Whether the demo tools `echo` and `sleep` are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoTools {
    /// Offered (what `codemode run` does, for the examples).
    Offered,
    /// Left out (what `codemode mcp` does unless asked): the model sees only real tools.
    LeftOut,
}

/// What setting up went wrong with, and whether it is the user's input (exit status 2).
pub struct SetupError {
    pub message: String,
    pub usage: bool,
}

impl SessionArgs {
    pub fn config(&self) -> SessionConfig {
        let mut config = SessionConfig::default();
        if let Some(megabytes) = self.heap_limit_mb {
            config.heap_limit_bytes = megabytes.saturating_mul(1024 * 1024);
        }
        if let Some(milliseconds) = self.cpu_limit_ms {
            config.cpu_time_limit = Some(Duration::from_millis(milliseconds));
        }
        config.max_stored_bytes = self.max_stored_bytes;
        config.max_tool_calls = self.max_tool_calls;
        config.max_writes_per_cell = self.max_writes_per_cell;
        // Where traces are exported, a tool call carries its trace to the tool's server.
        config.trace_context = crate::telemetry::trace_context_hook();
        config
    }

    /// What the process's engine counts (processes, cells waiting for one); nothing before a
    /// session made it.
    pub fn engine_stats(&self) -> codemode_engine::EngineStats {
        ENGINE
            .get()
            .map(|engine| engine.stats())
            .unwrap_or_default()
    }

    /// The database URL `--store` gives, when it names a database rather than a directory.
    pub fn database_url(&self) -> Option<&str> {
        self.store
            .as_ref()
            .and_then(|store| store.to_str())
            .filter(|store| codemode_host_adapters::is_database_url(store))
    }

    /// The store `--store` names; a database's schema is created or upgraded here, and with
    /// `bytes_per_tenant` it refuses a commit that would take a tenant's stored values in it past
    /// that many bytes (a directory or memory leaves that limit to the sessions).
    pub async fn store(
        &self,
        bytes_per_tenant: Option<usize>,
    ) -> Result<Arc<dyn Store>, SetupError> {
        let failed = |error: codemode_session::StoreError| SetupError {
            message: error.to_string(),
            usage: false,
        };
        if let Some(url) = self.database_url() {
            let mut store = PostgresStore::connect(url).await.map_err(failed)?;
            if let Some(limit) = bytes_per_tenant {
                store = store.limit_bytes_per_tenant(limit);
            }
            tracing::info!(database = %store.target(), "stored values are in PostgreSQL");
            return Ok(Arc::new(store));
        }
        Ok(match &self.store {
            None => Arc::new(MemoryStore::new()),
            Some(path) => Arc::new(FileStore::open(path).map_err(failed)?),
        })
    }

    /// The process's one engine, shared by every session (and so its pool of pre-warmed
    /// runtimes, or of engine processes), warmed for the heap limit its cells have.
    fn engine(
        &self,
        config: &SessionConfig,
    ) -> Result<Arc<dyn codemode_engine::Engine>, SetupError> {
        if let Some(engine) = ENGINE.get() {
            return Ok(Arc::clone(engine));
        }
        #[cfg(not(feature = "v8"))]
        if self.js_engine() == JsEngine::V8 {
            return Err(SetupError {
                message: concat!(
                    "this codemode was built without V8 (cargo's --no-default-features): run its ",
                    "cells on QuickJS with --engine quickjs, or install a build with V8 ",
                    "(cargo xtask setup-v8 && cargo install --path cli)"
                )
                .to_owned(),
                usage: true,
            });
        }
        let engine: Arc<dyn codemode_engine::Engine> = match (self.isolation, self.js_engine()) {
            (Isolation::InProcess, JsEngine::V8) => {
                return Err(SetupError {
                    message: "V8 cells run only in engine processes (the pinned Node 24's V8 is \
                              reachable only there): drop --isolation in-process, or run \
                              in-process cells on QuickJS with --engine quickjs"
                        .to_owned(),
                    usage: true,
                });
            }
            (Isolation::InProcess, JsEngine::QuickJs) => {
                Arc::new(QuickJsEngine::with_warm_runtimes_for_heap(
                    codemode_runtime_quickjs::DEFAULT_WARM_RUNTIMES,
                    config.heap_limit_bytes,
                ))
            }
            (Isolation::Process, engine) => Arc::new(process_engine(
                engine,
                config.heap_limit_bytes,
                self.cells_per_process,
                self.engine_user.as_deref(),
                self.node_engine()?,
            )?),
        };
        Ok(Arc::clone(ENGINE.get_or_init(|| engine)))
    }

    /// The engine of the cells: the one named (`--engine`, `CODEMODE_ENGINE`), else QuickJS for
    /// in-process cells (V8 runs only in engine processes) and [`JsEngine::DEFAULT`] in engine
    /// processes.
    pub fn js_engine(&self) -> JsEngine {
        self.engine.unwrap_or(match self.isolation {
            Isolation::InProcess => JsEngine::QuickJs,
            Isolation::Process => JsEngine::DEFAULT,
        })
    }

    /// `node` and the engine library it loads, for V8 cells (see [`crate::node_engine`]); `None`
    /// for QuickJS cells, which need neither.
    fn node_engine(&self) -> Result<Option<NodeEngine>, SetupError> {
        if self.js_engine() != JsEngine::V8 {
            return Ok(None);
        }
        let environment = node_engine::Environment::current();
        let chosen = node_engine::choose(
            self.v8_library.as_deref(),
            self.node.as_deref(),
            &environment,
        )
        .map_err(|error| SetupError {
            message: error.to_string(),
            usage: true,
        })?;
        tracing::info!(
            library = %chosen.library.display(),
            node = %chosen.node.display(),
            "V8 cells run in engine processes on the V8 of the pinned Node 24"
        );
        Ok(Some(chosen))
    }

    /// Whether the process's engine can start a cell now (a readiness probe): runs a trivial
    /// cell in a session of its own, with no tools, no stored values and no tenant (so its
    /// engine process is no tenant's), and says why not when it cannot.
    pub async fn probe_engine(&self) -> Result<(), SetupError> {
        let failed = |message: String| SetupError {
            message,
            usage: false,
        };
        let mut config = self.config();
        config.tenant = None;
        let engine = self.engine(&config)?;
        let session = Session::open(
            SessionKey::new("codemode-readiness"),
            engine,
            Arc::new(MemoryStore::new()),
            Arc::new(InProcessTools::new()),
            config,
        )
        .await
        .map_err(|error| failed(format!("cannot open a session: {error}")))?;
        let request = codemode_protocol::ExecuteRequest {
            call_id: "readiness".into(),
            source: "text('ready')".into(),
            yield_time_ms: Some(PROBE_YIELD_MS),
            max_output_tokens: None,
        };
        let report = session.execute(request).await;
        session.shutdown().await;
        match report {
            Ok(report) => match report.event {
                codemode_session::CellEvent::Completed {
                    error_text: None, ..
                } => Ok(()),
                codemode_session::CellEvent::Completed {
                    error_text: Some(error),
                    ..
                } => Err(failed(format!("a trivial cell failed: {error}"))),
                _ => Err(failed(format!(
                    "a trivial cell did not finish within {PROBE_YIELD_MS} ms"
                ))),
            },
            Err(error) => Err(failed(format!("cannot start a cell: {error}"))),
        }
    }

    pub async fn open(
        &self,
        key: SessionKey,
        store: Arc<dyn Store>,
        tools: Arc<CompositeTools>,
        config: SessionConfig,
    ) -> Result<Session, SetupError> {
        let engine = self.engine(&config)?;
        Session::open(key, engine, store, tools, config)
            .await
            .map_err(|error| SetupError {
                message: error.to_string(),
                usage: false,
            })
    }
}

/// The process's one engine, made by the first session that needs it.
static ENGINE: std::sync::OnceLock<Arc<dyn codemode_engine::Engine>> = std::sync::OnceLock::new();

/// How long the readiness probe's trivial cell may take.
const PROBE_YIELD_MS: u64 = 5_000;

/// Engine processes that run this program in its engine-host mode (for V8 cells, as the launcher
/// that executes `node` to load the engine library).
fn process_engine(
    engine: JsEngine,
    heap_limit_bytes: usize,
    cells_per_process: usize,
    engine_user: Option<&str>,
    node_engine: Option<NodeEngine>,
) -> Result<codemode_engine_process::ProcessEngine, SetupError> {
    // The program this process runs, whatever replaced its file since it started: an upgrade
    // installed under a running server does not break the engine processes it starts.
    let program = std::path::PathBuf::from("/proc/self/exe");
    let user = match engine_user {
        None => None,
        Some(name) => {
            let user = nix::unistd::User::from_name(name)
                .map_err(|error| SetupError {
                    message: format!("cannot look up the engine user {name:?}: {error}"),
                    usage: true,
                })?
                .ok_or_else(|| SetupError {
                    message: format!(
                        "--engine-user: there is no user named {name:?} (create one, for example \
                         with: useradd --system --no-create-home codemode-engine)"
                    ),
                    usage: true,
                })?;
            let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
            // Engine processes run as that user: it must reach `node` and the library.
            if let (JsEngine::V8, Some(node_engine)) = (engine, &node_engine) {
                node_engine.open_to(uid, gid).map_err(|error| SetupError {
                    message: error.to_string(),
                    usage: false,
                })?;
            }
            Some((uid, gid))
        }
    };
    let mut arguments: Vec<std::ffi::OsString> = vec![
        "engine-host".into(),
        "--engine".into(),
        engine.name().into(),
    ];
    if let (JsEngine::V8, Some(node_engine)) = (engine, node_engine) {
        arguments.extend([
            "--node".into(),
            node_engine.node.into_os_string(),
            "--library".into(),
            node_engine.library.into_os_string(),
        ]);
    }
    let mut config = codemode_engine_process::ProcessEngineConfig::new(program, arguments)
        .with_warm_runtimes(
            codemode_runtime_quickjs::DEFAULT_WARM_RUNTIMES,
            heap_limit_bytes,
        )
        .with_cells_per_process(cells_per_process);
    if let Some((uid, gid)) = user {
        config = config.with_user(uid, gid);
    }
    // The child's whole environment: the library path its loader needs, and whether V8 makes each
    // global scope from a startup snapshot (`CODEMODE_V8_SNAPSHOT=off`: it does not).
    for name in [
        "LD_LIBRARY_PATH",
        codemode_engine::script::SNAPSHOT_VARIABLE,
    ] {
        if let Some(value) = std::env::var_os(name) {
            config = config.with_env(name, value);
        }
    }
    Ok(codemode_engine_process::ProcessEngine::new(config))
}

/// `echo` resolves with its argument; `sleep({ms})` resolves after that long.
pub fn demo_tools() -> InProcessTools {
    use codemode_protocol::{ToolAnnotations, ToolDefinition, ToolName};
    // Neither changes anything: both are read-only, so the gate lets them run.
    let read_only = ToolAnnotations::read_only().with_idempotent(true);
    InProcessTools::new()
        .add(
            ToolDefinition::function(ToolName::plain("echo"), "Resolves with its argument.")
                .with_input_schema(json!({}))
                .with_annotations(read_only.with_open_world(false)),
            |input, _cancellation| async move { Ok(input.unwrap_or(Value::Null)) },
        )
        .add(
            ToolDefinition::function(
                ToolName::plain("sleep"),
                "Resolves with null after `ms` milliseconds.",
            )
            .with_input_schema(json!({
                "type": "object",
                "properties": {"ms": {"type": "integer", "minimum": 0, "description": "How long to wait, in milliseconds."}},
                "required": ["ms"]
            }))
            .with_output_schema(json!({"type": "null"}))
            .with_annotations(read_only.with_open_world(false)),
            |input, cancellation| async move {
                let ms = input
                    .as_ref()
                    .and_then(|input| input.get("ms"))
                    .and_then(Value::as_u64)
                    .ok_or(codemode_session::ToolError::invalid_arguments(
                        "sleep expects { ms: <non-negative integer> }",
                    ))?;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(Value::Null),
                    _ = cancellation.cancelled() => Err(codemode_session::ToolError::cancelled("cancelled")),
                }
            },
        )
}

/// The environment the user started codemode with, unchanged (codemode sets no variable of its
/// own in it): what a downstream stdio server starts from (its configuration's `env` goes on top).
pub fn user_environment() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().collect()
}

/// `'COMMAND ARGS'` or `'NAME=COMMAND ARGS'` as a downstream server.
pub fn mcp_server(spec: &str) -> Result<McpServerConfig, SetupError> {
    let usage = |message: String| SetupError {
        message,
        usage: true,
    };
    let (name, command) = match spec.split_once('=') {
        Some((name, command)) if !name.contains(char::is_whitespace) && !name.contains('/') => {
            (Some(name), command)
        }
        _ => (None, spec),
    };
    let transport = McpTransport::stdio_command(command).ok_or_else(|| {
        usage(format!(
            "--mcp '{spec}' names no command (or a quote in it does not close)"
        ))
    })?;
    let McpTransport::Stdio { program, .. } = &transport else {
        unreachable!("stdio_command makes a stdio transport")
    };
    let namespace = match name {
        Some(name) if !name.is_empty() => normalize_identifier(name),
        Some(_) => {
            return Err(usage(format!(
                "--mcp '{spec}' has an empty name before '='"
            )));
        }
        None => {
            let stem = std::path::Path::new(program)
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_else(|| program.clone());
            normalize_identifier(&stem)
        }
    };
    Ok(McpServerConfig::new(namespace, transport))
}
