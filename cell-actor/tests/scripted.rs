//! The actor's rules (actor rules 1-7, output modes) with a scripted engine, where the test controls the
//! exact order of engine events.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use codemode_cell_actor::{
    CellConfig, CellError, CellEvent, CollectedOutput, Observation, OutputMode,
    RUNTIME_ENDED_UNEXPECTEDLY, ToolCallFate, ToolCallRecord,
};
use codemode_engine::{EventSender, RuntimeCommand, RuntimeControl, RuntimeEvent};
use codemode_protocol::{ImageDetail, ImageItem, OutputItem, ToolKind, ToolName};
use common::{ScriptedCellParts, ScriptedRuntime, TestHost, scripted_cell, wait_until, within};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(3600);

fn text(text: &str) -> RuntimeEvent {
    RuntimeEvent::ContentItem(OutputItem::text(text))
}

fn texts(items: &[&str]) -> CollectedOutput {
    CollectedOutput::from_items(items.iter().map(|text| OutputItem::text(*text)))
}

fn image(url: &str) -> OutputItem {
    OutputItem::Image(ImageItem {
        image_url: url.into(),
        detail: ImageDetail::High,
    })
}

fn tool_call(id: &str, name: &str) -> RuntimeEvent {
    RuntimeEvent::ToolCall {
        id: id.into(),
        name: ToolName::plain(name),
        kind: ToolKind::Function,
        input: Some(json!({"id": id}).into()),
    }
}

fn result(error_text: Option<&str>) -> RuntimeEvent {
    RuntimeEvent::Result {
        stored_value_writes: codemode_protocol::stored_values_from([("k".to_owned(), json!(1))]),
        error_text: error_text.map(str::to_owned),
    }
}

fn completed(items: &[&str], error_text: Option<&str>) -> CellEvent {
    CellEvent::Completed {
        output: texts(items),
        error_text: error_text.map(str::to_owned),
        result_buffered_for: Duration::ZERO,
    }
}

fn cell(first: Observation) -> (Arc<TestHost>, ScriptedCellParts) {
    let host = Arc::new(TestHost::default());
    let parts = scripted_cell(Arc::clone(&host), CellConfig::default(), first);
    (host, parts)
}

/// Sends `events` in order, from async code.
async fn send(sender: &EventSender, events: impl IntoIterator<Item = RuntimeEvent>) {
    for event in events {
        sender.send(event).await.unwrap();
    }
}

/// Observes with a zero budget: what the cell has buffered now.
async fn observe_now(
    handle: &codemode_cell_actor::CellHandle,
    what: &str,
) -> Result<CellEvent, CellError> {
    within(
        what,
        handle.observe(Observation::yield_after(Duration::ZERO)),
    )
    .await
}

/// Ends the first observation with a yield request, so the test can observe afresh.
async fn first_yield(events: &EventSender, first: codemode_cell_actor::ObservationFuture) {
    send(events, [RuntimeEvent::YieldRequested]).await;
    assert!(within("first yield", first).await.is_ok());
}

/// Sends a notification and waits until the host has it: after this, the actor has handled
/// every event sent before it.
async fn barrier(host: &TestHost, sender: &EventSender) {
    let count = host.notifications.lock().unwrap().len();
    send(
        sender,
        [RuntimeEvent::Notify {
            call_id: "call-1".into(),
            text: "barrier".into(),
        }],
    )
    .await;
    host.wait_for_notifications(count + 1).await;
}

/// The end of the seed's dropped-observer tests: nothing is left over, so a termination gets an
/// empty `Terminated`, and the actor closes.
async fn terminate_expecting_nothing_left(
    handle: &codemode_cell_actor::CellHandle,
    events: EventSender,
    actor: tokio::task::JoinHandle<()>,
    tool_calls: Vec<ToolCallRecord>,
) {
    let termination = handle.terminate();
    drop(events);
    assert_eq!(
        within("termination", termination).await,
        Ok(CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls,
        })
    );
    within("actor close", actor).await.unwrap();
}

#[tokio::test]
async fn a_completion_is_delivered_to_the_observer_and_commits_stored_values() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            text("one"),
            text("two"),
            result(None),
        ],
    )
    .await;
    assert_eq!(
        within("completion", cell.first_observation).await,
        Ok(completed(&["one", "two"], None))
    );
    within("actor close", cell.actor).await.unwrap();
    assert_eq!(host.commits.load(Ordering::SeqCst), 1);
    assert_eq!(host.stored_values.lock().unwrap()["k"], json!(1));
    assert_eq!(host.closed_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        cell.handle.observe(Observation::yield_after(LONG)).await,
        Err(CellError::Closed)
    );
}

