//! MCP tasks, both ways, through real `codemode mcp` processes.
//!
//! As a server: a client that declares the tasks extension (SEP-2663) gets an `exec` whose cell
//! outlives its yield time as a task, polls it with `tasks/get` to the cell's whole output, and
//! cancels it (terminating the cell) with `tasks/cancel`.
//!
//! As a client: a cell that calls a downstream server's tool answered with a task gets the task's
//! final result, and a terminated cell cancels the task. The downstream server here is another
//! `codemode mcp`, so both halves speak the same revision; the 2025-11-25 revision's tasks are
//! exercised against `server-everything` in `real_servers.rs`.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    TaskPayload, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

mod common;

use codemode_test_support::within;
use common::{CODEMODE, TaskClient, text_of, wait_for_line};

type Client = RunningService<RoleClient, TaskClient>;

async fn connect(args: &[&str]) -> Client {
    let command = tokio::process::Command::new(CODEMODE).configure(|command| {
        command.arg("mcp").args(args);
    });
    within(
        "connect",
        TaskClient.serve(TokioChildProcess::new(command).unwrap()),
    )
    .await
    .expect("the server initialises")
}

async fn exec_once(client: &Client, arguments: Value) -> CallToolResponse {
    let params =
        CallToolRequestParams::new("exec").with_arguments(arguments.as_object().unwrap().clone());
    within("exec", client.call_tool_once(params))
        .await
        .expect("exec answers")
}

