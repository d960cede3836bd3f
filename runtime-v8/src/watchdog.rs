//! The CPU-time watchdog of V8 cells: the engines' shared [`CpuWatchdog`] reading each cell
//! thread's POSIX CPU clock through the shim, stopping a cell by terminating its isolate, and
//! telling the process's hard-stop hook (see [`crate::hard_stop`]) of a cell that went on running
//! for the grace period after it was stopped.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use codemode_engine::watchdog::{CpuWatchdog, HardStopPolicy, Watch};

use crate::ffi::{IsolateTerminator, ThreadCpuClock};

/// Checks every 5 ms: V8 has no CPU budget of its own, so this is what enforces it.
static WATCHDOG: CpuWatchdog =
    CpuWatchdog::new("codemode-cpu-watchdog", Duration::from_millis(5), || {
        crate::hard_stop::cpu_grace()
            .map(|grace| HardStopPolicy::new(grace, crate::hard_stop::cpu_limit_not_honoured))
    });

/// Puts the calling thread under a CPU budget: past it, `terminator` stops its JavaScript.
/// Fails when the budget cannot be enforced (no CPU clock, no watchdog thread).
pub(crate) fn watch(
    budget: Duration,
    terminator: IsolateTerminator,
    call_id: String,
) -> Result<Watch, codemode_engine::EngineError> {
    let clock = ThreadCpuClock::current().ok_or_else(|| {
        codemode_engine::EngineError::Runtime(
            "cannot read the cell thread's CPU clock to enforce its CPU-time limit".to_owned(),
        )
    })?;
    let baseline = clock.elapsed().unwrap_or_default();
    WATCHDOG.watch(
        move || clock.elapsed(),
        baseline,
        budget,
        move || terminator.terminate(),
        Arc::new(AtomicBool::new(false)),
        call_id,
    )
}
