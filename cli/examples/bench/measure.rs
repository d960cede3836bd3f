//! The measures the tables are made of: statistics of samples, cells started and run to their
//! result, spaced and concurrent starts, tool round trips and large payloads through a session,
//! terminations, MCP calls over stdio, and the engines they are measured on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_engine::{CellLimits, CellStart, Engine, PendingMode, RuntimeEvent, event_channel};
use codemode_engine_process::{ProcessEngine, ProcessEngineConfig};
use codemode_host_adapters::{InProcessTools, MemoryStore};
use codemode_protocol::ExecuteRequest;
use codemode_session::{CellEvent, Session, SessionConfig};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

#[derive(Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) median: f64,
    pub(crate) p99: f64,
}

pub(crate) fn stats(mut samples: Vec<f64>) -> Stats {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
    }
}

pub(crate) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

pub(crate) fn cell(source: &str) -> CellStart {
    CellStart {
        tenant: None,
        call_id: "bench".into(),
        source: source.into(),
        enabled_tools: Vec::new(),
        unavailable_servers: Vec::new(),
        stored_values: Default::default(),
        limits: CellLimits::default(),
        pending_mode: PendingMode::Continue,
    }
}

/// Start to result of `text("hi")`.
pub(crate) fn start_to_result(engine: &dyn Engine) -> Duration {
    run_to_result(engine, r#"text("hi")"#).0
}

/// Runs `source` in a new cell; how long from start to its result, and the result.
pub(crate) fn run_to_result(engine: &dyn Engine, source: &str) -> (Duration, RuntimeEvent) {
    let started = Instant::now();
    let (events, mut receiver) = event_channel(None);
    let _handles = engine.start(cell(source), events).expect("starts");
    while let Some(event) = receiver.blocking_recv() {
        if let RuntimeEvent::Result { .. } = event {
            return (started.elapsed(), event);
        }
    }
    panic!("no result");
}

pub(crate) fn spaced(engine: &dyn Engine, runs: usize, spacing: Duration) -> Vec<f64> {
    start_to_result(engine);
    std::thread::sleep(Duration::from_millis(50));
    (0..runs)
        .map(|_| {
            std::thread::sleep(spacing);
            ms(start_to_result(engine))
        })
        .collect()
}

/// `count` cells started at once; each one's start to result.
pub(crate) fn concurrent(engine: &Arc<dyn Engine>, count: usize, rounds: usize) -> Vec<f64> {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(50));
        let threads: Vec<_> = (0..count)
            .map(|_| {
                let engine = Arc::clone(engine);
                std::thread::spawn(move || ms(start_to_result(engine.as_ref())))
            })
            .collect();
        samples.extend(threads.into_iter().map(|thread| thread.join().unwrap()));
    }
    samples
}

/// A CPU-heavy cell: how long from start to result.
pub(crate) fn heavy(engine: &dyn Engine, source: &str, runs: usize) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            let (took, result) = run_to_result(engine, source);
            assert!(
                matches!(
                    result,
                    RuntimeEvent::Result {
                        error_text: None,
                        ..
                    }
                ),
                "{result:?}"
            );
            ms(took)
        })
        .collect()
}

pub(crate) fn termination(engine: &dyn Engine, runs: usize) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            let (events, mut receiver) = event_channel(None);
            let handles = engine.start(cell("while (true) {}"), events).unwrap();
            assert_eq!(receiver.blocking_recv(), Some(RuntimeEvent::Started));
            std::thread::sleep(Duration::from_millis(5));
            let started = Instant::now();
            handles.terminate.terminate();
            while receiver.blocking_recv().is_some() {}
            ms(started.elapsed())
        })
        .collect()
}

/// Runs one cell in `session` and checks that it completed without an error.
pub(crate) async fn run_in(session: &Session, source: &str) {
    let request = ExecuteRequest {
        call_id: "bench".into(),
        source: source.into(),
        yield_time_ms: Some(60_000),
        max_output_tokens: None,
    };
    let report = session.execute(request).await.unwrap();
    assert!(
        matches!(
            report.event,
            CellEvent::Completed {
                error_text: None,
                ..
            }
        ),
        "{:?}",
        report.event
    );
}