#[tokio::test(start_paused = true)]
async fn a_yield_returns_the_output_so_far_and_the_next_observation_continues() {
    let (_host, cell) = cell(Observation::yield_after(Duration::from_secs(5)));
    send(&cell.runtime.events, [RuntimeEvent::Started, text("early")]).await;
    assert_eq!(
        within("yield", cell.first_observation).await,
        Ok(CellEvent::Yielded {
            output: texts(&["early"])
        })
    );
    let second = cell.handle.observe(Observation::yield_after(LONG));
    send(&cell.runtime.events, [text("late"), result(None)]).await;
    assert_eq!(
        within("completion", second).await,
        Ok(completed(&["late"], None))
    );
}

#[tokio::test]
async fn yield_control_ends_a_time_budget_observation_at_once() {
    let (_host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            text("a"),
            RuntimeEvent::YieldRequested,
            text("b"),
        ],
    )
    .await;
    assert_eq!(
        within("yield", cell.first_observation).await,
        Ok(CellEvent::Yielded {
            output: texts(&["a"])
        })
    );
    let terminated = cell.handle.terminate();
    drop(cell.runtime.events);
    let CellEvent::Terminated { output, .. } = within("termination", terminated).await.unwrap()
    else {
        panic!("expected a termination")
    };
    assert_eq!(output, texts(&["b"]));
}

#[tokio::test]
async fn a_yield_signal_ends_the_observation_without_cancelling_the_cell() {
    let signal = CancellationToken::new();
    let (host, cell) = cell(Observation::yield_after(LONG).with_yield_signal(signal.clone()));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, text("before signal")],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    signal.cancel();
    assert_eq!(
        within("yield", cell.first_observation).await,
        Ok(CellEvent::Yielded {
            output: texts(&["before signal"])
        })
    );
    assert!(!cell.runtime.terminated.is_cancelled());
    let next = cell.handle.observe(Observation::yield_after(LONG));
    send(&cell.runtime.events, [text("after"), result(None)]).await;
    assert_eq!(
        within("completion", next).await,
        Ok(completed(&["after"], None))
    );
}

#[tokio::test]
async fn a_second_observer_is_busy_and_does_not_displace_the_first() {
    let (_host, cell) = cell(Observation::yield_after(LONG));
    send(&cell.runtime.events, [RuntimeEvent::Started]).await;
    assert_eq!(
        within("busy", cell.handle.observe(Observation::yield_after(LONG))).await,
        Err(CellError::Busy)
    );
    send(&cell.runtime.events, [text("for the first"), result(None)]).await;
    assert_eq!(
        within("completion", cell.first_observation).await,
        Ok(completed(&["for the first"], None))
    );
}

#[tokio::test]
async fn the_yield_deadline_preempts_output_still_queued_from_the_engine() {
    let (_host, cell) = cell(Observation::yield_after(Duration::ZERO));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, text("queued output")],
    )
    .await;
    assert_eq!(
        within("yield", cell.first_observation).await,
        Ok(CellEvent::Yielded {
            output: CollectedOutput::default()
        })
    );
    let terminated = cell.handle.terminate();
    drop(cell.runtime.events);
    assert_eq!(
        within("termination", terminated).await,
        Ok(CellEvent::Terminated {
            output: texts(&["queued output"]),
            tool_calls: vec![]
        })
    );
}

#[tokio::test]
async fn a_queued_termination_preempts_an_unobserved_completion() {
    let signal = CancellationToken::new();
    let (host, cell) =
        cell(Observation::yield_after(Duration::ZERO).with_yield_signal(signal.clone()));
    // Everything is queued before the actor runs: the termination must win over the result.
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            RuntimeEvent::YieldRequested,
            text("queued output"),
            result(None),
        ],
    )
    .await;
    signal.cancel();
    let terminated = cell.handle.terminate();
    let expected = Ok(CellEvent::Terminated {
        output: texts(&["queued output"]),
        tool_calls: vec![],
    });
    assert_eq!(within("termination", terminated).await, expected);
    // The observer waiting at the same time learns the outcome; the items went to the terminator.
    assert_eq!(
        within("first observation", cell.first_observation).await,
        expected.map(|event| without_output(&event))
    );
    within("actor close", cell.actor).await.unwrap();
    assert_eq!(
        host.commits.load(Ordering::SeqCst),
        0,
        "a terminated cell never commits"
    );
    assert!(cell.runtime.terminated.is_cancelled());
}

