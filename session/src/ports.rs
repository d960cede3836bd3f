//! The two traits an embedder (or `host-adapters`) implements behind a session: where stored
//! values live ([`Store`]) and where tools come from ([`ToolProvider`]).

use std::collections::HashMap;
use std::future::Future;

use codemode_cell_actor::ToolInvocation;
use codemode_protocol::ToolDefinition;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A store failed; the message says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    pub message: String,
}

impl StoreError {
    pub fn new(message: impl Into<String>) -> Self {
        StoreError {
            message: message.into(),
        }
    }
}

/// Where a session's stored values live.
pub trait Store: Send + Sync + 'static {
    /// The stored values of `session`; a session never seen has none.
    fn load(&self, session: &str) -> Result<HashMap<String, Value>, StoreError>;

    /// Merges one completed cell's writes into `session`'s values by key, all or none.
    ///
    /// Called inside the cell's outcome claim, so that a cell that lost to termination never
    /// commits: it must not wait on anything that might wait on the session. Blocking briefly (a
    /// file store's write and fsync) is expected.
    fn commit(&self, session: &str, writes: &HashMap<String, Value>) -> Result<(), StoreError>;
}

/// Listing the tools failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolListError {
    pub message: String,
}

/// Where a session's tools come from.
pub trait ToolProvider: Send + Sync + 'static {
    /// The tools cells may call; listed once, when the session opens.
    fn list_tools(&self)
    -> impl Future<Output = Result<Vec<ToolDefinition>, ToolListError>> + Send;

    /// Calls a tool. `Ok` resolves the cell's promise with the value, `Err` rejects it with the
    /// text. Stop when `cancellation` fires: the cell completed or was terminated.
    fn call_tool(
        &self,
        call: ToolInvocation,
        cancellation: CancellationToken,
    ) -> impl Future<Output = Result<Value, String>> + Send;
}
