//! Instrumentation: spans per cell and per tool call, events for the cell's outcome, and no output
//! content or tool arguments in the logs unless the embedder opts in.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use codemode_session::SessionConfig;
use common::{MemoryStore, execute, open, request};
use tracing_subscriber::fmt::MakeWriter;

/// Collects everything logged while it is the thread's default subscriber.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Runs a cell that calls a tool with a secret argument and prints a secret, and returns the log.
async fn log_of_a_cell(log_content: bool) -> String {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let store = Arc::new(MemoryStore::default());
    let config = SessionConfig::default().with_log_content(log_content);
    let (session, _) = open("logged", &store, config).await;
    let report = execute(&session, "cell", request(r#"const r = await tools.echo({ password: "hunter2-argument" }); text("secret-output-text");"#)).await;
    assert!(report.event.is_terminal());
    let bytes = captured.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn logs_carry_spans_and_outcomes_but_no_content_by_default() {
    let log = log_of_a_cell(false).await;
    assert!(log.contains("cell started"), "{log}");
    assert!(log.contains("tool_call"), "{log}");
    assert!(log.contains("tool=echo"), "{log}");
    assert!(log.contains("call_id=tool-1"), "{log}");
    assert!(log.contains("outcome=\"ok\""), "{log}");
    assert!(log.contains("duration_ms="), "{log}");
    assert!(log.contains("cell completed"), "{log}");
    assert!(log.contains("cell_id=1"), "{log}");
    assert!(
        !log.contains("hunter2-argument"),
        "tool arguments leaked into the log:\n{log}"
    );
    assert!(
        !log.contains("secret-output-text"),
        "output leaked into the log:\n{log}"
    );
}

#[tokio::test]
async fn an_embedder_can_opt_in_to_logging_tool_content() {
    let log = log_of_a_cell(true).await;
    assert!(log.contains("hunter2-argument"), "{log}");
}

#[tokio::test]
async fn every_ruling_of_the_gate_is_an_event_with_a_digest_not_the_arguments() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let store = Arc::new(MemoryStore::default());
    let permissions = codemode_session::Permissions::allow_all()
        .with_rule(codemode_session::Verdict::Deny, "fail");
    let config = SessionConfig::default().with_permissions(permissions);
    let (session, tools) = open("ruled", &store, config).await;
    let report = execute(
        &session,
        "cell",
        request(
            r#"await tools.echo({ password: "hunter2-argument" });
               try { await tools.fail({ x: 1 }); } catch (e) { text(e.message); }"#,
        ),
    )
    .await;
    assert!(report.event.is_terminal());
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let rulings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("tool call ruled"))
        .collect();
    assert_eq!(rulings.len(), 2, "{log}");
    assert!(rulings[0].contains("codemode::gate"), "{log}");
    assert!(rulings[0].contains("tool=\"echo\""), "{log}");
    assert!(rulings[0].contains("verdict=\"allow\""), "{log}");
    assert!(
        rulings[0].contains("decided_by=\"the default permission\""),
        "{log}"
    );
    assert!(rulings[0].contains("arguments_sha256="), "{log}");
    assert!(rulings[1].contains("tool=\"fail\""), "{log}");
    assert!(rulings[1].contains("verdict=\"deny\""), "{log}");
    assert!(
        rulings[1].contains("decided_by=\"the rule \\\"deny: fail\\\"\""),
        "{log}"
    );
    assert!(!log.contains("hunter2"), "{log}");
    // The denied call never reached the provider.
    let called: Vec<String> = tools
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|call| call.name.name.clone())
        .collect();
    assert_eq!(called, ["echo"]);
}
