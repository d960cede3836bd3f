//! Hard stops: a cell that can no longer be stopped from inside its engine (a built-in that runs
//! on in native code past its limit) or an engine that failed ends its whole process. One type
//! for every engine and for the engine-process wire: the engine builds a [`HardStop`], the
//! process's hook ([`HardStopHook`], set only by engine processes) hands it to the parent, and
//! the parent fails the cell with its reason.

use serde::{Deserialize, Serialize};

/// Why a cell had to end its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum HardStopReason {
    /// The cell's heap went past its limit and termination did not take effect.
    HeapLimit,
    /// The cell ran past its CPU-time limit and did not stop within the grace period.
    CpuTimeLimit,
    /// The process could not get memory.
    OutOfMemory,
    /// The engine hit a fatal error.
    Fatal,
}

/// What a process's hard-stop hook is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HardStop {
    /// The `call_id` of the cell that caused it, when known.
    pub call_id: Option<String>,
    /// Why.
    pub reason: HardStopReason,
    /// What happened, in words (the engine's own message where it has one), without the reason,
    /// which whoever renders the stop names.
    pub message: String,
}

impl HardStop {
    /// A hard stop for `reason`, caused by cell `call_id` if known.
    pub fn new(
        call_id: Option<String>,
        reason: HardStopReason,
        message: impl Into<String>,
    ) -> Self {
        HardStop {
            call_id,
            reason,
            message: message.into(),
        }
    }

    /// Cell `call_id` ran on past its CPU-time limit for the grace period.
    pub fn cpu_time_limit(call_id: &str) -> Self {
        HardStop::new(
            Some(call_id.to_owned()),
            HardStopReason::CpuTimeLimit,
            "cpu time limit exceeded",
        )
    }
}

/// A process's hard-stop hook: called on the thread that noticed the stop; it should end the
/// process (an engine process tells its parent, then aborts).
pub type HardStopHook = fn(&HardStop);