#[tokio::test]
async fn an_observation_dropped_before_it_is_dequeued_takes_no_output() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    first_yield(&cell.runtime.events, cell.first_observation).await;
    drop(cell.handle.observe(Observation::yield_after(LONG)));
    send(
        &cell.runtime.events,
        [
            text("survives pre-dequeue cancellation"),
            RuntimeEvent::YieldRequested,
        ],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    assert_eq!(
        observe_now(&cell.handle, "observe").await,
        Ok(CellEvent::Yielded {
            output: texts(&["survives pre-dequeue cancellation"])
        })
    );
    terminate_expecting_nothing_left(&cell.handle, cell.runtime.events, cell.actor, vec![]).await;
}

#[tokio::test]
async fn a_dropped_yield_observer_loses_no_output() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    first_yield(&cell.runtime.events, cell.first_observation).await;
    let dropped = cell.handle.observe(Observation::yield_after(LONG));
    assert_eq!(
        observe_now(&cell.handle, "busy").await,
        Err(CellError::Busy)
    );
    drop(dropped);
    // The yield request finds the dropped observer: its delivery fails and the output stays.
    send(
        &cell.runtime.events,
        [
            text("survives active cancellation"),
            RuntimeEvent::YieldRequested,
        ],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    assert_eq!(
        observe_now(&cell.handle, "observe").await,
        Ok(CellEvent::Yielded {
            output: texts(&["survives active cancellation"])
        })
    );
    terminate_expecting_nothing_left(&cell.handle, cell.runtime.events, cell.actor, vec![]).await;
}

#[tokio::test]
async fn a_dropped_frontier_observer_leaves_the_frontier_ready_for_the_next() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    first_yield(&cell.runtime.events, cell.first_observation).await;
    let dropped = cell.handle.observe(Observation::pending_frontier());
    assert_eq!(
        within("busy", cell.handle.observe(Observation::pending_frontier())).await,
        Err(CellError::Busy)
    );
    drop(dropped);
    send(
        &cell.runtime.events,
        [
            text("before frontier"),
            tool_call("tool-1", "gate"),
            RuntimeEvent::Pending,
        ],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    assert_eq!(
        within(
            "frontier",
            cell.handle.observe(Observation::pending_frontier())
        )
        .await,
        Ok(CellEvent::Pending {
            output: texts(&["before frontier"]),
            pending_tool_call_ids: vec!["tool-1".into()]
        })
    );
    // The engine stays paused: the frontier was delivered from the buffer, with no control sent.
    assert!(cell.runtime.control.try_recv().is_err());
    let gate_cancelled = ToolCallRecord {
        id: "tool-1".into(),
        name: ToolName::plain("gate"),
        fate: ToolCallFate::Cancelled,
    };
    terminate_expecting_nothing_left(
        &cell.handle,
        cell.runtime.events,
        cell.actor,
        vec![gate_cancelled],
    )
    .await;
}

