//! `cargo xtask bench`: codemode's benchmark suite. Each row is a figure (median and p99 over its
//! runs) beside a yardstick measured in the same run, and their ratio. Prints one table and writes
//! the same figures as JSON to the path given with `--json`.
//!
//! Every row is measured twice, side by side: for the in-process engine (`V8Engine`, with the
//! yardstick and ratio) and for engine processes (`ProcessEngine`, the binary's default), so the
//! price of the process boundary is always visible. A second table puts the two engines, V8 and
//! QuickJS, side by side on the same rows, in-process and in engine processes; a third puts the
//! stores, files and PostgreSQL, side by side (`bench/stores.rs`; left out, saying so, on a
//! machine without PostgreSQL); a fourth puts engine processes beside pydantic-monty's subprocess
//! workers (`bench/monty.rs`, with the Python given by `--monty-python`; left out, saying so,
//! without one). Run on a quiet machine: the figures are wall-clock times.
//!
//! ```text
//! cargo xtask bench            # builds the release binary, then runs this
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "bench/monty.rs"]
mod monty;
#[path = "bench/stores.rs"]
mod stores;

use codemode_engine::{CellLimits, CellStart, Engine, PendingMode, RuntimeEvent, event_channel};
use codemode_engine_process::{ProcessEngine, ProcessEngineConfig};
use codemode_host_adapters::{InProcessTools, MemoryStore};
use codemode_protocol::ExecuteRequest;
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_runtime_v8::V8Engine;
use codemode_session::{CellEvent, Session, SessionConfig};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};

/// One row of the table.
struct Row {
    name: String,
    figure: Stats,
    yardstick_name: String,
    yardstick: Option<Stats>,
    unit: &'static str,
    /// The same figure with engine processes.
    process: Option<Stats>,
}

#[derive(Clone, Copy)]
struct Stats {
    median: f64,
    p99: f64,
}

