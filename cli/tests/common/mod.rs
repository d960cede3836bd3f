//! What the CLI's end-to-end tests share: the binary, running it with standard input, the text of
//! an MCP tool result, and an HTTP server with two tenants and a client of it.

#![allow(dead_code)] // Each test binary uses some of these.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use codemode_test_support::{ListeningServer, within};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

/// The `codemode` binary, as built for these tests.
pub const CODEMODE: &str = env!("CARGO_BIN_EXE_codemode");

/// Runs `codemode ARGS…` with `stdin` on its standard input, to its end.
pub fn codemode_with_input(
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    stdin: &str,
) -> Output {
    codemode_with_env(args, stdin, &[])
}

/// [`codemode_with_input`], with `environment` added to codemode's.
pub fn codemode_with_env(
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    stdin: &str,
    environment: &[(&str, &str)],
) -> Output {
    let mut child = Command::new(CODEMODE)
        .args(args)
        .envs(environment.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start codemode");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The texts of `codemode run --json`'s output items.
pub fn output_texts(output: &Output) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not one JSON object ({error}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    json["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["text"].as_str().map(str::to_owned))
        .collect()
}

/// The text blocks of a tool result, one per line.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads `stderr` (a child's standard error) until a line contains `needle`; fails the test if
/// the child ends first, or past the hang guard.
pub async fn wait_for_line(stderr: tokio::process::ChildStderr, needle: &str) {
    use tokio::io::AsyncBufReadExt;
    codemode_test_support::within(&format!("a line with {needle:?}"), async {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(needle) {
                return;
            }
        }
        panic!("the process ended before it wrote a line with {needle:?}");
    })
    .await
}

/// The token of tenant `alpha` of [`server`].
pub const ALPHA: &str = "alpha-token-0123456789abcdef";
/// The token of tenant `beta` of [`server`].
pub const BETA: &str = "beta-token-0123456789abcdef0";

/// A server with two tenants, the demo server's tools (its `note` records into `notes`, allowed
/// without asking), and the extra flags.
pub fn server(folder: &Path, extra: &[&str]) -> ListeningServer {
    server_at(folder, "127.0.0.1:0", extra)
}

/// [`server`], listening on `address`.
pub fn server_at(folder: &Path, address: &str, extra: &[&str]) -> ListeningServer {
    ListeningServer::spawn(server_command(folder, address, extra))
}

/// The command that starts [`server_at`], for a test that adds to it.
pub fn server_command(folder: &Path, address: &str, extra: &[&str]) -> Command {
    let tokens = folder.join("tokens");
    std::fs::write(&tokens, format!("alpha {ALPHA}\nbeta {BETA}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let config = folder.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"demo": {"command": CODEMODE, "args": ["demo-mcp-server"],
               "env": {"CODEMODE_DEMO_NOTES": folder.join("notes")}}},
               // `note` writes: these tests let it run without asking.
               "permissions": {"allow": ["demo__note"]}})
        .to_string(),
    )
    .unwrap();
    let mut command = Command::new(CODEMODE);
    command
        .args(["mcp", "--http", address, "--auth-token-file"])
        .arg(&tokens)
        .arg("--config")
        .arg(&config)
        .args(extra);
    command
}

/// How a client reaches the server at `url`: with `token`, naming `session` if given.
pub fn transport_config(
    url: &str,
    token: &str,
    session: Option<&str>,
) -> StreamableHttpClientTransportConfig {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    if let Some(session) = session {
        config.custom_headers.insert(
            http::HeaderName::from_static("x-codemode-session"),
            http::HeaderValue::from_str(session).unwrap(),
        );
    }
    config
}

/// An MCP client of the server at `url`.
pub type Client = RunningService<RoleClient, ()>;

pub async fn client(url: &str, token: &str, session: Option<&str>) -> Client {
    let transport =
        StreamableHttpClientTransport::from_config(transport_config(url, token, session));
    within("connect", ().serve(transport))
        .await
        .expect("the client connects")
}

pub async fn exec(client: &Client, code: &str) -> Result<CallToolResult, rmcp::ServiceError> {
    let params = CallToolRequestParams::new("exec")
        .with_arguments(json!({"code": code}).as_object().unwrap().clone());
    within("exec", client.call_tool(params)).await
}

