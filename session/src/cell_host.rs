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
    /// When the cell started.
    pub(crate) started: Instant,
    /// The tool calls it made.
    pub(crate) tool_calls: std::sync::atomic::AtomicU64,
    /// How it ended (`completed` or `failed`), once its completion is claimed; a cell closed
    /// without one was terminated.
    pub(crate) ended_as: Mutex<Option<&'static str>>,
}

impl SessionCellHost {
    /// Records how the cell ended on its span (the actor runs in it) and tells the embedder.
    fn ended(&self, outcome: &'static str) {
        let tool_calls = self.tool_calls.load(std::sync::atomic::Ordering::Relaxed);
        let duration = self.started.elapsed();
        let span = tracing::Span::current();
        span.record("codemode.cell.outcome", outcome);
        span.record("codemode.cell.tool_calls", tool_calls);
        span.record("codemode.cell.wall_ms", duration.as_millis() as u64);
        if let Some(hook) = &self.shared.config.on_cell_activity {
            hook(crate::CellActivity::CellEnded {
                session: self.shared.id.clone(),
                cell_id: self.cell_id.clone(),
                tenant: self.shared.config.tenant.clone(),
                outcome,
                duration,
                tool_calls,
            });
        }
    }
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
        self.tool_calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A client span in OpenTelemetry's MCP conventions: a tracing layer that exports traces
        // reads its `otel.*` fields; the rest is what the logs have always shown.
        let span = tracing::info_span!(
            "tool_call",
            otel.name = %format_args!("tools/call {tool}"),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            gen_ai.tool.name = %tool,
            gen_ai.operation.name = "execute_tool",
            codemode.server = invocation.name.namespace.as_deref(),
            codemode.gate.decision = tracing::field::Empty,
            codemode.tool.input_bytes = invocation.input.as_ref().map_or(0, |input| input.len()),
            codemode.tool.input_sha256 = tracing::field::Empty,
            codemode.tool.output_bytes = tracing::field::Empty,
            codemode.tool.output_sha256 = tracing::field::Empty,
            error.type = tracing::field::Empty,
            session = %self.shared.id,
            cell_id = %self.cell_id,
            tool = %tool,
            call_id = %invocation.id,
        );
        let log_content = self.shared.config.log_content;
        let call_id = invocation.id.clone();
        let server = invocation.name.namespace.clone();
        let tool_name = tool.to_string();
        let ended = |decision: crate::GateDecision, outcome: &'static str, duration| {
            if outcome != "ok" {
                tracing::Span::current().record("error.type", outcome);
            }
            if let Some(hook) = &self.shared.config.on_cell_activity {
                hook(crate::CellActivity::ToolCallEnded {
                    session: self.shared.id.clone(),
                    cell_id: self.cell_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool_name.clone(),
                    server: server.clone(),
                    decision,
                    outcome,
                    duration,
                });
            }
        };
        if let Some(input) = &invocation.input
            && !span.is_disabled()
        {
            span.record(
                "codemode.tool.input_sha256",
                crate::digest::sha256_hex(input.as_str()),
            );
        }
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
            let (decision, admitted) = tokio::select! {
                biased;
                () = cancellation.cancelled() => {
                    ended(crate::GateDecision::Unanswered, "cancelled", std::time::Duration::ZERO);
                    return Err(ToolError::new(ToolErrorKind::Cancelled, "the cell ended before the user answered"));
                }
                admitted = admitted => admitted,
            };
            tracing::Span::current().record("codemode.gate.decision", decision.as_str());
            if let Err(refused) = admitted {
                ended(decision, "denied", std::time::Duration::ZERO);
                return Err(refused);
            }
            let _in_flight = self
                .shared
                .calls
                .start(&self.cell_id, &invocation.id, &tool);
            let called = Instant::now();
            // The trace this call belongs to, for the tool's server.
            let trace_context = self
                .shared
                .config
                .trace_context
                .as_ref()
                .map(|hook| hook())
                .unwrap_or_default();
            let result = self
                .shared
                .provider
                .call_tool(
                    invocation,
                    ToolCallContext::new(cancellation.clone())
                        .with_progress(self.tool_progress.clone())
                        .with_user(self.gate.user.clone())
                        .with_trace_context(trace_context),
                )
                .await;
            let duration = called.elapsed();
            let duration_ms = duration.as_millis() as u64;
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
            if let Ok(output) = &result {
                let span = tracing::Span::current();
                span.record("codemode.tool.output_bytes", output.len());
                if !span.is_disabled() {
                    span.record("codemode.tool.output_sha256", crate::digest::sha256_hex(output.as_str()));
                }
            }
            tracing::info!(duration_ms, outcome, "tool call finished");
            ended(decision, outcome, duration);
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
        let outcome = if claim.error_text().is_some() {
            "failed"
        } else {
            "completed"
        };
        *self.ended_as.lock() = Some(outcome);
        self.ended(outcome);
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

    fn usage(&self, usage: codemode_cell_actor::CellUsage) {
        // The actor runs in the cell's span.
        let span = tracing::Span::current();
        span.record("codemode.cell.output_items", usage.output_items);
        span.record("codemode.cell.output_bytes", usage.output_bytes);
        if let Some(cpu_time) = usage.cpu_time {
            span.record("codemode.cell.cpu_us", cpu_time.as_micros() as u64);
        }
    }

    async fn closed(&self) {
        self.shared.registry.lock().cells.remove(&self.cell_id);
        // A cell that closes without having claimed a completion was terminated.
        if self.ended_as.lock().is_none() {
            self.ended("terminated");
        }
        if let Some(hook) = &self.shared.config.on_cell_activity {
            hook(crate::CellActivity::CellClosed {
                session: self.shared.id.clone(),
                cell_id: self.cell_id.clone(),
            });
        }
    }
}
