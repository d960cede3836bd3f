//! The whole suite: the main table (each figure beside its yardstick, in-process on QuickJS, the
//! only engine a host's own process runs, and in V8 engine processes, the binary's default), then the engines', Monty's and the stores' tables, one engine process's cost, and
//! the JSON file of every figure.

use std::sync::Arc;
use std::time::Duration;

use codemode_engine::Engine;
use codemode_runtime_quickjs::QuickJsEngine;
use rmcp::transport::ConfigureCommandExt;
use serde_json::json;

use crate::engines::{engine_comparison, print_engines};
use crate::measure::{
    Stats, concurrent, large_round_trip, many_keys, many_keys_loop_only, mcp_calls, process_engine,
    spaced, stats, termination, tool_round_trip,
};
use crate::memory::{
    PILED_ARGUMENTS, memory_per_stored_byte, parked_cells, peak_run_memory_mib, process_cost,
};
use crate::yardsticks::{node_vm, oneshot_round_trip, socket_ping_pong};
use crate::{monty, stores};

/// One row of the table.
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) figure: Stats,
    pub(crate) yardstick_name: String,
    pub(crate) yardstick: Option<Stats>,
    pub(crate) unit: &'static str,
    /// The same figure with engine processes.
    pub(crate) process: Option<Stats>,
}

impl Row {
    fn new(
        name: &str,
        figure: Stats,
        yardstick_name: &str,
        yardstick: Option<Stats>,
        unit: &'static str,
        process: Option<Stats>,
    ) -> Self {
        Row {
            name: name.to_owned(),
            figure,
            yardstick_name: yardstick_name.to_owned(),
            yardstick,
            unit,
            process,
        }
    }
}

/// What the suite's steps share: the binary, the engines measured side by side, a runtime.
struct Bench<'a> {
    codemode: &'a str,
    /// The in-process engine (QuickJS).
    engine: Arc<dyn Engine>,
    /// Engine processes, warmed as the binary warms them.
    process: Arc<dyn Engine>,
    runtime: tokio::runtime::Runtime,
}

/// How many runs a start row takes.
const RUNS: usize = 200;

/// Runs the suite against the release binary `codemode`, beside pydantic-monty when
/// `monty_python` names its Python, and writes the figures to `json_path` if given.
pub(crate) fn run(codemode: &str, json_path: Option<String>, monty_python: Option<&str>) {
    let bench = Bench {
        codemode,
        engine: Arc::new(QuickJsEngine::new()),
        process: Arc::new(process_engine(
            codemode,
            codemode_engine::script::DEFAULT_WARM_RUNTIMES,
        )),
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap(),
    };
    let mut rows = start_rows(&bench);
    rows.extend(tool_rows(&bench));
    rows.extend(memory_rows(&bench));
    rows.extend(mcp_rows(&bench));
    let json_rows = print_rows(&rows);
    let json_engines = print_engines(&engine_comparison(codemode, &bench.runtime));
    let json_monty = match monty_python.and_then(monty::Monty::start) {
        Some(mut yardstick) => monty::print_monty(&monty::monty_comparison(
            codemode,
            &monty::Subjects::new(codemode, Arc::clone(&bench.process)),
            &bench.runtime,
            &mut yardstick,
        )),
        None => {
            println!(
                "\nNo table beside Monty: pydantic-monty is not installed (cargo xtask bench installs it)."
            );
            Vec::new()
        }
    };
    let json_fresh_scopes = crate::snapshot::print_fresh_scopes(&crate::snapshot::fresh_scopes(
        codemode,
        &crate::measure::v8_library(codemode),
    ));
    let json_stores = stores::store_comparison(codemode, &bench.runtime)
        .map(|rows| stores::print_stores(&rows))
        .unwrap_or_default();
    let (spawn, idle_mib) = process_cost(codemode, 20);
    let ping_pong = stats((0..5).map(|_| socket_ping_pong(20_000)).collect());
    println!(
        "\nOne engine process: spawn to ready {:.1} ms (p99 {:.1} ms); {:.1} MiB proportional memory when idle with its warm runtimes.",
        spawn.median, spawn.p99, idle_mib
    );
    println!(
        "Yardstick for the boundary: a one-byte ping-pong over a Unix socket between two blocking threads takes {:.1} µs.",
        ping_pong.median
    );
    println!();
    crate::first_list::run(codemode);
    println!();
    crate::load::run(codemode, "process", crate::load::Load::DEFAULT);
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
                "fresh_scopes": json_fresh_scopes,
                "engine_process": {"spawn_ms": {"median": spawn.median, "p99": spawn.p99}, "idle_pss_mib": idle_mib},
                "socket_ping_pong_us": ping_pong.median,
            }))
            .unwrap(),
        )
        .unwrap();
        println!("\nwritten to {path}");
    }
}

