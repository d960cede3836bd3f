//! QuickJS's known weak spots, each tried by a cell: built-ins that run long without an interrupt
//! check, and memory that might escape the limit. The conformance suite covers the rest (heap and
//! string bombs, typed arrays, deep recursion, a throwing promise job, running out of heap during
//! a tool call) on both engines.

use std::sync::Arc;
use std::time::Duration;

use codemode_engine::Engine;
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_test_support::conformance::harness::{Options, run_with};

fn quickjs() -> Options {
    Options {
        cpu_time_limit: Some(Duration::from_secs(2)),
        ..Options::for_engine(Arc::new(QuickJsEngine::new()) as Arc<dyn Engine>)
    }
}

#[test]
fn filling_a_huge_array_ends_at_a_limit_and_the_engine_lives_on() {
    // `fill` runs in C without an interrupt check: the heap limit stops it.
    let finished = run_with(
        r#"text("before"); new Array(1e8).fill(0); text("after");"#,
        quickjs(),
    );
    let error = finished.error().unwrap_or_default();
    assert!(
        error.starts_with("heap limit exceeded") || error.starts_with("cpu time limit exceeded"),
        "{error}"
    );
    assert_eq!(finished.texts(), ["before"]);
    let next = run_with(r#"text("next");"#, quickjs());
    assert_eq!(next.texts(), ["next"]);
}

#[test]
fn a_spin_loop_keeps_the_output_before_the_limit() {
    let finished = run_with(r#"text("before"); for (;;) {}"#, quickjs());
    assert!(
        finished
            .error()
            .unwrap_or_default()
            .starts_with("cpu time limit exceeded"),
        "{finished:?}"
    );
    assert_eq!(finished.texts(), ["before"]);
}
