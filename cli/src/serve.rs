//! `codemode mcp`: an MCP server offering the `exec` and `wait` tools (the model-facing tools, code mode for any agent) to any
//! MCP-capable agent, over stdio (default) or streamable HTTP (`--http ADDR`).
//!
//! Each MCP session gets its own codemode session (its own cells and stored values); the store and
//! the downstream tools (`--mcp`) are shared. While `exec` or `wait` waits, the server sends
//! progress notifications (when the client asked for them with a progress token), including the
//! cell's `notify(...)` messages; when a cell finishes in the background, it sends a log message
//! saying so (completion push, completion push).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use codemode_protocol::{OutputItem, WaitRequest};
use codemode_session::{ExecOptions, OutputMode, Session, SessionEvent, Store, ToolResult};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

use crate::exit;
use crate::setup::{DemoTools, SessionArgs, SetupError};

/// How often a waiting call reports progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Serve over streamable HTTP at this address (such as 127.0.0.1:8080, path /mcp) instead of
    /// stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Offer the demo tools echo and sleep too (left out by default: the model sees only the
    /// tools of the servers you configure).
    #[arg(long)]
    pub demo_tools: bool,
    /// Print the description of `exec` the model would be given (with every tool declared), and
    /// exit: a way to check a configuration.
    #[arg(long)]
    pub print_exec_description: bool,
    #[command(flatten)]
    pub session: SessionArgs,
}

/// What every MCP session of this server shares.
struct Shared {
    args: SessionArgs,
    store: Arc<dyn Store>,
    tools: Arc<codemode_host_adapters::CompositeTools>,
    sessions_opened: AtomicU64,
}

pub async fn serve(args: McpArgs) -> ExitCode {
    let demo = if args.demo_tools {
        DemoTools::Offered
    } else {
        DemoTools::LeftOut
    };
    let setup = (|| Ok::<_, SetupError>((args.session.store()?, args.session.tools(demo)?)))();
    let (store, tools) = match setup {
        Ok(parts) => parts,
        Err(SetupError { message, usage }) => {
            eprintln!("error: {message}");
            return ExitCode::from(if usage { exit::USAGE } else { exit::FAILED });
        }
    };
    let shared = Arc::new(Shared {
        args: args.session.clone(),
        store,
        tools,
        sessions_opened: AtomicU64::new(0),
    });
    if args.print_exec_description {
        return print_exec_description(&shared).await;
    }
    let served = match &args.http {
        None => serve_stdio(shared).await,
        Some(address) => serve_http(shared, address).await,
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(exit::FAILED)
        }
    }
}

async fn print_exec_description(shared: &Shared) -> ExitCode {
    let opened = shared
        .args
        .open(
            &shared.args.session,
            Arc::clone(&shared.store),
            Arc::clone(&shared.tools),
            shared.args.config(),
        )
        .await;
    match opened {
        Ok(session) => {
            println!("{}", exec_tool_description(&session));
            session.shutdown().await;
            ExitCode::SUCCESS
        }
        Err(SetupError { message, .. }) => {
            eprintln!("error: {message}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// The description of `exec` as this server offers it.
fn exec_tool_description(session: &Session) -> String {
    format!(
        "{}\n\nPass the source in the `code` argument. `yield_time_ms` and `max_output_tokens` may \
         also be given as arguments; they win over the pragma line.",
        session.exec_description()
    )
}

/// The arguments `exec` takes.
const EXEC_ARGUMENTS: &[&str] = &["code", "yield_time_ms", "max_output_tokens"];

/// The arguments `wait` takes.
const WAIT_ARGUMENTS: &[&str] = &["cell_id", "yield_time_ms", "max_tokens", "terminate"];

/// An error naming every argument `tool` does not take, rather than ignoring them silently.
fn refuse_unknown_arguments(
    tool: &str,
    arguments: &Map<String, Value>,
    known: &[&str],
) -> Result<(), ErrorData> {
    let unknown: Vec<&str> = arguments
        .keys()
        .map(String::as_str)
        .filter(|name| !known.contains(name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ErrorData::invalid_params(
        format!(
            "{tool} does not take {}: its arguments are {}",
            unknown
                .iter()
                .map(|name| format!("\"{name}\""))
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        ),
        None,
    ))
}

/// An optional non-negative integer argument.
fn count_argument(
    tool: &str,
    arguments: &Map<String, Value>,
    name: &str,
) -> Result<Option<u64>, ErrorData> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .filter(|count| *count <= codemode_protocol::MAX_SAFE_INTEGER)
            .map(Some)
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("{tool}: \"{name}\" must be a non-negative integer, not {value}"),
                    None,
                )
            }),
    }
}

