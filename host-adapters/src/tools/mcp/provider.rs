//! The [`ToolProvider`] face of a downstream server: its tools listed as definitions under its
//! namespace, and a call sent (as a task where the server asks for one), timed out, cancelled and
//! its progress routed, its result checked and handed to the cell as text.

use codemode_protocol::{JsonText, ResultType, ToolAnnotations, ToolDefinition, ToolName};
use codemode_session::{ToolCallContext, ToolError, ToolInvocation, ToolListError, ToolProvider};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, CustomRequest, ErrorCode, ServerResult,
};
use rmcp::service::RoleClient;
use serde_json::{Map, Value, json};

use super::connection::McpTools;
use super::notifications::ProgressRoute;
use super::results::{call_result_to_value, with_instructions};
use super::tasks::{
    CallFailure, CallProgress, SpawnOnDrop, TaskProtocol, follow_task, notify_cancelled,
    poll_interval, refused_outside_a_task, to_json,
};

impl McpTools {
    /// Sends `request` and waits for its answer. The server's progress notifications for it go to
    /// the call's progress (for as long as the call lasts, a task's polling included); dropped
    /// before the answer, it tells the server that the request is cancelled.
    pub(super) async fn send(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        request: ClientRequest,
        progress: &CallProgress,
    ) -> Result<ServerResult, ServiceError> {
        let handle = peer
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await?;
        // rmcp gives each request its own progress token: route that one.
        self.progress.lock().insert(
            handle.progress_token.0.clone(),
            (progress.progress.clone(), progress.tool.clone()),
        );
        progress.routes.lock().push(ProgressRoute {
            routes: std::sync::Arc::clone(&self.progress),
            token: handle.progress_token.0.clone(),
        });
        let mut abandoned = SpawnOnDrop::new(notify_cancelled(peer.clone(), handle.id.clone()));
        let answer = handle.await_response().await;
        abandoned.disarm();
        answer
    }