/// Waits (off the async runtime) for the next control message the actor sends the engine.
async fn next_control(runtime: ScriptedRuntime) -> (RuntimeControl, ScriptedRuntime) {
    within(
        "control",
        tokio::task::spawn_blocking(move || (runtime.control.recv().unwrap(), runtime)),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_frontier_observer_resumes_a_paused_runtime_and_a_yield_observer_continues_it() {
    let (host, cell) = cell(Observation::pending_frontier());
    // The engine starts with pausing on, so the first frontier observer needs no request.
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            tool_call("tool-1", "gate"),
            tool_call("tool-2", "gate"),
            RuntimeEvent::Pending,
        ],
    )
    .await;
    assert_eq!(
        within("frontier", cell.first_observation).await,
        Ok(CellEvent::Pending {
            output: CollectedOutput::default(),
            pending_tool_call_ids: vec!["tool-1".into(), "tool-2".into()]
        })
    );
    assert!(
        cell.runtime.commands.try_recv().is_err(),
        "no request to pause was needed"
    );
    host.open_gates();
    // Paused, then observed at the frontier again: resume, and pause at the next one.
    let next = cell.handle.observe(Observation::pending_frontier());
    let (control, runtime) = next_control(cell.runtime).await;
    assert_eq!(control, RuntimeControl::Resume);
    runtime.events.send(RuntimeEvent::Pending).await.unwrap();
    assert!(
        matches!(within("second frontier", next).await, Ok(CellEvent::Pending { pending_tool_call_ids, .. }) if pending_tool_call_ids.is_empty())
    );
    // A time-budget observer lets the paused runtime continue, which stops its pausing.
    let yielded = cell
        .handle
        .observe(Observation::yield_after(Duration::ZERO));
    let (control, runtime) = next_control(runtime).await;
    assert_eq!(control, RuntimeControl::Continue);
    assert!(matches!(
        within("yield", yielded).await,
        Ok(CellEvent::Yielded { .. })
    ));
    // A frontier observer of the running (not paused) cell asks the engine to pause again.
    let frontier = cell.handle.observe(Observation::pending_frontier());
    let runtime = within(
        "pause request",
        tokio::task::spawn_blocking(move || {
            // The released gates' answers come first; the pause request follows them.
            loop {
                match runtime.commands.recv().unwrap() {
                    RuntimeCommand::ToolResponse { .. } => continue,
                    command => assert_eq!(command, RuntimeCommand::ObservePendingFrontier),
                }
                return runtime;
            }
        }),
    )
    .await
    .unwrap();
    runtime
        .events
        .send(tool_call("tool-3", "echo"))
        .await
        .unwrap();
    runtime.events.send(RuntimeEvent::Pending).await.unwrap();
    assert!(
        matches!(within("third frontier", frontier).await, Ok(CellEvent::Pending { pending_tool_call_ids, .. }) if pending_tool_call_ids == ["tool-3"])
    );
    let finished = cell.handle.observe(Observation::yield_after(LONG));
    let (control, runtime) = next_control(runtime).await;
    assert_eq!(control, RuntimeControl::Continue);
    runtime.events.send(result(None)).await.unwrap();
    assert_eq!(
        within("completion", finished).await,
        Ok(completed(&[], None))
    );
}

#[tokio::test]
async fn a_pending_frontier_without_a_frontier_observer_lets_the_runtime_continue() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            tool_call("tool-1", "gate"),
            RuntimeEvent::Pending,
        ],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    assert_eq!(
        cell.runtime.control.try_recv(),
        Ok(RuntimeControl::Continue)
    );
}

#[tokio::test]
async fn tool_results_and_failures_are_sent_back_to_the_engine() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            tool_call("tool-1", "echo"),
            tool_call("tool-2", "fail"),
        ],
    )
    .await;
    let commands = within(
        "tool answers",
        tokio::task::spawn_blocking(move || {
            let mut commands = vec![
                cell.runtime.commands.recv().unwrap(),
                cell.runtime.commands.recv().unwrap(),
            ];
            commands.sort_by_key(|command| format!("{command:?}"));
            commands
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        commands,
        [
            RuntimeCommand::ToolError {
                id: "tool-2".into(),
                error_text: "it failed".into()
            },
            RuntimeCommand::ToolResponse {
                id: "tool-1".into(),
                result: json!({"id": "tool-1"}).into()
            },
        ]
    );
    assert_eq!(host.tool_calls.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_panicking_tool_rejects_its_promise_and_the_cell_goes_on() {
    let (_host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, tool_call("tool-1", "panic")],
    )
    .await;
    let (command, runtime) = within(
        "tool error",
        tokio::task::spawn_blocking(move || (cell.runtime.commands.recv().unwrap(), cell.runtime)),
    )
    .await
    .unwrap();
    assert_eq!(
        command,
        RuntimeCommand::ToolError {
            id: "tool-1".into(),
            error_text: "tool panic failed: it panicked (the tool exploded)".into()
        }
    );
    runtime.events.send(text("still alive")).await.unwrap();
    runtime.events.send(result(None)).await.unwrap();
    assert_eq!(
        within("completion", cell.first_observation).await,
        Ok(completed(&["still alive"], None))
    );
}

#[tokio::test]
async fn termination_reports_the_kill_ledger_of_every_tool_call() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            tool_call("tool-1", "echo"),
            tool_call("tool-2", "hang"),
        ],
    )
    .await;
    // tool-1 has answered once its response reaches the engine.
    let (answered, runtime) = within(
        "tool-1 answer",
        tokio::task::spawn_blocking(move || (cell.runtime.commands.recv().unwrap(), cell.runtime)),
    )
    .await
    .unwrap();
    assert!(matches!(answered, RuntimeCommand::ToolResponse { ref id, .. } if id == "tool-1"));
    let terminated = cell.handle.terminate();
    // A call the engine made before it stopped, seen only after the kill, is never started.
    runtime
        .events
        .send(tool_call("tool-3", "echo"))
        .await
        .unwrap();
    drop(runtime.events);
    let record = |id: &str, name: &str, fate| ToolCallRecord {
        id: id.into(),
        name: ToolName::plain(name),
        fate,
    };
    assert_eq!(
        within("termination", terminated).await,
        Ok(CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls: vec![
                record("tool-1", "echo", ToolCallFate::Completed),
                record("tool-2", "hang", ToolCallFate::Cancelled),
                record("tool-3", "echo", ToolCallFate::NotStarted),
            ],
        })
    );
    assert!(runtime.terminated.is_cancelled());
    assert_eq!(
        host.tool_calls.lock().unwrap().len(),
        2,
        "tool-3 was never invoked"
    );
}

