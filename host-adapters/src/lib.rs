//! What plugs in behind a codemode session (sessions, durable sessions, code mode for any agent): stores for stored values
//! ([`MemoryStore`], the embedded default, and [`FileStore`], durable across restarts) and tool
//! providers ([`InProcessTools`] for Rust functions, [`McpTools`] for downstream MCP servers over
//! stdio or streamable HTTP, [`CompositeTools`] to merge them).
//!
//! This crate implements the session's `Store` and `ToolProvider` traits and nothing of the
//! session itself: it knows no engine and no cell.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "postgres")]
mod cluster;
#[cfg(feature = "demo-server")]
pub mod demo_server;
mod store;
mod tools;

#[cfg(feature = "postgres")]
pub use cluster::{JournalBatch, PostgresCluster, Replica};
pub use store::{FORMAT_VERSION, FileStore, MemoryStore};
#[cfg(feature = "postgres")]
pub use store::{PostgresStore, SCHEMA_VERSION, is_database_url};
pub use tools::{
    CallResultError, CompositeTools, InProcessTools, McpServerConfig, McpTools, McpTransport,
    RefusedServer, call_result_to_value, display_url, oauth,
};
