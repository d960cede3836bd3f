//! The one gate every nested call passes, from outside: real `codemode` processes, the demo MCP
//! server as the downstream (its `add` is read-only, `note` unannotated, `forget` destructive;
//! both of the latter append to a notes file, so a test counts the calls that really reached
//! it), and a client speaking JSON-RPC by hand that answers (or cannot answer) the server's
//! `elicitation/create` questions; and what a downstream server asks of the user (here its log
//! messages; its elicitation and sampling are in `real_servers.rs`), passed on to that client.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use codemode_test_support::within;
use common::{CODEMODE, RawClient, codemode_with_input, raw_text, running_cell_id};
use serde_json::{Value, json};

fn scratch(name: &str) -> PathBuf {
    codemode_test_support::scratch_folder(&format!("gate-{name}"))
}

/// A configuration with the demo server (its notes in `folder/notes`) and `extra` top-level
/// keys (`permissions`), and `server_extra` keys in the server's entry.
fn write_config(folder: &Path, extra: Value, server_extra: Value) -> PathBuf {
    let mut server = json!({"command": CODEMODE, "args": ["demo-mcp-server"],
        "env": {"CODEMODE_DEMO_NOTES": folder.join("notes")}});
    for (key, value) in server_extra.as_object().unwrap() {
        server[key] = value.clone();
    }
    let mut document = json!({"mcpServers": {"demo": server}});
    for (key, value) in extra.as_object().unwrap() {
        document[key] = value.clone();
    }
    let path = folder.join("mcp.json");
    std::fs::write(&path, document.to_string()).unwrap();
    path
}

