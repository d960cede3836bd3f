//! A session's limits and defaults (sessions, the model-facing tools, CPU budget, completion push), all configurable.

use std::time::Duration;

use codemode_cell_actor::{FailureHandler, OutputMode};
use codemode_protocol::limits::{
    DEFAULT_CPU_TIME_LIMIT, DEFAULT_EXEC_YIELD_TIME_MS, DEFAULT_HEAP_LIMIT_BYTES,
    DEFAULT_MAX_ACTIVE_CELLS, DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_MAX_STORED_BYTES_PER_SESSION,
    DEFAULT_MAX_TOOL_CALLS_PER_CELL, DEFAULT_MIN_WAIT_YIELD_TIME,
    DEFAULT_TOOL_DESCRIPTION_BUDGET_TOKENS, DEFAULT_WAIT_YIELD_TIME_MS, YIELD_GRACE,
    YIELD_GRACE_THRESHOLD,
};
use codemode_protocol::{CellId, Tenant};

/// How a session runs its cells. Start from [`SessionConfig::default`] and set what differs
/// (fields are public to read and assign; the struct grows, so it is not built literally).
#[derive(Clone)]
#[non_exhaustive]
pub struct SessionConfig {
    /// Cells that may be running (or finished but not yet observed) at once; the next `execute`
    /// is refused.
    pub max_active_cells: usize,
    /// Caps every yield time, grace included. `None`: no cap.
    pub max_yield_time: Option<Duration>,
    /// The shortest yield time `wait` honours (completion push).
    pub min_wait_yield_time: Duration,
    /// The yield time of an `exec` that names none.
    pub default_exec_yield_time: Duration,
    /// The yield time of a `wait` that names none.
    pub default_wait_yield_time: Duration,
    /// The output budget of a rendering that names none, in tokens (about 4 bytes each).
    pub default_max_output_tokens: u64,
    /// The JavaScript heap of each cell.
    pub heap_limit_bytes: usize,
    /// The CPU time of each cell (CPU budget). `None`: no limit.
    pub cpu_time_limit: Option<Duration>,
    /// The budget of the tool part of the `exec` description, in tokens (about 4 bytes each): the
    /// richest form that fits is shown (declarations, summaries, names, namespaces).
    pub tool_description_budget_tokens: u64,
    /// Client (keep everything) or server (bounded buffers) output collection.
    pub output_mode: OutputMode,
    /// Log output content and tool arguments and results. Off by default: logs then carry only
    /// ids, names, sizes, durations and outcomes.
    pub log_content: bool,
    /// Told when a cell's engine fails in a way its owner should know (beyond the cell's error).
    pub on_runtime_failure: Option<FailureHandler>,
    /// Whose session this is: engines that host several cells in one process never put cells of
    /// different tenants together (see `CellStart::tenant`). `None`: the embedder's one tenant.
    pub tenant: Option<Tenant>,
    /// The most tool calls one cell may make; the next is refused naming the limit.
    pub max_tool_calls: u64,
    /// The most bytes (keys and JSON text) the session's stored values may hold: a commit past
    /// it is refused, and the cell's text says its values were not saved.
    pub max_stored_bytes: usize,
    /// Budgets the session's stored values also count against, shared with other sessions (a
    /// tenant's, the server's).
    pub stored_bytes_budgets: Vec<std::sync::Arc<crate::StoredBytesBudget>>,
    /// Put before every cell id, with a `-` (`"<prefix>-1"`): a server of a cluster names itself
    /// there, so that ids are unique across servers and say which one runs the cell. `None`:
    /// `"1"`, `"2"`, ….
    pub cell_id_prefix: Option<String>,
    /// Told of each cell that starts, each tool call it starts and each cell that closes, as they
    /// happen: for a
    /// journal kept outside the process (a cluster's record of what a server's cells had started,
    /// should the server die). Called on the session's tasks; it must not block.
    pub on_cell_activity: Option<CellActivityHook>,
    /// Where a tool call's trace context comes from (an embedder that exports traces knows its
    /// spans); `None`: calls carry none.
    pub trace_context: Option<TraceContextHook>,
    /// The user's rules for the tool calls cells make (the gate): which run, which ask the
    /// user first, which are refused. The default allows every call (an embedder's own tools).
    pub permissions: std::sync::Arc<crate::Permissions>,
    /// The most calls of tools that are not read-only one cell may make; the next is refused.
    /// `None`: no limit.
    pub max_writes_per_cell: Option<u64>,
    /// Who is asked about a call that needs approval, for a cell whose `exec` named nobody
    /// ([`ExecOptions::with_user`](crate::ExecOptions::with_user)). `None`: nobody,
    /// and such calls fail closed.
    pub user: Option<std::sync::Arc<dyn crate::UserChannel>>,
    /// How long a `wait` with nothing new to return may hold on for news (output, the cell's
    /// end, a call waiting for the user), round after round of its yield time. `None`: a wait
    /// returns at its yield time, news or not.
    pub max_wait: Option<Duration>,
}

