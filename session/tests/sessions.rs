//! Session behaviour on QuickJS: stored values, concurrency, limits, shutdown, completion push.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use codemode_protocol::{CellId, WaitRequest};
use codemode_session::{
    CellError, CellEvent, SessionConfig, SessionError, SessionEvent, WaitOutcome,
};
use common::{MemoryStore, background, execute, observed, open, request, terminate, texts, within};
use serde_json::json;

fn wait(cell_id: impl ToString) -> WaitRequest {
    WaitRequest {
        cell_id: cell_id.to_string(),
        yield_time_ms: Some(30_000),
        max_tokens: None,
        terminate: false,
        cell_ids: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_values_are_shared_by_the_cells_of_a_session_and_never_across_sessions() {
    let store = Arc::new(MemoryStore::default());
    let (first, _) = open("first", &store, SessionConfig::default()).await;
    let (second, _) = open("second", &store, SessionConfig::default()).await;
    let stored = execute(
        &first,
        "store",
        request(r#"store("count", 1); text("stored");"#),
    )
    .await;
    assert!(matches!(
        stored.event,
        CellEvent::Completed {
            error_text: None,
            ..
        }
    ));
    let same = execute(&first, "load", request(r#"text(load("count"));"#)).await;
    assert_eq!(texts(&same.event), ["1"]);
    let other = execute(
        &second,
        "load elsewhere",
        request(r#"text(load("count"));"#),
    )
    .await;
    assert_eq!(texts(&other.event), ["undefined"]);
    assert_eq!(store.sessions.lock().unwrap()["first"]["count"], json!(1));
    assert!(!store.sessions.lock().unwrap().contains_key("second"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_shared_store_each_cell_starts_from_the_latest_committed_values() {
    let store = Arc::new(MemoryStore::default());
    store.shared.store(true, Ordering::SeqCst);
    // Two servers' sessions of one codemode session, both open.
    let (here, _) = open("work", &store, SessionConfig::default()).await;
    let (there, _) = open("work", &store, SessionConfig::default()).await;
    let read = || request(r#"text(JSON.stringify(load("count") ?? null));"#);
    assert_eq!(
        texts(&execute(&there, "read", read()).await.event),
        ["null"]
    );
    execute(&here, "store", request(r#"store("count", 1);"#)).await;
    assert_eq!(texts(&execute(&there, "read", read()).await.event), ["1"]);
    execute(&here, "store", request(r#"store("count", 2);"#)).await;
    assert_eq!(texts(&execute(&there, "read", read()).await.event), ["2"]);
    assert_eq!(there.stored_values()["count"].json(), "2");

    // A store that cannot load fails the cell's start with a clear error, and nothing runs.
    store.fail_loads.store(true, Ordering::SeqCst);
    let error = there
        .execute(request(r#"store("count", 3);"#))
        .await
        .expect_err("no values, no cell");
    assert_eq!(
        error.to_string(),
        "failed to load the session's stored values: the database is restarting"
    );
    store.fail_loads.store(false, Ordering::SeqCst);
    assert_eq!(texts(&execute(&there, "read", read()).await.event), ["2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_store_of_one_process_a_session_loads_its_values_once() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("work", &store, SessionConfig::default()).await;
    for _ in 0..3 {
        execute(&session, "store", request(r#"store("count", 1);"#)).await;
    }
    assert_eq!(store.loads.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_sees_its_stored_values() {
    let store = Arc::new(MemoryStore::default());
    {
        let (session, _) = open("durable", &store, SessionConfig::default()).await;
        execute(
            &session,
            "store",
            request(r#"store("kept", {deep: [1, 2]});"#),
        )
        .await;
    }
    let (reopened, _) = open("durable", &store, SessionConfig::default()).await;
    let report = execute(&reopened, "load", request(r#"text(load("kept"));"#)).await;
    assert_eq!(texts(&report.event), [r#"{"deep":[1,2]}"#]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_two_concurrent_cells_are_merged_by_key() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("merge", &store, SessionConfig::default()).await;
    // Both cells start from the same (empty) snapshot and finish after the gate opens.
    let a = execute(
        &session,
        "a",
        background(r#"store("a", 1); store("shared", "a"); await tools.gate();"#),
    )
    .await;
    let b = execute(
        &session,
        "b",
        background(r#"store("b", 2); await tools.gate(); store("shared", "b");"#),
    )
    .await;
    assert!(
        matches!(a.event, CellEvent::Yielded { .. })
            && matches!(b.event, CellEvent::Yielded { .. })
    );
    tools.release();
    within("a done", session.wait(wait(&a.cell_id)))
        .await
        .unwrap();
    within("b done", session.wait(wait(&b.cell_id)))
        .await
        .unwrap();
    let values = session.stored_values();
    assert_eq!(values["a"], json!(1));
    assert_eq!(values["b"], json!(2));
    assert!(values["shared"] == json!("a") || values["shared"] == json!("b"));
    assert_eq!(store.sessions.lock().unwrap()["merge"].len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_completed_cell_commits_and_a_terminated_one_does_not() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("commit", &store, SessionConfig::default()).await;
    let failed = execute(
        &session,
        "failed",
        request(r#"store("from_failed", 1); throw new Error("no");"#),
    )
    .await;
    assert!(matches!(
        failed.event,
        CellEvent::Completed {
            error_text: Some(_),
            ..
        }
    ));
    let running = execute(
        &session,
        "running",
        background(r#"store("from_terminated", 1); while (true) {}"#),
    )
    .await;
    let terminated = terminate(&session, "terminate", &running.cell_id).await;
    assert!(matches!(terminated.event, CellEvent::Terminated { .. }));
    let values = session.stored_values();
    assert_eq!(values["from_failed"], json!(1));
    assert_eq!(values.get("from_terminated"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_observer_is_refused_without_displacing_the_first() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("busy", &store, SessionConfig::default()).await;
    let started = execute(
        &session,
        "start",
        background(r#"const r = await tools.gate(); text(r.released);"#),
    )
    .await;
    // Poll the first wait once: that queues its observation, and the actor takes observations in
    // order, so the second is refused whatever the scheduling.
    let mut first = Box::pin(session.wait(wait(&started.cell_id)));
    assert!(
        tokio::time::timeout(Duration::ZERO, first.as_mut())
            .await
            .is_err(),
        "the first wait is still waiting"
    );
    let second = within("second", session.wait(wait(&started.cell_id)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            second,
            SessionError::Cell {
                error: CellError::Busy,
                ..
            }
        ),
        "{second}"
    );
    tools.release();
    let first = observed(within("first observer", first).await.unwrap());
    assert_eq!(texts(&first.event), ["tool-1"]);
    assert!(matches!(first.event, CellEvent::Completed { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_on_an_unknown_or_finished_cell_is_not_found() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("unknown", &store, SessionConfig::default()).await;
    assert_eq!(
        within("wait", session.wait(wait("42"))).await.unwrap(),
        WaitOutcome::NotFound {
            cell_id: "42".into()
        }
    );
    let done = execute(&session, "done", request("text(1)")).await;
    assert_eq!(
        within("wait again", session.wait(wait(&done.cell_id)))
            .await
            .unwrap(),
        WaitOutcome::NotFound {
            cell_id: done.cell_id.to_string()
        }
    );
    assert_eq!(session.active_cells(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_exact_text_of_a_running_cells_id_reaches_it() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("exact ids", &store, SessionConfig::default()).await;
    // Running until terminated: a tool call that is never answered (a promise nothing can
    // settle would fail the cell at once, racing the termination below).
    let running = execute(&session, "running", background("await tools.gate()")).await;
    assert_eq!(running.cell_id.to_string(), "1");
    // Ids that parse to the same number, and one that is no id at all, name no cell.
    for other in ["01", "+1", " 1", "1.0", "x-1"] {
        assert_eq!(
            within("wait", session.wait(wait(other))).await.unwrap(),
            WaitOutcome::NotFound {
                cell_id: other.into()
            },
            "{other:?}"
        );
    }
    assert_eq!(session.active_cells(), 1);
    let ended = terminate(&session, "terminate", &running.cell_id).await;
    assert!(
        matches!(ended.event, CellEvent::Terminated { .. }),
        "{ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_interrupts_spinning_cells_and_refuses_new_ones() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("shutdown", &store, SessionConfig::default()).await;
    for _ in 0..3 {
        let report = execute(&session, "spin", background("while (true) {}")).await;
        assert!(matches!(report.event, CellEvent::Yielded { .. }));
    }
    assert_eq!(session.active_cells(), 3);
    within("shutdown", session.shutdown()).await;
    assert_eq!(session.active_cells(), 0);
    assert!(matches!(
        session.execute(request("text(1)")).await,
        Err(SessionError::ShutDown)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cell_past_the_active_limit_is_refused_with_a_clear_error() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("limit", &store, SessionConfig::default()).await;
    for _ in 0..128 {
        let report = execute(&session, "start", background("await tools.gate();")).await;
        assert!(matches!(report.event, CellEvent::Yielded { .. }));
    }
    let refused = session.execute(background("text(1)")).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "too many active cells: this session already has 128 cells running or waiting to be observed \
         (the max_active_cells limit); wait for or terminate one before starting another"
    );
    tools.release();
    within("shutdown", session.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_cells_each_see_their_own_output() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("hundred", &store, SessionConfig::default()).await;
    let session = Arc::new(session);
    let runs: Vec<_> = (0..100)
        .map(|index| {
            let session = Arc::clone(&session);
            tokio::spawn(async move {
                let source = format!(
                    r#"const me = {index}; const echoed = await tools.echo({{me}}); await new Promise((r) => setTimeout(r, 1)); text(`cell ${{echoed.me}}`);"#
                );
                (index, session.execute(request(&source)).await.unwrap())
            })
        })
        .collect();
    for run in runs {
        let (index, report) = within("cell", run).await.unwrap();
        assert_eq!(texts(&report.event), [format!("cell {index}")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_budget_ends_a_spin_loop_with_an_error_naming_it() {
    let store = Arc::new(MemoryStore::default());
    let config = SessionConfig::default().with_cpu_time_limit(Some(Duration::from_millis(250)));
    let (session, _) = open("cpu", &store, config).await;
    let report = execute(
        &session,
        "spin",
        request(r#"text("spinning"); for (;;) {}"#),
    )
    .await;
    let CellEvent::Completed {
        error_text: Some(error),
        ..
    } = &report.event
    else {
        panic!("the spin loop fails: {report:?}")
    };
    assert!(error.starts_with("cpu time limit exceeded"), "{error}");
    assert!(
        error.contains("0.2 s of CPU time") || error.contains("0.3 s of CPU time"),
        "{error}"
    );
    assert_eq!(texts(&report.event), ["spinning"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_finishes_unobserved_is_pushed_to_subscribers() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("push", &store, SessionConfig::default()).await;
    let mut events = session.subscribe();
    let started = execute(
        &session,
        "start",
        background(r#"notify("half way"); await tools.gate(); text("finished");"#),
    )
    .await;
    assert!(matches!(started.event, CellEvent::Yielded { .. }));
    tools.release();
    let mut seen = Vec::new();
    loop {
        let event = within("session event", events.recv()).await.unwrap();
        seen.push(event.clone());
        if matches!(event, SessionEvent::CellFinished { .. }) {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            SessionEvent::Notification {
                cell_id: started.cell_id.clone(),
                call_id: "call-1".into(),
                text: "half way".into()
            },
            SessionEvent::CellFinished {
                cell_id: started.cell_id.clone(),
                error_text: None
            },
        ]
    );
    let report = observed(
        within("collect", session.wait(wait(&started.cell_id)))
            .await
            .unwrap(),
    );
    assert_eq!(texts(&report.event), ["finished"]);
    let CellEvent::Completed {
        result_buffered_for,
        ..
    } = report.event
    else {
        panic!()
    };
    assert!(result_buffered_for > Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_for_at_least_its_minimum_yield() {
    let store = Arc::new(MemoryStore::default());
    let config = SessionConfig::default().with_min_wait_yield_time(Duration::from_secs(20));
    let (session, _) = open("min-wait", &store, config).await;
    let started = execute(
        &session,
        "start",
        background(r#"await new Promise((r) => setTimeout(r, 100)); text("done");"#),
    )
    .await;
    // Asked to return at once, wait still holds long enough for the cell to finish.
    let report = observed(
        within(
            "wait",
            session.wait(WaitRequest {
                yield_time_ms: Some(0),
                ..wait(&started.cell_id)
            }),
        )
        .await
        .unwrap(),
    );
    assert!(
        matches!(report.event, CellEvent::Completed { .. }),
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_frontier_operations_report_outstanding_calls() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("frontier", &store, SessionConfig::default()).await;
    let report = within(
        "to pending",
        session.execute_to_pending(request(r#"const [a, b] = await Promise.all([tools.gate(), tools.gate()]); text(a.released + b.released);"#)),
    )
    .await
    .unwrap();
    let CellEvent::Pending {
        pending_tool_call_ids,
        ..
    } = &report.event
    else {
        panic!("{report:?}")
    };
    assert_eq!(pending_tool_call_ids, &["tool-1", "tool-2"]);
    tools.release();
    let finished = loop {
        let report = observed(
            within("wait to pending", session.wait_to_pending(&report.cell_id))
                .await
                .unwrap(),
        );
        if report.event.is_terminal() {
            break report;
        }
    };
    assert_eq!(texts(&finished.event), ["tool-1tool-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_to_commit_is_reported_in_the_cells_error() {
    let store = Arc::new(MemoryStore::default());
    store.fail_commits.store(true, Ordering::SeqCst);
    let (session, _) = open("full-disk", &store, SessionConfig::default()).await;
    let report = execute(&session, "run", request(r#"store("k", 1); text("ran");"#)).await;
    let CellEvent::Completed {
        error_text: Some(error),
        ..
    } = &report.event
    else {
        panic!("{report:?}")
    };
    assert_eq!(
        error,
        "the cell's stored values could not be saved: the disk is full"
    );
    assert_eq!(texts(&report.event), ["ran"]);
    assert!(session.stored_values().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_session_terminates_its_cells() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("dropped", &store, SessionConfig::default()).await;
    execute(&session, "spin", background("while (true) {}")).await;
    execute(&session, "tool", background("await tools.gate();")).await;
    let token = within("the gated call", async {
        loop {
            if let Some(token) = tools.tokens.lock().unwrap().first() {
                return token.clone();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(!token.is_cancelled());
    drop(session);
    // The gated call's cell is terminated, which cancels the call.
    within("the gated call to be cancelled", token.cancelled()).await;
    assert!(
        !tools.gate.is_cancelled(),
        "the gate itself was never opened"
    );
}

/// A store commit that takes as long as it likes holds no lock of the session or the cell: while
/// it waits, a second cell of the session can be started and terminated, and another session
/// can open and run a cell. Once the store answers, the committing cell completes with its values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_commit_blocks_neither_terminate_nor_other_sessions() {
    for commit_fails in [false, true] {
        let store = Arc::new(MemoryStore::default());
        store.hold_commits.store(true, Ordering::SeqCst);
        store.fail_commits.store(commit_fails, Ordering::SeqCst);
        let (session, _) = open("slow-store", &store, SessionConfig::default()).await;
        let committing = execute(
            &session,
            "a cell that stores",
            background(r#"text("stored"); store("k", 1);"#),
        )
        .await;
        within("the commit to begin", store.commit_started.cancelled()).await;

        let spinning = execute(&session, "a second cell", background("while (true) {}")).await;
        let terminated = within(
            "terminating the second cell during the commit",
            session.terminate(&spinning.cell_id),
        )
        .await
        .unwrap();
        assert!(matches!(
            observed(terminated).event,
            CellEvent::Terminated { .. }
        ));
        let other_store = Arc::new(MemoryStore::default());
        let (other, _) = within(
            "another session to open during the commit",
            open("another", &other_store, SessionConfig::default()),
        )
        .await;
        let report = execute(&other, "another session's cell", request(r#"text("hi")"#)).await;
        assert_eq!(texts(&report.event), ["hi"]);

        // The committing cell has claimed its outcome: terminating it now gets its completion,
        // once the store answers.
        // (`join!` polls the termination first, so it is requested before the store answers.)
        let (outcome, ()) = within("the committing cell", async {
            tokio::join!(
                session.wait(WaitRequest {
                    terminate: true,
                    ..wait(&committing.cell_id)
                }),
                async { store.release_commits.cancel() }
            )
        })
        .await;
        let outcome = outcome.unwrap();
        let CellEvent::Completed { error_text, .. } = &observed(outcome).event else {
            panic!("a claimed completion wins over a later termination");
        };
        if commit_fails {
            assert_eq!(
                error_text.as_deref(),
                Some("the cell's stored values could not be saved: the disk is full")
            );
            assert!(session.stored_values().is_empty());
        } else {
            assert_eq!(error_text, &None);
            assert_eq!(session.stored_values()["k"], json!(1));
        }
    }
}

fn error_text(event: &CellEvent) -> String {
    match event {
        CellEvent::Completed { error_text, .. } => error_text.clone().unwrap_or_default(),
        other => panic!("expected a completed cell, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_past_the_session_limit_is_refused_by_name_and_saves_nothing() {
    let store = Arc::new(MemoryStore::default());
    let config = SessionConfig::default().with_max_stored_bytes(4096);
    let (session, _) = open("capped", &store, config).await;
    let fits = execute(
        &session,
        "fits",
        request(r#"store("a", "x".repeat(3000));"#),
    )
    .await;
    assert_eq!(error_text(&fits.event), "");
    // Together with "a", past 4 KiB: refused whole, "b" and "c" both unsaved.
    let past = execute(
        &session,
        "past",
        request(r#"store("c", 1); store("b", "y".repeat(2000)); text("ran");"#),
    )
    .await;
    assert_eq!(texts(&past.event), ["ran"]);
    let error = error_text(&past.event);
    assert!(
        error.contains("stored values could not be saved")
            && error.contains("past its limit of 4 KiB"),
        "{error}"
    );
    let values = session.stored_values();
    assert_eq!(values.len(), 1, "{values:?}");
    assert!(!store.sessions.lock().unwrap()["capped"].contains_key("b"));
    // Overwriting "a" with less fits again, and frees room.
    let smaller = execute(
        &session,
        "smaller",
        request(r#"store("a", "z"); store("b", "y".repeat(2000));"#),
    )
    .await;
    assert_eq!(error_text(&smaller.event), "");
    assert_eq!(session.stored_bytes(), "a".len() + 3 + "b".len() + 2002);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_a_budget_are_refused_together_and_freed_when_dropped() {
    let store = Arc::new(MemoryStore::default());
    let tenant =
        codemode_session::StoredBytesBudget::new("the stored values of tenant \"t\"", 5000);
    let config = SessionConfig::default().with_stored_bytes_budget(tenant.clone());
    let (first, _) = open("first", &store, config.clone()).await;
    let (second, _) = open("second", &store, config.clone()).await;
    let store_3000 = r#"store("k", "x".repeat(3000));"#;
    let one = execute(&first, "one", request(store_3000)).await;
    assert_eq!(error_text(&one.event), "");
    let two = execute(&second, "two", request(store_3000)).await;
    let error = error_text(&two.event);
    assert!(
        error.contains("tenant \"t\"") && error.contains("past the limit of 5000 bytes"),
        "{error}"
    );
    assert_eq!(tenant.used(), "k".len() + 3002);
    first.shutdown().await;
    drop(first);
    assert_eq!(tenant.used(), 0);
    let again = execute(&second, "again", request(store_3000)).await;
    assert_eq!(error_text(&again.event), "");
    // A session that reopens with values already stored counts them at once.
    let (reopened, _) = open("first", &store, config).await;
    assert_eq!(tenant.used(), 2 * ("k".len() + 3002));
    drop(reopened);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_that_change_are_listed_again_for_the_cells_that_start_after() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("changing", &store, SessionConfig::default()).await;
    let names = r#"text(ALL_TOOLS.map((tool) => tool.name).join(","))"#;
    let before = execute(&session, "before", request(names)).await;
    assert_eq!(texts(&before.event), ["echo,fail,gate,web__search"]);
    assert!(!session.exec_description().contains("late_arrival"));
    tools.add_tool("late_arrival");
    let after = execute(
        &session,
        "after",
        request(&format!(
            "{names}; text(JSON.stringify(await tools.late_arrival()))"
        )),
    )
    .await;
    assert_eq!(
        texts(&after.event),
        [
            "echo,fail,gate,web__search,late_arrival",
            r#"{"added":"late_arrival"}"#
        ]
    );
    assert!(session.exec_description().contains("late_arrival"));
    assert_eq!(session.tools().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_activity_hook_hears_each_cell_started_its_tool_calls_and_its_close() {
    use codemode_session::CellActivity;
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut config = SessionConfig::default();
    config.cell_id_prefix = Some("a1b2c3d4e5f6".into());
    config.tenant = Some("acme".into());
    config.on_cell_activity = Some({
        let heard = Arc::clone(&heard);
        Arc::new(move |activity| heard.lock().unwrap().push(activity))
    });
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("journaled", &store, config).await;
    let report = execute(
        &session,
        "two calls",
        request("await tools.echo(1); await tools.echo(2); text('done');"),
    )
    .await;
    assert_eq!(texts(&report.event), ["done"]);
    within("the cell to close", async {
        while !heard
            .lock()
            .unwrap()
            .iter()
            .any(|activity| matches!(activity, CellActivity::CellClosed { .. }))
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let started = |call_id: &str| CellActivity::ToolCallStarted {
        session: "journaled".into(),
        cell_id: CellId::on_server("a1b2c3d4e5f6", 1),
        call_id: call_id.into(),
        tool: "echo".into(),
    };
    let heard = heard.lock().unwrap().clone();
    // The cell's start and its first call race (the cell runs while it is being registered);
    // its calls start and end in order, it ends after its last call, and its close comes last.
    let cell_started = CellActivity::CellStarted {
        session: "journaled".into(),
        cell_id: CellId::on_server("a1b2c3d4e5f6", 1),
        tenant: Some("acme".into()),
    };
    assert_eq!(heard.len(), 7, "{heard:?}");
    assert!(heard[..3].contains(&cell_started), "{heard:?}");
    let calls: Vec<_> = heard
        .iter()
        .filter(|activity| matches!(activity, CellActivity::ToolCallStarted { .. }))
        .cloned()
        .collect();
    assert_eq!(calls, [started("tool-1"), started("tool-2")]);
    let ended: Vec<_> = heard
        .iter()
        .filter_map(|activity| match activity {
            CellActivity::ToolCallEnded {
                call_id,
                tool,
                server,
                decision,
                outcome,
                ..
            } => Some((
                call_id.clone(),
                tool.clone(),
                server.clone(),
                *decision,
                *outcome,
            )),
            _ => None,
        })
        .collect();
    let allowed = codemode_session::GateDecision::Allowed;
    assert_eq!(
        ended,
        [
            ("tool-1".into(), "echo".into(), None, allowed, "ok"),
            ("tool-2".into(), "echo".into(), None, allowed, "ok"),
        ]
    );
    match &heard[5] {
        CellActivity::CellEnded {
            outcome,
            tool_calls,
            tenant,
            ..
        } => assert_eq!(
            (*outcome, *tool_calls, tenant.clone()),
            ("completed", 2, Some("acme".into()))
        ),
        other => panic!("the cell's end is not sixth: {other:?} in {heard:?}"),
    }
    assert_eq!(
        heard[6],
        CellActivity::CellClosed {
            session: "journaled".into(),
            cell_id: CellId::on_server("a1b2c3d4e5f6", 1),
        }
    );
}

/// Counts the live tickets it made: each ticket decrements the count when dropped.
#[derive(Clone, Default)]
struct TicketCount(Arc<std::sync::atomic::AtomicUsize>);

struct CountedTicket(TicketCount);

impl Drop for CountedTicket {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl TicketCount {
    fn ticket(&self) -> codemode_session::CellTicket {
        self.0.fetch_add(1, Ordering::SeqCst);
        codemode_session::CellTicket::new(CountedTicket(self.clone()))
    }

    fn live(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cells_ticket_is_held_while_the_session_counts_it_and_dropped_when_it_leaves() {
    use codemode_session::ExecOptions;
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("tickets", &store, SessionConfig::default()).await;
    let tickets = TicketCount::default();
    // A cell that ends within its yield time leaves the registry as it is observed.
    let done = session
        .exec_tool_with(
            "a",
            "text(1)",
            ExecOptions::default().with_ticket(tickets.ticket()),
        )
        .await;
    assert!(!done.is_error, "{done:?}");
    assert_eq!((tickets.live(), session.active_cells()), (0, 0));
    // A running cell holds its ticket until it is terminated.
    let running = session
        .exec_tool_with(
            "b",
            "// @exec: {\"yield_time_ms\": 0}\nawait new Promise(() => {});",
            ExecOptions::default().with_ticket(tickets.ticket()),
        )
        .await;
    let cell_id = running.running_cell_id.clone().expect("the cell runs on");
    assert_eq!((tickets.live(), session.active_cells()), (1, 1));
    terminate(&session, "terminate", &cell_id).await;
    assert_eq!((tickets.live(), session.active_cells()), (0, 0));
    // A cell that never starts gives its ticket back at once.
    let refused = session
        .exec_tool_with(
            "c",
            &"x".repeat(codemode_protocol::limits::MAX_SOURCE_BYTES + 1),
            ExecOptions::default().with_ticket(tickets.ticket()),
        )
        .await;
    assert!(refused.is_error, "{refused:?}");
    assert_eq!(tickets.live(), 0);
}
