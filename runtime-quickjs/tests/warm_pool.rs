//! The pool of pre-warmed runtimes refills itself after each cell it serves, off the cell's thread,
//! and releases its threads (and their runtimes) when the engine goes. Alone in its binary: it
//! counts this process's threads by name.

use std::time::{Duration, Instant};

use codemode_engine::{CellLimits, CellStart, Engine, PendingMode, RuntimeEvent, event_channel};
use codemode_runtime_quickjs::QuickJsEngine;

/// The pool's warm threads ("codemode-cell-warm").
fn warm_threads() -> usize {
    codemode_test_support::threads_named("codemode-cell-w")
}

/// The pool's refiller ("codemode-cell-refill").
fn refillers() -> usize {
    codemode_test_support::threads_named("codemode-cell-r")
}

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < Duration::from_secs(30), "hung: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `text('hi')` to its result.
fn run_a_cell(engine: &QuickJsEngine) {
    let (events, mut receiver) = event_channel(None);
    let _handles = engine
        .start(
            CellStart {
                tenant: None,
                call_id: "warm".into(),
                source: "text('hi')".into(),
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
        if matches!(event, RuntimeEvent::Result { .. }) {
            return;
        }
    }
    panic!("the cell ended without a result");
}

#[test]
fn the_pool_refills_after_each_cell_and_its_threads_end_when_the_engine_is_dropped() {
    assert_eq!(warm_threads(), 0);
    let engine = QuickJsEngine::with_warm_runtimes(3);
    wait_for("three ready warm runtimes", || engine.ready_runtimes() == 3);
    assert_eq!(refillers(), 1, "one refiller per pool");
    for _ in 0..4 {
        run_a_cell(&engine);
    }
    wait_for("the pool to refill", || engine.ready_runtimes() == 3);
    wait_for("the used warm threads to end", || warm_threads() == 3);
    let clone = engine.clone();
    drop(engine);
    assert_eq!(warm_threads(), 3, "a clone keeps the pool");
    drop(clone);
    wait_for("the warm threads to end", || warm_threads() == 0);
    wait_for("the refiller to end", || refillers() == 0);
}