async fn serve_stdio(shared: Arc<Shared>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = CodemodeServer::new(shared);
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

async fn serve_http(
    shared: Arc<Shared>,
    address: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service: StreamableHttpService<CodemodeServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(CodemodeServer::new(Arc::clone(&shared))),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(address).await?;
    // A parent process (or a test) reads where the server listens from this line.
    println!("listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}

/// The handler of one MCP session.
#[derive(Clone)]
struct CodemodeServer {
    shared: Arc<Shared>,
    session_id: String,
    session: Arc<OnceCell<Result<Arc<Session>, String>>>,
}

impl CodemodeServer {
    fn new(shared: Arc<Shared>) -> Self {
        // The first MCP session uses the configured name, so a file store keeps its values across
        // restarts; any further ones (over HTTP) get their own.
        let index = shared.sessions_opened.fetch_add(1, Ordering::SeqCst);
        let session_id = match index {
            0 => shared.args.session.clone(),
            index => format!("{}-{}", shared.args.session, index + 1),
        };
        CodemodeServer {
            shared,
            session_id,
            session: Arc::new(OnceCell::new()),
        }
    }

    /// The codemode session of this MCP session, opened on first use.
    async fn session(&self) -> Result<Arc<Session>, ErrorData> {
        self.session
            .get_or_init(|| async {
                let shared = &self.shared;
                let mut config = shared.args.config();
                // A long-running server bounds what it buffers per cell (server output mode).
                config.output_mode = OutputMode::server();
                shared
                    .args
                    .open(
                        &self.session_id,
                        Arc::clone(&shared.store),
                        Arc::clone(&shared.tools),
                        config,
                    )
                    .await
                    .map(Arc::new)
                    .map_err(|error| error.message)
            })
            .await
            .clone()
            .map_err(|message| ErrorData::internal_error(message, None))
    }

    async fn exec(
        &self,
        arguments: Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        refuse_unknown_arguments("exec", &arguments, EXEC_ARGUMENTS)?;
        let Some(Value::String(code)) = arguments.get("code") else {
            return Err(ErrorData::invalid_params(
                "exec takes {\"code\": \"<JavaScript source>\"}: the code argument is missing or not a string",
                None,
            ));
        };
        let options = ExecOptions::default()
            .with_yield_time_ms(count_argument("exec", &arguments, "yield_time_ms")?)
            .with_max_output_tokens(count_argument("exec", &arguments, "max_output_tokens")?);
        let session = self.session().await?;
        let call_id = format!("mcp-{}", request_id_text(&context));
        let progress = Progress::start(&context, &session, Watched::Call(call_id.clone()));
        let result = session.exec_tool_with(&call_id, code, options).await;
        progress.stop();
        Ok(to_call_tool_result(result))
    }

    async fn wait(
        &self,
        arguments: Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        refuse_unknown_arguments("wait", &arguments, WAIT_ARGUMENTS)?;
        let request: WaitRequest = serde_json::from_value(Value::Object(arguments)).map_err(|error| {
            ErrorData::invalid_params(
                format!("wait takes {{\"cell_id\": \"<id>\", \"yield_time_ms\"?, \"max_tokens\"?, \"terminate\"?}}: {error}"),
                None,
            )
        })?;
        let session = self.session().await?;
        let progress = Progress::start(&context, &session, Watched::Cell(request.cell_id.clone()));
        let result = session.wait_tool(request).await;
        progress.stop();
        Ok(to_call_tool_result(result))
    }
}

impl ServerHandler for CodemodeServer {
    // Logging is deprecated in the SDK but still the standard way to push a message unprompted
    // (completion push); see `push_log`.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_logging().build()).with_instructions(
            "Run JavaScript that orchestrates tools with `exec`; pick up scripts still running with `wait`.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Completion push: tell the client about cells that finish while nobody waits on them.
        let Ok(session) = self.session().await else {
            return;
        };
        let mut events = session.subscribe();
        let peer = context.peer.clone();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if let SessionEvent::CellFinished {
                    cell_id,
                    error_text,
                } = event
                {
                    let status = if error_text.is_some() {
                        "failed"
                    } else {
                        "completed"
                    };
                    let message = format!(
                        "Cell {cell_id} {status} in the background; call wait with cell_id \"{cell_id}\" for its output."
                    );
                    if push_log(
                        &peer,
                        json!({"cell_id": cell_id, "status": status, "message": message}),
                    )
                    .await
                    .is_err()
                    {
                        break;
                    }
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let session = self.session().await?;
        let exec_schema = json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "JavaScript (or TypeScript) source, optionally starting with a // @exec: {...} pragma line."
                },
                "yield_time_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "How long to wait for the script before returning; wins over the pragma."
                },
                "max_output_tokens": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "The output budget of the result; wins over the pragma."
                }
            },
            "required": ["code"],
            "additionalProperties": false
        });
        let exec = Tool::new("exec", exec_tool_description(&session), object(exec_schema));
        let wait = Tool::new(
            "wait",
            session.wait_description(),
            object(session.wait_input_schema()),
        );
        Ok(ListToolsResult::with_all_items(vec![exec, wait]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            "exec" => self.exec(arguments, context).await?,
            "wait" => self.wait(arguments, context).await?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("there is no tool named {other:?}; this server offers exec and wait"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

#[allow(deprecated)]
/// Sends a log message to the client. MCP logging is deprecated in the SDK, but it is still the
/// one standard way for a server to tell a client something unprompted.
async fn push_log(peer: &Peer<RoleServer>, data: Value) -> Result<(), rmcp::ServiceError> {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
    let mut message = LoggingMessageNotificationParam::new(LoggingLevel::Info, data);
    message.logger = Some("codemode".to_owned());
    peer.notify_logging_message(message).await
}

fn object(schema: Value) -> Map<String, Value> {
    match schema {
        Value::Object(object) => object,
        _ => Map::new(),
    }
}

fn request_id_text(context: &RequestContext<RoleServer>) -> String {
    serde_json::to_value(&context.id)
        .map(|id| match id {
            Value::String(text) => text,
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Which notifications belong to a waiting call.
enum Watched {
    /// Those of the cell `exec` starts with this call id.
    Call(String),
    /// Those of this cell.
    Cell(String),
}

/// Progress notifications for one waiting call, when the client gave a progress token.
struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(context: &RequestContext<RoleServer>, session: &Session, watched: Watched) -> Self {
        let Some(token) = context.meta.get_progress_token() else {
            return Progress { task: None };
        };
        let peer = context.peer.clone();
        let mut events = session.subscribe();
        let began = Instant::now();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
            ticks.tick().await;
            let mut step = 0.0;
            loop {
                let message = tokio::select! {
                    _ = ticks.tick() => format!("running for {:.0} s", began.elapsed().as_secs_f64()),
                    event = events.recv() => match event {
                        Ok(SessionEvent::Notification { cell_id, call_id, text }) => {
                            let ours = match &watched {
                                Watched::Call(id) => *id == call_id,
                                Watched::Cell(id) => *id == cell_id,
                            };
                            if !ours {
                                continue;
                            }
                            text
                        }
                        Ok(_) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                };
                step += 1.0;
                let notification =
                    ProgressNotificationParam::new(token.clone(), step).with_message(message);
                if peer.notify_progress(notification).await.is_err() {
                    return;
                }
            }
        });
        Progress { task: Some(task) }
    }

    fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

/// A model-facing result as an MCP tool result: text as text blocks, images and audio as theirs.
fn to_call_tool_result(result: ToolResult) -> CallToolResult {
    let content: Vec<ContentBlock> = result
        .items
        .into_iter()
        .map(|item| match item {
            OutputItem::Text { text } => ContentBlock::text(text),
            OutputItem::Image(image) => match split_data_url(&image.image_url) {
                Some((mime, data)) => ContentBlock::image(data, mime),
                None => ContentBlock::text(format!(
                    "[image that is not a base64 data URL: {} bytes]",
                    image.image_url.len()
                )),
            },
            OutputItem::Audio(audio) => match split_data_url(&audio.audio_url) {
                Some((mime, data)) => ContentBlock::audio(data, mime),
                None => ContentBlock::text(format!(
                    "[audio that is not a base64 data URL: {} bytes]",
                    audio.audio_url.len()
                )),
            },
        })
        .collect();
    if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

/// `data:<mime>;base64,<data>` as (mime, data).
fn split_data_url(url: &str) -> Option<(String, String)> {
    let rest = url
        .get(..5)
        .filter(|scheme| scheme.eq_ignore_ascii_case("data:"))
        .map(|_| &url[5..])?;
    let (header, data) = rest.split_once(',')?;
    let mime = header.strip_suffix(";base64")?;
    Some((mime.to_owned(), data.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_into_mime_and_data() {
        assert_eq!(
            split_data_url("data:image/png;base64,AAA="),
            Some(("image/png".into(), "AAA=".into()))
        );
        assert_eq!(
            split_data_url("DATA:audio/wav;base64,UklG"),
            Some(("audio/wav".into(), "UklG".into()))
        );
        assert_eq!(split_data_url("data:text/plain,hello"), None);
        assert_eq!(split_data_url("https://x"), None);
    }
}
