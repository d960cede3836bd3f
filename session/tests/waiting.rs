//! Waits that cost nothing, on QuickJS: a `wait` with nothing new holds on until its cell has
//! news (output, its end, a call waiting for the user) or the session's maximum passes; one wait
//! watches several cells; a quiet result says what the cell waits on.

mod common;

use std::sync::Arc;
use std::time::Duration;

use codemode_protocol::WaitRequest;
use codemode_session::{
    Approval, ApprovalRequest, CellEvent, Permissions, SessionConfig, UserChannel, WaitOutcome,
    render_report, render_text,
};
use common::{MemoryStore, background, execute, observed, open, terminate, texts, within};

fn wait(cell_id: impl ToString, yield_time_ms: u64) -> WaitRequest {
    WaitRequest {
        cell_id: cell_id.to_string(),
        yield_time_ms: Some(yield_time_ms),
        max_tokens: None,
        terminate: false,
        cell_ids: Vec::new(),
    }
}

fn holding(max_wait: Duration) -> SessionConfig {
    let mut config = SessionConfig::default().with_min_wait_yield_time(Duration::ZERO);
    config.max_wait = Some(max_wait);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_nothing_new_holds_until_the_cell_has_output() {
    let store = Arc::new(MemoryStore::default());
    let code = "await tools.gate(); text('released'); await tools.gate();";
    // Without holding, a wait at its yield time returns nothing new.
    let (plain, tools) = open(
        "plain",
        &store,
        SessionConfig::default().with_min_wait_yield_time(Duration::ZERO),
    )
    .await;
    let started = execute(&plain, "start", background(code)).await;
    let empty = observed(
        within("wait", plain.wait(wait(&started.cell_id, 50)))
            .await
            .unwrap(),
    );
    assert!(matches!(&empty.event, CellEvent::Yielded { output } if output.is_empty()));
    tools.release();
    terminate(&plain, "stop", &started.cell_id).await;

    // Holding: one wait, whose yield time is far shorter than the tool, returns the output.
    let (session, tools) = open("holding", &store, holding(Duration::from_secs(60))).await;
    let started = execute(&session, "start", background(code)).await;
    let release = tokio::spawn({
        let tools = Arc::clone(&tools);
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tools.release();
        }
    });
    let news = observed(
        within("wait", session.wait(wait(&started.cell_id, 50)))
            .await
            .unwrap(),
    );
    release.await.unwrap();
    assert_eq!(texts(&news.event), ["released"]);
    assert!(news.quiet.is_none());
    assert!(
        news.wall_time >= Duration::from_millis(250),
        "{:?}",
        news.wall_time
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_wait_says_how_long_and_what_the_cell_waits_on() {
    let store = Arc::new(MemoryStore::default());
    let (session, _tools) = open("quiet", &store, holding(Duration::from_millis(400))).await;
    let started = execute(&session, "start", background("await tools.gate();")).await;
    let quiet = observed(
        within("wait", session.wait(wait(&started.cell_id, 100)))
            .await
            .unwrap(),
    );
    assert!(matches!(&quiet.event, CellEvent::Yielded { output } if output.is_empty()));
    let said = quiet.quiet.as_ref().expect("a quiet result");
    assert!(said.quiet_for >= Duration::from_millis(400), "{said:?}");
    assert_eq!(said.calls.len(), 1, "{said:?}");
    assert_eq!(said.calls[0].tool, "gate");
    let rendered = render_text(&render_report(&quiet, 1000));
    assert!(rendered.contains("Nothing new for 0."), "{rendered}");
    assert!(
        rendered.contains("Waiting on tool-1 tools.gate (running for"),
        "{rendered}"
    );
    terminate(&session, "stop", &started.cell_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wait_watches_several_cells_and_returns_those_with_news() {
    let store = Arc::new(MemoryStore::default());
    let (session, _tools) = open("several", &store, holding(Duration::from_secs(60))).await;
    let slow = execute(&session, "slow", background("await tools.gate();")).await;
    let quick = execute(
        &session,
        "quick",
        background("await new Promise((r) => setTimeout(r, 200)); text('quick done');"),
    )
    .await;
    let mut request = wait(&slow.cell_id, 30_000);
    request.cell_ids = vec![quick.cell_id.to_string(), slow.cell_id.to_string()];
    let outcomes = within("wait", session.wait_many(request)).await.unwrap();
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let report = observed(outcomes.into_iter().next().unwrap());
    assert_eq!(report.cell_id, quick.cell_id);
    assert!(matches!(
        report.event,
        CellEvent::Completed {
            error_text: None,
            ..
        }
    ));
    assert_eq!(texts(&report.event), ["quick done"]);
    // The slow cell was observed too, and let go: it is still there for the next wait.
    let stopped = terminate(&session, "stop", &slow.cell_id).await;
    assert!(matches!(stopped.event, CellEvent::Terminated { .. }));
    // An unknown id among them is an answer of its own.
    let mut request = wait("99", 30_000);
    request.cell_ids = vec!["1".into()];
    let outcomes = within("wait", session.wait_many(request)).await.unwrap();
    assert!(matches!(&outcomes[0], WaitOutcome::NotFound { cell_id } if cell_id == "99"));
}

/// `future`, which must end long before a 30 s yield time (a hang guard a third of it): a wait
/// the question should end must not sit out its yield.
async fn promptly<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} sat out its 30 s yield time instead of returning"))
}

/// An approver that never answers, and counts the questions.
#[derive(Default)]
struct Silent {
    asked: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl UserChannel for Silent {
    async fn ask_approval(&self, request: &ApprovalRequest) -> Approval {
        self.asked.lock().unwrap().push(request.tool.clone());
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_starts_waiting_for_the_user_ends_a_holding_wait() {
    let store = Arc::new(MemoryStore::default());
    let approver = Arc::new(Silent::default());
    let config = holding(Duration::from_secs(60))
        .with_permissions(Permissions::ask_by_default())
        .with_user(Arc::clone(&approver) as Arc<dyn UserChannel>);
    let (session, tools) = open("asking", &store, config).await;
    // The wait starts first; the question comes while it holds.
    let started = execute(
        &session,
        "start",
        background("await new Promise((r) => setTimeout(r, 300)); await tools.echo({rm: '-rf'});"),
    )
    .await;
    let asked = observed(
        promptly("the wait", session.wait(wait(&started.cell_id, 30_000)))
            .await
            .unwrap(),
    );
    assert_eq!(asked.awaiting_approval.len(), 1, "{asked:?}");
    assert_eq!(asked.awaiting_approval[0].tool, "echo");
    assert!(
        asked.awaiting_approval[0]
            .arguments
            .contains("\"rm\": \"-rf\"")
    );
    let rendered = render_text(&render_report(&asked, 1000));
    assert!(
        rendered.contains("Waiting for approval (0 s): tool-1 tools.echo("),
        "{rendered}"
    );
    // A wait that starts with the question already waiting returns at once, saying so again.
    let again = observed(
        promptly(
            "the second wait",
            session.wait(wait(&started.cell_id, 30_000)),
        )
        .await
        .unwrap(),
    );
    assert_eq!(again.awaiting_approval.len(), 1);
    assert_eq!(*approver.asked.lock().unwrap(), ["echo"]);
    // Nothing reached the tool while it waited.
    assert!(tools.calls.lock().unwrap().is_empty());
    terminate(&session, "stop", &started.cell_id).await;
}
