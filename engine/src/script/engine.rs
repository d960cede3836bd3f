//! [`ScriptEngine`]: the one [`Engine`] of every script runtime. An engine crate implements
//! [`ScriptRuntime`] for its JavaScript engine and names `ScriptEngine<ItsRuntime>`; the shell
//! (pre-warmed runtimes, the start of a cell, its description) is the same for all of them.

use std::sync::Arc;

use codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES;

use super::{ScriptRuntime, WarmPool, start_cell};
use crate::{CellStart, Engine, EngineError, EngineHandles, EventSender};

/// How many pre-warmed runtimes an engine keeps ready by default (pre-warming).
pub const DEFAULT_WARM_RUNTIMES: usize = 2;

/// Runs cells on runtimes of `R`, in this process, each on its own OS thread; keeps runtimes
/// warm for the next cells. Cheap to clone (clones share the pool of pre-warmed runtimes).
pub struct ScriptEngine<R: ScriptRuntime> {
    /// Whether cells get the test-only globals (`__codemode_test_panic()`).
    test_hooks: bool,
    /// Runtimes created ahead of their cells; `None` when pre-warming is off (or the engine
    /// cannot run: its cells then fail as they start, saying why).
    pool: Option<Arc<WarmPool<R>>>,
    /// The heap limit runtimes are warmed for, in the pool and on lanes.
    warm_heap_limit_bytes: usize,
}

impl<R: ScriptRuntime> Clone for ScriptEngine<R> {
    fn clone(&self) -> Self {
        ScriptEngine {
            test_hooks: self.test_hooks,
            pool: self.pool.clone(),
            warm_heap_limit_bytes: self.warm_heap_limit_bytes,
        }
    }
}

impl<R: ScriptRuntime> std::fmt::Debug for ScriptEngine<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptEngine")
            .field("engine", &R::describe())
            .field("test_hooks", &self.test_hooks)
            .field("warm_runtimes", &self.pool.is_some())
            .finish()
    }
}

impl<R: ScriptRuntime> Default for ScriptEngine<R> {
    fn default() -> Self {
        ScriptEngine::new()
    }
}

impl<R: ScriptRuntime> ScriptEngine<R> {
    /// An engine that keeps [`DEFAULT_WARM_RUNTIMES`] runtimes with the default heap limit
    /// pre-warmed, so starting a cell skips creating its runtime.
    pub fn new() -> Self {
        ScriptEngine::with_warm_runtimes(DEFAULT_WARM_RUNTIMES)
    }

    /// An engine that keeps `count` runtimes pre-warmed (0: create each cell's runtime when the
    /// cell starts).
    pub fn with_warm_runtimes(count: usize) -> Self {
        ScriptEngine::build(count, DEFAULT_HEAP_LIMIT_BYTES, false)
    }

    /// An engine that keeps `count` runtimes pre-warmed for cells whose heap limit is
    /// `heap_limit_bytes` (cells with another limit take the cold path: a runtime's heap limit is
    /// fixed when it is created). A server whose cells all share one limit warms for it.
    pub fn with_warm_runtimes_for_heap(count: usize, heap_limit_bytes: usize) -> Self {
        ScriptEngine::build(count, heap_limit_bytes, false)
    }

    /// An engine whose cells have a `__codemode_test_panic()` global that panics on the runtime
    /// thread, for tests of panic containment. Only in builds with the `test-hooks` feature.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn with_fault_injection() -> Self {
        ScriptEngine::build(DEFAULT_WARM_RUNTIMES, DEFAULT_HEAP_LIMIT_BYTES, true)
    }

    /// With `on`, cells get the test hooks' globals (`__codemode_test_panic()`,
    /// `__codemode_test_cells_before()`), as an engine process whose parent asked for test hooks
    /// gives them; ignored in builds without the `test-hooks` feature.
    #[doc(hidden)]
    pub fn with_test_globals(mut self, on: bool) -> Self {
        self.test_hooks = on && cfg!(feature = "test-hooks");
        self
    }

    /// How many pre-warmed runtimes are ready for a cell now (runtimes still being created are
    /// not counted: a cell that finds none ready starts cold).
    pub fn ready_runtimes(&self) -> usize {
        self.pool.as_ref().map_or(0, |pool| pool.ready())
    }

    fn build(warm_runtimes: usize, heap_limit_bytes: usize, test_hooks: bool) -> Self {
        let pool = (warm_runtimes > 0 && R::initialize().is_ok()).then(|| {
            WarmPool::new(
                warm_runtimes,
                heap_limit_bytes,
                test_hooks,
                R::THREAD_STACK_BYTES,
            )
        });
        ScriptEngine {
            test_hooks,
            pool,
            warm_heap_limit_bytes: heap_limit_bytes,
        }
    }
}

impl<R: ScriptRuntime> Engine for ScriptEngine<R>
where
    WarmPool<R>: Send + Sync,
{
    fn describe(&self) -> String {
        R::describe()
    }

    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        R::initialize()?;
        start_cell::<R>(
            self.pool.as_ref(),
            cell,
            events,
            self.test_hooks,
            R::THREAD_STACK_BYTES,
        )
    }

    fn serve_lane(&self, lane: Box<dyn crate::lane::CellLane>) -> Result<(), EngineError> {
        super::serve_lane::<R>(
            lane,
            self.warm_heap_limit_bytes,
            self.test_hooks,
            R::THREAD_STACK_BYTES,
        )
    }
}
