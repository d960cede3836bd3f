//! The hidden engine-host mode (`codemode-v8 engine-host`): the program an engine process runs.
//! The parent (`codemode run` or `codemode mcp` with the default isolation) starts it with its
//! standard input as the channel; it runs V8 or QuickJS cells (`--engine`) until the parent goes
//! away.

use std::process::ExitCode;
use std::time::Duration;

use codemode_engine_process::HardStopKind;
use codemode_runtime_quickjs::QuickJsEngine;

use crate::setup::JsEngine;

/// How long to wait for the warm runtimes before saying ready anyway (cells then start cold).
const WARM_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the engine-process loop with the engine `engine`.
pub fn serve(engine: JsEngine) -> ExitCode {
    // Whatever the parent's parent leaked into this process goes before anything runs.
    if let Err(error) = close_inherited_descriptors() {
        tracing::error!("engine process: {error}");
        return ExitCode::FAILURE;
    }
    codemode_engine_process::child::serve_with_probe(
        |settings| {
            // Warm before the sandbox closes and before the parent counts on this process.
            let deadline = std::time::Instant::now() + WARM_TIMEOUT;
            let warm = |ready: &dyn Fn() -> usize| {
                while ready() < settings.warm_runtimes && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            };
            match engine {
                #[cfg(feature = "v8")]
                JsEngine::V8 => {
                    codemode_runtime_v8::set_hard_stop_hook(
                        Duration::from_millis(settings.hard_stop_grace_ms),
                        v8::on_hard_stop,
                    );
                    let engine = codemode_runtime_v8::V8Engine::with_warm_runtimes_for_heap(
                        settings.warm_runtimes,
                        settings.warm_heap_limit_bytes,
                    );
                    warm(&|| engine.ready_runtimes());
                    codemode_runtime_v8::v8_available()?;
                    Ok(Box::new(engine) as Box<dyn codemode_engine::Engine>)
                }
                #[cfg(not(feature = "v8"))]
                JsEngine::V8 => Err("this codemode was built without V8".to_owned()),
                JsEngine::QuickJs => {
                    codemode_runtime_quickjs::set_hard_stop_hook(
                        Duration::from_millis(settings.hard_stop_grace_ms),
                        on_quickjs_hard_stop,
                    );
                    let engine = QuickJsEngine::with_warm_runtimes_for_heap(
                        settings.warm_runtimes,
                        settings.warm_heap_limit_bytes,
                    );
                    warm(&|| engine.ready_runtimes());
                    Ok(Box::new(engine) as Box<dyn codemode_engine::Engine>)
                }
            }
        },
        // Test builds only: a native probe that tries what an exploit would.
        NATIVE_ATTACK_PROBE,
    )
}

#[cfg(feature = "v8")]
use codemode_runtime_v8::{NATIVE_ATTACK_PROBE, close_inherited_descriptors};

/// Without V8 there is no native probe.
#[cfg(not(feature = "v8"))]
const NATIVE_ATTACK_PROBE: Option<codemode_engine_process::child::NativeProbe> = None;

/// Without V8's native shim this program has no way to close a descriptor it did not open
/// (closing one takes `unsafe` code, which lives only in that shim): it names them in a warning,
/// for whoever starts codemode with descriptors open to fix.
#[cfg(not(feature = "v8"))]
fn close_inherited_descriptors() -> Result<(), String> {
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|error| format!("cannot list this process's descriptors: {error}"))?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .collect();
    // 0-2 are the channel and the capture pipes; the listing's own descriptor is closed by now.
    let inherited: Vec<String> = listed
        .into_iter()
        .filter(|&fd| fd > 2 && std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok())
        .map(|fd| fd.to_string())
        .collect();
    if !inherited.is_empty() {
        tracing::warn!(
            descriptors = %inherited.join(", "),
            "engine process: descriptors inherited from whoever started codemode are open, and \
             a build without V8 cannot close them; start codemode with only its standard \
             streams open"
        );
    }
    Ok(())
}

#[cfg(feature = "v8")]
mod v8 {
    use codemode_engine_process::HardStopKind;
    use codemode_runtime_v8::{HardStop, HardStopReason};

    pub(super) fn on_hard_stop(stop: &HardStop) {
        let (kind, message) = match stop.reason {
            HardStopReason::HeapLimit => (HardStopKind::HeapLimit, stop.message.clone()),
            HardStopReason::CpuTimeLimit => (HardStopKind::CpuTimeLimit, stop.message.clone()),
            HardStopReason::OutOfMemory => (
                HardStopKind::Fatal,
                format!("out of memory: {}", stop.message),
            ),
            _ => (
                HardStopKind::Fatal,
                format!("V8 fatal error: {}", stop.message),
            ),
        };
        codemode_engine_process::child::hard_stop(stop.call_id.as_deref(), kind, &message)
    }
}

/// A QuickJS cell still running its grace period after its CPU budget ran out (a built-in that
/// loops in C checks no interrupt): the process ends, and the parent fails the cell saying why.
fn on_quickjs_hard_stop(call_id: &str) {
    codemode_engine_process::child::hard_stop(
        Some(call_id),
        HardStopKind::CpuTimeLimit,
        "cpu time limit exceeded",
    )
}
