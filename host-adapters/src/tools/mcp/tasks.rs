//! Tasks: a call answered with a task is followed to its end (polled with `tasks/get` within
//! [`TASK_POLL_BOUNDS`], its result fetched with `tasks/result` in the 2025-11-25 revision), and
//! cancelled (`tasks/cancel`, `notifications/cancelled`) when the call ends early; a task that asks
//! for input is cancelled, since a cell has no one to ask.

use std::time::Duration;

use codemode_session::ToolProgress;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolResult, CancelTaskParams, ClientRequest, ContentBlock, CustomRequest, GetTaskParams,
    ServerResult,
};
use rmcp::service::RoleClient;
use serde_json::{Value, json};

use super::notifications::ProgressRoute;

/// Whether `result` is a server's refusal to run the tool outside a task: "method not found"
/// (`-32601`), which the official TypeScript SDK sends as an error result
/// (`MCP error -32601: Tool … requires task augmentation …`) rather than a JSON-RPC error.
pub(super) fn refused_outside_a_task(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
        && result.content.iter().any(|block| match block {
            ContentBlock::Text(text) => {
                text.text.starts_with("MCP error -32601") && text.text.contains("task")
            }
            _ => false,
        })
}

/// Where one call's progress goes, and the progress tokens routed there while it lasts.
pub(super) struct CallProgress {
    pub(super) progress: ToolProgress,
    /// The tool's global name, for the messages.
    pub(super) tool: String,
    pub(super) routes: parking_lot::Mutex<Vec<ProgressRoute>>,
    /// The user of the cell that makes the call: who a 2026-07-28 server's input requests
    /// (an `input_required` result) are passed on to.
    pub(super) user: Option<std::sync::Arc<dyn codemode_session::UserChannel>>,
}

/// Work to start on the async runtime when dropped before it is disarmed: telling a server that
/// something it runs for a call nobody waits for any more is cancelled.
pub(super) struct SpawnOnDrop(
    Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
);

impl SpawnOnDrop {
    pub(super) fn new(work: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        SpawnOnDrop(Some(Box::pin(work)))
    }

    /// What it would have undone ended normally: nothing to do.
    pub(super) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for SpawnOnDrop {
    fn drop(&mut self) {
        if let Some(work) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(work);
        }
    }
}

/// Tells the server that request `id`, whose answer nobody waits for any more, is cancelled.
pub(super) async fn notify_cancelled(peer: rmcp::Peer<RoleClient>, id: rmcp::model::RequestId) {
    let notice = rmcp::model::CancelledNotificationParam::new(
        Some(id),
        Some("the cell no longer waits for this call".to_owned()),
    );
    if let Err(error) = peer.notify_cancelled(notice).await {
        tracing::debug!(%error, "cannot tell the server that a call is cancelled");
    }
}

/// Sends `tasks/cancel` for a task whose call nobody waits for any more.
pub(super) async fn cancel_task(
    peer: rmcp::Peer<RoleClient>,
    protocol: TaskProtocol,
    task_id: String,
) {
    let sent = match protocol {
        TaskProtocol::Extension => peer
            .cancel_task(CancelTaskParams::new(task_id.clone()))
            .await
            .map(drop),
        TaskProtocol::Augmented => peer
            .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                "tasks/cancel",
                Some(json!({ "taskId": task_id })),
            )))
            .await
            .map(drop),
    };
    match sent {
        Ok(()) => tracing::info!(
            %task_id,
            "cancelled the task of a call the cell no longer waits for"
        ),
        Err(error) => {
            tracing::debug!(%task_id, %error, "cannot cancel the task of an abandoned call")
        }
    }
}

/// How a call failed, before it is put in words for the cell.
pub(super) enum CallFailure {
    /// The request or its connection failed.
    Service(ServiceError),
    /// The server answered, and what it answered cannot become a result.
    Refused(String),
}

/// Which revision's task protocol a task follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskProtocol {
    /// The 2026-07-28 tasks extension (SEP-2663): `tasks/get` carries the result.
    Extension,
    /// The 2025-11-25 revision (SEP-1686): `tasks/result` carries the result.
    Augmented,
}

/// The shortest and longest pause between two polls of a task, whatever the server suggests.
pub(super) const TASK_POLL_BOUNDS: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_secs(5));

/// The pause between polls: the server's suggestion within [`TASK_POLL_BOUNDS`], 200 ms without
/// one.
pub(super) fn poll_interval(suggested_ms: Option<u64>) -> Duration {
    suggested_ms
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_millis(200))
        .clamp(TASK_POLL_BOUNDS.0, TASK_POLL_BOUNDS.1)
}

