//! The server-wide limits (`--max-sessions`, `--max-cells`, their per-tenant shares, stored
//! bytes, the idle timeout), and the check a new cell makes against them.

// The server's parts share its imports and one another's items.
use super::*;

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

impl CodemodeServer {
    /// Refuses a new cell when the server runs its --max-cells limit of cells already, or the
    /// tenant its share: in a cluster, the tenant's cells on every server count (as the other
    /// servers last journaled them); the --max-cells limit is each server's own.
    pub(super) async fn check_cell_limit(&self, tenant: &str) -> Result<(), ErrorData> {
        let (yours, running) = {
            let live = self.shared.live_sessions();
            let yours: usize = live
                .iter()
                .filter(|live| live.tenant == tenant)
                .map(|live| live.session.active_cells())
                .sum();
            let running: usize = live.iter().map(|live| live.session.active_cells()).sum();
            (yours, running)
        };
        if running >= self.shared.limits.max_cells {
            return Err(ErrorData::internal_error(
                format!(
                    "the server already runs {running} cells, its --max-cells limit of {}; wait \
                     for one to finish, or terminate one with wait {{\"terminate\": true}}",
                    self.shared.limits.max_cells
                ),
                None,
            ));
        }
        let (yours, where_) = match &self.shared.cluster {
            None => (yours, ""),
            Some(cluster) => match cluster.cells_elsewhere(tenant).await {
                Ok((elsewhere, _)) => (yours + elsewhere, " across the cluster"),
                Err(error) => {
                    // The database is needed to start a cell anyway: count this server's.
                    tracing::warn!(%error, "cannot count the cluster's cells");
                    (yours, "")
                }
            },
        };
        if yours >= self.shared.limits.max_cells_per_tenant {
            return Err(ErrorData::internal_error(
                format!(
                    "your tenant already runs {yours} cells{where_}, the --max-cells-per-tenant \
                     limit of {}; wait for one to finish, or terminate one with wait \
                     {{\"terminate\": true}}",
                    self.shared.limits.max_cells_per_tenant
                ),
                None,
            ));
        }
        Ok(())
    }
}
