//! Admission: the one path by which a new session or a new cell takes its place under the
//! server's limits. A slot is reserved first, in one critical section, before anything is
//! awaited; then, in a cluster, the tenant's holdings on the other servers are counted, and the
//! slot is given back if they bring the tenant past its share.

use std::future::Future;
use std::sync::Arc;

use codemode_session::{StoreError, Tenant};
use rmcp::ErrorData;

use super::limits::{ServerLimits, Slot, Slots, SlotsFull};

/// What is being admitted: it names the limits in a refusal, and what the client can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admitted {
    /// An open session (`--max-sessions`, `--max-sessions-per-tenant`).
    Session,
    /// A running cell (`--max-cells`, `--max-cells-per-tenant`).
    Cell,
}

impl Admitted {
    /// The refusal when the server holds its whole limit already.
    fn server_full(self, held: usize, limits: &ServerLimits) -> String {
        match self {
            Admitted::Session => format!(
                "the server already serves {held} sessions, its --max-sessions limit of {}; close \
                 one, or try again later",
                limits.max_sessions
            ),
            Admitted::Cell => format!(
                "the server already runs {held} cells, its --max-cells limit of {}; wait for one \
                 to finish, or terminate one with wait {{\"terminate\": true}}",
                limits.max_cells
            ),
        }
    }

    /// The refusal when the tenant holds its share already (`where_` says where it was counted).
    fn tenant_full(self, yours: usize, where_: &str, limits: &ServerLimits) -> String {
        match self {
            Admitted::Session => format!(
                "your tenant already has {yours} sessions{where_}, the --max-sessions-per-tenant \
                 limit of {}; close one, or try again later",
                limits.max_sessions_per_tenant
            ),
            Admitted::Cell => format!(
                "your tenant already runs {yours} cells{where_}, the --max-cells-per-tenant limit \
                 of {}; wait for one to finish, or terminate one with wait {{\"terminate\": true}}",
                limits.max_cells_per_tenant
            ),
        }
    }

    /// The tenant's share of this limit.
    fn per_tenant(self, limits: &ServerLimits) -> usize {
        match self {
            Admitted::Session => limits.max_sessions_per_tenant,
            Admitted::Cell => limits.max_cells_per_tenant,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Admitted::Session => "sessions",
            Admitted::Cell => "cells",
        }
    }
}

/// Reserves a slot of `what` for `tenant` in `slots`, or refuses naming the limit. `elsewhere`
/// counts what the tenant holds on the other servers of a cluster (`None` outside one); it is
/// awaited only once the slot is held, so concurrent requests cannot all pass one count. This
/// server's count (the new slot aside) is exact, the others' as they last journaled it; when
/// they cannot be counted, this server's count stands.
pub(super) async fn admit(
    what: Admitted,
    limits: &ServerLimits,
    slots: &Arc<Slots>,
    tenant: &Tenant,
    elsewhere: impl Future<Output = Option<Result<usize, StoreError>>>,
) -> Result<Slot, ErrorData> {
    let slot = slots.reserve(tenant).map_err(|full| {
        ErrorData::internal_error(
            match full {
                SlotsFull::Server { held } => what.server_full(held, limits),
                SlotsFull::Tenant { held } => what.tenant_full(held, "", limits),
            },
            None,
        )
    })?;
    match elsewhere.await {
        None => {}
        Some(Ok(elsewhere)) => {
            let yours = slots.held_by(tenant).saturating_sub(1) + elsewhere;
            if yours >= what.per_tenant(limits) {
                return Err(ErrorData::internal_error(
                    what.tenant_full(yours, " across the cluster", limits),
                    None,
                ));
            }
        }
        Some(Err(error)) => {
            tracing::warn!(%error, "cannot count the cluster's {}", what.noun());
        }
    }
    Ok(slot)
}
