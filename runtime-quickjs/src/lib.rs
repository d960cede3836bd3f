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
//! only the channels of `codemode_engine`. Its one `unsafe` code is the runtime's allocator
//! (`allocator`, which holds QuickJS to the heap limit and says when it refused).

#![deny(unsafe_code)]
#![deny(missing_docs)]

#[allow(unsafe_code)]
mod allocator;
mod errors;
mod runtime;
mod watchdog;

pub use crate::runtime::QuickJsRuntime;
pub use crate::watchdog::{HardStop, HardStopHook, HardStopReason, set_hard_stop_hook};

/// How many pre-warmed runtimes an engine keeps ready by default.
pub use codemode_engine::script::DEFAULT_WARM_RUNTIMES;

/// Runs cells on QuickJS, in this process. Cheap to clone (clones share the pool of pre-warmed
/// runtimes).
///
/// As with V8 in-process, the runtime is the cells' only wall: for model-written code in a server,
/// run cells in engine processes (`codemode-engine-process`) instead.
pub type QuickJsEngine = codemode_engine::script::ScriptEngine<QuickJsRuntime>;

/// The QuickJS this crate is built with.
pub fn quickjs_version() -> &'static str {
    "QuickJS-NG (rquickjs 0.14)"
}