/// Milliseconds for one cell to store 100,000 keys, start to result.
pub(crate) fn many_keys(engine: &dyn Engine) -> f64 {
    let (took, result) = run_to_result(
        engine,
        "for (let i = 0; i < 100000; i++) store('key-' + i, i);",
    );
    let RuntimeEvent::Result {
        stored_value_writes,
        error_text,
    } = result
    else {
        unreachable!("run_to_result returns the result")
    };
    assert_eq!(error_text, None);
    assert_eq!(stored_value_writes.len(), 100_000);
    ms(took)
}

/// Milliseconds for the same loop without `store`, for scale.
pub(crate) fn many_keys_loop_only(engine: &dyn Engine) -> f64 {
    ms(run_to_result(
        engine,
        "let s = 0; for (let i = 0; i < 100000; i++) s += ('key-' + i).length;",
    )
    .0)
}

/// Microseconds per awaited in-process tool call, from a cell that loops over one.
/// A session on `engine` whose one tool, `echo`, answers with its argument.
pub(crate) async fn echo_session(id: &str, engine: Arc<dyn Engine>) -> Session {
    let tools = InProcessTools::new().function("echo", "Echo.", json!({}), |input| async move {
        Ok(input.unwrap_or(Value::Null))
    });
    Session::open(
        id,
        engine,
        Arc::new(MemoryStore::new()),
        Arc::new(tools),
        SessionConfig::default(),
    )
    .await
    .unwrap()
}

pub(crate) async fn tool_round_trip(engine: Arc<dyn Engine>, iterations: usize) -> f64 {
    let session = echo_session("bench", engine).await;
    let mut timings = Vec::new();
    for loops in [iterations, 1] {
        let request = ExecuteRequest {
            call_id: "bench".into(),
            source: format!("for (let i = 0; i < {loops}; i++) await tools.echo(i); text('ok');"),
            yield_time_ms: Some(60_000),
            max_output_tokens: None,
        };
        let started = Instant::now();
        let report = session.execute(request).await.unwrap();
        assert!(matches!(
            report.event,
            CellEvent::Completed {
                error_text: None,
                ..
            }
        ));
        timings.push(started.elapsed());
    }
    session.shutdown().await;
    // The difference of a long and a short loop leaves the round trips alone.
    timings[0].saturating_sub(timings[1]).as_secs_f64() * 1e6 / (iterations - 1) as f64
}

/// An 11 MB tool argument echoed back by an in-process tool, in milliseconds from the cell's
/// call to its answer, beside the cell's own `JSON.parse(JSON.stringify(x))` of the same value
/// (both timed inside the cell): what the way from the cell to the tool and back costs beside
/// what the cell itself pays to copy the value. `runs` pairs.
pub(crate) async fn large_round_trip(engine: Arc<dyn Engine>, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let session = echo_session("bench-payload", engine).await;
    // About 11 MB of JSON: objects, numbers and strings, as a tool's data is.
    let source = r#"
const big = { items: Array.from({ length: 110000 }, (_, i) => ({ id: i, name: "item number " + i, price: i * 1.25, tags: ["alpha", "beta"], ok: i % 2 === 0 })) };
let began = Date.now();
const copy = JSON.parse(JSON.stringify(big));
const own = Date.now() - began;
began = Date.now();
const echoed = await tools.echo(big);
const trip = Date.now() - began;
if (echoed.items.length !== copy.items.length) throw new Error("the echo lost items");
text(JSON.stringify({ own, trip, bytes: JSON.stringify(big).length }));
"#;
    let (mut trips, mut owns) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let request = ExecuteRequest {
            call_id: "bench".into(),
            source: source.into(),
            yield_time_ms: Some(120_000),
            max_output_tokens: None,
        };
        let report = session.execute(request).await.unwrap();
        let CellEvent::Completed {
            output,
            error_text: None,
            ..
        } = &report.event
        else {
            panic!("{:?}", report.event);
        };
        let text = codemode_session::render_text(&output.clone().into_items());
        let measured: Value = serde_json::from_str(text.trim()).unwrap();
        trips.push(measured["trip"].as_f64().unwrap());
        owns.push(measured["own"].as_f64().unwrap());
    }
    session.shutdown().await;
    (trips, owns)
}

