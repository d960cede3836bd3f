//! A quick measurement of how long a cell takes from `Engine::start` to its result, for
//! `text("hi")`, side by side: with runtimes created when the cell starts (cold) and with
//! pre-warmed runtimes (warm, the default). Prints medians and 90th percentiles over a number of
//! runs (default 200), and the ratio of the medians. Cold cells start 20 ms apart; warm ones 20,
//! 5, 2 and 0 ms apart (back to back), so that a pool that cannot keep up shows.
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
    println!(
        "V8 {}: start to result of text(\"hi\"), {runs} runs each",
        v8_version()
    );
    let cold = measure(
        "cold, 20 ms apart",
        &V8Engine::with_warm_runtimes(0),
        runs,
        20,
    );
    let engine = V8Engine::new();
    for spacing_ms in [20, 5, 2, 0] {
        let warm = measure(
            &format!("warm, {spacing_ms} ms apart"),
            &engine,
            runs,
            spacing_ms,
        );
        println!(
            "  warm / cold median: {:.2}",
            warm.as_secs_f64() / cold.as_secs_f64()
        );
    }
}

/// Measures `runs` cells on `engine` started `spacing_ms` apart, prints the median and p90, and
/// returns the median.
fn measure(label: &str, engine: &V8Engine, runs: usize, spacing_ms: u64) -> Duration {
    // The first cell pays for V8's process-wide initialisation; measure after it.
    run_once(engine);
    std::thread::sleep(Duration::from_millis(50));
    let mut durations: Vec<Duration> = (0..runs)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(spacing_ms));
            run_once(engine)
        })
        .collect();
    durations.sort();
    let percentile = |p: usize| durations[(durations.len() * p / 100).min(durations.len() - 1)];
    println!(
        "{label}: median {:.2} ms, p90 {:.2} ms",
        percentile(50).as_secs_f64() * 1e3,
        percentile(90).as_secs_f64() * 1e3
    );
    percentile(50)
}

fn run_once(engine: &V8Engine) -> Duration {
    let started = Instant::now();
    let (events, mut receiver) = event_channel(None);
    let _handles = engine
        .start(
            CellStart {
                tenant: None,
                call_id: "startup".into(),
                source: r#"text("hi")"#.into(),
                enabled_tools: Vec::new(),
                unavailable_servers: Vec::new(),
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
