//! What a session's stored values cost the server, and the limits on it: a session's own cap
//! ([`SessionConfig::max_stored_bytes`](crate::SessionConfig)) and shared budgets that several
//! sessions draw from ([`StoredBytesBudget`]: one per tenant, one per server).
//!
//! A session holds its values as one shared map of JSON texts (see
//! [`StoredValue`](codemode_protocol::StoredValue)): a cell starts with a reference to it, and a
//! commit replaces it with a new map that shares every value it did not write. A budget is
//! charged when a commit grows what the session holds, before the store is asked, and credited
//! when a commit shrinks it or the session is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use codemode_protocol::{StoredValues, stored_entry_bytes};

use crate::ports::{StoreError, StoreErrorKind};

/// A limit on the stored-value bytes (keys and JSON text) that several sessions hold together,
/// for example all sessions of one tenant. Share it through the sessions' configurations.
#[derive(Debug)]
pub struct StoredBytesBudget {
    what: String,
    limit: usize,
    used: AtomicUsize,
}

impl StoredBytesBudget {
    /// A budget of `limit` bytes; `what` names it in refusals (for example `the stored values of
    /// tenant "alice" (--max-stored-bytes-per-tenant)`).
    pub fn new(what: impl Into<String>, limit: usize) -> Arc<Self> {
        Arc::new(StoredBytesBudget {
            what: what.into(),
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// The bytes charged now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Charges `bytes` if the total stays within the limit; otherwise charges nothing and says
    /// why.
    fn try_charge(&self, bytes: usize) -> Result<(), StoreError> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .map(|_| ())
            .map_err(|used| {
                too_large(format!(
                    "{} would hold {} bytes, past the limit of {}",
                    self.what,
                    used.saturating_add(bytes),
                    describe_bytes(self.limit)
                ))
            })
    }

    /// Charges `bytes` whatever the limit (values a session already has when it opens).
    fn charge(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    fn credit(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// A commit refused by a limit on stored bytes: what would be past which limit, and what to do.
fn too_large(why: String) -> StoreError {
    StoreError::of(
        StoreErrorKind::TooLarge,
        format!(
            "{why}; store less (overwrite keys with smaller values), or keep large data outside \
             stored values"
        ),
    )
}

/// `67108864` as `64 MiB`, and other sizes in the largest whole unit.
pub(crate) fn describe_bytes(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// A session's values and what they cost.
#[derive(Debug)]
pub(crate) struct HeldValues {
    /// The values as of the last commit, shared with the cells started since.
    pub(crate) values: Arc<StoredValues>,
    /// Their bytes (keys and JSON text).
    pub(crate) bytes: usize,
    budgets: Vec<Arc<StoredBytesBudget>>,
}

/// A commit that fits every limit, charged and not yet applied: [`HeldValues::apply`] it once
/// the store has it, or drop it to give the charge back.
#[derive(Debug)]
pub(crate) struct Charge {
    budgets: Vec<Arc<StoredBytesBudget>>,
    grown: usize,
    delta: isize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        for budget in &self.budgets {
            budget.credit(self.grown);
        }
    }
}

impl HeldValues {
    /// The values a session opened with, charged to its budgets whatever their limits.
    pub(crate) fn new(values: StoredValues, budgets: Vec<Arc<StoredBytesBudget>>) -> Self {
        let bytes = codemode_protocol::stored_bytes(&values);
        for budget in &budgets {
            budget.charge(bytes);
        }
        HeldValues {
            values: Arc::new(values),
            bytes,
            budgets,
        }
    }

    /// Checks `writes` against the session's cap and charges its budgets for what they add.
    pub(crate) fn charge(
        &self,
        writes: &StoredValues,
        session_limit: usize,
    ) -> Result<Charge, StoreError> {
        let mut delta: isize = 0;
        for (key, value) in writes {
            let replaced = self
                .values
                .get(key)
                .map_or(0, |old| stored_entry_bytes(key, old));
            delta += stored_entry_bytes(key, value) as isize - replaced as isize;
        }
        let total = self.bytes.saturating_add_signed(delta);
        if delta > 0 && total > session_limit {
            return Err(too_large(format!(
                "the session's stored values would hold {total} bytes, past its limit of {}",
                describe_bytes(session_limit)
            )));
        }
        let grown = delta.max(0) as usize;
        let mut charged = Vec::new();
        for budget in &self.budgets {
            if let Err(why) = budget.try_charge(grown) {
                for done in charged {
                    StoredBytesBudget::credit(done, grown);
                }
                return Err(why);
            }
            charged.push(budget.as_ref());
        }
        Ok(Charge {
            budgets: self.budgets.clone(),
            grown,
            delta,
        })
    }

    /// Takes `latest`, the values another process may have changed since this one loaded or
    /// committed (a store shared between processes), in place of the held ones; the budgets are
    /// charged or credited the difference, whatever their limits (the bytes are already stored).
    pub(crate) fn refresh(&mut self, latest: StoredValues) {
        let bytes = codemode_protocol::stored_bytes(&latest);
        for budget in &self.budgets {
            if bytes >= self.bytes {
                budget.charge(bytes - self.bytes);
            } else {
                budget.credit(self.bytes - bytes);
            }
        }
        self.values = Arc::new(latest);
        self.bytes = bytes;
    }

    /// Merges committed `writes`: a new map that shares the values it does not replace, so the
    /// cells that hold the old one keep it unchanged.
    pub(crate) fn apply(&mut self, writes: StoredValues, mut charge: Charge) {
        Arc::make_mut(&mut self.values).extend(writes);
        self.bytes = self.bytes.saturating_add_signed(charge.delta);
        if charge.delta < 0 {
            for budget in &self.budgets {
                budget.credit(charge.delta.unsigned_abs());
            }
        }
        // Applied: the growth stays charged.
        charge.grown = 0;
    }
}

impl Drop for HeldValues {
    fn drop(&mut self) {
        for budget in &self.budgets {
            budget.credit(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_protocol::StoredValue;
    use serde_json::json;

    fn writes(entries: &[(&str, serde_json::Value)]) -> StoredValues {
        entries
            .iter()
            .map(|(key, value)| ((*key).to_owned(), StoredValue::from_value(value)))
            .collect()
    }

    #[test]
    fn growth_is_charged_shrinking_credited_and_a_dropped_session_gives_all_back() {
        let tenant = StoredBytesBudget::new("tenant \"a\"", 100);
        let mut held = HeldValues::new(writes(&[("k", json!("12345678"))]), vec![tenant.clone()]);
        assert_eq!((held.bytes, tenant.used()), (11, 11));
        let grow = writes(&[("j", json!("x".repeat(40)))]);
        let charge = held.charge(&grow, 1000).unwrap();
        assert_eq!(tenant.used(), 54);
        held.apply(grow, charge);
        assert_eq!((held.bytes, tenant.used()), (54, 54));
        // Past the tenant's budget: refused by name, nothing charged.
        let too_much = writes(&[("big", json!("y".repeat(60)))]);
        let why = held.charge(&too_much, 1000).unwrap_err().to_string();
        assert!(
            why.contains("tenant \"a\"") && why.contains("100 bytes"),
            "{why}"
        );
        assert_eq!(tenant.used(), 54);
        // Past the session's own cap.
        let why = held.charge(&too_much, 64).unwrap_err().to_string();
        assert!(why.contains("session's stored values"), "{why}");
        // A charge dropped (the store failed) is given back.
        drop(held.charge(&writes(&[("z", json!(1))]), 1000).unwrap());
        assert_eq!(tenant.used(), 54);
        // Replacing a value with a smaller one credits the difference.
        let shrink = writes(&[("j", json!(""))]);
        let charge = held.charge(&shrink, 1000).unwrap();
        held.apply(shrink, charge);
        assert_eq!((held.bytes, tenant.used()), (14, 14));
        drop(held);
        assert_eq!(tenant.used(), 0);
    }

    #[test]
    fn a_refresh_takes_the_latest_values_and_charges_or_credits_the_difference() {
        let budget = StoredBytesBudget::new("tenant", 1_000);
        let mut held = HeldValues::new(writes(&[("a", json!(1))]), vec![Arc::clone(&budget)]);
        let first = budget.used();
        held.refresh(writes(&[
            ("a", json!(1)),
            ("b", json!("another process's")),
        ]));
        assert!(held.values.contains_key("b"));
        assert_eq!(held.bytes, budget.used());
        assert!(budget.used() > first);
        held.refresh(StoredValues::new());
        assert_eq!((held.bytes, budget.used()), (0, 0));
    }

    #[test]
    fn a_commit_shares_the_values_it_does_not_replace() {
        let mut held = HeldValues::new(writes(&[("k", json!("kept"))]), Vec::new());
        let before = Arc::clone(&held.values);
        let new = writes(&[("n", json!(1))]);
        let charge = held.charge(&new, 1000).unwrap();
        held.apply(new, charge);
        assert_eq!(before.len(), 1, "a cell's snapshot is unchanged");
        assert!(std::ptr::eq(before["k"].json(), held.values["k"].json()));
    }
}
