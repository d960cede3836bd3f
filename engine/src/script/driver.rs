//! The runtime thread of one cell of a [`ScriptRuntime`]: owns the runtime, evaluates the module,
//! and runs the cell's event loop (tool results, timers, pending frontier) until the cell ends.
//!
//! The loop, after evaluating the module and after every step (a command, a timer): run microtasks,
//! see whether the cell ended (terminated, exited, out of heap, settled), run a due timer, or take a
//! queued command. With nothing runnable the cell is *idle*: it reports
//! [`RuntimeEvent::Pending`] once per idle spell and, when pausing, blocks on the controls.
//! Commands and controls come from the cell's [`CellInbox`]: channels in-process, the thread's own
//! lane in an engine process.
//!
//! Termination reaches the thread three ways, all idempotent: the [`TerminateTarget`] flag checked
//! between steps, the runtime's terminator for JavaScript that is running, and `Terminate`
//! messages that wake a thread blocked on its inbox.

use parking_lot::Mutex;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::host::{CellHost, HostStop};
use super::ops::HostOp;
use crate::globals::CellGlobals;
use crate::lane::{CellInbox, Received, Wait};
use crate::{
    CellStart, EngineError, EventSender, PendingMode, RuntimeCommand, RuntimeControl, RuntimeEvent,
    Terminate,
};

/// The bootstrap every script engine runs in a fresh runtime: a script that evaluates to an
/// installer function `(host, config) => dispatch`. It installs the globals over `host(op, a?, b?)`
/// (answered by [`CellHost`]) and returns the dispatcher the runtime thread calls with
/// `(kind, id, payload)`.
pub const BOOTSTRAP_JS: &str = include_str!("../../js/bootstrap.js");

/// The resource name the bootstrap script is compiled under; its frames are never the cell's.
pub const BOOTSTRAP_RESOURCE_NAME: &str = "codemode:bootstrap";

/// The resource name of the cell's module: error positions read `cell.js:LINE:COLUMN`.
pub const CELL_RESOURCE_NAME: &str = "cell.js";

// The kinds of the bootstrap's dispatcher.
const DISPATCH_RESOLVE: i32 = 1;
const DISPATCH_REJECT: i32 = 2;
const DISPATCH_TIMER: i32 = 3;
const DISPATCH_INSTALL_TOOLS: i32 = 4;

/// How a call that ran JavaScript ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// It returned.
    Ok,
    /// It threw; the error text of the globals contract (the value, then `at cell.js:L:C`).
    Exception(String),
    /// Execution was terminated: by a terminator, a host reply, or a limit.
    Terminated,
}

/// The state of the module's evaluation promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleState {
    /// Not settled yet.
    Pending,
    /// The module ran to its end.
    Fulfilled,
    /// The module threw or rejected; the error text.
    Rejected(String),
}

/// Stops a runtime's JavaScript from any thread: what a [`ScriptRuntime`] hands out so that a
/// terminate handle can reach JavaScript that is running. A no-op once its runtime is gone.
pub trait ScriptTerminator: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// Stops the JavaScript running now, and any the runtime would run later.
    fn terminate(&self);
}

/// Watches a cell's CPU time; dropped (before its runtime) when the cell ends.
pub trait CpuWatch {
    /// Whether the budget ran out and the cell was stopped for it.
    fn exceeded(&self) -> bool;
}

