//! The pluggable engine layer: how a cell's JavaScript engine is started, and how its runtime thread
//! talks to the cell actor (the runtime thread and the actor).
//!
//! An [`Engine`] starts one cell on its own OS thread and hands back [`EngineHandles`]: a command
//! sender, a control sender and a [`TerminateHandle`]. The thread reports [`RuntimeEvent`]s through
//! an [`EventSender`]. The rules of the globals that do not depend on the engine (how output items
//! are normalised, what may be stored, what a notification must contain, how timers are numbered)
//! live in [`globals`] and [`timers`], so that every engine behaves the same.
//!
//! This crate names no concrete engine and holds no engine types: it must not know about V8.
//!
//! # Recipe: an engine of your own
//!
//! `examples/toy_engine.rs` implements [`Engine`] for a toy line-by-line language: a thread per
//! cell, `Started` first, `Result` last unless terminated, tool answers read from the command
//! channel, and a [`TerminateHandle`]: `cargo run -p codemode-engine --example toy_engine`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod channel;
mod engine;
mod error;
pub mod globals;
mod handles;
mod hard_stop;
pub mod lane;
pub mod script;
mod start;
mod stats;
pub mod timers;
pub mod watchdog;

pub use engine::Engine;
pub use error::EngineError;
pub use handles::{EngineHandles, Terminate, TerminateHandle};
pub use start::{
    CellLimits, CellStart, PendingMode, check_heap_limit, cpu_time_limit_error, heap_limit_error,
    out_of_memory_error,
};
pub use stats::EngineStats;

pub use channel::{
    CommandSender, EventReceiver, EventSendError, EventSender, ForwardEventFn, RuntimeCommand,
    RuntimeControl, RuntimeEvent, event_channel,
};
pub use hard_stop::{HardStop, HardStopHook, HardStopReason};