    /// One `tools/call`, followed to its result when the server answers with a task.
    pub(super) async fn call_once(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
    ) -> Result<CallToolResult, CallFailure> {
        let name = params.name.as_ref();
        let task_only = self.task_only.lock().contains(name);
        if task_only {
            return self.call_as_augmented_task(peer, params, progress).await;
        }
        let mut params = params.clone();
        // A 2026-07-28 server may answer with the input it needs first (SEP-2322): the call's
        // user answers, and the call is made again with the answers and the server's state, as
        // many rounds as the server needs, up to a bound.
        for _round in 0..rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
            let request =
                ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params.clone()));
            match self.send(peer, request, progress).await {
                Ok(ServerResult::InputRequiredResult(needed)) => {
                    let responses = self.answer_input_requests(&needed, progress).await?;
                    params.input_responses = (!responses.is_empty()).then_some(responses);
                    params.request_state = needed.request_state;
                }
                answer => return self.call_answered(peer, &params, progress, answer).await,
            }
        }
        Err(CallFailure::Refused(format!(
            "the server asked for input {} times in a row without answering the call",
            rmcp::model::DEFAULT_MRTR_MAX_ROUNDS
        )))
    }

    /// The answers of the call's user to a server's input requests, by the server's keys.
    async fn answer_input_requests(
        &self,
        needed: &rmcp::model::InputRequiredResult,
        progress: &CallProgress,
    ) -> Result<rmcp::model::InputResponses, CallFailure> {
        use codemode_session::RelayedRequest;
        use rmcp::model::InputRequest;
        let server = self.config.namespace.clone();
        let mut responses = rmcp::model::InputResponses::new();
        for (key, request) in needed.input_requests.iter().flatten() {
            let relayed = match request {
                InputRequest::Elicitation(request) => RelayedRequest::Elicit {
                    server: server.clone(),
                    params: params_json(&request.params)?,
                },
                #[allow(deprecated)] // Sampling is deprecated by SEP-2577, and still sent.
                InputRequest::CreateMessage(request) => RelayedRequest::CreateMessage {
                    server: server.clone(),
                    params: params_json(&request.params)?,
                },
                InputRequest::ListRoots(_) => RelayedRequest::ListRoots {
                    server: server.clone(),
                },
                _ => {
                    return Err(CallFailure::Refused(format!(
                        "the tool asked for input of a kind codemode does not know (\"{key}\")"
                    )));
                }
            };
            let Some(user) = &progress.user else {
                return Err(CallFailure::Refused(format!(
                    "the tool asked for input ({}), and this cell has no user to ask",
                    relayed.method()
                )));
            };
            let answer = user.relay(relayed).await.map_err(|error| {
                CallFailure::Refused(format!("the tool asked for input: {error}"))
            })?;
            responses.insert(key.clone(), answer);
        }
        Ok(responses)
    }

    /// What a `tools/call` answered (not `input_required`), followed to its result.
    async fn call_answered(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
        answer: Result<ServerResult, ServiceError>,
    ) -> Result<CallToolResult, CallFailure> {
        match answer {
            Ok(ServerResult::CallToolResult(result)) if refused_outside_a_task(&result) => {
                self.call_as_task_from_now_on(peer, params, progress).await
            }
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(ServerResult::EmptyResult(_)) => Ok(CallToolResult::success(Vec::new())),
            Ok(ServerResult::CreateTaskResult(created)) => {
                follow_task(
                    peer,
                    TaskProtocol::Extension,
                    created.task.task_id,
                    poll_interval(created.task.poll_interval_ms),
                )
                .await
            }
            Ok(_) => Err(CallFailure::Service(ServiceError::UnexpectedResponse)),
            // `tools/call` exists, so "method not found" is the 2025-11-25 revision's answer to a
            // tool with `taskSupport: "required"` called without the task augmentation.
            Err(ServiceError::McpError(error)) if error.code == ErrorCode::METHOD_NOT_FOUND => {
                self.call_as_task_from_now_on(peer, params, progress).await
            }
            // The server refused the call (invalid params, say): as upstream code mode has it,
            // the cell's `await` resolves with an error result carrying the server's message,
            // which the cell reads as it reads any tool's `isError`.
            Err(ServiceError::McpError(error)) => Ok(CallToolResult::error(vec![
                rmcp::model::ContentBlock::text(error.message.into_owned()),
            ])),
            Err(error) => Err(CallFailure::Service(error)),
        }
    }

    /// Remembers that the tool runs only as a task, and calls it as one.
    pub(super) async fn call_as_task_from_now_on(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
    ) -> Result<CallToolResult, CallFailure> {
        let name = params.name.as_ref();
        tracing::debug!(server = %self.config.namespace, tool = name, "the tool runs only as a task; calling it as one");
        self.task_only.lock().insert(name.to_owned());
        self.call_as_augmented_task(peer, params, progress).await
    }

    /// A `tools/call` with the 2025-11-25 task augmentation (`"task": {"ttl": …}`), followed to
    /// its result.
    pub(super) async fn call_as_augmented_task(
        &self,
        peer: &rmcp::Peer<RoleClient>,
        params: &CallToolRequestParams,
        progress: &CallProgress,
    ) -> Result<CallToolResult, CallFailure> {
        let mut request = serde_json::to_value(params).map_err(|error| {
            CallFailure::Refused(format!("cannot write the task request: {error}"))
        })?;
        let ttl = u64::try_from(self.config.call_timeout.as_millis()).unwrap_or(u64::MAX);
        request["task"] = json!({ "ttl": ttl });
        let request = ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(request)));
        let created = self
            .send(peer, request, progress)
            .await
            .map_err(CallFailure::Service)?;
        let created = to_json(&created)?;
        let task = created.get("task").unwrap_or(&created);
        let Some(task_id) = task.get("taskId").and_then(Value::as_str) else {
            // A server may still answer with the result itself.
            return serde_json::from_value(created.clone()).map_err(|_| {
                CallFailure::Refused(format!(
                    "the server answered a task call with neither a task nor a result: {created}"
                ))
            });
        };
        let interval = poll_interval(task.get("pollInterval").and_then(Value::as_u64));
        follow_task(peer, TaskProtocol::Augmented, task_id.to_owned(), interval).await
    }
}