/// One JavaScript runtime that runs the bootstrap and one cell's module: the engine-specific half
/// of a script engine. The runtime thread ([`run`], [`run_warm`]) drives it.
pub trait ScriptRuntime: Sized + 'static {
    /// The stack of a cell's runtime thread; the JavaScript engine's own stack limit must end
    /// deep recursion well before it is used up.
    const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

    /// The JavaScript engine's name and version, such as `V8 12.4.254.21`.
    fn describe() -> String;

    /// Makes the JavaScript engine ready to create runtimes (once per process, however often it
    /// is called), or says why it cannot run here. The default needs nothing.
    fn initialize() -> Result<(), EngineError> {
        Ok(())
    }

    /// Stops this runtime's JavaScript from another thread.
    type Terminator: ScriptTerminator;
    /// Watches the CPU time of the cell running on this thread.
    type CpuWatch: CpuWatch;
    /// Marks the calling thread as running a cell, for as long as it lives.
    type CellGuard;
    /// Access to the host between calls into JavaScript.
    type HostGuard<'a>: std::ops::DerefMut<Target = CellHost>
    where
        Self: 'a;

    /// Creates a runtime with a heap limit, on the calling thread (the one that will run it).
    fn create(heap_limit_bytes: usize, host: CellHost) -> Result<Self, EngineError>;
    /// The host its `host(...)` calls reach (never held across a call into JavaScript).
    fn host(&mut self) -> Self::HostGuard<'_>;
    /// Makes the runtime ready for another cell in a fresh global scope, with `host` as its
    /// host, after its last cell ended (the bootstrap then runs again): nothing of the old scope
    /// may reach the host or the new scope, no stop meant for the old cell may reach the new one.
    /// `false` when the runtime should be dropped instead. Only a lane reuses runtimes: its
    /// cells are one tenant's ([`crate::lane`]). The default never reuses one.
    fn reset(&mut self, host: CellHost) -> bool {
        drop(host);
        false
    }
    /// A terminator for this runtime.
    fn terminator(&self) -> Self::Terminator;
    /// Whether a host call panicked (the runtime was stopped then).
    fn host_panicked(&self) -> bool;
    /// Whether the heap limit stopped the runtime.
    fn heap_limit_hit(&self) -> bool;
    /// The most elements an array of this engine can hold, when going past it ends the process
    /// instead of throwing (V8: "Fatal JavaScript invalid size error"): the bootstrap then builds
    /// the results of a global `match` and a `split` on strings that long itself, element by
    /// element, so that the heap limit ends the cell, and refuses `JSON.parse` of a text that
    /// long. `None` (the default): the engine's own built-ins are safe.
    const LONGEST_ARRAY: Option<u32> = None;
    /// Called before each runtime is created with the bootstrap it will run (the same `source`
    /// and `config` each time in a process, as a rule): an engine may prepare, once, something its
    /// runtimes share, such as a snapshot of the bootstrapped global scope from which each runtime
    /// makes its own. Whatever it prepares, [`ScriptRuntime::bootstrap`] with the same arguments
    /// must behave as if the script ran there. `snapshot_config` is `config` for a bootstrap run
    /// in a scope that is to be snapshotted (`forSnapshot`: it then leaves alone what the engine
    /// adds or looks for in each scope it makes from the snapshot). The default prepares nothing.
    fn prepare_bootstrap(source: &str, config: &str, snapshot_config: &str) {
        let _ = (source, config, snapshot_config);
    }
    /// Gives the runtime a fresh global scope with the bootstrap run in it: runs the script
    /// `source` (an installer) with the host function and `config` (JSON), and keeps the
    /// dispatcher it returns.
    fn bootstrap(&mut self, source: &str, config: &str) -> RunStatus;
    /// Compiles and evaluates the cell's source as an ES module named [`CELL_RESOURCE_NAME`].
    fn evaluate_module(&mut self, source: &str) -> RunStatus;
    /// Calls the dispatcher with `(kind, id, payload)`.
    fn dispatch(&mut self, kind: i32, id: &str, payload: Option<&str>) -> RunStatus;
    /// Runs every queued microtask (promise job).
    fn run_microtasks(&mut self) -> RunStatus;
    /// The state of the module's evaluation.
    fn module_state(&mut self) -> ModuleState;
    /// Puts the calling thread's cell under a CPU budget; fails when it cannot be enforced.
    fn watch_cpu(&self, budget: Duration, call_id: String) -> Result<Self::CpuWatch, EngineError>;
    /// Marks the calling thread as running the cell `call_id`.
    fn enter_cell(call_id: &str) -> Self::CellGuard;
}

/// The error of a cell that awaits a promise nothing can settle (Node reports the same case as an
/// unsettled top-level await).
const UNSETTLED_AWAIT: &str = "the script awaits a promise that nothing can settle: no tool call \
    or timer is pending, so it would wait forever; resolve the promise, or await a tool call or a \
    timer instead";