/// The last line of a rendering: the cell's last output.
pub async fn last_line(client: &Client, code: &str) -> String {
    let result = exec(client, code).await.expect("exec answers");
    text_of(&result)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

/// What `exec` (a listed tool) tells the model: its description, then its `code` argument's,
/// where the tool declarations go when the description would pass 4,096 characters.
pub fn exec_as_served(exec: &rmcp::model::Tool) -> String {
    format!(
        "{}\n{}",
        exec.description.as_deref().unwrap_or_default(),
        exec.input_schema
            .get("properties")
            .and_then(|properties| properties.get("code"))
            .and_then(|code| code.get("description"))
            .and_then(|description| description.as_str())
            .unwrap_or_default()
    )
}

/// The id of the cell a rendering says is still running.
pub fn running_cell_id(running: &str) -> String {
    running
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("Script running with cell ID "))
        .unwrap_or_else(|| panic!("not a running cell: {running}"))
        .to_owned()
}

/// `wait` on cell `cell_id`, up to 30 s; the rendering.
pub async fn wait_on(client: &Client, cell_id: &str) -> String {
    let params = CallToolRequestParams::new("wait").with_arguments(
        json!({"cell_id": cell_id, "yield_time_ms": 30000})
            .as_object()
            .unwrap()
            .clone(),
    );
    text_of(
        &within("wait", client.call_tool(params))
            .await
            .expect("wait answers"),
    )
}

/// A client that declares the MCP tasks extension (SEP-2663), so that a long `exec` becomes a
/// task.
#[derive(Clone, Default)]
pub struct TaskClient;

impl rmcp::ClientHandler for TaskClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_tasks()
                .build(),
            rmcp::model::Implementation::new("task-client", "1"),
        )
    }
}

/// The text blocks of a raw `tools/call` response, one per line.
pub fn raw_text(response: &serde_json::Value) -> String {
    response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool result: {response}"))
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `codemode mcp --demo-tools` spoken to in JSON-RPC by hand, to see exactly which lines the
/// server writes and in what order.
pub struct RawClient {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl RawClient {
    /// `codemode mcp --demo-tools`, started and initialised.
    pub async fn start() -> Self {
        RawClient::start_with(&["--demo-tools"], json!({})).await
    }

    /// `codemode mcp ARGS…`, started and initialised by a client declaring `capabilities`.
    pub async fn start_with(args: &[&str], capabilities: serde_json::Value) -> Self {
        RawClient::start_as(args, capabilities, "raw").await
    }

    /// [`RawClient::start_with`], the client naming itself `name` (`clientInfo.name`).
    pub async fn start_as(args: &[&str], capabilities: serde_json::Value, name: &str) -> Self {
        let mut child = tokio::process::Command::new(CODEMODE)
            .arg("mcp")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            child.stdout.take().unwrap(),
        ));
        let mut client = RawClient {
            _child: child,
            stdin,
            lines,
        };
        client
            .send(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": name, "version": "1"}}}),
            )
            .await;
        client.response(0).await;
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    pub async fn send(&mut self, message: serde_json::Value) {
        use tokio::io::AsyncWriteExt;
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The next message the server writes.
    pub async fn next(&mut self) -> serde_json::Value {
        let line = within("a line", self.lines.next_line())
            .await
            .unwrap()
            .expect("the server is still writing");
        serde_json::from_str(&line).unwrap()
    }

    /// Reads up to the response to request `id`, and returns it.
    pub async fn response(&mut self, id: i64) -> serde_json::Value {
        loop {
            let message = self.next().await;
            // A response (not a request of the server's own with the same id).
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends `tools/call` of `tool` with `arguments` as request `id`.
    pub async fn call(
        &mut self,
        id: i64,
        tool: &str,
        arguments: serde_json::Value,
        meta: serde_json::Value,
    ) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": meta}}))
            .await;
    }

    /// Reads up to the response to request `id`, answering each request the server makes of
    /// the client (`elicitation/create`, `sampling/createMessage`, …) with `answer(message)`
    /// (`None`: stop there, leaving it unanswered, and return it). Returns the server's requests
    /// and the response (or the unanswered request).
    pub async fn until_response(
        &mut self,
        id: i64,
        mut answer: impl FnMut(&serde_json::Value) -> Option<serde_json::Value>,
    ) -> (Vec<serde_json::Value>, serde_json::Value) {
        let mut asked = Vec::new();
        loop {
            let message = self.next().await;
            if message.get("method").is_some() && message.get("id").is_some() {
                asked.push(message.clone());
                match answer(&message) {
                    Some(result) => {
                        self.send(serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": result}))
                            .await;
                    }
                    None => return (asked, message),
                }
            } else if message["id"] == id {
                return (asked, message);
            }
        }
    }
}
