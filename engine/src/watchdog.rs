//! The CPU-time watchdog every engine shares: one thread per engine and process that, every poll
//! interval, reads the CPU clock of each cell thread with a budget, stops the cells that used it
//! up, and tells the process's hard-stop hook of a cell still running a grace period later (an
//! engine process then ends itself: the cell is stuck where its engine cannot stop it).
//!
//! An engine brings what differs: how a cell thread's CPU time is read from another thread (V8's
//! shim reads the thread's POSIX CPU clock, QuickJS's runtime reads `/proc`), how its cell is
//! stopped, how often to look, and where the hard-stop hook lives. A cell thread registers before
//! it runs JavaScript ([`CpuWatchdog::watch`]) and is unregistered when the returned [`Watch`] is
//! dropped, before its runtime goes. Waiting on tools uses no CPU time, so a cell that waits for
//! an hour never trips its budget; a spin loop does, within about one poll of its limit. While it
//! watches nothing the thread sleeps until a cell registers, and a registration wakes it only
//! then: a watchdog that watches any cell polls anyway.
//!
//! Knows nothing of any engine: it sees clocks, stop functions and call ids.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What a watchdog does with a cell that goes on running after it was asked to stop.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HardStopPolicy {
    /// How long a stopped cell may go on before it is reported.
    pub grace: Duration,
    /// Told, on the watchdog's thread, of a cell still running `grace` after its budget ran out
    /// (once per cell), as a CPU-time [`HardStop`](crate::HardStop). It should end the process.
    pub report: crate::HardStopHook,
}

impl HardStopPolicy {
    /// Reports a cell still running `grace` after it was stopped to `report`.
    pub const fn new(grace: Duration, report: crate::HardStopHook) -> Self {
        HardStopPolicy { grace, report }
    }
}

/// A CPU-time watchdog, meant to live in a `static` of the engine that uses it: its thread starts
/// on the first [`watch`](CpuWatchdog::watch) and lives as long as the process.
pub struct CpuWatchdog {
    thread_name: &'static str,
    poll_interval: Duration,
    /// Asked at each poll: the hook may be set after the first cell registered.
    hard_stop: fn() -> Option<HardStopPolicy>,
    started: OnceLock<Result<&'static Shared, std::sync::Arc<std::io::Error>>>,
}

impl std::fmt::Debug for CpuWatchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuWatchdog")
            .field("thread_name", &self.thread_name)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

/// One cell thread under watch.
struct Watched {
    cpu_time: Box<dyn Fn() -> Option<Duration> + Send>,
    /// The thread's CPU time when the cell started: a pre-warmed thread has already used some to
    /// create its runtime, and that is not the cell's.
    baseline: Duration,
    budget: Duration,
    stop: Box<dyn Fn() + Send>,
    exceeded: Arc<AtomicBool>,
    /// The cell's `call_id`, for the hard-stop hook.
    call_id: String,
    /// When the budget ran out and the cell was asked to stop; `None` before that.
    stopped_at: Option<Instant>,
    /// Whether the hard-stop hook was told of this cell.
    reported: bool,
}

#[derive(Default)]
struct Shared {
    watched: Mutex<HashMap<u64, Watched>>,
    /// Wakes the watchdog thread when the first cell registers.
    wake: Condvar,
    next_key: AtomicU64,
}

/// A cell thread under watch; unregisters on drop.
pub struct Watch {
    key: u64,
    shared: &'static Shared,
    exceeded: Arc<AtomicBool>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("exceeded", &self.exceeded())
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// Whether the cell's budget ran out (set by the watchdog, or by whoever else shares the
    /// flag given to [`CpuWatchdog::watch`]).
    pub fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::SeqCst)
    }
}

impl crate::script::CpuWatch for Watch {
    fn exceeded(&self) -> bool {
        Watch::exceeded(self)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let removed = self.shared.watched.lock().remove(&self.key);
        // Dropped outside the lock: the stop function may own anything.
        drop(removed);
    }
}

