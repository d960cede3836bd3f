//! Tools of a downstream MCP server, through `rmcp`: reached as a stdio child process or over
//! streamable HTTP (the client half of code mode for any agent).
//!
//! Each server's tools become tool definitions under the server's namespace (`tools.<ns>__<name>`
//! in a cell), with their descriptions and input and output schemas. The connection is made on
//! first use and kept; a server that dies or drops the connection fails the calls in flight with
//! a clear error, and the next call starts (or reconnects to) it again.
//!
//! What a cell receives from a call:
//! - success: `{ content: [...MCP content blocks...], structuredContent?: <value> }`, the blocks in
//!   their MCP JSON form (`{ type: "text", text }`, `{ type: "image", data, mimeType }`, …), so an
//!   image block can go straight to `image(...)`; `structuredContent` only when the server sent it;
//! - `isError: true`: the promise rejects with an `Error` whose message is the text of the
//!   result's text blocks (or its structured content as JSON);
//! - a protocol failure, a dead server or a call past its timeout: the promise rejects with an
//!   error that says which.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use codemode_protocol::{ToolDefinition, ToolKind, ToolName};
use codemode_session::{ToolInvocation, ToolListError, ToolProvider};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// How the server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program to run.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it, on top of the inherited environment.
        env: BTreeMap<String, String>,
        /// Its working directory; the current one when `None`.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint, such as `http://127.0.0.1:8080/mcp`.
    Http {
        /// The server's URL (`http://host:port/mcp`).
        url: String,
        /// Headers sent with every request (an `Authorization` header, for instance).
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// A stdio server: `program` with `args`, in the inherited environment.
    pub fn stdio(program: impl Into<String>, args: Vec<String>) -> Self {
        McpTransport::Stdio {
            program: program.into(),
            args,
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// A stdio server from a command line such as `node "my server.js" --flag`, split into words
    /// as a POSIX shell would (quotes and backslashes), without running a shell. `None` when the
    /// line names no program or its quotes do not close.
    pub fn stdio_command(command_line: &str) -> Option<Self> {
        let mut words = shlex::split(command_line)?.into_iter();
        let program = words.next()?;
        Some(McpTransport::stdio(program, words.collect()))
    }

    /// A streamable HTTP server at `url`, with no extra headers.
    pub fn http(url: impl Into<String>) -> Self {
        McpTransport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        }
    }
}

/// One downstream server.
#[derive(Debug, Clone)]
pub struct McpServerConfig {
    /// The namespace of its tools: `tools.<namespace>__<tool>`.
    pub namespace: String,
    /// How to reach the server.
    pub transport: McpTransport,
    /// How long one call may take before it fails.
    pub call_timeout: Duration,
    /// How long starting and initialising the connection may take.
    pub connect_timeout: Duration,
    /// The whole environment a stdio server starts with, before its transport's `env`; `None`:
    /// this process's environment.
    pub environment: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
}

impl McpServerConfig {
    /// A server whose tools appear under `namespace`, reached through `transport`.
    pub fn new(namespace: impl Into<String>, transport: McpTransport) -> Self {
        McpServerConfig {
            namespace: namespace.into(),
            transport,
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            environment: None,
        }
    }

    /// This configuration with the whole environment a stdio server starts with (the
    /// transport's `env` still goes on top), instead of this process's.
    pub fn with_environment(
        mut self,
        environment: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Self {
        self.environment = Some(environment.into_iter().collect());
        self
    }

    /// This configuration with another per-call timeout.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }
}

type Client = RunningService<RoleClient, ()>;

/// The live connection and its generation (counted up at each connect), so that a failure seen by
/// an old call never drops a newer connection.
struct Connection {
    client: Client,
    generation: u64,
    /// The server's process, for a stdio server.
    pid: Option<u32>,
}

/// The tools of one MCP server.
pub struct McpTools {
    config: McpServerConfig,
    connection: Mutex<Option<Connection>>,
    generations: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl McpTools {
    /// A provider for this server; it connects on first use.
    pub fn new(config: McpServerConfig) -> Self {
        McpTools {
            config,
            connection: Mutex::new(None),
            generations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The server's configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The live client, connecting (or reconnecting) first if needed.
    ///
    /// A kept connection to a stdio server is checked first: a server that died since the last
    /// call may not have been noticed by the connection yet, and its process's state tells at
    /// once (a read of `/proc`, far cheaper than a ping round trip). If it is gone, the server is
    /// started again, so a server killed between two calls costs the next call nothing.
    async fn client(&self) -> Result<(rmcp::Peer<RoleClient>, u64), String> {
        let mut connection = self.connection.lock().await;
        if let Some(live) = connection.as_ref() {
            if !live.client.is_closed() && live.pid.is_none_or(process_alive) {
                return Ok((live.client.peer().clone(), live.generation));
            }
            tracing::warn!(server = %self.config.namespace, "the MCP server is gone; starting it again");
            connection.take();
        }
        let (client, pid) = tokio::time::timeout(self.config.connect_timeout, self.connect())
            .await
            .map_err(|_| {
                format!(
                    "the MCP server \"{}\" did not start within {:.0} s",
                    self.config.namespace,
                    self.config.connect_timeout.as_secs_f64()
                )
            })??;
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let peer = client.peer().clone();
        *connection = Some(Connection {
            client,
            generation,
            pid,
        });
        Ok((peer, generation))
    }

    /// Starts or reaches the server; for a stdio server, also its process id.
    async fn connect(&self) -> Result<(Client, Option<u32>), String> {
        let namespace = &self.config.namespace;
        match &self.config.transport {
            McpTransport::Stdio {
                program,
                args,
                env,
                cwd,
            } => {
                let environment = self.config.environment.as_ref();
                let command = tokio::process::Command::new(program).configure(|command| {
                    if let Some(environment) = environment {
                        command.env_clear().envs(environment.iter().cloned());
                    }
                    command.args(args).envs(env);
                    if let Some(cwd) = cwd {
                        command.current_dir(cwd);
                    }
                });
                let (transport, stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|error| {
                        format!("cannot start the MCP server \"{namespace}\" ({program}): {error}")
                    })?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(namespace.clone(), stderr));
                }
                let pid = transport.id();
                let client = ().serve(transport).await.map_err(|error| {
                    format!(
                        "the MCP server \"{namespace}\" ({program}) failed to initialise: {error}"
                    )
                })?;
                Ok((client, pid))
            }
            McpTransport::Http { url, headers } => {
                let mut config =
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    );
                for (name, value) in headers {
                    let name = http::HeaderName::try_from(name.as_str()).map_err(|error| {
                        format!(
                            "the MCP server \"{namespace}\" has a bad header name {name:?}: {error}"
                        )
                    })?;
                    let value = http::HeaderValue::try_from(value.as_str()).map_err(|error| {
                        format!("the MCP server \"{namespace}\" has a bad value for header {name}: {error}")
                    })?;
                    config.custom_headers.insert(name, value);
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                let client = ().serve(transport).await.map_err(|error| {
                    format!("cannot connect to the MCP server \"{namespace}\" at {url}: {error}")
                })?;
                Ok((client, None))
            }
        }
    }

    /// Ends the connection, if any: a stdio server has its standard input closed, gets 3 s to
    /// exit, then `SIGTERM` and 3 s more, then is killed (the MCP specification's sequence), so
    /// that it is never cut off mid-write. The next call starts it again.
    pub async fn shutdown(&self) {
        let live = self.connection.lock().await.take();
        if let Some(live) = live
            && let Err(error) = live.client.cancel().await
        {
            tracing::warn!(server = %self.config.namespace, %error, "the MCP server did not close cleanly");
        }
    }

    /// Drops the connection of `generation` (if it is still the current one), so that the next
    /// call starts the server again.
    async fn forget(&self, generation: u64) {
        let mut connection = self.connection.lock().await;
        if connection
            .as_ref()
            .is_some_and(|live| live.generation == generation)
            && let Some(dead) = connection.take()
        {
            drop(dead.client);
        }
    }
}

#[async_trait::async_trait]
impl ToolProvider for McpTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let (peer, generation) = self.client().await.map_err(ToolListError::new)?;
        let tools = match peer.list_all_tools().await {
            Ok(tools) => tools,
            Err(error) => {
                self.forget(generation).await;
                return Err(ToolListError::new(format!(
                    "cannot list the tools of the MCP server \"{}\": {error}",
                    self.config.namespace
                )));
            }
        };
        Ok(tools
            .into_iter()
            .map(|tool| ToolDefinition {
                name: ToolName::namespaced(&self.config.namespace, tool.name.as_ref()),
                description: tool
                    .description
                    .as_deref()
                    .or(tool.title.as_deref())
                    .unwrap_or_default()
                    .to_owned(),
                kind: ToolKind::Function,
                input_schema: Some(Value::Object((*tool.input_schema).clone())),
                output_schema: tool
                    .output_schema
                    .map(|schema| Value::Object((*schema).clone())),
            })
            .collect())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        cancellation: CancellationToken,
    ) -> Result<Value, String> {
        let global_name = call.name.global_name();
        let arguments: Option<Map<String, Value>> = match call.input {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments),
            Some(other) => {
                return Err(format!(
                    "tools.{global_name} takes an object argument (MCP tool arguments are named), \
                     got {other}"
                ));
            }
        };
        let mut params = CallToolRequestParams::new(call.name.name.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // A request that could not be sent never reached the server: reconnect and send it once
        // more. A connection that closed after sending is not retried (the call may have run).
        let mut attempts_left = 2;
        let answer = loop {
            attempts_left -= 1;
            let (peer, generation) = self.client().await?;
            // Dropping the request (on cancellation or timeout) tells the server to cancel it.
            let answer = tokio::select! {
                answer = tokio::time::timeout(self.config.call_timeout, peer.call_tool(params.clone())) => answer,
                _ = cancellation.cancelled() => return Err(format!("tools.{global_name} was cancelled")),
            };
            match answer {
                Ok(Err(ServiceError::TransportSend(_))) if attempts_left > 0 => {
                    self.forget(generation).await;
                }
                other => break (other, generation),
            }
        };
        let (answer, generation) = answer;
        match answer {
            Err(_) => Err(format!(
                "tools.{global_name} timed out: the MCP server \"{}\" did not answer within {:.1} s",
                self.config.namespace,
                self.config.call_timeout.as_secs_f64()
            )),
            Ok(Err(error)) => {
                let dead = matches!(
                    error,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                );
                if dead {
                    self.forget(generation).await;
                    Err(format!(
                        "tools.{global_name} failed: the MCP server \"{}\" is not running (it exited \
                         or closed the connection); the next call starts it again",
                        self.config.namespace
                    ))
                } else {
                    Err(format!("tools.{global_name} failed: {error}"))
                }
            }
            Ok(Ok(result)) => call_result_to_value(result),
        }
    }

    async fn shutdown(&self) {
        McpTools::shutdown(self).await;
    }
}

/// Whether process `pid` is still running: it exists and is not a zombie (exited, not yet
/// reaped). Where `/proc` cannot be read for another reason, assume it runs.
/// The longest line of a server's standard error that is logged whole.
const MAX_STDERR_LINE: usize = 2000;

/// Logs what a stdio server writes to its standard error, a line at a time, each naming the
/// server, instead of letting it spill onto the terminal.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                let mut line = line;
                if line.len() > MAX_STDERR_LINE {
                    let end = (0..=MAX_STDERR_LINE)
                        .rev()
                        .find(|&end| line.is_char_boundary(end))
                        .unwrap_or(0);
                    line.truncate(end);
                    line.push_str(" […]");
                }
                tracing::info!(target: "codemode::downstream", server = %server, "{line}");
            }
            Ok(None) => break,
            // Not UTF-8, or the pipe failed: nothing more to log as lines.
            Err(_) => break,
        }
    }
}

fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}

/// What a cell receives for an MCP tool result (see the module documentation).
pub fn call_result_to_value(result: CallToolResult) -> Result<Value, String> {
    if result.is_error == Some(true) {
        let texts: Vec<String> = result
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.clone()),
                _ => None,
            })
            .collect();
        return Err(if !texts.is_empty() {
            texts.join("\n")
        } else if let Some(structured) = &result.structured_content {
            structured.to_string()
        } else {
            "the tool reported an error without a message".to_owned()
        });
    }
    let content = serde_json::to_value(&result.content)
        .map_err(|error| format!("cannot read the tool's result: {error}"))?;
    let mut value = json!({ "content": content });
    if let Some(structured) = result.structured_content {
        value["structuredContent"] = structured;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_map_to_content_and_structured_content() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("3"),
            ContentBlock::image("AA==", "image/png"),
        ]);
        result.structured_content = Some(json!({"sum": 3}));
        assert_eq!(
            call_result_to_value(result).unwrap(),
            json!({
                "content": [{"type": "text", "text": "3"}, {"type": "image", "data": "AA==", "mimeType": "image/png"}],
                "structuredContent": {"sum": 3}
            })
        );
    }

    #[test]
    fn an_error_result_rejects_with_its_text() {
        let result = CallToolResult::error(vec![
            ContentBlock::text("no such file"),
            ContentBlock::text("(at /x)"),
        ]);
        assert_eq!(
            call_result_to_value(result),
            Err("no such file\n(at /x)".to_owned())
        );
    }

    #[test]
    fn a_process_is_alive_until_it_exits() {
        assert!(process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid));
    }

    #[test]
    fn command_lines_split_into_program_and_arguments_as_a_shell_would() {
        assert_eq!(
            McpTransport::stdio_command("node  server.js --port 1"),
            Some(McpTransport::stdio(
                "node",
                vec!["server.js".into(), "--port".into(), "1".into()]
            ))
        );
        assert_eq!(
            McpTransport::stdio_command(r#""/opt/my tools/server" --name 'a b' c\ d"#),
            Some(McpTransport::stdio(
                "/opt/my tools/server",
                vec!["--name".into(), "a b".into(), "c d".into()]
            ))
        );
        assert_eq!(McpTransport::stdio_command("   "), None);
        assert_eq!(McpTransport::stdio_command("node 'unclosed"), None);
    }
}
