//! What an engine is given to start one cell ([`CellStart`]): its source, tools, stored values,
//! limits and pending mode, and the limit rules every engine applies alike.

use std::sync::Arc;
use std::time::Duration;

use codemode_protocol::limits::{
    DEFAULT_CPU_TIME_LIMIT, DEFAULT_HEAP_LIMIT_BYTES, DEFAULT_MAX_TOOL_CALLS_PER_CELL,
    MIN_HEAP_LIMIT_BYTES,
};
use codemode_protocol::{StoredValues, Tenant, ToolDefinition};

use crate::error::EngineError;

/// Everything an engine needs to start one cell.
#[derive(Debug, Clone)]
pub struct CellStart {
    /// The id of the request that started the cell (the model's `exec` call); every
    /// [`RuntimeEvent::Notify`](crate::RuntimeEvent::Notify) carries it.
    pub call_id: String,
    /// The cell's JavaScript source, evaluated as an ES module.
    pub source: String,
    /// The tools the cell may call, in the order `ALL_TOOLS` lists them.
    pub enabled_tools: Vec<ToolDefinition>,
    /// The servers whose tools are left out because they are down now, and why
    /// (`ALL_TOOLS.unavailable` in the cell).
    pub unavailable_servers: Vec<codemode_protocol::Unavailable>,
    /// The session's stored values when the cell starts, visible to `load`: shared with the
    /// session, which replaces rather than changes a map a cell holds.
    pub stored_values: Arc<StoredValues>,
    /// The cell's heap and CPU-time limits.
    pub limits: CellLimits,
    /// What the runtime thread does when the cell is idle.
    pub pending_mode: PendingMode,
    /// Whose cell this is. An engine that hosts several cells in one place that a compromised
    /// cell could take over (an engine process) never puts cells of different tenants there
    /// together. `None`: the embedder's one tenant.
    pub tenant: Option<Tenant>,
}

/// Resource limits of one cell. Build it from [`CellLimits::default`] with the `with_` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CellLimits {
    /// The most heap the cell's engine may use; past it the cell ends with `heap limit exceeded`.
    pub heap_limit_bytes: usize,
    /// The most CPU time the cell's thread may use, separate from any yield time: a spin loop is
    /// ended with `cpu time limit exceeded` (CPU budget). `None` means no limit.
    pub cpu_time_limit: Option<Duration>,
    /// The most tool calls the cell may make; the next one is refused naming the limit.
    pub max_tool_calls: u64,
}

impl CellLimits {
    /// These limits with another heap limit.
    pub fn with_heap_limit_bytes(mut self, heap_limit_bytes: usize) -> Self {
        self.heap_limit_bytes = heap_limit_bytes;
        self
    }

    /// These limits with another cap on the cell's tool calls.
    pub fn with_max_tool_calls(mut self, max_tool_calls: u64) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    /// These limits with another CPU-time limit (`None`: no limit).
    pub fn with_cpu_time_limit(mut self, cpu_time_limit: Option<Duration>) -> Self {
        self.cpu_time_limit = cpu_time_limit;
        self
    }
}

impl Default for CellLimits {
    fn default() -> Self {
        CellLimits {
            heap_limit_bytes: DEFAULT_HEAP_LIMIT_BYTES,
            cpu_time_limit: Some(DEFAULT_CPU_TIME_LIMIT),
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS_PER_CELL,
        }
    }
}

/// Refuses a heap limit below [`MIN_HEAP_LIMIT_BYTES`], the same from every engine.
pub fn check_heap_limit(heap_limit_bytes: usize) -> Result<(), EngineError> {
    if heap_limit_bytes < MIN_HEAP_LIMIT_BYTES {
        return Err(EngineError::InvalidLimit(format!(
            "a heap limit of {heap_limit_bytes} bytes is below the minimum of \
             {MIN_HEAP_LIMIT_BYTES} bytes (8 MiB)"
        )));
    }
    Ok(())
}

/// The error of a cell stopped at its heap limit, the same from every engine.
pub fn heap_limit_error(heap_limit_bytes: usize) -> String {
    format!(
        "heap limit exceeded: the cell used more than its {} MiB of JavaScript memory and was \
         stopped; process the data in smaller pieces or ask for a higher heap limit",
        heap_limit_bytes / (1024 * 1024)
    )
}

/// The error of a cell whose allocation its engine could not serve at all, so that the engine
/// ended its process (V8 ends it when a single table or array would pass the largest size it
/// allows, which can come before the heap limit): `engine_says` is the engine's own words.
pub fn out_of_memory_error(engine_says: &str) -> String {
    format!(
        "out of memory: the cell asked for more memory than its engine can give one cell, and \
         the engine process running it had to end ({engine_says}); process the data in smaller \
         pieces"
    )
}

/// The error of a cell stopped at its CPU-time limit, the same from every engine.
pub fn cpu_time_limit_error(budget: Duration) -> String {
    format!(
        "cpu time limit exceeded: the cell computed for more than {:.1} s of CPU time (its \
         cpu_time_limit) and was stopped; do less work per cell, or split the work across cells",
        budget.as_secs_f64()
    )
}

/// What the runtime thread does when it has nothing runnable (no microtask, no due timer) while the
/// cell is still unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingMode {
    /// Emit [`RuntimeEvent::Pending`](crate::RuntimeEvent::Pending) each time the cell becomes idle, and keep waiting for
    /// commands.
    Continue,
    /// Pause when the cell becomes idle: emit [`RuntimeEvent::Pending`](crate::RuntimeEvent::Pending) and block on the control
    /// channel until [`RuntimeControl::Continue`](crate::RuntimeControl::Continue) (stop pausing until the next
    /// [`RuntimeCommand::ObservePendingFrontier`](crate::RuntimeCommand::ObservePendingFrontier)), [`RuntimeControl::Resume`](crate::RuntimeControl::Resume) (pause again at the
    /// next idle point) or [`RuntimeControl::Terminate`](crate::RuntimeControl::Terminate). Nothing the cell does runs while paused;
    /// commands that arrive meanwhile wait in order. Pausing starts on; in this mode `Pending` is
    /// emitted only when pausing, so it always means "paused, waiting for control".
    PauseUntilResumed,
}
