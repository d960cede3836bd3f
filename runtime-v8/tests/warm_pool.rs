//! The pool of pre-warmed runtimes releases its threads (and their isolates) when the engine goes.
//! Alone in its binary: it counts this process's threads by name.

use std::time::{Duration, Instant};

use codemode_runtime_v8::V8Engine;

/// Threads of this process whose name starts with the warm threads' name (Linux truncates thread
/// names to 15 bytes).
fn warm_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("this test reads Linux's /proc")
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with("codemode-cell-w"))
        })
        .count()
}

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < Duration::from_secs(30), "hung: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn idle_warm_runtimes_end_when_their_engine_is_dropped() {
    assert_eq!(warm_threads(), 0);
    let engine = V8Engine::with_warm_runtimes(3);
    wait_for("three warm threads", || warm_threads() == 3);
    let clone = engine.clone();
    drop(engine);
    assert_eq!(warm_threads(), 3, "a clone keeps the pool");
    drop(clone);
    wait_for("the warm threads to end", || warm_threads() == 0);
}
