//! `codemode mcp` end to end: an `rmcp` client drives the real server process over stdio.

#![allow(deprecated)] // MCP logging, which the server uses for completion push.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, LoggingMessageNotificationParam,
    ProgressNotificationParam, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};

mod common;

use codemode_test_support::within;
use common::{CODEMODE, RawClient, raw_text, running_cell_id, text_of};

/// A client that records the notifications it receives.
#[derive(Clone, Default)]
struct Recorder {
    logs: Arc<Mutex<Vec<Value>>>,
    progress: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Recorder {
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params.data);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

type Client = RunningService<RoleClient, Recorder>;

/// `codemode mcp --demo-tools EXTRA…`: the demo tools echo and sleep are what most tests call.
async fn connect(extra: &[String]) -> (Client, Recorder) {
    let mut args = vec!["--demo-tools".to_owned()];
    args.extend_from_slice(extra);
    connect_with(&args).await
}

/// `codemode mcp ARGS…`.
async fn connect_with(args: &[String]) -> (Client, Recorder) {
    let recorder = Recorder::default();
    let command = tokio::process::Command::new(CODEMODE).configure(|command| {
        command.arg("mcp").args(args);
    });
    let client = within(
        "connect",
        recorder
            .clone()
            .serve(TokioChildProcess::new(command).unwrap()),
    )
    .await
    .expect("the server initialises");
    (client, recorder)
}

async fn call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().unwrap().clone());
    within("call", client.call_tool(params)).await
}

