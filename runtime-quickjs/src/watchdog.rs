//! The CPU watchdog of QuickJS cells: the engines' shared [`CpuWatchdog`] with what is QuickJS's
//! own, the clock it reads, how it stops a cell, and the process's hard-stop hook, told of a cell
//! that is still running a grace period later.
//!
//! QuickJS's interrupt handler ends a cell at its budget as long as the cell runs JavaScript; a
//! built-in that loops in C (`new Array(1e8).fill(0)`) checks no interrupt and runs on. The
//! watchdog marks such a cell stopped, so it ends the moment the built-in returns; only ending its
//! process stops it sooner, so only an engine process sets the hook (an embedder that sets none
//! keeps the cell running until the built-in returns). The CPU time is read from
//! `/proc/self/task/<tid>/stat`, so nothing here needs more than the standard library and `nix`.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use codemode_engine::watchdog::{CpuWatchdog, HardStopPolicy, Watch};

pub use codemode_engine::{HardStop, HardStopHook, HardStopReason};

static HOOK: OnceLock<HardStopPolicy> = OnceLock::new();

/// Sets the process's hard-stop hook (only the first call counts): called, on the watchdog's
/// thread, for a cell still running `grace` after its CPU budget ran out. It should end the
/// process.
pub fn set_hard_stop_hook(grace: Duration, hook: HardStopHook) {
    let _ = HOOK.set(HardStopPolicy::new(grace, hook));
}

/// Checks every 20 ms: the interrupt handler enforces the budget itself to the tick; this catches
/// only built-ins that run on in C.
static WATCHDOG: CpuWatchdog =
    CpuWatchdog::new("codemode-qjs-watchdog", Duration::from_millis(20), || {
        HOOK.get().copied()
    });

/// Puts the calling thread's cell under the watchdog: once the thread's CPU time passes
/// `baseline` (its CPU clock when the cell started) by `budget`, `halt` stops the cell and
/// `exceeded` is set. Cheap on the cell's path: no `/proc` read, and the watchdog is woken only when it was
/// watching nothing.
pub(crate) fn register(
    baseline: Duration,
    budget: Duration,
    halt: impl Fn() + Send + 'static,
    exceeded: Arc<AtomicBool>,
    call_id: String,
) -> Result<Watch, codemode_engine::EngineError> {
    let tid = nix::unistd::gettid().as_raw();
    WATCHDOG.watch(
        move || thread_cpu_time(tid),
        baseline,
        budget,
        halt,
        exceeded,
        call_id,
    )
}

/// The CPU time (user and system) thread `tid` of this process has used, from `/proc`: whole
/// clock ticks (the kernel truncates its precise figure), so at most a tick below the thread's
/// CPU clock.
fn thread_cpu_time(tid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces): state is field 3,
    // utime field 14 and stime field 15.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100);
    Some(Duration::from_millis(
        (utime + stime).saturating_mul(1000) / ticks_per_second,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_spinning_thread_shows_cpu_time_in_proc() {
        let tid = nix::unistd::gettid().as_raw();
        let before = thread_cpu_time(tid).expect("this thread's stat");
        let started = Instant::now();
        let mut spin = 0u64;
        while started.elapsed() < Duration::from_millis(100) {
            spin = spin.wrapping_add(1);
        }
        std::hint::black_box(spin);
        let after = thread_cpu_time(tid).expect("this thread's stat");
        assert!(after > before, "{before:?} then {after:?}");
    }
}