#[tokio::test]
async fn notifications_are_delivered_before_the_completion() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            RuntimeEvent::Notify {
                call_id: "call-1".into(),
                text: "progress".into(),
            },
            result(None),
        ],
    )
    .await;
    assert!(within("completion", cell.first_observation).await.is_ok());
    assert_eq!(
        *host.notifications.lock().unwrap(),
        [("call-1".to_owned(), "progress".to_owned())]
    );
}

#[tokio::test]
async fn completion_cancels_tools_still_running() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, tool_call("tool-1", "hang")],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    send(&cell.runtime.events, [result(None)]).await;
    assert!(within("completion", cell.first_observation).await.is_ok());
    within("actor close", cell.actor).await.unwrap();
    assert_eq!(host.tool_calls.lock().unwrap().len(), 1);
    assert_eq!(host.cancelled_tools(), 1);
}

#[tokio::test]
async fn termination_drains_a_send_already_blocked_by_backpressure() {
    let host = Arc::new(TestHost::default());
    let config = CellConfig {
        output_mode: OutputMode::Server {
            event_queue_capacity: 2,
            image_budget_bytes: 1024,
            output_budget_bytes: usize::MAX,
        },
        failure_handler: None,
    };
    let cell = scripted_cell(Arc::clone(&host), config, Observation::yield_after(LONG));
    // This test plays the engine. The actor runs on this same thread and cannot take anything off
    // the queue before the first await, so the queue fills exactly to its capacity.
    let mut queued = Vec::new();
    let mut blocked = loop {
        let name = format!("item {}", queued.len());
        let mut send = Box::pin(cell.runtime.events.send(text(&name)));
        match futures_poll_once(send.as_mut()) {
            Some(sent) => {
                sent.unwrap();
                queued.push(name);
            }
            None => break send,
        }
        assert!(queued.len() <= 2, "the queue holds more than its capacity");
    };
    assert_eq!(queued.len(), 2);
    // The next send is blocked; terminate() takes effect at once, and the actor must drain the
    // queue while terminating, which releases the blocked send.
    assert!(futures_poll_once(blocked.as_mut()).is_none());
    let termination = cell.handle.terminate();
    within("blocked send released", blocked).await.unwrap();
    queued.push(format!("item {}", queued.len()));
    drop(cell.runtime.events);
    let names: Vec<&str> = queued.iter().map(String::as_str).collect();
    let expected = CellEvent::Terminated {
        output: texts(&names),
        tool_calls: vec![],
    };
    assert_eq!(
        within("termination", termination).await,
        Ok(expected.clone())
    );
    assert_eq!(
        within("first observer", cell.first_observation).await,
        Ok(without_output(&expected))
    );
    within("actor close", cell.actor).await.unwrap();
}

/// As it closes, the host hears what the cell emitted (every item, those a budget left out
/// too) and the CPU time its engine reported; a terminated cell reports no CPU time.
#[tokio::test]
async fn the_host_hears_what_the_cell_emitted_and_what_it_cost() {
    let host = Arc::new(TestHost::default());
    let config = CellConfig {
        output_mode: OutputMode::Server {
            event_queue_capacity: 16,
            image_budget_bytes: 1024,
            output_budget_bytes: 5,
        },
        failure_handler: None,
    };
    let cell = scripted_cell(Arc::clone(&host), config, Observation::yield_after(LONG));
    let cpu_time = Duration::from_micros(1234);
    send(
        &cell.runtime.events,
        [
            text("abc"),
            text("defgh"),
            RuntimeEvent::Usage { cpu_time },
            result(None),
        ],
    )
    .await;
    assert!(within("completion", cell.first_observation).await.is_ok());
    within("actor close", cell.actor).await.unwrap();
    let usage = host.usage.lock().unwrap().expect("told as the cell closed");
    assert_eq!(
        (usage.output_items, usage.output_bytes, usage.cpu_time),
        (2, 8, Some(cpu_time))
    );

    let (host, cell) = self::cell(Observation::yield_after(LONG));
    send(&cell.runtime.events, [text("x")]).await;
    barrier(&host, &cell.runtime.events).await;
    let termination = cell.handle.terminate();
    drop(cell.runtime.events);
    assert!(within("termination", termination).await.is_ok());
    within("actor close", cell.actor).await.unwrap();
    let usage = host.usage.lock().unwrap().expect("told as the cell closed");
    assert_eq!(
        (usage.output_items, usage.output_bytes, usage.cpu_time),
        (1, 1, None)
    );
}