impl CpuWatchdog {
    /// A watchdog whose thread is called `thread_name`, that checks budgets every
    /// `poll_interval`, and asks `hard_stop` at each check what to do with a cell that did not
    /// stop (`None`: nothing, the cell goes on).
    pub const fn new(
        thread_name: &'static str,
        poll_interval: Duration,
        hard_stop: fn() -> Option<HardStopPolicy>,
    ) -> Self {
        CpuWatchdog {
            thread_name,
            poll_interval,
            hard_stop,
            started: OnceLock::new(),
        }
    }

    /// Puts the calling cell under a CPU budget: once `cpu_time` (the cell thread's CPU time,
    /// readable from another thread) passes `baseline` by `budget`, `exceeded` is set and `stop`
    /// called, once. Fails only when the watchdog's thread cannot be started.
    pub fn watch(
        &'static self,
        cpu_time: impl Fn() -> Option<Duration> + Send + 'static,
        baseline: Duration,
        budget: Duration,
        stop: impl Fn() + Send + 'static,
        exceeded: Arc<AtomicBool>,
        call_id: String,
    ) -> Result<Watch, crate::EngineError> {
        let shared = self.shared().map_err(|error| {
            crate::EngineError::Runtime(format!(
                "cannot start the CPU-time watchdog thread: {error}"
            ))
        })?;
        let key = shared.next_key.fetch_add(1, Ordering::Relaxed);
        let was_idle = {
            let mut watched = shared.watched.lock();
            let was_idle = watched.is_empty();
            watched.insert(
                key,
                Watched {
                    cpu_time: Box::new(cpu_time),
                    baseline,
                    budget,
                    stop: Box::new(stop),
                    exceeded: Arc::clone(&exceeded),
                    call_id,
                    stopped_at: None,
                    reported: false,
                },
            );
            was_idle
        };
        if was_idle {
            shared.wake.notify_one();
        }
        Ok(Watch {
            key,
            shared,
            exceeded,
        })
    }

