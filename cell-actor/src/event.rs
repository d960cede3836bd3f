//! What observers and terminators of a cell receive (observations), and the errors they may get instead.

use std::time::Duration;

use codemode_protocol::ToolName;
use tokio_util::sync::CancellationToken;

use crate::output::CollectedOutput;

/// The answer to one observation of a cell.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CellEvent {
    /// The time budget ran out, or the cell called `yield_control()`, or the observer's yield signal
    /// fired; the cell keeps running. The output is what was produced since the last observation.
    Yielded {
        /// Output since the previous observation.
        output: CollectedOutput,
    },
    /// (Pending-frontier observation only.) The cell can make no progress until tool calls are
    /// answered, and is frozen until observed again. `pending_tool_call_ids` lists the tool calls it
    /// made since the previous frontier was delivered, in call order.
    Pending {
        /// Output since the previous observation.
        output: CollectedOutput,
        /// The tool calls the cell waits on.
        pending_tool_call_ids: Vec<String>,
    },
    /// The cell finished: successfully, or with the text of its error. `result_buffered_for` is
    /// how long the finished result waited for an observer.
    Completed {
        /// Output since the previous observation.
        output: CollectedOutput,
        /// The error text of a failed cell.
        error_text: Option<String>,
        /// How long the result waited for an observer.
        result_buffered_for: Duration,
    },
    /// The cell was terminated. The output is everything produced before the kill and not yet
    /// observed; `tool_calls` is the kill ledger (kill ledger), in call order.
    Terminated {
        /// Output produced before the kill and not yet observed.
        output: CollectedOutput,
        /// The kill ledger.
        tool_calls: Vec<ToolCallRecord>,
    },
}

impl CellEvent {
    /// The output the event carries.
    pub fn output(&self) -> &CollectedOutput {
        match self {
            CellEvent::Yielded { output }
            | CellEvent::Pending { output, .. }
            | CellEvent::Completed { output, .. }
            | CellEvent::Terminated { output, .. } => output,
        }
    }

    /// The output, taken out of the event.
    pub fn into_output(self) -> CollectedOutput {
        match self {
            CellEvent::Yielded { output }
            | CellEvent::Pending { output, .. }
            | CellEvent::Completed { output, .. }
            | CellEvent::Terminated { output, .. } => output,
        }
    }

    /// Whether the cell has ended with this event.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            CellEvent::Completed { .. } | CellEvent::Terminated { .. }
        )
    }
}

/// One tool call of a terminated cell, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolCallRecord {
    /// The call's id (`tool-N`).
    pub id: String,
    /// The tool called.
    pub name: ToolName,
    /// What became of it.
    pub fate: ToolCallFate,
}

/// What became of a tool call when its cell was terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallFate {
    /// The tool had finished (successfully or not) before the kill.
    Completed,
    /// The tool was running and was cancelled by the kill.
    Cancelled,
    /// The cell asked for it, but the kill came before it was started.
    NotStarted,
}

/// Why an observation or termination got no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CellError {
    #[error(
        "the cell is already being observed; only one observer at a time, so wait for the current \
         observation to return"
    )]
    /// Another observer is watching the cell.
    Busy,
    #[error("the cell is already being terminated; its result goes to whoever terminated it first")]
    /// Another termination already claimed the outcome.
    AlreadyTerminating,
    #[error("the cell has ended and its result was already delivered")]
    /// The cell has ended (or its termination began) and its outcome went elsewhere.
    Closed,
}

/// How an observer watches a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserveMode {
    /// Return after this long (from the cell's start, for the first observation), or earlier if
    /// the cell yields, finishes or is terminated.
    YieldAfter(Duration),
    /// Return when the cell reaches its pending frontier, finishes or is terminated.
    PendingFrontier,
}

/// One observation: a mode, and optionally a signal that ends a time-budget observation early
/// (with `Yielded`) without cancelling the cell.
#[derive(Debug, Clone)]
pub struct Observation {
    /// How the observer watches.
    pub mode: ObserveMode,
    /// Ends a time-budget observation early when cancelled.
    pub yield_signal: Option<CancellationToken>,
}

impl Observation {
    /// Observe for `budget`, then yield.
    pub fn yield_after(budget: Duration) -> Self {
        Observation {
            mode: ObserveMode::YieldAfter(budget),
            yield_signal: None,
        }
    }

    /// Observe until the pending frontier.
    pub fn pending_frontier() -> Self {
        Observation {
            mode: ObserveMode::PendingFrontier,
            yield_signal: None,
        }
    }

    /// This observation, ended early (with `Yielded`) when `signal` is cancelled.
    pub fn with_yield_signal(mut self, signal: CancellationToken) -> Self {
        self.yield_signal = Some(signal);
        self
    }
}

impl From<ObserveMode> for Observation {
    fn from(mode: ObserveMode) -> Self {
        Observation {
            mode,
            yield_signal: None,
        }
    }
}
