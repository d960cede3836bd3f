//! Tool providers: where a session's tools come from. In-process Rust functions, downstream MCP
//! servers, servers that cannot start as configured, and a composite that merges several of them.

mod composite;
mod in_process;
mod mcp;
mod refused;

pub use composite::CompositeTools;
pub use in_process::InProcessTools;
pub use mcp::oauth;
pub use mcp::{
    CallResultError, McpServerConfig, McpTools, McpTransport, call_result_to_value, display_url,
};
pub use refused::RefusedServer;
