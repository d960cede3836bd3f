//! Tool providers: where a session's tools come from. In-process Rust functions, downstream MCP
//! servers, and a composite that merges several of them.

mod composite;
mod in_process;
mod mcp;

use std::future::Future;
use std::pin::Pin;

use codemode_protocol::ToolDefinition;
use codemode_session::{ToolInvocation, ToolListError, ToolProvider};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use composite::CompositeTools;
pub use in_process::InProcessTools;
pub use mcp::{McpServerConfig, McpTools, McpTransport, call_result_to_value};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`ToolProvider`] in a form that can sit behind `dyn` (its methods return boxed futures), so a
/// [`CompositeTools`] can hold providers of different types. Every `ToolProvider` is one.
pub trait DynToolProvider: Send + Sync + 'static {
    fn list_tools_boxed(&self) -> BoxFuture<'_, Result<Vec<ToolDefinition>, ToolListError>>;
    fn call_tool_boxed(
        &self,
        call: ToolInvocation,
        cancellation: CancellationToken,
    ) -> BoxFuture<'_, Result<Value, String>>;
}

impl<T: ToolProvider> DynToolProvider for T {
    fn list_tools_boxed(&self) -> BoxFuture<'_, Result<Vec<ToolDefinition>, ToolListError>> {
        Box::pin(self.list_tools())
    }

    fn call_tool_boxed(
        &self,
        call: ToolInvocation,
        cancellation: CancellationToken,
    ) -> BoxFuture<'_, Result<Value, String>> {
        Box::pin(self.call_tool(call, cancellation))
    }
}