/// How many cells one runtime serves at most before a lane replaces it (see
/// [`ScriptRuntime::reset`]): what a runtime keeps between cells (a heap's garbage, caches) does
/// not build up without end.
const MAX_CELLS_PER_RUNTIME: u32 = 100;

/// What the bootstrap receives as its configuration: nothing of the cell (it may run before the
/// cell is known) nor of the runtime (an engine may run it once for all its runtimes, see
/// [`ScriptRuntime::prepare_bootstrap`]). How many cells a runtime served before, for the test
/// hooks' `__codemode_test_cells_before()`, comes with the cell's tools instead.
#[derive(Serialize)]
struct BootstrapConfig {
    #[serde(rename = "testHooks")]
    test_hooks: bool,
    /// The number of each op of `host(op, a?, b?)`, by name ([`HostOp::numbers`]).
    ops: std::collections::BTreeMap<&'static str, i32>,
    /// Whether the bootstrap runs in a scope that is to be snapshotted (see
    /// [`ScriptRuntime::prepare_bootstrap`]); left out when not.
    #[serde(rename = "forSnapshot", skip_serializing_if = "std::ops::Not::not")]
    for_snapshot: bool,
    /// The engine's [`ScriptRuntime::LONGEST_ARRAY`]; left out when it has none.
    #[serde(rename = "longestArray", skip_serializing_if = "Option::is_none")]
    longest_array: Option<u32>,
}

impl BootstrapConfig {
    /// The configuration as the bootstrap reads it (JSON): encoded once per
    /// process for each value of `test_hooks` and `for_snapshot` and each engine's
    /// [`ScriptRuntime::LONGEST_ARRAY`] (some or none: one engine, V8, has one), not again for
    /// every runtime and every cell a runtime serves.
    fn json(
        test_hooks: bool,
        for_snapshot: bool,
        longest_array: Option<u32>,
    ) -> Result<&'static str, EngineError> {
        static ENCODED: [std::sync::OnceLock<String>; 8] =
            [const { std::sync::OnceLock::new() }; 8];
        let slot = &ENCODED[usize::from(test_hooks) * 4
            + usize::from(for_snapshot) * 2
            + usize::from(longest_array.is_some())];
        if let Some(json) = slot.get() {
            return Ok(json);
        }
        let json = serde_json::to_string(&BootstrapConfig {
            test_hooks,
            ops: HostOp::numbers(),
            for_snapshot,
            longest_array,
        })
        .map_err(|error| {
            EngineError::Runtime(format!(
                "cannot encode the bootstrap configuration: {error}"
            ))
        })?;
        Ok(slot.get_or_init(|| json))
    }
}

/// The state a [`crate::TerminateHandle`] shares with the runtime thread.
#[derive(Debug)]
pub struct TerminateTarget<T> {
    requested: AtomicBool,
    /// The runtime's terminator while it is alive; the thread attaches and detaches it.
    runtime: Mutex<Option<T>>,
}

impl<T> Default for TerminateTarget<T> {
    fn default() -> Self {
        TerminateTarget {
            requested: AtomicBool::new(false),
            runtime: Mutex::new(None),
        }
    }
}

impl<T: ScriptTerminator> TerminateTarget<T> {
    fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Makes the live runtime reachable by `terminate`. If termination was requested before, the
    /// runtime is terminated at once, so that no JavaScript of this cell ever runs.
    fn attach(&self, terminator: T) {
        let mut isolate = self.runtime.lock();
        if self.requested() {
            terminator.terminate();
        }
        *isolate = Some(terminator);
    }

    fn detach(&self) {
        self.runtime.lock().take();
    }

    fn request(&self) {
        // The flag is set under the lock so that `attach` cannot miss it.
        let isolate = self.runtime.lock();
        self.requested.store(true, Ordering::SeqCst);
        if let Some(terminator) = isolate.as_ref() {
            terminator.terminate();
        }
    }
}

/// What a terminate handle holds: the shared target and the senders that wake a blocked thread.
/// The runtime thread itself holds only the target, so dropping every handle and sender still
/// disconnects its channels.
#[derive(Debug)]
pub struct CellTerminator<T> {
    /// The shared target.
    pub target: Arc<TerminateTarget<T>>,
    /// Wakes a thread blocked on commands.
    pub commands: Sender<RuntimeCommand>,
    /// Wakes a thread paused at its pending frontier.
    pub control: Sender<RuntimeControl>,
}

