//! The server-wide limits (`--max-sessions`, `--max-cells`, their per-tenant shares, stored
//! bytes, the idle timeout), and the slots reserved under them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use codemode_session::Tenant;

use super::args::McpArgs;

/// The server-wide limits, and each tenant's share of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerLimits {
    pub(super) max_sessions: usize,
    pub(super) max_cells: usize,
    pub(super) max_sessions_per_tenant: usize,
    pub(super) max_cells_per_tenant: usize,
    pub(super) max_stored_bytes_total: usize,
    pub(super) max_stored_bytes_per_tenant: usize,
    pub(super) idle_timeout: Duration,
}

impl ServerLimits {
    pub(super) fn new(args: &McpArgs, tenants: usize) -> Self {
        let max_sessions = args.max_sessions.max(1);
        let max_cells = args.max_cells.max(1);
        // With several tenants, none may take the whole server by default.
        let share = |whole: usize| {
            if tenants > 1 {
                whole.div_ceil(2)
            } else {
                whole
            }
        };
        ServerLimits {
            max_sessions,
            max_cells,
            max_sessions_per_tenant: args
                .max_sessions_per_tenant
                .unwrap_or_else(|| share(max_sessions))
                .clamp(1, max_sessions),
            max_cells_per_tenant: args
                .max_cells_per_tenant
                .unwrap_or_else(|| share(max_cells))
                .clamp(1, max_cells),
            max_stored_bytes_total: args.max_stored_bytes_total,
            max_stored_bytes_per_tenant: args
                .max_stored_bytes_per_tenant
                .unwrap_or_else(|| share(args.max_stored_bytes_total))
                .min(args.max_stored_bytes_total),
            idle_timeout: Duration::from_secs(args.idle_timeout_secs.max(1)),
        }
    }
}

/// Slots under a limit on the whole server and on each tenant's share (open sessions, running
/// cells): a slot is reserved in one critical section, before the request awaits anything, so
/// that concurrent requests cannot all pass one check; it is given back when the [`Slot`] drops
/// (the session closes, the cell leaves its session, or the request fails).
pub(super) struct Slots {
    max_total: usize,
    max_per_tenant: usize,
    held: parking_lot::Mutex<HeldSlots>,
}

#[derive(Default)]
struct HeldSlots {
    total: usize,
    by_tenant: HashMap<Tenant, usize>,
}

/// Why a slot could not be reserved, with the count held when it was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotsFull {
    /// The server's limit: it holds `held` already.
    Server { held: usize },
    /// The tenant's share: it holds `held` already.
    Tenant { held: usize },
}

/// One reserved slot, given back when dropped.
pub(super) struct Slot {
    slots: Arc<Slots>,
    tenant: Tenant,
}

impl Slots {
    pub(super) fn new(max_total: usize, max_per_tenant: usize) -> Arc<Self> {
        Arc::new(Slots {
            max_total,
            max_per_tenant,
            held: parking_lot::Mutex::new(HeldSlots::default()),
        })
    }

    /// Reserves a slot for `tenant` if both the server and the tenant are below their limits.
    pub(super) fn reserve(self: &Arc<Self>, tenant: &Tenant) -> Result<Slot, SlotsFull> {
        let mut held = self.held.lock();
        if held.total >= self.max_total {
            return Err(SlotsFull::Server { held: held.total });
        }
        let yours = held.by_tenant.get(tenant).copied().unwrap_or(0);
        if yours >= self.max_per_tenant {
            return Err(SlotsFull::Tenant { held: yours });
        }
        held.total += 1;
        held.by_tenant.insert(tenant.clone(), yours + 1);
        Ok(Slot {
            slots: Arc::clone(self),
            tenant: tenant.clone(),
        })
    }

    /// The slots `tenant` holds now.
    pub(super) fn held_by(&self, tenant: &Tenant) -> usize {
        self.held.lock().by_tenant.get(tenant).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(yours) = held.by_tenant.get_mut(&self.tenant) {
            *yours = yours.saturating_sub(1);
            if *yours == 0 {
                held.by_tenant.remove(&self.tenant);
            }
        }
    }
}
