//! The cell's timer table (`setTimeout`/`clearTimeout`, the globals): id allocation, delay normalisation,
//! and which timer is due next. Engine-independent; the runtime thread owns one per cell and waits on
//! [`Timers::next_deadline`].

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The timers of one cell. Ids count from 1 and are never reused.
#[derive(Debug, Default)]
pub struct Timers {
    last_id: u64,
    /// Deadline of each live timer, by id.
    deadlines: HashMap<u64, Instant>,
    /// The same timers ordered by (deadline, id), so equal deadlines fire in creation order.
    queue: BTreeSet<(Instant, u64)>,
}

/// The delay of `setTimeout(cb, ms)`: truncated toward zero; non-finite or non-positive means 0.
pub fn normalize_delay(ms: f64) -> Duration {
    if !ms.is_finite() || ms <= 0.0 {
        return Duration::ZERO;
    }
    // Anything beyond what a Duration can hold is, for a cell, never.
    Duration::try_from_secs_f64(ms.trunc() / 1000.0).unwrap_or(Duration::MAX)
}

impl Timers {
    /// Schedules a timer `delay` after `now` and returns its id.
    pub fn set(&mut self, now: Instant, delay: Duration) -> u64 {
        self.last_id += 1;
        let id = self.last_id;
        let deadline = now
            .checked_add(delay)
            .unwrap_or(now + Duration::from_secs(u32::MAX.into()));
        self.deadlines.insert(id, deadline);
        self.queue.insert((deadline, id));
        id
    }

    /// Cancels timer `id`; unknown, fired or already cleared ids are ignored. Returns whether a live
    /// timer was removed.
    pub fn clear(&mut self, id: u64) -> bool {
        match self.deadlines.remove(&id) {
            Some(deadline) => self.queue.remove(&(deadline, id)),
            None => false,
        }
    }

    /// The earliest deadline of a live timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.first().map(|(deadline, _)| *deadline)
    }

    /// Removes and returns the earliest timer due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<u64> {
        let (deadline, id) = *self.queue.first()?;
        if deadline > now {
            return None;
        }
        self.queue.pop_first();
        self.deadlines.remove(&id);
        Some(id)
    }

    /// Whether timer `id` is still live (set, not yet fired or cleared).
    pub fn is_live(&self, id: u64) -> bool {
        self.deadlines.contains_key(&id)
    }

    /// How many timers are live.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// Whether no timer is live.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_truncated_and_non_positive_or_non_finite_become_zero() {
        assert_eq!(normalize_delay(10.9), Duration::from_millis(10));
        assert_eq!(normalize_delay(-5.0), Duration::ZERO);
        assert_eq!(normalize_delay(f64::NAN), Duration::ZERO);
        assert_eq!(normalize_delay(f64::INFINITY), Duration::ZERO);
        assert_eq!(normalize_delay(0.5), Duration::ZERO);
    }

    #[test]
    fn timers_fire_in_deadline_then_creation_order_and_clear_releases_them() {
        let start = Instant::now();
        let mut timers = Timers::default();
        let late = timers.set(start, Duration::from_millis(20));
        let first = timers.set(start, Duration::ZERO);
        let second = timers.set(start, Duration::ZERO);
        let cleared = timers.set(start, Duration::ZERO);
        assert_eq!((late, first, second, cleared), (1, 2, 3, 4));
        assert!(timers.clear(cleared));
        assert!(!timers.clear(cleared));
        assert!(!timers.clear(99));
        assert_eq!(timers.pop_due(start), Some(first));
        assert_eq!(timers.pop_due(start), Some(second));
        assert_eq!(timers.pop_due(start), None);
        assert_eq!(
            timers.next_deadline(),
            Some(start + Duration::from_millis(20))
        );
        assert_eq!(
            timers.pop_due(start + Duration::from_millis(20)),
            Some(late)
        );
        assert!(timers.is_empty());
    }
}
