//! The quick modes of the bench: one row or one table alone, for profiling and for comparing
//! builds; none is part of the suite's table.

use std::sync::Arc;
use std::time::Duration;

use codemode_engine::Engine;
use codemode_runtime_quickjs::QuickJsEngine;
use rmcp::transport::ConfigureCommandExt;
use serde_json::json;

use crate::engines::{engine_comparison, print_engines};
use crate::measure::{
    large_round_trip, many_keys, mcp_calls, process_engine, process_engine_for, spaced, stats,
    tool_round_trip,
};
use crate::memory::{PILED_ARGUMENTS, memory_per_stored_byte, peak_run_memory_mib, process_cost};
use crate::yardsticks::{oneshot_round_trip, socket_ping_pong};
use crate::{monty, stores};

/// A multi-threaded async runtime for a mode that needs one.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The in-process engine named `quickjs` (V8 runs only in engine processes: named, it ends the
/// bench with a usage error).
fn in_process_engine(name: &str) -> Arc<dyn Engine> {
    if name != "quickjs" {
        eprintln!("error: in-process cells run on QuickJS only (--engine quickjs)");
        std::process::exit(2);
    }
    Arc::new(QuickJsEngine::new())
}

/// A quick look at one row, for profiling: not part of the suite's table.
pub(crate) fn round_trip(codemode: &str, engine: &str) {
    let runtime = runtime();
    // V8 runs only in engine processes.
    let in_process = (engine == "quickjs").then(|| in_process_engine(engine));
    let processes: Arc<dyn Engine> = Arc::new(process_engine_for(codemode, engine, 2));
    for _ in 0..3 {
        if let Some(in_process) = &in_process {
            let a = runtime.block_on(tool_round_trip(Arc::clone(in_process), 2000));
            println!("tool round trip in-process: {a:.1} µs");
        }
        let b = runtime.block_on(tool_round_trip(Arc::clone(&processes), 2000));
        println!("tool round trip in engine processes: {b:.1} µs");
    }
}

/// In-process round trips alone, for instruction counts under callgrind (which counts the
/// same whatever else the machine does): run it with two counts and take the difference.
pub(crate) fn round_trips_in_process(engine: &str, iterations: usize) {
    let runtime = runtime();
    let each = runtime.block_on(tool_round_trip(in_process_engine(engine), iterations));
    println!("tool round trip in-process: {each:.1} µs");
}

/// QuickJS's warm start in-process, for profiling: not part of the suite's table.
pub(crate) fn quickjs_start() {
    let engine = QuickJsEngine::new();
    let start = stats(spaced(&engine, 300, Duration::from_millis(20)));
    println!(
        "quickjs in-process warm text(\"hi\"): p50 {:.3} ms (p99 {:.3})",
        start.median, start.p99
    );
}

/// QuickJS's warm start in an engine process, for profiling: not part of the suite's table.
pub(crate) fn quickjs_process_start(codemode: &str) {
    let processes = process_engine_for(codemode, "quickjs", 2);
    let start = stats(spaced(&processes, 100, Duration::from_millis(20)));
    println!(
        "quickjs engine-process warm text(\"hi\"): p50 {:.3} ms (p99 {:.3})",
        start.median, start.p99
    );
}

/// Issue 19's two targets, QuickJS in engine processes, with V8 beside it: not the suite.
pub(crate) fn quickjs_targets(codemode: &str) {
    let runtime = runtime();
    println!(
        "yardsticks: socket ping-pong {:.1} µs, thread-to-tokio oneshot {:.1} µs",
        socket_ping_pong(20_000),
        oneshot_round_trip(20_000, &runtime)
    );
    for engine in ["quickjs", "v8"] {
        let processes: Arc<dyn Engine> = Arc::new(process_engine_for(codemode, engine, 2));
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
}

/// An engine process's spawn to ready alone, for comparing builds: not the suite.
pub(crate) fn spawn(codemode: &str) {
    let (spawn, idle) = process_cost(codemode, 40);
    println!(
        "spawn to ready {:.1} ms (p99 {:.1}), idle {idle:.1} MiB",
        spawn.median, spawn.p99
    );
}

/// The large-payload row alone, for profiling: not part of the suite's table.
pub(crate) fn payload(codemode: &str) {
    let runtime = runtime();
    for (name, engine) in [
        (
            "in-process",
            Arc::new(QuickJsEngine::new()) as Arc<dyn Engine>,
        ),
        (
            "engine processes",
            Arc::new(process_engine(codemode, 2)) as Arc<dyn Engine>,
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
                    codemode,
                    PILED_ARGUMENTS,
                    &[&limits[..], &crate::measure::isolation_args(isolation)].concat(),
                )
            })
            .collect();
        println!(
            "40 × 8 MB tool calls, {isolation}: peak {:.0} MiB",
            stats(peaks).median
        );
    }
}

/// A quick look at the stored-value rows, for profiling: not part of the suite's table.
pub(crate) fn stored(codemode: &str) {
    let runtime = runtime();
    let in_process: Arc<dyn Engine> = Arc::new(QuickJsEngine::new());
    let processes: Arc<dyn Engine> = Arc::new(process_engine(codemode, 2));
    let keys = many_keys(in_process.as_ref());
    let keys_process = many_keys(processes.as_ref());
    println!("100,000 keys: in-process {keys:.1} ms, engine processes {keys_process:.1} ms");
    let held = runtime.block_on(memory_per_stored_byte(Arc::clone(&processes)));
    println!("bytes held per byte stored, engine processes: {held:.2}");
}