/// The seed's image restore, through the actor: a yield whose observer went away puts the output
/// back exactly (the same image allocation, the omission where it stood, the budget still used).
#[tokio::test]
async fn a_failed_yield_restores_the_image_allocation_and_the_omission_order() {
    let host = Arc::new(TestHost::default());
    let budget = 64;
    let config = CellConfig {
        output_mode: OutputMode::Server {
            event_queue_capacity: 16,
            image_budget_bytes: budget,
            output_budget_bytes: usize::MAX,
        },
        failure_handler: None,
    };
    let cell = scripted_cell(Arc::clone(&host), config, Observation::yield_after(LONG));
    first_yield(&cell.runtime.events, cell.first_observation).await;
    let observer = cell.handle.observe(Observation::yield_after(LONG));
    barrier(&host, &cell.runtime.events).await;
    drop(observer);
    let image_url = format!("data:image/png;base64,{}", "i".repeat(budget - 22));
    assert_eq!(image_url.len(), budget);
    let pointer = image_url.as_ptr();
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::ContentItem(OutputItem::Image(ImageItem {
                image_url,
                detail: ImageDetail::High,
            })),
            RuntimeEvent::ContentItem(image("excess")),
            // Delivered to the observer that went away: the delivery fails and is restored.
            RuntimeEvent::YieldRequested,
            text("after"),
        ],
    )
    .await;
    barrier(&host, &cell.runtime.events).await;
    let Ok(CellEvent::Yielded { output }) = observe_now(&cell.handle, "observe").await else {
        panic!("expected a yield");
    };
    let items = output.into_items();
    let [
        OutputItem::Image(ImageItem { image_url, .. }),
        OutputItem::Text { text: notice },
        OutputItem::Text { text: after },
    ] = items.as_slice()
    else {
        panic!("expected the image, the omission notice and the text after: {items:?}");
    };
    assert_eq!(image_url.as_ptr(), pointer, "the image was copied");
    assert_eq!(notice, "[1 images omitted: image output budget exceeded]");
    assert_eq!(after, "after");
    terminate_expecting_nothing_left(&cell.handle, cell.runtime.events, cell.actor, vec![]).await;
}

#[tokio::test]
async fn server_mode_omits_images_past_the_budget_in_order() {
    let host = Arc::new(TestHost::default());
    let config = CellConfig {
        output_mode: OutputMode::Server {
            event_queue_capacity: 16,
            image_budget_bytes: 10,
            output_budget_bytes: usize::MAX,
        },
        failure_handler: None,
    };
    let cell = scripted_cell(host, config, Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            RuntimeEvent::ContentItem(image("0123456789")),
            RuntimeEvent::ContentItem(image("x")),
            text("after"),
            result(None),
        ],
    )
    .await;
    let Ok(CellEvent::Completed { output, .. }) =
        within("completion", cell.first_observation).await
    else {
        panic!("expected a completion")
    };
    assert_eq!(
        output.into_items(),
        [
            image("0123456789"),
            OutputItem::text("[1 images omitted: image output budget exceeded]"),
            OutputItem::text("after")
        ]
    );
}

