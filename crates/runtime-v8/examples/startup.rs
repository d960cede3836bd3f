//! A quick measurement of how long a cell takes from `Engine::start` to its result, for
//! `text("hi")`: prints the median and the 90th percentile over a number of runs (default 200).
//! A quick look only; the benchmarks proper live behind `cargo xtask bench`.
//!
//! ```text
//! cargo run --release -p codemode-runtime-v8 --example startup -- 200
//! ```

use std::time::{Duration, Instant};

use codemode_engine::{CellLimits, CellStart, Engine, PendingMode, RuntimeEvent, event_channel};
use codemode_runtime_v8::{V8Engine, v8_version};

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(200);
    let engine = V8Engine::new();
    // The first cell pays for V8's process-wide initialisation; measure after it.
    run_once(&engine);
    let mut durations: Vec<Duration> = (0..runs).map(|_| run_once(&engine)).collect();
    durations.sort();
    let percentile = |p: usize| durations[(durations.len() * p / 100).min(durations.len() - 1)];
    println!(
        "V8 {}: start to result of text(\"hi\") over {runs} runs: median {:.2} ms, p90 {:.2} ms",
        v8_version(),
        percentile(50).as_secs_f64() * 1e3,
        percentile(90).as_secs_f64() * 1e3
    );
}

fn run_once(engine: &V8Engine) -> Duration {
    let started = Instant::now();
    let (events, mut receiver) = event_channel(None);
    let _handles = engine
        .start(
            CellStart {
                call_id: "startup".into(),
                source: r#"text("hi")"#.into(),
                enabled_tools: Vec::new(),
                stored_values: Default::default(),
                limits: CellLimits::default(),
                pending_mode: PendingMode::Continue,
            },
            events,
        )
        .expect("the cell starts");
    while let Some(event) = receiver.blocking_recv() {
        if let RuntimeEvent::Result { error_text, .. } = event {
            assert_eq!(error_text, None);
            return started.elapsed();
        }
    }
    panic!("the cell ended without a result");
}