/// The text of a tool result that must be an error result (`isError`), not a protocol error.
fn tool_error(result: Result<CallToolResult, ServiceError>) -> String {
    let result = result.expect("a tool result, not a protocol error");
    assert_eq!(result.is_error, Some(true), "{}", text_of(&result));
    text_of(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_offers_exec_and_wait_with_their_descriptions() {
    let (client, _) = connect(&[]).await;
    let tools = within("list", client.list_all_tools()).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["exec", "wait"]);
    let exec = tools[0].description.as_deref().unwrap();
    assert!(
        exec.starts_with("Run JavaScript to orchestrate tools"),
        "{exec}"
    );
    assert!(exec.contains("declare const tools: {"), "{exec}");
    assert!(exec.contains("sleep(args: {"), "{exec}");
    assert!(exec.ends_with("they win over the pragma line."), "{exec}");
    assert!(exec.contains("TypeScript is accepted"), "{exec}");
    assert_eq!(tools[0].input_schema["required"], json!(["code"]));
    assert_eq!(tools[1].input_schema["required"], json!(["cell_id"]));
    // What clients read to decide whether to ask before a call: exec reaches other servers and
    // may write there (each call passing codemode's own gate); wait reaches nothing outside.
    let exec_hints = tools[0].annotations.clone().expect("exec is annotated");
    assert_eq!(
        (
            exec_hints.read_only_hint,
            exec_hints.destructive_hint,
            exec_hints.open_world_hint
        ),
        (Some(false), Some(true), Some(true))
    );
    let wait_hints = tools[1].annotations.clone().expect("wait is annotated");
    assert_eq!(
        (wait_hints.destructive_hint, wait_hints.open_world_hint),
        (Some(false), Some(false))
    );
    // Claude Code loads both with the first request, and its tool search finds exec by what
    // the downstream tools do.
    for tool in &tools {
        let meta = tool.meta.as_ref().expect("hints for clients");
        assert_eq!(meta.0["anthropic/alwaysLoad"], json!(true), "{}", tool.name);
    }
    let hint = tools[0].meta.as_ref().unwrap().0["anthropic/searchHint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(hint.contains("javascript"), "{hint}");
    assert!(hint.contains("echo") && hint.contains("sleep"), "{hint}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_gets_the_declarations_in_the_code_argument_when_the_description_is_long() {
    // Claude Code passes 4,096 characters of a description to its model and cuts the rest; it
    // passes an argument's description whole.
    let mut client = RawClient::start_as(&["--demo-tools"], json!({}), "claude-code").await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let listed = client.response(1).await;
    let exec = &listed["result"]["tools"][0];
    let description = exec["description"].as_str().unwrap();
    assert!(description.chars().count() <= 4096, "{description}");
    assert!(
        description.contains("are in the description of the `code` argument"),
        "{description}"
    );
    assert!(!description.contains("sleep(args: {"), "{description}");
    assert!(
        description.ends_with("they win over the pragma line."),
        "{description}"
    );
    let code = exec["inputSchema"]["properties"]["code"]["description"]
        .as_str()
        .unwrap();
    assert!(code.contains("declare const tools: {"), "{code}");
    assert!(code.contains("sleep(args: {"), "{code}");
    // Another client gets the whole description, as upstream gives it.
    let mut other = RawClient::start_with(&["--demo-tools"], json!({})).await;
    other
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let listed = other.response(1).await;
    let whole = listed["result"]["tools"][0]["description"]
        .as_str()
        .unwrap();
    assert!(whole.chars().count() > 4096);
    assert!(whole.contains("sleep(args: {"), "{whole}");
}

/// `exec`'s description and its `code` argument's, from a `tools/list` response.
fn exec_as_served(listed: &Value) -> String {
    let exec = &listed["result"]["tools"][0];
    format!(
        "{}\n{}",
        exec["description"].as_str().unwrap(),
        exec["inputSchema"]["properties"]["code"]["description"]
            .as_str()
            .unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_downstream_server_does_not_hold_the_first_tools_list_and_arrives_with_list_changed()
{
    let folder = codemode_test_support::scratch_folder("mcp-startup-window");
    let config = folder.as_path().join("mcp.json");
    let slow = format!("sleep 4; exec '{CODEMODE}' demo-mcp-server");
    std::fs::write(
        &config,
        json!({"mcpServers": {
            "quick": {"command": CODEMODE, "args": ["demo-mcp-server"]},
            "slow": {"command": "sh", "args": ["-c", slow]}
        }})
        .to_string(),
    )
    .unwrap();
    let config = config.display().to_string();
    let mut client = RawClient::start_with(
        &["--config", &config, "--startup-window-ms", "1000"],
        json!({}),
    )
    .await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let first = client.response(1).await;
    let exec = exec_as_served(&first);
    // The slow server's tools are not declared yet, and the description says it is starting.
    assert!(!exec.contains("slow__add("), "{exec}");
    assert!(exec.contains("still starting"), "{exec}");
    // A cell that calls it meanwhile waits for its start rather than run without its tools.
    client
        .call(
            2,
            "exec",
            json!({"code": "const r = await tools.slow__add({a: 1, b: 2}); text('sum ' + r.structuredContent.sum);"}),
            json!({}),
        )
        .await;
    let mut told: usize = 0;
    let ran = loop {
        let message = client.next().await;
        if message["method"] == "notifications/tools/list_changed" {
            told += 1;
        } else if message["id"] == 2 {
            break message;
        }
    };
    assert!(raw_text(&ran).contains("sum 3"), "{ran}");
    // When it answers, the client is told, and lists again (on a loaded machine the quick
    // server may have missed the window too, and be told of first).
    let mut id = 2;
    let exec = loop {
        if told == 0 {
            let message = client.next().await;
            if message["method"] != "notifications/tools/list_changed" {
                continue;
            }
        }
        told = told.saturating_sub(1);
        id += 1;
        client
            .send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
            .await;
        let later = client.response(id).await;
        let exec = exec_as_served(&later);
        if exec.contains("slow__add(") {
            break exec;
        }
    };
    assert!(exec.contains("quick__add("), "{exec}");
    assert!(!exec.contains("still starting"), "{exec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_yields_and_wait_collects_the_completion() {
    let (client, _) = connect(&[]).await;
    let running = call(&client, "exec", json!({"code": "// @exec: {\"yield_time_ms\": 5000}\ntext(\"started\");\nyield_control();\nawait tools.sleep({ms: 600});\ntext(\"done\");"}))
        .await
        .unwrap();
    let running_text = text_of(&running);
    let id = running_cell_id(&running_text);
    assert!(running_text.contains("started"), "{running_text}");
    let finished = loop {
        let result = call(
            &client,
            "wait",
            json!({"cell_id": id, "yield_time_ms": 2000}),
        )
        .await
        .unwrap();
        let text = text_of(&result);
        if !text.starts_with("Script running") {
            break text;
        }
    };
    assert!(finished.starts_with("Script completed"), "{finished}");
    assert!(finished.contains("done"), "{finished}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_with_terminate_stops_a_running_cell() {
    let (client, _) = connect(&[]).await;
    let running = call(&client, "exec", json!({"code": "// @exec: {\"yield_time_ms\": 50}\ntext(\"spinning\"); yield_control(); while (true) {}"}))
        .await
        .unwrap();
    let id = running_cell_id(&text_of(&running));
    let terminated = call(&client, "wait", json!({"cell_id": id, "terminate": true}))
        .await
        .unwrap();
    assert!(
        text_of(&terminated).starts_with("Script terminated"),
        "{}",
        text_of(&terminated)
    );
    assert_eq!(terminated.is_error, Some(false));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_servers_tool_is_called_from_a_cell() {
    let (client, _) = connect(&[
        "--mcp".to_owned(),
        format!("demo={CODEMODE} demo-mcp-server"),
    ])
    .await;
    let tools = within("list", client.list_all_tools()).await.unwrap();
    assert!(common::exec_as_served(&tools[0]).contains("demo__add(args: {"));
    let result = call(&client, "exec", json!({"code": "const r = await tools.demo__add({a: 1, b: 2}); text(r.structuredContent.sum); image(await tools.demo__image().then((i) => i.content[0]));"}))
        .await
        .unwrap();
    assert_eq!(text_of(&result).lines().last(), Some("3"));
    assert!(result.content.iter().any(
        |block| matches!(block, ContentBlock::Image(image) if image.mime_type == "image/png")
    ));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_and_unknown_cells_get_errors_and_the_server_stays_up() {
    let (client, _) = connect(&[]).await;
    // Arguments the model got wrong come back as tool results with isError, for it to fix.
    let missing_code = tool_error(call(&client, "exec", json!({})).await);
    assert!(
        missing_code.contains("the code argument is missing"),
        "{missing_code}"
    );
    let unknown_tool = call(&client, "run", json!({})).await.unwrap_err();
    assert!(
        unknown_tool
            .to_string()
            .contains("this server offers exec and wait"),
        "{unknown_tool}"
    );
    let bad_wait = tool_error(call(&client, "wait", json!({"cell_id": 7})).await);
    assert!(bad_wait.contains("wait takes"), "{bad_wait}");
    let unknown_cell = call(&client, "wait", json!({"cell_id": "42"}))
        .await
        .unwrap();
    assert_eq!(unknown_cell.is_error, Some(true));
    assert!(text_of(&unknown_cell).starts_with("No cell with ID 42"));
    let bad_pragma = call(
        &client,
        "exec",
        json!({"code": "// @exec: {\"yield\": 1}\ntext(1)"}),
    )
    .await
    .unwrap();
    assert_eq!(bad_pragma.is_error, Some(true));
    // Still serving.
    let fine = call(&client, "exec", json!({"code": "text(6 * 7)"}))
        .await
        .unwrap();
    assert_eq!(text_of(&fine).lines().last(), Some("42"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_finishes_in_the_background_is_announced() {
    let (client, recorder) = connect(&[]).await;
    let running = call(&client, "exec", json!({"code": "// @exec: {\"yield_time_ms\": 0}\nawait tools.sleep({ms: 200}); text(\"background work\");"}))
        .await
        .unwrap();
    let id = running_cell_id(&text_of(&running));
    let announcement = within("announcement", async {
        loop {
            if let Some(log) = recorder.logs.lock().unwrap().first().cloned() {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(announcement["cell_id"], json!(id));
    assert_eq!(announcement["status"], "completed");
    let collected = call(&client, "wait", json!({"cell_id": id})).await.unwrap();
    assert!(text_of(&collected).contains("background work"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_reported_while_a_cell_runs() {
    let (client, recorder) = connect(&[]).await;
    let mut params = CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "notify(\"warming up\"); await tools.sleep({ms: 2500}); text(\"ok\");"})
            .as_object()
            .unwrap()
            .clone(),
    );
    params.meta = Some(RequestMetaObject::from(
        json!({"progressToken": "progress-1"})
            .as_object()
            .unwrap()
            .clone(),
    ));
    let result = within("exec", client.call_tool(params)).await.unwrap();
    assert!(text_of(&result).starts_with("Script completed"));
    let progress = recorder.progress.lock().unwrap().clone();
    assert!(progress.contains(&"warming up".to_owned()), "{progress:?}");
    assert!(
        progress
            .iter()
            .any(|message| message.starts_with("running for")),
        "{progress:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_bounds_image_output_per_observation() {
    let (client, _) = connect(&[]).await;
    let result = call(
        &client,
        "exec",
        json!({"code": "const big = \"data:image/png;base64,\" + \"A\".repeat(3 * 1024 * 1024); for (let i = 0; i < 4; i++) image(big); text(\"after\");"}),
    )
    .await
    .unwrap();
    let images = result
        .content
        .iter()
        .filter(|block| matches!(block, ContentBlock::Image(_)))
        .count();
    assert_eq!(images, 2, "8 MiB of images fit, the rest are omitted");
    let text = text_of(&result);
    assert!(
        text.contains("[2 images omitted: image output budget exceeded]"),
        "{text}"
    );
    assert!(text.ends_with("after"), "{text}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_also_speaks_streamable_http() {
    let mut command = std::process::Command::new(CODEMODE);
    command.args(["mcp", "--demo-tools", "--no-auth", "--http", "127.0.0.1:0"]);
    let server = codemode_test_support::ListeningServer::spawn(command);
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(server.url());
    let client = within("connect", ().serve(transport)).await.unwrap();
    let tools = within("list", client.list_all_tools()).await.unwrap();
    assert_eq!(
        tools
            .iter()
            .map(|tool| tool.name.as_ref())
            .collect::<Vec<_>>(),
        ["exec", "wait"]
    );
    let params = CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "text(await tools.echo(\"over http\"))"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let result = within("exec", client.call_tool(params)).await.unwrap();
    assert_eq!(text_of(&result).lines().last(), Some("over http"));
    client.cancel().await.unwrap();
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_wait_refuse_arguments_they_do_not_know_by_name() {
    let (client, _) = connect(&[]).await;
    let exec = tool_error(
        call(
            &client,
            "exec",
            json!({"code": "text(1)", "source": "x", "timeout": 5}),
        )
        .await,
    );
    assert!(
        exec.contains("exec does not take \"source\", \"timeout\""),
        "{exec}"
    );
    assert!(
        exec.contains("code, yield_time_ms, max_output_tokens"),
        "{exec}"
    );
    let wait = tool_error(call(&client, "wait", json!({"cell_id": "1", "yield_ms": 5})).await);
    assert!(wait.contains("wait does not take \"yield_ms\""), "{wait}");
    let negative = tool_error(
        call(
            &client,
            "exec",
            json!({"code": "text(1)", "yield_time_ms": -1}),
        )
        .await,
    );
    assert!(
        negative.contains("must be a non-negative integer"),
        "{negative}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_arguments_win_over_the_pragma() {
    let (client, _) = connect(&[]).await;
    // The pragma asks for a long yield and a large budget; the arguments win.
    let running = call(
        &client,
        "exec",
        json!({
            "code": "// @exec: {\"yield_time_ms\": 30000, \"max_output_tokens\": 10000}\ntext(\"x\".repeat(4000)); await tools.sleep({ms: 5000});",
            "yield_time_ms": 0,
            "max_output_tokens": 50
        }),
    )
    .await
    .unwrap();
    let text = text_of(&running);
    assert!(text.starts_with("Script running with cell ID"), "{text}");
    assert!(
        text.len() < 1_000,
        "the output was not cut to 50 tokens: {} bytes",
        text.len()
    );
    let cell = running_cell_id(&text);
    let terminated = call(&client, "wait", json!({"cell_id": cell, "terminate": true}))
        .await
        .unwrap();
    assert!(text_of(&terminated).starts_with("Script terminated"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_in_flight_and_a_terminating_wait_never_both_return_the_same_items() {
    let (client, _) = connect(&[]).await;
    let running = call(
        &client,
        "exec",
        json!({"code": "text(\"early\"); await tools.sleep({ms: 200}); text(\"late item\"); await tools.sleep({ms: 30000});", "yield_time_ms": 0}),
    )
    .await
    .unwrap();
    let cell = running_cell_id(&text_of(&running));
    let in_flight = call(
        &client,
        "wait",
        json!({"cell_id": cell, "yield_time_ms": 30000}),
    );
    // Terminate well after the cell has produced its late item (at about 200 ms), while the
    // first wait still holds it.
    let terminating = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        call(&client, "wait", json!({"cell_id": cell, "terminate": true})).await
    };
    let (in_flight, terminating) = tokio::join!(in_flight, terminating);
    let (in_flight, terminating) = (text_of(&in_flight.unwrap()), text_of(&terminating.unwrap()));
    let all = format!(
        "{running}\n{in_flight}\n{terminating}",
        running = text_of(&running)
    );
    assert_eq!(all.matches("late item").count(), 1, "{all}");
    assert_eq!(all.matches("early").count(), 1, "{all}");
    assert!(
        terminating.starts_with("Script terminated"),
        "{terminating}"
    );
    assert!(in_flight.starts_with("Script terminated"), "{in_flight}");
    client.cancel().await.unwrap();
}

/// `codemode mcp` over raw stdio: lines in, the answers with an `id` out (with a hang guard).
struct RawServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl RawServer {
    fn start() -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(CODEMODE)
            .args(["mcp", "--demo-tools"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        RawServer {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        use std::io::Write;
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message with this id (messages without it are kept for the failure message).
    fn answer(&mut self, id: i64) -> Value {
        let mut others = Vec::new();
        loop {
            let line = match self.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => line,
                Err(error) => panic!(
                    "hung: no answer with id {id} ({error}; the server {}); other messages: {others:?}",
                    match self.child.try_wait() {
                        Ok(Some(status)) => format!("exited with {status}"),
                        _ => "is still running".to_owned(),
                    }
                ),
            };
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) {
                return message;
            }
            let mut shown = line;
            shown.truncate(300);
            others.push(shown);
        }
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn every_stdio_request_gets_an_answer_even_an_oversized_or_unicode_broken_one() {
    let mut server = RawServer::start();
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
    assert!(server.answer(1)["result"]["serverInfo"].is_object());
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // A lone surrogate escape in the code: not Unicode text, so not JSON the server can read.
    server.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"exec","arguments":{"code":"text(\"\ud800\")"}}}"#);
    let broken = server.answer(5);
    let message = broken["error"]["message"].as_str().unwrap();
    assert!(message.contains("lone surrogate escape"), "{broken}");
    // Four characters of an escape, then a multi-byte character: a scan that skipped six bytes
    // cut the character in two and ended the server.
    server.send(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"exec","arguments":{"code":"\ud8aé"}}"#);
    let cut = server.answer(9);
    assert_eq!(cut["error"]["code"], json!(-32700), "{cut}");
    // A message past the 16 MiB a line may hold.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"exec","arguments":{{"code":"{}"}}}}}}"#,
        "x".repeat(17 * 1024 * 1024)
    );
    server.send(&huge);
    let oversized = server.answer(6);
    let message = oversized["error"]["message"].as_str().unwrap();
    assert!(message.contains("more than the 16 MiB"), "{oversized}");
    // Code within the line limit but past the source limit is refused by exec, naming it.
    let large = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"exec","arguments":{{"code":"//{}"}}}}}}"#,
        "x".repeat(5 * 1024 * 1024)
    );
    server.send(&large);
    let refused = server.answer(7);
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    assert!(
        refused.to_string().contains("bytes a cell accepts"),
        "{refused}"
    );
    // And the server still serves.
    server.send(r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"exec","arguments":{"code":"text(6 * 7)"}}}"#);
    assert!(server.answer(8).to_string().contains("42"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_the_binary_under_a_running_server_does_not_break_new_cells() {
    use std::os::unix::fs::PermissionsExt;
    // The server runs from a copy, which is then replaced by something that cannot run: engine
    // processes are started from /proc/self/exe, the program that is running, not its path.
    let folder = codemode_test_support::scratch_folder("replaced-binary");
    let program = folder.join("codemode");
    std::fs::copy(CODEMODE, &program).unwrap();
    let recorder = Recorder::default();
    let command = tokio::process::Command::new(&program).configure(|command| {
        command.args(["mcp", "--cells-per-process", "1"]);
    });
    let client = within(
        "connect",
        recorder.serve(TokioChildProcess::new(command).unwrap()),
    )
    .await
    .expect("the server initialises");
    let first = call(&client, "exec", json!({"code": "text('before')"}))
        .await
        .unwrap();
    assert!(text_of(&first).contains("before"), "{}", text_of(&first));
    std::fs::remove_file(&program).unwrap();
    std::fs::write(&program, "not a program").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Three cells live at once, one per process: new engine processes must start.
    let mut ids = Vec::new();
    for index in 0..3 {
        let code = format!(
            "// @exec: {{\"yield_time_ms\": 0}}\nawait new Promise(r => setTimeout(r, 300)); text('after {index}')"
        );
        let running = call(&client, "exec", json!({ "code": code }))
            .await
            .unwrap();
        ids.push(running_cell_id(&text_of(&running)));
    }
    for (index, id) in ids.iter().enumerate() {
        let ended = call(
            &client,
            "wait",
            json!({"cell_id": id, "yield_time_ms": 30000}),
        )
        .await
        .unwrap();
        let text = text_of(&ended);
        assert!(
            text.starts_with("Script completed") && text.contains(&format!("after {index}")),
            "{text}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_just_before_the_end_reaches_the_client_before_the_result() {
    let mut client = RawClient::start().await;
    // Many times over: the notification and the end of the cell are microseconds apart.
    for round in 1..=20 {
        client
            .call(
                round,
                "exec",
                json!({"code": format!("notify(\"last words {round}\"); text(\"done\");")}),
                json!({"progressToken": format!("token-{round}")}),
            )
            .await;
        let mut notified = false;
        loop {
            let message = client.next().await;
            if message["method"] == "notifications/progress"
                && message["params"]["message"] == format!("last words {round}")
            {
                notified = true;
            }
            if message["id"] == round {
                assert!(
                    notified,
                    "round {round}: the result came before the notification: {message}"
                );
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_releases_the_cell_and_the_next_wait_gets_everything() {
    let mut client = RawClient::start().await;
    client
        .call(
            1,
            "exec",
            json!({"code": "for (let i = 0; i < 3; i++) { await tools.sleep({ms: 300}); text(`tick ${i}`); }",
                   "yield_time_ms": 0}),
            json!({}),
        )
        .await;
    let started = raw_text(&client.response(1).await);
    let cell_id = running_cell_id(&started);
    // A wait that would take 30 s, cancelled by the client after a moment, while the cell
    // produces output.
    let long_wait = json!({"cell_id": cell_id, "yield_time_ms": 30000});
    client.call(2, "wait", long_wait.clone(), json!({})).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    client
        .send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "the user moved on"}}),
        )
        .await;
    // The next wait observes the cell at once (not "already being observed") and gets every
    // item, those produced during the cancelled wait included.
    client.call(3, "wait", long_wait, json!({})).await;
    let collected = raw_text(&client.response(3).await);
    assert!(collected.starts_with("Script completed"), "{collected}");
    for tick in ["tick 0", "tick 1", "tick 2"] {
        assert!(collected.contains(tick), "{tick} is missing: {collected}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_waited_on_with_short_yields_is_answered_in_at_most_two_waits() {
    let mut client = RawClient::start().await;
    client
        .call(
            1,
            "exec",
            json!({"code": "await tools.sleep({ms: 2000}); text('slept');", "yield_time_ms": 0}),
            json!({}),
        )
        .await;
    let cell_id = running_cell_id(&raw_text(&client.response(1).await));
    // A model polling every half second: the server holds each wait until there is news. The
    // text the cell emits is news of its own: a round may end between it and the cell's end (on
    // a loaded machine), and then the next wait brings the end, so the output is read across
    // the waits.
    let mut waits = 0;
    let mut seen = String::new();
    let finished = loop {
        waits += 1;
        client
            .call(
                1 + waits,
                "wait",
                json!({"cell_id": cell_id, "yield_time_ms": 500}),
                json!({}),
            )
            .await;
        let text = raw_text(&client.response(1 + waits).await);
        seen.push_str(&text);
        if !text.starts_with("Script running") || waits == 5 {
            break text;
        }
    };
    assert!(finished.starts_with("Script completed"), "{finished}");
    assert!(seen.contains("slept"), "{seen}");
    assert!(waits <= 2, "{waits} waits for one 2 s tool call: {seen}");
}