/// The outcome is claimed before the host's (possibly slow) store commit starts, so a termination
/// that arrives during the commit gets the completion, which was committed exactly once; the
/// termination neither waits on a lock nor wins.
#[tokio::test]
async fn termination_during_the_store_commit_gets_the_claimed_completion() {
    for mode in [OutputMode::Client, OutputMode::server()] {
        let hold = CancellationToken::new();
        let host = Arc::new(TestHost {
            hold_commit: Some(hold.clone()),
            ..TestHost::default()
        });
        let config = CellConfig {
            output_mode: mode,
            failure_handler: None,
        };
        let cell = scripted_cell(Arc::clone(&host), config, Observation::yield_after(LONG));
        let events = cell.runtime.events.clone();
        tokio::task::spawn_blocking(move || {
            events
                .send_blocking(text("output of the completed cell"))
                .unwrap();
            events
                .send_blocking(RuntimeEvent::Result {
                    stored_value_writes: codemode_protocol::stored_values_from([(
                        "k".to_owned(),
                        json!(1),
                    )]),
                    error_text: None,
                })
                .unwrap();
        })
        .await
        .unwrap();
        within("commit reached", host.commit_started.cancelled()).await;
        let mut terminated = std::pin::pin!(cell.handle.terminate());
        // The request is taken at once, and answered only once the completion is published.
        assert!(
            futures_poll_once(terminated.as_mut()).is_none(),
            "{mode:?}: answered during the commit"
        );
        let second = cell.handle.terminate();
        assert_eq!(
            within("second termination", second).await,
            Err(CellError::AlreadyTerminating),
            "{mode:?}"
        );
        hold.cancel();
        let Ok(completion @ CellEvent::Completed { .. }) = within("termination", terminated).await
        else {
            panic!("{mode:?}: the terminator should get the claimed completion");
        };
        assert_eq!(
            completion.output(),
            &texts(&["output of the completed cell"])
        );
        assert_eq!(
            within("observer", cell.first_observation).await,
            Ok(without_output(&completion)),
            "{mode:?}"
        );
        assert_eq!(host.commits.load(Ordering::SeqCst), 1, "{mode:?}");
        assert_eq!(
            *host.stored_values.lock().unwrap(),
            codemode_protocol::stored_values_from([("k", json!(1))]),
            "{mode:?}"
        );
        within("the actor to close", cell.actor).await.unwrap();
    }
}

/// An outcome as a second caller gets it: the same, without the output the first received.
fn without_output(event: &CellEvent) -> CellEvent {
    match event.clone() {
        CellEvent::Completed {
            error_text,
            result_buffered_for,
            ..
        } => CellEvent::Completed {
            output: CollectedOutput::default(),
            error_text,
            result_buffered_for,
        },
        CellEvent::Terminated { tool_calls, .. } => CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls,
        },
        other => other,
    }
}

/// Polls a future once with a no-op waker: its answer if it is ready now.
fn futures_poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// `actual` is `expected` plus at most one [`wait_until`] poll tick (paused time is exact).
fn assert_within_a_tick(actual: Duration, expected: Duration) {
    assert!(
        actual >= expected && actual <= expected + Duration::from_millis(1),
        "{actual:?} is not {expected:?} within one poll tick"
    );
}

#[tokio::test(start_paused = true)]
async fn a_buffered_completion_goes_to_the_first_terminator_only() {
    let (host, cell) = cell(Observation::yield_after(Duration::from_millis(10)));
    send(&cell.runtime.events, [RuntimeEvent::Started]).await;
    assert!(matches!(
        within("yield", cell.first_observation).await,
        Ok(CellEvent::Yielded { .. })
    ));
    send(&cell.runtime.events, [text("done"), result(None)]).await;
    wait_until("commit", || host.commits.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let first = cell.handle.terminate();
    let second = cell.handle.terminate();
    assert_eq!(
        within("second", second).await,
        Err(CellError::AlreadyTerminating)
    );
    let Ok(CellEvent::Completed {
        output,
        error_text: None,
        result_buffered_for,
    }) = within("first", first).await
    else {
        panic!("the first terminator gets the buffered completion")
    };
    assert_eq!(output, texts(&["done"]));
    // Committed at most one poll tick before the three-second wait began.
    assert_within_a_tick(result_buffered_for, Duration::from_secs(3));
    assert_eq!(
        host.commits.load(Ordering::SeqCst),
        1,
        "a completion committed before the termination stands"
    );
    within("actor close", cell.actor).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_completion_whose_observer_went_away_waits_for_the_next_and_says_how_long() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    drop(cell.first_observation);
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, text("done"), result(Some("boom"))],
    )
    .await;
    // Committed and offered to the first observer, which had gone: it stays buffered.
    wait_until("commit", || host.commits.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    drop(cell.handle.observe(Observation::yield_after(LONG)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let Ok(CellEvent::Completed {
        output,
        error_text,
        result_buffered_for,
    }) = within(
        "observe",
        cell.handle.observe(Observation::yield_after(LONG)),
    )
    .await
    else {
        panic!("the next observer gets the buffered completion")
    };
    assert_eq!(
        (output, error_text.as_deref()),
        (texts(&["done"]), Some("boom"))
    );
    assert_within_a_tick(result_buffered_for, Duration::from_secs(10));
    within("actor close", cell.actor).await.unwrap();
    assert_eq!(cell.handle.terminate().await, Err(CellError::Closed));
}

#[tokio::test]
async fn an_engine_thread_that_ends_without_a_result_completes_the_cell_and_tells_the_owner() {
    let (failures_tx, mut failures) = tokio::sync::mpsc::unbounded_channel();
    let config = CellConfig {
        output_mode: OutputMode::Client,
        failure_handler: Some(Arc::new(move |reason| {
            let _ = failures_tx.send(reason);
        })),
    };
    let host = Arc::new(TestHost::default());
    let cell = scripted_cell(Arc::clone(&host), config, Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, text("partial")],
    )
    .await;
    drop(cell.runtime.events);
    assert_eq!(
        within("failure report", failures.recv()).await.as_deref(),
        Some("the cell's runtime thread ended without a result")
    );
    assert_eq!(
        within("completion", cell.first_observation).await,
        Ok(completed(&["partial"], Some(RUNTIME_ENDED_UNEXPECTEDLY)))
    );
    assert_eq!(
        host.commits.load(Ordering::SeqCst),
        1,
        "an error completion commits (no writes)"
    );
}

#[tokio::test]
async fn a_runtime_thread_panic_is_a_cell_error_even_without_an_owner_handler() {
    let (_host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, RuntimeEvent::ThreadPanicked],
    )
    .await;
    drop(cell.runtime.events);
    assert_eq!(
        within("completion", cell.first_observation).await,
        Ok(completed(&[], Some("exec runtime ended unexpectedly")))
    );
    within("actor close", cell.actor).await.unwrap();
}

