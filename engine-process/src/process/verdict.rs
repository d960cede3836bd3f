//! How a deadline judges a child: by the CPU time the child had, not by the wall clock alone. On
//! a busy machine a child that answers late is slow, not hostile: it waits for a CPU (or its
//! parent had not read what it sent), so its CPU time barely moves. A child that had a whole grace
//! period of CPU time and still has not done what it must (stop a cell, say that a cell ended) is
//! ended; so is one that takes [`WALL_GRACES`] grace periods of wall time, whatever its CPU (a
//! child that sleeps instead of ending a cell holds its slot no longer than that).

use std::time::{Duration, Instant};

/// How many grace periods of wall time a child has, at most, whatever CPU time it had.
pub(super) const WALL_GRACES: u32 = 20;

/// The shortest wait before a deadline is judged again (a tenth of the grace period): a child
/// that had almost a grace period of CPU time is not looked at again in a busy loop.
const RECHECK_FRACTION: u32 = 10;

/// What a child had when a deadline was armed, to tell at the deadline whether it had the time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Watch {
    /// When the deadline was armed.
    armed: Instant,
    /// The child's CPU time then (`None`: it could not be read, so only the wall clock judges).
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
    /// Starts watching process `pid` for a deadline of `grace`.
    pub(super) fn start(pid: u32, grace: Duration) -> Watch {
        Watch {
            armed: Instant::now(),
            cpu: cpu_time(pid),
            grace,
        }
    }

    /// When the deadline is first judged.
    pub(super) fn first_deadline(&self) -> Instant {
        self.armed + self.grace
    }

    /// Judges process `pid` now.
    pub(super) fn judge(&self, pid: u32) -> Verdict {
        self.verdict(cpu_time(pid), Instant::now())
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

/// The CPU time process `pid` has used, all its threads, if it can be read.
fn cpu_time(pid: u32) -> Option<Duration> {
    use nix::time::{ClockId, clock_gettime};
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?);
    let clock = ClockId::pid_cpu_clock_id(pid).ok()?;
    let time = clock_gettime(clock).ok()?;
    Some(Duration::from(time))
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
        (Watch { armed, cpu, grace }, armed)
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
    fn the_cpu_time_of_this_process_can_be_read_and_grows() {
        let before = cpu_time(std::process::id()).expect("readable");
        let mut spin = 0u64;
        let start = Instant::now();
        while start.elapsed() < 20 * MS {
            spin = spin.wrapping_add(1);
        }
        std::hint::black_box(spin);
        let after = cpu_time(std::process::id()).expect("readable");
        assert!(after > before, "{before:?} -> {after:?}");
    }
}
