//! `exec` as a task (the MCP tasks extension): following a cell to its end for `tasks/get`, and
//! terminating it when the task is cancelled or dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_protocol::{CellId, WaitRequest};
use codemode_session::ToolResult;
use rmcp::model::CallToolResult;
use rmcp::task_manager::{TaskContext, TaskExit};

use super::live::LiveSession;
use super::results::to_call_tool_result;

/// How long an `exec` task lives: a cell still running then is terminated and the task fails;
/// an ended task stays readable as long again.
pub(super) const EXEC_TASK_TTL: Duration = Duration::from_secs(60 * 60);

/// The poll interval an `exec` task suggests.
pub(super) const EXEC_TASK_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How long one observation of a task's cell lasts (it ends earlier when the cell ends).
pub(super) const EXEC_TASK_OBSERVATION: Duration = Duration::from_secs(60);

/// An `exec` task: observes cell `cell_id` until it ends and answers with everything it showed,
/// from `first` (the `exec` observation that made the task) on. `tasks/cancel` terminates the
/// cell; so does the task being dropped before the cell ends (its time to live ran out, or the
/// server stops).
pub(super) async fn follow_cell(
    live: Arc<LiveSession>,
    cell_id: CellId,
    first: ToolResult,
    max_tokens: Option<u64>,
    task: TaskContext,
) -> Result<CallToolResult, TaskExit> {
    let mut terminate = TerminateOnDrop {
        live: Some(Arc::clone(&live)),
        cell_id: cell_id.clone(),
    };
    let began = Instant::now();
    let mut items = first.items;
    loop {
        let request = WaitRequest {
            cell_id: cell_id.to_string(),
            yield_time_ms: Some(duration_ms(EXEC_TASK_OBSERVATION)),
            max_tokens,
            terminate: false,
            cell_ids: Vec::new(),
        };
        let observed = tokio::select! {
            observed = live.session.wait_tool(request) => observed,
            () = task.cancelled() => {
                terminate.disarm();
                let request = WaitRequest { cell_id: cell_id.to_string(), yield_time_ms: None, max_tokens, terminate: true, cell_ids: Vec::new() };
                live.session.wait_tool(request).await;
                live.touch();
                tracing::info!(cell = %cell_id, "the client cancelled an exec task; its cell was terminated");
                return Err(TaskExit::Cancelled);
            }
        };
        live.touch();
        let ended = observed.running_cell_id.is_none();
        items.extend(observed.items);
        if ended {
            terminate.disarm();
            return Ok(to_call_tool_result(ToolResult::new(
                items,
                observed.is_error,
            )));
        }
        task.set_status_message(format!(
            "cell {cell_id} has been running for {:.0} s",
            began.elapsed().as_secs_f64()
        ));
    }
}

/// Terminates the cell of an `exec` task that is dropped before the cell ends.
pub(super) struct TerminateOnDrop {
    pub(super) live: Option<Arc<LiveSession>>,
    pub(super) cell_id: CellId,
}

impl TerminateOnDrop {
    /// The cell ended, or is terminated already.
    pub(super) fn disarm(&mut self) {
        self.live = None;
    }
}

impl Drop for TerminateOnDrop {
    fn drop(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cell_id = self.cell_id.to_string();
        runtime.spawn(async move {
            tracing::info!(cell = %cell_id, "an exec task ended before its cell (its time to live ran out, or the server stops); terminating the cell");
            let request = WaitRequest {
                cell_id,
                yield_time_ms: None,
                max_tokens: None,
                terminate: true,
                cell_ids: Vec::new(),
            };
            live.session.wait_tool(request).await;
        });
    }
}

/// A duration in whole milliseconds, as the task fields carry it.
pub(super) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
