//! What a session reports: an observation of a cell ([`CellReport`]), the outcome of `wait`
//! ([`WaitOutcome`]), and what it tells its subscribers ([`SessionEvent`]).

use std::time::Duration;

use codemode_cell_actor::CellEvent;
use codemode_protocol::CellId;

use crate::gate::AwaitingApproval;
use crate::in_flight::CallInFlight;

/// What an observation of a cell returned.
#[derive(Debug, Clone, PartialEq)]
pub struct CellReport {
    /// The cell observed.
    pub cell_id: CellId,
    /// What the observation returned.
    pub event: CellEvent,
    /// How long the observation took.
    pub wall_time: Duration,
    /// For a failed cell: where in the source the error points (a code frame), and the closest
    /// tool names; each a paragraph of its own.
    pub error_hints: Vec<String>,
    /// The cell's calls that wait for the user's approval now (a running cell's).
    pub awaiting_approval: Vec<AwaitingApproval>,
    /// A holding `wait` that saw nothing new until its maximum: how long, and what the cell
    /// waits on.
    pub quiet: Option<Quiet>,
}

/// What a quiet observation says: how long nothing came, and the cell's calls still running.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quiet {
    /// How long the observation saw nothing new.
    pub quiet_for: Duration,
    /// The cell's tool calls running now, the oldest first.
    pub calls: Vec<CallInFlight>,
}

/// The result of `wait`: an observation, or no such cell (distinct from any error).
#[derive(Debug, Clone, PartialEq)]
pub enum WaitOutcome {
    /// The cell was observed (or terminated).
    Observed(CellReport),
    /// No cell with this id: never started, or its result was already delivered.
    NotFound {
        /// The id asked for.
        cell_id: String,
    },
}

/// Something a session tells its subscribers.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// A cell finished while nobody was observing it (completion push); `wait` returns its result.
    CellFinished {
        /// The cell.
        cell_id: CellId,
        /// Its error text, if it failed.
        error_text: Option<String>,
    },
    /// A cell called `notify`.
    Notification {
        /// The cell.
        cell_id: CellId,
        /// The request that started it.
        call_id: String,
        /// The message.
        text: String,
    },
}