/// What a session's cells do that an embedder may journal (see
/// [`SessionConfig::on_cell_activity`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CellActivity {
    /// A cell started.
    CellStarted {
        /// The session's id.
        session: String,
        /// The cell's id.
        cell_id: CellId,
        /// The session's tenant ([`SessionConfig::tenant`]).
        tenant: Option<Tenant>,
    },
    /// A cell started a tool call.
    ToolCallStarted {
        /// The session's id.
        session: String,
        /// The cell's id.
        cell_id: CellId,
        /// The call's id within the cell (`tool-1`, …).
        call_id: String,
        /// The tool's global name, as cells call it after `tools.` (`demo__note`).
        tool: String,
    },
    /// A cell's tool call ended, whether the tool ran or the gate refused it.
    ToolCallEnded {
        /// The session's id.
        session: String,
        /// The cell's id.
        cell_id: CellId,
        /// The call's id within the cell.
        call_id: String,
        /// The tool's global name.
        tool: String,
        /// The server the tool belongs to (its namespace), if any.
        server: Option<String>,
        /// How the gate ruled.
        decision: crate::GateDecision,
        /// How it ended: `ok`, or what went wrong (`denied`, `failed`, `cancelled`, ...).
        outcome: &'static str,
        /// How long the tool took (zero when the gate refused the call): the user's time to
        /// answer an approval is not in it.
        duration: Duration,
    },
    /// A cell ended: how, how long it ran and how many tool calls it made.
    CellEnded {
        /// The session's id.
        session: String,
        /// The cell's id.
        cell_id: CellId,
        /// The session's tenant.
        tenant: Option<Tenant>,
        /// `completed`, `failed` or `terminated`.
        outcome: &'static str,
        /// From its start to its end.
        duration: Duration,
        /// The tool calls it made.
        tool_calls: u64,
    },
    /// A cell closed: it ended and its owner has what it showed (or it was dropped).
    CellClosed {
        /// The session's id.
        session: String,
        /// The cell's id.
        cell_id: CellId,
    },
}

/// Receives [`CellActivity`].
pub type CellActivityHook = std::sync::Arc<dyn Fn(CellActivity) + Send + Sync>;

