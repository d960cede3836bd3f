//! The flags of `codemode mcp` and their defaults: the bottom of the serving layers, which every
//! part may read and none writes.

use std::path::PathBuf;

use clap::Args;

use crate::http;
use crate::setup::SessionArgs;

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
    /// How long a `wait` with nothing new to return holds on for news (output, the cell's end, a
    /// call waiting for approval) before it answers that the cell is still quiet, in
    /// milliseconds; 0 answers at the yield time, as upstream does.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_MAX_WAIT_MS)]
    pub max_wait_ms: u64,
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
    /// has one). With a database --store, every stored value of the tenant in the database
    /// counts, whichever server committed it.
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
    /// Read the configuration file (--config) again whenever it changes, as on SIGHUP: servers
    /// added, removed or changed are started, stopped or restarted; the others, and the
    /// sessions and cells using them, carry on. A file that does not parse is refused and the
    /// running configuration kept.
    #[arg(long)]
    pub watch_config: bool,
    /// Serve /healthz, /readyz and /metrics on this address too, without a token (such as
    /// 127.0.0.1:9090, or a private network's address that only the scraper and the load
    /// balancer reach). Without it, /healthz and /readyz are on the --http address without a
    /// token and /metrics with one.
    #[arg(long, value_name = "ADDR")]
    pub ops_listen: Option<String>,
    /// How many milliseconds a client's first `tools/list` waits for the downstream servers to
    /// start. Those still starting then are left out of `exec`'s declarations (the description
    /// says they are starting) and arrive when they answer, with
    /// `notifications/tools/list_changed`; 0 waits for every server, however long it takes.
    /// Keep it under your client's own startup timeout (codex: 10 s).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_STARTUP_WINDOW_MS)]
    pub startup_window_ms: u64,
    /// On SIGTERM, how many seconds running cells get to finish (the server takes no new
    /// session or cell meanwhile, and /readyz answers 503) before what is left is terminated. A
    /// second SIGTERM, or SIGINT, ends the wait. In a cluster the server leaves at once: its
    /// sessions go on on the others.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_DRAIN_TIMEOUT_SECS)]
    pub drain_timeout: u64,
    /// Put model-written content (sources, tool arguments and results) in exported traces, as
    /// span events. Without it spans carry sizes and digests only.
    #[arg(long)]
    pub trace_content: bool,
    /// Print the description of `exec` the model would be given (with every tool declared), and
    /// exit: a way to check a configuration.
    #[arg(long)]
    pub print_exec_description: bool,
    /// HTTP, in a cluster: the URL other servers reach this one at (such as
    /// http://10.0.0.5:8080/mcp). With it, the server registers in the database of --store
    /// (PostgreSQL), its cells' ids name it, and a `wait` for a cell that runs on another server
    /// is forwarded there.
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,
    /// HTTP, in a cluster: a file holding the secret the servers present to one another (the
    /// same file on every server; private to its owner, and never a tenant's token).
    #[arg(long, value_name = "PATH")]
    pub cluster_token_file: Option<PathBuf>,
    /// HTTP, in a cluster: how long this server's registration lasts unless renewed (every third
    /// of it); when it runs out, other servers answer `wait` for its cells with an error at once.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_LEASE_SECS)]
    pub lease_secs: u64,
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

/// Default of `--startup-window-ms`: well inside the startup timeouts of the clients that wait
/// for MCP servers (codex 10 s, Claude Code 30 s).
const DEFAULT_STARTUP_WINDOW_MS: u64 = 5_000;

/// Default of `--drain-timeout`.
const DEFAULT_DRAIN_TIMEOUT_SECS: u64 = 30;

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
/// A holding `wait` answers after 30 s at most.
const DEFAULT_MAX_WAIT_MS: u64 = 30_000;

/// Default of `--lease-secs`: how long a cluster server's registration lasts unless renewed.
pub(super) const DEFAULT_LEASE_SECS: u64 = 10;