#[tokio::test]
async fn observing_a_cell_being_terminated_says_so() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(&cell.runtime.events, [RuntimeEvent::Started]).await;
    barrier(&host, &cell.runtime.events).await;
    let terminated = cell.handle.terminate();
    assert_eq!(
        within("second terminate", cell.handle.terminate()).await,
        Err(CellError::AlreadyTerminating)
    );
    // An observer that arrives once termination has begun is told at once that the cell is gone.
    assert_eq!(
        within(
            "late observer",
            cell.handle.observe(Observation::yield_after(LONG))
        )
        .await,
        Err(CellError::Closed)
    );
    drop(cell.runtime.events);
    assert!(matches!(
        within("termination", terminated).await,
        Ok(CellEvent::Terminated { .. })
    ));
    assert!(matches!(
        within("observer", cell.first_observation).await,
        Ok(CellEvent::Terminated { .. })
    ));
}

#[tokio::test]
async fn dropping_every_handle_terminates_the_cell() {
    let (host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [RuntimeEvent::Started, text("orphan")],
    )
    .await;
    drop(cell.handle);
    within("engine terminated", cell.runtime.terminated.cancelled()).await;
    drop(cell.runtime.events);
    assert!(matches!(
        within("observer", cell.first_observation).await,
        Ok(CellEvent::Terminated { .. })
    ));
    within("actor close", cell.actor).await.unwrap();
    assert_eq!(host.closed_calls.load(Ordering::SeqCst), 1);
}

#[test]
fn errors_have_messages_a_caller_can_show() {
    assert_eq!(
        CellError::Busy.to_string(),
        "the cell is already being observed; only one observer at a time, so wait for the current observation to return"
    );
    assert_eq!(
        CellError::AlreadyTerminating.to_string(),
        "the cell is already being terminated; its result goes to whoever terminated it first"
    );
    assert_eq!(
        CellError::Closed.to_string(),
        "the cell has ended and its result was already delivered"
    );
}

#[tokio::test]
async fn a_tool_that_returns_after_cancellation_is_recorded_as_cancelled() {
    let (_host, cell) = cell(Observation::yield_after(LONG));
    send(
        &cell.runtime.events,
        [
            RuntimeEvent::Started,
            tool_call("tool-1", "cancelled-mid-poll"),
        ],
    )
    .await;
    // Its answer came after cancellation was asked for: the engine never gets it.
    let (answer, runtime) = within(
        "engine",
        tokio::task::spawn_blocking(move || {
            (
                cell.runtime
                    .commands
                    .recv_timeout(Duration::from_millis(200))
                    .ok(),
                cell.runtime,
            )
        }),
    )
    .await
    .unwrap();
    assert_eq!(answer, None);
    let terminated = cell.handle.terminate();
    drop(runtime.events);
    let Ok(CellEvent::Terminated { tool_calls, .. }) = within("termination", terminated).await
    else {
        panic!("expected a termination")
    };
    assert_eq!(tool_calls[0].fate, ToolCallFate::Cancelled);
}
