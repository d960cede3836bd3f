//! The QuickJS engine of codemode: runs each cell in its own QuickJS runtime on its own OS thread.
//!
//! QuickJS is QuickJS-NG, through `rquickjs`, compiled from the crate's own C sources: it needs
//! nothing from the system, so it builds wherever cargo does. A fresh runtime costs a fraction of a
//! millisecond and little memory; V8's JIT is far faster on heavy cells.
//!
//! Everything that is not about QuickJS itself (the bootstrap that installs the globals, the host
//! of its `host(op, a?, b?)`, the runtime thread's loop, pre-warmed runtimes) is the
//! engine-independent half in `codemode_engine::script`, shared with V8; this crate implements its
//! [`codemode_engine::script::ScriptRuntime`] for QuickJS (`runtime`) and renders QuickJS's
//! errors in the same shapes as V8's (`errors`).
//!
//! This crate knows nothing of cell actors, sessions or tools beyond their definitions: it speaks
//! only the channels of `codemode_engine`. It has no `unsafe` code.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod errors;
mod runtime;
mod watchdog;

use std::sync::Arc;

use codemode_engine::script::WarmPool;
use codemode_engine::{CellStart, Engine, EngineError, EngineHandles, EventSender};
use codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES;

pub use crate::runtime::QuickJsRuntime;
pub use crate::watchdog::{HardStopHook, set_hard_stop_hook};

/// How many pre-warmed runtimes an engine keeps ready by default.
pub const DEFAULT_WARM_RUNTIMES: usize = 2;

/// The stack of a cell's runtime thread; QuickJS's own stack limit (1 MiB) ends deep recursion
/// well before it is used up.
const RUNTIME_THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Runs cells on QuickJS, in this process. Cheap to clone (clones share the pool of pre-warmed
/// runtimes).
///
/// As with V8 in-process, the runtime is the cells' only wall: for model-written code in a server,
/// run cells in engine processes (`codemode-engine-process`) instead.
#[derive(Debug, Clone)]
pub struct QuickJsEngine {
    fault_injection: bool,
    pool: Option<Arc<WarmPool<QuickJsRuntime>>>,
}

impl Default for QuickJsEngine {
    fn default() -> Self {
        QuickJsEngine::new()
    }
}

impl QuickJsEngine {
    /// An engine that keeps [`DEFAULT_WARM_RUNTIMES`] runtimes with the default heap limit
    /// pre-warmed.
    pub fn new() -> Self {
        QuickJsEngine::with_warm_runtimes(DEFAULT_WARM_RUNTIMES)
    }

    /// An engine that keeps `count` runtimes pre-warmed (0: create each cell's runtime when the
    /// cell starts).
    pub fn with_warm_runtimes(count: usize) -> Self {
        QuickJsEngine::build(count, DEFAULT_HEAP_LIMIT_BYTES, false)
    }

    /// An engine that keeps `count` runtimes pre-warmed for cells whose heap limit is
    /// `heap_limit_bytes` (cells with another limit take the cold path).
    pub fn with_warm_runtimes_for_heap(count: usize, heap_limit_bytes: usize) -> Self {
        QuickJsEngine::build(count, heap_limit_bytes, false)
    }

    /// An engine whose cells have a `__codemode_test_panic()` global that panics on the runtime
    /// thread, for tests of panic containment. Only in builds with the `test-hooks` feature.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn with_fault_injection() -> Self {
        QuickJsEngine::build(DEFAULT_WARM_RUNTIMES, DEFAULT_HEAP_LIMIT_BYTES, true)
    }

    /// How many pre-warmed runtimes are ready for a cell now.
    pub fn ready_runtimes(&self) -> usize {
        self.pool.as_ref().map_or(0, |pool| pool.ready())
    }

    fn build(warm_runtimes: usize, heap_limit_bytes: usize, fault_injection: bool) -> Self {
        let pool = (warm_runtimes > 0).then(|| {
            WarmPool::new(
                warm_runtimes,
                heap_limit_bytes,
                fault_injection,
                RUNTIME_THREAD_STACK_BYTES,
            )
        });
        QuickJsEngine {
            fault_injection,
            pool,
        }
    }
}

/// The QuickJS this crate is built with.
pub fn quickjs_version() -> &'static str {
    "QuickJS-NG (rquickjs 0.14)"
}

impl Engine for QuickJsEngine {
    fn describe(&self) -> String {
        quickjs_version().to_owned()
    }

    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        codemode_engine::script::start_cell::<QuickJsRuntime>(
            self.pool.as_ref(),
            cell,
            events,
            self.fault_injection,
            RUNTIME_THREAD_STACK_BYTES,
        )
    }
}
