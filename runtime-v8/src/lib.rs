//! The V8 engine of codemode: runs each cell in a fresh V8 context on its own OS thread, in an
//! isolate of its own (a lane of an engine process may keep its isolate for its tenant's next
//! cell, with a new context and bootstrap).
//!
//! V8 is the official Node 24 binary's (V8 13.6): this crate is part of the engine library that
//! `node` loads (`codemode-engine-library`), and is reached through a narrow C++ shim
//! (`shim/shim.cc`) whose safe face is `ffi`: the `unsafe` code of the project lives there and in
//! the small native layers of `codemode_engine_process` (the tidy test holds it to that).
//! The globals are installed by the JavaScript bootstrap of `codemode_engine::script`, which calls
//! back into Rust through one host-call entry point; the engine-independent runtime thread of that
//! module drives the module, microtasks, timers, tool results and the pending frontier, through
//! the [`codemode_engine::script::ScriptRuntime`] this crate implements for V8 (`script`).
//!
//! **Which path needs engine processes: every one.** V8 13.6 can only be reached from inside the
//! `node` process that loads the engine library, so this crate links into nothing else: its V8
//! symbols are undefined until Node resolves them (see `build.rs`), and a program or test binary
//! that linked it would not link. An embedder runs V8 cells in engine processes
//! (`codemode_engine_process` with the engine library), which is what the `codemode` binary does;
//! an embedder who needs cells in its own process uses QuickJS (`codemode_runtime_quickjs`).
//!
//! **Fresh global scopes from a snapshot.** The engine process makes one startup snapshot
//! before its first runtime: V8's built-ins and a context in which the bootstrap ran
//! (`snapshot`). Every isolate made afterwards is made from it, and each cell's context is
//! deserialised from it rather than built by the bootstrap; `CODEMODE_V8_SNAPSHOT=off`
//! ([`SNAPSHOT_VARIABLE`]) turns this off.
//!
//! This crate knows nothing of cell actors, sessions or tools beyond their definitions: it speaks
//! only the channels of `codemode_engine`.

#![deny(missing_docs)]

mod ffi;
mod hard_stop;
mod script;
mod snapshot;
mod watchdog;

use codemode_engine::script::CellHost;

pub use crate::hard_stop::{HardStop, HardStopHook, HardStopReason, set_hard_stop_hook};
pub use crate::snapshot::SNAPSHOT_VARIABLE;

/// One V8 runtime as the engine-independent runtime thread drives it.
type Runtime = ffi::V8Runtime<CellHost>;

/// How many pre-warmed runtimes an engine keeps ready by default (pre-warming).
pub use codemode_engine::script::DEFAULT_WARM_RUNTIMES;

/// Whether V8 can run here: initialises it once, or says why it cannot.
pub fn v8_available() -> Result<(), codemode_engine::EngineError> {
    ffi::initialize().map_err(|error| codemode_engine::EngineError::Unavailable(error.to_string()))
}

/// Inside the `node` binary (the engine library `codemode-engine-library`, built against Node's
/// V8): finds Node's V8 platform, which every isolate of this crate is then registered with. Call
/// it once on Node's main thread from the library's module initialiser, before anything else of
/// this crate; V8 is Node's, already initialised, and never initialised or disposed here.
pub fn attach_to_node() -> Result<(), codemode_engine::EngineError> {
    ffi::attach_to_node().map_err(|_| {
        codemode_engine::EngineError::Unavailable(
            "cannot find Node's V8 platform: the engine library must be loaded by `node` itself \
             (process.dlopen), from its main thread"
                .to_owned(),
        )
    })
}

/// Ends the process at once with `code`, without exit handlers or static destructors: how the
/// engine library leaves Node once it has served (Node's own exit handlers would dispose of V8
/// under the isolate its main thread has entered). Standard error is unbuffered, so nothing
/// logged is lost.
pub fn end_process(code: i32) -> ! {
    ffi::end_process(code)
}

/// The version of the V8 this crate runs on, such as `13.6.233.17-node.37`.
pub fn v8_version() -> String {
    ffi::version()
}

/// Runs cells on V8, in the engine process whose `node` loaded the engine library (the only
/// process this crate links into). Cheap to clone (clones share the pool of pre-warmed runtimes).
pub type V8Engine = codemode_engine::script::ScriptEngine<Runtime>;
