//! The engines' table: V8 and QuickJS side by side on the same rows in engine processes, and
//! QuickJS in-process (V8 runs only in engine processes).

use std::sync::Arc;
use std::time::Duration;

use codemode_engine::Engine;
use codemode_runtime_quickjs::QuickJsEngine;
use serde_json::{Value, json};

use crate::measure::{
    Stats, heavy, process_engine_for, spaced, stats, termination, tool_round_trip,
};
use crate::memory::parked_cells;

/// One row of the engines' table.
pub(crate) struct EngineRow {
    pub(crate) name: String,
    pub(crate) unit: &'static str,
    /// QuickJS in-process, V8 engine processes, QuickJS engine processes.
    pub(crate) figures: [Stats; 3],
}

/// Prints the engines' table; returns its rows as JSON.
pub(crate) fn print_engines(rows: &[EngineRow]) -> Vec<Value> {
    println!(
        "\n| figure | QuickJS in-process | V8 engine processes | QuickJS engine processes | QuickJS / V8 |"
    );
    println!("|---|---|---|---|---|");
    rows.iter()
        .map(|row| {
            let [quickjs, v8_process, quickjs_process] = row.figures;
            println!(
                "| {} | {:.3} {unit} | {:.3} {unit} | {:.3} {unit} | {:.2} |",
                row.name,
                quickjs.median,
                v8_process.median,
                quickjs_process.median,
                quickjs_process.median / v8_process.median,
                unit = row.unit
            );
            json!({
                "figure": row.name, "unit": row.unit,
                "quickjs_in_process": {"median": quickjs.median, "p99": quickjs.p99},
                "v8_engine_processes": {"median": v8_process.median, "p99": v8_process.p99},
                "quickjs_engine_processes": {"median": quickjs_process.median, "p99": quickjs_process.p99},
            })
        })
        .collect()
}

/// The engines side by side on the same rows; printed as a second table.
pub(crate) fn engine_comparison(
    codemode: &str,
    runtime: &tokio::runtime::Runtime,
) -> Vec<EngineRow> {
    let runs = 200;
    let mut rows = Vec::new();
    let single = |value: f64| Stats {
        median: value,
        p99: value,
    };
    let cold: [Box<dyn Engine>; 3] = [
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
    let warm: [Arc<dyn Engine>; 3] = [
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
