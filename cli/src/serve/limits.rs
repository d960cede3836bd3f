//! The server-wide limits (`--max-sessions`, `--max-cells`, their per-tenant shares, stored
//! bytes, the idle timeout), and the check a new cell makes against them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData;

use super::McpArgs;
use super::handler::CodemodeServer;

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
    held: std::sync::Mutex<HeldSlots>,
}

#[derive(Default)]
struct HeldSlots {
    total: usize,
    by_tenant: HashMap<String, usize>,
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
    tenant: String,
}

impl Slots {
    pub(super) fn new(max_total: usize, max_per_tenant: usize) -> Arc<Self> {
        Arc::new(Slots {
            max_total,
            max_per_tenant,
            held: std::sync::Mutex::new(HeldSlots::default()),
        })
    }

    /// Reserves a slot for `tenant` if both the server and the tenant are below their limits.
    pub(super) fn reserve(self: &Arc<Self>, tenant: &str) -> Result<Slot, SlotsFull> {
        let mut held = self.lock();
        if held.total >= self.max_total {
            return Err(SlotsFull::Server { held: held.total });
        }
        let yours = held.by_tenant.get(tenant).copied().unwrap_or(0);
        if yours >= self.max_per_tenant {
            return Err(SlotsFull::Tenant { held: yours });
        }
        held.total += 1;
        held.by_tenant.insert(tenant.to_owned(), yours + 1);
        Ok(Slot {
            slots: Arc::clone(self),
            tenant: tenant.to_owned(),
        })
    }

    /// The slots `tenant` holds now.
    pub(super) fn held_by(&self, tenant: &str) -> usize {
        self.lock().by_tenant.get(tenant).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldSlots> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(yours) = held.by_tenant.get_mut(&self.tenant) {
            *yours = yours.saturating_sub(1);
            if *yours == 0 {
                held.by_tenant.remove(&self.tenant);
            }
        }
    }
}

impl CodemodeServer {
    /// Reserves a slot for a new cell of `tenant`, refused when the server runs its --max-cells
    /// limit of cells already, or the tenant its share: in a cluster, the tenant's cells on every
    /// server count (as the other servers last journaled them); the --max-cells limit is each
    /// server's own. The new cell holds the slot while its session counts it.
    pub(super) async fn reserve_cell(&self, tenant: &str) -> Result<Slot, ErrorData> {
        let limits = &self.shared.limits;
        let slot = self.shared.sessions.reserve_cell(tenant).map_err(|full| {
            ErrorData::internal_error(
                match full {
                    SlotsFull::Server { held } => format!(
                        "the server already runs {held} cells, its --max-cells limit of {}; wait \
                         for one to finish, or terminate one with wait {{\"terminate\": true}}",
                        limits.max_cells
                    ),
                    SlotsFull::Tenant { held } => cells_per_tenant_refusal(held, "", limits),
                },
                None,
            )
        })?;
        let Some(cluster) = &self.shared.cluster else {
            return Ok(slot);
        };
        match cluster.cells_elsewhere(tenant).await {
            Ok((elsewhere, _)) => {
                // This server's count (the new cell's slot aside) is exact; the others' as they
                // last journaled it.
                let yours =
                    self.shared.sessions.cells_held_by(tenant).saturating_sub(1) + elsewhere;
                if yours >= limits.max_cells_per_tenant {
                    return Err(ErrorData::internal_error(
                        cells_per_tenant_refusal(yours, " across the cluster", limits),
                        None,
                    ));
                }
            }
            // The database is needed to start a cell anyway: this server's count stands.
            Err(error) => tracing::warn!(%error, "cannot count the cluster's cells"),
        }
        Ok(slot)
    }
}

fn cells_per_tenant_refusal(yours: usize, where_: &str, limits: &ServerLimits) -> String {
    format!(
        "your tenant already runs {yours} cells{where_}, the --max-cells-per-tenant limit of {}; \
         wait for one to finish, or terminate one with wait {{\"terminate\": true}}",
        limits.max_cells_per_tenant
    )
}
