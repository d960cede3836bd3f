//! Tools of a downstream MCP server, through `rmcp`: reached as a stdio child process or over
//! streamable HTTP, or the legacy HTTP+SSE transport (the client half of code mode for any agent).
//!
//! A connection speaks the revision the server does: 2026-07-28 to a server that answers
//! `server/discover` (no `initialize`; each request carries its `_meta`, and over HTTP the
//! `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers), and `initialize` offering
//! 2025-11-25 to an older one (see `lifecycle` and `McpTools::connect`).
//!
//! Each server's tools become tool definitions under the server's namespace (`tools.<ns>__<name>`
//! in a cell), with their descriptions and input and output schemas. The connection is made on
//! first use and kept; a server that dies or drops the connection fails the calls in flight with
//! a clear error, and the next call starts (or reconnects to) it again.
//!
//! What a cell receives from a call, always what the tool's declaration says, as upstream code
//! mode has it: the `CallToolResult` the server sent (`{ content, structuredContent?, isError?,
//! _meta? }`, the content blocks in their MCP JSON form, so that an image block can go straight to
//! `image(...)`), declared as `CallToolResult<T>` with `T` from the tool's output schema (see
//! [`call_result_to_value`]). A result with `isError: true` resolves (the cell reads `isError`);
//! a protocol failure, a dead server or a call past its timeout rejects with an error that says
//! which.
//!
//! Tasks (long-running tools that answer with a task to poll instead of a result) are followed to
//! their end, so a cell's `await` sees the final result either way:
//! - the 2026-07-28 tasks extension (SEP-2663): the client declares it, and a server may answer
//!   any call with a task; it is polled with `tasks/get`, whose final state carries the result;
//! - the 2025-11-25 revision (SEP-1686), where a tool with `execution.taskSupport: "required"`
//!   answers a plain call with `-32601`: the tool is called again with the `task` augmentation
//!   (and so from then on), polled with `tasks/get`, and its result fetched with `tasks/result`.
//!
//! A call that ends early (the cell was terminated, or the call timed out) cancels its task with
//! `tasks/cancel`. A task that asks for input (elicitation or sampling) is cancelled and the call
//! rejects: a cell has no one to ask.
//!
//! What a server asks of the user while a call runs (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`, log messages) goes to the user of the cell that made
//! the call, when that is unambiguous ([`user`]).
//!
//! The parts: [`transport`] (how a server is reached, and how a connection starts),
//! [`connection`] (the kept connection), [`notifications`] (tool-list changes and progress),
//! [`tasks`] (following and cancelling tasks), [`results`] (what a cell receives), and
//! [`provider`] (listing and calling, the `ToolProvider` face), [`user`] (the server's
//! requests of the user), [`sse`] (the legacy transport) and [`oauth`] (authorizing with a
//! remote server).

mod connection;
mod exit;
mod notifications;
pub mod oauth;
mod provider;
mod results;
mod sse;
mod tasks;
mod trace_headers;
mod transport;
mod user;

pub use connection::McpTools;
pub use results::{CallResultError, call_result_to_value};
pub use transport::{McpServerConfig, McpTransport, display_url};