/// Gives the trace context of the code running now (the tool call's span) as W3C Trace Context
/// fields, for a tool call to carry to its server (see [`SessionConfig::trace_context`]).
pub type TraceContextHook = std::sync::Arc<dyn Fn() -> Vec<(String, String)> + Send + Sync>;

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("max_active_cells", &self.max_active_cells)
            .field("max_yield_time", &self.max_yield_time)
            .field("min_wait_yield_time", &self.min_wait_yield_time)
            .field("default_exec_yield_time", &self.default_exec_yield_time)
            .field("default_wait_yield_time", &self.default_wait_yield_time)
            .field("default_max_output_tokens", &self.default_max_output_tokens)
            .field("heap_limit_bytes", &self.heap_limit_bytes)
            .field("cpu_time_limit", &self.cpu_time_limit)
            .field("output_mode", &self.output_mode)
            .field("log_content", &self.log_content)
            .field("tenant", &self.tenant)
            .field("max_stored_bytes", &self.max_stored_bytes)
            .field("max_tool_calls", &self.max_tool_calls)
            .field("stored_bytes_budgets", &self.stored_bytes_budgets)
            .field("cell_id_prefix", &self.cell_id_prefix)
            .field("on_cell_activity", &self.on_cell_activity.is_some())
            .field("trace_context", &self.trace_context.is_some())
            .field("permissions", &self.permissions)
            .field("max_writes_per_cell", &self.max_writes_per_cell)
            .field("user", &self.user.is_some())
            .field("max_wait", &self.max_wait)
            .field(
                "tool_description_budget_tokens",
                &self.tool_description_budget_tokens,
            )
            .finish_non_exhaustive()
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_active_cells: DEFAULT_MAX_ACTIVE_CELLS,
            max_yield_time: None,
            min_wait_yield_time: DEFAULT_MIN_WAIT_YIELD_TIME,
            default_exec_yield_time: Duration::from_millis(DEFAULT_EXEC_YIELD_TIME_MS),
            default_wait_yield_time: Duration::from_millis(DEFAULT_WAIT_YIELD_TIME_MS),
            default_max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            heap_limit_bytes: DEFAULT_HEAP_LIMIT_BYTES,
            cpu_time_limit: Some(DEFAULT_CPU_TIME_LIMIT),
            tool_description_budget_tokens: DEFAULT_TOOL_DESCRIPTION_BUDGET_TOKENS,
            output_mode: OutputMode::Client,
            log_content: false,
            on_runtime_failure: None,
            tenant: None,
            max_stored_bytes: DEFAULT_MAX_STORED_BYTES_PER_SESSION,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS_PER_CELL,
            stored_bytes_budgets: Vec::new(),
            cell_id_prefix: None,
            on_cell_activity: None,
            trace_context: None,
            permissions: std::sync::Arc::new(crate::Permissions::default()),
            max_writes_per_cell: None,
            user: None,
            max_wait: None,
        }
    }
}

impl SessionConfig {
    /// This configuration with the user's rules for tool calls.
    pub fn with_permissions(mut self, permissions: crate::Permissions) -> Self {
        self.permissions = std::sync::Arc::new(permissions);
        self
    }

    /// This configuration with a budget of calls that are not read-only per cell.
    pub fn with_max_writes_per_cell(mut self, max_writes_per_cell: Option<u64>) -> Self {
        self.max_writes_per_cell = max_writes_per_cell;
        self
    }

    /// This configuration asking `user` about calls that need approval.
    pub fn with_user(mut self, user: std::sync::Arc<dyn crate::UserChannel>) -> Self {
        self.user = Some(user);
        self
    }

    /// This configuration with another value for the active-cell limit.
    pub fn with_max_active_cells(mut self, max_active_cells: usize) -> Self {
        self.max_active_cells = max_active_cells;
        self
    }

    /// This configuration with another value for the cap on every yield time.
    pub fn with_max_yield_time(mut self, max_yield_time: Option<Duration>) -> Self {
        self.max_yield_time = max_yield_time;
        self
    }

    /// This configuration with another value for the shortest yield `wait` honours.
    pub fn with_min_wait_yield_time(mut self, min_wait_yield_time: Duration) -> Self {
        self.min_wait_yield_time = min_wait_yield_time;
        self
    }

    /// This configuration with another value for `exec`'s default yield time.
    pub fn with_default_exec_yield_time(mut self, default_exec_yield_time: Duration) -> Self {
        self.default_exec_yield_time = default_exec_yield_time;
        self
    }

    /// This configuration with another value for `wait`'s default yield time.
    pub fn with_default_wait_yield_time(mut self, default_wait_yield_time: Duration) -> Self {
        self.default_wait_yield_time = default_wait_yield_time;
        self
    }

    /// This configuration with another value for the default output budget.
    pub fn with_default_max_output_tokens(mut self, default_max_output_tokens: u64) -> Self {
        self.default_max_output_tokens = default_max_output_tokens;
        self
    }

    /// This configuration with another value for each cell's heap limit.
    pub fn with_heap_limit_bytes(mut self, heap_limit_bytes: usize) -> Self {
        self.heap_limit_bytes = heap_limit_bytes;
        self
    }