fn stats(mut samples: Vec<f64>) -> Stats {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn cell(source: &str) -> CellStart {
    CellStart {
        tenant: None,
        call_id: "bench".into(),
        source: source.into(),
        enabled_tools: Vec::new(),
        stored_values: Default::default(),
        limits: CellLimits::default(),
        pending_mode: PendingMode::Continue,
    }
}

/// Start to result of `text("hi")`.
fn start_to_result(engine: &dyn Engine) -> Duration {
    run_to_result(engine, r#"text("hi")"#).0
}

/// Runs `source` in a new cell; how long from start to its result, and the result.
fn run_to_result(engine: &dyn Engine, source: &str) -> (Duration, RuntimeEvent) {
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

fn spaced(engine: &dyn Engine, runs: usize, spacing: Duration) -> Vec<f64> {
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
fn concurrent(engine: &Arc<dyn Engine>, count: usize, rounds: usize) -> Vec<f64> {
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

/// Node's `vm.createContext` and a run in it, in a warm Node process, 20 ms apart.
fn node_vm(runs: usize) -> Option<Vec<f64>> {
    let script = format!(
        "const vm = require('vm'); const out = []; let i = 0;
         function step() {{ const t = process.hrtime.bigint(); const c = vm.createContext({{}});
           vm.runInContext('globalThis.r = String(\"hi\")', c); out.push(Number(process.hrtime.bigint() - t) / 1e6);
           if (++i < {runs}) setTimeout(step, 20); else console.log(JSON.stringify(out)); }}
         step();"
    );
    let output = std::process::Command::new("node")
        .arg("-e")
        .arg(script)
        .output()
        .ok()?;
    serde_json::from_slice(&output.stdout).ok()
}

fn rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// Runs one cell in `session` and checks that it completed without an error.
async fn run_in(session: &Session, source: &str) {
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

/// Bytes of this process's resident memory per byte stored, with 3 sessions that each store
/// 16 MiB of JSON and then start 5 more cells that read it: what a tenant's stored values cost
/// the server (the values are held once, shared by the sessions' cells and the store).
async fn memory_per_stored_byte(engine: Arc<dyn Engine>) -> f64 {
    let store = Arc::new(MemoryStore::new());
    let mut sessions = Vec::new();
    for index in 0..3 {
        let session = Session::open(
            format!("stored-{index}"),
            Arc::clone(&engine),
            Arc::clone(&store) as Arc<dyn codemode_session::Store>,
            Arc::new(InProcessTools::new()),
            SessionConfig::default(),
        )
        .await
        .unwrap();
        sessions.push(session);
    }
    // Warm each session's path once, so the figure is the values, not first-use costs.
    for session in &sessions {
        run_in(session, "store('warm', 1)").await;
    }
    let before = rss_kib();
    for session in &sessions {
        run_in(
            session,
            "const a = Array(1 << 20).fill(0); store('k', Array(8).fill(a));",
        )
        .await;
        for _ in 0..5 {
            run_in(session, "text(typeof load('warm'))").await;
        }
    }
    let after = rss_kib();
    let stored: usize = sessions.iter().map(Session::stored_bytes).sum();
    for session in sessions {
        session.shutdown().await;
    }
    (after - before).max(0.0) * 1024.0 / stored as f64
}

/// Milliseconds for one cell to store 100,000 keys, start to result.
fn many_keys(engine: &dyn Engine) -> f64 {
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
fn many_keys_loop_only(engine: &dyn Engine) -> f64 {
    ms(run_to_result(
        engine,
        "let s = 0; for (let i = 0; i < 100000; i++) s += ('key-' + i).length;",
    )
    .0)
}

/// Microseconds per awaited in-process tool call, from a cell that loops over one.
/// A session on `engine` whose one tool, `echo`, answers with its argument.
async fn echo_session(id: &str, engine: Arc<dyn Engine>) -> Session {
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

async fn tool_round_trip(engine: Arc<dyn Engine>, iterations: usize) -> f64 {
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
async fn large_round_trip(engine: Arc<dyn Engine>, runs: usize) -> (Vec<f64>, Vec<f64>) {
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

/// The resident memory of process `pid` and every descendant, in KiB (0 once it is gone).
fn tree_rss_kib(pid: u32) -> f64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0.0);
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    own + children.into_iter().map(tree_rss_kib).sum::<f64>()
}

/// The peak resident memory, in MiB, of `codemode run ARGS` running `source` (the server and its
/// engine processes together, sampled every 2 ms until it exits).
fn peak_run_memory_mib(codemode: &str, source: &str, args: &[&str]) -> f64 {
    let file = std::env::temp_dir().join(format!("codemode-bench-{}.js", std::process::id()));
    std::fs::write(&file, source).unwrap();
    let mut child = std::process::Command::new(codemode)
        .arg("run")
        .args(args)
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut peak: f64 = 0.0;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(tree_rss_kib(child.id()));
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::fs::remove_file(&file);
    peak / 1024.0
}

/// The cell of the corpus that piles up large tool arguments (40 calls of 8 MB each, awaited
/// together), ended by its wall-clock limit or its caps.
const PILED_ARGUMENTS: &str = r#"text("before"); const big = "x".repeat(8e6); const calls = []; for (let i = 0; i < 40; i++) calls.push(tools.echo(big)); await Promise.all(calls)"#;

/// Microseconds per one-byte ping-pong over a Unix socket pair between two plain threads that
/// block: the floor of a round trip that crosses a process boundary (two blocking wake-ups).
fn socket_ping_pong(iterations: usize) -> f64 {
    use std::io::{Read, Write};
    let (mut near, mut far) = std::os::unix::net::UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        while far.read(&mut byte).unwrap_or(0) == 1 {
            if far.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let mut byte = [0u8; 1];
    let started = Instant::now();
    for _ in 0..iterations {
        near.write_all(b"x").unwrap();
        near.read_exact(&mut byte).unwrap();
    }
    let elapsed = started.elapsed();
    drop(near);
    let _ = echo.join();
    elapsed.as_secs_f64() * 1e6 / iterations as f64
}

/// Microseconds per round trip between a plain thread and a tokio task over a oneshot.
fn oneshot_round_trip(iterations: usize, runtime: &tokio::runtime::Runtime) -> f64 {
    let (requests, mut receiver) =
        tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<u64>>();
    runtime.spawn(async move {
        while let Some(reply) = receiver.recv().await {
            let _ = reply.send(1);
        }
    });
    let started = Instant::now();
    for _ in 0..iterations {
        let (reply, answer) = tokio::sync::oneshot::channel();
        requests.send(reply).unwrap();
        answer.blocking_recv().unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / iterations as f64
}

fn termination(engine: &dyn Engine, runs: usize) -> Vec<f64> {
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

/// Proportional resident memory (KiB) of this process and `children`: shared pages (the V8
/// library) are split between the processes that map them, so a process is not charged for the
/// library again.
fn pss_kib(children: &[u32]) -> f64 {
    let pss = |pid: String| {
        std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .ok()
            .and_then(|rollup| {
                rollup
                    .lines()
                    .find_map(|line| line.strip_prefix("Pss:"))
                    .and_then(|value| {
                        value
                            .trim()
                            .trim_end_matches("kB")
                            .trim()
                            .parse::<f64>()
                            .ok()
                    })
            })
            .unwrap_or(0.0)
    };
    pss("self".into()) + children.iter().map(|pid| pss(pid.to_string())).sum::<f64>()
}

/// MiB of memory per cell parked on a promise that never settles: resident memory of this
/// process for the in-process engine; proportional memory of this process and its engine
/// processes for engine processes.
fn parked_cells(engine: &dyn Engine, processes: Option<&ProcessEngine>, count: usize) -> f64 {
    std::thread::sleep(Duration::from_millis(200));
    let memory = || match processes {
        Some(processes) => pss_kib(&processes.process_ids()),
        None => rss_kib(),
    };
    let before = memory();
    let mut parked = Vec::new();
    for _ in 0..count {
        let (events, mut receiver) = event_channel(None);
        let mut start = cell("await tools.never();");
        start.enabled_tools = vec![codemode_protocol::ToolDefinition::function(
            codemode_protocol::ToolName::plain("never"),
            "Never answers.",
        )];
        let handles = engine.start(start, events).unwrap();
        while let Some(event) = receiver.blocking_recv() {
            if event == RuntimeEvent::Pending {
                break;
            }
        }
        parked.push((handles, receiver));
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = memory();
    for (handles, _) in &parked {
        handles.terminate.terminate();
    }
    (after - before) / 1024.0 / count as f64
}

/// Milliseconds per call of `tool` on the MCP server `command` starts, `spacing` apart.
async fn mcp_calls(
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

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .cloned()
}

/// Engine processes of the release binary beside `codemode` (the launcher), which this example's
/// library path (set by cargo) lets start.
fn process_config(codemode: &str, warm_runtimes: usize) -> ProcessEngineConfig {
    process_config_for(codemode, "v8", warm_runtimes)
}

/// [`process_config`], for the engine named `engine` (`v8` or `quickjs`).
fn process_config_for(codemode: &str, engine: &str, warm_runtimes: usize) -> ProcessEngineConfig {
    let program = std::path::Path::new(codemode).with_file_name("codemode-v8");
    let mut config = ProcessEngineConfig::new(program, ["engine-host", "--engine", engine])
        .with_warm_runtimes(
            warm_runtimes,
            codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES,
        );
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        config = config.with_env("LD_LIBRARY_PATH", path);
    }
    config
}

/// Engine processes as the binary runs them (one spare kept ready), with one process started.
fn process_engine(codemode: &str, warm_runtimes: usize) -> ProcessEngine {
    process_engine_for(codemode, "v8", warm_runtimes)
}

/// [`process_engine`], for the engine named `engine`.
fn process_engine_for(codemode: &str, engine: &str, warm_runtimes: usize) -> ProcessEngine {
    let engine = ProcessEngine::new(process_config_for(codemode, engine, warm_runtimes));
    engine.check().expect("engine processes start");
    engine
}

/// A CPU-heavy cell: how long from start to result.
fn heavy(engine: &dyn Engine, source: &str, runs: usize) -> Vec<f64> {
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

/// One row of the engines' table: V8 and QuickJS, in-process and in engine processes.
struct EngineRow {
    name: String,
    unit: &'static str,
    /// V8 in-process, QuickJS in-process, V8 engine processes, QuickJS engine processes.
    figures: [Stats; 4],
}

/// Prints the engines' table; returns its rows as JSON.
fn print_engines(rows: &[EngineRow]) -> Vec<Value> {
    println!(
        "\n| figure | V8 in-process | QuickJS in-process | QuickJS / V8 | V8 engine processes | QuickJS engine processes | QuickJS / V8 |"
    );
    println!("|---|---|---|---|---|---|---|");
    rows.iter()
        .map(|row| {
            let [v8, quickjs, v8_process, quickjs_process] = row.figures;
            println!(
                "| {} | {:.3} {unit} | {:.3} {unit} | {:.2} | {:.3} {unit} | {:.3} {unit} | {:.2} |",
                row.name,
                v8.median,
                quickjs.median,
                quickjs.median / v8.median,
                v8_process.median,
                quickjs_process.median,
                quickjs_process.median / v8_process.median,
                unit = row.unit
            );
            json!({
                "figure": row.name, "unit": row.unit,
                "v8_in_process": {"median": v8.median, "p99": v8.p99},
                "quickjs_in_process": {"median": quickjs.median, "p99": quickjs.p99},
                "v8_engine_processes": {"median": v8_process.median, "p99": v8_process.p99},
                "quickjs_engine_processes": {"median": quickjs_process.median, "p99": quickjs_process.p99},
            })
        })
        .collect()
}

/// The engines side by side on the same rows; printed as a second table.
fn engine_comparison(codemode: &str, runtime: &tokio::runtime::Runtime) -> Vec<EngineRow> {
    let runs = 200;
    let mut rows = Vec::new();
    let single = |value: f64| Stats {
        median: value,
        p99: value,
    };
    let cold: [Box<dyn Engine>; 4] = [
        Box::new(V8Engine::with_warm_runtimes(0)),
        Box::new(QuickJsEngine::with_warm_runtimes(0)),
        Box::new(process_engine_for(codemode, "v8", 0)),
        Box::new(process_engine_for(codemode, "quickjs", 0)),
    ];
    rows.push(EngineRow {
        name: "cold start (no pre-warming)".into(),
        unit: "ms",
        figures: cold
            .each_ref()
            .map(|engine| stats(spaced(engine.as_ref(), runs, Duration::from_millis(20)))),
    });
    let warm: [Arc<dyn Engine>; 4] = [
        Arc::new(V8Engine::new()),
        Arc::new(QuickJsEngine::new()),
        Arc::new(process_engine_for(codemode, "v8", 2)),
        Arc::new(process_engine_for(codemode, "quickjs", 2)),
    ];
    rows.push(EngineRow {
        name: "warm start, 20 ms apart".into(),
        unit: "ms",
        figures: warm
            .each_ref()
            .map(|engine| stats(spaced(engine.as_ref(), runs, Duration::from_millis(20)))),
    });
    rows.push(EngineRow {
        name: "awaited tool round trip".into(),
        unit: "µs",
        figures: warm.each_ref().map(|engine| {
            stats(
                (0..5)
                    .map(|_| runtime.block_on(tool_round_trip(Arc::clone(engine), 2000)))
                    .collect(),
            )
        }),
    });
    rows.push(EngineRow {
        name: "terminate() to Terminated".into(),
        unit: "ms",
        figures: warm
            .each_ref()
            .map(|engine| stats(termination(engine.as_ref(), 100))),
    });
    let quickjs_parked = process_engine_for(codemode, "quickjs", 0);
    let v8_parked = process_engine_for(codemode, "v8", 0);
    rows.push(EngineRow {
        name: "memory per parked cell (1,000)".into(),
        unit: "MiB",
        figures: [
            single(parked_cells(&V8Engine::with_warm_runtimes(0), None, 1000)),
            single(parked_cells(
                &QuickJsEngine::with_warm_runtimes(0),
                None,
                1000,
            )),
            single(parked_cells(&v8_parked, Some(&v8_parked), 1000)),
            single(parked_cells(&quickjs_parked, Some(&quickjs_parked), 1000)),
        ],
    });
    for (name, source) in [
        (
            "CPU-heavy: 10 million additions",
            "let sum = 0; for (let i = 0; i < 1e7; i++) sum += i; text(sum)",
        ),
        (
            "CPU-heavy: sort 1 million numbers",
            "const a = Array.from({ length: 1e6 }, (_, i) => (i * 7919) % 1000003); a.sort((x, y) => x - y); text(a[0])",
        ),
    ] {
        rows.push(EngineRow {
            name: name.into(),
            unit: "ms",
            figures: warm
                .each_ref()
                .map(|engine| stats(heavy(engine.as_ref(), source, 5))),
        });
    }
    rows
}

/// What one engine process costs: spawn to ready (ms, each a fresh process), and its
/// proportional memory when idle with its warm runtimes (MiB).
fn process_cost(codemode: &str, runs: usize) -> (Stats, f64) {
    let spawns: Vec<f64> = (0..runs)
        .map(|_| {
            let engine = ProcessEngine::new(
                process_config(codemode, codemode_runtime_v8::DEFAULT_WARM_RUNTIMES)
                    .with_spare_processes(0),
            );
            let started = Instant::now();
            engine.check().expect("engine processes start");
            ms(started.elapsed())
        })
        .collect();
    let engine = ProcessEngine::new(
        process_config(codemode, codemode_runtime_v8::DEFAULT_WARM_RUNTIMES)
            .with_spare_processes(0),
    );
    engine.check().expect("engine processes start");
    std::thread::sleep(Duration::from_millis(300));
    let idle = (pss_kib(&engine.process_ids()) - pss_kib(&[])) / 1024.0;
    (stats(spawns), idle)
}

/// What a quick mode needs: the binary (`--codemode`) and a runtime.
fn quick_setup(args: &[String]) -> (String, tokio::runtime::Runtime) {
    let codemode = flag(args, "--codemode").unwrap_or_else(|| "target/release/codemode".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    (codemode, runtime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|arg| arg == "--round-trip-only") {
        // A quick look at one row, for profiling: not part of the suite's table.
        let (codemode, runtime) = quick_setup(&args);
        let engine = flag(&args, "--engine").unwrap_or_else(|| "v8".into());
        let in_process: Arc<dyn Engine> = match engine.as_str() {
            "quickjs" => Arc::new(QuickJsEngine::new()),
            "v8" => Arc::new(V8Engine::new()),
            other => panic!("--engine takes v8 or quickjs, not {other}"),
        };
        let processes: Arc<dyn Engine> = Arc::new(process_engine_for(&codemode, &engine, 2));
        for _ in 0..3 {
            let a = runtime.block_on(tool_round_trip(Arc::clone(&in_process), 2000));
            let b = runtime.block_on(tool_round_trip(Arc::clone(&processes), 2000));
            println!("tool round trip: in-process {a:.1} µs, engine processes {b:.1} µs");
        }
        return;
    }
    if let Some(iterations) = flag(&args, "--round-trips-in-process") {
        // In-process round trips alone, for instruction counts under callgrind (which counts the
        // same whatever else the machine does): run it with two counts and take the difference.
        let (_codemode, runtime) = quick_setup(&args);
        let engine: Arc<dyn Engine> = match flag(&args, "--engine").as_deref() {
            Some("quickjs") => Arc::new(QuickJsEngine::new()),
            Some("v8") | None => Arc::new(V8Engine::new()),
            Some(other) => panic!("--engine takes v8 or quickjs, not {other}"),
        };
        let iterations: usize = iterations.parse().expect("a number of round trips");
        let each = runtime.block_on(tool_round_trip(engine, iterations));
        println!("tool round trip in-process: {each:.1} µs");
        return;
    }
    if args.iter().any(|arg| arg == "--quickjs-start-only") {
        // QuickJS's warm start in-process, for profiling: not part of the suite's table.
        let engine = QuickJsEngine::new();
        let start = stats(spaced(&engine, 300, Duration::from_millis(20)));
        println!(
            "quickjs in-process warm text(\"hi\"): p50 {:.3} ms (p99 {:.3})",
            start.median, start.p99
        );
        return;
    }
    if args.iter().any(|arg| arg == "--quickjs-process-start-only") {
        // QuickJS's warm start in an engine process, for profiling: not part of the suite's table.
        let (codemode, _runtime) = quick_setup(&args);
        let processes = process_engine_for(&codemode, "quickjs", 2);
        let start = stats(spaced(&processes, 100, Duration::from_millis(20)));
        println!(
            "quickjs engine-process warm text(\"hi\"): p50 {:.3} ms (p99 {:.3})",
            start.median, start.p99
        );
        return;
    }
    if args.iter().any(|arg| arg == "--quickjs-targets") {
        // Issue 19's two targets, QuickJS in engine processes, with V8 beside it: not the suite.
        let (codemode, runtime) = quick_setup(&args);
        println!(
            "yardsticks: socket ping-pong {:.1} µs, thread-to-tokio oneshot {:.1} µs",
            socket_ping_pong(20_000),
            oneshot_round_trip(20_000, &runtime)
        );
        for engine in ["quickjs", "v8"] {
            let processes: Arc<dyn Engine> = Arc::new(process_engine_for(&codemode, engine, 2));
            let start = stats(spaced(processes.as_ref(), 200, Duration::from_millis(20)));
            let trips = stats(
                (0..5)
                    .map(|_| runtime.block_on(tool_round_trip(Arc::clone(&processes), 2000)))
                    .collect(),
            );
            println!(
                "{engine} in engine processes: warm text(\"hi\") p50 {:.3} ms (p99 {:.3}), \
                 tool round trip p50 {:.1} µs",
                start.median, start.p99, trips.median
            );
        }
        return;
    }
    if args.iter().any(|arg| arg == "--spawn-only") {
        // An engine process's spawn to ready alone, for comparing builds: not the suite.
        let (codemode, _runtime) = quick_setup(&args);
        let (spawn, idle) = process_cost(&codemode, 40);
        println!(
            "spawn to ready {:.1} ms (p99 {:.1}), idle {idle:.1} MiB",
            spawn.median, spawn.p99
        );
        return;
    }
    if args.iter().any(|arg| arg == "--payload-only") {
        // The large-payload row alone, for profiling: not part of the suite's table.
        let (codemode, runtime) = quick_setup(&args);
        for (name, engine) in [
            ("in-process", Arc::new(V8Engine::new()) as Arc<dyn Engine>),
            (
                "engine processes",
                Arc::new(process_engine(&codemode, 2)) as Arc<dyn Engine>,
            ),
        ] {
            let (trips, owns) = runtime.block_on(large_round_trip(engine, 7));
            let (trip, own) = (stats(trips), stats(owns));
            println!(
                "11 MB echo, {name}: {:.1} ms (p99 {:.1}), the cell's own copy {:.1} ms: {:.2}x",
                trip.median,
                trip.p99,
                own.median,
                trip.median / own.median
            );
        }
        let limits = ["--heap-limit-mb", "64", "--timeout-ms", "5000"];
        for isolation in ["in-process", "process"] {
            let peaks: Vec<f64> = (0..3)
                .map(|_| {
                    peak_run_memory_mib(
                        &codemode,
                        PILED_ARGUMENTS,
                        &[&limits[..], &["--isolation", isolation]].concat(),
                    )
                })
                .collect();
            println!(
                "40 × 8 MB tool calls, {isolation}: peak {:.0} MiB",
                stats(peaks).median
            );
        }
        return;
    }
    if args.iter().any(|arg| arg == "--stored-only") {
        // A quick look at the stored-value rows, for profiling: not part of the suite's table.
        let (codemode, runtime) = quick_setup(&args);
        let in_process: Arc<dyn Engine> = Arc::new(V8Engine::new());
        let processes: Arc<dyn Engine> = Arc::new(process_engine(&codemode, 2));
        let keys = many_keys(in_process.as_ref());
        let keys_process = many_keys(processes.as_ref());
        println!("100,000 keys: in-process {keys:.1} ms, engine processes {keys_process:.1} ms");
        let held = runtime.block_on(memory_per_stored_byte(Arc::clone(&processes)));
        println!("bytes held per byte stored, engine processes: {held:.2}");
        return;
    }
    if args.iter().any(|arg| arg == "--stores-only") {
        // The stores' table alone: not the whole suite.
        let (codemode, runtime) = quick_setup(&args);
        if let Some(rows) = stores::store_comparison(&codemode, &runtime) {
            stores::print_stores(&rows);
        }
        return;
    }
    if args.iter().any(|arg| arg == "--monty-only") {
        // The table beside Monty alone: not the whole suite.
        let (codemode, runtime) = quick_setup(&args);
        let python = flag(&args, "--monty-python").expect("--monty-python names Monty's Python");
        let mut yardstick = monty::Monty::start(&python).expect("pydantic-monty starts");
        let processes: Arc<dyn Engine> = Arc::new(process_engine(
            &codemode,
            codemode_runtime_v8::DEFAULT_WARM_RUNTIMES,
        ));
        monty::print_monty(&monty::monty_comparison(
            &codemode,
            &processes,
            &runtime,
            &mut yardstick,
        ));
        return;
    }
    if args.iter().any(|arg| arg == "--exec-only") {
        // `codemode mcp`'s exec back to back beside a trivial MCP tool, alternated: the last row
        // of the table beside Monty, alone.
        let (codemode, runtime) = quick_setup(&args);
        let isolation = flag(&args, "--isolation").unwrap_or_else(|| "process".into());
        let runs: usize = flag(&args, "--runs").map_or(40, |runs| runs.parse().expect("--runs N"));
        let (mut execs, mut trivials) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            execs.extend(runtime.block_on(mcp_calls(
                tokio::process::Command::new(&codemode).configure(|command| {
                    command.args(["mcp", "--isolation", &isolation]);
                }),
                "exec",
                json!({"code": "text(\"hi\")"}),
                runs,
                Duration::ZERO,
            )));
            trivials.extend(runtime.block_on(mcp_calls(
                tokio::process::Command::new(&codemode).configure(|command| {
                    command.arg("demo-mcp-server");
                }),
                "add",
                json!({"a": 1, "b": 2}),
                runs,
                Duration::ZERO,
            )));
        }
        let (exec, trivial) = (stats(execs), stats(trivials));
        println!(
            "exec ({isolation}) back to back: median {:.3} ms (p99 {:.3}); trivial MCP tool: median {:.3} ms (p99 {:.3}); ratio {:.2}",
            exec.median,
            exec.p99,
            trivial.median,
            trivial.p99,
            exec.median / trivial.median
        );
        return;
    }
    if args.iter().any(|arg| arg == "--engines-only") {
        // The engines' table alone: not the whole suite.
        let (codemode, runtime) = quick_setup(&args);
        print_engines(&engine_comparison(&codemode, &runtime));
        return;
    }
    let json_path = flag(&args, "--json");
    let codemode = flag(&args, "--codemode").unwrap_or_else(|| "target/release/codemode".into());
    let runs = 200;
    let mut rows = Vec::new();
    let row = |name: &str,
               figure: Stats,
               yardstick_name: &str,
               yardstick: Option<Stats>,
               unit,
               process: Option<Stats>| Row {
        name: name.to_owned(),
        figure,
        yardstick_name: yardstick_name.to_owned(),
        yardstick,
        unit,
        process,
    };

    let bare: Vec<f64> = (0..runs)
        .map(|_| ms(codemode_runtime_v8::bare_isolate_cycle().unwrap()))
        .collect();
    let cold = spaced(
        &V8Engine::with_warm_runtimes(0),
        runs,
        Duration::from_millis(20),
    );
    let cold_process = spaced(
        &process_engine(&codemode, 0),
        runs,
        Duration::from_millis(20),
    );
    rows.push(row(
        "cold start (no pre-warming)",
        stats(cold),
        "bare isolate + context",
        Some(stats(bare)),
        "ms",
        Some(stats(cold_process)),
    ));

    let engine: Arc<dyn Engine> = Arc::new(V8Engine::new());
    let processes = process_engine(&codemode, codemode_runtime_v8::DEFAULT_WARM_RUNTIMES);
    let process: Arc<dyn Engine> = Arc::new(processes.clone());
    let warm = stats(spaced(engine.as_ref(), runs, Duration::from_millis(20)));
    let warm_process = stats(spaced(process.as_ref(), runs, Duration::from_millis(20)));
    rows.push(row(
        "warm start, 20 ms apart",
        warm,
        "node vm.createContext + run",
        node_vm(runs).map(stats),
        "ms",
        Some(warm_process),
    ));
    for spacing in [5u64, 2, 0] {
        let spacing_of = Duration::from_millis(spacing);
        let figure = stats(spaced(engine.as_ref(), runs, spacing_of));
        let in_processes = stats(spaced(process.as_ref(), runs, spacing_of));
        rows.push(row(
            &format!("warm start, {spacing} ms apart"),
            figure,
            "warm, 20 ms apart",
            Some(warm),
            "ms",
            Some(in_processes),
        ));
    }
    let sustained = stats(spaced(engine.as_ref(), 1000, Duration::ZERO));
    let sustained_process = stats(spaced(process.as_ref(), 1000, Duration::ZERO));
    rows.push(row(
        "sustained: 1,000 back to back",
        sustained,
        "warm, 20 ms apart",
        Some(warm),
        "ms",
        Some(sustained_process),
    ));
    for count in [8usize, 32] {
        let figure = stats(concurrent(&engine, count, 10));
        let in_processes = stats(concurrent(&process, count, 10));
        rows.push(row(
            &format!("{count} concurrent, each"),
            figure,
            "warm, 20 ms apart",
            Some(warm),
            "ms",
            Some(in_processes),
        ));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let round_trips: Vec<f64> = (0..5)
        .map(|_| runtime.block_on(tool_round_trip(Arc::clone(&engine), 2000)))
        .collect();
    let round_trips_process: Vec<f64> = (0..5)
        .map(|_| runtime.block_on(tool_round_trip(Arc::clone(&process), 2000)))
        .collect();
    let oneshots: Vec<f64> = (0..5)
        .map(|_| oneshot_round_trip(20_000, &runtime))
        .collect();
    rows.push(row(
        "awaited tool round trip",
        stats(round_trips),
        "tokio oneshot thread<->task",
        Some(stats(oneshots)),
        "µs",
        Some(stats(round_trips_process)),
    ));
    rows.push(row(
        "terminate() to Terminated",
        stats(termination(engine.as_ref(), 100)),
        "",
        None,
        "ms",
        Some(stats(termination(process.as_ref(), 100))),
    ));
    let parked = parked_cells(&V8Engine::with_warm_runtimes(0), None, 1000);
    let parked_processes = process_engine(&codemode, 0);
    let parked_process = parked_cells(&parked_processes, Some(&parked_processes), 1000);
    let single = |value: f64| Stats {
        median: value,
        p99: value,
    };
    rows.push(row(
        "memory per parked cell (1,000)",
        single(parked),
        "",
        None,
        "MiB",
        Some(single(parked_process)),
    ));

    let keys: Vec<f64> = (0..5).map(|_| many_keys(engine.as_ref())).collect();
    let keys_process: Vec<f64> = (0..5).map(|_| many_keys(process.as_ref())).collect();
    let loop_only: Vec<f64> = (0..5)
        .map(|_| many_keys_loop_only(engine.as_ref()))
        .collect();
    rows.push(row(
        "store() of 100,000 keys in one cell",
        stats(keys),
        "the same loop without store",
        Some(stats(loop_only)),
        "ms",
        Some(stats(keys_process)),
    ));
    let held = runtime.block_on(memory_per_stored_byte(Arc::clone(&engine)));
    let held_process = runtime.block_on(memory_per_stored_byte(Arc::clone(&process)));
    rows.push(row(
        "memory held per byte stored (3 sessions × 16 MiB)",
        single(held),
        "",
        None,
        "B/B",
        Some(single(held_process)),
    ));

    let (trips, owns) = runtime.block_on(large_round_trip(Arc::clone(&engine), 15));
    let (trips_process, _) = runtime.block_on(large_round_trip(Arc::clone(&process), 15));
    rows.push(row(
        "11 MB tool argument echoed back",
        stats(trips),
        "the cell's own JSON stringify + parse",
        Some(stats(owns)),
        "ms",
        Some(stats(trips_process)),
    ));

    let limits = ["--heap-limit-mb", "64", "--timeout-ms", "5000"];
    let peak = |isolation: &str, source: &str| {
        stats(
            (0..5)
                .map(|_| {
                    peak_run_memory_mib(
                        &codemode,
                        source,
                        &[&limits[..], &["--isolation", isolation]].concat(),
                    )
                })
                .collect(),
        )
    };
    rows.push(row(
        "peak memory, 40 × 8 MB tool calls (codemode run)",
        peak("in-process", PILED_ARGUMENTS),
        "codemode run of text(\"hi\")",
        Some(peak("in-process", "text(\"hi\")")),
        "MiB",
        Some(peak("process", PILED_ARGUMENTS)),
    ));

    for (label, spacing) in [("back to back", 0u64), ("50 ms apart", 50)] {
        let spacing = Duration::from_millis(spacing);
        let exec_with = |engine: &'static str| {
            runtime.block_on(mcp_calls(
                tokio::process::Command::new(&codemode).configure(|command| {
                    command.args(["mcp", "--isolation", engine]);
                }),
                "exec",
                json!({"code": "text(\"hi\")"}),
                100,
                spacing,
            ))
        };
        let exec = exec_with("in-process");
        let exec_process = exec_with("process");
        let trivial = runtime.block_on(mcp_calls(
            tokio::process::Command::new(&codemode).configure(|command| {
                command.arg("demo-mcp-server");
            }),
            "add",
            json!({"a": 1, "b": 2}),
            100,
            spacing,
        ));
        rows.push(row(
            &format!("MCP exec over stdio, {label}"),
            stats(exec),
            "trivial MCP tool, same client",
            Some(stats(trivial)),
            "ms",
            Some(stats(exec_process)),
        ));
    }

    println!(
        "| figure | in-process median | p99 | yardstick | its median | ratio | engine processes median | p99 | ratio to in-process |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut json_rows = Vec::new();
    for row in &rows {
        let (yardstick, ratio) = match (&row.yardstick, row.yardstick_name.as_str()) {
            (Some(yardstick), _) => (
                format!("{:.3} {}", yardstick.median, row.unit),
                format!("{:.2}", row.figure.median / yardstick.median),
            ),
            (None, "") => (String::new(), String::new()),
            (None, _) => ("no node".into(), String::new()),
        };
        let (process_median, process_p99, process_ratio) = match &row.process {
            Some(process) => (
                format!("{:.3} {}", process.median, row.unit),
                format!("{:.3} {}", process.p99, row.unit),
                format!("{:.2}", process.median / row.figure.median),
            ),
            None => ("not measured".into(), String::new(), String::new()),
        };
        println!(
            "| {} | {:.3} {unit} | {:.3} {unit} | {} | {yardstick} | {ratio} | {process_median} | {process_p99} | {process_ratio} |",
            row.name,
            row.figure.median,
            row.figure.p99,
            row.yardstick_name,
            unit = row.unit
        );
        json_rows.push(json!({
            "figure": row.name, "unit": row.unit, "median": row.figure.median, "p99": row.figure.p99,
            "yardstick": row.yardstick_name, "yardstick_median": row.yardstick.map(|stats| stats.median),
            "ratio": row.yardstick.map(|stats| row.figure.median / stats.median),
            "engine_processes": row.process.map(|stats| json!({"median": stats.median, "p99": stats.p99})),
        }));
    }
    let json_engines = print_engines(&engine_comparison(&codemode, &runtime));
    let json_monty = match flag(&args, "--monty-python")
        .and_then(|python| monty::Monty::start(&python))
    {
        Some(mut yardstick) => monty::print_monty(&monty::monty_comparison(
            &codemode,
            &process,
            &runtime,
            &mut yardstick,
        )),
        None => {
            println!(
                "\nNo table beside Monty: pydantic-monty is not installed (cargo xtask bench installs it)."
            );
            Vec::new()
        }
    };
    let json_stores = stores::store_comparison(&codemode, &runtime)
        .map(|rows| stores::print_stores(&rows))
        .unwrap_or_default();
    let (spawn, idle_mib) = process_cost(&codemode, 20);
    let ping_pong = stats((0..5).map(|_| socket_ping_pong(20_000)).collect());
    println!(
        "\nOne engine process: spawn to ready {:.1} ms (p99 {:.1} ms); {:.1} MiB proportional memory when idle with its warm runtimes.",
        spawn.median, spawn.p99, idle_mib
    );
    println!(
        "Yardstick for the boundary: a one-byte ping-pong over a Unix socket between two blocking threads takes {:.1} µs.",
        ping_pong.median
    );
    if let Some(path) = json_path {
        if let Some(parent) = std::path::Path::new(&path).parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&json!({
                "rows": json_rows,
                "engines": json_engines,
                "stores": json_stores,
                "monty": json_monty,
                "engine_process": {"spawn_ms": {"median": spawn.median, "p99": spawn.p99}, "idle_pss_mib": idle_mib},
                "socket_ping_pong_us": ping_pong.median,
            }))
            .unwrap(),
        )
        .unwrap();
        println!("\nwritten to {path}");
    }
}
