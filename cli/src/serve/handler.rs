//! The MCP tool surface: `CodemodeServer`, the handler of one MCP session (or one request without
//! MCP sessions), offering `exec` and `wait` (with their argument checks), `exec` tasks and their
//! requests, subscriptions, and logging levels. Every method of `CodemodeServer` is here; the
//! sessions it reaches are opened by [`Shared`].

use std::sync::Arc;
use std::time::Duration;

use codemode_protocol::{CellId, WaitRequest};
use codemode_session::{CellTicket, ExecOptions, Session};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::task_manager::{TaskManager, TaskOptions};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::cluster::{ProgressRelay, was_forwarded};
use super::identity::Identity;
use super::live::LiveSession;
use super::progress::{self, Watched, request_id_text};
use super::push::{LogThreshold, ToolChanges, announce_tool_changes, push_completions};
use super::results::to_call_tool_result;
use super::retries::{self, answers_by_retry, apply_answers};
use super::sessions::{McpSessionState, Shared};
use super::tasks::{EXEC_TASK_POLL_INTERVAL, EXEC_TASK_TTL, duration_ms, follow_cell};
use super::user::{ClientUser, RootsCache};

/// The description of `exec` as this server offers it, whole.
pub(super) fn exec_tool_description(session: &Session) -> String {
    with_arguments_note(session.exec_description())
}

/// `description` with the note on `exec`'s arguments after it.
fn with_arguments_note(description: String) -> String {
    format!(
        "{description}\n\nPass the source in the `code` argument. `yield_time_ms` and \
         `max_output_tokens` may also be given as arguments; they win over the pragma line."
    )
}

/// The most characters of a tool's description that the client named `client` (its
/// `clientInfo.name`) passes whole to its model, when it cuts the rest: Claude Code cuts a longer
/// one at 4,096 ("… \[truncated\]"), and with it the tool declarations, though it passes an
/// argument's description whole. Codex CLI passes a long description whole but drops the
/// descriptions of a large argument schema, so the declarations stay in the description for it
/// and for every client not known to cut.
fn description_limit(client: Option<&str>) -> Option<usize> {
    match client {
        Some("claude-code") => Some(4096),
        _ => None,
    }
}

/// What the `code` argument says of itself.
const CODE_DESCRIPTION: &str =
    "JavaScript (or TypeScript) source, optionally starting with a // @exec: {...} pragma line.";

/// `exec`'s description and its `code` argument's, as served to the client named `client`: the
/// whole description when that client passes it whole; otherwise the tool declarations move
/// into the `code` argument's description, and the description says they are there.
pub(super) fn exec_descriptions(session: &Session, client: Option<&str>) -> (String, String) {
    let whole = exec_tool_description(session);
    let fits = description_limit(client).is_none_or(|limit| whole.chars().count() <= limit);
    if fits {
        return (whole, CODE_DESCRIPTION.to_owned());
    }
    let (description, tools) = session.exec_description_split(
        "The TypeScript declarations of every tool (`declare const tools: {...}`) are in the \
         description of the `code` argument.",
    );
    (
        with_arguments_note(description),
        format!("{CODE_DESCRIPTION}\n\nTools:\n{tools}"),
    )
}

/// `exec`'s title, for clients that show one.
const EXEC_TITLE: &str = "Run JavaScript that calls your MCP tools";

/// `wait`'s title.
const WAIT_TITLE: &str = "Wait for a running script";

/// What `exec` says of itself, truthfully: it reaches other servers (open world), and what it
/// does there may write or delete (not read-only, possibly destructive, not idempotent). Each
/// call a cell makes passes codemode's own gate, which asks the user (or refuses) by the user's
/// permissions; a client that asks before every tool that is not read-only asks for `exec` too,
/// unless the user lets it run (the README's settings for each client say how).
pub(super) fn exec_annotations() -> rmcp::model::ToolAnnotations {
    rmcp::model::ToolAnnotations::with_title(EXEC_TITLE)
        .read_only(false)
        .destructive(true)
        .idempotent(false)
        .open_world(true)
}

/// What `wait` says of itself: it observes a cell this server runs (or, asked to, ends it),
/// and reaches nothing outside: neither destructive nor open world.
pub(super) fn wait_annotations() -> rmcp::model::ToolAnnotations {
    rmcp::model::ToolAnnotations::with_title(WAIT_TITLE)
        .read_only(false)
        .destructive(false)
        .idempotent(false)
        .open_world(false)
}

