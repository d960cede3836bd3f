//! What an operator sees from outside a real `codemode mcp --http`: `/healthz` and `/readyz`
//! (without a token, saying nothing else), `/metrics` (behind the token, or on `--ops-listen`),
//! parsed by a Prometheus text parser and moving by exactly what a run did, `/readyz` turning
//! 503 when the store's PostgreSQL stops and while the server drains, a drain that lets a
//! 3-second cell finish and keeps what it stored, drains under load that answer every `wait` in
//! flight or arriving, JSON logs, and the spans a real OTLP exporter
//! sends to a collector stand-in that decodes them (protobuf and JSON): the span tree of a cell
//! that calls two downstream tools, no source text, and the downstream server in the same trace.

mod common;

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_test_support::within;
use common::{ALPHA, CODEMODE, client, exec, running_cell_id, server_command, text_of, wait_on};
use rmcp::model::{CallToolRequestParams, MetaObject, RequestMetaObject};
use serde_json::json;

/// A server started by a test, with the addresses it printed, stopped with SIGTERM (as an
/// orchestrator stops it) or killed when dropped.
struct Served {
    child: Child,
    url: String,
    ops: Option<String>,
    /// Where the server's stdout lines go after the first ones.
    _drain: std::thread::JoinHandle<()>,
}

impl Served {
    fn spawn(mut command: Command, with_ops: bool) -> Served {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("start codemode");
        let stdout = child.stdout.take().unwrap();
        let (lines, received) = std::sync::mpsc::channel();
        let drain = std::thread::spawn(move || {
            let mut reader = std::io::BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let _ = lines.send(line.trim().to_owned());
                    }
                }
            }
        });
        let next = || {
            received
                .recv_timeout(codemode_test_support::HANG_GUARD)
                .expect("the server says where it listens")
        };
        let url = next()
            .strip_prefix("listening on ")
            .expect("`listening on` first")
            .to_owned();
        let ops = with_ops.then(|| {
            next()
                .strip_prefix("operations on ")
                .expect("`operations on` next")
                .trim_end_matches('/')
                .to_owned()
        });
        Served {
            child,
            url,
            ops,
            _drain: drain,
        }
    }

    /// `http://HOST:PORT`, without the `/mcp` path.
    fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }

    /// Sends SIGTERM.
    fn terminate(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
    }

    /// Waits for the process to end (within the hang guard); its exit status.
    fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + codemode_test_support::HANG_GUARD;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "hung: the server did not exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP GET of `url` (`http://HOST:PORT/PATH`), with a bearer token if given: the status
