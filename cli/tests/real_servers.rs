//! `codemode mcp --config` with MCP servers people actually use, installed from their registries
//! at pinned versions (`codemode_test_support::mcp_servers`): `server-everything`,
//! `server-filesystem` and `server-memory` from npm, `mcp-server-git` and `mcp-server-time` from
//! PyPI, driven through a real MCP client. Each tool's value must be what its declaration says,
//! and what the tools did is checked where it happened (on disk, in `git log`).
//!
//! The servers are installed on first use; when a registry cannot be reached the test fails and
//! says which.

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

mod common;

use codemode_test_support::{mcp_servers, within};
use common::{CODEMODE, raw_text, text_of, wait_for_line};

async fn exec(
    client: &rmcp::service::RunningService<RoleClient, ()>,
    code: &str,
) -> CallToolResult {
    let params = CallToolRequestParams::new("exec")
        .with_arguments(json!({ "code": code }).as_object().unwrap().clone());
    within("exec", client.call_tool(params)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_real_servers_work_through_codemode_and_their_values_match_their_declarations() {
    let servers = mcp_servers::install(&mcp_servers::workspace_root()).unwrap_or_else(|error| {
        panic!("the real MCP servers could not be installed from their registries: {error}")
    });
    let folder = codemode_test_support::scratch_folder("real-servers");
    let files = folder.join("files");
    let repository = folder.join("repository");
    let memory = folder.join("memory.jsonl");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(&repository).unwrap();
    let git = |args: &[&str]| {
        let output = std::process::Command::new("git")
            .arg("-C")
            .arg(&repository)
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "cell@example.com"]);
    git(&["config", "user.name", "A cell"]);
    std::fs::write(repository.join("notes.txt"), "first\n").unwrap();
    let config = json!({"mcpServers": {
        "everything": {"command": servers.npm_program("mcp-server-everything"), "args": ["stdio"]},
        "fs": {"command": servers.npm_program("mcp-server-filesystem"), "args": [&files]},
        "memory": {"command": servers.npm_program("mcp-server-memory"), "env": {"MEMORY_FILE_PATH": &memory}},
        "git": {"command": servers.python_program("mcp-server-git")},
        "time": {"command": servers.python_program("mcp-server-time"), "args": ["--local-timezone", "UTC"]}
    },
    // What the servers do is under test here, not the gate: every call runs.
    "permissions": {"allow": ["*"]}});
    let config_path = folder.join("mcp.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let command = tokio::process::Command::new(CODEMODE).configure(|command| {
        command.arg("mcp").arg("--config").arg(&config_path);
    });
    let client = within(
        "connect",
        ().serve(TokioChildProcess::new(command).unwrap()),
    )
    .await
    .expect("codemode initialises with the five servers");

    // Every call resolves with the server's CallToolResult; the values go out whole, to be
    // checked against their declarations by the TypeScript compiler below.
    let code = format!(
        r#"// @exec: {{"max_output_tokens": 1000000}}
const declared = (name) => ALL_TOOLS.find((tool) => tool.name === name).declaration;
const check = (name, value) => declared(name).includes("Promise<CallToolResult")
  && Array.isArray(value.content) && !("text" in value);
const textOf = (value) => value.content.filter((block) => block.type === "text").map((block) => block.text).join("\n");
const files = {files};
const repository = {repository};
const calls = [
  ["everything__echo", {{ message: "hello" }}],
  ["everything__get_sum", {{ a: 2, b: 3 }}],
  ["everything__get_structured_content", {{ location: "New York" }}],
  ["everything__get_annotated_message", {{ messageType: "error", includeImage: true }}],
  ["everything__get_resource_links", {{ count: 2 }}],
  ["everything__get_resource_reference", {{ resourceType: "Text", resourceId: 1 }}],
  ["everything__trigger_long_running_operation", {{ duration: 1, steps: 2 }}],
  ["everything__toggle_simulated_logging", {{}}],
  ["everything__get_env", {{}}],
  ["everything__gzip_file_as_resource", {{ name: "hello.txt.gz", data: "data:text/plain;base64,aGVsbG8=", outputType: "resource" }}],
  ["everything__toggle_subscriber_updates", {{}}],
  // taskSupport "required" (the 2025-11-25 revision's tasks): called as a task and polled.
  ["everything__simulate_research_query", {{ topic: "rust" }}],
  ["fs__write_file", {{ path: files + "/note.txt", content: "one\ntwo\n" }}],
  ["fs__edit_file", {{ path: files + "/note.txt", edits: [{{ oldText: "two", newText: "three" }}] }}],
  ["fs__read_text_file", {{ path: files + "/note.txt" }}],
  ["memory__create_entities", {{ entities: [{{ name: "codemode", entityType: "runtime", observations: ["runs cells"] }}] }}],
  ["memory__read_graph", {{}}],
  ["git__git_add", {{ repo_path: repository, files: ["notes.txt"] }}],
  ["git__git_commit", {{ repo_path: repository, message: "committed from a cell" }}],
  ["time__get_current_time", {{ timezone: "UTC" }}],
];
const values = {{}};
for (const [name, args] of calls) {{
  const value = await tools[name](args);
  values[name] = value;
  text(name + " " + (check(name, value) ? "matches" : "DOES NOT MATCH: " + JSON.stringify(value).slice(0, 300)));
}}
text("read " + JSON.stringify(values.fs__read_text_file.structuredContent.content));
text("graph " + values.memory__read_graph.structuredContent.entities.map((entity) => entity.name).join(","));
text("time " + values.time__get_current_time.structuredContent.timezone);
text("structured " + typeof values.everything__get_structured_content.structuredContent.temperature);
text("sum " + textOf(values.everything__get_sum));
text("research " + textOf(values.everything__simulate_research_query).includes("Research Report: rust"));
text("gzip " + values.everything__gzip_file_as_resource.content.map((block) => block.type).join(","));
text("launcher variables " + textOf(values.everything__get_env).includes("CODEMODE_ORIGINAL"));
const picture = await tools.everything__get_tiny_image({{}});
image(picture.content.find((block) => block.type === "image"));
text("VALUES " + JSON.stringify(values));
text("DECLARATIONS " + JSON.stringify(ALL_TOOLS.map((tool) => tool.declaration)));
"#,
        files = Value::from(files.display().to_string()),
        repository = Value::from(repository.display().to_string()),
    );
    let result = exec(&client, &code).await;
    let output = text_of(&result);
    assert!(output.starts_with("Script completed"), "{output}");
    for line in output.lines().filter(|line| {
        line.contains("__") && !line.starts_with("VALUES ") && !line.starts_with("DECLARATIONS ")
    }) {
        assert!(line.ends_with(" matches"), "{line}\n\n{output}");
    }
    assert_eq!(output.matches(" matches").count(), 20, "{output}");
    assert!(output.contains("research true"), "{output}");
    assert!(output.contains("gzip resource"), "{output}");
    assert!(output.contains("launcher variables false"), "{output}");
    assert!(output.contains("read \"one\\nthree\\n\""), "{output}");
    assert!(output.contains("graph codemode"), "{output}");
    assert!(output.contains("time UTC"), "{output}");
    assert!(output.contains("structured number"), "{output}");
    assert!(output.contains("sum The sum of 2 and 3 is 5."), "{output}");
    // The declarations leave the MCP types to the description, which declares them once.
    let tools = within("list", client.list_all_tools()).await.unwrap();
    let description = common::exec_as_served(&tools[0]);
    assert_eq!(
        description.matches("type CallToolResult<").count(),
        1,
        "{description}"
    );
    // Each value is what its declaration in `exec`'s description says, to the TypeScript
    // compiler.
    let values: serde_json::Map<String, Value> = serde_json::from_str(
        output
            .lines()
            .find_map(|line| line.strip_prefix("VALUES "))
            .unwrap_or_else(|| panic!("no values in {output}")),
    )
    .unwrap();
    assert_eq!(values.len(), 20);
    // What a cell reads of each tool (its `ALL_TOOLS` declaration), with the shared MCP types
    // the description declares.
    let declarations: Vec<String> = serde_json::from_str(
        output
            .lines()
            .find_map(|line| line.strip_prefix("DECLARATIONS "))
            .unwrap_or_else(|| panic!("no declarations in {output}")),
    )
    .unwrap();
    let declarations = format!(
        "{}\ndeclare const tools: {{\n{}\n}};",
        codemode_protocol::MCP_TYPES_DECLARATION,
        declarations.join("\n")
    );
    let values: Vec<(String, String)> = values
        .into_iter()
        .map(|(tool, value)| (tool, value.to_string()))
        .collect();
    if let Err(complaints) = servers.typecheck(&declarations, &values) {
        panic!("the values do not match their declarations:\n{complaints}");
    }
    assert!(
        result.content.iter().any(
            |block| matches!(block, ContentBlock::Image(image) if image.mime_type == "image/png")
        ),
        "{output}"
    );
    // What the tools did, where it happened.
    assert_eq!(
        std::fs::read_to_string(files.join("note.txt")).unwrap(),
        "one\nthree\n"
    );
    assert!(
        std::fs::read_to_string(&memory)
            .unwrap()
            .contains("\"codemode\"")
    );
    assert!(git(&["log", "--format=%s"]).contains("committed from a cell"));
    client.cancel().await.unwrap();
}

