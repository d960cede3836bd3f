//! MCP tools from JavaScript cells, against a real MCP server child process speaking the real
//! protocol (`codemode-test-mcp-server`), over stdio and over streamable HTTP.

use std::sync::Arc;
use std::time::Duration;

use codemode_host_adapters::{
    CompositeTools, InProcessTools, McpServerConfig, McpTools, McpTransport, MemoryStore,
};
use codemode_protocol::{ExecuteRequest, ImageDetail, ImageItem, OutputItem, ToolKind, ToolName};
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{
    CellEvent, Session, SessionConfig, ToolCallContext, ToolCallFate, ToolErrorKind,
    ToolInvocation, ToolListErrorKind, ToolProvider, WaitOutcome,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SERVER: &str = env!("CARGO_BIN_EXE_codemode-test-mcp-server");
use codemode_test_support::{ListeningServer, within};

fn stdio_server(namespace: &str) -> McpTools {
    McpTools::new(McpServerConfig::new(
        namespace,
        McpTransport::stdio(SERVER, Vec::new()),
    ))
}

async fn session(tools: impl ToolProvider) -> Session {
    Session::open(
        "mcp",
        Arc::new(QuickJsEngine::new()),
        Arc::new(MemoryStore::new()),
        Arc::new(tools),
        SessionConfig::default(),
    )
    .await
    .expect("the session opens and lists the server's tools")
}

fn request(source: &str) -> ExecuteRequest {
    ExecuteRequest {
        call_id: "call-1".into(),
        source: source.into(),
        yield_time_ms: None,
        max_output_tokens: None,
    }
}

async fn run(session: &Session, source: &str) -> (Vec<OutputItem>, Option<String>) {
    let report = within("cell", session.execute(request(source)))
        .await
        .unwrap();
    match report.event {
        CellEvent::Completed {
            output, error_text, ..
        } => (output.into_items(), error_text),
        other => panic!("the cell did not complete: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tools_are_listed_under_its_namespace_with_their_schemas() {
    let tools = stdio_server("test");
    let listed = within("list", tools.list_tools()).await.unwrap();
    let names: Vec<String> = listed.iter().map(|tool| tool.global_name()).collect();
    assert_eq!(
        names,
        [
            "test__add",
            "test__fail",
            "test__forget",
            "test__image",
            "test__log",
            "test__note",
            "test__pid",
            "test__sleep",
            "test__traceparent"
        ]
    );
    let add = &listed[0];
    // The server's instructions follow each of its tools' own description.
    assert_eq!(
        add.description,
        "Adds two numbers.\n\nFrom the server's instructions: A test server: add, image, fail, \
         sleep, note, forget, log, traceparent, pid."
    );
    // Each tool's annotations are kept: read-only, destructive, or none.
    let annotations = |name: &str| {
        listed
            .iter()
            .find(|tool| tool.global_name() == name)
            .unwrap()
            .annotations
    };
    assert_eq!(
        annotations("test__add"),
        Some(codemode_protocol::ToolAnnotations::read_only())
    );
    assert_eq!(
        annotations("test__forget"),
        Some(codemode_protocol::ToolAnnotations::writes(true))
    );
    assert_eq!(annotations("test__note"), None);
    let schema = add.input_schema.as_ref().unwrap();
    assert_eq!(
        schema["properties"]["a"]["description"],
        json!("The first number.")
    );
    assert_eq!(schema["required"], json!(["a", "b"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tool_resolves_with_what_its_declaration_says() {
    let session = session(stdio_server("test")).await;
    let (items, error) = run(
        &session,
        r#"
        const declared = (name) => ALL_TOOLS.find((tool) => tool.name === name).declaration;
        // add has an output schema: a CallToolResult whose structuredContent has its type.
        text(declared("test__add").includes("Promise<CallToolResult<{"));
        text(declared("test__add").includes("sum: number"));
        const sum = await tools.test__add({ a: 1, b: 2 });
        text(JSON.stringify(Object.keys(sum).sort()));
        text(JSON.stringify(sum.structuredContent));
        // pid has none: a CallToolResult with the default structured type.
        text(declared("test__pid").includes("Promise<CallToolResult>"));
        const pid = await tools.test__pid();
        text(pid.content[0].type === "text" && String(Number(pid.content[0].text)) === pid.content[0].text);
        // A failure the tool reports resolves, with isError.
        const failed = await tools.test__fail({ message: "on purpose" });
        text(JSON.stringify(Object.keys(failed).sort()));
        text(failed.isError === true && failed.content[0].text === "on purpose");
    "#,
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(
        items,
        [
            OutputItem::text("true"),
            OutputItem::text("true"),
            OutputItem::text(r#"["content","isError","structuredContent"]"#),
            OutputItem::text(r#"{"sum":3}"#),
            OutputItem::text("true"),
            OutputItem::text("true"),
            OutputItem::text(r#"["content","isError"]"#),
            OutputItem::text("true"),
        ]
    );
    // The exec description declares the shared MCP types once, before the tools.
    let description = session.exec_description();
    assert_eq!(
        description
            .matches("type CallToolResult<TStructured = { [key: string]: unknown }> = {")
            .count(),
        1,
        "{description}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_from_the_server_is_forwarded_with_image() {
    let session = session(stdio_server("test")).await;
    let (items, error) = run(
        &session,
        r#"const result = await tools.test__image(); image(result.content[0]);"#,
    )
    .await;
    assert_eq!(error, None);
    let [OutputItem::Image(ImageItem { image_url, detail })] = items.as_slice() else {
        panic!("{items:?}")
    };
    assert!(
        image_url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{image_url}"
    );
    assert_eq!(*detail, ImageDetail::High);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_resolves_with_is_error_and_the_servers_message() {
    let session = session(stdio_server("test")).await;
    let (items, error) = run(
        &session,
        r#"
        const result = await tools.test__fail({ message: "quota exceeded" });
        if (result.isError === true) text(`failed: ${result.content[0].text}`);
    "#,
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(items, [OutputItem::text("failed: quota exceeded")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_tool_is_cancelled_when_its_cell_is_terminated_mid_call() {
    let session = session(stdio_server("test")).await;
    // The call is in flight before the yield is delivered: ToolCall precedes YieldRequested.
    let started = within("start", session.execute(request(
        r#"const sleeping = tools.test__sleep({ ms: 60000 }); yield_control(); await sleeping;"#,
    )))
    .await
    .unwrap();
    assert!(matches!(started.event, CellEvent::Yielded { .. }));
    let WaitOutcome::Observed(terminated) =
        within("terminate", session.terminate(&started.cell_id))
            .await
            .unwrap()
    else {
        panic!("the cell is found")
    };
    let CellEvent::Terminated { tool_calls, .. } = terminated.event else {
        panic!("{terminated:?}")
    };
    assert_eq!(tool_calls.len(), 1);
    assert_eq!(tool_calls[0].name.global_name(), "test__sleep");
    assert_eq!(tool_calls[0].fate, ToolCallFate::Cancelled);
    // The server is still usable.
    let (items, _) = run(
        &session,
        r#"text((await tools.test__add({ a: 2, b: 2 })).structuredContent.sum);"#,
    )
    .await;
    assert_eq!(items, [OutputItem::text("4")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_between_two_calls_is_started_again_for_the_next() {
    let tools = Arc::new(stdio_server("test"));
    let session = Session::open(
        "mcp",
        Arc::new(QuickJsEngine::new()),
        Arc::new(MemoryStore::new()),
        Arc::clone(&tools) as Arc<dyn ToolProvider>,
        SessionConfig::default(),
    )
    .await
    .unwrap();
    let listed_at_open = tools.tools_version();
    let (items, _) = run(
        &session,
        r#"text((await tools.test__pid()).content[0].text);"#,
    )
    .await;
    let [OutputItem::Text { text: pid }] = items.as_slice() else {
        panic!("{items:?}")
    };
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let (items, error) = run(
        &session,
        r#"
        const sum = await tools.test__add({ a: 20, b: 22 });
        text(sum.structuredContent.sum);
        text((await tools.test__pid()).content[0].text);
    "#,
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(items[0], OutputItem::text("42"));
    assert_ne!(
        items[1],
        OutputItem::text(pid.clone()),
        "a new server process answers"
    );
    // Started again, it may offer other tools: they are listed again for the next cell.
    assert!(tools.tools_version() > listed_at_open);
    let (items, _) = run(
        &session,
        r#"text(ALL_TOOLS.filter((tool) => tool.name.startsWith("test__")).length > 0)"#,
    )
    .await;
    assert_eq!(items, [OutputItem::text("true")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_clearly() {
    let tools = McpTools::new(
        McpServerConfig::new("test", McpTransport::stdio(SERVER, Vec::new()))
            .with_call_timeout(Duration::from_millis(300)),
    );
    let session = session(tools).await;
    let (items, _) = run(
        &session,
        r#"
        try { await tools.test__sleep({ ms: 10000 }); } catch (error) { text(error.message); }
    "#,
    )
    .await;
    assert_eq!(
        items,
        [OutputItem::text(
            "tools.test__sleep timed out: the MCP server \"test\" did not answer within 0.3 s"
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_streamable_http_serves_cells_too() {
    let mut command = std::process::Command::new(SERVER);
    command.args(["--http", "127.0.0.1:0"]);
    let server = ListeningServer::spawn(command);
    let url = server.url().to_owned();
    let tools = McpTools::new(McpServerConfig::new("remote", McpTransport::http(url)));
    let session = session(tools).await;
    let (items, error) = run(
        &session,
        r#"text((await tools.remote__add({ a: 1.5, b: 2 })).structuredContent.sum);"#,
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(items, [OutputItem::text("3.5")]);
    drop(session);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_trace_context_reaches_an_http_server_in_meta_and_as_its_header() {
    let mut command = std::process::Command::new(SERVER);
    command.args(["--http", "127.0.0.1:0"]);
    let server = ListeningServer::spawn(command);
    let tools = McpTools::new(McpServerConfig::new(
        "remote",
        McpTransport::http(server.url().to_owned()),
    ));
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut config = SessionConfig::default();
    config.trace_context = Some(Arc::new(move || {
        vec![("traceparent".to_owned(), traceparent.to_owned())]
    }));
    let session = Session::open(
        "mcp",
        Arc::new(QuickJsEngine::new()),
        Arc::new(MemoryStore::new()),
        Arc::new(tools),
        config,
    )
    .await
    .unwrap();
    let (items, error) = run(
        &session,
        r#"for (const block of (await tools.remote__traceparent({})).content) text(block.text);"#,
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(
        items,
        [
            OutputItem::text(traceparent),
            OutputItem::text(format!("header: {traceparent}"))
        ]
    );
    drop(session);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_merges_providers_and_the_first_of_two_alike_names_wins() {
    let local = InProcessTools::new().function(
        "shout",
        "Upper-cases text.",
        json!({"type": "string"}),
        |input| async move {
            Ok(json!(
                input
                    .and_then(|input| input.as_str().map(str::to_uppercase))
                    .unwrap_or_default()
            ))
        },
    );
    let session = session(CompositeTools::new().with(local).with(stdio_server("test"))).await;
    assert_eq!(session.tools().len(), 10);
    let (items, error) = run(
        &session,
        r#"
        text(await tools.shout("hi"));
        text((await tools.test__add({ a: 1, b: 1 })).structuredContent.sum);
    "#,
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(items, [OutputItem::text("HI"), OutputItem::text("2")]);

    // Two tools that would be the same global: the first keeps it, the other is left out, and
    // calls reach the first.
    let shadowing = InProcessTools::new().function(
        "same__add",
        "Not the server's add.",
        json!({"type": "object"}),
        |_| async move { Ok(json!("the in-process one")) },
    );
    let shadowed = crate::session(
        CompositeTools::new()
            .with(stdio_server("same"))
            .with(shadowing),
    )
    .await;
    let names: Vec<String> = shadowed
        .tools()
        .iter()
        .map(|tool| tool.global_name())
        .collect();
    assert_eq!(
        names.iter().filter(|name| *name == "same__add").count(),
        1,
        "{names:?}"
    );
    let (items, error) = run(
        &shadowed,
        "text((await tools.same__add({ a: 2, b: 3 })).structuredContent.sum);",
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(items, [OutputItem::text("5")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_a_clear_error() {
    let tools = McpTools::new(McpServerConfig::new(
        "missing",
        McpTransport::stdio("/nonexistent/mcp-server", Vec::new()),
    ));
    let error = within("list", tools.list_tools()).await.unwrap_err();
    assert_eq!(error.kind, ToolListErrorKind::Unavailable);
    assert!(
        error
            .message
            .starts_with("cannot start the MCP server \"missing\" (/nonexistent/mcp-server)"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_tool_list_changed_notification_moves_the_tools_version() {
    // server-everything registers more tools once the client has initialised, and says so with
    // notifications/tools/list_changed.
    let servers = codemode_test_support::mcp_servers::install(
        &codemode_test_support::mcp_servers::workspace_root(),
    )
    .unwrap_or_else(|error| panic!("the real MCP servers could not be installed: {error}"));
    let program = servers.npm_program("mcp-server-everything");
    let tools = McpTools::new(McpServerConfig::new(
        "everything",
        McpTransport::stdio(program.display().to_string(), vec!["stdio".to_owned()]),
    ));
    let before = tools.tools_version();
    within("the first listing", tools.list_tools())
        .await
        .unwrap();
    within("the notification", async {
        while tools.tools_version() == before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tools.shutdown().await;
}

/// A call of `name` (namespaced as the server's tools are) with `input`.
fn invocation(namespace: &str, name: &str, input: serde_json::Value) -> ToolInvocation {
    ToolInvocation {
        id: "tool-1".into(),
        name: match namespace {
            "" => ToolName::plain(name),
            namespace => ToolName::namespaced(namespace, name),
        },
        kind: ToolKind::Function,
        input: Some(input.into()),
    }
}

/// Each way a call fails says which kind of failure it is, through the composite as directly:
/// an unknown name, an argument the tool cannot take, the tool's own failure, a server that
/// cannot be reached, and a cancelled call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_says_what_kind_of_failure_it_was() {
    let in_process = InProcessTools::new().function("broken", "Fails.", json!({}), |_| async {
        Err("the tool broke".into())
    });
    let tools = CompositeTools::new()
        .with(stdio_server("test"))
        .with(in_process);
    within("list", tools.list_tools()).await.unwrap();
    let call = |namespace: &'static str, name: &'static str, input: serde_json::Value| {
        let tools = &tools;
        async move {
            within(
                "call",
                tools.call_tool(
                    invocation(namespace, name, input),
                    ToolCallContext::new(CancellationToken::new()),
                ),
            )
            .await
            .unwrap_err()
        }
    };
    let unknown = call("test", "nothing_here", json!({})).await;
    assert_eq!(unknown.kind, ToolErrorKind::NotFound, "{unknown}");
    let not_an_object = call("test", "add", json!([1, 2])).await;
    assert_eq!(
        not_an_object.kind,
        ToolErrorKind::InvalidArguments,
        "{not_an_object}"
    );
    let broken = call("", "broken", json!({})).await;
    assert_eq!(
        (broken.kind, broken.message.as_str()),
        (ToolErrorKind::Failed, "the tool broke")
    );
    // A server that cannot be started, called directly.
    let missing = McpTools::new(McpServerConfig::new(
        "missing",
        McpTransport::stdio("/nonexistent/mcp-server", Vec::new()),
    ));
    let unreachable = within(
        "call",
        missing.call_tool(
            invocation("missing", "anything", json!({})),
            ToolCallContext::new(CancellationToken::new()),
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        unreachable.kind,
        ToolErrorKind::Unavailable,
        "{unreachable}"
    );
    let cancellation = CancellationToken::new();
    let sleeping = tools.call_tool(
        invocation("test", "sleep", json!({"ms": 60000})),
        ToolCallContext::new(cancellation.clone()),
    );
    cancellation.cancel();
    let cancelled = within("cancelled call", sleeping).await.unwrap_err();
    assert_eq!(cancelled.kind, ToolErrorKind::Cancelled, "{cancelled}");
}

/// Two in-process tools with one name cannot both be offered: the listing says so, as a
/// conflict the configuration must resolve.
#[tokio::test]
async fn two_in_process_tools_with_one_name_are_a_conflict() {
    let tools = InProcessTools::new()
        .function("twin", "One.", json!({}), |_| async { Ok(json!(1)) })
        .function("twin", "Two.", json!({}), |_| async { Ok(json!(2)) });
    let error = tools.list_tools().await.unwrap_err();
    assert_eq!(error.kind, ToolListErrorKind::Conflict);
    assert!(error.message.contains("tools.twin"), "{error}");
}
