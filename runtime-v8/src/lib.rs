//! The V8 engine of codemode: runs each cell in a fresh V8 context on its own OS thread, in an
//! isolate of its own (a lane of an engine process may keep its isolate for its tenant's next
//! cell, with a new context and bootstrap).
//!
//! V8 is the system's (Debian's libnode108, V8 10.2) or, built as part of the engine library that
//! the official Node 24 binary loads (`CODEMODE_V8_IN_NODE`, see `build.rs`), Node's V8 13.6; it is
//! reached through a narrow C++ shim
//! (`shim/shim.cc`) whose safe face is `ffi`: the `unsafe` code of the project lives there and in
//! two system calls of `codemode_engine_process`'s `descriptors` (the tidy test holds it to that).
//! The globals are installed by the JavaScript bootstrap of `codemode_engine::script`, which calls
//! back into Rust through one host-call entry point; the engine-independent runtime thread of that
//! module drives the module, microtasks, timers, tool results and the pending frontier, through
//! the [`codemode_engine::script::ScriptRuntime`] this crate implements for V8 (`script`).
//!
//! **Which V8 an embedder gets.** Linked into a program of its own, this crate runs cells on
//! libnode108's V8 10.2, which is out of upstream support. V8 13.6 from the official Node 24 binary,
//! which still gets security fixes, can only be reached from inside that `node` process. To run
//! cells on it, an embedder runs them in engine processes: `codemode_engine_process` with the
//! engine library, which is what the `codemode` binary does by default. An embedder who needs
//! cells in its own process and a maintained engine should use QuickJS (`codemode_runtime_quickjs`).
//!
//! **Fresh global scopes from a snapshot.** On V8 13.6 the process makes one startup snapshot
//! before its first runtime: V8's built-ins and a context in which the bootstrap ran
//! (`snapshot`). Every isolate made afterwards is made from it, and each cell's context is
//! deserialised from it rather than built by the bootstrap; `CODEMODE_V8_SNAPSHOT=off`
//! ([`SNAPSHOT_VARIABLE`]) turns this off. V8 10.2 runs the bootstrap in each context.
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
use codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES;

pub use crate::hard_stop::{HardStop, HardStopHook, HardStopReason, set_hard_stop_hook};
pub use crate::snapshot::SNAPSHOT_VARIABLE;

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
pub use codemode_engine::script::DEFAULT_WARM_RUNTIMES;

/// A yardstick for benchmarks: creates an isolate with one context through the shim, enters it and
/// disposes of it, on the calling thread, and returns how long that took. The bare cost a cold
/// cell's start is compared with.
pub fn bare_isolate_cycle() -> Result<std::time::Duration, codemode_engine::EngineError> {
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
    let mut runtime = ffi::V8Runtime::new(DEFAULT_HEAP_LIMIT_BYTES, NoHost)
        .map_err(|error| codemode_engine::EngineError::Runtime(error.to_string()))?;
    // Entering the context is part of every step a runtime takes.
    let _ = runtime.run_microtasks();
    drop(runtime);
    Ok(started.elapsed())
}

/// Whether V8 can run here: initialises it once, or says why it cannot.
pub fn v8_available() -> Result<(), codemode_engine::EngineError> {
    ffi::initialize().map_err(|error| codemode_engine::EngineError::Unavailable(error.to_string()))
}

/// Inside the `node` binary (the engine library `codemode-engine-library`, built against Node's
/// V8): finds Node's V8 platform, which every isolate of this crate is then registered with. Call
/// it once on Node's main thread from the library's module initialiser, before anything else of
/// this crate; V8 is Node's, already initialised, and never initialised or disposed here. Built
/// against libnode108 (without `CODEMODE_V8_IN_NODE`), it always fails.
pub fn attach_to_node() -> Result<(), codemode_engine::EngineError> {
    let why = if cfg!(v8_in_node) {
        "cannot find Node's V8 platform: the engine library must be loaded by `node` itself \
         (process.dlopen), from its main thread"
    } else {
        "this engine library was built against libnode108, not Node's V8: build it with `cargo \
         xtask build-engine-library`"
    };
    ffi::attach_to_node().map_err(|_| codemode_engine::EngineError::Unavailable(why.to_owned()))
}

/// Ends the process at once with `code`, without exit handlers or static destructors: how the
/// engine library leaves Node once it has served (Node's own exit handlers would dispose of V8
/// under the isolate its main thread has entered). Standard error is unbuffered, so nothing
/// logged is lost.
pub fn end_process(code: i32) -> ! {
    ffi::end_process(code)
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
pub type V8Engine = codemode_engine::script::ScriptEngine<Runtime>;
