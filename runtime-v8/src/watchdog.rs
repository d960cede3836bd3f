//! The CPU-time watchdog: one thread for the whole process that, every few milliseconds, reads the
//! CPU clock of each cell thread with a budget and terminates the cells that used it up (CPU budget).
//!
//! A cell thread registers itself ([`watch`]) before it runs JavaScript and is unregistered when
//! the returned [`Watch`] is dropped, before its isolate goes away. Waiting uses no CPU time, so a
//! cell that waits on tools for an hour never trips its budget; a spin loop does, within about one
//! polling interval of its limit.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::ffi::{IsolateTerminator, ThreadCpuClock};

/// How often budgets are checked.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

struct Watched {
    clock: ThreadCpuClock,
    /// The thread's CPU time when the cell started: a pre-warmed thread has already used some to
    /// create its isolate, and that is not the cell's.
    baseline: Duration,
    budget: Duration,
    terminator: IsolateTerminator,
    exceeded: Arc<AtomicBool>,
    /// The cell's `call_id`, for the hard-stop hook.
    call_id: String,
    /// When the budget ran out and termination was asked; `None` before that.
    exceeded_at: Option<std::time::Instant>,
    /// Whether the hard-stop hook was told of this cell.
    hard_stopped: bool,
}

#[derive(Default)]
struct Watchdog {
    watched: Mutex<HashMap<u64, Watched>>,
    /// Wakes the watchdog thread when the first cell registers.
    wake: Condvar,
    next_key: AtomicU64,
}

/// A cell thread under watch; unregisters on drop.
pub struct Watch {
    key: u64,
    exceeded: Arc<AtomicBool>,
}

impl Watch {
    /// Whether the watchdog terminated the cell for using up its budget.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::SeqCst)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A Watch exists only if the watchdog started.
        if let Ok(watchdog) = watchdog() {
            watchdog
                .watched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&self.key);
        }
    }
}

/// The process's watchdog, started on first use; an error if its thread could not be started.
fn watchdog() -> Result<&'static Watchdog, String> {
    static WATCHDOG: OnceLock<Result<&'static Watchdog, String>> = OnceLock::new();
    WATCHDOG
        .get_or_init(|| {
            let watchdog: &'static Watchdog = Box::leak(Box::default());
            std::thread::Builder::new()
                .name("codemode-cpu-watchdog".into())
                .spawn(move || watchdog.run())
                .map(|_| watchdog)
                .map_err(|error| format!("cannot start the CPU-time watchdog thread: {error}"))
        })
        .clone()
}

/// Puts the calling thread under a CPU budget: past it, `terminator` stops its JavaScript.
/// Fails when the budget cannot be enforced (no CPU clock, no watchdog thread).
pub(crate) fn watch(
    budget: Duration,
    terminator: IsolateTerminator,
    call_id: String,
) -> Result<Watch, String> {
    let clock = ThreadCpuClock::current().ok_or_else(|| {
        "cannot read the cell thread's CPU clock to enforce its CPU-time limit".to_owned()
    })?;
    let baseline = clock.elapsed().unwrap_or_default();
    let watchdog = watchdog()?;
    let key = watchdog.next_key.fetch_add(1, Ordering::Relaxed);
    let exceeded = Arc::new(AtomicBool::new(false));
    let was_idle = {
        let mut watched = watchdog
            .watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let was_idle = watched.is_empty();
        watched.insert(
            key,
            Watched {
                clock,
                baseline,
                budget,
                terminator,
                exceeded: Arc::clone(&exceeded),
                call_id,
                exceeded_at: None,
                hard_stopped: false,
            },
        );
        was_idle
    };
    // A watchdog that watches any cell polls anyway: waking it costs the starting cell a switch.
    if was_idle {
        watchdog.wake.notify_one();
    }
    Ok(Watch { key, exceeded })
}

impl Watchdog {
    fn run(&self) {
        let mut watched = self
            .watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            if watched.is_empty() {
                while watched.is_empty() {
                    watched = self
                        .wake
                        .wait(watched)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                // A check right at a cell's start finds nothing spent: the first useful one is a
                // poll later, and until then the CPU is left to the starting cell.
                drop(watched);
                std::thread::sleep(POLL_INTERVAL);
                watched = self
                    .watched
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            let now = std::time::Instant::now();
            let grace = crate::hard_stop::cpu_grace();
            for cell in watched.values_mut() {
                let over_budget = cell
                    .clock
                    .elapsed()
                    .is_some_and(|used| used.saturating_sub(cell.baseline) > cell.budget);
                if over_budget && !cell.exceeded.swap(true, Ordering::SeqCst) {
                    cell.terminator.terminate();
                    cell.exceeded_at = Some(now);
                }
                // Still registered after the grace period: the termination did not take effect.
                if let (Some(grace), Some(exceeded_at)) = (grace, cell.exceeded_at)
                    && !cell.hard_stopped
                    && now.duration_since(exceeded_at) >= grace
                {
                    cell.hard_stopped = true;
                    crate::hard_stop::cpu_limit_not_honoured(&cell.call_id);
                }
            }
            drop(watched);
            std::thread::sleep(POLL_INTERVAL);
            watched = self
                .watched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}
