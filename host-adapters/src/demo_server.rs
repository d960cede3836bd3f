//! A small MCP server for tests and demos, speaking the real protocol through `rmcp`.
//!
//! Tools: `add` (two numbers; text and structured result), `image` (a 1x1 PNG image block),
//! `fail` (an error result with a message), `sleep` (waits `ms` milliseconds), `pid` (its process
//! id, so a test can kill it), `note` (appends a line to the file `CODEMODE_DEMO_NOTES` names;
//! no annotations), `forget` (the same with `forgot: `, annotated destructive), `log` (sends a
//! log message to the client during the call), `traceparent` (the W3C trace context the call's
//! request carried in `_meta`, and over HTTP its `traceparent` header). The others are
//! annotated read-only, so a test of the gate has each kind. Served by the
//! `codemode-test-mcp-server` binary and by `codemode demo-mcp-server`.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

/// A 1x1 PNG.
const PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddRequest {
    /// The first number.
    a: f64,
    /// The second number.
    b: f64,
}

/// What `add` answers: a tool with an output schema.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
struct AddResult {
    /// `a + b`.
    sum: f64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct FailRequest {
    /// What the failure says.
    message: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct NoteRequest {
    /// The line to record.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SleepRequest {
    /// How long to wait, in milliseconds.
    ms: u64,
}

/// The demo server's handler.
#[derive(Debug, Clone)]
pub struct DemoServer {
    tool_router: ToolRouter<Self>,
}

impl Default for DemoServer {
    fn default() -> Self {
        DemoServer::new()
    }
}

#[tool_router]
impl DemoServer {
    /// The server, with its tools.
    pub fn new() -> Self {
        DemoServer {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Adds two numbers.", annotations(read_only_hint = true))]
    fn add(
        &self,
        Parameters(AddRequest { a, b }): Parameters<AddRequest>,
    ) -> Result<Json<AddResult>, ErrorData> {
        Ok(Json(AddResult { sum: a + b }))
    }

    #[tool(
        description = "Returns a 1x1 PNG image.",
        annotations(read_only_hint = true)
    )]
    fn image(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::image(
            PIXEL_PNG,
            "image/png",
        )]))
    }

    #[tool(
        description = "Always fails, with the given message.",
        annotations(read_only_hint = true)
    )]
    fn fail(
        &self,
        Parameters(FailRequest { message }): Parameters<FailRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let message = message.unwrap_or_else(|| "the tool failed on purpose".to_owned());
        Ok(CallToolResult::error(vec![ContentBlock::text(message)]))
    }

    #[tool(
        description = "Waits, then answers.",
        annotations(read_only_hint = true)
    )]
    async fn sleep(
        &self,
        Parameters(SleepRequest { ms }): Parameters<SleepRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "slept {ms} ms"
        ))]))
    }

    #[tool(
        description = "Records a note: appends it as a line to the file named by the \
                          environment variable CODEMODE_DEMO_NOTES (for tests that must prove a call \
                          happened, or did not)."
    )]
    fn note(
        &self,
        Parameters(NoteRequest { text }): Parameters<NoteRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        use std::io::Write;
        let path = std::env::var_os("CODEMODE_DEMO_NOTES")
            .ok_or_else(|| ErrorData::invalid_params("CODEMODE_DEMO_NOTES is not set", None))?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| writeln!(file, "{text}"))
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text("noted")]))
    }

    #[tool(
        description = "Records that a note is forgotten: appends `forgot: <text>` to the notes \
                       file, as `note` does (a destructive tool, for tests of the gate).",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    fn forget(
        &self,
        Parameters(NoteRequest { text }): Parameters<NoteRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        self.note(Parameters(NoteRequest {
            text: format!("forgot: {text}"),
        }))
    }

    #[tool(
        description = "Sends the text as a log message (notifications/message, level warning), \
                       then answers 200 ms later.",
        annotations(read_only_hint = true)
    )]
    #[allow(deprecated)] // Logging is deprecated by SEP-2577, and still what servers send.
    async fn log(
        &self,
        Parameters(NoteRequest { text }): Parameters<NoteRequest>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let message = rmcp::model::LoggingMessageNotificationParam::new(
            rmcp::model::LoggingLevel::Warning,
            serde_json::Value::String(text),
        )
        .with_logger("demo-log");
        peer.notify_logging_message(message)
            .await
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        Ok(CallToolResult::success(vec![ContentBlock::text("logged")]))
    }

    #[tool(
        description = "The W3C traceparent this call's request carried in _meta (empty text \
                       without one); over HTTP, a second text `header: ` with its traceparent \
                       header.",
        annotations(read_only_hint = true)
    )]
    fn traceparent(
        &self,
        meta: rmcp::model::RequestMetaObject,
        extensions: rmcp::model::Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let traceparent = meta.0.get_traceparent().unwrap_or_default().to_owned();
        let mut content = vec![ContentBlock::text(traceparent)];
        if let Some(request) = extensions.get::<http::request::Parts>() {
            let header = request
                .headers
                .get("traceparent")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default();
            content.push(ContentBlock::text(format!("header: {header}")));
        }
        Ok(CallToolResult::success(content))
    }

    #[tool(
        description = "The server's process id.",
        annotations(read_only_hint = true)
    )]
    fn pid(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            std::process::id().to_string(),
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "A test server: add, image, fail, sleep, note, forget, log, traceparent, pid.",
        )
    }
}

/// Serves the demo tools on stdin and stdout until the client goes away.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let service = DemoServer::new().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// Serves the demo tools over streamable HTTP at `http://ADDRESS/mcp`, printing
/// `listening on http://<bound address>/mcp` on stdout first (so an address with port 0 can be
/// used, and a parent process can read where it listens). With `bearer`, a request without
/// `Authorization: Bearer <bearer>` is answered 401, as a server that demands a token answers.
pub async fn serve_http(
    address: &str,
    bearer: Option<String>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service: StreamableHttpService<DemoServer, LocalSessionManager> =
        StreamableHttpService::new(
            || Ok(DemoServer::new()),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(token) = bearer {
        let expected = format!("Bearer {token}");
        router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let authorised = request
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .is_some_and(|value| value.as_bytes() == expected.as_bytes());
                async move {
                    if authorised {
                        next.run(request).await
                    } else {
                        axum::response::IntoResponse::into_response((
                            http::StatusCode::UNAUTHORIZED,
                            [(http::header::WWW_AUTHENTICATE, "Bearer")],
                            "a bearer token is required",
                        ))
                    }
                }
            },
        ));
    }
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