    /// The state shared with the watchdog's thread, which is started on first use; an error if
    /// the thread could not be started (then every later call fails the same way).
    fn shared(&'static self) -> Result<&'static Shared, std::sync::Arc<std::io::Error>> {
        self.started
            .get_or_init(|| {
                let shared: &'static Shared = Box::leak(Box::default());
                std::thread::Builder::new()
                    .name(self.thread_name.into())
                    .spawn(move || self.run(shared))
                    .map(|_| shared)
                    .map_err(std::sync::Arc::new)
            })
            .clone()
    }

    fn run(&self, shared: &Shared) {
        loop {
            {
                let mut watched = shared.watched.lock();
                while watched.is_empty() {
                    shared.wake.wait(&mut watched);
                }
            }
            // Each check waits a poll first: one right at a cell's start finds nothing spent,
            // and until then the CPU is left to the starting cell.
            std::thread::sleep(self.poll_interval);
            let policy = (self.hard_stop)();
            let now = Instant::now();
            let mut report = Vec::new();
            let mut watched = shared.watched.lock();
            for cell in watched.values_mut() {
                if cell.stopped_at.is_none()
                    && (cell.cpu_time)()
                        .is_some_and(|used| used.saturating_sub(cell.baseline) >= cell.budget)
                {
                    cell.exceeded.store(true, Ordering::SeqCst);
                    (cell.stop)();
                    cell.stopped_at = Some(now);
                }
                // Still registered after the grace period: the stop did not take effect.
                if let (Some(policy), Some(stopped_at)) = (policy, cell.stopped_at)
                    && !cell.reported
                    && now.duration_since(stopped_at) >= policy.grace
                {
                    cell.reported = true;
                    report.push(cell.call_id.clone());
                }
            }
            drop(watched);
            if let Some(policy) = policy {
                for call_id in report {
                    (policy.report)(&crate::HardStop::cpu_time_limit(&call_id));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Call ids the test watchdog's hard-stop policy was told of.
    static REPORTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

    fn record_report(stop: &crate::HardStop) {
        assert_eq!(stop.reason, crate::HardStopReason::CpuTimeLimit);
        REPORTED
            .lock()
            .push(stop.call_id.clone().unwrap_or_default());
    }

    fn reported(call_id: &str) -> usize {
        REPORTED
            .lock()
            .iter()
            .filter(|reported| *reported == call_id)
            .count()
    }

    static WATCHDOG: CpuWatchdog =
        CpuWatchdog::new("test-watchdog", Duration::from_millis(1), || {
            Some(HardStopPolicy::new(
                Duration::from_millis(20),
                record_report,
            ))
        });

    /// A cell under the test watchdog, with a CPU clock the test moves by hand (`None` while
    /// unreadable) and a count of the stops it was asked for.
    struct Cell {
        millis: Arc<Mutex<Option<u64>>>,
        stops: Arc<AtomicUsize>,
        exceeded: Arc<AtomicBool>,
        watch: Watch,
    }

    impl Cell {
        fn watched(clock: Option<u64>, baseline_ms: u64, budget_ms: u64, call_id: &str) -> Cell {
            let millis = Arc::new(Mutex::new(clock));
            let stops = Arc::new(AtomicUsize::new(0));
            let exceeded = Arc::new(AtomicBool::new(false));
            let (read, counted) = (Arc::clone(&millis), Arc::clone(&stops));
            let watch = WATCHDOG
                .watch(
                    move || read.lock().map(Duration::from_millis),
                    Duration::from_millis(baseline_ms),
                    Duration::from_millis(budget_ms),
                    move || {
                        counted.fetch_add(1, Ordering::SeqCst);
                    },
                    Arc::clone(&exceeded),
                    call_id.into(),
                )
                .unwrap();
            Cell {
                millis,
                stops,
                exceeded,
                watch,
            }
        }

        fn spend_until(&self, millis: u64) {
            *self.millis.lock() = Some(millis);
        }

        fn stops(&self) -> usize {
            self.stops.load(Ordering::SeqCst)
        }
    }

    /// Waits (a hang guard, not a timing assertion) until `condition` holds.
    fn eventually(what: &str, condition: impl Fn() -> bool) {
        let started = Instant::now();
        while !condition() {
            assert!(started.elapsed() < Duration::from_secs(30), "hung: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_cell_is_stopped_once_when_its_cpu_time_passes_the_budget_from_its_baseline() {
        // 500 ms were spent before the cell (a warm thread's): only what follows counts.
        let cell = Cell::watched(Some(500), 500, 100, "budget");
        cell.spend_until(590);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(cell.stops(), 0);
        assert!(!cell.watch.exceeded());
        cell.spend_until(600);
        eventually("the cell to be stopped", || cell.stops() == 1);
        assert!(cell.watch.exceeded() && cell.exceeded.load(Ordering::SeqCst));
        cell.spend_until(10_000);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(cell.stops(), 1, "asked to stop once");
    }

    #[test]
    fn a_cell_still_registered_after_the_grace_period_is_reported_once() {
        let cell = Cell::watched(Some(0), 0, 1, "stuck");
        cell.spend_until(5);
        eventually("the stuck cell to be reported", || reported("stuck") == 1);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(reported("stuck"), 1, "reported once");
    }

    #[test]
    fn a_cell_that_stops_within_the_grace_period_is_not_reported() {
        let cell = Cell::watched(Some(0), 0, 1, "honoured");
        cell.spend_until(5);
        eventually("the cell to be stopped", || cell.stops() == 1);
        // The cell ends at once: its watch goes, so nothing is left to report.
        drop(cell.watch);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(reported("honoured"), 0);
    }

    #[test]
    fn a_cell_no_longer_watched_or_whose_clock_cannot_be_read_is_never_stopped() {
        let unwatched = Cell::watched(Some(0), 0, 1, "unwatched");
        let Cell {
            millis,
            stops,
            watch,
            ..
        } = unwatched;
        drop(watch);
        *millis.lock() = Some(1_000);
        let unreadable = Cell::watched(None, 0, 0, "unreadable");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            stops.load(Ordering::SeqCst),
            0,
            "an unwatched cell is never stopped"
        );
        assert_eq!(unreadable.stops(), 0, "nor one whose clock cannot be read");
        assert!(!unreadable.watch.exceeded());
    }
}
