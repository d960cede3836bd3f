//! The server's registry of codemode sessions: the slots every open session and running cell
//! holds under the server's limits, the stored-bytes budgets they draw from, the sessions open
//! now, and the named sessions with their single-flight opening locks. Its state is private: the
//! rest of the server reaches it through these methods, each one critical section.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use codemode_session::{SessionKey, StoredBytesBudget, Tenant};

use super::limits::{ServerLimits, Slots};
use super::live::LiveSession;

/// Held while one named session is looked up and opened, or closed.
pub(super) type OpeningLock = tokio::sync::Mutex<()>;

/// The sessions of one server, and what they hold under its limits.
pub(super) struct SessionRegistry {
    /// What all open sessions' stored values may hold.
    stored_total: Arc<StoredBytesBudget>,
    /// Each tenant's share of it, by tenant.
    stored_per_tenant: Mutex<HashMap<Tenant, Arc<StoredBytesBudget>>>,
    max_stored_bytes_per_tenant: usize,
    /// The slots of open sessions, and of running cells.
    session_slots: Arc<Slots>,
    cell_slots: Arc<Slots>,
    /// The codemode sessions open now (for shutdown, and the cluster's count).
    live: Mutex<Vec<Weak<LiveSession>>>,
    /// The sessions clients named (X-Codemode-Session), by store key: whichever request or MCP
    /// session names one finds it here, so that cells outlive the request or MCP session that
    /// started them. Each leaves when it idles out.
    named: Mutex<HashMap<SessionKey, Arc<LiveSession>>>,
    /// One lock per named session being looked up and opened (by store key), so that two
    /// requests naming it at once open it once, while other sessions open meanwhile.
    opening_named: Mutex<HashMap<SessionKey, Weak<OpeningLock>>>,
}

impl SessionRegistry {
    pub(super) fn new(limits: &ServerLimits) -> Self {
        SessionRegistry {
            stored_total: StoredBytesBudget::new(
                "the stored values of all open sessions (--max-stored-bytes-total)",
                limits.max_stored_bytes_total,
            ),
            stored_per_tenant: Mutex::new(HashMap::new()),
            max_stored_bytes_per_tenant: limits.max_stored_bytes_per_tenant,
            session_slots: Slots::new(limits.max_sessions, limits.max_sessions_per_tenant),
            cell_slots: Slots::new(limits.max_cells, limits.max_cells_per_tenant),
            live: Mutex::new(Vec::new()),
            named: Mutex::new(HashMap::new()),
            opening_named: Mutex::new(HashMap::new()),
        }
    }

    /// The budget every open session's stored values draw from.
    pub(super) fn stored_total(&self) -> Arc<StoredBytesBudget> {
        Arc::clone(&self.stored_total)
    }

    /// The budget all sessions of `tenant` draw their stored values from.
    pub(super) fn tenant_stored_budget(&self, tenant: &Tenant) -> Arc<StoredBytesBudget> {
        let mut budgets = self.stored_per_tenant.lock();
        Arc::clone(budgets.entry(tenant.clone()).or_insert_with(|| {
            StoredBytesBudget::new(
                "the stored values of your tenant's open sessions (--max-stored-bytes-per-tenant)",
                self.max_stored_bytes_per_tenant,
            )
        }))
    }

    /// The slots of open sessions (see [`admit`](super::admission::admit)).
    pub(super) fn session_slots(&self) -> &Arc<Slots> {
        &self.session_slots
    }

    /// The slots of running cells (see [`admit`](super::admission::admit)).
    pub(super) fn cell_slots(&self) -> &Arc<Slots> {
        &self.cell_slots
    }

    /// Counts `live` among the open sessions until it is dropped.
    pub(super) fn add_live(&self, live: &Arc<LiveSession>) {
        let mut sessions = self.live.lock();
        sessions.retain(|session| session.strong_count() > 0);
        sessions.push(Arc::downgrade(live));
    }

    /// The sessions open now.
    pub(super) fn live_sessions(&self) -> Vec<Arc<LiveSession>> {
        let mut sessions = self.live.lock();
        sessions.retain(|session| session.strong_count() > 0);
        sessions.iter().filter_map(Weak::upgrade).collect()
    }

    /// The named session with this key, if open.
    pub(super) fn named_session(&self, key: &SessionKey) -> Option<Arc<LiveSession>> {
        self.named.lock().get(key).cloned()
    }

    /// Registers the named session `key` (under its opening lock).
    pub(super) fn add_named(&self, key: &SessionKey, live: &Arc<LiveSession>) {
        self.named.lock().insert(key.clone(), Arc::clone(live));
    }

    /// Takes the named session `key` out of the registry if it is still `live` (under its
    /// opening lock); whether it was.
    pub(super) fn remove_named(&self, key: &SessionKey, live: &Arc<LiveSession>) -> bool {
        let mut named = self.named.lock();
        let current = named
            .get(key)
            .is_some_and(|current| Arc::ptr_eq(current, live));
        if current {
            named.remove(key);
        }
        current
    }

    /// The lock held while the named session `key` is looked up, opened or closed: one
    /// per key (single-flight), dropped from the map once nobody holds it.
    pub(super) fn opening_lock(&self, key: &SessionKey) -> Arc<OpeningLock> {
        let mut locks = self.opening_named.lock();
        if let Some(lock) = locks.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(OpeningLock::default());
        locks.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }
}