pub(super) fn to_json(result: &ServerResult) -> Result<Value, CallFailure> {
    serde_json::to_value(result)
        .map_err(|error| CallFailure::Refused(format!("cannot read the server's answer: {error}")))
}

/// Polls task `task_id` until it ends and returns its result. Dropped before then (the cell was
/// terminated, or the call timed out), it cancels the task.
pub(super) async fn follow_task(
    peer: &rmcp::Peer<RoleClient>,
    protocol: TaskProtocol,
    task_id: String,
    mut interval: Duration,
) -> Result<CallToolResult, CallFailure> {
    let mut cancel = SpawnOnDrop::new(cancel_task(peer.clone(), protocol, task_id.clone()));
    loop {
        tokio::time::sleep(interval).await;
        let state = match protocol {
            TaskProtocol::Extension => peer
                .get_task(GetTaskParams::new(task_id.clone()))
                .await
                .map_err(CallFailure::Service)
                .and_then(|state| {
                    serde_json::to_value(&state).map_err(|error| {
                        CallFailure::Refused(format!("cannot read the task's state: {error}"))
                    })
                })?,
            TaskProtocol::Augmented => to_json(
                &peer
                    .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                        "tasks/get",
                        Some(json!({ "taskId": task_id })),
                    )))
                    .await
                    .map_err(CallFailure::Service)?,
            )?,
        };
        if let Some(suggested) = state
            .get("pollIntervalMs")
            .or_else(|| state.get("pollInterval"))
            .and_then(Value::as_u64)
        {
            interval = poll_interval(Some(suggested));
        }
        let message = state
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(|message| format!(" ({message})"))
            .unwrap_or_default();
        match state.get("status").and_then(Value::as_str) {
            Some("working") => continue,
            Some("input_required") => {
                return Err(CallFailure::Refused(format!(
                    "the tool's task asked for input{message} (elicitation or sampling), which a \
                     cell cannot give; the task was cancelled"
                )));
            }
            Some("cancelled") => {
                cancel.disarm();
                return Err(CallFailure::Refused(format!(
                    "the server cancelled the tool's task{message}"
                )));
            }
            Some("completed") if protocol == TaskProtocol::Extension => {
                cancel.disarm();
                let result = state.get("result").cloned().unwrap_or(Value::Null);
                return serde_json::from_value(result).map_err(|error| {
                    CallFailure::Refused(format!("the task's result is not a tool result: {error}"))
                });
            }
            Some("failed") if protocol == TaskProtocol::Extension => {
                cancel.disarm();
                let why = state
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("no reason given{message}"));
                return Err(CallFailure::Refused(format!(
                    "the tool's task failed: {why}"
                )));
            }
            Some("completed" | "failed") => {
                cancel.disarm();
                let result = peer
                    .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                        "tasks/result",
                        Some(json!({ "taskId": task_id })),
                    )))
                    .await
                    .map_err(CallFailure::Service)?;
                return match result {
                    ServerResult::CallToolResult(result) => Ok(result),
                    other => Err(CallFailure::Refused(format!(
                        "the task's result is not a tool result: {}",
                        to_json(&other)?
                    ))),
                };
            }
            other => {
                return Err(CallFailure::Refused(format!(
                    "the server reported the task in a state this client does not know: {other:?}"
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_outside_a_task_is_told_from_other_errors() {
        let refusal = CallToolResult::error(vec![ContentBlock::text(
            "MCP error -32601: Tool simulate-research-query requires task augmentation \
             (taskSupport: 'required')",
        )]);
        assert!(refused_outside_a_task(&refusal));
        let other = CallToolResult::error(vec![ContentBlock::text("MCP error -32602: bad topic")]);
        assert!(!refused_outside_a_task(&other));
        let success = CallToolResult::success(vec![ContentBlock::text(
            "MCP error -32601: a task, quoted in a successful result",
        )]);
        assert!(!refused_outside_a_task(&success));
    }

    #[test]
    fn task_polls_follow_the_server_within_bounds() {
        assert_eq!(poll_interval(None), Duration::from_millis(200));
        assert_eq!(poll_interval(Some(1000)), Duration::from_secs(1));
        assert_eq!(poll_interval(Some(0)), TASK_POLL_BOUNDS.0);
        assert_eq!(poll_interval(Some(u64::MAX)), TASK_POLL_BOUNDS.1);
    }
}