/// Milliseconds per call of `tool` on the MCP server `command` starts, `spacing` apart.
pub(crate) async fn mcp_calls(
    command: tokio::process::Command,
    tool: &str,
    arguments: Value,
    runs: usize,
    spacing: Duration,
) -> Vec<f64> {
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().unwrap().clone());
    let _ = client.call_tool(params.clone()).await.unwrap();
    let mut samples = Vec::new();
    for _ in 0..runs {
        tokio::time::sleep(spacing).await;
        let started = Instant::now();
        let _ = client.call_tool(params.clone()).await.unwrap();
        samples.push(ms(started.elapsed()));
    }
    let _ = client.cancel().await;
    samples
}

/// The engine library V8 engine processes load: `--v8-library` ([`set_v8_library`]), else the
/// release one `cargo xtask setup-v8` builds in the target folder of the release binary.
pub(crate) fn v8_library(codemode: &str) -> String {
    V8_LIBRARY.get().cloned().unwrap_or_else(|| {
        let target = std::path::Path::new(codemode)
            .parent()
            .and_then(std::path::Path::parent)
            .unwrap_or(std::path::Path::new("target"));
        target
            .join("node-engine/release/libcodemode_v8_engine.so")
            .display()
            .to_string()
    })
}

/// The engine library `--v8-library` names, once.
static V8_LIBRARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes V8 engine processes load `library` (`--v8-library`).
pub(crate) fn set_v8_library(library: &str) {
    let _ = V8_LIBRARY.set(library.to_owned());
}

/// The arguments of `codemode run` or `codemode mcp` for cells `isolation` (`process` or
/// `in-process`): in-process cells run on QuickJS, the only engine a host's own process runs.
pub(crate) fn isolation_args(isolation: &str) -> Vec<&str> {
    match isolation {
        "in-process" => vec!["--isolation", "in-process", "--engine", "quickjs"],
        other => vec!["--isolation", other],
    }
}

/// Engine processes of the release binary `codemode`: V8 on the pinned Node 24 (see
/// [`v8_library`]).
pub(crate) fn process_config(codemode: &str, warm_runtimes: usize) -> ProcessEngineConfig {
    process_config_for(codemode, "v8", warm_runtimes)
}

/// [`process_config`], for the engine named `engine` (`v8` or `quickjs`).
pub(crate) fn process_config_for(
    codemode: &str,
    engine: &str,
    warm_runtimes: usize,
) -> ProcessEngineConfig {
    if engine == "v8" {
        return process_config_in_node(codemode, &v8_library(codemode), warm_runtimes);
    }
    let arguments = codemode_test_support::engine_host::arguments(engine);
    let mut config = ProcessEngineConfig::new(codemode, arguments).with_warm_runtimes(
        warm_runtimes,
        codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES,
    );
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        config = config.with_env("LD_LIBRARY_PATH", path);
    }
    config
}

/// Engine processes on the pinned Node 24's V8 13.6: `node` beside `library` loading it.
pub(crate) fn process_config_in_node(
    codemode: &str,
    library: &str,
    warm_runtimes: usize,
) -> ProcessEngineConfig {
    let arguments = codemode_test_support::engine_host::arguments_in_node(library.into());
    let mut config = ProcessEngineConfig::new(codemode, arguments).with_warm_runtimes(
        warm_runtimes,
        codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES,
    );
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        config = config.with_env("LD_LIBRARY_PATH", path);
    }
    config
}

/// Engine processes as the binary runs them (one spare kept ready), with one process started.
pub(crate) fn process_engine(codemode: &str, warm_runtimes: usize) -> ProcessEngine {
    process_engine_for(codemode, "v8", warm_runtimes)
}

/// [`process_engine`], for the engine named `engine`.
pub(crate) fn process_engine_for(
    codemode: &str,
    engine: &str,
    warm_runtimes: usize,
) -> ProcessEngine {
    let engine = ProcessEngine::new(process_config_for(codemode, engine, warm_runtimes));
    engine.check().expect("engine processes start");
    engine
}