/// The stores' table alone: not the whole suite.
pub(crate) fn stores(codemode: &str) {
    let runtime = runtime();
    if let Some(rows) = stores::store_comparison(codemode, &runtime) {
        stores::print_stores(&rows);
    }
}

/// The table beside Monty alone: not the whole suite.
pub(crate) fn monty(codemode: &str, python: &str) {
    let runtime = runtime();
    let mut yardstick = monty::Monty::start(python).expect("pydantic-monty starts");
    let processes: Arc<dyn Engine> = Arc::new(process_engine(
        codemode,
        codemode_engine::script::DEFAULT_WARM_RUNTIMES,
    ));
    monty::print_monty(&monty::monty_comparison(
        codemode,
        &monty::Subjects::new(codemode, processes),
        &runtime,
        &mut yardstick,
    ));
}

/// `codemode mcp`'s exec back to back beside a trivial MCP tool, alternated: the last row
/// of the table beside Monty, alone.
pub(crate) fn exec(codemode: &str, isolation: &str, runs: usize) {
    let runtime = runtime();
    let (mut execs, mut trivials) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        execs.extend(runtime.block_on(mcp_calls(
            tokio::process::Command::new(codemode).configure(|command| {
                command
                    .arg("mcp")
                    .args(crate::measure::isolation_args(isolation));
            }),
            "exec",
            json!({"code": "text(\"hi\")"}),
            runs,
            Duration::ZERO,
        )));
        trivials.extend(runtime.block_on(mcp_calls(
            tokio::process::Command::new(codemode).configure(|command| {
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
}

/// The engines' table alone: not the whole suite.
pub(crate) fn engines(codemode: &str) {
    let runtime = runtime();
    print_engines(&engine_comparison(codemode, &runtime));
}

/// Traces off and on, alternately, seven rounds: `exec` back to back, and a tool round trip (a
/// cell calling the demo server's `add` 200 times, per call). "On" exports every span to a
/// collector stand-in in this process (an HTTP endpoint that answers 200), as a real collector
/// would be told. With `baseline`, that binary runs a third arm in each round (serving the same
/// demo server), and "off" is also given as a ratio to it.
pub(crate) fn tracing(codemode: &str, runs: usize, baseline: Option<&str>) {
    const CALLS: usize = 200;
    let runtime = runtime();
    let endpoint = runtime.block_on(collector_stand_in());
    let folder =
        std::env::temp_dir().join(format!("codemode-bench-tracing-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let config = folder.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"demo": {"command": codemode, "args": ["demo-mcp-server"]}}})
            .to_string(),
    )
    .unwrap();
    // The arms: the binary under test with traces off and on, and the baseline (off).
    let mut arms = vec![(codemode, false), (codemode, true)];
    if let Some(baseline) = baseline {
        arms.push((baseline, false));
    }
    let server = |binary: &str, traced: bool| {
        tokio::process::Command::new(binary).configure(|command| {
            command.arg("mcp").arg("--config").arg(&config);
            if traced {
                command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
            } else {
                command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
            }
        })
    };
    let calls = format!(
        "for (let i = 0; i < {CALLS}; i++) await tools.demo__add({{a: 1, b: 2}}); text('ok')"
    );
    let mut execs = vec![Vec::new(); arms.len()];
    let mut round_trips = vec![Vec::new(); arms.len()];
    for _ in 0..7 {
        for (arm, &(binary, traced)) in arms.iter().enumerate() {
            execs[arm].extend(runtime.block_on(mcp_calls(
                server(binary, traced),
                "exec",
                json!({"code": "text(\"hi\")"}),
                runs,
                Duration::ZERO,
            )));
            round_trips[arm].extend(
                runtime
                    .block_on(mcp_calls(
                        server(binary, traced),
                        "exec",
                        json!({"code": calls}),
                        5,
                        Duration::ZERO,
                    ))
                    .into_iter()
                    .map(|ms| ms * 1000.0 / CALLS as f64),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&folder);
    let execs: Vec<_> = execs.into_iter().map(stats).collect();
    let round_trips: Vec<_> = round_trips.into_iter().map(stats).collect();
    println!(
        "exec back to back: traces off median {:.3} ms (p99 {:.3}); on {:.3} ms (p99 {:.3}); ratio {:.2}",
        execs[0].median,
        execs[0].p99,
        execs[1].median,
        execs[1].p99,
        execs[1].median / execs[0].median
    );
    println!(
        "tool round trip (a cell's call to a downstream MCP tool): traces off median {:.1} µs; on {:.1} µs; ratio {:.2}",
        round_trips[0].median,
        round_trips[1].median,
        round_trips[1].median / round_trips[0].median
    );
    if let (Some(baseline), Some(exec), Some(round_trip)) =
        (baseline, execs.get(2), round_trips.get(2))
    {
        println!(
            "traces off beside {baseline}: exec {:.3} ms against {:.3} ms (ratio {:.2}); tool round trip {:.1} µs against {:.1} µs (ratio {:.2})",
            execs[0].median,
            exec.median,
            execs[0].median / exec.median,
            round_trips[0].median,
            round_trip.median,
            round_trips[0].median / round_trip.median
        );
    }
}

/// An OTLP/HTTP endpoint that takes every export and answers 200; its URL.
async fn collector_stand_in() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = axum::Router::new().fallback(|body: axum::body::Bytes| async move {
        drop(body);
        axum::http::StatusCode::OK
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}")
}
