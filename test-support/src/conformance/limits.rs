//! Resource limits on the engine under test: allocation bombs and unbounded recursion end the cell with a clear
//! error, keep its earlier output, and leave the process (and the next cell) unharmed.

use std::time::Duration;

use super::harness::{Options, run_with, texts_of};
use super::subject::subject;
use codemode_engine::{CellLimits, CellStart, EngineError, PendingMode, event_channel};

const SMALL_HEAP: usize = 32 * 1024 * 1024;

fn small_heap() -> Options {
    Options {
        heap_limit_bytes: SMALL_HEAP,
        ..Options::default()
    }
}

fn assert_heap_limit_error(source: &str) {
    let finished = run_with(source, small_heap());
    let error = finished
        .error()
        .unwrap_or_else(|| panic!("the bomb did not fail: {finished:?}"));
    assert!(error.starts_with("heap limit exceeded"), "{error}");
    assert!(error.contains("32 MiB"), "{error}");
    assert_eq!(
        finished.texts(),
        ["before the bomb"],
        "output before the bomb is kept"
    );
    // The process lives on and the next cell runs normally.
    assert_eq!(
        texts_of(r#"text([1, 2, 3].map((n) => n * 2));"#),
        ["[2,4,6]"]
    );
}

/// A conformance test.
pub fn an_array_allocation_bomb_ends_the_cell_with_heap_limit_exceeded() {
    assert_heap_limit_error(
        r#"text("before the bomb"); const hoard = []; while (true) hoard.push(new Array(100_000).fill(1.5));"#,
    );
}

/// A conformance test.
pub fn an_object_allocation_bomb_ends_the_cell_with_heap_limit_exceeded() {
    assert_heap_limit_error(
        r#"text("before the bomb"); const hoard = new Map(); for (let i = 0; ; i++) hoard.set(i, { i, s: `v${i}` });"#,
    );
}

/// A conformance test.
pub fn a_string_building_bomb_ends_the_cell_with_heap_limit_exceeded() {
    assert_heap_limit_error(
        r#"text("before the bomb"); const parts = []; for (let i = 0; ; i++) parts.push("x".repeat(1000) + i);"#,
    );
}

/// A conformance test.
pub fn array_buffers_count_against_the_heap_limit() {
    // One buffer past the limit ends the cell with the heap-limit error, caught or not, as any
    // other allocation past it does: a cell that catches it is stopped at its next interrupt
    // check (V8 at once; QuickJS within a few thousand operations) and cannot retry for long.
    let finished = run_with(
        r#"
        text("before");
        try { new ArrayBuffer(64 * 1024 * 1024); text("allocated"); } catch (error) { }
        for (let i = 0; ; i++) { try { new ArrayBuffer(64 * 1024 * 1024) } catch (error) { } }
        "#,
        small_heap(),
    );
    let error = finished.error().unwrap_or_default();
    assert!(error.starts_with("heap limit exceeded"), "{error}");
    assert_eq!(finished.texts(), ["before"]);
    // Buffers kept one by one: the limit stops them within its 32 MiB.
    let finished = run_with(
        r#"const kept = []; for (;;) { kept.push(new Uint8Array(1024 * 1024)); text(String(kept.length)); }"#,
        small_heap(),
    );
    let error = finished.error().unwrap_or_default();
    assert!(error.starts_with("heap limit exceeded"), "{error}");
    let mebibytes: usize = finished
        .texts()
        .last()
        .map_or(0, |last| last.parse().unwrap());
    assert!(
        mebibytes <= 32,
        "{mebibytes} MiB of buffers escaped a 32 MiB limit"
    );
}

/// A conformance test.
pub fn unbounded_recursion_ends_the_cell_with_a_range_error() {
    let finished = super::harness::run(
        r#"text("before"); function down(n) { return down(n + 1) + 1; } down(0);"#,
    );
    let error = finished.error().expect("the cell fails");
    assert!(
        error.starts_with("RangeError: Maximum call stack size exceeded"),
        "{error}"
    );
    assert!(error.contains("cell.js:1:"), "{error}");
    assert_eq!(finished.texts(), ["before"]);
    assert_eq!(
        texts_of(
            r#"function depth(n) { return n === 0 ? 0 : 1 + depth(n - 1); } text(depth(1000));"#
        ),
        ["1000"]
    );
}

/// A conformance test.
pub fn a_heap_limit_below_the_minimum_is_refused_before_a_thread_starts() {
    let (events, _receiver) = event_channel(None);
    let error = subject()
        .engine()
        .start(
            CellStart {
                tenant: None,
                call_id: "call-1".into(),
                source: "text(1)".into(),
                enabled_tools: Vec::new(),
                unavailable_servers: Vec::new(),
                stored_values: Default::default(),
                limits: CellLimits::default().with_heap_limit_bytes(1024),
                pending_mode: PendingMode::Continue,
            },
            events,
        )
        .unwrap_err();
    assert!(matches!(error, EngineError::InvalidLimit(_)));
    assert_eq!(
        error.to_string(),
        "invalid cell limit: a heap limit of 1024 bytes is below the minimum of 8388608 bytes (8 MiB)"
    );
}

/// A conformance test.
pub fn a_spin_loop_is_ended_by_the_cpu_time_limit_with_an_error_naming_it() {
    let finished = run_with(
        r#"text("before the spin"); while (true) {}"#,
        Options {
            cpu_time_limit: Some(Duration::from_millis(300)),
            ..Options::default()
        },
    );
    let error = finished
        .error()
        .unwrap_or_else(|| panic!("the spin loop was not stopped: {finished:?}"));
    assert!(error.starts_with("cpu time limit exceeded"), "{error}");
    assert!(
        error.contains("0.3 s of CPU time (its cpu_time_limit)"),
        "{error}"
    );
    assert_eq!(finished.texts(), ["before the spin"]);
}

/// A conformance test.
pub fn waiting_uses_no_cpu_time_budget() {
    // A cell that waits (here on timers) far longer than its CPU budget is not stopped.
    let finished = run_with(
        r#"for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 100)); text("done");"#,
        Options {
            cpu_time_limit: Some(Duration::from_millis(200)),
            ..Options::default()
        },
    );
    assert_eq!(finished.error(), None);
    assert_eq!(finished.texts(), ["done"]);
}

/// A conformance test.
pub fn formatting_an_error_runs_no_cell_code_so_a_spinning_getter_cannot_mask_it() {
    // Reading `stack` or calling `toString` of the thrown value would spin until the CPU limit
    // killed the cell, mid-formatting; the engine renders the value without running either.
    let finished = run_with(
        r#"text("before");
           throw { get stack() { while (true) {} }, toString() { while (true) {} }, message: "m" };"#,
        Options {
            cpu_time_limit: Some(Duration::from_millis(300)),
            ..Options::default()
        },
    );
    let error = finished.error().unwrap_or_default();
    assert!(error.starts_with("[object Object]"), "{error}");
    assert!(!error.contains("could not be converted"), "{error}");
    assert_eq!(finished.texts(), ["before"]);
}

/// A conformance test.
pub fn a_cpu_limit_that_lands_while_a_rejection_is_pending_reports_the_limit() {
    // The spin happens in a microtask after the module's promise has a rejection queued: the
    // limit, not the rejection, is why the cell ended.
    let finished = run_with(
        r#"Promise.resolve().then(() => { while (true) {} });
           await Promise.reject(new Error("rejected"));"#,
        Options {
            cpu_time_limit: Some(Duration::from_millis(300)),
            ..Options::default()
        },
    );
    let error = finished.error().unwrap_or_default();
    assert!(error.starts_with("cpu time limit exceeded"), "{error}");
}

/// A conformance test.
pub fn a_typed_array_bomb_ends_the_cell_at_the_heap_limit() {
    // The buffer past the limit ends the cell with the heap-limit error, on both engines.
    let finished = run_with(
        r#"text("before the bomb"); const kept = []; for (;;) kept.push(new Float64Array(1 << 17));"#,
        small_heap(),
    );
    let error = finished.error().unwrap_or_default();
    assert!(error.starts_with("heap limit exceeded"), "{error}");
    assert_eq!(finished.texts(), ["before the bomb"]);
}

/// A conformance test.
pub fn large_strings_end_the_cell_with_heap_limit_exceeded() {
    assert_heap_limit_error(
        r#"text("before the bomb"); const kept = []; for (let i = 0; ; i++) kept.push("x".repeat(1 << 20) + i);"#,
    );
}

/// A conformance test.
pub fn running_out_of_heap_while_a_tool_call_is_unanswered_ends_the_cell() {
    // The tool call is never answered: the heap, not the call, ends the cell.
    let mut cell = super::harness::start_with(
        r#"text("before the bomb"); const pending = tools.echo(1);
           const hoard = []; while (true) hoard.push(new Array(100_000).fill(1.5));"#,
        small_heap(),
    );
    let mut texts = Vec::new();
    let mut error = None;
    while let Some(event) = cell.next() {
        match event {
            codemode_engine::RuntimeEvent::ContentItem(codemode_protocol::OutputItem::Text {
                text,
            }) => texts.push(text),
            codemode_engine::RuntimeEvent::Result { error_text, .. } => error = error_text,
            _ => {}
        }
    }
    let error = error.expect("the cell fails");
    assert!(error.starts_with("heap limit exceeded"), "{error}");
    assert_eq!(texts, ["before the bomb"]);
    assert_eq!(texts_of(r#"text("next");"#), ["next"]);
}

/// A conformance test.
pub fn a_promise_job_that_throws_rejects_only_its_own_promise() {
    assert_eq!(
        texts_of(
            r#"Promise.resolve().then(() => { throw new Error("in a job"); });
               await new Promise((resolve) => setTimeout(resolve, 10));
               text("still running");"#
        ),
        ["still running"]
    );
}
