//! The cell actor: the tokio task that runs one cell and owns its lifecycle (observations, the runtime thread and the actor, output and rendering).
//!
//! [`start_cell`] starts a cell on any [`codemode_engine::Engine`] and returns a [`CellHandle`],
//! the answer to the first observation, and the actor's task. Through the handle an owner observes
//! the cell (with a time budget, optionally ended early by a yield signal, or to its pending
//! frontier) and terminates it. The actor calls back into its owner through [`CellHost`]: tools,
//! notifications, the completion commit, and `closed`. `CellState` (private) is the single place where the
//! terminal outcome is decided. Output is collected in client or server mode ([`OutputMode`]).
//!
//! This crate never sees V8 or any other engine's types, nor sessions, stores or tool providers:
//! it knows the engine channels and the `CellHost` trait, nothing more.
//!
//! # Recipe: the actor alone
//!
//! `examples/custom_host.rs` runs a cell with a custom [`CellHost`] (tools, notifications, a
//! commit into a map) on a scripted engine, with no V8 and no session:
//! `cargo run -p codemode-cell-actor --example custom_host`. The host's `commit_completion` gets
//! a [`CompletionClaim`] (the cell has already claimed its outcome), saves its writes, and returns
//! [`CompletionClaim::publish`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod actor;
mod event;
mod handle;
mod host;
mod output;
mod state;

pub use actor::{
    CellConfig, CellTask, FailureHandler, ObservationFuture, RUNTIME_ENDED_UNEXPECTEDLY,
    StartedCell, start_cell,
};
pub use event::{CellError, CellEvent, Observation, ObserveMode, ToolCallFate, ToolCallRecord};
pub use handle::CellHandle;
pub use host::{CellHost, CellUsage, ToolError, ToolErrorKind, ToolInvocation};
pub use output::{CollectedOutput, OutputEntry, OutputMode};
pub use state::{CompletionClaim, CompletionCommit};
