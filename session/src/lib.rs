//! Sessions: what an embedder uses to give a model the `exec` and `wait` tools (sessions, output, the model-facing tools and the extras).
//!
//! A [`Session`] owns its cells (ids `"1"`, `"2"`, …), its stored values and its enabled tools. It
//! sits on three pluggable pieces: an engine (`codemode_engine::Engine`), a [`Store`] for stored
//! values, and a [`ToolProvider`] for tools; `host-adapters` has ready-made stores and providers.
//! For the engine: `codemode_engine_process::ProcessEngine`, which runs cells in sandboxed child
//! processes, on V8 (JIT speed on heavy cells; the official Node 24 binary's V8, reachable only in
//! such processes) or on QuickJS, and is what to give model-written code in a server; or
//! `codemode_runtime_quickjs::QuickJsEngine` in the embedder's own process (no system library, a
//! fresh runtime in a fraction of a millisecond, small memory; an interpreter). Both engines pass one conformance suite, so a session behaves the same on either. The
//! operations (`execute`, `wait`, `terminate`, `execute_to_pending`, `wait_to_pending`,
//! `shutdown`) return [`CellReport`]s; the model-facing layer (`exec_tool`, `wait_tool`, their
//! descriptions) parses pragmas and renders reports as the output contract says, with error hints (actionable errors).
//!
//! This crate knows no concrete engine, store, tool source or transport (no V8, no files, no MCP).
//!
//! # Recipes
//!
//! - A custom [`Store`]: `examples/custom_store.rs` keeps values in a map and logs each commit
//!   (`cargo run -p codemode-session --example custom_store`).
//! - A custom [`ToolProvider`]: `examples/custom_tool_provider.rs` offers two namespaced tools
//!   (`cargo run -p codemode-session --example custom_tool_provider`).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod availability;
mod cell_host;
mod config;
mod digest;
mod discovery;
mod error;
mod gate;
mod hints;
mod ids;
mod in_flight;
mod model;
mod permissions;
mod ports;
mod registry;
mod render;
mod report;
mod session;
mod shared;
mod stored;
mod strip;
mod throw_sites;
mod user;
mod waiting;

pub use availability::Unavailable;
pub use codemode_cell_actor::{
    CellError, CellEvent, CollectedOutput, OutputMode, ToolCallFate, ToolCallRecord, ToolError,
    ToolErrorKind, ToolInvocation,
};
pub use codemode_protocol::{JsonText, Tenant, tools_declaration};
pub use config::{CellActivity, CellActivityHook, SessionConfig, TraceContextHook};
pub use discovery::{ToolsShown, tools_section};
pub use error::SessionError;
pub use gate::{AwaitingApproval, GateDecision};
pub use hints::error_hints;
pub use in_flight::CallInFlight;
pub use model::{ExecOptions, ToolResult};
pub use permissions::{Permissions, Reason, RulesFile, Ruling, ToolPattern, Verdict};
pub use ports::{
    SessionKey, Store, StoreError, StoreErrorKind, ToolCallContext, ToolListError,
    ToolListErrorKind, ToolProgress, ToolProvider,
};
pub use registry::CellTicket;
pub use render::{audio_tokens, fit_output, render_report, render_text, truncate};
pub use report::{CellReport, Quiet, SessionEvent, WaitOutcome};
pub use session::Session;
pub use stored::StoredBytesBudget;
pub use user::{
    APPROVAL_ARGUMENTS_CHARS, Approval, ApprovalRequest, NobodyToAsk, RelayError, RelayedRequest,
    UserChannel,
};
