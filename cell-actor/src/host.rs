//! `CellHost`: what the actor needs from whoever owns the cell (a session, or a test).

use std::future::Future;

use codemode_protocol::{JsonText, ToolKind, ToolName};
use tokio_util::sync::CancellationToken;

use crate::state::{CompletionClaim, CompletionCommit};

/// One tool call of a cell, as the host receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInvocation {
    /// `tool-1`, `tool-2`, … per cell.
    pub id: String,
    /// The tool's name (with its namespace), as the host listed it.
    pub name: ToolName,
    /// What kind of tool the cell called.
    pub kind: ToolKind,
    /// The argument, as the JSON text the cell made of it; `None` when the tool was called
    /// without one. Passed on as text: whoever reads it parses it.
    pub input: Option<JsonText>,
}

impl ToolInvocation {
    /// The argument as a tree, for a tool that reads it (`None` without one); an
    /// invalid-arguments error naming the tool when the text cannot be read.
    pub fn input_value(&self) -> Result<Option<serde_json::Value>, ToolError> {
        self.input
            .as_ref()
            .map(JsonText::to_value)
            .transpose()
            .map_err(|error| {
                ToolError::invalid_arguments(format!(
                    "tools.{}: the argument cannot be read ({error})",
                    self.name.global_name()
                ))
            })
    }
}

/// Why a tool call failed: its message rejects the cell's promise (as an `Error` whose message it
/// is), and its kind says what failed, for logs, for the rendering and for an MCP `isError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ToolError {
    /// What failed.
    pub kind: ToolErrorKind,
    /// What the cell is told: what failed and, where it helps, what to do about it.
    pub message: String,
}

/// What kind of failure a [`ToolError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// No tool has the name that was called.
    NotFound,
    /// The argument is not what the tool takes (refused before the tool ran).
    InvalidArguments,
    /// The tool ran and failed, or its server answered the call with an error.
    Failed,
    /// The tool's server could not be reached, or did not answer in time.
    Unavailable,
    /// The call was cancelled: the cell completed or was terminated.
    Cancelled,
    /// The host's gate refused the call (a rule, the user, or nobody could be asked): nothing
    /// reached the tool.
    Denied,
}

impl ToolError {
    /// An error of `kind` with this message.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
        }
    }

    /// The tool ran and failed.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Failed, message)
    }

    /// The host's gate refused the call; nothing reached the tool.
    pub fn denied(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Denied, message)
    }

    /// No tool has this name.
    pub fn not_found(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::NotFound, message)
    }

    /// The argument is not what the tool takes.
    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::InvalidArguments, message)
    }

    /// The tool's server could not be reached, or did not answer in time.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Unavailable, message)
    }

    /// The call was cancelled.
    pub fn cancelled(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Cancelled, message)
    }
}

/// A tool's own failure, in words (what a handler returns with `Err("...".into())`).
impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::failed(message)
    }
}

/// A tool's own failure, in words.
impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::failed(message)
    }
}

/// What a cell emitted and cost over its life, told to its host as it closes
/// ([`CellHost::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CellUsage {
    /// Output items the cell emitted, including any a budget left out of its output.
    pub output_items: u64,
    /// Their payload bytes (text bytes, image URL bytes).
    pub output_bytes: u64,
    /// CPU time the cell's engine thread spent on it, when the engine measured it (it does for
    /// a cell that ran to its result, not for a terminated one).
    pub cpu_time: Option<std::time::Duration>,
}

/// What the cell actor needs from its owner. Every method may be called concurrently.
pub trait CellHost: Send + Sync + 'static {
    /// Runs a tool. `Ok` resolves the cell's promise with the value (JSON text, handed to the
    /// cell as it is); `Err` rejects it with the
    /// error's message. The token is cancelled when the cell completes or is terminated; the actor also stops
    /// waiting then, so a tool that ignores it only wastes its own work. A panic here rejects the
    /// promise; it never takes down the cell.
    fn invoke_tool(
        &self,
        invocation: ToolInvocation,
        cancellation: CancellationToken,
    ) -> impl Future<Output = Result<JsonText, ToolError>> + Send;

    /// Delivers a `notify(...)` from the cell. On completion pending notifications are awaited;
    /// on termination they are cancelled. Notifications are best effort: one the host cannot
    /// deliver is the host's to log, and changes nothing for the cell.
    fn notify(
        &self,
        call_id: String,
        text: String,
        cancellation: CancellationToken,
    ) -> impl Future<Output = ()> + Send;

    /// Commits a completed cell. The cell has already claimed its outcome (a terminated cell
    /// never gets here), and no lock is held: the host may take as long as its store needs. It
    /// saves [`CompletionClaim::stored_value_writes`], then returns
    /// [`CompletionClaim::publish`] (or [`CompletionClaim::publish_with_commit_failure`] when
    /// the save failed): the only way to make the [`CompletionCommit`] it must return. Observers
    /// and a terminator that arrive meanwhile get the completion once it is published.
    fn commit_completion(
        &self,
        claim: CompletionClaim,
    ) -> impl Future<Output = CompletionCommit> + Send;

    /// Called when a completion was committed but no observer took it: the cell finished in the
    /// background and its result waits. A session uses this to push a notice (completion push).
    fn completed_unobserved(&self) {}

    /// Called once as the cell closes, just before [`CellHost::closed`]: what it emitted and
    /// what it cost, for the host's telemetry. Nothing depends on it; the default ignores it.
    fn usage(&self, usage: CellUsage) {
        let _ = usage;
    }

    /// Called last, after the cell's outcome is settled; returns only when nothing can route
    /// requests to the cell any more (the owner has removed it from its registry).
    fn closed(&self) -> impl Future<Output = ()> + Send;
}
