//! The runtime thread's lifecycle on the engine under test: tool calls, termination from another thread, the
//! pending frontier and pausing, panics, and many cells at once.

use std::time::Duration;

use super::harness::{Options, run, start, start_with, texts_of};
use super::subject::subject;
use codemode_engine::{PendingMode, RuntimeCommand, RuntimeControl, RuntimeEvent};
use codemode_protocol::{OutputItem, ToolKind, ToolName};
use serde_json::json;

fn is_tool_call(event: &RuntimeEvent) -> bool {
    matches!(event, RuntimeEvent::ToolCall { .. })
}

/// A conformance test.
pub fn a_tool_call_is_answered_with_its_json_result() {
    let finished = run(r#"
        const echoed = await tools.echo({ q: "x", n: [1, 2] });
        text(echoed.n[1]);
        text(await tools.web__search());
        "#);
    assert_eq!(finished.error(), None);
    assert_eq!(
        finished.texts(),
        ["2", r#"{"tool":"web__search","input":null}"#]
    );
    let calls: Vec<_> = finished
        .events
        .iter()
        .filter(|event| is_tool_call(event))
        .collect();
    assert_eq!(
        calls,
        [
            &RuntimeEvent::ToolCall {
                id: "tool-1".into(),
                name: ToolName::plain("echo"),
                kind: ToolKind::Function,
                input: Some(json!({"q": "x", "n": [1, 2]}).into()),
            },
            &RuntimeEvent::ToolCall {
                id: "tool-2".into(),
                name: ToolName::namespaced("web", "search"),
                kind: ToolKind::Function,
                input: None,
            },
        ]
    );
}

/// A conformance test.
pub fn a_failed_tool_rejects_its_promise_with_the_error_text() {
    assert_eq!(
        texts_of(
            r#"try { await tools.fail({}); } catch (error) { text(`${error.name}: ${error.message}`); }"#
        ),
        ["Error: it failed"]
    );
}

/// A conformance test.
pub fn an_unserialisable_tool_argument_rejects_without_calling_the_tool() {
    let finished =
        run(r#"try { await tools.echo(() => 1); } catch (error) { text(error.message); }"#);
    assert_eq!(
        finished.texts(),
        ["tools.echo expects a JSON-serialisable argument"]
    );
    assert_eq!(finished.count(is_tool_call), 0);
}

/// A conformance test.
pub fn two_tool_calls_run_in_parallel_with_promise_all() {
    let mut cell = start(
        r#"
        const [a, b] = await Promise.all([tools.echo("a"), tools.echo("b")]);
        text(a + b);
        "#,
    );
    let mut seen = Vec::new();
    // Both calls are issued before either is answered.
    let first = cell.next_matching(&mut seen, is_tool_call);
    let second = cell.next_matching(&mut seen, is_tool_call);
    let (RuntimeEvent::ToolCall { id: first_id, .. }, RuntimeEvent::ToolCall { id: second_id, .. }) =
        (first, second)
    else {
        unreachable!()
    };
    // Answer out of order.
    cell.handles
        .commands
        .send(RuntimeCommand::ToolResponse {
            id: second_id,
            result: json!("B").into(),
        })
        .unwrap();
    cell.handles
        .commands
        .send(RuntimeCommand::ToolResponse {
            id: first_id,
            result: json!("A").into(),
        })
        .unwrap();
    let finished = cell.finish();
    assert_eq!(finished.texts(), ["AB"]);
    assert_eq!(finished.error(), None);
}

/// A conformance test.
pub fn a_cell_terminated_while_its_tool_call_is_unanswered_ends_without_a_result() {
    let mut cell =
        start(r#"text("asked"); await tools.echo("never answered"); text("unreachable");"#);
    let mut seen = Vec::new();
    cell.next_matching(&mut seen, is_tool_call);
    cell.handles.terminate.terminate();
    let rest = cell.drain();
    assert!(
        !rest.completed(),
        "a terminated cell sends no result: {rest:?}"
    );
    assert!(seen.contains(&RuntimeEvent::ContentItem(OutputItem::text("asked"))));
}

/// Starts `source`, waits for its `text("running")`, terminates it from another thread, and
/// checks that it ends without a result.
fn terminate_from_another_thread(source: &str) {
    let mut cell = start(source);
    let mut seen = Vec::new();
    cell.next_matching(&mut seen, |event| {
        *event == RuntimeEvent::ContentItem(OutputItem::text("running"))
    });
    let terminate = cell.handles.terminate.clone();
    std::thread::spawn(move || terminate.terminate())
        .join()
        .unwrap();
    let rest = cell.drain();
    assert!(
        !rest.completed(),
        "terminated cells send no result: {rest:?}"
    );
    assert!(!rest.panicked);
}

/// A conformance test.
pub fn terminate_stops_a_synchronous_infinite_loop() {
    terminate_from_another_thread(r#"text("running"); while (true) {}"#);
}

/// A conformance test.
pub fn terminate_stops_a_microtask_loop() {
    terminate_from_another_thread(r#"text("running"); for (;;) await null;"#);
}

/// A conformance test.
pub fn terminate_stops_a_spin_loop_inside_a_timer_callback() {
    terminate_from_another_thread(
        r#"setTimeout(() => { text("running"); for (;;) {} }, 1); await new Promise(() => {});"#,
    );
}

/// A conformance test.
pub fn terminate_before_the_cell_runs_means_none_of_its_javascript_runs() {
    let cell = start(r#"text("must not appear"); while (true) {}"#);
    cell.handles.terminate.terminate();
    let finished = cell.drain();
    assert!(!finished.completed());
    // Termination may land after a few statements ran; it must never be missed.
    assert!(finished.items.len() <= 1);
}

/// A conformance test.
pub fn a_terminate_handle_is_harmless_after_its_cell_has_ended() {
    let cell = start(r#"text("done");"#);
    let terminate = cell.handles.terminate.clone();
    let finished = cell.finish();
    assert!(finished.completed());
    terminate.terminate();
    terminate.terminate();
    // The next cell is unaffected by the stale handle.
    assert_eq!(texts_of(r#"text("next");"#), ["next"]);
}

/// Waits for the next tool call and the `Pending` that follows it; returns the call.
fn call_then_pending(
    cell: &mut super::harness::Cell,
) -> (String, ToolName, Option<codemode_protocol::JsonText>) {
    let mut seen = Vec::new();
    let RuntimeEvent::ToolCall {
        id, name, input, ..
    } = cell.next_matching(&mut seen, is_tool_call)
    else {
        unreachable!()
    };
    assert_eq!(cell.next(), Some(RuntimeEvent::Pending));
    (id, name, input)
}

/// A conformance test.
pub fn pending_is_emitted_only_while_the_cell_waits_on_tools_or_timers() {
    let is_pending = |event: &RuntimeEvent| *event == RuntimeEvent::Pending;
    let synchronous = run(r#"text(1); await null; await Promise.resolve(2); text(3);"#);
    assert_eq!(synchronous.count(is_pending), 0);
    assert_eq!(synchronous.texts(), ["1", "3"]);

    let mut tool = start(r#"await tools.echo(1); text("after");"#);
    let (id, name, input) = call_then_pending(&mut tool);
    tool.answer(id, &name, input);
    let rest = tool.finish();
    assert_eq!(
        rest.count(is_pending),
        0,
        "no second frontier after the answer"
    );
    assert_eq!(rest.texts(), ["after"]);

    let timer = run(r#"await new Promise((resolve) => setTimeout(resolve, 5)); text("after");"#);
    assert_eq!(timer.count(is_pending), 1);
    assert_eq!(timer.error(), None);
}

/// A conformance test.
pub fn a_paused_cell_runs_nothing_until_resumed() {
    let mut cell = start_with(
        r#"const value = await tools.echo("x"); text(`got ${value}`);"#,
        Options {
            pending_mode: PendingMode::PauseUntilResumed,
            ..Options::default()
        },
    );
    let mut seen = Vec::new();
    let RuntimeEvent::ToolCall { id, .. } = cell.next_matching(&mut seen, is_tool_call) else {
        unreachable!()
    };
    assert_eq!(cell.next(), Some(RuntimeEvent::Pending));
    cell.handles
        .commands
        .send(RuntimeCommand::ToolResponse {
            id,
            result: json!("y").into(),
        })
        .unwrap();
    // Paused: the answer waits. (A short look; it can only miss a bug, never fail a correct run.)
    assert_eq!(cell.next_within(Duration::from_millis(200)), None);
    cell.handles.control.send(RuntimeControl::Resume).unwrap();
    assert_eq!(
        cell.next(),
        Some(RuntimeEvent::ContentItem(OutputItem::text("got y")))
    );
    assert!(matches!(cell.next(), Some(RuntimeEvent::Usage { .. })));
    assert!(matches!(
        cell.next(),
        Some(RuntimeEvent::Result {
            error_text: None,
            ..
        })
    ));
}

/// A conformance test.
pub fn resume_pauses_at_every_frontier_and_continue_stops_pausing_until_asked() {
    let mut cell = start_with(
        r#"
        const a = await tools.echo("a");
        const b = await tools.echo("b");
        const c = await tools.echo("c");
        text(a + b + c);
        "#,
        Options {
            pending_mode: PendingMode::PauseUntilResumed,
            ..Options::default()
        },
    );
    // First frontier: paused; answer, then Resume, which keeps pausing at frontiers.
    let (id, name, input) = call_then_pending(&mut cell);
    cell.answer(id, &name, input);
    cell.handles.control.send(RuntimeControl::Resume).unwrap();
    // Second frontier: paused again; answer, then Continue, which stops pausing.
    let (id, name, input) = call_then_pending(&mut cell);
    cell.answer(id, &name, input);
    cell.handles.control.send(RuntimeControl::Continue).unwrap();
    // Third call: pausing is off, so the idle cell is silent until a frontier observation asks.
    let mut seen = Vec::new();
    let RuntimeEvent::ToolCall {
        id, name, input, ..
    } = cell.next_matching(&mut seen, is_tool_call)
    else {
        unreachable!()
    };
    assert_eq!(
        cell.next_within(Duration::from_millis(200)),
        None,
        "no pause while pausing is off"
    );
    cell.handles
        .commands
        .send(RuntimeCommand::ObservePendingFrontier)
        .unwrap();
    assert_eq!(cell.next(), Some(RuntimeEvent::Pending));
    // A second request while pausing is on changes nothing.
    cell.handles
        .commands
        .send(RuntimeCommand::ObservePendingFrontier)
        .unwrap();
    cell.answer(id, &name, input);
    assert_eq!(
        cell.next_within(Duration::from_millis(200)),
        None,
        "paused at the frontier"
    );
    cell.handles.control.send(RuntimeControl::Continue).unwrap();
    let finished = cell.finish();
    assert_eq!(finished.texts(), ["abc"]);
}

/// A conformance test.
pub fn terminate_reaches_a_paused_cell() {
    let mut cell = start_with(
        r#"await tools.echo("x");"#,
        Options {
            pending_mode: PendingMode::PauseUntilResumed,
            ..Options::default()
        },
    );
    let mut seen = Vec::new();
    cell.next_matching(&mut seen, |event| *event == RuntimeEvent::Pending);
    cell.handles.terminate.terminate();
    assert!(!cell.drain().completed());
}

/// A conformance test.
pub fn a_host_fired_timeout_runs_the_timer_early() {
    let mut cell = start(
        r#"
        await new Promise((resolve) => setTimeout(() => { text("fired"); resolve(); }, 600_000));
        await tools.echo("kept alive until the test has sent everything");
        text("done");
        "#,
    );
    assert_eq!(cell.next(), Some(RuntimeEvent::Started));
    assert_eq!(cell.next(), Some(RuntimeEvent::Pending));
    cell.handles
        .commands
        .send(RuntimeCommand::TimeoutFired { id: 1 })
        .unwrap();
    // Firing it twice, or an unknown timer, is ignored.
    cell.handles
        .commands
        .send(RuntimeCommand::TimeoutFired { id: 1 })
        .unwrap();
    cell.handles
        .commands
        .send(RuntimeCommand::TimeoutFired { id: 7 })
        .unwrap();
    // The cell waits on its tool call (answered by `finish`) until all three were delivered.
    let finished = cell.finish();
    assert_eq!(finished.texts(), ["fired", "done"]);
    assert_eq!(finished.error(), None);
}

/// A conformance test.
pub fn dropping_every_sender_ends_an_idle_cell() {
    // The engine stays: the senders are what this test drops.
    let super::harness::Cell {
        mut events,
        handles,
        engine: _engine,
        ..
    } = start(r#"await tools.echo(1);"#);
    assert_eq!(events.blocking_recv(), Some(RuntimeEvent::Started));
    assert!(matches!(
        events.blocking_recv(),
        Some(RuntimeEvent::ToolCall { .. })
    ));
    assert_eq!(events.blocking_recv(), Some(RuntimeEvent::Pending));
    drop(handles);
    assert_eq!(events.blocking_recv(), None);
}

/// A conformance test.
pub fn awaiting_a_promise_nothing_can_settle_fails_at_once() {
    for source in [
        r#"text("before"); await new Promise(() => {});"#,
        // A cleared timer settles nothing either.
        r#"text("before"); await new Promise((resolve) => clearTimeout(setTimeout(resolve, 10)));"#,
    ] {
        let finished = super::harness::run(source);
        assert_eq!(finished.texts(), ["before"], "{source}");
        let error = finished.error().unwrap_or_default().to_owned();
        assert!(
            error.starts_with("the script awaits a promise that nothing can settle"),
            "{source}: {error}"
        );
    }
    // A pending tool call or timer can settle it: those cells complete.
    assert_eq!(
        super::harness::run(
            r#"await new Promise((resolve) => setTimeout(resolve, 5)); text("timer");"#
        )
        .texts(),
        ["timer"]
    );
}

/// A conformance test.
pub fn a_panic_on_the_runtime_thread_is_reported_and_the_process_lives_on() {
    let finished = super::harness::run_with(
        r#"text("before"); __codemode_test_panic(); text("after");"#,
        Options {
            engine: subject().faulty(),
            ..Options::default()
        },
    );
    assert!(finished.panicked, "{finished:?}");
    assert!(!finished.completed());
    assert_eq!(finished.texts(), ["before"]);
    assert_eq!(
        texts_of(r#"text(typeof __codemode_test_panic);"#),
        ["undefined"]
    );
}

/// A conformance test.
pub fn thirty_two_cells_run_in_parallel_threads_with_their_own_globals() {
    let cells: Vec<_> = (0..32)
        .map(|index| {
            start(&format!(
                r#"
                globalThis.mine = {index};
                store("index", {index});
                const echoed = await tools.echo({index});
                await new Promise((resolve) => setTimeout(resolve, 1));
                text(`${{mine}} ${{echoed}} ${{load("index")}}`);
                "#
            ))
        })
        .collect();
    let finishers: Vec<_> = cells
        .into_iter()
        .map(|cell| std::thread::spawn(move || cell.finish()))
        .collect();
    for (index, finisher) in finishers.into_iter().enumerate() {
        let finished = finisher.join().unwrap();
        assert_eq!(finished.error(), None);
        assert_eq!(finished.texts(), [format!("{index} {index} {index}")]);
        let (writes, _) = finished.result.unwrap();
        assert_eq!(writes["index"], json!(index));
    }
}

/// A conformance test.
pub fn an_engine_without_warm_runtimes_creates_each_runtime_when_its_cell_starts() {
    let finished = super::harness::run_with(
        r#"text(await tools.echo("cold"));"#,
        Options {
            engine: subject().warm(0),
            ..Options::default()
        },
    );
    assert_eq!(finished.texts(), ["cold"]);
}

/// A conformance test.
pub fn a_pool_of_one_warm_runtime_serves_cell_after_cell() {
    let engine = subject().warm(1);
    for index in 0..10 {
        let finished = super::harness::run_with(
            &format!("globalThis.seen = (globalThis.seen ?? 0) + 1; text(`{index}:${{seen}}`);"),
            Options {
                engine: engine.clone(),
                ..Options::default()
            },
        );
        // Each cell gets a fresh isolate: nothing leaks from the one before.
        assert_eq!(finished.texts(), [format!("{index}:1")]);
    }
}

/// A conformance test.
pub fn a_burst_larger_than_the_pool_falls_back_to_cold_runtimes() {
    let engine = subject().warm(2);
    let cells: Vec<_> = (0..8)
        .map(|index| {
            super::harness::start_with(
                &format!("await new Promise((resolve) => setTimeout(resolve, 5)); text({index});"),
                Options {
                    engine: engine.clone(),
                    ..Options::default()
                },
            )
        })
        .collect();
    for (index, cell) in cells.into_iter().enumerate() {
        assert_eq!(cell.finish().texts(), [index.to_string()]);
    }
}

/// A conformance test.
///
/// A cell that runs to its result reports the CPU time its thread spent just before the result:
/// more than nothing for a cell that computed, and never more than the wall time it took.
pub fn a_cell_reports_its_cpu_time_just_before_its_result() {
    let began = std::time::Instant::now();
    let finished =
        run("const end = Date.now() + 20; let n = 0; while (Date.now() < end) n++; text(n > 0);");
    let wall = began.elapsed();
    assert_eq!(finished.texts(), ["true"]);
    let last_two = &finished.events[finished.events.len().saturating_sub(2)..];
    let [
        RuntimeEvent::Usage { cpu_time },
        RuntimeEvent::Result {
            error_text: None, ..
        },
    ] = last_two
    else {
        panic!("no usage just before the result: {last_two:?}");
    };
    assert!(*cpu_time > Duration::ZERO, "{cpu_time:?}");
    assert!(*cpu_time <= wall, "{cpu_time:?} of CPU in {wall:?}");
}
