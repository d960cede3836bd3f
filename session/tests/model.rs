//! What the model sees: the exec and wait descriptions, renderings, and error hints, as reviewed
//! snapshots. Cells run on QuickJS; wall times are pinned before rendering.

mod common;

use std::sync::Arc;
use std::time::Duration;

use codemode_protocol::{ToolDefinition, ToolKind, ToolName, WaitRequest};
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{
    CellReport, Session, SessionConfig, ToolCallContext, ToolError, ToolInvocation, ToolListError,
    ToolProvider, render_report, render_text,
};
use common::{MemoryStore, execute, observed, open, request, within};
use serde_json::{Value, json};

/// A realistic tool set: plain tools and two namespaces, with varied schemas.
struct RealisticTools;

fn tool(
    name: ToolName,
    description: &str,
    input: Option<Value>,
    output: Option<Value>,
) -> ToolDefinition {
    // Namespaced tools stand for MCP tools: they resolve with a CallToolResult.
    let result_type = name
        .namespace
        .is_some()
        .then_some(codemode_protocol::ResultType::CallToolResult);
    ToolDefinition::function(name, description)
        .with_input_schema(input)
        .with_output_schema(output)
        .with_result_type(result_type)
}

#[async_trait::async_trait]
impl ToolProvider for RealisticTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        Ok(vec![
            tool(
                ToolName::plain("echo"),
                "Returns its argument unchanged.",
                Some(json!({})),
                None,
            ),
            tool(
                ToolName::plain("sleep"),
                "Waits, then resolves.",
                Some(
                    json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0, "description": "How long to wait, in milliseconds."}}, "required": ["ms"]}),
                ),
                Some(json!({"type": "null"})),
            ),
            ToolDefinition::function(
                ToolName::plain("apply_patch"),
                "Applies a unified diff to the workspace.",
            )
            .with_kind(ToolKind::Freeform)
            .with_output_schema(
                json!({"type": "object", "properties": {"files_changed": {"type": "integer"}}, "required": ["files_changed"]}),
            ),
            tool(
                ToolName::plain("shell"),
                "Runs a command.\nThe command runs in a sandbox without network.",
                Some(json!({
                    "type": "object",
                    "properties": {
                        "command": {"type": "array", "items": {"type": "string"}, "description": "Program and arguments."},
                        "cwd": {"type": "string"},
                        "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."},
                        "timeout_ms": {"type": ["integer", "null"], "default": 10000}
                    },
                    "required": ["command"]
                })),
                Some(
                    json!({"type": "object", "properties": {"exit_code": {"type": "integer"}, "stdout": {"type": "string"}, "stderr": {"type": "string"}}, "required": ["exit_code", "stdout", "stderr"]}),
                ),
            ),
            tool(
                ToolName::namespaced("web", "search"),
                "Searches the web.",
                Some(json!({
                    "type": "object",
                    "properties": {
                        "q": {"type": "string", "description": "The query."},
                        "max-results": {"type": "integer", "default": 5},
                        "freshness": {"enum": ["day", "week", "month", "any"]}
                    },
                    "required": ["q"]
                })),
                Some(
                    json!({"type": "object", "properties": {"results": {"type": "array", "items": {"type": "object", "properties": {"title": {"type": "string"}, "url": {"type": "string"}, "snippet": {"type": "string"}}, "required": ["title", "url"]}}}, "required": ["results"]}),
                ),
            ),
            tool(
                ToolName::namespaced("web", "fetch"),
                "Fetches a page as markdown.",
                Some(
                    json!({"type": "object", "properties": {"url": {"type": "string"}, "format": {"const": "markdown"}}, "required": ["url"], "additionalProperties": false}),
                ),
                Some(json!({"type": "string"})),
            ),
            tool(
                ToolName::namespaced("web", "screenshot"),
                "Renders a page to an image block.",
                Some(
                    json!({"type": "object", "properties": {"url": {"type": "string"}, "viewport": {"type": "object", "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}}}}}),
                ),
                Some(
                    json!({"type": "object", "properties": {"type": {"const": "image"}, "data": {"type": "string"}, "mimeType": {"type": "string"}}}),
                ),
            ),
            tool(
                ToolName::namespaced("github", "create_issue"),
                "Opens an issue.",
                Some(json!({
                    "type": "object",
                    "properties": {
                        "repo": {"type": "string", "description": "owner/name"},
                        "title": {"type": "string"},
                        "body": {"type": "string"},
                        "labels": {"type": "array", "items": {"type": "string"}},
                        "assignee": {"anyOf": [{"type": "string"}, {"type": "null"}]}
                    },
                    "required": ["repo", "title"]
                })),
                Some(
                    json!({"type": "object", "properties": {"number": {"type": "integer"}, "url": {"type": "string"}}}),
                ),
            ),
            tool(
                ToolName::namespaced("github", "list_pull_requests"),
                "Lists pull requests.",
                Some(
                    json!({"type": "object", "properties": {"repo": {"type": "string"}, "state": {"type": "string", "enum": ["open", "closed", "all"]}, "page": {"type": "integer"}}, "required": ["repo"]}),
                ),
                Some(
                    json!({"type": "array", "items": {"type": "object", "properties": {"number": {"type": "integer"}, "title": {"type": "string"}, "draft": {"type": "boolean"}}}}),
                ),
            ),
            tool(
                ToolName::namespaced("github", "get-file"),
                "Reads a file at a ref.",
                Some(
                    json!({"type": "object", "properties": {"repo": {"type": "string"}, "path": {"type": "string"}, "ref": {"type": "string"}}, "required": ["repo", "path"]}),
                ),
                Some(
                    json!({"oneOf": [{"type": "object", "properties": {"content": {"type": "string"}, "encoding": {"enum": ["utf-8", "base64"]}}}, {"type": "null"}]}),
                ),
            ),
            tool(
                ToolName::namespaced("github", "search_code"),
                "Searches code.",
                Some(
                    json!({"allOf": [{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}, {"type": "object", "properties": {"per_page": {"type": "integer"}}}]}),
                ),
                Some(json!({"$ref": "#/$defs/CodeResults"})),
            ),
            tool(
                ToolName::namespaced("github", "whoami"),
                "The authenticated user.",
                None,
                Some(json!({"type": "object", "properties": {"login": {"type": "string"}}})),
            ),
        ])
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        _context: ToolCallContext,
    ) -> Result<codemode_protocol::JsonText, ToolError> {
        Ok(json!({"called": call.name.global_name()}).into())
    }
}