/// A configuration with `server-everything` as its one downstream server (named `everything`,
/// every call allowed), written to a scratch folder named `name`.
fn everything_config(name: &str) -> std::path::PathBuf {
    let servers = mcp_servers::install(&mcp_servers::workspace_root()).unwrap_or_else(|error| {
        panic!("the real MCP servers could not be installed from their registries: {error}")
    });
    let folder = codemode_test_support::scratch_folder(name);
    let config_path = folder.join("mcp.json");
    let config = json!({"mcpServers": {
        "everything": {"command": servers.npm_program("mcp-server-everything"), "args": ["stdio"]}
    }, "permissions": {"allow": ["*"]}});
    std::fs::write(&config_path, config.to_string()).unwrap();
    config_path
}

/// `codemode mcp` with [`everything_config`]; `log` sets its `CODEMODE_LOG`.
fn codemode_with_everything(name: &str, log: Option<&str>) -> tokio::process::Command {
    let config_path = everything_config(name);
    tokio::process::Command::new(CODEMODE).configure(|command| {
        command.arg("mcp").arg("--config").arg(&config_path);
        if let Some(log) = log {
            command.env("CODEMODE_LOG", log);
        }
    })
}

/// A client that counts `notifications/tools/list_changed`.
#[derive(Clone, Default)]
struct ListChanges(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rmcp::ClientHandler for ListChanges {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_tool_list_change_reaches_the_client_as_a_change_of_exec() {
    // server-everything registers more tools once its client has initialised, and says so.
    let command = codemode_with_everything("real-servers-list-changed", None);
    let changes = ListChanges::default();
    let client = within(
        "connect",
        changes
            .clone()
            .serve(TokioChildProcess::new(command).unwrap()),
    )
    .await
    .expect("codemode initialises");
    let advertised = client
        .peer_info()
        .and_then(|info| info.capabilities.tools.clone())
        .and_then(|tools| tools.list_changed);
    assert_eq!(advertised, Some(true));
    // The cell after the change runs with the new list, and the client hears that exec changed.
    within("the client hears of the change", async {
        while changes.0.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            let params = CallToolRequestParams::new("exec").with_arguments(
                json!({"code": "text(ALL_TOOLS.length)"})
                    .as_object()
                    .unwrap()
                    .clone(),
            );
            client.call_tool(params).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let tools = within("list", client.list_all_tools()).await.unwrap();
    assert!(
        common::exec_as_served(&tools[0]).contains("everything__"),
        "{tools:?}"
    );
    client.cancel().await.unwrap();
}

/// A client that records the messages of the progress notifications it receives.
#[derive(Clone, Default)]
struct ProgressMessages(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for ProgressMessages {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_tools_progress_reaches_the_client_waiting_on_the_cell() {
    let command = codemode_with_everything("real-servers-progress", None);
    let messages = ProgressMessages::default();
    let client = within(
        "connect",
        messages
            .clone()
            .serve(TokioChildProcess::new(command).unwrap()),
    )
    .await
    .expect("codemode initialises");
    // server-everything reports each step of its long-running operation as progress; the client
    // that asked for progress on exec hears each, named by the tool.
    let mut params = CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "await tools.everything__trigger_long_running_operation({ duration: 2, steps: 4 }); text('done')"})
            .as_object()
            .unwrap()
            .clone(),
    );
    params.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(7)),
    ));
    let result = within("exec", client.call_tool(params)).await.unwrap();
    assert!(text_of(&result).contains("done"), "{}", text_of(&result));
    // Each step's notification, but the last, which may race with the result (progress is
    // best effort: a notification the server sends as the call ends can arrive after it).
    let heard = messages.0.lock().unwrap().clone();
    for step in ["1/4", "2/4", "3/4"] {
        let expected = format!("tools.everything__trigger_long_running_operation: {step}");
        assert!(
            heard.iter().any(|message| message.starts_with(&expected)),
            "{expected} in {heard:?}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_a_cell_cancels_the_task_of_a_tool_that_runs_only_as_a_task() {
    let command = codemode_with_everything(
        "real-servers-task-cancel",
        Some("codemode_host_adapters=info"),
    );
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = within("connect", ().serve(transport))
        .await
        .expect("codemode initialises");
    // simulate_research_query runs only as a task (2025-11-25) and takes seconds: the cell is
    // still awaiting it when it yields, and is terminated then.
    let params = CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "await tools.everything__simulate_research_query({ topic: 'rust' })", "yield_time_ms": 1500})
            .as_object()
            .unwrap()
            .clone(),
    );
    let running = text_of(&within("exec", client.call_tool(params)).await.unwrap());
    let cell_id = running
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("Script running with cell ID "))
        .unwrap_or_else(|| panic!("{running}"))
        .to_owned();
    let params = CallToolRequestParams::new("wait").with_arguments(
        json!({"cell_id": cell_id, "terminate": true})
            .as_object()
            .unwrap()
            .clone(),
    );
    let terminated = text_of(&within("terminate", client.call_tool(params)).await.unwrap());
    assert!(terminated.starts_with("Script terminated"), "{terminated}");
    // The downstream server accepted the cancellation of the task.
    wait_for_line(
        stderr.unwrap(),
        "cancelled the task of a call the cell no longer waits for",
    )
    .await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_server_everything_asks_of_the_user_reaches_the_client_that_ran_the_cell() {
    let config = everything_config("real-servers-relay");
    let config = config.display().to_string();
    let mut client = common::RawClient::start_with(
        &["--config", &config],
        json!({"elicitation": {}, "sampling": {}}),
    )
    .await;
    // Its elicitation: a form, shown to the client as the server's, and the answer goes back.
    client
        .call(
            1,
            "exec",
            json!({"code": "const r = await tools.everything__trigger_elicitation_request(); text(JSON.stringify(r.content));"}),
            json!({}),
        )
        .await;
    let (asked, response) = client
        .until_response(1, |request| {
            assert_eq!(request["method"], "elicitation/create", "{request}");
            Some(json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true}}))
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["params"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("The MCP server \"everything\" asks: "),
        "{message}"
    );
    assert!(
        asked[0]["params"]["requestedSchema"]["properties"]["name"].is_object(),
        "{}",
        asked[0]
    );
    let text = raw_text(&response);
    assert!(text.contains("Ada Lovelace"), "{text}");

    // Its sampling request: answered by the client's model.
    client
        .call(
            2,
            "exec",
            json!({"code": "const r = await tools.everything__trigger_sampling_request({prompt: 'Say hi', maxTokens: 20}); text(JSON.stringify(r.content));"}),
            json!({}),
        )
        .await;
    let (asked, response) = client
        .until_response(2, |request| {
            assert_eq!(request["method"], "sampling/createMessage", "{request}");
            Some(
                json!({"role": "assistant", "model": "test-model", "stopReason": "endTurn",
                "content": {"type": "text", "text": "sampled by the test client"}}),
            )
        })
        .await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    let text = raw_text(&response);
    assert!(text.contains("sampled by the test client"), "{text}");

    // A client that did not declare sampling is never asked: the server hears why.
    let mut plain =
        common::RawClient::start_with(&["--config", &config], json!({"elicitation": {}})).await;
    plain
        .call(
            1,
            "exec",
            json!({"code": "try { const r = await tools.everything__trigger_sampling_request({prompt: 'Say hi', maxTokens: 20}); text(JSON.stringify(r)); } catch (e) { text('rejected: ' + e.message); }"}),
            json!({}),
        )
        .await;
    let (asked, response) = plain.until_response(1, |_| None).await;
    assert!(asked.is_empty(), "{asked:?}");
    let text = raw_text(&response);
    assert!(text.contains("did not declare sampling"), "{text}");
}
