//! The CPU watchdog of QuickJS cells: one thread for the whole process that reads the CPU time of
//! each cell thread with a budget, stops a cell past it, and tells the process's hard-stop hook of
//! a cell that is still running a grace period later.
//!
//! QuickJS's interrupt handler ends a cell at its budget as long as the cell runs JavaScript; a
//! built-in that loops in C (`new Array(1e8).fill(0)`) checks no interrupt and runs on. The
//! watchdog marks such a cell stopped, so it ends the moment the built-in returns; only ending its
//! process stops it sooner, so only an engine process sets the hook (an embedder that sets none
//! keeps the cell running until the built-in returns). The CPU time is read from
//! `/proc/self/task/<tid>/stat`, so nothing here needs more than the standard library and `nix`.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use codemode_engine::script::ScriptTerminator;

use crate::runtime::Halt;

/// How often budgets are checked.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// What the hook is told: the cell that did not stop.
pub type HardStopHook = fn(call_id: &str);

struct Hook {
    grace: Duration,
    hook: HardStopHook,
}

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Sets the process's hard-stop hook (only the first call counts): called, on the watchdog's
/// thread, for a cell still running `grace` after its CPU budget ran out. It should end the
/// process.
pub fn set_hard_stop_hook(grace: Duration, hook: HardStopHook) {
    let _ = HOOK.set(Hook { grace, hook });
}

struct Watched {
    tid: i32,
    baseline: Duration,
    budget: Duration,
    halt: Halt,
    exceeded: Arc<AtomicBool>,
    call_id: String,
    exceeded_at: Option<Instant>,
    reported: bool,
}

#[derive(Default)]
struct Watchdog {
    watched: Mutex<HashMap<u64, Watched>>,
    wake: Condvar,
    next_key: AtomicU64,
}

/// A cell thread under the watchdog; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(Ok(watchdog)) = WATCHDOG.get() {
            watchdog
                .watched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&self.0);
        }
    }
}

static WATCHDOG: OnceLock<Result<&'static Watchdog, String>> = OnceLock::new();

fn watchdog() -> Result<&'static Watchdog, String> {
    WATCHDOG
        .get_or_init(|| {
            let watchdog: &'static Watchdog = Box::leak(Box::default());
            std::thread::Builder::new()
                .name("codemode-qjs-watchdog".into())
                .spawn(move || watchdog.run())
                .map(|_| watchdog)
                .map_err(|error| format!("cannot start the QuickJS watchdog thread: {error}"))
        })
        .clone()
}

/// Puts the calling thread's cell under the watchdog: once the thread's CPU time passes
/// `baseline` (its CPU clock when the cell started) by `budget`, the cell is halted and `exceeded`
/// set. Cheap on the cell's path: no `/proc` read, and the watchdog is woken only when it was
/// watching nothing.
pub(crate) fn register(
    baseline: Duration,
    budget: Duration,
    halt: Halt,
    exceeded: Arc<AtomicBool>,
    call_id: String,
) -> Result<Registration, String> {
    let tid = nix::unistd::gettid().as_raw();
    let watchdog = watchdog()?;
    let key = watchdog.next_key.fetch_add(1, Ordering::Relaxed);
    let was_idle = {
        let mut watched = watchdog
            .watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let was_idle = watched.is_empty();
        watched.insert(
            key,
            Watched {
                tid,
                baseline,
                budget,
                halt,
                exceeded,
                call_id,
                exceeded_at: None,
                reported: false,
            },
        );
        was_idle
    };
    if was_idle {
        watchdog.wake.notify_one();
    }
    Ok(Registration(key))
}

impl Watchdog {
    fn run(&self) {
        loop {
            // Each check waits a poll first: one right at a cell's start finds nothing spent, and
            // until then the CPU is left to the starting cell. (The interrupt handler enforces
            // the budget itself to the tick; this catches only built-ins that run on in C.)
            let mut watched = self
                .watched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            while watched.is_empty() {
                watched = self
                    .wake
                    .wait(watched)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            drop(watched);
            std::thread::sleep(POLL_INTERVAL);
            let mut watched = self
                .watched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let mut report = Vec::new();
            for cell in watched.values_mut() {
                let Some(now) = thread_cpu_time(cell.tid) else {
                    continue;
                };
                if now.saturating_sub(cell.baseline) < cell.budget {
                    continue;
                }
                let exceeded_at = *cell.exceeded_at.get_or_insert_with(|| {
                    cell.exceeded.store(true, Ordering::SeqCst);
                    cell.halt.terminate();
                    Instant::now()
                });
                if let Some(hook) = HOOK.get()
                    && !cell.reported
                    && exceeded_at.elapsed() >= hook.grace
                {
                    cell.reported = true;
                    report.push(cell.call_id.clone());
                }
            }
            drop(watched);
            if let Some(hook) = HOOK.get() {
                for call_id in report {
                    (hook.hook)(&call_id);
                }
            }
        }
    }
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