/// The hints clients read in a tool's `_meta`: Claude Code loads a tool marked
/// `anthropic/alwaysLoad` with the first request instead of deferring it behind its tool
/// search, and matches `anthropic/searchHint` when it searches.
pub(super) fn client_hints(search_hint: String) -> rmcp::model::MetaObject {
    let mut meta = rmcp::model::MetaObject::new();
    meta.0
        .insert("anthropic/alwaysLoad".to_owned(), Value::Bool(true));
    meta.0.insert(
        "anthropic/searchHint".to_owned(),
        Value::String(search_hint),
    );
    meta
}

/// The longest search hint, in characters: the servers and tools past it are left out.
const SEARCH_HINT_CHARS: usize = 1024;

/// What a search for `exec` should match: what it is, and the servers and tools a cell calls
/// through it (a user's "delete a note" finds `exec` when `notes__delete_note` is among them).
pub(super) fn search_hint(session: &Session) -> String {
    let mut by_server: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for tool in session.tools().iter() {
        let server = tool.name.namespace.clone().unwrap_or_default();
        by_server
            .entry(server)
            .or_default()
            .push(tool.name.name.replace(['_', '-'], " "));
    }
    let mut hint = "run javascript typescript code mode script that calls tools".to_owned();
    for (server, tools) in by_server {
        let part = if server.is_empty() {
            format!("; {}", tools.join(", "))
        } else {
            format!("; {server}: {}", tools.join(", "))
        };
        if hint.chars().count() + part.chars().count() > SEARCH_HINT_CHARS {
            break;
        }
        hint.push_str(&part);
    }
    hint
}

/// The arguments `exec` takes.
pub(super) const EXEC_ARGUMENTS: &[&str] = &["code", "yield_time_ms", "max_output_tokens"];

/// The arguments `wait` takes.
pub(super) const WAIT_ARGUMENTS: &[&str] = &[
    "cell_id",
    "cell_ids",
    "yield_time_ms",
    "max_tokens",
    "terminate",
];

/// An error naming every argument `tool` does not take, rather than ignoring them silently.
pub(super) fn refuse_unknown_arguments(
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

/// Arguments the model got wrong, as a tool result with `isError` (not a JSON-RPC error), as the
/// 2025-11-25 revision asks: the model sees the reason and can fix its call.
pub(super) fn invalid_arguments(error: ErrorData) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.message.into_owned())])
}