impl<T: ScriptTerminator> Terminate for CellTerminator<T> {
    fn terminate(&self) {
        self.target.request();
        let _ = self.commands.send(RuntimeCommand::Terminate);
        let _ = self.control.send(RuntimeControl::Terminate);
    }
}

/// What a terminate handle holds for a cell served on a lane: the shared target alone. A thread
/// blocked on its lane is woken by the lane's owner, who sends the lane a termination too.
#[derive(Debug)]
pub struct LaneTerminator<T> {
    /// The shared target.
    pub target: Arc<TerminateTarget<T>>,
}

impl<T: ScriptTerminator> Terminate for LaneTerminator<T> {
    fn terminate(&self) {
        self.target.request();
    }
}

/// The channels and shared state the runtime thread runs with.
pub struct ThreadContext<T> {
    /// Where the cell's events go.
    pub events: EventSender,
    /// The cell's commands and pending-frontier controls.
    pub inbox: Box<dyn CellInbox>,
    /// What terminate handles reach.
    pub terminate: Arc<TerminateTarget<T>>,
    /// Whether the bootstrap installs its test-only globals.
    pub test_hooks: bool,
}

impl<T> std::fmt::Debug for ThreadContext<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadContext")
            .field("events", &self.events)
            .field("test_hooks", &self.test_hooks)
            .finish_non_exhaustive()
    }
}

/// The body of a cell's runtime thread on the cold path: creates the runtime, then runs the cell.
/// Never panics: a panic becomes [`RuntimeEvent::ThreadPanicked`].
pub fn run<R: ScriptRuntime>(cell: CellStart, context: ThreadContext<R::Terminator>) {
    report::<R>(context.events.clone(), || {
        CellThread::<R>::run(cell, context)
    });
}

/// Runs a cell on a runtime warmed earlier on this thread.
pub fn run_warm<R: ScriptRuntime>(
    warm: WarmRuntime<R>,
    cell: CellStart,
    context: ThreadContext<R::Terminator>,
) {
    run_warm_keeping(warm, cell, context);
}

/// [`run_warm`], then makes the runtime ready for the next cell of this thread when its cell ran
/// to an end of its own (not terminated, abandoned or panicked) and the runtime can be reset
/// ([`ScriptRuntime::reset`]); `None` when a new runtime is needed.
pub fn run_warm_then_reuse<R: ScriptRuntime>(
    warm: WarmRuntime<R>,
    cell: CellStart,
    context: ThreadContext<R::Terminator>,
) -> Option<WarmRuntime<R>> {
    let (heap_limit_bytes, test_hooks) = (warm.heap_limit_bytes, context.test_hooks);
    let cells_before = warm.cells_before.saturating_add(1);
    let runtime = run_warm_keeping(warm, cell, context)?;
    WarmRuntime::reuse(runtime, heap_limit_bytes, test_hooks, cells_before)
}

fn run_warm_keeping<R: ScriptRuntime>(
    warm: WarmRuntime<R>,
    cell: CellStart,
    context: ThreadContext<R::Terminator>,
) -> Option<R> {
    report::<R>(context.events.clone(), || {
        if context.events.send_blocking(RuntimeEvent::Started).is_err() {
            return (Ending::Abandoned, None);
        }
        CellThread::run_on(warm, cell, context)
    })
}