    /// This configuration with another value for each cell's CPU-time limit.
    pub fn with_cpu_time_limit(mut self, cpu_time_limit: Option<Duration>) -> Self {
        self.cpu_time_limit = cpu_time_limit;
        self
    }

    /// This configuration with another value for the output mode.
    pub fn with_output_mode(mut self, output_mode: OutputMode) -> Self {
        self.output_mode = output_mode;
        self
    }

    /// This configuration with another cap on each cell's tool calls.
    pub fn with_max_tool_calls(mut self, max_tool_calls: u64) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    /// This configuration with another cap on the bytes of the session's stored values.
    pub fn with_max_stored_bytes(mut self, max_stored_bytes: usize) -> Self {
        self.max_stored_bytes = max_stored_bytes;
        self
    }

    /// This configuration with one more budget the session's stored values count against.
    pub fn with_stored_bytes_budget(
        mut self,
        budget: std::sync::Arc<crate::StoredBytesBudget>,
    ) -> Self {
        self.stored_bytes_budgets.push(budget);
        self
    }

    /// This configuration for the sessions of another tenant.
    pub fn with_tenant(mut self, tenant: impl Into<Tenant>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// This configuration with another value for whether content is logged.
    pub fn with_log_content(mut self, log_content: bool) -> Self {
        self.log_content = log_content;
        self
    }

    /// This configuration with another budget for the tool part of the `exec` description.
    pub fn with_tool_description_budget_tokens(mut self, budget: u64) -> Self {
        self.tool_description_budget_tokens = budget;
        self
    }

    /// This configuration with a handler told of engine failures.
    pub fn with_on_runtime_failure(mut self, handler: FailureHandler) -> Self {
        self.on_runtime_failure = Some(handler);
        self
    }

    /// The time an observation waits, from what was asked (the model-facing tools): the default when nothing was
    /// asked, a 1 s grace added to yields of 10 s or more, and the configured maximum over all.
    pub fn resolve_yield(&self, requested_ms: Option<u64>, default: Duration) -> Duration {
        let requested = requested_ms.map(Duration::from_millis).unwrap_or(default);
        let with_grace = if requested >= YIELD_GRACE_THRESHOLD {
            requested.saturating_add(YIELD_GRACE)
        } else {
            requested
        };
        match self.max_yield_time {
            Some(max) => with_grace.min(max),
            None => with_grace,
        }
    }

    /// The yield of an `execute`.
    pub fn exec_yield(&self, requested_ms: Option<u64>) -> Duration {
        self.resolve_yield(requested_ms, self.default_exec_yield_time)
    }

    /// The yield of a `wait`, never below the minimum wait yield (unless the maximum is lower).
    pub fn wait_yield(&self, requested_ms: Option<u64>) -> Duration {
        let floor = requested_ms.map(|ms| {
            ms.max(u64::try_from(self.min_wait_yield_time.as_millis()).unwrap_or(u64::MAX))
        });
        self.resolve_yield(floor, self.default_wait_yield_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_get_a_grace_second_from_ten_seconds_and_are_capped_by_the_maximum() {
        let config = SessionConfig::default();
        assert_eq!(config.exec_yield(None), Duration::from_secs(11));
        assert_eq!(config.exec_yield(Some(9_999)), Duration::from_millis(9_999));
        assert_eq!(config.exec_yield(Some(10_000)), Duration::from_secs(11));
        let capped = SessionConfig {
            max_yield_time: Some(Duration::from_secs(5)),
            ..SessionConfig::default()
        };
        assert_eq!(capped.exec_yield(Some(60_000)), Duration::from_secs(5));
        assert_eq!(capped.wait_yield(None), Duration::from_secs(5));
    }

    #[test]
    fn wait_never_yields_sooner_than_its_minimum() {
        let config = SessionConfig {
            min_wait_yield_time: Duration::from_millis(500),
            ..SessionConfig::default()
        };
        assert_eq!(config.wait_yield(Some(0)), Duration::from_millis(500));
        assert_eq!(config.wait_yield(Some(2_000)), Duration::from_secs(2));
        assert_eq!(config.wait_yield(None), Duration::from_secs(11));
    }
}
