//! Grace kills: a cell asked to stop that has not ended by its deadline, a start the child has
//! not taken up, or a cell whose end the child has not said, has its process ended; the
//! deadlines of one pool are watched by one thread, woken only for a deadline earlier than the
//! one it sleeps until. A stop's and an end's deadline are judged by the CPU time the child had
//! (`verdict`): a child that has not had its grace period of CPU time is looked at again later.

use parking_lot::{Condvar, Mutex};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::verdict::Watch;
use crate::wire::CellNumber;

/// What a deadline that passed does to the process it was armed for.
pub(super) trait Overdue: Send + Sync {
    /// Cell `cell`, asked to stop, has not stopped by its deadline: its process is killed if
    /// the child had the time (`watch`), else the deadline is judged again at the time returned.
    fn stop_overdue(&self, cell: CellNumber, watch: &Watch) -> Option<Instant>;
    /// The child did not take cell `cell`'s start up within `deadline`.
    fn start_overdue(&self, cell: CellNumber, deadline: Duration);
    /// The child has not said cell `cell` ended by the deadline after its last event: the cell's
    /// lane task, once it has read what the child sent, judges it.
    fn end_overdue(&self, cell: CellNumber);
}

/// What a deadline of [`GraceKills`] waits for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Deadline {
    /// The cell, asked to stop, to end (else its process is killed, once the child had the
    /// time).
    Stop(Watch),
    /// The child to take the cell's start up, within this stall deadline (else it stopped
    /// reading).
    Start(Duration),
    /// The child to say that the cell, whose last event it sent, ended (else it keeps the cell
    /// going where no termination reaches it); judged by the cell's lane task.
    End,
}

/// The grace kills of one pool, on one thread: a cell asked to stop that has not ended by its
/// deadline has its process killed. The thread starts with the first termination and ends with
/// the pool.
#[derive(Debug, Default)]
pub(super) struct GraceKills {
    pub(super) due: Mutex<DueKills>,
    pub(super) wake: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct DueKills {
    pub(super) kills: Vec<(Instant, Weak<dyn Overdue>, CellNumber, Deadline)>,
    pub(super) watching: bool,
    /// Until when the watching thread sleeps, if it does: a deadline armed after that one need
    /// not wake it (every completed cell arms one, so most need not).
    pub(super) sleeping: Sleeping,
    pub(super) closed: bool,
}

/// What the watching thread of [`GraceKills`] does.
#[derive(Debug, Default, Clone, Copy)]
pub(super) enum Sleeping {
    /// It looks at the deadlines before it sleeps again.
    #[default]
    Awake,
    /// Until the earliest deadline.
    Until(Instant),
    /// Until a deadline is armed (there is none).
    Untimed,
}

impl GraceKills {
    /// Ends `process` at `deadline` unless cell `cell` has done what `what` waits for by then;
    /// `false` if no thread can watch the deadline.
    pub(super) fn arm(
        self: &Arc<Self>,
        deadline: Instant,
        process: Weak<dyn Overdue>,
        cell: CellNumber,
        what: Deadline,
    ) -> bool {
        let mut due = self.due.lock();
        due.kills.push((deadline, process, cell, what));
        if !due.watching {
            let kills = Arc::clone(self);
            let started = std::thread::Builder::new()
                .name("codemode-engine-grace".into())
                .spawn(move || kills.watch());
            if started.is_err() {
                due.kills.pop();
                return false;
            }
            due.watching = true;
        }
        let wake = match due.sleeping {
            Sleeping::Awake => false,
            Sleeping::Until(earliest) => deadline < earliest,
            Sleeping::Untimed => true,
        };
        drop(due);
        if wake {
            self.wake.notify_one();
        }
        true
    }

    pub(super) fn watch(&self) {
        let mut due = self.due.lock();
        loop {
            due.sleeping = Sleeping::Awake;
            if due.closed {
                return;
            }
            let now = Instant::now();
            let (expired, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut due.kills)
                .into_iter()
                .partition(|(deadline, _, _, _)| *deadline <= now);
            due.kills = waiting;
            if !expired.is_empty() {
                drop(due);
                let mut again = Vec::new();
                for (_, weak, cell, what) in expired {
                    let Some(process) = weak.upgrade() else {
                        continue;
                    };
                    match what {
                        Deadline::Stop(watch) => {
                            if let Some(at) = process.stop_overdue(cell, &watch) {
                                again.push((at, weak, cell, what));
                            }
                        }
                        Deadline::Start(deadline) => process.start_overdue(cell, deadline),
                        Deadline::End => process.end_overdue(cell),
                    }
                }
                due = self.due.lock();
                due.kills.extend(again);
                continue;
            }
            let earliest = due.kills.iter().map(|(deadline, _, _, _)| *deadline).min();
            due.sleeping = earliest.map_or(Sleeping::Untimed, Sleeping::Until);
            match earliest {
                Some(next) => {
                    self.wake
                        .wait_for(&mut due, next.saturating_duration_since(now));
                }
                None => self.wake.wait(&mut due),
            }
        }
    }

    /// Ends the thread (the pool is gone, and its processes with it).
    pub(super) fn close(&self) {
        self.due.lock().closed = true;
        self.wake.notify_one();
    }
}
