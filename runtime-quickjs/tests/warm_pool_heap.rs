//! A pool warmed for a non-default heap limit serves cells of that limit warm. Alone in its binary:
//! it counts this process's threads by name.

use std::time::{Duration, Instant};

use codemode_runtime_quickjs::QuickJsEngine;

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < Duration::from_secs(30), "hung: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn warm_threads() -> usize {
    codemode_test_support::threads_named("codemode-cell-w")
}

#[test]
fn a_pool_warmed_for_a_heap_limit_serves_cells_of_that_limit_warm() {
    use codemode_engine::{
        CellLimits, CellStart, Engine, PendingMode, RuntimeEvent, event_channel,
    };
    let heap = 64 * 1024 * 1024;
    let engine = QuickJsEngine::with_warm_runtimes_for_heap(1, heap);
    wait_for("a ready warm runtime", || engine.ready_runtimes() == 1);
    assert_eq!(warm_threads(), 1);
    let start = |heap_limit_bytes: usize, call_id: &str| {
        let (events, receiver) = event_channel(None);
        let handles = engine
            .start(
                CellStart {
                    tenant: None,
                    call_id: call_id.into(),
                    // A cell that waits (on a timer) long enough to be seen running.
                    source: "await new Promise((resolve) => setTimeout(resolve, 300));".into(),
                    enabled_tools: Vec::new(),
                    unavailable_servers: Vec::new(),
                    stored_values: Default::default(),
                    limits: CellLimits::default().with_heap_limit_bytes(heap_limit_bytes),
                    pending_mode: PendingMode::Continue,
                },
                events,
            )
            .expect("the cell starts");
        (handles, receiver)
    };
    // "codemode-cell-x…" is the name a cold cell's thread gets for call id "x…".
    let (_warm_handles, mut warm_events) = start(heap, "xwarm");
    assert_eq!(warm_events.blocking_recv(), Some(RuntimeEvent::Started));
    assert_eq!(
        codemode_test_support::threads_named("codemode-cell-x"),
        0,
        "the cell ran cold"
    );
    let (_cold_handles, mut cold_events) = start(heap * 2, "xcold");
    assert_eq!(cold_events.blocking_recv(), Some(RuntimeEvent::Started));
    assert_eq!(
        codemode_test_support::threads_named("codemode-cell-x"),
        1,
        "another limit takes the cold path"
    );
}