/// An optional non-negative integer argument.
pub(super) fn count_argument(
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

/// The handler of one MCP session (without MCP sessions, of one request).
#[derive(Clone)]
pub(super) struct CodemodeServer {
    shared: Arc<Shared>,
    state: Arc<tokio::sync::Mutex<McpSessionState>>,
    /// The least severe log message this MCP session's client wants (`logging/setLevel`).
    log_threshold: LogThreshold,
    /// The client's roots, once asked, for downstream servers that ask for them.
    roots: RootsCache,
}

impl CodemodeServer {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        CodemodeServer {
            shared,
            state: Arc::new(tokio::sync::Mutex::new(McpSessionState::default())),
            log_threshold: LogThreshold::default(),
            roots: RootsCache::default(),
        }
    }

    /// The codemode session of this MCP session or request (see [`Shared::session`]).
    async fn session(
        &self,
        extensions: &rmcp::model::Extensions,
        peer: &Peer<RoleServer>,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        self.shared
            .session(&self.state, extensions, peer, &self.log_threshold)
            .await
    }

    /// The user of the cells this request starts, as its client reaches them: asked with
    /// elicitation requests, or (a 2026-07-28 client) in results its retries answer.
    fn client_user(
        &self,
        context: &RequestContext<RoleServer>,
        capabilities: Option<rmcp::model::ClientCapabilities>,
        live: &LiveSession,
    ) -> ClientUser {
        let user = ClientUser::new(
            context.peer.clone(),
            capabilities,
            self.log_threshold.clone(),
            Arc::clone(&self.roots),
            super::user::client_named(context.client_info().as_ref()),
        );
        if answers_by_retry(&context.meta) {
            user.answering_by_retry(Arc::clone(&live.questions))
        } else {
            user
        }
    }

    /// Who this MCP session (or request) is: fixed at its first request.
    async fn identity(&self, extensions: &rmcp::model::Extensions) -> Result<Identity, ErrorData> {
        self.shared.identity(&self.state, extensions).await
    }

    async fn exec(
        &self,
        arguments: Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parsed = (|| {
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
            Ok((code, options))
        })();
        let (code, options) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return Ok(invalid_arguments(error).into()),
        };
        // Decoded once: whether `exec` may answer with a task, and what its cells' user can do.
        let capabilities = context.client_capabilities();
        let as_task = capabilities
            .as_ref()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        let live = self.session(&context.extensions, &context.peer).await?;
        // A downstream server still starting past the startup window spared the client's first
        // tools/list the wait; a cell, which may call it, waits for it (within its own startup
        // timeout), and the cell's start lists its tools.
        self.shared.tools.until_started().await;
        let slot = self.shared.admit_cell(&live.tenant).await?;
        let session = &live.session;
        let call_id = format!("mcp-{}", request_id_text(&context));
        let tools_before = session.tools();
        let max_tokens = options.max_output_tokens;
        // The cell's calls that need approval ask this client's user; a client that gives up on
        // this `exec` (notifications/cancelled) stops its cell.
        let options = options
            .with_ticket(CellTicket::new(slot))
            .with_user(Arc::new(self.client_user(&context, capabilities, &live)))
            .with_cancellation(context.ct.clone())
            // A 2026-07-28 client is asked in the result: the result must not wait for it.
            .with_yield_on_approval(answers_by_retry(&context.meta));
        let result = progress::relayed(
            &context,
            session,
            Watched::Call(call_id.clone()),
            session.exec_tool_with(&call_id, code, options),
        )
        .await;
        live.touch();
        // A downstream server's tools changed and the session listed them again for this cell:
        // `exec`'s description (which declares them) changed too, so tell the client.
        if !Arc::ptr_eq(&tools_before, &session.tools())
            && let Err(error) = context.peer.notify_tool_list_changed().await
        {
            tracing::debug!(%error, "cannot tell the client that the tools changed");
        }
        if as_task && let Some(cell_id) = result.running_cell_id.clone() {
            let options = TaskOptions::new()
                .with_ttl_ms(duration_ms(EXEC_TASK_TTL))
                .with_poll_interval_ms(duration_ms(EXEC_TASK_POLL_INTERVAL))
                .with_status_message(format!("cell {cell_id} is running"));
            let tasks = live.tasks.clone();
            let mut task = tasks.spawn(options, move |task| {
                Box::pin(follow_cell(live, cell_id, result, max_tokens, task))
            });
            // In a cluster, the task's id names this server, as its cell's does.
            if let Some(cluster) = &self.shared.cluster {
                task.task_id = cluster.public_task_id(&task.task_id);
            }
            return Ok(CreateTaskResult::new(task).into());
        }
        let running = result.running_cell_id.clone();
        let result = to_call_tool_result(result);
        if answers_by_retry(&context.meta) {
            return Ok(retries::answer(
                &live,
                &self.shared.request_state,
                result,
                running.as_ref(),
            ));
        }
        Ok(result.into())
    }

    /// A 2026-07-28 client's retry of `exec` or `wait` with its answers to the approvals its
    /// result asked: they are applied, and the retry is answered as a `wait` on the cell.
    async fn answer_retry(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let live = self.session(&context.extensions, &context.peer).await?;
        let client = super::user::client_named(context.client_info().as_ref());
        let cell_id = apply_answers(&live, &self.shared.request_state, &request, &client).await?;
        let mut arguments = Map::new();
        arguments.insert("cell_id".to_owned(), Value::String(cell_id.to_string()));
        if let Some(yield_time) = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("yield_time_ms"))
        {
            arguments.insert("yield_time_ms".to_owned(), yield_time.clone());
        }
        self.wait(arguments, context).await
    }

    /// Sends a task request to the server that runs the cell of task `task_id`, when that is
    /// another server of the cluster and this request was not forwarded already; `None` when the
    /// task, if any, is this server's.
    async fn task_request_elsewhere<T, F, Fut>(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
        request: F,
    ) -> Option<Result<T, ErrorData>>
    where
        F: FnOnce(Peer<rmcp::RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        let cluster = self.shared.cluster.as_deref()?;
        let owner = cluster.owner_of_task(task_id)?;
        if was_forwarded(&context.extensions) {
            return None;
        }
        Some(match self.identity(&context.extensions).await {
            Ok(identity) => {
                cluster
                    .forward_task(&owner, &identity, task_id, request)
                    .await
            }
            Err(error) => Err(error),
        })
    }

    /// Runs `request` on this session's task manager, with the id it knows task `task_id` by
    /// (without the cluster's server prefix); its errors name the id the client knows.
    async fn local_task<T>(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
        request: impl FnOnce(&TaskManager, &str) -> Result<T, ErrorData>,
    ) -> Result<T, ErrorData> {
        let live = self.session(&context.extensions, &context.peer).await?;
        let local = match &self.shared.cluster {
            Some(cluster) => cluster.local_task_id(task_id),
            None => task_id,
        };
        request(&live.tasks, local).map_err(|mut error| {
            if local != task_id {
                error.message = error.message.replace(local, task_id).into();
            }
            error
        })
    }

    async fn wait(
        &self,
        arguments: Map<String, Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // As the client sent them, should another server of the cluster answer.
        let forwarded = self.shared.cluster.is_some().then(|| arguments.clone());
        let parsed = refuse_unknown_arguments("wait", &arguments, WAIT_ARGUMENTS).and_then(|()| {
            serde_json::from_value::<WaitRequest>(Value::Object(arguments)).map_err(|error| {
                ErrorData::invalid_params(
                    format!("wait takes {{\"cell_id\": \"<id>\", \"cell_ids\"?: [\"<id>\", ...], \"yield_time_ms\"?, \"max_tokens\"?, \"terminate\"?}}: {error}"),
                    None,
                )
            })
        });
        let request = match parsed {
            Ok(request) => request,
            Err(error) => return Ok(invalid_arguments(error).into()),
        };
        // A cell of another server of the cluster: that server answers.
        if let Some(cluster) = &self.shared.cluster
            && let Some(owner) = cluster.owner_of_cell(&request.cell_id)
            && let Some(forwarded) = forwarded
            && !was_forwarded(&context.extensions)
        {
            let identity = self.identity(&context.extensions).await?;
            // The other server may hold the wait for news up to its maximum, as this one would.
            let yield_time = Duration::from_millis(request.yield_time_ms.unwrap_or(0))
                + self.shared.max_wait.unwrap_or_default();
            let progress = context
                .meta
                .get_progress_token()
                .map(|token| ProgressRelay {
                    caller: context.peer.clone(),
                    token,
                });
            return Ok(cluster
                .forward_wait(
                    &owner,
                    &identity,
                    &request.cell_id,
                    forwarded,
                    yield_time,
                    progress,
                )
                .await
                .into());
        }
        let live = self.session(&context.extensions, &context.peer).await?;
        let session = &live.session;
        // A trace shows each wait that observed a cell, beside the exec that started it.
        if let Some(cell_id) = CellId::parse(&request.cell_id)
            && let Some(cell_span) = session.cell_span(&cell_id)
        {
            crate::telemetry::link_spans(&tracing::Span::current(), &cell_span);
        }
        let registration = live.start_wait(&request.cell_id, context.ct.clone()).await;
        // A wait the client cancels (`notifications/cancelled`) stops observing at once: the
        // cell is free for the next wait, which gets every item this one had not returned.
        let cell_id = CellId::parse(&request.cell_id);
        let result = progress::relayed(&context, session, Watched::Cell(cell_id.clone()), async {
            tokio::select! {
                result = session.wait_tool(request) => Some(result),
                () = context.ct.cancelled() => None,
            }
        })
        .await;
        drop(registration);
        live.touch();
        match result {
            // A 2026-07-28 client: the cell's state now, then the output held back by an
            // approval asked, and a call waiting for approval asked in the result.
            Some(result) if answers_by_retry(&context.meta) => Ok(retries::answer(
                &live,
                &self.shared.request_state,
                to_call_tool_result(result),
                cell_id.as_ref(),
            )),
            Some(result) => Ok(to_call_tool_result(result).into()),
            None => Err(ErrorData::internal_error(
                "the client cancelled this wait; the cell goes on, and the next wait picks it up",
                None,
            )),
        }
    }
}

