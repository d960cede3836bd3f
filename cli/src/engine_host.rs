//! The hidden engine-host mode (`codemode-v8 engine-host`): the program an engine process runs.
//! The parent (`codemode run` or `codemode mcp` with the default isolation) starts it with its
//! standard input as the channel; it runs V8 or QuickJS cells (`--engine`) until the parent goes
//! away. With `--node` and `--library`, it is the launcher of an engine process on the V8 of the
//! pinned Node 24 instead, and executes `node`.

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
                #[cfg(feature = "v8")]
                JsEngine::V8 => {
                    codemode_runtime_v8::set_hard_stop_hook(
                        Duration::from_millis(settings.hard_stop_grace_ms),
                        on_hard_stop,
                    );
                    let engine = codemode_runtime_v8::V8Engine::with_warm_runtimes_for_heap(
                        0,
                        settings.warm_heap_limit_bytes,
                    )
                    .with_test_globals(settings.test_hooks);
                    codemode_runtime_v8::v8_available()?;
                    Ok(Box::new(engine) as Box<dyn codemode_engine::Engine>)
                }
                #[cfg(not(feature = "v8"))]
                JsEngine::V8 => Err(codemode_engine::EngineError::Unavailable(
                    "this codemode was built without V8".to_owned(),
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
        NATIVE_ATTACK_PROBE,
    )
}

#[cfg(feature = "v8")]
use codemode_runtime_v8::NATIVE_ATTACK_PROBE;

/// Without V8 there is no native probe.
#[cfg(not(feature = "v8"))]
const NATIVE_ATTACK_PROBE: Option<codemode_engine_process::child::NativeProbe> = None;