#[tokio::test]
async fn the_exec_and_wait_descriptions_declare_every_tool() {
    let session = Session::open(
        "descriptions",
        Arc::new(QuickJsEngine::new()),
        Arc::new(MemoryStore::default()),
        Arc::new(RealisticTools),
        SessionConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(session.tools().len(), 12);
    insta::assert_snapshot!("exec_description", session.exec_description());
    insta::assert_snapshot!("wait_description", session.wait_description());
}

/// Renders with the wall time pinned, so snapshots are stable.
fn rendered(mut report: CellReport, max_output_tokens: u64) -> String {
    report.wall_time = Duration::from_millis(1234);
    render_text(&render_report(&report, max_output_tokens))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renderings_of_each_status() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("renderings", &store, SessionConfig::default()).await;
    let completed = execute(&session, "completed", request(
        r#"text("found 2 results"); text({ first: "a", second: "b" }); image("data:image/png;base64,iVBORw0KGgo=", "low");"#,
    )).await;
    insta::assert_snapshot!("completed", rendered(completed, 10_000));

    let failed = execute(
        &session,
        "failed",
        request("text(\"step 1\");\nconst rows = null;\nrows.map((row) => row.id);"),
    )
    .await;
    insta::assert_snapshot!("failed", rendered(failed, 10_000));

    let running = execute(
        &session,
        "running",
        request(r#"text("started"); yield_control(); await tools.gate();"#),
    )
    .await;
    let cell_id = running.cell_id.to_string();
    insta::assert_snapshot!("running", rendered(running, 10_000));
    // Terminate once the tool call is running, so the kill ledger shows it cancelled.
    within("the gated call", async {
        while tools.calls.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    let terminated = observed(
        within(
            "terminated",
            session.wait(WaitRequest {
                cell_id,
                yield_time_ms: None,
                max_tokens: None,
                terminate: true,
                cell_ids: Vec::new(),
            }),
        )
        .await
        .unwrap(),
    );
    insta::assert_snapshot!("terminated", rendered(terminated, 10_000));

    let truncated = execute(
        &session,
        "truncated",
        request(r#"for (let i = 0; i < 200; i++) text(`line ${i}: ${"x".repeat(40)}`);"#),
    )
    .await;
    insta::assert_snapshot!("truncated", rendered(truncated, 200));
    tools.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_hints_point_at_the_source_and_the_closest_tools() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("hints", &store, SessionConfig::default()).await;
    let mut hints = Vec::new();
    for source in [
        "const hits = await tools.web__serch({ q: \"rust\" });",
        "const hits = await search({ q: \"rust\" });",
        "text(1);\nif (true) {\n  text(2);\n",
        "text(\"a\");\n\tconst value = undefinedThing + 1;",
    ] {
        let report = execute(&session, "cell", request(source)).await;
        hints.push(rendered(report, 10_000));
    }
    insta::assert_snapshot!("error_hints", hints.join("\n\n==========\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_wait_tools_refuse_bad_input_with_errors_the_model_can_act_on() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("model-errors", &store, SessionConfig::default()).await;
    let mut answers = Vec::new();
    for input in ["", "// @exec: {\"yield\": 1}\ntext(1)"] {
        let result = session.exec_tool("call-1", input).await;
        assert!(result.is_error);
        answers.push(render_text(&result.items));
    }
    let unknown = session
        .wait_tool(WaitRequest {
            cell_id: "99".into(),
            yield_time_ms: None,
            max_tokens: None,
            terminate: false,
            cell_ids: Vec::new(),
        })
        .await;
    assert!(unknown.is_error);
    answers.push(render_text(&unknown.items));
    insta::assert_snapshot!("model_errors", answers.join("\n---\n"));
    // A pragma sets the budget of the rendering.
    let result = session
        .exec_tool(
            "call-2",
            "// @exec: {\"max_output_tokens\": 10}\ntext(\"y\".repeat(100));",
        )
        .await;
    assert!(!result.is_error);
    assert!(render_text(&result.items).contains("output truncated: 100 bytes"));
}

/// Tools as a big MCP server lists them: a namespace, a description, an input schema.
struct GeneratedTools(usize);

#[async_trait::async_trait]
impl ToolProvider for GeneratedTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let verbs = ["create", "get", "list", "update", "delete", "search"];
        let nouns = [
            "issue",
            "pull_request",
            "branch",
            "release",
            "comment",
            "label",
            "milestone",
            "workflow",
            "gist",
            "team",
        ];
        Ok((0..self.0)
            .map(|index| {
                let verb = verbs[index % verbs.len()];
                let noun = nouns[(index / verbs.len()) % nouns.len()];
                tool(
                    ToolName::namespaced("github", format!("{verb}_{noun}_{index}")),
                    &format!("{verb} a {noun} in a repository (variant {index}).\nReturns the {noun} as the API gives it."),
                    Some(json!({
                        "type": "object",
                        "properties": {
                            "owner": {"type": "string", "description": "The repository's owner."},
                            "repo": {"type": "string", "description": "The repository's name."},
                            "number": {"type": "integer", "description": "Which one."},
                            "body": {"type": "string"}
                        },
                        "required": ["owner", "repo"]
                    })),
                    None,
                )
            })
            .collect())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        _context: ToolCallContext,
    ) -> Result<codemode_protocol::JsonText, ToolError> {
        Ok(json!({"called": call.name.global_name()}).into())
    }
}

async fn description_for(count: usize) -> String {
    let session = Session::open(
        "generated",
        Arc::new(QuickJsEngine::new()),
        Arc::new(MemoryStore::default()),
        Arc::new(GeneratedTools(count)),
        SessionConfig::default(),
    )
    .await
    .unwrap();
    session.exec_description()
}

#[tokio::test]
async fn five_tools_are_declared_in_full() {
    let description = description_for(5).await;
    // The shared result type first, then the tools.
    assert!(
        description.contains(
            "```ts\n// Shared MCP types: what an MCP tool's promise resolves with.\ntype Role ="
        ) && description
            .contains("type CallToolResult<TStructured = { [key: string]: unknown }> = {")
            && description.contains("};\n\ndeclare const tools: {"),
        "{description}"
    );
    insta::assert_snapshot!("exec_description_5_tools", description);
}

#[tokio::test]
async fn three_hundred_tools_degrade_to_fit_the_budget_and_say_how_to_find_the_rest() {
    let description = description_for(300).await;
    let tools_part = description.split("Tools:\n").nth(1).unwrap();
    let budget_bytes = 2_000 * 4;
    assert!(
        tools_part.len() <= budget_bytes,
        "the tools part is {} bytes",
        tools_part.len()
    );
    assert!(
        description.contains("search_tools(\"words\")"),
        "{description}"
    );
    insta::assert_snapshot!("exec_description_300_tools", description);
}
