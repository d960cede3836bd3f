//! The V8 engine of codemode: runs each cell in its own V8 isolate on its own OS thread.
//!
//! V8 is the system's (Debian's libnode108, V8 10.2), reached through a narrow C++ shim
//! (`shim/shim.cc`) whose safe face is `ffi`: all `unsafe` code of the project lives there. The
//! globals are installed by the JavaScript bootstrap of `codemode_engine::script`, which calls
//! back into Rust through one host-call entry point; the engine-independent runtime thread of that
//! module drives the module, microtasks, timers, tool results and the pending frontier, through
//! the [`codemode_engine::script::ScriptRuntime`] this crate implements for V8 (`script`).
//!
//! This crate knows nothing of cell actors, sessions or tools beyond their definitions: it speaks
//! only the channels of `codemode_engine`.

#![deny(missing_docs)]

mod ffi;
mod hard_stop;
mod script;
mod watchdog;

use std::sync::Arc;

use codemode_engine::script::{CellHost, WarmPool};
use codemode_engine::{CellStart, Engine, EngineError, EngineHandles, EventSender};
use codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES;

pub use crate::hard_stop::{HardStop, HardStopReason, set_hard_stop_hook};

/// The test-only native attack probe (builds with the `test-hooks` feature; `None` otherwise): an
/// engine host hands it to `codemode_engine_process::child::serve_with_probe`, and the sandbox
/// tests run it inside real engine processes. `(attack, target)` to `Ok(what happened)` if the
/// attack succeeded, `Err(why not)` if it was refused.
#[allow(clippy::type_complexity)]
pub const NATIVE_ATTACK_PROBE: Option<fn(&str, &str) -> Result<String, String>> = {
    #[cfg(feature = "test-hooks")]
    {
        Some(ffi::attack_probe)
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        None
    }
};
/// One V8 runtime as the engine-independent runtime thread drives it.
type Runtime = ffi::V8Runtime<CellHost>;

/// How many pre-warmed runtimes an engine keeps ready by default (pre-warming).
pub const DEFAULT_WARM_RUNTIMES: usize = 2;

/// The stack of a cell's runtime thread. V8 keeps its own stack limit (about 1 MiB below where the
/// isolate is entered), so deep recursion ends as a `RangeError` well before this is used up.
pub(crate) const RUNTIME_THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// A yardstick for benchmarks: creates an isolate with one context through the shim, enters it and
/// disposes of it, on the calling thread, and returns how long that took. The bare cost a cold
/// cell's start is compared with.
pub fn bare_isolate_cycle() -> Result<std::time::Duration, String> {
    struct NoHost;
    impl codemode_engine::script::Host for NoHost {
        fn call(
            &mut self,
            _op: i32,
            _a: Option<&[u8]>,
            _b: Option<&[u8]>,
        ) -> codemode_engine::script::HostReply {
            codemode_engine::script::HostReply::Undefined
        }
    }
    let started = std::time::Instant::now();
    let mut runtime =
        ffi::V8Runtime::new(DEFAULT_HEAP_LIMIT_BYTES, NoHost).map_err(|error| error.to_string())?;
    // Entering the context is part of every step a runtime takes.
    let _ = runtime.run_microtasks();
    drop(runtime);
    Ok(started.elapsed())
}

/// Closes every file descriptor of this process but its standard streams, including those it
/// inherited without close-on-exec: the first thing an engine process does, so that it holds
/// nothing but its channel (standard input) and its capture pipes. Call it only before the process
/// opens anything else.
pub fn close_inherited_descriptors() -> Result<(), String> {
    ffi::close_inherited_descriptors()
}

/// Whether V8 can run here: initialises it once, or says why it cannot.
pub fn v8_available() -> Result<(), String> {
    ffi::initialize()
}

/// The version of the V8 this crate is linked against, such as `10.2.154.26-node.36`.
pub fn v8_version() -> String {
    ffi::version()
}

/// Runs cells on V8, in this process. Cheap to clone (clones share the pool of pre-warmed
/// runtimes).
///
/// The trade-off: in-process cells start fastest and share the host's memory, but the isolate is
/// their only wall. V8 can end the whole process (a fatal out-of-memory in a long built-in, a
/// failed internal check, a bug), and a long built-in can run past every limit until it returns.
/// For model-written code in a server, run cells in engine processes instead
/// (`codemode-engine-process`, which runs this engine in sandboxed child processes); choose this
/// engine when the code is trusted, or a crash of the host is acceptable.
#[derive(Debug, Clone)]
pub struct V8Engine {
    fault_injection: bool,
    /// Runtimes created ahead of their cells; `None` when pre-warming is off.
    pool: Option<Arc<WarmPool<Runtime>>>,
}

impl Default for V8Engine {
    fn default() -> Self {
        V8Engine::new()
    }
}

impl V8Engine {
    /// An engine that keeps [`DEFAULT_WARM_RUNTIMES`] runtimes with the default heap limit
    /// pre-warmed, so starting a cell skips isolate creation.
    pub fn new() -> Self {
        V8Engine::with_warm_runtimes(DEFAULT_WARM_RUNTIMES)
    }

    /// An engine that keeps `count` runtimes pre-warmed (0: create each cell's runtime when the
    /// cell starts).
    pub fn with_warm_runtimes(count: usize) -> Self {
        V8Engine::build(count, false)
    }

    /// An engine whose cells have a `__codemode_test_panic()` global that panics on the runtime
    /// thread, for tests of panic containment. Only in builds with the `test-hooks` feature.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn with_fault_injection() -> Self {
        V8Engine::build(DEFAULT_WARM_RUNTIMES, true)
    }

    /// An engine that keeps `count` runtimes pre-warmed for cells whose heap limit is
    /// `heap_limit_bytes` (cells with another limit take the cold path: an isolate's heap limit is
    /// fixed when it is created). A server whose cells all share one limit warms for it.
    pub fn with_warm_runtimes_for_heap(count: usize, heap_limit_bytes: usize) -> Self {
        V8Engine::build_for_heap(count, heap_limit_bytes, false)
    }

    /// How many pre-warmed runtimes are ready for a cell now (runtimes still being created are
    /// not counted: a cell that finds none ready starts cold).
    pub fn ready_runtimes(&self) -> usize {
        self.pool.as_ref().map_or(0, |pool| pool.ready())
    }

    fn build(warm_runtimes: usize, fault_injection: bool) -> Self {
        V8Engine::build_for_heap(warm_runtimes, DEFAULT_HEAP_LIMIT_BYTES, fault_injection)
    }

    fn build_for_heap(
        warm_runtimes: usize,
        heap_limit_bytes: usize,
        fault_injection: bool,
    ) -> Self {
        let pool = (warm_runtimes > 0 && ffi::initialize().is_ok()).then(|| {
            WarmPool::new(
                warm_runtimes,
                heap_limit_bytes,
                fault_injection,
                RUNTIME_THREAD_STACK_BYTES,
            )
        });
        V8Engine {
            fault_injection,
            pool,
        }
    }
}

impl Engine for V8Engine {
    fn describe(&self) -> String {
        format!("V8 {}", v8_version())
    }

    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        codemode_engine::check_heap_limit(cell.limits.heap_limit_bytes)?;
        ffi::initialize().map_err(EngineError::Unavailable)?;
        codemode_engine::script::start_cell::<Runtime>(
            self.pool.as_ref(),
            cell,
            events,
            self.fault_injection,
            RUNTIME_THREAD_STACK_BYTES,
        )
    }
}