/// Runs a cell's thread body and sends how it ended; a panic becomes `ThreadPanicked`. The
/// runtime the body hands back is disposed of (or handed back, when its cell ran to an end of its
/// own) only after that: disposing of an isolate takes about as long as running a small cell
/// (unmapping its heap), and the cell's owner need not wait for it.
fn report<R: ScriptRuntime>(
    events: EventSender,
    body: impl FnOnce() -> (Ending, Option<R>),
) -> Option<R> {
    let cpu_before = thread_cpu_time();
    let outcome = catch_unwind(AssertUnwindSafe(body));
    let (ending, disposal) = outcome.unwrap_or((Ending::Panicked, None));
    let finished = matches!(ending, Ending::Finished { .. });
    if finished && let (Some(before), Some(after)) = (cpu_before, thread_cpu_time()) {
        let cpu_time = after.saturating_sub(before);
        let _ = events.send_blocking(RuntimeEvent::Usage { cpu_time });
    }
    let event = match ending {
        Ending::Finished {
            stored_value_writes,
            error_text,
        } => Some(RuntimeEvent::Result {
            stored_value_writes,
            error_text,
        }),
        Ending::Panicked => Some(RuntimeEvent::ThreadPanicked),
        Ending::Terminated | Ending::Abandoned => None,
    };
    if let Some(event) = event {
        let _ = events.send_blocking(event);
    }
    // The last sender goes before the isolate: the owner sees the end of the events at once.
    drop(events);
    if disposal.is_some() {
        // The owner was just woken, often onto this core (wake-affine), where it would wait for
        // the disposal: let it run first (measured: a warm start's result reached its owner
        // 1.1-1.2 ms after start() without this, 0.67-0.85 ms with it).
        std::thread::yield_now();
    }
    if finished { disposal } else { None }
}

/// The CPU time the calling thread has spent, if the system says.
fn thread_cpu_time() -> Option<Duration> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    Some(Duration::new(
        u64::try_from(now.tv_sec()).ok()?,
        u32::try_from(now.tv_nsec()).ok()?,
    ))
}

/// How a cell's thread ends.
enum Ending {
    Finished {
        stored_value_writes: codemode_protocol::StoredValues,
        error_text: Option<String>,
    },
    Terminated,
    /// Nobody listens any more: end quietly.
    Abandoned,
    Panicked,
}

/// Whether the cell goes on after a step, or how it ends.
enum Step {
    Continue,
    End(EndReason),
}

enum EndReason {
    Completed(Option<String>),
    Terminated,
    Abandoned,
    Panicked,
}

struct CellThread<R: ScriptRuntime> {
    runtime: R,
    inbox: Box<dyn CellInbox>,
    terminate: Arc<TerminateTarget<R::Terminator>>,
    pending_mode: PendingMode,
    /// In pause mode: whether the next idle point pauses (set by `Resume` and
    /// `ObservePendingFrontier`, cleared by `Continue`).
    pause_when_idle: bool,
    /// Whether `Pending` was already reported for the current idle spell.
    idle_reported: bool,
    heap_limit_bytes: usize,
    /// The CPU budget's watch, when the cell has one; dropped before the runtime.
    cpu_watch: Option<(R::CpuWatch, Duration)>,
}

/// A runtime created ahead of its cell (pre-warming): the runtime exists and the bootstrap has
/// run; the host is a placeholder until a cell arrives.
pub struct WarmRuntime<R> {
    runtime: R,
    heap_limit_bytes: usize,
    /// How many cells it served before the next.
    cells_before: u32,
}

impl<R> std::fmt::Debug for WarmRuntime<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmRuntime")
            .field("heap_limit_bytes", &self.heap_limit_bytes)
            .finish_non_exhaustive()
    }
}

impl<R: ScriptRuntime> WarmRuntime<R> {
    /// Creates the runtime and runs the bootstrap, on the calling thread (which will run the
    /// cell).
    pub fn create(heap_limit_bytes: usize, test_hooks: bool) -> Result<Self, EngineError> {
        R::prepare_bootstrap(
            BOOTSTRAP_JS,
            BootstrapConfig::json(test_hooks, false, R::LONGEST_ARRAY)?,
            BootstrapConfig::json(test_hooks, true, R::LONGEST_ARRAY)?,
        );
        let runtime = R::create(heap_limit_bytes, placeholder_host(test_hooks))?;
        Self::bootstrapped(runtime, heap_limit_bytes, test_hooks, 0)
    }

    /// Makes `runtime`, whose cell has ended, ready for another on this thread
    /// ([`ScriptRuntime::reset`], then the bootstrap); `None` when a new one is needed.
    fn reuse(
        mut runtime: R,
        heap_limit_bytes: usize,
        test_hooks: bool,
        cells_before: u32,
    ) -> Option<Self> {
        if cells_before >= MAX_CELLS_PER_RUNTIME || !runtime.reset(placeholder_host(test_hooks)) {
            return None;
        }
        Self::bootstrapped(runtime, heap_limit_bytes, test_hooks, cells_before).ok()
    }

