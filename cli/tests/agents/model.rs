//! A scripted model endpoint on loopback that speaks the streaming APIs the agents call: the
//! Messages API (Claude Code, `POST /v1/messages`) and the Responses API (Codex CLI,
//! `POST /v1/responses`), as server-sent events. It plays a script: each request that offers
//! codemode's tools gets the step for the number of tool results its conversation holds (a call
//! of `exec` or `wait`, or, past the script, a final answer), so that a request an agent makes
//! twice gets the same answer; the requests and the tool results they carry are recorded for
//! the test to read.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What the model does next.
pub enum Step {
    /// Calls codemode's `tool` (`exec`, `wait`) with the arguments made from the text of the
    /// last tool result (empty before the first).
    Call {
        tool: &'static str,
        arguments: Box<dyn Fn(&str) -> Value + Send>,
    },
}

impl Step {
    /// `exec` of `code`.
    pub fn exec(code: &str) -> Step {
        let code = code.to_owned();
        Step::Call {
            tool: "exec",
            arguments: Box::new(move |_| json!({ "code": code })),
        }
    }

    /// `wait` on the cell the last result said is running.
    pub fn wait_on_the_running_cell() -> Step {
        Step::Call {
            tool: "wait",
            // No running cell named: a cell id that cannot exist, which the test sees fail.
            arguments: Box::new(|last| {
                let cell_id = last
                    .lines()
                    .find_map(|line| line.strip_prefix("Script running with cell ID "))
                    .unwrap_or("no-running-cell-in-the-last-result");
                json!({ "cell_id": cell_id.trim() })
            }),
        }
    }
}

/// What the endpoint recorded.
#[derive(Default)]
struct Played {
    steps: Vec<Step>,
    /// Every request that offered codemode's tools, in order.
    requests: Vec<Value>,
    /// The text of each tool result the agent sent back, by its place in the conversation.
    results: Vec<String>,
}

/// The endpoint, serving until dropped.
pub struct ScriptedModel {
    pub url: String,
    played: Arc<Mutex<Played>>,
    _server: tokio::task::JoinHandle<()>,
}

impl ScriptedModel {
    /// Serves `steps` on a loopback port.
    pub async fn start(steps: Vec<Step>) -> ScriptedModel {
        let played = Arc::new(Mutex::new(Played {
            steps,
            ..Played::default()
        }));
        let router = axum::Router::new()
            .route("/v1/messages", axum::routing::post(messages))
            .route("/v1/responses", axum::routing::post(responses))
            .with_state(Arc::clone(&played));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        ScriptedModel {
            url,
            played,
            _server: server,
        }
    }

    /// The requests that offered codemode's tools.
    pub fn requests(&self) -> Vec<Value> {
        self.played.lock().unwrap().requests.clone()
    }

    /// The tool results the agent sent back, as text.
    pub fn results(&self) -> Vec<String> {
        self.played.lock().unwrap().results.clone()
    }

    /// How many steps the script has.
    pub fn steps(&self) -> usize {
        self.played.lock().unwrap().steps.len()
    }
}

/// The step for a request whose conversation holds `results` (the text of each tool result, in
/// order); `None` past the script's end.
fn step_for(
    played: &Mutex<Played>,
    request: &Value,
    results: Vec<String>,
) -> Option<(String, Value)> {
    let mut played = played.lock().unwrap();
    played.requests.push(request.clone());
    if results.len() > played.results.len() {
        played.results = results.clone();
    }
    let Step::Call { tool, arguments } = played.steps.get(results.len())?;
    let last = results.last().map(String::as_str).unwrap_or_default();
    Some(((*tool).to_owned(), arguments(last)))
}

/// The texts of content blocks (`[{type: "text" | "input_text", text}]`, or a string).
fn texts(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Server-sent events, named, as one body.
fn events(events: Vec<(&str, Value)>) -> Response {
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    ([("content-type", "text/event-stream")], body).into_response()
}

/// The Messages API (Claude Code).
async fn messages(State(played): State<Arc<Mutex<Played>>>, body: String) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    let tools: Vec<String> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect();
    let offered = tools.iter().any(|name| name.ends_with("codemode__exec"));
    let results = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .filter(|block| block["type"] == "tool_result")
        .map(|result| texts(&result["content"]))
        .collect();
    let step = if offered {
        step_for(&played, &request, results)
    } else {
        None
    };
    let start = json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message",
        "role": "assistant", "model": request["model"], "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}});
    let (block, delta, stop_reason) = match step {
        Some((tool, arguments)) => {
            let name = tools
                .iter()
                .find(|name| name.ends_with(&format!("codemode__{tool}")))
                .cloned()
                .unwrap_or(tool);
            (
                json!({"type": "tool_use", "id": format!("toolu_{}", played.lock().unwrap().requests.len()), "name": name, "input": {}}),
                json!({"type": "input_json_delta", "partial_json": arguments.to_string()}),
                "tool_use",
            )
        }
        None => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": "done"}),
            "end_turn",
        ),
    };
    events(vec![
        ("message_start", start),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 1}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

/// The Responses API (Codex CLI), whose MCP tools come in a namespace per server.
async fn responses(State(played): State<Arc<Mutex<Played>>>, body: String) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    let namespace = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|tool| tool["type"] == "namespace" && tool["name"] == "mcp__codemode")
        .cloned();
    let results = request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| texts(&item["output"]))
        .collect();
    let step = if namespace.is_some() {
        step_for(&played, &request, results)
    } else {
        None
    };
    let item = match step {
        Some((tool, arguments)) => json!({"type": "function_call", "id": "fc_scripted",
            "call_id": format!("call_{}", played.lock().unwrap().requests.len()), "name": tool,
            "namespace": "mcp__codemode", "arguments": arguments.to_string(), "status": "completed"}),
        None => json!({"type": "message", "id": "msg_scripted", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": "done", "annotations": []}]}),
    };
    let response =
        json!({"id": "resp_scripted", "object": "response", "status": "in_progress", "output": []});
    let mut completed = response.clone();
    completed["status"] = json!("completed");
    completed["output"] = json!([item]);
    completed["usage"] = json!({"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 2});
    events(vec![
        (
            "response.created",
            json!({"type": "response.created", "response": response}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": completed}),
        ),
    ])
}