impl ServerHandler for CodemodeServer {
    // Logging is deprecated in the SDK but still the standard way to push a message unprompted
    // (completion push); see `push_log`.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_tasks()
                .build(),
        )
        .with_server_info(server_implementation())
        .with_instructions(
            "Run JavaScript that orchestrates tools with `exec`; pick up scripts still running with `wait`.",
        )
    }

    // The level filters the log messages this MCP session is sent from now on (completion push).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        observed("logging/setLevel", &context, async {
            self.log_threshold.set(request.level);
            Ok(())
        })
        .await
    }

    // `subscriptions/listen` (MCP 2026-07-28, where no session carries notifications): the one
    // change this server announces is its tool list's (`exec` declares the downstream tools).
    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(
        &self,
        subscription: rmcp::service::SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let wants_tools = subscription.accepted().tools_list_changed == Some(true);
        let mut changes = ToolChanges::new(
            Arc::clone(&self.shared.tools) as Arc<dyn codemode_session::ToolProvider>
        );
        loop {
            tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                () = self.shared.shutting_down.cancelled() => return Ok(()),
                () = changes.next(), if wants_tools => {
                    if subscription.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        observed("tasks/get", &context, async {
            let task_id = request.task_id.clone();
            let forward =
                |peer: Peer<rmcp::RoleClient>| async move { peer.get_task(request).await };
            if let Some(answer) = self
                .task_request_elsewhere(&task_id, &context, forward)
                .await
            {
                return answer;
            }
            let mut task = self
                .local_task(&task_id, &context, |tasks, local| tasks.get_task(local))
                .await?;
            task.task.task_id = task_id;
            Ok(GetTaskResult::new(task))
        })
        .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        observed("tasks/update", &context, async {
            let task_id = request.task_id.clone();
            let responses = request.input_responses.clone();
            let forward =
                |peer: Peer<rmcp::RoleClient>| async move { peer.update_task(request).await };
            if let Some(answer) = self
                .task_request_elsewhere(&task_id, &context, forward)
                .await
            {
                return answer;
            }
            // An exec task never asks for input; this answers unknown ids and stray responses
            // alike.
            self.local_task(&task_id, &context, |tasks, local| {
                tasks.update_task(local, responses)
            })
            .await
        })
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        observed("tasks/cancel", &context, async {
            let task_id = request.task_id.clone();
            let forward =
                |peer: Peer<rmcp::RoleClient>| async move { peer.cancel_task(request).await };
            if let Some(answer) = self
                .task_request_elsewhere(&task_id, &context, forward)
                .await
            {
                return answer;
            }
            self.local_task(&task_id, &context, |tasks, local| tasks.cancel_task(local))
                .await
        })
        .await
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        // Asked again the next time a downstream server wants them.
        *self.roots.lock().await = None;
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A downstream server that answers after the startup window reaches the client's model
        // when the client lists the tools again.
        announce_tool_changes(
            Arc::clone(&self.shared.tools) as Arc<dyn codemode_session::ToolProvider>,
            context.peer.clone(),
            self.shared.shutting_down.clone(),
        );
        // Open the session now, so that completion push starts with it; a named session, which
        // other MCP sessions may share, tells each of them.
        match self.session(&context.extensions, &context.peer).await {
            Err(error) => {
                tracing::warn!(error = %error.message, "cannot open the session of a new MCP client");
            }
            Ok(live) => {
                let named = self
                    .state
                    .lock()
                    .await
                    .identity
                    .as_ref()
                    .is_some_and(|identity| identity.named);
                if named {
                    push_completions(
                        &live.session,
                        context.peer.clone(),
                        self.log_threshold.clone(),
                    );
                }
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        observed("tools/list", &context, self.tools_list(&context)).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let span = request_span("tools/call", Some(&tool), &context);
        let began = std::time::Instant::now();
        let _in_flight = InFlight::start(&self.shared);
        let answer = self
            .tools_call(request, context)
            .instrument(span.clone())
            .await;
        let error = error_type(
            &answer,
            |response| matches!(response, CallToolResponse::Complete(result) if result.is_error == Some(true)),
        );
        request_done(&span, "tools/call", Some(&tool), error, began);
        answer
    }
}

/// Counts a `tools/call` in [`Shared::calls_in_flight`] while it is held.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn start(shared: &'a Shared) -> Self {
        shared
            .calls_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0
            .calls_in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The server span of one MCP request, in OpenTelemetry's MCP conventions, continuing the trace
/// the client sent in `_meta`.
fn request_span(
    method: &'static str,
    tool: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    let session_id = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let protocol_version = context
        .protocol_version()
        .map(|version| version.to_string());
    let span = tracing::info_span!(
        target: "codemode::mcp",
        "mcp_request",
        otel.name = %match tool {
            Some(tool) => format!("{method} {tool}"),
            None => method.to_owned(),
        },
        otel.kind = "server",
        mcp.method.name = method,
        gen_ai.tool.name = tool,
        gen_ai.operation.name = tool.map(|_| "execute_tool"),
        jsonrpc.request.id = %context.id,
        mcp.session.id = session_id.as_deref(),
        mcp.protocol.version = protocol_version.as_deref(),
        error.type = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, &context.meta.0.0);
    span
}

/// Answers a request other than `tools/call` in its server span, and counts its duration.
async fn observed<T>(
    method: &'static str,
    context: &RequestContext<RoleServer>,
    answer: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let span = request_span(method, None, context);
    let began = std::time::Instant::now();
    let answer = answer.instrument(span.clone()).await;
    request_done(&span, method, None, error_type(&answer, |_| false), began);
    answer
}

/// How a request failed, as `error.type` says it: the JSON-RPC error's code, or `tool_error` for
/// a result the tool marked as an error.
fn error_type<T>(answer: &Result<T, ErrorData>, is_error: impl Fn(&T) -> bool) -> Option<String> {
    match answer {
        Err(error) => Some(error.code.0.to_string()),
        Ok(result) if is_error(result) => Some("tool_error".to_owned()),
        Ok(_) => None,
    }
}

/// Ends a request: its `error.type`, and its duration in `mcp.server.operation.duration`.
fn request_done(
    span: &tracing::Span,
    method: &'static str,
    tool: Option<&str>,
    error_type: Option<String>,
    began: std::time::Instant,
) {
    if let Some(error_type) = &error_type {
        span.record("error.type", error_type.as_str());
    }
    crate::telemetry::metrics::metrics().record_request(
        method,
        tool,
        error_type.as_deref(),
        began.elapsed(),
    );
}

impl CodemodeServer {
    async fn tools_list(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let live = self.session(&context.extensions, &context.peer).await?;
        let session = &live.session;
        // A server that started (or changed its tools) since the session listed them.
        session.refresh_tools().await;
        // Named in the request (2026-07-28, as Claude Code speaks) or at initialisation.
        let client = context.client_info().map(|info| info.name);
        let (exec_description, code_description) = exec_descriptions(session, client.as_deref());
        let exec_schema = json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": code_description
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
        let exec = Tool::new("exec", exec_description, object(exec_schema))
            .with_title(EXEC_TITLE)
            .with_annotations(exec_annotations())
            .with_meta(client_hints(search_hint(session)));
        let wait = Tool::new(
            "wait",
            session.wait_description(),
            object(session.wait_input_schema()),
        )
        .with_title(WAIT_TITLE)
        .with_annotations(wait_annotations())
        .with_meta(client_hints(
            "wait for a running code mode script (exec cell): its output, result or approvals"
                .to_owned(),
        ));
        Ok(ListToolsResult::with_all_items(vec![exec, wait]))
    }

    async fn tools_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let retry = request.request_state.is_some() || request.input_responses.is_some();
        if retry && matches!(request.name.as_ref(), "exec" | "wait") {
            return self.answer_retry(request, context).await;
        }
        let arguments = request.arguments.clone().unwrap_or_default();
        match request.name.as_ref() {
            "exec" => self.exec(arguments, context).await,
            "wait" => self.wait(arguments, context).await,
            other => Err(ErrorData::invalid_params(
                format!("there is no tool named {other:?}; this server offers exec and wait"),
                None,
            )),
        }
    }
}

/// Who this server is, as `initialize` and `server/discover` say: codemode and its version.
pub(super) fn server_implementation() -> rmcp::model::Implementation {
    let mut implementation =
        rmcp::model::Implementation::new("codemode", env!("CARGO_PKG_VERSION"));
    implementation.title = Some("codemode".to_owned());
    implementation.description = Some(
        "Runs model-written JavaScript that orchestrates tools, in sandboxed engines".to_owned(),
    );
    implementation
}

pub(super) fn object(schema: Value) -> Map<String, Value> {
    match schema {
        Value::Object(object) => object,
        _ => Map::new(),
    }
}