    fn bootstrapped(
        mut runtime: R,
        heap_limit_bytes: usize,
        test_hooks: bool,
        cells_before: u32,
    ) -> Result<Self, EngineError> {
        let config = BootstrapConfig::json(test_hooks, false, R::LONGEST_ARRAY)?;
        match runtime.bootstrap(BOOTSTRAP_JS, config) {
            RunStatus::Ok => Ok(WarmRuntime {
                runtime,
                heap_limit_bytes,
                cells_before,
            }),
            RunStatus::Exception(error) => Err(EngineError::Runtime(format!(
                "the runtime's bootstrap failed: {error}"
            ))),
            RunStatus::Terminated => Err(EngineError::Runtime(
                "the runtime's bootstrap was terminated".to_owned(),
            )),
        }
    }

    /// The heap limit it was created with.
    pub fn heap_limit_bytes(&self) -> usize {
        self.heap_limit_bytes
    }
}

/// The host of a runtime between cells. Nobody listens to its events; the cell's host replaces
/// it before any of the cell's JavaScript runs.
fn placeholder_host(test_hooks: bool) -> CellHost {
    let (placeholder_events, _) = crate::event_channel(None);
    CellHost::new(
        CellGlobals::new(String::new(), Vec::new(), Default::default()),
        placeholder_events,
        test_hooks,
    )
}

impl<R: ScriptRuntime> CellThread<R> {
    /// Runs `cell` on a runtime created now (the cold path).
    fn run(cell: CellStart, context: ThreadContext<R::Terminator>) -> (Ending, Option<R>) {
        if context.events.send_blocking(RuntimeEvent::Started).is_err() {
            return (Ending::Abandoned, None);
        }
        match WarmRuntime::<R>::create(cell.limits.heap_limit_bytes, context.test_hooks) {
            Ok(warm) => CellThread::run_on(warm, cell, context),
            Err(error) => (
                Ending::Finished {
                    stored_value_writes: Default::default(),
                    error_text: Some(error.to_string()),
                },
                None,
            ),
        }
    }

    /// Runs `cell` on a runtime created earlier, after `Started` was sent; hands the runtime
    /// back for disposal, its events sender released.
    fn run_on(
        warm: WarmRuntime<R>,
        cell: CellStart,
        context: ThreadContext<R::Terminator>,
    ) -> (Ending, Option<R>) {
        let ThreadContext {
            events,
            inbox,
            terminate,
            test_hooks,
        } = context;
        let WarmRuntime {
            mut runtime,
            heap_limit_bytes,
            cells_before,
        } = warm;
        let _running = R::enter_cell(&cell.call_id);
        let call_id = cell.call_id.clone();
        let globals = CellGlobals::new(cell.call_id, cell.enabled_tools, cell.stored_values)
            .with_max_tool_calls(cell.limits.max_tool_calls);
        let tools = serde_json::to_string(&serde_json::json!({
            "tools": globals.tool_listing(),
            "unavailable": cell.unavailable_servers,
        }))
        .expect("the tool listing is plain data");
        *runtime.host() = CellHost::new(globals, events, test_hooks);
        terminate.attach(runtime.terminator());
        let cpu_watch = match cell.limits.cpu_time_limit {
            None => None,
            Some(budget) => match runtime.watch_cpu(budget, call_id) {
                Ok(watch) => Some((watch, budget)),
                // A limit that cannot be enforced fails the cell rather than being ignored.
                Err(error) => {
                    terminate.detach();
                    runtime.host().release_events();
                    return (
                        Ending::Finished {
                            stored_value_writes: Default::default(),
                            error_text: Some(error.to_string()),
                        },
                        Some(runtime),
                    );
                }
            },
        };
        let mut thread = CellThread {
            runtime,
            inbox,
            terminate,
            pending_mode: cell.pending_mode,
            pause_when_idle: cell.pending_mode == PendingMode::PauseUntilResumed,
            idle_reported: false,
            heap_limit_bytes,
            cpu_watch,
        };
        let reason = thread.drive(&tools, cells_before, &cell.source);
        thread.cpu_watch = None;
        thread.terminate.detach();
        let CellThread { mut runtime, .. } = thread;
        let ending = match reason {
            EndReason::Completed(error_text) => Ending::Finished {
                stored_value_writes: runtime.host().globals.take_stored_value_writes(),
                error_text,
            },
            EndReason::Terminated => Ending::Terminated,
            EndReason::Abandoned => Ending::Abandoned,
            EndReason::Panicked => Ending::Panicked,
        };
        runtime.host().release_events();
        (ending, Some(runtime))
    }

