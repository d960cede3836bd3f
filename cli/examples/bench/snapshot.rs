//! A fresh global scope on V8 13.6, made from the engine process's startup snapshot and made by
//! running the bootstrap (`CODEMODE_V8_SNAPSHOT=off`), side by side: one tenant's cells of
//! `text("hi")` back to back, each on a lane that keeps its isolate and so makes one fresh scope a
//! cell. Both engines are measured in alternating blocks; the figures are the engine processes'
//! CPU time per cell (read from `/proc`: the scope is made between cells, off the cell's own
//! path) and each cell's start to result.

use std::time::Instant;

use codemode_engine::{Engine, RuntimeEvent, event_channel};
use codemode_engine_process::ProcessEngine;
use serde_json::{Value, json};

use crate::measure::{Stats, cell, ms, process_config_in_node, stats};

/// The two ways of making a scope, measured side by side.
pub(crate) struct FreshScopes {
    /// CPU time of the engine processes per cell, in µs: from the snapshot, then without.
    pub(crate) cpu_us: [Stats; 2],
    /// Start to result per cell, in ms: from the snapshot, then without.
    pub(crate) latency_ms: [Stats; 2],
}

/// How many cells a block runs on one engine before the other's turn.
const BLOCK: usize = 1000;
/// How many blocks each engine runs.
const BLOCKS: usize = 5;

/// Measures both ways on engine processes of the engine library `library`.
pub(crate) fn fresh_scopes(codemode: &str, library: &str) -> FreshScopes {
    let engines = [true, false].map(|snapshot| {
        let mut config = process_config_in_node(
            codemode,
            library,
            codemode_engine::script::DEFAULT_WARM_RUNTIMES,
        )
        // One process serves every cell of the run, so that its CPU time is all counted.
        .with_cells_per_process_lifetime(100 * BLOCK * BLOCKS)
        .with_spare_processes(0);
        if !snapshot {
            config = config.with_env(codemode_engine::script::SNAPSHOT_VARIABLE, "off");
        }
        let engine = ProcessEngine::new(config);
        engine.check().expect("engine processes on V8 13.6 start");
        engine
    });
    let mut cpu: [Vec<f64>; 2] = Default::default();
    let mut latency: [Vec<f64>; 2] = Default::default();
    for engine in &engines {
        // The first cells start the process and its lanes; measure after them.
        block(engine, BLOCK / 4, &mut Vec::new());
    }
    for _ in 0..BLOCKS {
        for (index, engine) in engines.iter().enumerate() {
            let before = cpu_seconds(engine);
            block(engine, BLOCK, &mut latency[index]);
            let after = cpu_seconds(engine);
            cpu[index].push((after - before) * 1e6 / BLOCK as f64);
        }
    }
    let [cpu_with, cpu_without] = cpu;
    let [latency_with, latency_without] = latency;
    FreshScopes {
        cpu_us: [stats(cpu_with), stats(cpu_without)],
        latency_ms: [stats(latency_with), stats(latency_without)],
    }
}

/// Runs `cells` cells of one tenant back to back, adding each one's start to result to
/// `latencies`.
fn block(engine: &ProcessEngine, cells: usize, latencies: &mut Vec<f64>) {
    for _ in 0..cells {
        let mut start = cell(r#"text("hi")"#);
        start.tenant = Some("bench".into());
        let started = Instant::now();
        let (events, mut receiver) = event_channel(None);
        let _handles = engine.start(start, events).expect("starts");
        while let Some(event) = receiver.blocking_recv() {
            if let RuntimeEvent::Result { .. } = event {
                break;
            }
        }
        latencies.push(ms(started.elapsed()));
    }
}

/// The CPU time the engine's processes used so far, in seconds (user and system, every thread).
fn cpu_seconds(engine: &ProcessEngine) -> f64 {
    // Linux reports these fields in clock ticks (USER_HZ), 1/100 s on every architecture
    // codemode runs on.
    const TICKS_PER_SECOND: f64 = 100.0;
    engine
        .process_ids()
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // The fields after the command name, which is in parentheses and may hold spaces.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let user: f64 = fields.get(11)?.parse().ok()?;
            let system: f64 = fields.get(12)?.parse().ok()?;
            Some((user + system) / TICKS_PER_SECOND)
        })
        .sum()
}

/// Prints the comparison; returns it as JSON.
pub(crate) fn print_fresh_scopes(scopes: &FreshScopes) -> Value {
    let [cpu_with, cpu_without] = scopes.cpu_us;
    let [latency_with, latency_without] = scopes.latency_ms;
    println!(
        "\nA fresh global scope on V8 13.6 (engine processes, one tenant's cells of text(\"hi\") back to back, alternating blocks of {BLOCK}):"
    );
    println!(
        "| figure | from the startup snapshot | bootstrap run in each scope | snapshot / bootstrap |"
    );
    println!("|---|---|---|---|");
    println!(
        "| engine-process CPU per cell | {:.0} µs | {:.0} µs | {:.2} |",
        cpu_with.median,
        cpu_without.median,
        cpu_with.median / cpu_without.median
    );
    println!(
        "| start to result | {:.3} ms (p99 {:.3}) | {:.3} ms (p99 {:.3}) | {:.2} |",
        latency_with.median,
        latency_with.p99,
        latency_without.median,
        latency_without.p99,
        latency_with.median / latency_without.median
    );
    json!({
        "cpu_per_cell_us": {"snapshot": cpu_with.median, "bootstrap": cpu_without.median},
        "start_to_result_ms": {
            "snapshot": {"median": latency_with.median, "p99": latency_with.p99},
            "bootstrap": {"median": latency_without.median, "p99": latency_without.p99},
        },
    })
}