/// and the body.
async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\n{authorization}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    within("an HTTP response", stream.read_to_end(&mut response))
        .await
        .unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    // The probes answer in one piece; a chunked body is de-chunked crudely (the tests' bodies
    // are small and have no CRLF of their own in a chunk size position).
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Polls `url` until it answers `status`, within the hang guard; the body.
async fn until_status(url: &str, status: u16) -> String {
    within(&format!("{url} answers {status}"), async {
        loop {
            let (got, body) = get(url, None).await;
            if got == status {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

/// Sample values by metric name and sorted labels.
type Samples = HashMap<(String, Vec<(String, String)>), f64>;

/// The samples of a `/metrics` page, parsed by a Prometheus text parser: value by metric name
/// and sorted labels.
fn samples(page: &str) -> Samples {
    let lines = page.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("a Prometheus text page");
    scrape
        .samples
        .into_iter()
        .map(|sample| {
            let mut labels: Vec<(String, String)> = sample
                .labels
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            labels.sort();
            let value = match sample.value {
                prometheus_parse::Value::Counter(value)
                | prometheus_parse::Value::Gauge(value)
                | prometheus_parse::Value::Untyped(value) => value,
                prometheus_parse::Value::Histogram(buckets) => {
                    buckets.last().map_or(0.0, |bucket| bucket.count)
                }
                prometheus_parse::Value::Summary(_) => 0.0,
            };
            ((sample.metric, labels), value)
        })
        .collect()
}

/// A sample's value (0 when absent).
fn sample(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    labels.sort();
    samples
        .get(&(name.to_owned(), labels))
        .copied()
        .unwrap_or(0.0)
}

/// A cell that calls two of the demo server's tools.
const TWO_CALLS: &str = "// SOURCE-MARKER-51f0\nconst sum = await tools.demo__add({a: 1, b: 2});\nconst seen = await tools.demo__traceparent({});\ntext(JSON.stringify(seen));\ntext('done');";

#[tokio::test(flavor = "multi_thread")]
async fn probes_need_no_token_and_metrics_move_by_exactly_what_a_run_did() {
    let folder = codemode_test_support::scratch_folder("ops-metrics");
    let served = Served::spawn(server_command(folder.as_path(), "127.0.0.1:0", &[]), false);
    let base = served.base();
    // The probes: no token, nothing but the verdict.
    assert_eq!(
        get(&format!("{base}/healthz"), None).await,
        (200, "ok\n".into())
    );
    let ready = until_status(&format!("{base}/readyz"), 200).await;
    assert_eq!(ready, "ready\n");
    // /metrics is behind the token.
    let (status, _) = get(&format!("{base}/metrics"), None).await;
    assert_eq!(status, 401);
    let (status, _) = get(&format!("{base}/metrics"), Some("wrong-token-0123456789")).await;
    assert_eq!(status, 401);

    let client = client(&served.url, ALPHA, None).await;
    let first = text_of(&exec(&client, TWO_CALLS).await.unwrap());
    assert!(first.ends_with("done"), "{first}");
    let (status, page) = get(&format!("{base}/metrics"), Some(ALPHA)).await;
    assert_eq!(status, 200, "{page}");
    let before = samples(&page);
    let second = text_of(&exec(&client, TWO_CALLS).await.unwrap());
    assert!(second.ends_with("done"), "{second}");
    within("tools/list", client.list_tools(None)).await.unwrap();
    // Logging is deprecated by SEP-2577, and still what clients send.
    #[allow(deprecated)]
    let set_level = client.set_level(rmcp::model::SetLevelRequestParams::new(
        rmcp::model::LoggingLevel::Info,
    ));
    within("logging/setLevel", set_level).await.unwrap();
    let (_, page) = get(&format!("{base}/metrics"), Some(ALPHA)).await;
    let after = samples(&page);
    let delta = |name: &str, labels: &[(&str, &str)]| {
        sample(&after, name, labels) - sample(&before, name, labels)
    };
    for tool in ["demo__add", "demo__traceparent"] {
        let labels = [
            ("codemode_outcome", "ok"),
            ("codemode_server", "demo"),
            ("gen_ai_tool_name", tool),
        ];
        assert_eq!(
            delta("codemode_tool_calls_total", &labels),
            1.0,
            "{tool}\n{page}"
        );
        let client_labels = [
            ("codemode_server", "demo"),
            ("gen_ai_tool_name", tool),
            ("mcp_method_name", "tools/call"),
        ];
        assert_eq!(
            delta(
                "mcp_client_operation_duration_seconds_count",
                &client_labels
            ),
            1.0,
            "{tool}\n{page}"
        );
    }
    assert_eq!(delta("codemode_cells_started_total", &[]), 1.0, "{page}");
    assert_eq!(
        delta(
            "codemode_gate_decisions_total",
            &[("codemode_gate_decision", "allowed")]
        ),
        2.0,
        "{page}"
    );
    assert_eq!(
        delta(
            "codemode_cell_duration_seconds_count",
            &[("codemode_cell_outcome", "completed")]
        ),
        1.0,
        "{page}"
    );
    assert_eq!(
        delta(
            "mcp_server_operation_duration_seconds_count",
            &[
                ("gen_ai_tool_name", "exec"),
                ("mcp_method_name", "tools/call")
            ]
        ),
        1.0,
        "{page}"
    );
    assert_eq!(
        delta(
            "mcp_server_operation_duration_seconds_count",
            &[("mcp_method_name", "tools/list")]
        ),
        1.0,
        "{page}"
    );
    assert_eq!(
        delta(
            "mcp_server_operation_duration_seconds_count",
            &[("mcp_method_name", "logging/setLevel")]
        ),
        1.0,
        "{page}"
    );
    // State read at the scrape: the demo server is up, and an engine process runs cells.
    assert_eq!(
        sample(
            &after,
            "codemode_downstream_server_up",
            &[("codemode_server", "demo")]
        ),
        1.0,
        "{page}"
    );
    assert!(
        sample(&after, "codemode_engine_processes", &[]) >= 1.0,
        "{page}"
    );
    assert!(
        sample(&after, "codemode_engine_processes_spawned_total", &[]) >= 1.0,
        "{page}"
    );
    assert_eq!(
        sample(&after, "codemode_cells", &[("state", "running")]),
        0.0,
        "{page}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn ops_listen_serves_probes_and_metrics_without_a_token() {
    let folder = codemode_test_support::scratch_folder("ops-listen");
    let served = Served::spawn(
        server_command(
            folder.as_path(),
            "127.0.0.1:0",
            &["--ops-listen", "127.0.0.1:0"],
        ),
        true,
    );
    let ops = served.ops.clone().unwrap();
    assert_eq!(get(&format!("{ops}/healthz"), None).await.0, 200);
    until_status(&format!("{ops}/readyz"), 200).await;
    let (status, page) = get(&format!("{ops}/metrics"), None).await;
    assert_eq!(status, 200);
    let parsed = samples(&page);
    assert_eq!(
        sample(
            &parsed,
            "codemode_downstream_server_up",
            &[("codemode_server", "demo")]
        ),
        1.0,
        "{page}"
    );
    // The MCP listener still wants its token for /metrics, and never serves MCP on the ops one.
    assert_eq!(
        get(&format!("{}/metrics", served.base()), None).await.0,
        401
    );
    assert_eq!(get(&format!("{ops}/mcp"), None).await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_lets_a_three_second_cell_finish_and_keeps_what_it_stored() {
    let folder = codemode_test_support::scratch_folder("ops-drain");
    let store = folder.as_path().join("store");
    let store_arg = store.to_str().unwrap().to_owned();
    let mut served = Served::spawn(
        server_command(folder.as_path(), "127.0.0.1:0", &["--store", &store_arg]),
        false,
    );
    let base = served.base();
    until_status(&format!("{base}/readyz"), 200).await;
    let client = client(&served.url, ALPHA, None).await;
    let params = CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "await new Promise(r => setTimeout(r, 3000)); store('drained', 42); text('finished');", "yield_time_ms": 100})
            .as_object()
            .unwrap()
            .clone(),
    );
    let running = text_of(&within("exec", client.call_tool(params)).await.unwrap());
    let cell_id = running_cell_id(&running);
    served.terminate();
    // Not ready while it drains; a new session is refused, the running cell is not.
    let body = until_status(&format!("{base}/readyz"), 503).await;
    assert_eq!(body, "not ready: draining\n");
    let late = client::late(&served.url).await;
    let refused = exec(&late, "text('late')").await;
    let refusal = match refused {
        Err(error) => error.to_string(),
        Ok(result) => text_of(&result),
    };
    assert!(refusal.contains("shutting down"), "{refusal}");
    let finished = wait_on(&client, &cell_id).await;
    assert!(finished.contains("finished"), "{finished}");
    let status = served.wait_for_exit();
    assert!(status.success(), "{status:?}");
    // What the cell stored was committed before the server stopped (the file store's files,
    // under the tenant's folder).
    let kept = files_under(&store);
    assert!(kept.contains("\"drained\""), "{kept}");
}

/// When a `wait` comes during a drain. Each must be answered with the cell's result, and the
/// server must then exit cleanly.
#[derive(Clone, Copy, Debug)]
enum WaitComes {
    /// Sent just before SIGTERM, so in flight when the drain begins.
    InFlight,
    /// Sent after SIGTERM, while the cell still runs.
    WhileItRuns,
    /// Sent after the cell has ended, before its result was collected.
    AfterItEnded,
}

#[tokio::test(flavor = "multi_thread")]
async fn drains_under_load_answer_every_wait_in_flight_or_arriving() {
    // Two threads that spin beside the servers, as other work on a busy 2-core machine does:
    // an answer that leaves its handler must still reach its client before the server stops.
    let hogging = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let hogging = Arc::clone(&hogging);
            std::thread::spawn(move || {
                let mut spin = 0u64;
                while hogging.load(std::sync::atomic::Ordering::Relaxed) {
                    spin = std::hint::black_box(spin.wrapping_add(1));
                }
            })
        })
        .collect();
    let cases = [
        WaitComes::InFlight,
        WaitComes::WhileItRuns,
        WaitComes::AfterItEnded,
        WaitComes::InFlight,
        WaitComes::WhileItRuns,
        WaitComes::AfterItEnded,
    ];
    let drains = cases.iter().enumerate().map(|(index, comes)| async move {
        let folder = codemode_test_support::scratch_folder(&format!("ops-drains-{index}"));
        let mut served = Served::spawn(
            server_command(folder.as_path(), "127.0.0.1:0", &[]),
            false,
        );
        until_status(&format!("{}/readyz", served.base()), 200).await;
        let client = client(&served.url, ALPHA, None).await;
        let params = CallToolRequestParams::new("exec").with_arguments(
            json!({"code": "await new Promise(r => setTimeout(r, 1000)); text('finished');", "yield_time_ms": 100})
                .as_object()
                .unwrap()
                .clone(),
        );
        let running = text_of(&within("exec", client.call_tool(params)).await.unwrap());
        let cell_id = running_cell_id(&running);
        let finished = match comes {
            WaitComes::InFlight => {
                let (finished, ()) = tokio::join!(wait_on(&client, &cell_id), async {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    served.terminate();
                });
                finished
            }
            WaitComes::WhileItRuns => {
                served.terminate();
                until_status(&format!("{}/readyz", served.base()), 503).await;
                wait_on(&client, &cell_id).await
            }
            WaitComes::AfterItEnded => {
                served.terminate();
                tokio::time::sleep(Duration::from_millis(2000)).await;
                wait_on(&client, &cell_id).await
            }
        };
        assert!(
            finished.starts_with("Script completed") && finished.contains("finished"),
            "{comes:?}: {finished}"
        );
        let status = served.wait_for_exit();
        assert!(status.success(), "{comes:?}: {status:?}");
    });
    futures::future::join_all(drains).await;
    hogging.store(false, std::sync::atomic::Ordering::Relaxed);
    for hog in hogs {
        hog.join().unwrap();
    }
}

/// The text of every file under `folder`.
fn files_under(folder: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&files_under(&path));
        } else {
            text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
    text
}

mod client {
    /// A second client (its own MCP session), as the tenant `beta`.
    pub async fn late(url: &str) -> super::common::Client {
        super::common::client(url, super::common::BETA, None).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_turns_503_when_the_stores_postgresql_stops() {
    let Some(postgres) = codemode_test_support::postgres::TestPostgres::start("ops-readyz") else {
        return;
    };
    let folder = codemode_test_support::scratch_folder("ops-readyz");
    let url = postgres.url();
    let served = Served::spawn(
        server_command(folder.as_path(), "127.0.0.1:0", &["--store", &url]),
        false,
    );
    let readyz = format!("{}/readyz", served.base());
    until_status(&readyz, 200).await;
    postgres.stop();
    let body = until_status(&readyz, 503).await;
    assert_eq!(
        body, "not ready: store\n",
        "the reason names no host or database"
    );
    postgres.start_server();
    until_status(&readyz, 200).await;
}

/// What an OTLP collector stand-in received: each request's path, content type and body.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on a loopback port: answers 200 to every export and keeps it.
async fn collector() -> (String, Received) {
    let received: Received = Arc::default();
    let kept = Arc::clone(&received);
    let router = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let kept = Arc::clone(&kept);
        async move {
            let path = request.uri().path().to_owned();
            let content_type = request
                .headers()
                .get("content-type")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = axum::body::to_bytes(request.into_body(), 64 << 20)
                .await
                .unwrap_or_default();
            kept.lock()
                .unwrap()
                .push((path, content_type, body.to_vec()));
            axum::http::StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (format!("http://{address}"), received)
}

/// A span as the test reads it.
#[derive(Debug, Clone)]
struct Span {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    kind: i32,
    attributes: HashMap<String, String>,
    /// The span ids it links to.
    links: Vec<String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn any_value(value: &opentelemetry_proto::tonic::common::v1::AnyValue) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    match &value.value {
        Some(Value::StringValue(text)) => text.clone(),
        Some(Value::IntValue(number)) => number.to_string(),
        Some(Value::BoolValue(flag)) => flag.to_string(),
        Some(Value::DoubleValue(number)) => number.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every span the collector received, decoded as its content type says.
fn decode_spans(received: &Received) -> (Vec<Span>, Vec<String>) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let mut spans = Vec::new();
    let mut texts = Vec::new();
    for (path, content_type, body) in received.lock().unwrap().iter() {
        if path != "/v1/traces" {
            continue;
        }
        let request = if content_type.contains("json") {
            serde_json::from_slice::<ExportTraceServiceRequest>(body)
                .unwrap_or_else(|error| panic!("not OTLP JSON ({error})"))
        } else {
            assert!(content_type.contains("protobuf"), "{content_type}");
            ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf")
        };
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let mut attributes = HashMap::new();
                    for attribute in &span.attributes {
                        let value = attribute.value.as_ref().map(any_value).unwrap_or_default();
                        texts.push(value.clone());
                        attributes.insert(attribute.key.clone(), value);
                    }
                    for event in &span.events {
                        texts.push(event.name.clone());
                        for attribute in &event.attributes {
                            texts.push(attribute.value.as_ref().map(any_value).unwrap_or_default());
                        }
                    }
                    texts.push(span.name.clone());
                    spans.push(Span {
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        name: span.name.clone(),
                        kind: span.kind,
                        attributes,
                        links: span.links.iter().map(|link| hex(&link.span_id)).collect(),
                    });
                }
            }
        }
    }
    (spans, texts)
}

/// Runs the two-call cell through a server exporting to a collector stand-in in `protocol`, and
/// checks the span tree it received; with `trace_content`, the tool calls' arguments are in it
/// too (never without).
async fn spans_reach_the_collector(protocol: &str, trace_content: bool) {
    let (endpoint, received) = collector().await;
    let folder = codemode_test_support::scratch_folder("ops-traces");
    let extra: &[&str] = if trace_content {
        &["--trace-content"]
    } else {
        &[]
    };
    let mut command = server_command(folder.as_path(), "127.0.0.1:0", extra);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let mut served = Served::spawn(command, false);
    let client = client(&served.url, ALPHA, None).await;
    // The client's own span, continued by the server.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let mut meta = MetaObject::new();
    meta.set_traceparent(format!("00-{trace_id}-{client_span}-01"));
    let mut params = CallToolRequestParams::new("exec")
        .with_arguments(json!({"code": TWO_CALLS}).as_object().unwrap().clone());
    params.meta = Some(RequestMetaObject(meta));
    let result = text_of(&within("exec", client.call_tool(params)).await.unwrap());
    assert!(result.ends_with("done"), "{result}");
    // The downstream server received the same trace, from the call's span.
    let downstream = regex_traceparent(&result).expect("the demo server saw a traceparent");
    // A cell that outlives its exec, observed by a wait.
    let params = CallToolRequestParams::new("exec").with_arguments(
        json!({"code": "await new Promise(r => setTimeout(r, 500)); text('later')", "yield_time_ms": 50})
            .as_object()
            .unwrap()
            .clone(),
    );
    let running = text_of(&within("exec", client.call_tool(params)).await.unwrap());
    let later = wait_on(&client, &running_cell_id(&running)).await;
    assert!(later.contains("later"), "{later}");
    within("tools/list", client.list_tools(None)).await.unwrap();
    client.cancel().await.unwrap();
    served.terminate();
    assert!(served.wait_for_exit().success());

    // The metrics went out over OTLP too, in the same encoding, the last of them at shutdown.
    let exported = metric_names(&received);
    for name in [
        "mcp.server.operation.duration",
        "mcp.client.operation.duration",
        "codemode.tool.calls",
    ] {
        assert!(exported.contains(name), "{name} not among {exported:?}");
    }
    let (spans, texts) = decode_spans(&received);
    let named = |name: &str| {
        spans
            .iter()
            .find(|span| span.name == name)
            .unwrap_or_else(|| panic!("no span {name:?} among {spans:#?}"))
            .clone()
    };
    // The cell that outlived its exec and the wait that observed it are linked both ways.
    let wait = named("tools/call wait");
    let outlived = spans
        .iter()
        .find(|span| span.name == "codemode.cell" && span.links.contains(&wait.span_id))
        .unwrap_or_else(|| panic!("no cell links to the wait: {spans:#?}"));
    assert!(wait.links.contains(&outlived.span_id), "{wait:?}");
    let server = spans
        .iter()
        .find(|span| span.name == "tools/call exec" && span.parent_span_id == client_span)
        .unwrap_or_else(|| panic!("no exec continues the client's trace: {spans:#?}"))
        .clone();
    assert_eq!(server.trace_id, trace_id);
    assert_eq!(
        server.parent_span_id, client_span,
        "continues the client's trace"
    );
    assert_eq!(server.kind, 2, "SERVER");
    assert_eq!(server.attributes["mcp.method.name"], "tools/call");
    assert_eq!(server.attributes["gen_ai.tool.name"], "exec");
    // Requests other than tool calls have their server spans too.
    let listing = named("tools/list");
    assert_eq!(listing.kind, 2, "SERVER");
    assert_eq!(listing.attributes["mcp.method.name"], "tools/list");
    let cell = spans
        .iter()
        .find(|span| span.name == "codemode.cell" && span.parent_span_id == server.span_id)
        .unwrap_or_else(|| panic!("no cell under the exec: {spans:#?}"))
        .clone();
    assert_eq!(cell.trace_id, trace_id);
    assert_eq!(cell.parent_span_id, server.span_id);
    assert_eq!(cell.attributes["codemode.cell.outcome"], "completed");
    assert_eq!(cell.attributes["codemode.cell.tool_calls"], "2");
    // What the cell emitted and cost, and its source only as a digest.
    assert_eq!(cell.attributes["codemode.cell.output_items"], "2");
    // ("done" and the JSON of the second call's result.)
    assert!(
        cell.attributes["codemode.cell.output_bytes"]
            .parse::<usize>()
            .unwrap()
            > "done".len(),
        "{:?}",
        cell.attributes
    );
    assert!(
        cell.attributes["codemode.cell.cpu_us"]
            .parse::<u64>()
            .unwrap()
            > 0,
        "{:?}",
        cell.attributes
    );
    assert_eq!(
        cell.attributes["codemode.cell.source_sha256"],
        sha256(TWO_CALLS)
    );
    for tool in ["demo__add", "demo__traceparent"] {
        let call = named(&format!("tools/call {tool}"));
        assert_eq!(call.trace_id, trace_id);
        assert_eq!(call.parent_span_id, cell.span_id, "{tool} is the cell's");
        assert_eq!(call.kind, 3, "CLIENT");
        assert_eq!(call.attributes["codemode.gate.decision"], "allowed");
        assert_eq!(call.attributes["gen_ai.tool.name"], tool);
        assert_eq!(call.attributes["codemode.server"], "demo");
        assert!(
            call.attributes["codemode.tool.output_bytes"]
                .parse::<usize>()
                .unwrap()
                > 0,
            "{:?}",
            call.attributes
        );
    }
    // The argument, as the cell made it, only as its size and digest.
    let add = named("tools/call demo__add");
    assert_eq!(add.attributes["codemode.tool.input_bytes"], "13");
    assert_eq!(
        add.attributes["codemode.tool.input_sha256"],
        sha256(r#"{"a":1,"b":2}"#)
    );
    let traceparent_call = named("tools/call demo__traceparent");
    assert_eq!(
        downstream,
        (trace_id.to_owned(), traceparent_call.span_id.clone()),
        "the downstream server is in the same trace, under the call's span"
    );
    // No model-written source in any attribute, event or name; arguments only when asked.
    assert!(
        !texts.iter().any(|text| text.contains("SOURCE-MARKER")),
        "source text leaked into the spans: {texts:?}"
    );
    // (As the debug event writes the argument: its text, quoted or not.)
    let arguments_seen = texts
        .iter()
        .any(|text| text.contains("\"a\":1") || text.contains("a\\\":1"));
    assert_eq!(arguments_seen, trace_content, "{texts:?}");
}

/// The names of the metrics the collector received.
fn metric_names(received: &Received) -> std::collections::BTreeSet<String> {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use prost::Message;
    let mut names = std::collections::BTreeSet::new();
    for (path, content_type, body) in received.lock().unwrap().iter() {
        if path != "/v1/metrics" {
            continue;
        }
        let request = if content_type.contains("json") {
            serde_json::from_slice::<ExportMetricsServiceRequest>(body)
                .unwrap_or_else(|error| panic!("not OTLP JSON ({error})"))
        } else {
            ExportMetricsServiceRequest::decode(body.as_slice()).expect("OTLP protobuf")
        };
        for resource in request.resource_metrics {
            for scope in resource.scope_metrics {
                names.extend(scope.metrics.into_iter().map(|metric| metric.name));
            }
        }
    }
    names
}

/// The SHA-256 of `text` in lower-case hex, as spans give digests.
fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The trace id and parent id of the `traceparent` a text shows.
fn regex_traceparent(text: &str) -> Option<(String, String)> {
    let start = text.find("00-")?;
    let parts: Vec<&str> = text[start..].splitn(4, '-').collect();
    (parts.len() == 4 && parts[1].len() == 32).then(|| {
        (
            parts[1].to_owned(),
            parts[2].chars().take(16).collect::<String>(),
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_an_otlp_collector_over_http_protobuf() {
    spans_reach_the_collector("http/protobuf", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_reach_an_otlp_collector_over_http_json() {
    spans_reach_the_collector("http/json", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_content_puts_tool_arguments_in_the_spans() {
    spans_reach_the_collector("http/protobuf", true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_a_line_with_the_spans_trace_ids() {
    let (endpoint, _received) = collector().await;
    let folder = codemode_test_support::scratch_folder("ops-json-logs");
    let mut command = server_command(folder.as_path(), "127.0.0.1:0", &["--log-format", "json"]);
    let log = folder.as_path().join("stderr");
    command
        .env("CODEMODE_LOG", "info")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .stderr(std::fs::File::create(&log).unwrap());
    let mut served = Served::spawn(command, false);
    let client = client(&served.url, ALPHA, None).await;
    let result = text_of(&exec(&client, TWO_CALLS).await.unwrap());
    assert!(result.ends_with("done"));
    client.cancel().await.unwrap();
    served.terminate();
    served.wait_for_exit();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"))
        })
        .collect();
    let finished = lines
        .iter()
        .find(|line| line["message"] == "tool call finished")
        .unwrap_or_else(|| panic!("no tool call was logged: {text}"));
    assert_eq!(finished["level"], "INFO");
    assert_eq!(finished["span"], "tool_call");
    assert_eq!(finished["fields"]["outcome"], "ok");
    assert_eq!(
        finished["trace_id"].as_str().map(str::len),
        Some(32),
        "{finished}"
    );
    assert_eq!(
        finished["span_id"].as_str().map(str::len),
        Some(16),
        "{finished}"
    );
    let _ = Path::new(CODEMODE);
}