    /// Installs the cell's tools (telling the bootstrap how many cells its runtime served before),
    /// evaluates its module and runs it to its end.
    fn drive(&mut self, tools: &str, cells_before: u32, source: &str) -> EndReason {
        let status = self.runtime.dispatch(
            DISPATCH_INSTALL_TOOLS,
            &cells_before.to_string(),
            Some(tools),
        );
        if let Step::End(reason) = self.after(status) {
            return reason;
        }
        let status = self.runtime.evaluate_module(source);
        if let Step::End(reason) = self.after(status) {
            return reason;
        }
        loop {
            if let Step::End(reason) = self.settle() {
                return reason;
            }
            if let Step::End(reason) = self.next_step() {
                return reason;
            }
        }
    }

    /// Runs microtasks and decides whether the cell has ended.
    fn settle(&mut self) -> Step {
        let status = self.runtime.run_microtasks();
        if let Step::End(reason) = self.after(status) {
            return Step::End(reason);
        }
        match self.runtime.module_state() {
            ModuleState::Pending => Step::Continue,
            ModuleState::Fulfilled => Step::End(EndReason::Completed(None)),
            // A limit or a termination that landed while the error was being formatted is the
            // real reason the cell ended.
            ModuleState::Rejected(error_text) => match self.after(RunStatus::Ok) {
                Step::End(reason) => Step::End(reason),
                Step::Continue => Step::End(EndReason::Completed(Some(error_text))),
            },
        }
    }

    /// Interprets the status of a call that ran JavaScript.
    fn after(&mut self, status: RunStatus) -> Step {
        if self.terminate.requested() {
            return Step::End(EndReason::Terminated);
        }
        if self.runtime.host_panicked() {
            return Step::End(EndReason::Panicked);
        }
        match self.runtime.host().stop {
            Some(HostStop::Abandoned) => return Step::End(EndReason::Abandoned),
            Some(HostStop::Exit) => return Step::End(EndReason::Completed(None)),
            None => {}
        }
        if self.runtime.heap_limit_hit() {
            return Step::End(EndReason::Completed(Some(crate::heap_limit_error(
                self.heap_limit_bytes,
            ))));
        }
        if let Some((watch, budget)) = &self.cpu_watch
            && watch.exceeded()
        {
            return Step::End(EndReason::Completed(Some(crate::cpu_time_limit_error(
                *budget,
            ))));
        }
        match status {
            RunStatus::Ok => Step::Continue,
            RunStatus::Exception(error_text) => Step::End(EndReason::Completed(Some(error_text))),
            // Terminated with no reason we know of: treat it as a termination.
            RunStatus::Terminated => Step::End(EndReason::Terminated),
        }
    }

