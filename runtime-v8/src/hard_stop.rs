//! Hard stops: what a process that hosts V8 cells is told when a cell can no longer be stopped
//! from inside V8, so that it can end the whole process (an engine process does; an embedder
//! running cells in its own process sets no hook and keeps V8's own behaviour).
//!
//! Three cases reach the hook, each on the thread that noticed it:
//! - V8 hit a fatal error (a failed check, the process out of memory): V8 ends the process as soon
//!   as the hook returns;
//! - a cell's heap reached its limit again after termination was asked (a long built-in such as
//!   `Array.prototype.fill` never reaches the interrupt check where termination takes effect);
//! - a cell went on running for the grace period after the CPU-time watchdog asked it to stop.
//!
//! The cell is named by its `call_id` (the runtime thread keeps it in a thread-local while the
//! cell runs; the watchdog keeps it with the budget), so a host running several cells per process
//! can tell which one it was.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::Duration;

use crate::ffi::{self, FatalKind};

pub use codemode_engine::{HardStop, HardStopHook, HardStopReason};

struct Hook {
    grace: Duration,
    hook: HardStopHook,
}

static HOOK: OnceLock<Hook> = OnceLock::new();

thread_local! {
    /// The `call_id` of the cell this runtime thread runs now.
    static CURRENT_CELL: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Sets the process's hard-stop hook (only the first call counts). `grace` is how long a cell
/// past its CPU-time limit may go on before the hook is called. The hook should end the process:
/// for V8's fatal errors V8 ends it anyway once the hook returns; in the other cases a hook that
/// returns leaves the cell running, as without a hook.
pub fn set_hard_stop_hook(grace: Duration, hook: HardStopHook) {
    if HOOK.set(Hook { grace, hook }).is_ok() {
        ffi::set_fatal_hook(on_fatal);
    }
}

/// The grace period after a CPU-time termination, when a hook is set.
pub(crate) fn cpu_grace() -> Option<Duration> {
    HOOK.get().map(|hook| hook.grace)
}

/// Tells the hook of a cell that did not stop within the grace period of its CPU limit.
pub(crate) fn cpu_limit_not_honoured(stop: &HardStop) {
    if let Some(hook) = HOOK.get() {
        (hook.hook)(stop);
    }
}

/// Marks the calling runtime thread as running the cell `call_id` until the guard is dropped.
pub(crate) fn running(call_id: &str) -> RunningCell {
    CURRENT_CELL.with(|cell| *cell.borrow_mut() = Some(call_id.to_owned()));
    RunningCell(())
}

/// Clears the running cell of its thread on drop.
#[derive(Debug)]
pub struct RunningCell(());

impl Drop for RunningCell {
    fn drop(&mut self) {
        let _ = CURRENT_CELL.try_with(|cell| cell.borrow_mut().take());
    }
}

fn on_fatal(kind: FatalKind, message: &str) {
    let Some(hook) = HOOK.get() else {
        return;
    };
    let call_id = CURRENT_CELL
        .try_with(|cell| cell.try_borrow().ok().and_then(|cell| cell.clone()))
        .ok()
        .flatten();
    let stop = match kind {
        FatalKind::HeapLimit => HardStop::new(call_id, HardStopReason::HeapLimit, message),
        FatalKind::OutOfMemory => HardStop::new(call_id, HardStopReason::OutOfMemory, message),
        FatalKind::Error => HardStop::new(
            call_id,
            HardStopReason::Fatal,
            format!("V8 fatal error: {message}"),
        ),
    };
    (hook.hook)(&stop);
}