/// The lines the demo server's `note` and `forget` wrote: the calls that reached it.
fn notes(folder: &Path) -> Vec<String> {
    std::fs::read_to_string(folder.join("notes"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `codemode run --config CONFIG ARGS… -` with `code`: its standard output.
fn run(config: &Path, args: &[&str], code: &str) -> String {
    let mut all = vec!["run".to_owned(), "--config".to_owned()];
    all.push(config.display().to_string());
    all.extend(args.iter().map(|arg| (*arg).to_owned()));
    all.push("-".to_owned());
    let output = codemode_with_input(all, code);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A cell that calls `call` and prints what it resolved with, or the message it rejected with.
fn attempt(call: &str) -> String {
    format!(
        "try {{ const r = await {call}; text('ok ' + JSON.stringify(r.structuredContent ?? r.content[0].text)); }} \
         catch (e) {{ text('refused: ' + e.message); }}"
    )
}

#[test]
fn without_a_terminal_reads_run_and_writes_are_refused_unless_approve_all() {
    let folder = scratch("run-policy");
    let config = write_config(&folder, json!({}), json!({}));
    // Read-only by annotation: runs under the default rules.
    let read = run(&config, &[], &attempt("tools.demo__add({a: 2, b: 3})"));
    assert!(read.contains("ok {\"sum\":5}"), "{read}");
    // Unannotated: it would ask, there is no terminal, and `--approve reads` refuses it.
    let refused = run(&config, &[], &attempt("tools.demo__note({text: 'one'})"));
    assert!(
        refused.contains("refused: tools.demo__note was denied by --approve reads"),
        "{refused}"
    );
    assert!(
        refused.contains("nothing was sent to the tool"),
        "{refused}"
    );
    assert_eq!(notes(&folder), Vec::<String>::new());
    let never = run(
        &config,
        &["--approve", "never"],
        &attempt("tools.demo__note({text: 'two'})"),
    );
    assert!(never.contains("denied by --approve never"), "{never}");
    assert_eq!(notes(&folder), Vec::<String>::new());
    // `--approve all` lets it through: the server sees the call.
    let approved = run(
        &config,
        &["--approve", "all"],
        &attempt("tools.demo__note({text: 'three'})"),
    );
    assert!(approved.contains("ok \"noted\""), "{approved}");
    assert_eq!(notes(&folder), ["three"]);
}

#[test]
fn deny_rules_win_and_allow_rules_and_auto_approve_let_calls_run() {
    let folder = scratch("rules");
    let config = write_config(
        &folder,
        json!({"permissions": {"allow": ["demo__*"], "deny": ["demo__forg*"]}}),
        json!({}),
    );
    let outcome = run(
        &config,
        &["--approve", "all"],
        &format!(
            "{}\n{}",
            attempt("tools.demo__forget({text: 'x'})"),
            attempt("tools.demo__note({text: 'allowed'})")
        ),
    );
    assert!(
        outcome.contains(
            "refused: tools.demo__forget was denied by the rule \"deny: demo__forg*\" in the \
             permissions of the configuration; nothing was sent to the tool"
        ),
        "{outcome}"
    );
    assert!(outcome.contains("ok \"noted\""), "{outcome}");
    assert_eq!(notes(&folder), ["allowed"]);

    // A server entry's autoApprove names tools that run without asking; everything else still
    // follows the default.
    let folder = scratch("auto-approve");
    let config = write_config(&folder, json!({}), json!({"autoApprove": ["note"]}));
    let outcome = run(
        &config,
        &[],
        &format!(
            "{}\n{}",
            attempt("tools.demo__note({text: 'auto'})"),
            attempt("tools.demo__forget({text: 'y'})")
        ),
    );
    assert!(outcome.contains("ok \"noted\""), "{outcome}");
    assert!(
        outcome.contains("refused: tools.demo__forget was denied by --approve reads"),
        "{outcome}"
    );
    assert_eq!(notes(&folder), ["auto"]);
}

#[test]
fn disabled_and_enabled_tools_leave_the_cells_view() {
    let folder = scratch("filters");
    let config = write_config(
        &folder,
        json!({}),
        json!({"enabledTools": ["add", "note", "forget"], "disabledTools": ["forget"]}),
    );
    let listed = run(
        &config,
        &["--no-demo-tools"],
        "text(JSON.stringify(ALL_TOOLS.map((t) => [t.name, t.annotations ?? null])))",
    );
    let last = listed.lines().last().unwrap_or_default();
    let tools: Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("{listed}"));
    // Only what is enabled and not disabled, with the server's annotations kept.
    assert_eq!(
        tools,
        json!([["demo__add", {"readOnlyHint": true}], ["demo__note", null]])
    );
    let declared = run(
        &config,
        &["--no-demo-tools"],
        "text(ALL_TOOLS.find((t) => t.name === 'demo__add').declaration)",
    );
    assert!(declared.contains("@effects read-only"), "{declared}");
    let unlisted = run(&config, &[], &attempt("tools.demo__forget({text: 'z'})"));
    assert!(unlisted.contains("refused"), "{unlisted}");
    assert_eq!(notes(&folder), Vec::<String>::new());
}

#[test]
fn the_budget_of_writes_per_cell_refuses_the_call_past_it() {
    let folder = scratch("budget");
    let config = write_config(&folder, json!({"permissions": {"allow": ["*"]}}), json!({}));
    let outcome = run(
        &config,
        &["--max-writes-per-cell", "2"],
        &format!(
            "{}\n{}\n{}\n{}",
            attempt("tools.demo__add({a: 1, b: 1})"),
            attempt("tools.demo__note({text: 'w1'})"),
            attempt("tools.demo__forget({text: 'w2'})"),
            attempt("tools.demo__note({text: 'w3'})"),
        ),
    );
    assert!(
        outcome.contains("refused: tools.demo__note: this cell has made 2 calls that are not read-only, its limit (--max-writes-per-cell 2)"),
        "{outcome}"
    );
    // Reads do not count; the third write never reached the server.
    assert_eq!(notes(&folder), ["w1", "forgot: w2"]);
}

/// [`RawClient::until_response`], answering `elicitation/create` with `decide(params)`; returns
/// the questions' params.
async fn until_response(
    client: &mut RawClient,
    id: i64,
    mut decide: impl FnMut(&Value) -> Option<Value>,
) -> (Vec<Value>, Value) {
    let (asked, last) = client
        .until_response(id, |request| {
            assert_eq!(request["method"], "elicitation/create", "{request}");
            decide(&request["params"])
        })
        .await;
    (
        asked
            .into_iter()
            .map(|request| request["params"].clone())
            .collect(),
        last,
    )
}

fn decision(decision: &str) -> Value {
    json!({"action": "accept", "content": {"decision": decision}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_elicitation_is_asked_and_its_answers_are_followed() {
    let folder = scratch("elicitation");
    let config = write_config(&folder, json!({}), json!({}));
    let config = config.display().to_string();
    let mut client =
        RawClient::start_with(&["--config", &config], json!({"elicitation": {"form": {}}})).await;

    // Allow once: the call runs, and the question named the server, the tool, its effects
    // and its arguments.
    client
        .call(
            1,
            "exec",
            json!({"code": attempt("tools.demo__forget({text: 'first'})")}),
            json!({}),
        )
        .await;
    let (asked, response) = until_response(&mut client, 1, |_| Some(decision("allow_once"))).await;
    assert!(raw_text(&response).contains("ok \"noted\""), "{response}");
    assert_eq!(asked.len(), 1);
    let message = asked[0]["message"].as_str().unwrap();
    for expected in [
        "demo__forget",
        "on the server \"demo\"",
        "writes, destructive",
        "\"text\": \"first\"",
        "the default permission",
    ] {
        assert!(message.contains(expected), "{expected}: {message}");
    }
    assert_eq!(
        asked[0]["requestedSchema"]["required"],
        json!(["decision"]),
        "{}",
        asked[0]
    );

    // A question declined or dismissed without a choice (what `codex exec` and `claude -p`
    // answer, with nobody to show it): the cell's error says so, names the client, and names the
    // rule that lets the call run unasked and the file it goes in; nothing reaches the server.
    for (id, action, how) in [(2, "decline", "declined"), (21, "cancel", "dismissed")] {
        client
            .call(
                id,
                "exec",
                json!({"code": attempt("tools.demo__note({text: 'unseen'})")}),
                json!({}),
            )
            .await;
        let (_, response) =
            until_response(&mut client, id, |_| Some(json!({"action": action}))).await;
        let text = raw_text(&response);
        for expected in [
            "refused: tools.demo__note was not run: it needs the user's approval".to_owned(),
            format!("the question was {how} by the MCP client \"raw\" without a choice"),
            format!("{how} every question, so no one may have seen it"),
            "Nothing was sent to the tool".to_owned(),
            format!("add \"demo__note\" to \"permissions\": {{\"allow\": [...]}} in {config}"),
        ] {
            assert!(text.contains(&expected), "{expected}\n{response}");
        }
        assert!(!text.contains("denied by the user"), "{response}");
    }

    // Allow for the session: asked once, then never again for that tool.
    let twice = format!(
        "{}\n{}",
        attempt("tools.demo__note({text: 'session 1'})"),
        attempt("tools.demo__note({text: 'session 2'})")
    );
    client
        .call(3, "exec", json!({"code": twice}), json!({}))
        .await;
    let (asked, response) =
        until_response(&mut client, 3, |_| Some(decision("allow_session"))).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        raw_text(&response).matches("ok \"noted\"").count(),
        2,
        "{response}"
    );
    client
        .call(
            4,
            "exec",
            json!({"code": attempt("tools.demo__note({text: 'session 3'})")}),
            json!({}),
        )
        .await;
    let (asked, _) = until_response(&mut client, 4, |_| Some(decision("deny"))).await;
    assert!(asked.is_empty(), "{asked:?}");
    // A rule-free tool other than the one allowed still asks.
    client
        .call(
            5,
            "exec",
            json!({"code": attempt("tools.demo__forget({text: 'no'})")}),
            json!({}),
        )
        .await;
    let (asked, response) = until_response(&mut client, 5, |_| Some(decision("deny"))).await;
    assert_eq!(asked.len(), 1);
    // An explicit "Deny" is the user's refusal, and says so.
    assert!(
        raw_text(&response)
            .contains("refused: tools.demo__forget was denied by the user, who chose \"Deny\""),
        "{response}"
    );
    assert_eq!(
        notes(&folder),
        ["forgot: first", "session 1", "session 2", "session 3"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_approval_stays_pending_and_a_client_that_cannot_be_asked_is_refused() {
    let folder = scratch("pending");
    let config = write_config(&folder, json!({}), json!({}));
    let config = config.display().to_string();
    let mut client =
        RawClient::start_with(&["--config", &config], json!({"elicitation": {}})).await;
    let code = format!(
        "// @exec: {{\"yield_time_ms\": 300}}\ntext('before');\n{}",
        attempt("tools.demo__note({text: 'later'})")
    );
    client
        .call(1, "exec", json!({"code": code}), json!({}))
        .await;
    // The question arrives; nobody answers it yet, and exec returns at its yield time.
    let (_, question) = until_response(&mut client, 1, |_| None).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let running = raw_text(&client.response(1).await);
    assert!(
        running.starts_with("Script running with cell ID"),
        "{running}"
    );
    assert!(
        running.contains("Waiting for approval") && running.contains("tools.demo__note"),
        "{running}"
    );
    assert!(running.contains("\"later\""), "{running}");
    assert_eq!(notes(&folder), Vec::<String>::new());
    // The answer comes; the cell goes on and the call reaches the server.
    client
        .send(json!({"jsonrpc": "2.0", "id": question["id"], "result": decision("allow_once")}))
        .await;
    let cell_id = running_cell_id(&running);
    // A wait that starts before the server has read the answer still sees the question waiting
    // (that is news, so it returns at once): wait again until the cell ends.
    let mut finished = String::new();
    for id in 2..6 {
        client
            .call(
                id,
                "wait",
                json!({"cell_id": cell_id, "yield_time_ms": 10000}),
                json!({}),
            )
            .await;
        finished = raw_text(&client.response(id).await);
        if !finished.starts_with("Script running") {
            break;
        }
    }
    assert!(finished.starts_with("Script completed"), "{finished}");
    assert!(finished.contains("ok \"noted\""), "{finished}");
    assert_eq!(notes(&folder), ["later"]);

    // A client that declared no elicitation: refused at once, catchably, naming the rule.
    let mut plain = RawClient::start_with(&["--config", &config], json!({})).await;
    plain
        .call(
            1,
            "exec",
            json!({"code": attempt("tools.demo__note({text: 'never'})")}),
            json!({}),
        )
        .await;
    let refused = raw_text(&within("the refusal", plain.response(1)).await);
    assert!(
        refused.contains("refused: tools.demo__note needs the user's approval"),
        "{refused}"
    );
    assert!(
        refused.contains("did not declare the elicitation capability"),
        "{refused}"
    );
    assert!(refused.contains("\"permissions\""), "{refused}");
    assert_eq!(notes(&folder), ["later"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_exec_stops_its_cell_and_a_later_wait_gets_its_output() {
    let folder = scratch("cancel");
    let config = write_config(
        &folder,
        json!({"permissions": {"allow": ["demo__note"]}}),
        json!({}),
    );
    let config = config.display().to_string();
    let mut client = RawClient::start_with(&["--config", &config], json!({})).await;
    let code = "text('started'); for (let i = 0; ; i++) { await tools.demo__note({text: `tick ${i}`}); await new Promise((r) => setTimeout(r, 50)); }";
    client
        .call(
            7,
            "exec",
            json!({"code": code, "yield_time_ms": 30000}),
            json!({}),
        )
        .await;
    // Let it make a few calls, then cancel the exec.
    let began = std::time::Instant::now();
    while notes(&folder).len() < 3 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the cell never called note"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "the user pressed stop"}}),
        )
        .await;
    // The calls stop: the count holds still.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped = notes(&folder).len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(notes(&folder).len(), stopped, "the cell kept calling");
    // Its output is kept for a wait on its id (the first cell of the session).
    client
        .call(8, "wait", json!({"cell_id": "1"}), json!({}))
        .await;
    let kept = raw_text(&client.response(8).await);
    assert!(kept.starts_with("Script terminated"), "{kept}");
    assert!(kept.contains("started"), "{kept}");
    // And only once.
    client
        .call(9, "wait", json!({"cell_id": "1"}), json!({}))
        .await;
    assert!(raw_text(&client.response(9).await).starts_with("No cell with ID 1"));
}

/// Reads up to the response to `id`, returning the log messages (`notifications/message`
/// params) the server sent before it.
async fn logs_until_response(client: &mut RawClient, id: i64) -> (Vec<Value>, Value) {
    let mut logs = Vec::new();
    loop {
        let message = client.next().await;
        if message["method"] == "notifications/message" {
            logs.push(message["params"].clone());
        } else if message["id"] == id && message.get("method").is_none() {
            return (logs, message);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_log_message_during_a_call_reaches_the_client_at_its_level() {
    let folder = scratch("logs");
    let config = write_config(&folder, json!({}), json!({}));
    let config = config.display().to_string();
    let mut client = RawClient::start_with(&["--config", &config], json!({})).await;
    let set_level = |id: i64, level: &str| json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel", "params": {"level": level}});
    client.send(set_level(1, "error")).await;
    client.response(1).await;
    client
        .call(
            2,
            "exec",
            json!({"code": "await tools.demo__log({text: 'below the level'})"}),
            json!({}),
        )
        .await;
    let (logs, _) = logs_until_response(&mut client, 2).await;
    assert!(
        !logs.iter().any(|log| log["data"] == "below the level"),
        "{logs:?}"
    );
    client.send(set_level(3, "info")).await;
    client.response(3).await;
    client
        .call(
            4,
            "exec",
            json!({"code": "await tools.demo__log({text: 'heard'}); text('done')"}),
            json!({}),
        )
        .await;
    let (logs, response) = logs_until_response(&mut client, 4).await;
    assert!(raw_text(&response).contains("done"), "{response}");
    let heard: Vec<&Value> = logs.iter().filter(|log| log["data"] == "heard").collect();
    assert_eq!(heard.len(), 1, "{logs:?}");
    // Under the server's name, at the level it was sent.
    assert_eq!(heard[0]["logger"], "demo/demo-log");
    assert_eq!(heard[0]["level"], "warning");
}

/// A 2026-07-28 client (rmcp's, which discovers the server instead of initialising) whose
/// elicitation handler answers every approval form with `decision`.
#[derive(Clone)]
struct RetryingClient {
    decision: &'static str,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for RetryingClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities: rmcp::model::ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("retrying", "1.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.asked.lock().unwrap().push(message.clone());
        }
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"decision": self.decision})),
        )
    }
}

async fn retrying_client(
    url: &str,
    decision: &'static str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, RetryingClient>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let asked = std::sync::Arc::default();
    let handler = RetryingClient {
        decision,
        asked: std::sync::Arc::clone(&asked),
    };
    let client =
        within(
            "connect with server/discover",
            handler.serve_with_lifecycle(
                rmcp::transport::StreamableHttpClientTransport::from_config(
                    common::transport_config(url, common::ALPHA, Some("retries")),
                ),
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                },
            ),
        )
        .await
        .expect("the client discovers the server");
    (client, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_is_asked_in_the_result_and_its_retry_resumes_the_cell() {
    let folder = scratch("retries");
    // The demo server's `note` is allowed there; `forget` asks.
    let served = common::server(&folder, &[]);
    let (client, asked) = retrying_client(served.url(), "allow_once").await;
    let code = "text('before'); await tools.demo__forget({text: 'asked by retry'}); text('after');";
    let params = rmcp::model::CallToolRequestParams::new("exec")
        .with_arguments(json!({ "code": code }).as_object().unwrap().clone());
    // rmcp's client answers `input_required` with its handler and retries, as clients do.
    let result = within("exec", client.call_tool(params)).await.unwrap();
    let text = common::text_of(&result);
    // A model that reads only the first line learns the cell's state now, not the state it was
    // in when the question was put ("Script running with cell ID 1 / Waiting for approval").
    assert_eq!(text.lines().next(), Some("Script completed"), "{text}");
    assert!(!text.contains("Waiting for approval"), "{text}");
    assert!(!text.contains("Script running"), "{text}");
    let before = text.find("before").unwrap_or_else(|| panic!("{text}"));
    let after = text.find("after").unwrap_or_else(|| panic!("{text}"));
    assert!(before < after, "{text}");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("demo__forget"), "{asked:?}");
    assert_eq!(notes(&folder), ["forgot: asked by retry"]);

    // A retry with request state the server did not seal is refused, and changes nothing.
    let mut forged = rmcp::model::CallToolRequestParams::new("wait")
        .with_arguments(json!({"cell_id": "1"}).as_object().unwrap().clone());
    forged.request_state = Some("eyJjZWxsX2lkIjoiMSJ9.forged".to_owned());
    forged.input_responses = Some(std::collections::BTreeMap::from([(
        "approve-1-tool-1".to_owned(),
        json!({"action": "accept", "content": {"decision": "allow_once"}}),
    )]));
    let refused = within("forged retry", client.call_tool(forged))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("requestState is refused"),
        "{refused}"
    );
    assert_eq!(notes(&folder), ["forgot: asked by retry"]);
}

#[test]
fn codemode_run_asks_at_the_terminal_and_follows_the_answers() {
    use std::io::{Read, Write};
    let folder = scratch("terminal");
    let config = write_config(&folder, json!({}), json!({}));
    let cell = folder.join("cell.js");
    std::fs::write(
        &cell,
        format!(
            "{}\n{}",
            attempt("tools.demo__note({text: 'yes'})"),
            attempt("tools.demo__forget({text: 'no'})")
        ),
    )
    .unwrap();
    // `script` gives the run a terminal of its own, and types what the test writes.
    let command = format!(
        "'{CODEMODE}' run --config '{}' '{}'",
        config.display(),
        cell.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs");
    let mut stdin = child.stdin.take().unwrap();
    // Once for the first question, no for the second.
    stdin.write_all(b"o\nn\n").unwrap();
    let mut shown = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    drop(stdin);
    child.wait().unwrap();
    assert_eq!(shown.matches("Allow? [o] once").count(), 2, "{shown}");
    assert!(shown.contains("wants to call demo__forget"), "{shown}");
    assert!(shown.contains("ok \"noted\""), "{shown}");
    assert!(
        shown.contains("refused: tools.demo__forget was denied by the user, at the terminal"),
        "{shown}"
    );
    assert_eq!(notes(&folder), ["yes"]);
}
