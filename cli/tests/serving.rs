//! `codemode mcp --http` served safely, through the real binary: tokens and tenants, Host and
//! Origin checks, sessions by identity across restarts, the server-wide limits, and a graceful
//! shutdown. A downstream tool that records its calls (the demo server's `note`) proves what ran.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use codemode_test_support::within;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

mod common;

use common::{
    ALPHA, BETA, CODEMODE, client, exec, last_line, running_cell_id, server, text_of,
    transport_config, wait_on,
};
fn scratch(name: &str) -> PathBuf {
    codemode_test_support::scratch_folder(&format!("serving-{name}"))
}

fn notes(folder: &Path) -> Vec<String> {
    std::fs::read_to_string(folder.join("notes"))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// A raw HTTP POST of an `exec` call, with these headers; the status code.
fn raw_post(url: &str, headers: &[(&str, &str)]) -> u16 {
    raw_post_code(url, headers, "await tools.demo__note({text: \"intruder\"})").0
}

/// A raw HTTP POST of an `exec` of `code`, with these headers; the status code and the response.
fn raw_post_code(url: &str, headers: &[(&str, &str)], code: &str) -> (u16, String) {
    let address = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "exec", "arguments": {"code": code}}})
    .to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    let mut has_host = false;
    for (name, value) in headers {
        has_host |= name.eq_ignore_ascii_case("host");
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !has_host {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_right_token_or_from_a_foreign_origin_or_host_run_nothing() {
    let folder = scratch("gate");
    let server = server(&folder, &[]);
    let url = server.url().to_owned();
    let alpha = format!("Bearer {ALPHA}");
    assert_eq!(raw_post(&url, &[]), 401, "no token");
    assert_eq!(
        raw_post(&url, &[("Authorization", "Bearer wrong-token-0123456789")]),
        401
    );
    assert_eq!(
        raw_post(
            &url,
            &[("Authorization", &alpha), ("Origin", "http://evil.example")]
        ),
        403,
        "a foreign origin"
    );
    assert_eq!(
        raw_post(&url, &[("Authorization", &alpha), ("Host", "evil.example")]),
        403,
        "a DNS-rebinding host"
    );
    assert!(
        notes(&folder).is_empty(),
        "a refused request ran: {:?}",
        notes(&folder)
    );
    // The right token runs the same call.
    let client = client(&url, ALPHA, None).await;
    assert_eq!(
        last_line(
            &client,
            r#"await tools.demo__note({text: "member"}); text("ok");"#
        )
        .await,
        "ok"
    );
    assert_eq!(notes(&folder), ["member"]);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_and_unnamed_sessions_never_see_each_others_values_even_after_a_restart() {
    let folder = scratch("tenants");
    let store = folder.join("store");
    let store_flag = ["--store", store.to_str().unwrap()];
    let read = r#"text(JSON.stringify([load("secret") ?? null]));"#;
    {
        let server = server(&folder, &store_flag);
        let alpha = client(server.url(), ALPHA, Some("work")).await;
        assert_eq!(
            last_line(&alpha, r#"store("secret", "alpha's"); text("stored");"#).await,
            "stored"
        );
        let beta = client(server.url(), BETA, Some("work")).await;
        assert_eq!(
            last_line(&beta, read).await,
            "[null]",
            "another tenant, same name"
        );
        let unnamed = client(server.url(), ALPHA, None).await;
        assert_eq!(
            last_line(&unnamed, r#"store("secret", "unnamed"); text("stored");"#).await,
            "stored"
        );
        let other_unnamed = client(server.url(), ALPHA, None).await;
        assert_eq!(
            last_line(&other_unnamed, read).await,
            "[null]",
            "another unnamed session"
        );
        assert_eq!(last_line(&alpha, read).await, r#"["alpha's"]"#);
        for client in [alpha, beta, unnamed, other_unnamed] {
            client.cancel().await.unwrap();
        }
    }
    // After a restart, a named session gets its values back; nobody else does.
    let server = server(&folder, &store_flag);
    let alpha = client(server.url(), ALPHA, Some("work")).await;
    assert_eq!(last_line(&alpha, read).await, r#"["alpha's"]"#);
    let beta = client(server.url(), BETA, Some("work")).await;
    assert_eq!(last_line(&beta, read).await, "[null]");
    let unnamed = client(server.url(), ALPHA, None).await;
    assert_eq!(last_line(&unnamed, read).await, "[null]");
    let bad_name = StreamableHttpClientTransport::from_config({
        let mut config =
            StreamableHttpClientTransportConfig::with_uri(server.url()).auth_header(ALPHA);
        config.custom_headers.insert(
            http::HeaderName::from_static("x-codemode-session"),
            http::HeaderValue::from_static("../escape"),
        );
        config
    });
    // The name is checked before it reaches a file path: the session never opens.
    match within("bad name", ().serve(bad_name)).await {
        Ok(client) => {
            let error = exec(&client, "text(1)").await.unwrap_err().to_string();
            assert!(error.contains("is not valid"), "{error}");
        }
        Err(error) => assert!(error.to_string().contains("is not valid"), "{error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_answers_with_its_name_and_value_and_the_server_keeps_serving() {
    let folder = scratch("limits");
    let server = server(
        &folder,
        &["--max-sessions", "1", "--max-cells", "1", "--demo-tools"],
    );
    let first = client(server.url(), ALPHA, Some("one")).await;
    let running = exec(
        &first,
        "// @exec: {\"yield_time_ms\": 0}\nawait tools.sleep({ms: 3000});",
    )
    .await
    .unwrap();
    assert!(
        text_of(&running).starts_with("Script running"),
        "{}",
        text_of(&running)
    );
    let refused = exec(&first, "text(1)").await.unwrap_err().to_string();
    assert!(refused.contains("--max-cells limit of 1"), "{refused}");
    let second = within(
        "second session",
        ().serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(server.url()).auth_header(ALPHA),
        )),
    )
    .await;
    match second {
        Ok(second) => {
            let refused = exec(&second, "text(1)").await.unwrap_err().to_string();
            assert!(refused.contains("--max-sessions limit of 1"), "{refused}");
        }
        Err(error) => assert!(error.to_string().contains("--max-sessions"), "{error}"),
    }
    // The first session still works once its cell is gone.
    let params = CallToolRequestParams::new("wait").with_arguments(
        json!({"cell_id": "1", "terminate": true})
            .as_object()
            .unwrap()
            .clone(),
    );
    let terminated = within("terminate", first.call_tool(params)).await.unwrap();
    assert!(text_of(&terminated).starts_with("Script terminated"));
    assert_eq!(last_line(&first, "text(6 * 7)").await, "42");
    first.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_has_its_cells_terminated_and_comes_back_with_its_values() {
    let folder = scratch("idle");
    let server = server(&folder, &["--idle-timeout-secs", "1", "--demo-tools"]);
    let client = client(server.url(), ALPHA, Some("idler")).await;
    let running = exec(
        &client,
        "// @exec: {\"yield_time_ms\": 0}\nstore(\"kept\", 1);\nawait tools.sleep({ms: 60000});",
    )
    .await
    .unwrap();
    assert!(text_of(&running).starts_with("Script running"));
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let params = CallToolRequestParams::new("wait")
        .with_arguments(json!({"cell_id": "1"}).as_object().unwrap().clone());
    let gone = within("wait", client.call_tool(params)).await.unwrap();
    assert!(
        text_of(&gone).starts_with("No cell with ID 1"),
        "{}",
        text_of(&gone)
    );
    // The terminated cell committed nothing; the session itself serves again.
    assert_eq!(
        last_line(&client, r#"text(String(load("kept")));"#).await,
        "undefined"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_gracefully_and_leaves_the_store_valid() {
    let folder = scratch("sigterm");
    let store = folder.join("store");
    let mut server = server(
        &folder,
        &["--store", store.to_str().unwrap(), "--demo-tools"],
    );
    let client = client(server.url(), ALPHA, Some("saver")).await;
    assert_eq!(
        last_line(&client, r#"store("before", 1); text("saved");"#).await,
        "saved"
    );
    let running = exec(
        &client,
        "// @exec: {\"yield_time_ms\": 0}\nfor (let i = 0; i < 200; i++) store(`k${i}`, \"x\".repeat(1000));\nawait tools.sleep({ms: 50});",
    )
    .await
    .unwrap();
    assert!(text_of(&running).starts_with("Script running"));
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(server.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = within("the server to exit", async {
        loop {
            if let Some(status) = server.try_wait() {
                return status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(exit.code(), Some(0), "{exit:?}");
    // Every document in the store is complete JSON with the value stored before.
    let documents: Vec<PathBuf> = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .collect();
    assert_eq!(documents.len(), 1, "{documents:?}");
    let document: Value = serde_json::from_slice(&std::fs::read(&documents[0]).unwrap()).unwrap();
    assert_eq!(document["values"]["before"], json!(1));
}

#[test]
fn http_without_a_token_refuses_to_start_and_says_how_to_set_one() {
    let run = |args: &[&str]| {
        Command::new(CODEMODE)
            .arg("mcp")
            .args(args)
            .env_remove("CODEMODE_AUTH_TOKEN")
            .output()
            .unwrap()
    };
    let loopback = run(&["--http", "127.0.0.1:0"]);
    assert_eq!(loopback.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&loopback.stderr);
    assert!(stderr.contains("--auth-token-file"), "{stderr}");
    assert!(stderr.contains("--no-auth"), "{stderr}");
    let anywhere = run(&["--http", "0.0.0.0:0", "--no-auth"]);
    assert_eq!(anywhere.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&anywhere.stderr);
    assert!(stderr.contains("only for loopback addresses"), "{stderr}");
    let weak = Command::new(CODEMODE)
        .args(["mcp", "--http", "127.0.0.1:0"])
        .env("CODEMODE_AUTH_TOKEN", "short")
        .output()
        .unwrap();
    assert_eq!(weak.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&weak.stderr).contains("at least 16 characters"));
}

/// One raw HTTP request (`Connection: close`): its status, headers and body as text.
fn raw_request(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String) {
    let address = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, response)
}

/// The value of header `name` in a raw response.
fn header_of(response: &str, name: &str) -> Option<String> {
    response.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

/// An MCP session opened with raw requests as `token`: its id.
fn raw_session(url: &str, token: &str) -> String {
    let bearer = format!("Bearer {token}");
    let (status, response) = raw_request(
        url,
        "POST",
        &[("Authorization", &bearer), ("X-Codemode-Session", "vault")],
        Some(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        ),
    );
    assert_eq!(status, 200, "{response}");
    let session = header_of(&response, "mcp-session-id").expect("a session id");
    let (status, response) = raw_request(
        url,
        "POST",
        &[("Authorization", &bearer), ("Mcp-Session-Id", &session)],
        Some(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    );
    assert_eq!(status, 202, "{response}");
    session
}

fn raw_exec(url: &str, token: &str, session: &str, code: &str) -> (u16, String) {
    raw_request(
        url,
        "POST",
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Mcp-Session-Id", session),
        ],
        Some(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "exec", "arguments": {"code": code}}})),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_session_id_gets_404_for_every_method_and_changes_nothing() {
    let folder = scratch("session-binding");
    let server = server(&folder, &[]);
    let url = server.url().to_owned();
    let session = raw_session(&url, ALPHA);
    let (status, response) = raw_exec(
        &url,
        ALPHA,
        &session,
        r#"store("secret", "alpha's"); text("stored")"#,
    );
    assert!(status == 200 && response.contains("stored"), "{response}");
    // Beta holds a valid token and alpha's session id: nothing runs, nothing is read.
    let (status, response) = raw_exec(
        &url,
        BETA,
        &session,
        r#"await tools.demo__note({text: "intruder"}); text(load("secret"))"#,
    );
    assert_eq!(status, 404, "{response}");
    assert!(!response.contains("alpha's"), "{response}");
    let beta = format!("Bearer {BETA}");
    for method in ["GET", "DELETE"] {
        let (status, response) = raw_request(
            &url,
            method,
            &[("Authorization", &beta), ("Mcp-Session-Id", &session)],
            None,
        );
        assert_eq!(status, 404, "{method}: {response}");
    }
    assert!(notes(&folder).is_empty(), "{:?}", notes(&folder));
    // Alpha's session is whole: its value is still there.
    let (status, response) = raw_exec(&url, ALPHA, &session, r#"text(load("secret"))"#);
    assert!(status == 200 && response.contains("alpha's"), "{response}");
    // Its owner may end it.
    let alpha = format!("Bearer {ALPHA}");
    let (status, _) = raw_request(
        &url,
        "DELETE",
        &[("Authorization", &alpha), ("Mcp-Session-Id", &session)],
        None,
    );
    // 200, as the official SDKs expect of a session close (202 makes the Python SDK warn).
    assert_eq!(status, 200);
    // And it is gone.
    let (status, _) = raw_exec(&url, ALPHA, &session, r#"text(1)"#);
    assert_eq!(status, 404);
}

/// How one of many concurrent `exec` calls was answered.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Admission {
    /// Its cell started (and still runs).
    Started,
    /// Its session opened, but the cell limit refused the cell.
    CellRefused,
    /// The session limit refused its session.
    SessionRefused,
}

/// Forty clients at once, each opening an MCP session of its own and starting a cell that runs
/// past the round: the limits hold whatever the interleaving (a slot is reserved before anything
/// is awaited), and every slot comes back when its clients leave. Four rounds on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_and_cell_limits_hold_when_forty_clients_arrive_at_once() {
    const CLIENTS: usize = 40;
    let folder = scratch("concurrent-limits");
    let server = server(
        &folder,
        &[
            "--max-sessions",
            "5",
            "--max-sessions-per-tenant",
            "5",
            "--max-cells",
            "3",
            "--max-cells-per-tenant",
            "3",
            "--demo-tools",
        ],
    );
    let url = server.url().to_owned();
    for round in 0..4 {
        let calls = (0..CLIENTS).map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let client = client(&url, ALPHA, None).await;
                let answer = exec(
                    &client,
                    "// @exec: {\"yield_time_ms\": 0}\nawait tools.sleep({ms: 60000});",
                )
                .await;
                let admission = match answer {
                    Ok(result) => {
                        let text = text_of(&result);
                        assert!(text.starts_with("Script running"), "{text}");
                        Admission::Started
                    }
                    Err(error) => {
                        let error = error.to_string();
                        if error.contains("--max-cells limit of 3") {
                            Admission::CellRefused
                        } else if error.contains("--max-sessions limit of 5") {
                            Admission::SessionRefused
                        } else {
                            panic!("an answer that is neither a cell nor a limit: {error}")
                        }
                    }
                };
                (admission, client)
            })
        });
        let mut answered = Vec::new();
        for call in calls.collect::<Vec<_>>() {
            answered.push(within("a concurrent exec", call).await.unwrap());
        }
        let count = |admission: Admission| {
            answered
                .iter()
                .filter(|(answer, _)| *answer == admission)
                .count()
        };
        let started = count(Admission::Started);
        let opened = started + count(Admission::CellRefused);
        assert!(
            (1..=3).contains(&started),
            "round {round}: {started} cells started under --max-cells 3"
        );
        assert!(
            (started..=5).contains(&opened),
            "round {round}: {opened} sessions opened under --max-sessions 5"
        );
        assert_eq!(count(Admission::SessionRefused), CLIENTS - opened);
        // Every client leaves: its session closes and its cell ends, and their slots come back
        // (a new client is served once they have).
        for (_, client) in answered {
            client.cancel().await.unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let probe = client(&url, ALPHA, None).await;
            let answer = exec(&probe, "text(1)").await;
            probe.cancel().await.unwrap();
            if answer.is_ok() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the slots never came back: {answer:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// Twenty requests naming one session at once, under a limit of one session per tenant: it is
/// opened once (single-flight per name), so every request is served by that one session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_naming_one_session_at_once_open_it_once() {
    let folder = scratch("single-flight");
    let server = server(
        &folder,
        &["--max-sessions", "4", "--max-sessions-per-tenant", "1"],
    );
    let url = server.url().to_owned();
    let calls = (0..20).map(|index| {
        let url = url.clone();
        tokio::spawn(async move {
            let client = client(&url, ALPHA, Some("shared")).await;
            let line = last_line(
                &client,
                &format!("store(\"k{index}\", {index}); text(\"ok\")"),
            )
            .await;
            client.cancel().await.unwrap();
            line
        })
    });
    for call in calls.collect::<Vec<_>>() {
        assert_eq!(within("a named exec", call).await.unwrap(), "ok");
    }
    let client = client(&url, ALPHA, Some("shared")).await;
    let keys = last_line(
        &client,
        "let n = 0; for (let i = 0; i < 20; i++) if (load(`k${i}`) === i) n++; text(n)",
    )
    .await;
    assert_eq!(keys, "20");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_cannot_take_every_session_or_cell() {
    let folder = scratch("tenant-limits");
    // Two tenants: each may hold half of the server.
    let server = server(
        &folder,
        &["--max-sessions", "4", "--max-cells", "2", "--demo-tools"],
    );
    let first = client(server.url(), ALPHA, Some("one")).await;
    let running = exec(
        &first,
        "// @exec: {\"yield_time_ms\": 0}\nawait tools.sleep({ms: 60000});",
    )
    .await
    .unwrap();
    assert!(text_of(&running).starts_with("Script running"));
    let refused = exec(&first, "text(1)").await.unwrap_err().to_string();
    assert!(
        refused.contains("--max-cells-per-tenant limit of 1"),
        "{refused}"
    );
    // A second session of the same tenant opens (listing its tools opens it).
    let second = client(server.url(), ALPHA, Some("two")).await;
    within("list tools", second.list_all_tools())
        .await
        .expect("the tenant's second session opens");
    let third = within(
        "a third session",
        ().serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(server.url()).auth_header(ALPHA),
        )),
    )
    .await;
    match third {
        Ok(third) => {
            let refused = exec(&third, "text(1)").await.unwrap_err().to_string();
            assert!(
                refused.contains("--max-sessions-per-tenant limit of 2"),
                "{refused}"
            );
        }
        Err(error) => assert!(
            error.to_string().contains("--max-sessions-per-tenant"),
            "{error}"
        ),
    }
    // The other tenant still gets its share.
    let beta = client(server.url(), BETA, Some("one")).await;
    assert_eq!(last_line(&beta, "text(6 * 7)").await, "42");
    beta.cancel().await.unwrap();
    first.cancel().await.unwrap();
    second.cancel().await.unwrap();
}

#[test]
fn a_client_that_sends_no_headers_is_cut_off_and_connections_are_capped() {
    let folder = scratch("connections");
    let server = server(
        &folder,
        &["--header-read-timeout-secs", "1", "--max-connections", "1"],
    );
    let address = server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    // A connection that never sends a byte is closed by the server.
    let mut silent = TcpStream::connect(&address).unwrap();
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut buffer = Vec::new();
    let read = silent.read_to_end(&mut buffer);
    assert!(
        read.is_ok(),
        "the server closes the silent connection (a hang guard timed out instead: {read:?})"
    );
    // One connection at a time: while one is open, a second is not served; once it closes, the
    // second is.
    let held = TcpStream::connect(&address).unwrap();
    let url = server.url().to_owned();
    let (sender, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(raw_post(&url, &[]));
    });
    assert!(
        answered
            .recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "a second connection was served while the cap was reached"
    );
    drop(held);
    let status = answered
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("served once the first connection closed");
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_session_outlives_the_request_and_the_client_that_started_its_cell() {
    for mode in ["on", "off"] {
        let folder = scratch(&format!("named-{mode}"));
        let served = server(&folder, &["--mcp-sessions", mode]);
        let starter = client(served.url(), ALPHA, Some("work")).await;
        let running = text_of(
            &exec(
                &starter,
                "// @exec: {\"yield_time_ms\": 0}\ntext(\"started\");\n\
                 await new Promise((resolve) => setTimeout(resolve, 300));\n\
                 store(\"finished\", true); text(\"finished\");",
            )
            .await
            .expect("exec answers"),
        );
        let cell_id = running_cell_id(&running);
        // The client that started the cell goes away; another one names the same session.
        starter.cancel().await.unwrap();
        let other = client(served.url(), ALPHA, Some("work")).await;
        let ended = wait_on(&other, &cell_id).await;
        assert!(ended.contains("finished"), "mcp sessions {mode}: {ended}");
        assert_eq!(
            last_line(&other, r#"text(load("finished"))"#).await,
            "true",
            "mcp sessions {mode}"
        );
        if mode == "off" {
            // No MCP session: a request stands alone, as a load balancer may send it anywhere.
            let (status, response) = raw_request(
                served.url(),
                "POST",
                &[
                    ("Authorization", &format!("Bearer {ALPHA}")),
                    ("X-Codemode-Session", "work"),
                    ("MCP-Protocol-Version", "2025-06-18"),
                ],
                Some(
                    &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                    "name": "exec", "arguments": {"code": "text('alone: ' + load('finished'))"}}}),
                ),
            );
            assert_eq!(status, 200, "{response}");
            assert!(response.contains("alone: true"), "{response}");
            assert_eq!(header_of(&response, "mcp-session-id"), None, "{response}");
        }
        // Another tenant naming a session the same finds none of it.
        let stranger = client(served.url(), BETA, Some("work")).await;
        let running = text_of(
            &exec(
                &other,
                "// @exec: {\"yield_time_ms\": 0}\nawait new Promise((resolve) => setTimeout(resolve, 60000));",
            )
            .await
            .expect("exec answers"),
        );
        let cell_id = running_cell_id(&running);
        let refused = wait_on(&stranger, &cell_id).await;
        assert!(
            refused.contains(&format!("No cell with ID {cell_id}")),
            "mcp sessions {mode}: {refused}"
        );
    }
}

/// A client that records the log messages it is sent (completion push).
#[derive(Clone, Default)]
struct LogRecorder(std::sync::Arc<std::sync::Mutex<Vec<Value>>>);

// Logging is deprecated in the SDK, and still what completion push is sent as.
#[allow(deprecated)]
impl rmcp::ClientHandler for LogRecorder {
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.data);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mcp_session_naming_a_session_is_told_when_its_cell_finishes_in_the_background() {
    let folder = scratch("push-named");
    let served = server(&folder, &["--mcp-sessions", "on"]);
    let connect = |recorder: LogRecorder| {
        let config = transport_config(served.url(), ALPHA, Some("work"));
        async move {
            within(
                "connect",
                recorder.serve(StreamableHttpClientTransport::from_config(config)),
            )
            .await
            .expect("the client connects")
        }
    };
    let (first_logs, second_logs) = (LogRecorder::default(), LogRecorder::default());
    let first = connect(first_logs.clone()).await;
    let _second = connect(second_logs.clone()).await;
    let params = rmcp::model::CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "// @exec: {\"yield_time_ms\": 0}\nawait new Promise((resolve) => setTimeout(resolve, 200)); text('done');"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let running = text_of(&within("exec", first.call_tool(params)).await.unwrap());
    let cell_id = running_cell_id(&running);
    for (who, logs) in [("the starter", &first_logs), ("the other", &second_logs)] {
        codemode_test_support::within(&format!("{who} to be told"), async {
            while !logs
                .0
                .lock()
                .unwrap()
                .iter()
                .any(|log| log["cell_id"] == json!(cell_id) && log["status"] == "completed")
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_mcp_2026_07_28_without_sessions_reaches_its_cells_from_any_request() {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let folder = scratch("revision-2026");
    // MCP sessions on: a 2026-07-28 client is served without them all the same.
    let served = server(&folder, &["--mcp-sessions", "on"]);
    let connect = || {
        let config = transport_config(served.url(), ALPHA, Some("work"));
        async move {
            within(
                "connect with server/discover",
                ().serve_with_lifecycle(
                    StreamableHttpClientTransport::from_config(config),
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                ),
            )
            .await
            .expect("the client discovers the server")
        }
    };
    let starter = connect().await;
    assert_eq!(
        starter
            .peer_info()
            .map(|info| info.protocol_version.clone()),
        Some(ProtocolVersion::V_2026_07_28)
    );
    let running = text_of(
        &exec(
            &starter,
            "// @exec: {\"yield_time_ms\": 0}\nawait new Promise((resolve) => setTimeout(resolve, 300));\ntext(\"finished\");",
        )
        .await
        .expect("exec answers"),
    );
    let cell_id = running_cell_id(&running);
    let other = connect().await;
    let ended = wait_on(&other, &cell_id).await;
    assert!(ended.contains("finished"), "{ended}");
}
