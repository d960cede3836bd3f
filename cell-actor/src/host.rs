//! `CellHost`: what the actor needs from whoever owns the cell (a session, or a test).

use std::future::Future;

use codemode_protocol::{ToolKind, ToolName};
use serde_json::Value;
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
    /// The JSON argument; `None` when the tool was called without one.
    pub input: Option<Value>,
}

/// What the cell actor needs from its owner. Every method may be called concurrently.
pub trait CellHost: Send + Sync + 'static {
    /// Runs a tool. `Ok` resolves the cell's promise with the value; `Err` rejects it with the
    /// text. The token is cancelled when the cell completes or is terminated; the actor also stops
    /// waiting then, so a tool that ignores it only wastes its own work. A panic here rejects the
    /// promise; it never takes down the cell.
    fn invoke_tool(
        &self,
        invocation: ToolInvocation,
        cancellation: CancellationToken,
    ) -> impl Future<Output = Result<Value, String>> + Send;

    /// Delivers a `notify(...)` from the cell. On completion pending notifications are awaited;
    /// on termination they are cancelled.
    fn notify(
        &self,
        call_id: String,
        text: String,
        cancellation: CancellationToken,
    ) -> impl Future<Output = Result<(), String>> + Send;

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

    /// Called last, after the cell's outcome is settled; returns only when nothing can route
    /// requests to the cell any more (the owner has removed it from its registry).
    fn closed(&self) -> impl Future<Output = ()> + Send;
}
