//! The pluggable engine layer: how a cell's JavaScript engine is started, and how its runtime thread
//! talks to the cell actor (the runtime thread and the actor).
//!
//! An [`Engine`] starts one cell on its own OS thread and hands back [`EngineHandles`]: a command
//! sender, a control sender and a [`TerminateHandle`]. The thread reports [`RuntimeEvent`]s through
//! an [`EventSender`]. The rules of the globals that do not depend on the engine (how output items
//! are normalised, what may be stored, what a notification must contain, how timers are numbered)
//! live in [`globals`] and [`timers`], so that every engine behaves the same.
//!
//! This crate names no concrete engine and holds no engine types: it must not know about V8.
//!
//! # Recipe: an engine of your own
//!
//! `examples/toy_engine.rs` implements [`Engine`] for a toy line-by-line language: a thread per
//! cell, `Started` first, `Result` last unless terminated, tool answers read from the command
//! channel, and a [`TerminateHandle`]: `cargo run -p codemode-engine --example toy_engine`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod channel;
pub mod globals;
mod hard_stop;
pub mod lane;
pub mod script;
pub mod timers;
pub mod watchdog;

use std::fmt;
use std::sync::Arc;

use codemode_protocol::{StoredValues, ToolDefinition};
use std::time::Duration;

use codemode_protocol::limits::{
    DEFAULT_CPU_TIME_LIMIT, DEFAULT_HEAP_LIMIT_BYTES, DEFAULT_MAX_TOOL_CALLS_PER_CELL,
    MIN_HEAP_LIMIT_BYTES,
};

pub use channel::{
    CommandSender, EventReceiver, EventSendError, EventSender, ForwardEventFn, RuntimeCommand,
    RuntimeControl, RuntimeEvent, event_channel,
};
pub use hard_stop::{HardStop, HardStopHook, HardStopReason};

/// Everything an engine needs to start one cell.
#[derive(Debug, Clone)]
pub struct CellStart {
    /// The id of the request that started the cell (the model's `exec` call); every
    /// [`RuntimeEvent::Notify`] carries it.
    pub call_id: String,
    /// The cell's JavaScript source, evaluated as an ES module.
    pub source: String,
    /// The tools the cell may call, in the order `ALL_TOOLS` lists them.
    pub enabled_tools: Vec<ToolDefinition>,
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
    pub tenant: Option<String>,
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
    /// Emit [`RuntimeEvent::Pending`] each time the cell becomes idle, and keep waiting for
    /// commands.
    Continue,
    /// Pause when the cell becomes idle: emit [`RuntimeEvent::Pending`] and block on the control
    /// channel until [`RuntimeControl::Continue`] (stop pausing until the next
    /// [`RuntimeCommand::ObservePendingFrontier`]), [`RuntimeControl::Resume`] (pause again at the
    /// next idle point) or [`RuntimeControl::Terminate`]. Nothing the cell does runs while paused;
    /// commands that arrive meanwhile wait in order. Pausing starts on; in this mode `Pending` is
    /// emitted only when pausing, so it always means "paused, waiting for control".
    PauseUntilResumed,
}

/// What an engine hands back for a started cell. Dropping every sender lets the thread end once it
/// next looks at its channels.
#[derive(Debug)]
pub struct EngineHandles {
    /// Commands for the running cell: tool results, timer firings, frontier observation.
    pub commands: CommandSender<RuntimeCommand>,
    /// Control for a cell paused at its pending frontier.
    pub control: CommandSender<RuntimeControl>,
    /// Stops the cell from any thread.
    pub terminate: TerminateHandle,
}

/// Stops one cell's JavaScript at any point: in an infinite loop, a microtask loop, a timer callback,
/// or while it waits for tool results or is paused.
///
/// Cloneable and usable from any thread. It targets exactly the run it was made for, and stays safe
/// (a no-op) after that run has ended and its engine instance is gone.
#[derive(Clone)]
pub struct TerminateHandle(Arc<dyn Terminate>);

impl TerminateHandle {
    /// A handle that stops the run through `target`.
    pub fn new(target: Arc<dyn Terminate>) -> Self {
        TerminateHandle(target)
    }

    /// Asks the cell to stop. Returns at once; the runtime thread then ends without a
    /// [`RuntimeEvent::Result`] and drops its event sender.
    pub fn terminate(&self) {
        self.0.terminate();
    }
}

impl fmt::Debug for TerminateHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminateHandle").finish_non_exhaustive()
    }
}

/// What an engine implements behind a [`TerminateHandle`].
pub trait Terminate: Send + Sync + 'static {
    /// Stops the run; idempotent; must not block on the runtime thread.
    fn terminate(&self);
}

/// Why an engine could not start a cell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The OS refused to create the runtime thread.
    #[error("failed to start the runtime thread for the cell: {0}")]
    Thread(std::io::Error),
    /// A limit is outside what the engine accepts.
    #[error("invalid cell limit: {0}")]
    InvalidLimit(String),
    /// The engine itself cannot run (its library failed to initialise).
    #[error("the JavaScript engine is unavailable: {0}")]
    Unavailable(String),
    /// A runtime could not be created or prepared for a cell (its bootstrap failed, its CPU
    /// limit cannot be enforced): the text says what, and is the cell's error as it is.
    #[error("{0}")]
    Runtime(String),
}

/// A JavaScript engine that can run cells. Implemented by `runtime-v8`; a scripted engine can
/// implement it in tests that need exact control of event order.
pub trait Engine: Send + Sync + 'static {
    /// A short human-readable name and version, such as `V8 10.2.154.26`.
    fn describe(&self) -> String;

    /// Starts `cell` on a new OS thread (or in another process). The run sends
    /// [`RuntimeEvent::Started`] first and, unless terminated, [`RuntimeEvent::Result`] last,
    /// then drops `events`.
    ///
    /// Returns at once: callers start cells from async workers, so an engine never waits here
    /// for anything slow (an engine process being started, a lock held across I/O). What the
    /// cell needs is prepared after this returns; a failure found then arrives as events
    /// (`Started`, then a `Result` carrying the error), and commands sent meanwhile are kept
    /// in order until the cell runs. `Err` is for what is known at once (a limit the engine does
    /// not accept, no thread to be had).
    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError>;

    /// Serves `lane` on a thread of the engine's own: waits on it for cells, one after another,
    /// each run on that thread with the lane's inbox for its commands (see [`lane`]). Returns
    /// once the thread is started; the thread ends when the lane closes. An engine that cannot
    /// run cells that way answers [`EngineError::Unavailable`] (the default); an engine process
    /// needs it, and one whose engine cannot serve lanes fails to start, saying so.
    fn serve_lane(&self, lane: Box<dyn lane::CellLane>) -> Result<(), EngineError> {
        drop(lane);
        Err(EngineError::Unavailable(format!(
            "{} cannot serve lanes",
            self.describe()
        )))
    }
}