/// Starts: cold, warm at several spacings, sustained, concurrent.
fn start_rows(bench: &Bench<'_>) -> Vec<Row> {
    let codemode = bench.codemode;
    let runs = RUNS;
    let mut rows = Vec::new();
    let cold = spaced(
        &QuickJsEngine::with_warm_runtimes(0),
        runs,
        Duration::from_millis(20),
    );
    let cold_process = spaced(
        &process_engine(codemode, 0),
        runs,
        Duration::from_millis(20),
    );
    rows.push(Row::new(
        "cold start (no pre-warming)",
        stats(cold),
        "",
        None,
        "ms",
        Some(stats(cold_process)),
    ));

    let (engine, process) = (&bench.engine, &bench.process);
    let warm = stats(spaced(engine.as_ref(), runs, Duration::from_millis(20)));
    let warm_process = stats(spaced(process.as_ref(), runs, Duration::from_millis(20)));
    rows.push(Row::new(
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
        rows.push(Row::new(
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
    rows.push(Row::new(
        "sustained: 1,000 back to back",
        sustained,
        "warm, 20 ms apart",
        Some(warm),
        "ms",
        Some(sustained_process),
    ));
    for count in [8usize, 32] {
        let figure = stats(concurrent(engine, count, 10));
        let in_processes = stats(concurrent(process, count, 10));
        rows.push(Row::new(
            &format!("{count} concurrent, each"),
            figure,
            "warm, 20 ms apart",
            Some(warm),
            "ms",
            Some(in_processes),
        ));
    }
    rows
}

/// Tool round trips, beside a thread-to-tokio oneshot.
fn tool_rows(bench: &Bench<'_>) -> Vec<Row> {
    let (engine, process, runtime) = (&bench.engine, &bench.process, &bench.runtime);
    let mut rows = Vec::new();
    let round_trips: Vec<f64> = (0..5)
        .map(|_| runtime.block_on(tool_round_trip(Arc::clone(engine), 2000)))
        .collect();
    let round_trips_process: Vec<f64> = (0..5)
        .map(|_| runtime.block_on(tool_round_trip(Arc::clone(process), 2000)))
        .collect();
    let oneshots: Vec<f64> = (0..5)
        .map(|_| oneshot_round_trip(20_000, runtime))
        .collect();
    rows.push(Row::new(
        "awaited tool round trip",
        stats(round_trips),
        "tokio oneshot thread<->task",
        Some(stats(oneshots)),
        "µs",
        Some(stats(round_trips_process)),
    ));
    rows.push(Row::new(
        "terminate() to Terminated",
        stats(termination(engine.as_ref(), 100)),
        "",
        None,
        "ms",
        Some(stats(termination(process.as_ref(), 100))),
    ));
    rows
}

/// Memory: parked cells, many stored keys, bytes held per byte stored, large payloads, peaks.
fn memory_rows(bench: &Bench<'_>) -> Vec<Row> {
    let (codemode, engine, process, runtime) = (
        bench.codemode,
        &bench.engine,
        &bench.process,
        &bench.runtime,
    );
    let mut rows = Vec::new();
    let parked = parked_cells(&QuickJsEngine::with_warm_runtimes(0), None, 1000);
    let parked_processes = process_engine(codemode, 0);
    let parked_process = parked_cells(&parked_processes, Some(&parked_processes), 1000);
    let single = |value: f64| Stats {
        median: value,
        p99: value,
    };
    rows.push(Row::new(
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
    rows.push(Row::new(
        "store() of 100,000 keys in one cell",
        stats(keys),
        "the same loop without store",
        Some(stats(loop_only)),
        "ms",
        Some(stats(keys_process)),
    ));
    let held = runtime.block_on(memory_per_stored_byte(Arc::clone(engine)));
    let held_process = runtime.block_on(memory_per_stored_byte(Arc::clone(process)));
    rows.push(Row::new(
        "memory held per byte stored (3 sessions × 16 MiB)",
        single(held),
        "",
        None,
        "B/B",
        Some(single(held_process)),
    ));

    let (trips, owns) = runtime.block_on(large_round_trip(Arc::clone(engine), 15));
    let (trips_process, _) = runtime.block_on(large_round_trip(Arc::clone(process), 15));
    rows.push(Row::new(
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
                        codemode,
                        source,
                        &[&limits[..], &crate::measure::isolation_args(isolation)].concat(),
                    )
                })
                .collect(),
        )
    };
    rows.push(Row::new(
        "peak memory, 40 × 8 MB tool calls (codemode run)",
        peak("in-process", PILED_ARGUMENTS),
        "codemode run of text(\"hi\")",
        Some(peak("in-process", "text(\"hi\")")),
        "MiB",
        Some(peak("process", PILED_ARGUMENTS)),
    ));
    rows
}

/// `exec` over MCP, beside a trivial MCP tool from the same client.
fn mcp_rows(bench: &Bench<'_>) -> Vec<Row> {
    let (codemode, runtime) = (bench.codemode, &bench.runtime);
    let mut rows = Vec::new();
    for (label, spacing) in [("back to back", 0u64), ("50 ms apart", 50)] {
        let spacing = Duration::from_millis(spacing);
        let exec_with = |engine: &'static str| {
            runtime.block_on(mcp_calls(
                tokio::process::Command::new(codemode).configure(|command| {
                    command
                        .arg("mcp")
                        .args(crate::measure::isolation_args(engine));
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
            tokio::process::Command::new(codemode).configure(|command| {
                command.arg("demo-mcp-server");
            }),
            "add",
            json!({"a": 1, "b": 2}),
            100,
            spacing,
        ));
        rows.push(Row::new(
            &format!("MCP exec over stdio, {label}"),
            stats(exec),
            "trivial MCP tool, same client",
            Some(stats(trivial)),
            "ms",
            Some(stats(exec_process)),
        ));
    }
    rows
}

/// Prints the main table; its rows as JSON.
fn print_rows(rows: &[Row]) -> Vec<serde_json::Value> {
    println!(
        "| figure | QuickJS in-process median | p99 | yardstick | its median | ratio | V8 engine processes median | p99 | ratio to in-process |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut json_rows = Vec::new();
    for row in rows {
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
    json_rows
}
