//! How a deadline judges a child: by the CPU time the thread running the cell had, not by the
//! wall clock alone. On a busy machine a child that answers late is slow, not hostile: its thread
//! waits for a CPU (or its parent had not read what it sent), so its CPU time barely moves. A
//! thread that had a whole grace period of CPU time and still has not done what it must (stop a
//! cell, say that a cell ended) has its process ended; so does one that takes [`WALL_GRACES`]
//! grace periods of wall time, whatever its CPU (a child that sleeps instead of ending a cell
//! holds its slot no longer than that).
//!
//! The thread is the one the child named for the cell (`ToParent::Thread`): the other cells of
//! the process run on threads of their own, and their work is not this cell's. A child that
//! names another thread only moves its own verdict to the wall clock's; one that names none (a
//! cell stopped before it started) is judged by the wall clock alone.

use std::time::{Duration, Instant};

/// How many grace periods of wall time a child has, at most, whatever CPU time it had.
pub(super) const WALL_GRACES: u32 = 20;

/// How many stop grace periods a child has to say that a cell whose result it sent ended: its
/// thread may first dispose of the cell's isolate (unmapping a heap of up to the cell's limit,
/// which took over 100 ms of CPU time in a debug build), which is work, not a cell going on.
pub(super) const END_GRACES: u32 = 10;

/// The shortest wait before a deadline is judged again (a tenth of the grace period): a child
/// that had almost a grace period of CPU time is not looked at again in a busy loop.
const RECHECK_FRACTION: u32 = 10;

/// What a child had when a deadline was armed, to tell at the deadline whether it had the time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Watch {
    /// When the deadline was armed.
    armed: Instant,
    /// The thread watched, if the child named one.
    thread: Option<u32>,
    /// Its CPU time then (`None`: it could not be read, so only the wall clock judges).
    cpu: Option<Duration>,
    /// The grace period: of CPU time, and a [`WALL_GRACES`]th of the wall time allowed.
    pub(super) grace: Duration,
}

/// What a deadline that passed says about the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The child had the time and did not do it: `cpu` of CPU time (if it could be read) in
    /// `wall` of wall time.
    Overdue {
        cpu: Option<Duration>,
        wall: Duration,
    },
    /// It has not had the time yet: look again then.
    RecheckAt(Instant),
}

impl Watch {
    /// Starts watching thread `thread` of process `pid` for a deadline of `grace`.
    pub(super) fn start(pid: u32, thread: Option<u32>, grace: Duration) -> Watch {
        Watch {
            armed: Instant::now(),
            thread,
            cpu: thread.and_then(|thread| cpu_time(pid, thread)),
            grace,
        }
    }

    /// When the deadline is first judged.
    pub(super) fn first_deadline(&self) -> Instant {
        self.armed + self.grace
    }

    /// Judges process `pid` now.
    pub(super) fn judge(&self, pid: u32) -> Verdict {
        let cpu_now = self.thread.and_then(|thread| cpu_time(pid, thread));
        self.verdict(cpu_now, Instant::now())
    }

    /// Judges a child whose CPU time is `cpu_now` at `now`.
    fn verdict(&self, cpu_now: Option<Duration>, now: Instant) -> Verdict {
        let wall = now.saturating_duration_since(self.armed);
        let used = match (self.cpu, cpu_now) {
            (Some(then), Some(now)) => Some(now.saturating_sub(then)),
            _ => None,
        };
        let latest = self.armed + self.grace * WALL_GRACES;
        if now >= latest || used.is_some_and(|used| used >= self.grace) {
            return Verdict::Overdue { cpu: used, wall };
        }
        // The soonest the child can have used the rest of its grace period of CPU time.
        let rest = used.map_or(self.grace, |used| self.grace - used);
        let next = now + rest.max(self.grace / RECHECK_FRACTION);
        Verdict::RecheckAt(next.min(latest))
    }
}

/// The CPU time thread `thread` of process `pid` has used, if it can be read: the first field of
/// its `schedstat` (nanoseconds on a CPU), else its `stat`'s user and system time (clock ticks).
fn cpu_time(pid: u32, thread: u32) -> Option<Duration> {
    let task = format!("/proc/{pid}/task/{thread}");
    if let Ok(schedstat) = std::fs::read_to_string(format!("{task}/schedstat"))
        && let Some(nanos) = schedstat
            .split_whitespace()
            .next()
            .and_then(|nanos| nanos.parse().ok())
    {
        return Some(Duration::from_nanos(nanos));
    }
    let stat = std::fs::read_to_string(format!("{task}/stat")).ok()?;
    // After the command's closing parenthesis: state is field 3, utime and stime 14 and 15.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|ticks| *ticks > 0)?;
    Some(Duration::from_nanos(
        (user + system).saturating_mul(1_000_000_000) / ticks,
    ))
}

