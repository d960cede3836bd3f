//! The host of one cell of a session ([`SessionCellHost`]): it runs the cell's tool calls through
//! the session's provider, publishes its notifications and tool progress, commits its stored
//! values in order when it completes, and takes it out of the registry when it closes.
//!
//! The commit of a completed cell's stored values runs with its outcome already claimed: it awaits
//! `Store::commit` holding only the session's commit-order lock (an async mutex that only other
//! commits wait for, so the store and the in-memory values see commits in the same order), charges
//! the session's cap and the budgets it shares before the store is asked, merges the writes into
//! the values, then publishes the claim; a failed commit gives the charge back and the cell's
//! error says the values were not saved.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Instant;

use codemode_cell_actor::{
    CellHost, CompletionClaim, CompletionCommit, ToolError, ToolErrorKind, ToolInvocation,
};
use codemode_protocol::{CellId, JsonText};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::gate::CellGate;
use crate::ports::{ToolCallContext, ToolProgress};
use crate::report::SessionEvent;
use crate::shared::Shared;

/// A cell's tool progress: published as the cell's notifications, which name the request that
/// started it, so its watchers hear a tool's progress as they hear `notify(...)`.
pub(crate) fn cell_tool_progress(
    shared: &Arc<Shared>,
    cell_id: &CellId,
    call_id: &str,
) -> ToolProgress {
    let events = shared.events.clone();
    let (cell_id, call_id) = (cell_id.clone(), call_id.to_owned());
    ToolProgress::new(move |text| {
        let _ = events.send(SessionEvent::Notification {
            cell_id: cell_id.clone(),
            call_id: call_id.clone(),
            text,
        });
    })
}

/// The host of one cell of a session.
pub(crate) struct SessionCellHost {
    pub(crate) shared: Arc<Shared>,
    pub(crate) cell_id: CellId,
    /// Where the cell's tools report progress (made once per cell, shared by its calls).
    pub(crate) tool_progress: ToolProgress,
    /// The error text of the cell's completion, kept for the completion notice.
    pub(crate) error_text: Mutex<Option<Option<String>>>,
    /// Who the gate asks about this cell's calls, and the writes it made.
    pub(crate) gate: CellGate,
}

impl CellHost for SessionCellHost {
    async fn invoke_tool(
        &self,
        invocation: ToolInvocation,
        cancellation: CancellationToken,
    ) -> Result<JsonText, ToolError> {
        let tool = invocation.name.global_name();
        if let Some(hook) = &self.shared.config.on_cell_activity {
            hook(crate::CellActivity::ToolCallStarted {
                session: self.shared.id.clone(),
                cell_id: self.cell_id.clone(),
                call_id: invocation.id.clone(),
                tool: tool.to_string(),
            });
        }
        let span = tracing::info_span!(
            "tool_call",
            session = %self.shared.id,
            cell_id = %self.cell_id,
            tool = %tool,
            call_id = %invocation.id,
        );
        let log_content = self.shared.config.log_content;
        async move {
            if log_content {
                tracing::debug!(input = ?invocation.input, "tool call input");
            }
            // The one gate: nothing is dispatched without its ruling.
            // What the tool says of itself, as last listed (nothing, if it is no longer listed).
            let annotations = self
                .shared
                .tools
                .lock()
                .tools
                .iter()
                .find(|listed| listed.name == invocation.name)
                .and_then(|listed| listed.annotations);
            let admitted = self.shared.gate.admit(
                &self.shared.id,
                &self.cell_id,
                &self.gate,
                &invocation,
                &tool,
                annotations,
            );
            // A cell that ends while its call waits for the user stops waiting.
            tokio::select! {
                biased;
                () = cancellation.cancelled() => {
                    return Err(ToolError::new(ToolErrorKind::Cancelled, "the cell ended before the user answered"));
                }
                admitted = admitted => admitted?,
            }
            let _in_flight = self
                .shared
                .calls
                .start(&self.cell_id, &invocation.id, &tool);
            let began = Instant::now();
            let result = self
                .shared
                .provider
                .call_tool(
                    invocation,
                    ToolCallContext::new(cancellation.clone())
                        .with_progress(self.tool_progress.clone())
                        .with_user(self.gate.user.clone()),
                )
                .await;
            let duration_ms = began.elapsed().as_millis() as u64;
            let outcome = match (&result, cancellation.is_cancelled()) {
                (_, true) => "cancelled",
                (Ok(_), false) => "ok",
                (Err(error), false) => match error.kind {
                    ToolErrorKind::NotFound => "not found",
                    ToolErrorKind::InvalidArguments => "invalid arguments",
                    ToolErrorKind::Unavailable => "unavailable",
                    ToolErrorKind::Cancelled => "cancelled",
                    ToolErrorKind::Denied => "denied",
                    _ => "failed",
                },
            };
            tracing::info!(duration_ms, outcome, "tool call finished");
            if log_content {
                tracing::debug!(result = ?result, "tool call result");
            }
            result
        }
        .instrument(span)
        .await
    }

    async fn notify(&self, call_id: String, text: String, _cancellation: CancellationToken) {
        if self.shared.config.log_content {
            tracing::debug!(cell_id = %self.cell_id, text = %text, "notification");
        }
        // No subscriber is not an error: notifications are best effort.
        let _ = self.shared.events.send(SessionEvent::Notification {
            cell_id: self.cell_id.clone(),
            call_id,
            text,
        });
    }

    async fn commit_completion(&self, mut claim: CompletionClaim) -> CompletionCommit {
        let shared = &self.shared;
        *self.error_text.lock() = Some(claim.error_text().map(str::to_owned));
        let writes = claim.take_stored_value_writes();
        if writes.is_empty() {
            return claim.publish();
        }
        // The outcome is already claimed: no lock of the session or the cell is held while the
        // store works, only the commit order (which nothing but other commits waits for).
        let _order = shared.commit_order.lock().await;
        // Only commits change the values, and they run one at a time: what is charged here is
        // what is applied below.
        let charged = shared
            .values
            .lock()
            .charge(&writes, shared.config.max_stored_bytes);
        let committed = match charged {
            Err(refused) => Err(refused),
            Ok(charge) => match shared.store.commit(&shared.key, &writes).await {
                Ok(()) => Ok((charge, writes)),
                Err(error) => {
                    tracing::error!(session = %shared.id, cell_id = %self.cell_id, %error, "failed to commit stored values");
                    Err(error)
                }
            },
        };
        match committed {
            Ok((charge, writes)) => {
                shared.values.lock().apply(writes, charge);
                claim.publish()
            }
            Err(error) => {
                let note = format!("the cell's stored values could not be saved: {error}");
                let mut error_text = self.error_text.lock();
                if let Some(text) = error_text.as_mut() {
                    *text = Some(match text.take() {
                        Some(existing) => format!("{existing}\n{note}"),
                        None => note.clone(),
                    });
                }
                drop(error_text);
                claim.publish_with_commit_failure(&note)
            }
        }
    }

    fn completed_unobserved(&self) {
        let error_text = self.error_text.lock().take().flatten();
        tracing::info!(session = %self.shared.id, cell_id = %self.cell_id, "cell finished in the background");
        let _ = self.shared.events.send(SessionEvent::CellFinished {
            cell_id: self.cell_id.clone(),
            error_text,
        });
    }

    async fn closed(&self) {
        self.shared.registry.lock().cells.remove(&self.cell_id);
        if let Some(hook) = &self.shared.config.on_cell_activity {
            hook(crate::CellActivity::CellClosed {
                session: self.shared.id.clone(),
                cell_id: self.cell_id.clone(),
            });
        }
    }
}
