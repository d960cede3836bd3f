//! Servers that fail alone: beside a healthy server (a real child process speaking MCP), a command
//! that does not exist, a server that exits at once and one that starts late are left out of the
//! tools, reported with their reasons, and retried until they answer; the healthy server's
//! tools keep working throughout. A call the server refuses with a JSON-RPC error resolves as
//! an error result, as upstream code mode resolves it.

use std::sync::Arc;
use std::time::Duration;

use codemode_host_adapters::{
    CompositeTools, McpServerConfig, McpTools, McpTransport, MemoryStore,
};
use codemode_protocol::{ExecuteRequest, OutputItem};
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{CellEvent, Session, SessionConfig, ToolProvider};
use codemode_test_support::within;

const SERVER: &str = env!("CARGO_BIN_EXE_codemode-test-mcp-server");

fn server(namespace: &str, program: &str, args: &[&str]) -> McpTools {
    McpTools::new(
        McpServerConfig::new(
            namespace,
            McpTransport::stdio(program, args.iter().map(|arg| (*arg).to_owned()).collect()),
        )
        .with_startup_timeout(Duration::from_secs(10)),
    )
}

async fn run(session: &Session, source: &str) -> (Vec<OutputItem>, Option<String>, Vec<String>) {
    let report = within(
        "cell",
        session.execute(ExecuteRequest {
            call_id: "call-1".into(),
            source: source.into(),
            yield_time_ms: None,
            max_output_tokens: None,
        }),
    )
    .await
    .unwrap();
    match report.event {
        CellEvent::Completed {
            output, error_text, ..
        } => (output.into_items(), error_text, report.error_hints),
        other => panic!("the cell did not complete: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_servers_are_left_out_with_their_reasons_and_the_healthy_one_serves() {
    let tools = Arc::new(
        CompositeTools::new()
            .with_named("missing", server("missing", "/nonexistent/mcp-server", &[]))
            .with_named(
                "crashing",
                server(
                    "crashing",
                    "sh",
                    &["-c", "echo 'config error: no database URL' >&2; exit 3"],
                ),
            )
            .with_named("test", server("test", SERVER, &[])),
    );
    let session = within(
        "the session opens though two servers are down",
        Session::open(
            "failing",
            Arc::new(QuickJsEngine::new()),
            Arc::new(MemoryStore::new()),
            Arc::clone(&tools) as Arc<dyn ToolProvider>,
            SessionConfig::default(),
        ),
    )
    .await
    .expect("one server's failure never fails the session");
    let names: Vec<String> = session
        .tools()
        .iter()
        .map(|tool| tool.global_name())
        .collect();
    assert!(names.contains(&"test__add".to_owned()), "{names:?}");
    assert!(
        names.iter().all(|name| name.starts_with("test__")),
        "{names:?}"
    );

    let down = session.unavailable();
    let reason = |name: &str| {
        down.iter()
            .find(|down| down.name == name)
            .unwrap_or_else(|| panic!("{name} is not reported down: {down:?}"))
            .reason
            .clone()
    };
    let missing = reason("missing");
    assert!(
        missing.contains("cannot start the MCP server \"missing\" (/nonexistent/mcp-server)"),
        "{missing}"
    );
    let crashing = reason("crashing");
    assert!(crashing.contains("it exited with status 3"), "{crashing}");
    assert!(
        crashing.contains("its stderr ended: config error: no database URL"),
        "{crashing}"
    );
    let description = session.exec_description();
    assert!(description.contains("Servers down now"), "{description}");
    assert!(description.contains("\n- missing: "), "{description}");

    // The healthy server's tools work; a call of a down server's tool says why it is missing.
    let (items, error, _) = run(
        &session,
        "text((await tools.test__add({a: 2, b: 3})).structuredContent.sum)",
    )
    .await;
    assert_eq!((items, error), (vec![OutputItem::text("5")], None));
    let (items, _, _) = run(
        &session,
        "text(`${ALL_TOOLS.length} ${Object.isFrozen(ALL_TOOLS.unavailable)} ${JSON.stringify(ALL_TOOLS.unavailable.map((down) => down.server))}`)",
    )
    .await;
    assert_eq!(
        items,
        [OutputItem::text(format!(
            "{} true [\"missing\",\"crashing\"]",
            names.len()
        ))]
    );
    let (_, error, hints) = run(&session, "await tools.crashing__anything({})").await;
    assert!(error.is_some());
    assert!(
        hints
            .iter()
            .any(|hint| hint.contains("the server \"crashing\" is down (")),
        "{hints:?}"
    );
    tools.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_starts_late_is_retried_and_its_tools_come_back() {
    let ready = codemode_test_support::scratch_folder("late-server").join("ready");
    // Fails (exit 1) until the file exists, then is the real server.
    let script = format!(
        "test -f '{}' || {{ echo 'not ready yet' >&2; exit 1; }}; exec '{SERVER}'",
        ready.display()
    );
    let tools = Arc::new(
        CompositeTools::new()
            .with_named("test", server("test", SERVER, &[]))
            .with_named("late", server("late", "sh", &["-c", &script])),
    );
    let listed = within("list", tools.list_tools()).await.unwrap();
    assert!(
        listed
            .iter()
            .all(|tool| tool.global_name().starts_with("test__"))
    );
    assert_eq!(tools.unavailable().len(), 1);
    let version = tools.tools_version();
    // While it is down, a listing does not wait for it.
    let again = within("list again", tools.list_tools()).await.unwrap();
    assert_eq!(again.len(), listed.len());

    std::fs::write(&ready, "").unwrap();
    within("the retry finds the server up", async {
        while tools.tools_version() == version {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(tools.unavailable().is_empty(), "{:?}", tools.unavailable());
    let listed = within("list once it is up", tools.list_tools())
        .await
        .unwrap();
    assert!(
        listed.iter().any(|tool| tool.global_name() == "late__add"),
        "{:?}",
        listed
            .iter()
            .map(|tool| tool.global_name())
            .collect::<Vec<_>>()
    );
    tools.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_server_refuses_resolves_as_an_error_result_with_its_message() {
    let tools = Arc::new(server("test", SERVER, &[]));
    let session = within(
        "open",
        Session::open(
            "refused",
            Arc::new(QuickJsEngine::new()),
            Arc::new(MemoryStore::new()),
            Arc::clone(&tools) as Arc<dyn ToolProvider>,
            SessionConfig::default(),
        ),
    )
    .await
    .unwrap();
    // `a` must be a number: the server answers with JSON-RPC "invalid params".
    let (items, error, _) = run(
        &session,
        r#"const result = await tools.test__add({ a: "two", b: 3 });
           text(`${result.isError} ${result.content.length} ${result.content[0].type} ${result.content[0].text}`);"#,
    )
    .await;
    assert_eq!(error, None, "the call resolves, it does not reject");
    let [OutputItem::Text { text }] = items.as_slice() else {
        panic!("{items:?}")
    };
    assert!(text.starts_with("true 1 text "), "{text}");
    assert!(
        text.contains("a"),
        "the server's message names the argument: {text}"
    );
    tools.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_still_starting_past_the_startup_window_arrives_later_started_once() {
    let folder = codemode_test_support::scratch_folder("composite-startup-window");
    let starts = folder.as_path().join("starts");
    // Says each start in a file, then takes 4 s before it speaks MCP.
    let late = format!(
        "echo started >> '{}'; sleep 4; exec '{SERVER}'",
        starts.display()
    );
    let tools = Arc::new(
        CompositeTools::new()
            .with_named("test", server("test", SERVER, &[]))
            .with_named("late", server("late", "sh", &["-c", &late])),
    );
    tools.set_startup_window(Some(Duration::from_millis(500)));
    let before = tools.tools_version();
    let first = within(
        "the first listing, bounded by the window",
        tools.list_tools(),
    )
    .await
    .unwrap();
    assert!(
        first
            .iter()
            .all(|tool| tool.name.namespace.as_deref() != Some("late")),
        "{first:?}"
    );
    let starting: Vec<_> = tools
        .unavailable()
        .into_iter()
        .filter(|down| down.name == "late")
        .collect();
    assert_eq!(starting.len(), 1, "{starting:?}");
    assert!(
        starting[0].reason.contains("still starting"),
        "{starting:?}"
    );
    // A listing meanwhile leaves it starting, and does not start it again.
    within("a second listing", tools.list_tools())
        .await
        .unwrap();
    // When it answers, the version moves, and the next listing has its tools.
    within("the late server's start", async {
        loop {
            if tools.tools_version() != before
                && tools.unavailable().iter().all(|down| down.name != "late")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let later = within("the listing after it started", tools.list_tools())
        .await
        .unwrap();
    for namespace in ["test", "late"] {
        assert!(
            later
                .iter()
                .any(|tool| tool.name.namespace.as_deref() == Some(namespace)),
            "{namespace}: {later:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&starts).unwrap().lines().count(),
        1,
        "the late server was started once"
    );
    tools.shutdown().await;
}