    /// Does one unit of work: a due timer, a queued command, or (when idle) reports `Pending` and
    /// waits for the next command or timer.
    fn next_step(&mut self) -> Step {
        let due = self.runtime.host().timers.pop_due(Instant::now());
        if let Some(id) = due {
            return self.fire_timer(id);
        }
        match self.inbox.next_command(Wait::No) {
            Received::Message(command) => return self.handle(command),
            Received::Closed => return Step::End(EndReason::Abandoned),
            Received::Nothing => {}
        }
        // Idle: nothing runnable until a command arrives or a timer is due. With no tool call
        // unanswered and no timer set, nothing ever will be: the cell awaits a promise that
        // nothing can settle, and would wait forever.
        let stuck = {
            let host = self.runtime.host();
            !host.globals.has_unanswered_tool_calls() && host.timers.is_empty()
        };
        if stuck {
            return Step::End(EndReason::Completed(Some(UNSETTLED_AWAIT.to_owned())));
        }
        if !self.idle_reported {
            self.idle_reported = true;
            match self.pending_mode {
                PendingMode::Continue => {
                    if !self.runtime.host().emit(RuntimeEvent::Pending) {
                        return Step::End(EndReason::Abandoned);
                    }
                }
                // In pause mode `Pending` always means "paused": an idle spell while pausing is off
                // is silent, so the actor never mistakes it for a pause.
                PendingMode::PauseUntilResumed if self.pause_when_idle => {
                    if !self.runtime.host().emit(RuntimeEvent::Pending) {
                        return Step::End(EndReason::Abandoned);
                    }
                    match self.inbox.next_control() {
                        Received::Message(RuntimeControl::Continue) => self.pause_when_idle = false,
                        Received::Message(RuntimeControl::Resume) => self.pause_when_idle = true,
                        Received::Message(RuntimeControl::Terminate)
                        | Received::Nothing
                        | Received::Closed => {
                            return Step::End(EndReason::Terminated);
                        }
                    }
                    // Whatever became due or arrived while paused is looked at before waiting.
                    return self.after(RunStatus::Ok);
                }
                PendingMode::PauseUntilResumed => {}
            }
        }
        let wait = match self.runtime.host().timers.next_deadline() {
            Some(deadline) => Wait::Until(deadline),
            None => Wait::Forever,
        };
        match self.inbox.next_command(wait) {
            Received::Message(command) => self.handle(command),
            Received::Nothing => Step::Continue,
            Received::Closed => Step::End(EndReason::Abandoned),
        }
    }

    fn fire_timer(&mut self, id: u64) -> Step {
        self.idle_reported = false;
        let status = self.runtime.dispatch(DISPATCH_TIMER, &id.to_string(), None);
        self.after(status)
    }

    fn handle(&mut self, command: RuntimeCommand) -> Step {
        if self.terminate.requested() {
            return Step::End(EndReason::Terminated);
        }
        let status = match command {
            RuntimeCommand::ToolResponse { id, result } => {
                self.idle_reported = false;
                self.runtime.host().globals.tool_call_settled(&id);
                self.runtime
                    .dispatch(DISPATCH_RESOLVE, &id, Some(result.as_str()))
            }
            RuntimeCommand::ToolError { id, error_text } => {
                self.idle_reported = false;
                self.runtime.host().globals.tool_call_settled(&id);
                self.runtime
                    .dispatch(DISPATCH_REJECT, &id, Some(&error_text))
            }
            RuntimeCommand::TimeoutFired { id } => {
                if !self.runtime.host().timers.clear(id) {
                    return Step::Continue;
                }
                return self.fire_timer(id);
            }
            RuntimeCommand::ObservePendingFrontier => {
                if self.pending_mode == PendingMode::PauseUntilResumed && !self.pause_when_idle {
                    self.pause_when_idle = true;
                    // Pause at the frontier now if the cell is idle already.
                    self.idle_reported = false;
                }
                return Step::Continue;
            }
            RuntimeCommand::Terminate => return Step::End(EndReason::Terminated),
        };
        self.after(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_config_is_the_config_marked_for_a_snapshot() {
        for (test_hooks, longest_array) in [false, true]
            .into_iter()
            .flat_map(|hooks| [(hooks, None), (hooks, Some(134_217_725))])
        {
            let config: serde_json::Value = serde_json::from_str(
                BootstrapConfig::json(test_hooks, false, longest_array).unwrap(),
            )
            .unwrap();
            let snapshot: serde_json::Value = serde_json::from_str(
                BootstrapConfig::json(test_hooks, true, longest_array).unwrap(),
            )
            .unwrap();
            assert_eq!(config["testHooks"], test_hooks);
            assert_eq!(
                config.get("longestArray").and_then(|n| n.as_u64()),
                longest_array.map(u64::from)
            );
            assert!(config.get("forSnapshot").is_none());
            let mut marked = config.clone();
            marked["forSnapshot"] = serde_json::Value::Bool(true);
            assert_eq!(snapshot, marked);
        }
    }
}