/// Polls task `task_id` until it reaches a terminal status; returns its last state.
async fn poll_to_the_end(client: &Client, task_id: &str) -> rmcp::model::DetailedTask {
    within("the task ends", async {
        loop {
            let state = client
                .get_task(GetTaskParams::new(task_id))
                .await
                .expect("tasks/get answers");
            if state.task.task.status.is_terminal() {
                return state.task;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_becomes_a_task_when_its_cell_outlives_the_yield_and_the_task_carries_all_output() {
    let client = connect(&[]).await;
    // A cell that ends within its yield time is answered at once.
    let quick = exec_once(&client, json!({"code": "text('at once')"})).await;
    let CallToolResponse::Complete(quick) = quick else {
        panic!("a quick cell is answered directly: {quick:?}");
    };
    assert!(text_of(&quick).contains("at once"), "{}", text_of(&quick));

    let code = "text('before'); await new Promise((resolve) => setTimeout(resolve, 300)); \
                store('kept', 7); text('after')";
    let slow = exec_once(&client, json!({"code": code, "yield_time_ms": 10})).await;
    let CallToolResponse::Task(created) = slow else {
        panic!("a cell that outlives its yield time becomes a task: {slow:?}");
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    assert!(created.task.poll_interval_ms.is_some());
    let ended = poll_to_the_end(&client, &created.task.task_id).await;
    let TaskPayload::Completed { result } = ended.payload else {
        panic!("the task completes: {ended:?}");
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    let output = text_of(&result);
    let before = output.find("before").expect(&output);
    let after = output.find("after").expect(&output);
    assert!(before < after, "{output}");
    assert!(output.contains("Script completed"), "{output}");
    // The cell committed its values like any other.
    let load = exec_once(&client, json!({"code": "text('kept=' + load('kept'))"})).await;
    let CallToolResponse::Complete(load) = load else {
        panic!("{load:?}");
    };
    assert!(text_of(&load).contains("kept=7"), "{}", text_of(&load));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_exec_task_terminates_its_cell_and_another_session_cannot_reach_it() {
    let client = connect(&[]).await;
    let code = "store('never', 1); await new Promise((resolve) => setTimeout(resolve, 60000))";
    let slow = exec_once(&client, json!({"code": code, "yield_time_ms": 10})).await;
    let CallToolResponse::Task(created) = slow else {
        panic!("{slow:?}");
    };
    let task_id = created.task.task_id.clone();
    let status = created.task.status_message.clone().unwrap_or_default();
    let cell_id = status
        .strip_prefix("cell ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("the status names the cell: {status}"))
        .to_owned();

    // Another client (another MCP session of its own server process here, as any other session)
    // knows nothing of this task.
    let stranger = connect(&[]).await;
    let unknown = within("tasks/get", stranger.get_task(GetTaskParams::new(&task_id))).await;
    assert!(unknown.is_err(), "{unknown:?}");
    stranger.cancel().await.unwrap();

    within(
        "tasks/cancel",
        client.cancel_task(CancelTaskParams::new(&task_id)),
    )
    .await
    .unwrap();
    let ended = poll_to_the_end(&client, &task_id).await;
    assert_eq!(ended.task.status, TaskStatus::Cancelled);
    // The cell is gone, and a terminated cell's values are not saved.
    let params = CallToolRequestParams::new("wait")
        .with_arguments(json!({"cell_id": cell_id}).as_object().unwrap().clone());
    let gone = within("wait", client.call_tool(params)).await.unwrap();
    assert!(
        text_of(&gone).contains(&format!("No cell with ID {cell_id}")),
        "{}",
        text_of(&gone)
    );
    let load = exec_once(&client, json!({"code": "text('never=' + load('never'))"})).await;
    let CallToolResponse::Complete(load) = load else {
        panic!("{load:?}");
    };
    assert!(
        text_of(&load).contains("never=undefined"),
        "{}",
        text_of(&load)
    );
    client.cancel().await.unwrap();
}

/// `codemode mcp` with another `codemode mcp` as its downstream server `inner`, logging what the
/// inner server writes to its standard error.
async fn nested(folder: &std::path::Path) -> (Client, tokio::process::ChildStderr) {
    let config = json!({"mcpServers": {"inner": {
        "command": CODEMODE,
        "args": ["mcp", "--store", folder.join("inner-store")],
        "env": {"CODEMODE_LOG": "info"}
    }}, "permissions": {"allow": ["*"]}});
    let config_path = folder.join("mcp.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let command = tokio::process::Command::new(CODEMODE).configure(|command| {
        command
            .arg("mcp")
            .arg("--config")
            .arg(&config_path)
            .arg("--store")
            .arg(folder.join("outer-store"))
            .env("CODEMODE_LOG", "codemode::downstream=info");
    });
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = within("connect", TaskClient.serve(transport))
        .await
        .expect("the outer server initialises");
    (client, stderr.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_awaits_a_downstream_tool_answered_with_a_task_and_terminating_it_cancels_the_task()
{
    let folder = codemode_test_support::scratch_folder("tasks-nested");
    let (client, stderr) = nested(&folder).await;
    // The inner exec outlives its yield time, so the inner server answers with a task; the
    // outer cell's await ends with the task's whole result.
    let code = r#"
const inner = await tools.inner__exec({
  code: "text('inner before'); await new Promise((resolve) => setTimeout(resolve, 300)); text('inner after')",
  yield_time_ms: 10,
});
text(inner.content.filter((block) => block.type === "text").map((block) => block.text).join("\n"));
"#;
    let done = exec_once(&client, json!({"code": code})).await;
    let CallToolResponse::Complete(done) = done else {
        panic!("{done:?}");
    };
    let output = text_of(&done);
    assert!(output.starts_with("Script completed"), "{output}");
    assert!(
        output.contains("inner before") && output.contains("inner after"),
        "{output}"
    );

    // An outer cell terminated while it awaits an inner task cancels the inner task, which
    // terminates the inner cell: here the outer cell is itself a task, cancelled by this client.
    let code = r#"
await tools.inner__exec({ code: "await new Promise((resolve) => setTimeout(resolve, 60000))", yield_time_ms: 10 });
"#;
    let running = exec_once(&client, json!({"code": code, "yield_time_ms": 300})).await;
    let CallToolResponse::Task(outer) = running else {
        panic!("{running:?}");
    };
    within(
        "tasks/cancel",
        client.cancel_task(CancelTaskParams::new(&outer.task.task_id)),
    )
    .await
    .unwrap();
    let ended = poll_to_the_end(&client, &outer.task.task_id).await;
    assert_eq!(ended.task.status, TaskStatus::Cancelled);
    // The inner server's log line, passed on by the outer server.
    wait_for_line(stderr, "cancelled an exec task").await;
    client.cancel().await.unwrap();
}