#[async_trait::async_trait]
impl ToolProvider for McpTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let (peer, generation) = self
            .client()
            .await
            .map_err(|error| ToolListError::unavailable(error.to_string()))?;
        // What the server says of using its tools (its `instructions`): part of each tool's
        // description, as a cell reads it in `ALL_TOOLS`.
        let instructions = peer
            .peer_info()
            .and_then(|info| info.instructions.clone())
            .filter(|instructions| !instructions.trim().is_empty());
        let listed = match peer.list_all_tools().await {
            // The listing wants more authorization: with a user at hand, authorize again and
            // list once more, over a new connection.
            Err(error)
                if error
                    .auth_challenge()
                    .is_some_and(|challenge| self.may_reauthorize(challenge)) =>
            {
                let challenge = error.auth_challenge().unwrap_or_default().to_owned();
                self.forget(generation).await;
                self.reauthorize(&challenge).await.map_err(|why| {
                    ToolListError::unavailable(format!("authorizing again failed: {why}"))
                })?;
                let (peer, _) = self
                    .client()
                    .await
                    .map_err(|error| ToolListError::unavailable(error.to_string()))?;
                peer.list_all_tools().await
            }
            listed => listed,
        };
        let tools = match listed {
            Ok(tools) => tools,
            Err(error) => {
                self.forget(generation).await;
                return Err(ToolListError::unavailable(format!(
                    "cannot list the tools of the MCP server \"{}\": {error}",
                    self.config.namespace
                )));
            }
        };
        // Tools the user's configuration leaves out never reach the cell's view.
        let tools: Vec<_> = tools
            .into_iter()
            .filter(|tool| self.config.offers(tool.name.as_ref()))
            .collect();
        let schemas = tools
            .iter()
            .filter_map(|tool| {
                let schema = tool.output_schema.as_ref()?;
                Some((tool.name.to_string(), Value::Object((**schema).clone())))
            })
            .collect();
        *self.output_schemas.lock() = schemas;
        Ok(tools
            .into_iter()
            .map(|tool| {
                let description = with_instructions(
                    tool.description
                        .as_deref()
                        .or(tool.title.as_deref())
                        .unwrap_or_default(),
                    instructions.as_deref(),
                );
                ToolDefinition::function(
                    ToolName::namespaced(&self.config.namespace, tool.name.as_ref()),
                    description,
                )
                .with_result_type(ResultType::CallToolResult)
                .with_input_schema(Value::Object((*tool.input_schema).clone()))
                .with_output_schema(
                    tool.output_schema
                        .map(|schema| Value::Object((*schema).clone())),
                )
                .with_annotations(tool.annotations.as_ref().map(annotations))
            })
            .collect())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        let ToolCallContext {
            cancellation,
            progress,
            user,
            trace_context,
            ..
        } = context;
        // While the call runs, what the server asks of the user goes to the cell's user.
        let _user_route = user.clone().map(|user| self.users.register(user));
        let global_name = call.name.global_name();
        if !self.config.offers(&call.name.name) {
            return Err(ToolError::not_found(format!(
                "tools.{global_name} is not offered: the configuration of the server \"{}\" \
                 leaves it out (enabledTools/disabledTools)",
                self.config.namespace
            )));
        }
        // rmcp sends a tree: the argument's text becomes one here, where it is sent.
        let input = call.input_value()?;
        let arguments: Option<Map<String, Value>> = match input {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments),
            Some(other) => {
                return Err(ToolError::invalid_arguments(format!(
                    "tools.{global_name} takes an object argument (MCP tool arguments are named), \
                     got {other}"
                )));
            }
        };
        let mut params = CallToolRequestParams::new(call.name.name.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // The trace the call belongs to goes to the server in `_meta` (W3C Trace Context, as
        // SEP-414 reserves its keys), so that its spans join the cell's.
        if !trace_context.is_empty() {
            let mut meta = rmcp::model::MetaObject::new();
            for (field, value) in trace_context {
                meta.0.insert(field, Value::String(value));
            }
            params.meta = Some(rmcp::model::RequestMetaObject(meta));
        }
        // The server's progress notifications for this call reach the cell's watchers.
        let progress = CallProgress {
            progress,
            tool: global_name.clone(),
            routes: parking_lot::Mutex::new(Vec::new()),
            user,
        };
        // A request that could not be sent never reached the server: reconnect and send it once
        // more. A connection that closed after sending is not retried (the call may have run).
        let mut attempts_left = 2;
        let mut stepped_up = false;
        let answer = loop {
            attempts_left -= 1;
            let (peer, generation) = self
                .client()
                .await
                .map_err(|error| ToolError::unavailable(error.to_string()))?;
            // Dropping the request (on cancellation or timeout) tells the server to cancel it.
            let answer = tokio::select! {
                answer = tokio::time::timeout(self.config.call_timeout, self.call_once(&peer, &params, &progress)) => answer,
                _ = cancellation.cancelled() => return Err(ToolError::cancelled(format!("tools.{global_name} was cancelled"))),
            };
            // A server that wants more scope for this call (403 insufficient_scope), or refuses
            // the saved tokens: with a user at hand, authorize again and call once more.
            if let Ok(Err(CallFailure::Service(error))) = &answer
                && !stepped_up
                && let Some(challenge) = error.auth_challenge().map(str::to_owned)
                && self.may_reauthorize(&challenge)
            {
                stepped_up = true;
                if let Err(why) = self.reauthorize(&challenge).await {
                    return Err(ToolError::unavailable(format!(
                        "tools.{global_name} needs more authorization, which failed: {why}"
                    )));
                }
                self.forget(generation).await;
                attempts_left += 1;
                continue;
            }
            match answer {
                Ok(Err(CallFailure::Service(ServiceError::TransportSend(_))))
                    if attempts_left > 0 =>
                {
                    self.forget(generation).await;
                }
                other => break (other, generation),
            }
        };
        let (answer, generation) = answer;
        match answer {
            Err(_) => Err(ToolError::unavailable(format!(
                "tools.{global_name} timed out: the MCP server \"{}\" did not answer within {:.1} s",
                self.config.namespace,
                self.config.call_timeout.as_secs_f64()
            ))),
            Ok(Err(CallFailure::Refused(why))) => Err(ToolError::failed(format!(
                "tools.{global_name} failed: {why}"
            ))),
            Ok(Err(CallFailure::Service(error))) => {
                let dead = matches!(
                    error,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                );
                if dead {
                    self.forget(generation).await;
                    Err(ToolError::unavailable(format!(
                        "tools.{global_name} failed: the MCP server \"{}\" is not running (it exited \
                         or closed the connection); the next call starts it again",
                        self.config.namespace
                    )))
                } else {
                    Err(ToolError::failed(format!(
                        "tools.{global_name} failed: {error}"
                    )))
                }
            }
            Ok(Ok(result)) => {
                let schema = self.output_schemas.lock().get(&call.name.name).cloned();
                call_result_to_value(result, schema.as_ref())
                    .map(|value| JsonText::from(&value))
                    .map_err(|why| ToolError::failed(format!("tools.{global_name}: {why}")))
            }
        }
    }

    fn tools_version(&self) -> u64 {
        self.tools_version.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn shutdown(&self) {
        McpTools::shutdown(self).await;
    }
}

/// What a server's tool says of its effects, kept for the cell's view and the gate.
fn annotations(annotations: &rmcp::model::ToolAnnotations) -> ToolAnnotations {
    let mut kept = ToolAnnotations::default();
    kept.read_only_hint = annotations.read_only_hint;
    kept.destructive_hint = annotations.destructive_hint;
    kept.idempotent_hint = annotations.idempotent_hint;
    kept.open_world_hint = annotations.open_world_hint;
    kept
}

/// A request's params as JSON, for the cell's user.
fn params_json(params: &impl serde::Serialize) -> Result<Value, CallFailure> {
    serde_json::to_value(params)
        .map_err(|error| CallFailure::Refused(format!("cannot read the server's request: {error}")))
}
