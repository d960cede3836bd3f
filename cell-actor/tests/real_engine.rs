//! The cell actor's lifecycle on real cells, on QuickJS (the engine that runs in a host's own
//! process; V8 runs only in engine processes).

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use codemode_cell_actor::{
    CellConfig, CellEvent, CollectedOutput, Observation, StartedCell, ToolCallFate, ToolCallRecord,
    start_cell,
};
use codemode_protocol::{OutputItem, ToolName};
use codemode_runtime_quickjs::QuickJsEngine;
use common::{TestHost, cell_start, wait_until, within};
use serde_json::json;

const LONG: Duration = Duration::from_secs(3600);

fn texts(items: &[&str]) -> CollectedOutput {
    CollectedOutput::from_items(items.iter().map(|text| OutputItem::text(*text)))
}

fn start(
    source: &str,
    host: &Arc<TestHost>,
    first: Observation,
) -> (
    codemode_cell_actor::CellHandle,
    codemode_cell_actor::ObservationFuture,
    tokio::task::JoinHandle<()>,
) {
    let StartedCell {
        handle,
        first_observation,
        task,
    } = start_cell(
        &QuickJsEngine::new(),
        cell_start(source),
        Arc::clone(host),
        CellConfig::default(),
        first,
    )
    .expect("the cell starts");
    (handle, first_observation, tokio::spawn(task))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_yields_is_observed_again_and_completes() {
    let host = Arc::new(TestHost::default());
    let (handle, first, actor) = start(
        r#"
        text("first");
        yield_control();
        const answer = await tools.gate();
        text(`second ${answer.released}`);
        store("seen", answer);
        "#,
        &host,
        Observation::yield_after(LONG),
    );
    assert_eq!(
        within("yield_control", first).await,
        Ok(CellEvent::Yielded {
            output: texts(&["first"])
        })
    );
    // A short budget while the cell waits on its tool: it yields with nothing new.
    assert_eq!(
        within(
            "budget yield",
            handle.observe(Observation::yield_after(Duration::from_millis(20)))
        )
        .await,
        Ok(CellEvent::Yielded {
            output: CollectedOutput::default()
        })
    );
    let finished = handle.observe(Observation::yield_after(LONG));
    host.open_gates();
    assert_eq!(
        within("completion", finished).await,
        Ok(CellEvent::Completed {
            output: texts(&["second tool-1"]),
            error_text: None,
            result_buffered_for: Duration::ZERO
        })
    );
    within("actor close", actor).await.unwrap();
    assert_eq!(
        host.stored_values.lock().unwrap()["seen"],
        json!({"released": "tool-1"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_frontier_with_two_outstanding_calls_is_answered_resumed_and_completed() {
    let host = Arc::new(TestHost::default());
    let (handle, first, actor) = start(
        r#"
        text("asking");
        const [a, b] = await Promise.all([tools.gate({ n: 1 }), tools.gate({ n: 2 })]);
        text(`${a.released} ${b.released}`);
        "#,
        &host,
        Observation::pending_frontier(),
    );
    assert_eq!(
        within("frontier", first).await,
        Ok(CellEvent::Pending {
            output: texts(&["asking"]),
            pending_tool_call_ids: vec!["tool-1".into(), "tool-2".into()]
        })
    );
    // Both calls run as concurrent host tasks: wait until both reach the host, in either order.
    wait_until("both tool calls", || {
        host.tool_calls.lock().unwrap().len() == 2
    })
    .await;
    let mut calls: Vec<_> = host
        .tool_calls
        .lock()
        .unwrap()
        .iter()
        .map(|call| (call.id.clone(), call.input.clone()))
        .collect();
    calls.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        calls,
        [
            ("tool-1".to_owned(), Some(json!({"n": 1}).into())),
            ("tool-2".to_owned(), Some(json!({"n": 2}).into()))
        ]
    );
    host.open_gates();
    // Resumed, the cell runs to its next frontier. If only one answer has reached it by then, it
    // stops at an intermediate frontier (waiting on the other call, with no new calls to list);
    // observing again resumes it until it completes.
    let output = loop {
        match within(
            "resumed observation",
            handle.observe(Observation::pending_frontier()),
        )
        .await
        {
            Ok(CellEvent::Pending {
                pending_tool_call_ids,
                output,
            }) => {
                assert!(
                    pending_tool_call_ids.is_empty(),
                    "no new calls: {pending_tool_call_ids:?}"
                );
                assert!(output.is_empty());
            }
            Ok(CellEvent::Completed {
                output,
                error_text: None,
                ..
            }) => break output,
            other => panic!("the resumed cell completes, got {other:?}"),
        }
    };
    assert_eq!(output, texts(&["tool-1 tool-2"]));
    within("actor close", actor).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_during_a_tool_call_cancels_it_and_keeps_the_output() {
    let host = Arc::new(TestHost::default());
    let (handle, first, actor) = start(
        r#"text("before"); store("never", 1); await tools.hang(); text("after");"#,
        &host,
        Observation::yield_after(LONG),
    );
    wait_until("the tool call", || {
        host.tool_calls.lock().unwrap().len() == 1
    })
    .await;
    let expected = CellEvent::Terminated {
        output: texts(&["before"]),
        tool_calls: vec![ToolCallRecord {
            id: "tool-1".into(),
            name: ToolName::plain("hang"),
            fate: ToolCallFate::Cancelled,
        }],
    };
    assert_eq!(
        within("termination", handle.terminate()).await,
        Ok(expected.clone())
    );
    // The observer waiting meanwhile hears the same outcome; the items went to the terminator.
    let CellEvent::Terminated { tool_calls, .. } = expected else {
        unreachable!()
    };
    assert_eq!(
        within("observer", first).await,
        Ok(CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls
        })
    );
    within("actor close", actor).await.unwrap();
    assert_eq!(host.cancelled_tools(), 1);
    assert_eq!(host.commits.load(Ordering::SeqCst), 0);
    assert!(host.stored_values.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_a_cpu_bound_cell_stops_it() {
    let host = Arc::new(TestHost::default());
    let (handle, first, actor) = start(
        r#"text("spinning"); yield_control(); while (true) {}"#,
        &host,
        Observation::yield_after(LONG),
    );
    assert_eq!(
        within("yield", first).await,
        Ok(CellEvent::Yielded {
            output: texts(&["spinning"])
        })
    );
    assert_eq!(
        within("termination", handle.terminate()).await,
        Ok(CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls: vec![]
        })
    );
    within("actor close", actor).await.unwrap();
    assert_eq!(host.closed_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cell_completes_with_its_error_and_commits_its_writes() {
    let host = Arc::new(TestHost::default());
    let (_handle, first, actor) = start(
        r#"store("partial", [1]); text("working"); throw new Error("gave up");"#,
        &host,
        Observation::yield_after(LONG),
    );
    let CellEvent::Completed {
        output,
        error_text: Some(error_text),
        ..
    } = within("completion", first).await.unwrap()
    else {
        panic!("the cell fails")
    };
    assert_eq!(output, texts(&["working"]));
    assert!(error_text.starts_with("Error: gave up"), "{error_text}");
    within("actor close", actor).await.unwrap();
    assert_eq!(host.stored_values.lock().unwrap()["partial"], json!([1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_rejects_the_promise_inside_the_engine() {
    let host = Arc::new(TestHost::default());
    let (_handle, first, _actor) = start(
        r#"try { await tools.panic(); } catch (error) { text(error.message); }"#,
        &host,
        Observation::yield_after(LONG),
    );
    let CellEvent::Completed {
        output,
        error_text: None,
        ..
    } = within("completion", first).await.unwrap()
    else {
        panic!("the cell completes")
    };
    assert_eq!(
        output,
        texts(&["tool panic failed: it panicked (the tool exploded)"])
    );
}