/// `cpu` of CPU time in `wall`, in words for a misbehaviour's reason.
pub(super) fn in_words(cpu: Option<Duration>, wall: Duration) -> String {
    match cpu {
        Some(cpu) => format!(
            "{} ms of wall time, {} ms of them on a CPU",
            wall.as_millis(),
            cpu.as_millis()
        ),
        None => format!("{} ms", wall.as_millis()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(cpu: Option<Duration>) -> (Watch, Instant) {
        let armed = Instant::now();
        let grace = Duration::from_millis(100);
        let thread = Some(1);
        (
            Watch {
                armed,
                thread,
                cpu,
                grace,
            },
            armed,
        )
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_child_that_had_the_cpu_for_a_grace_period_is_overdue() {
        let (watch, armed) = watch(Some(500 * MS));
        assert_eq!(
            watch.verdict(Some(600 * MS), armed + 100 * MS),
            Verdict::Overdue {
                cpu: Some(100 * MS),
                wall: 100 * MS
            }
        );
    }

    #[test]
    fn a_child_that_waited_for_a_cpu_is_given_the_rest_of_its_grace() {
        let (watch, armed) = watch(Some(500 * MS));
        // 30 ms of CPU time in 100 ms: looked at again when it can have had the other 70.
        assert_eq!(
            watch.verdict(Some(530 * MS), armed + 100 * MS),
            Verdict::RecheckAt(armed + 170 * MS)
        );
        // Almost all of it: not sooner than a tenth of the grace period.
        assert_eq!(
            watch.verdict(Some(599 * MS), armed + 100 * MS),
            Verdict::RecheckAt(armed + 110 * MS)
        );
    }

    #[test]
    fn a_child_that_sleeps_is_overdue_after_its_wall_graces() {
        let (watch, armed) = watch(Some(500 * MS));
        assert_eq!(
            watch.verdict(Some(500 * MS), armed + 1990 * MS),
            Verdict::RecheckAt(armed + 2000 * MS)
        );
        assert_eq!(
            watch.verdict(Some(500 * MS), armed + 2000 * MS),
            Verdict::Overdue {
                cpu: Some(Duration::ZERO),
                wall: 2000 * MS
            }
        );
    }

    #[test]
    fn without_its_cpu_time_a_child_is_judged_by_the_wall_clock_alone() {
        let (watch, armed) = watch(None);
        assert_eq!(
            watch.verdict(None, armed + 100 * MS),
            Verdict::RecheckAt(armed + 200 * MS)
        );
        assert!(matches!(
            watch.verdict(None, armed + 2000 * MS),
            Verdict::Overdue { cpu: None, .. }
        ));
    }

    #[test]
    fn the_cpu_time_of_one_thread_grows_with_its_work_only() {
        let pid = std::process::id();
        let this = u32::try_from(nix::unistd::gettid().as_raw()).unwrap();
        let (idle_sender, idle_thread) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let idle = std::thread::spawn(move || {
            idle_sender
                .send(u32::try_from(nix::unistd::gettid().as_raw()).unwrap())
                .unwrap();
            let _ = stopped.recv();
        });
        let idle_thread = idle_thread.recv().unwrap();
        let before = (
            cpu_time(pid, this).expect("readable"),
            cpu_time(pid, idle_thread).unwrap(),
        );
        let mut spin = 0u64;
        let start = Instant::now();
        while start.elapsed() < 50 * MS {
            spin = spin.wrapping_add(1);
        }
        std::hint::black_box(spin);
        let after = (
            cpu_time(pid, this).unwrap(),
            cpu_time(pid, idle_thread).unwrap(),
        );
        stop.send(()).unwrap();
        idle.join().unwrap();
        assert!(after.0 >= before.0 + 10 * MS, "{before:?} -> {after:?}");
        assert!(after.1 < before.1 + 10 * MS, "{before:?} -> {after:?}");
    }
}
