//! The hidden engine-host mode (`codemode engine-host`): the program an engine process runs.
//! The parent (`codemode run` or `codemode mcp` with the default isolation) starts it with its
//! standard input as the channel. For QuickJS cells it serves them itself until the parent goes
//! away; for V8 cells (`--engine v8 --node NODE --library LIBRARY`) it is the launcher of an
//! engine process on the V8 of the pinned Node 24, and executes `node`.

use std::process::ExitCode;
use std::time::Duration;

use codemode_engine_process::child::on_hard_stop;
use codemode_runtime_quickjs::QuickJsEngine;

use crate::setup::JsEngine;

/// The launcher of an engine process on Node's V8: executes `node` to load the engine library
/// (see `codemode_engine_process::node_host`); returns only on failure.
pub fn exec_node(node: &std::path::Path, library: &std::path::Path) -> ExitCode {
    // Whatever the parent's parent leaked into this process goes before anything runs.
    if let Err(error) = codemode_engine_process::close_inherited_descriptors() {
        tracing::error!("engine process: cannot close inherited file descriptors: {error}");
        return ExitCode::FAILURE;
    }
    codemode_engine_process::node_host::exec_node(node, library)
}

/// Runs the engine-process loop with the engine `engine`.
pub fn serve(engine: JsEngine) -> ExitCode {
    // Whatever the parent's parent leaked into this process goes before anything runs.
    if let Err(error) = codemode_engine_process::close_inherited_descriptors() {
        tracing::error!("engine process: cannot close inherited file descriptors: {error}");
        return ExitCode::FAILURE;
    }
    codemode_engine_process::child::serve_with_probe(
        |settings| {
            // The child warms a runtime on each of its first lanes (one thread each), so the
            // engine keeps no pool of its own: it is told the heap limit to warm for.
            match engine {
                JsEngine::V8 => Err(codemode_engine::EngineError::Unavailable(
                    "V8 cells run only in engine processes on the pinned Node 24's V8: start the \
                     engine host with --node and --library"
                        .to_owned(),
                )),
                JsEngine::QuickJs => {
                    codemode_runtime_quickjs::set_hard_stop_hook(
                        Duration::from_millis(settings.hard_stop_grace_ms),
                        on_hard_stop,
                    );
                    let engine = QuickJsEngine::with_warm_runtimes_for_heap(
                        0,
                        settings.warm_heap_limit_bytes,
                    )
                    .with_test_globals(settings.test_hooks);
                    Ok(Box::new(engine) as Box<dyn codemode_engine::Engine>)
                }
            }
        },
        // Test builds only: a native probe that tries what an exploit would.
        codemode_engine_process::NATIVE_ATTACK_PROBE,
    )
}
