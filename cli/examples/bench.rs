//! `cargo xtask bench`: codemode's benchmark suite. Each row is a figure (median and p99 over its
//! runs) beside a yardstick measured in the same run, and their ratio. Prints one table and writes
//! the same figures as JSON to the path given with `--json`.
//!
//! Rows are for the in-process engine; engine processes are not built yet, so their column says
//! so. Run on a quiet machine: the figures are wall-clock times.
//!
//! ```text
//! cargo xtask bench            # builds the release binary, then runs this
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_engine::{CellLimits, CellStart, Engine, PendingMode, RuntimeEvent, event_channel};
use codemode_host_adapters::{InProcessTools, MemoryStore};
use codemode_protocol::ExecuteRequest;
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
        call_id: "bench".into(),
        source: source.into(),
        enabled_tools: Vec::new(),
        stored_values: Default::default(),
        limits: CellLimits::default(),
        pending_mode: PendingMode::Continue,
    }
}

/// Start to result of `text("hi")`.
fn start_to_result(engine: &V8Engine) -> Duration {
    let started = Instant::now();
    let (events, mut receiver) = event_channel(None);
    let _handles = engine.start(cell(r#"text("hi")"#), events).expect("starts");
    while let Some(event) = receiver.blocking_recv() {
        if let RuntimeEvent::Result { .. } = event {
            return started.elapsed();
        }
    }
    panic!("no result");
}

fn spaced(engine: &V8Engine, runs: usize, spacing: Duration) -> Vec<f64> {
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
fn concurrent(engine: &V8Engine, count: usize, rounds: usize) -> Vec<f64> {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(50));
        let threads: Vec<_> = (0..count)
            .map(|_| {
                let engine = engine.clone();
                std::thread::spawn(move || ms(start_to_result(&engine)))
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

/// Microseconds per awaited in-process tool call, from a cell that loops over one.
async fn tool_round_trip(iterations: usize) -> f64 {
    let tools = InProcessTools::new().function("echo", "Echo.", json!({}), |input| async move {
        Ok(input.unwrap_or(Value::Null))
    });
    let session = Session::open(
        "bench",
        Arc::new(V8Engine::new()),
        Arc::new(MemoryStore::new()),
        Arc::new(tools),
        SessionConfig::default(),
    )
    .await
    .unwrap();
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

fn termination(engine: &V8Engine, runs: usize) -> Vec<f64> {
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

/// MiB of resident memory per cell parked on a promise that never settles.
fn parked_cells(engine: &V8Engine, count: usize) -> f64 {
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_kib();
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
    let after = rss_kib();
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json_path = flag(&args, "--json");
    let codemode = flag(&args, "--codemode").unwrap_or_else(|| "target/release/codemode".into());
    let runs = 200;
    let mut rows = Vec::new();
    let row =
        |name: &str, figure: Stats, yardstick_name: &str, yardstick: Option<Stats>, unit| Row {
            name: name.to_owned(),
            figure,
            yardstick_name: yardstick_name.to_owned(),
            yardstick,
            unit,
        };

    let bare: Vec<f64> = (0..runs)
        .map(|_| ms(codemode_runtime_v8::bare_isolate_cycle().unwrap()))
        .collect();
    let cold = spaced(
        &V8Engine::with_warm_runtimes(0),
        runs,
        Duration::from_millis(20),
    );
    rows.push(row(
        "cold start (no pre-warming)",
        stats(cold),
        "bare isolate + context",
        Some(stats(bare)),
        "ms",
    ));

    let engine = V8Engine::new();
    let warm = stats(spaced(&engine, runs, Duration::from_millis(20)));
    rows.push(row(
        "warm start, 20 ms apart",
        warm,
        "node vm.createContext + run",
        node_vm(runs).map(stats),
        "ms",
    ));
    for spacing in [5u64, 2, 0] {
        let figure = stats(spaced(&engine, runs, Duration::from_millis(spacing)));
        rows.push(row(
            &format!("warm start, {spacing} ms apart"),
            figure,
            "warm, 20 ms apart",
            Some(warm),
            "ms",
        ));
    }
    let sustained = stats(spaced(&engine, 1000, Duration::ZERO));
    rows.push(row(
        "sustained: 1,000 back to back",
        sustained,
        "warm, 20 ms apart",
        Some(warm),
        "ms",
    ));
    for count in [8usize, 32] {
        let figure = stats(concurrent(&engine, count, 10));
        rows.push(row(
            &format!("{count} concurrent, each"),
            figure,
            "warm, 20 ms apart",
            Some(warm),
            "ms",
        ));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let round_trips: Vec<f64> = (0..5)
        .map(|_| runtime.block_on(tool_round_trip(2000)))
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
    ));
    rows.push(row(
        "terminate() to Terminated",
        stats(termination(&engine, 100)),
        "",
        None,
        "ms",
    ));
    let parked = parked_cells(&V8Engine::with_warm_runtimes(0), 1000);
    rows.push(row(
        "memory per parked cell (1,000)",
        Stats {
            median: parked,
            p99: parked,
        },
        "",
        None,
        "MiB",
    ));

    for (label, spacing) in [("back to back", 0u64), ("50 ms apart", 50)] {
        let spacing = Duration::from_millis(spacing);
        let exec = runtime.block_on(mcp_calls(
            tokio::process::Command::new(&codemode).configure(|command| {
                command.arg("mcp");
            }),
            "exec",
            json!({"code": "text(\"hi\")"}),
            100,
            spacing,
        ));
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
        ));
    }

    println!("| figure | median | p99 | yardstick | its median | ratio | engine processes |");
    println!("|---|---|---|---|---|---|---|");
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
        println!(
            "| {} | {:.3} {unit} | {:.3} {unit} | {} | {yardstick} | {ratio} | not built yet |",
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
        }));
    }
    if let Some(path) = json_path {
        if let Some(parent) = std::path::Path::new(&path).parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&json!({ "rows": json_rows })).unwrap(),
        )
        .unwrap();
        println!("\nwritten to {path}");
    }
}
