//! The engine library: what the official Node 24 binary loads (`process.dlopen`) to run an
//! engine process on its V8 13.6, which no program of ours can link (see `../shared/V8.md` in the
//! project's notes, and `codemode_engine_process::node_host`).
//!
//! Built against the pinned Node's headers (see `codemode-runtime-v8`'s build script; `cargo xtask
//! build-engine-library` builds the release and test-hooks libraries the binaries and tests load);
//! V8's symbols stay undefined and are the `node` executable's. Node calls [`node_register_module_v137`] (its ABI version 137 is Node 24's)
//! on its main thread; it finds Node's V8 platform, then serves the engine-process channel (its
//! standard input) there until the parent goes away, and ends the process. It never returns to
//! Node.
//!
//! This crate must not know sessions, tools or servers: it is an engine process and nothing else.
//! No test binary can link it (V8's symbols are Node's): its tests are the `codemode-cli` tests,
//! which run engine processes on it.
//!
//! The `unsafe` here is one attribute: the exported symbol's name, which Node looks up.

use std::process::ExitCode;
use std::time::Duration;

use codemode_engine::{Engine, EngineError};
use codemode_engine_process::child::{Settings, on_hard_stop};

/// Node's module initialiser for ABI version 137 (Node 24). Node passes `exports`, `module` and
/// the context as V8 handles; none is used. Called once, on Node's main thread, with Node's
/// isolate entered.
#[unsafe(no_mangle)]
pub extern "C" fn node_register_module_v137(
    _exports: *mut std::ffi::c_void,
    _module: *mut std::ffi::c_void,
    _context: *mut std::ffi::c_void,
) {
    let code = serve();
    // Node's event loop never runs again, and its exit handlers must not run either.
    codemode_runtime_v8::end_process(if code == ExitCode::SUCCESS { 0 } else { 1 });
}

/// Attaches to Node's platform and serves; the process's exit code.
fn serve() -> ExitCode {
    init_logging();
    if let Err(error) = codemode_runtime_v8::attach_to_node() {
        tracing::error!("engine process: {error}");
        return ExitCode::FAILURE;
    }
    codemode_engine_process::node_host::serve_in_node(
        make_engine,
        codemode_engine_process::NATIVE_ATTACK_PROBE,
    )
}

/// The V8 engine, as the parent's settings ask.
fn make_engine(settings: &Settings) -> Result<Box<dyn Engine>, EngineError> {
    codemode_runtime_v8::set_hard_stop_hook(
        Duration::from_millis(settings.hard_stop_grace_ms),
        on_hard_stop,
    );
    codemode_runtime_v8::v8_available()?;
    let engine = codemode_runtime_v8::V8Engine::with_warm_runtimes_for_heap(
        0,
        settings.warm_heap_limit_bytes,
    )
    .with_test_globals(settings.test_hooks);
    Ok(Box::new(engine))
}

/// Logs to standard error, which the parent reads, at the level of `CODEMODE_LOG` (which the
/// launcher passes on), else warnings.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CODEMODE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .without_time()
        .try_init();
}
