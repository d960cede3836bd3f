//! Instrumentation: spans per cell and per tool call, events for the cell's outcome, and no output
//! content or tool arguments in the logs unless the embedder opts in.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use codemode_session::SessionConfig;
use common::{MemoryStore, execute, open, request, texts};
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

/// Captures what is logged at `level` and above while the guard is held.
fn capture(level: tracing::Level) -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(level)
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

/// The log captured so far.
fn log_of(captured: &Captured) -> String {
    String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
}

/// Runs a cell that calls a tool with a secret argument and prints a secret, and returns the log.
async fn log_of_a_cell(log_content: bool) -> String {
    let (captured, _default) = capture(tracing::Level::DEBUG);
    let store = Arc::new(MemoryStore::default());
    let config = SessionConfig::default().with_log_content(log_content);
    let (session, _) = open("logged", &store, config).await;
    let report = execute(&session, "cell", request(r#"const r = await tools.echo({ password: "hunter2-argument" }); text("secret-output-text");"#)).await;
    assert!(report.event.is_terminal());
    log_of(&captured)
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
    let (captured, _default) = capture(tracing::Level::INFO);
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
    let log = log_of(&captured);
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

/// A user channel that answers the questions in turn with the answers it was given.
struct Answers(Mutex<Vec<codemode_session::Approval>>);

#[async_trait::async_trait]
impl codemode_session::UserChannel for Answers {
    async fn ask_approval(
        &self,
        _request: &codemode_session::ApprovalRequest,
    ) -> codemode_session::Approval {
        self.0.lock().unwrap().remove(0)
    }
}

#[tokio::test]
async fn a_question_declined_dismissed_or_denied_is_told_apart_in_the_error_and_the_event() {
    use codemode_session::{Approval, Permissions, RulesFile};
    let (captured, _default) = capture(tracing::Level::INFO);
    let store = Arc::new(MemoryStore::default());
    let answers = Answers(Mutex::new(vec![
        Approval::Declined {
            by: "the MCP client \"codex-mcp-client\"".to_owned(),
        },
        Approval::Dismissed {
            by: "the MCP client \"claude-code\"".to_owned(),
        },
        Approval::Deny {
            by: "the user, who chose \"Deny\"".to_owned(),
        },
    ]));
    let permissions = Permissions::ask_by_default().with_file(RulesFile::Json {
        path: "/home/u/project/.mcp.json".to_owned(),
    });
    let config = SessionConfig::default()
        .with_permissions(permissions)
        .with_user(Arc::new(answers));
    let (session, tools) = open("asked", &store, config).await;
    let report = execute(
        &session,
        "cell",
        request(
            r#"for (const i of [1, 2, 3]) {
                 try { await tools.echo({ i }); } catch (e) { text(e.message); }
               }"#,
        ),
    )
    .await;
    let all = texts(&report.event).join("\n");
    let errors: Vec<&str> = all.lines().collect();
    assert_eq!(errors.len(), 3, "{all}");
    let allow_rule =
        "add \"echo\" to \"permissions\": {\"allow\": [...]} in /home/u/project/.mcp.json";
    assert!(
        errors[0].contains(
            "the question was declined by the MCP client \"codex-mcp-client\" without a choice"
        ) && errors[0].contains("no one may have seen it")
            && errors[0].contains(allow_rule),
        "{all}"
    );
    assert!(
        errors[1].contains(
            "the question was dismissed by the MCP client \"claude-code\" without a choice"
        ) && errors[1].contains("no one may have seen it")
            && errors[1].contains(allow_rule),
        "{all}"
    );
    assert_eq!(
        errors[2],
        "tools.echo was denied by the user, who chose \"Deny\"; nothing was sent to the tool"
    );
    let log = log_of(&captured);
    let rulings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("tool call ruled"))
        .collect();
    assert_eq!(rulings.len(), 3, "{log}");
    for (ruling, decision) in rulings
        .iter()
        .zip(["declined", "dismissed", "denied_by_user"])
    {
        assert!(ruling.contains("verdict=\"deny\""), "{ruling}");
        assert!(
            ruling.contains(&format!("decision=\"{decision}\"")),
            "{decision}: {ruling}"
        );
    }
    assert!(tools.calls.lock().unwrap().is_empty());
}
