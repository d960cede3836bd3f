//! The cluster's registry in PostgreSQL: the servers of a cluster (`codemode mcp --advertise`)
//! and what they journal, beside the store in the same database but not part of it.
//!
//! - **Servers.** Each registers in `codemode_replicas` with the address it serves and a lease it
//!   renews ([`PostgresCluster::join`], [`PostgresCluster::renew`], [`PostgresCluster::leave`]);
//!   another server finds where a cell runs, and whether that server is still there, with
//!   [`PostgresCluster::replica`]. Leases are judged by the database's clock.
//! - **Journal.** Each server journals its open sessions and cells and the tool calls they start
//!   ([`PostgresCluster::journal`]), so that the others can count a tenant's sessions and cells
//!   across the cluster ([`PostgresCluster::sessions_elsewhere`],
//!   [`PostgresCluster::cells_elsewhere`]) and, when it dies, say what its cells had set going
//!   ([`PostgresCluster::tool_calls_of`]).
//!
//! Its tables are created by the store's schema (one version for both); it shares the store's
//! connections ([`crate::PostgresStore::cluster`]).

use std::sync::Arc;
use std::time::Duration;

use codemode_session::{StoreError, Tenant};

use crate::store::postgres::Database;

/// The registry of a cluster's servers and their journal.
#[derive(Clone)]
pub struct PostgresCluster {
    database: Arc<Database>,
}

impl std::fmt::Debug for PostgresCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCluster")
            .field("target", &self.database.target())
            .finish_non_exhaustive()
    }
}

impl PostgresCluster {
    /// Connects to the database at `url` (as [`crate::PostgresStore::connect`] does, creating or
    /// upgrading its schema) for its registry alone.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresCluster::on(Database::connect(url).await?))
    }

    pub(crate) fn on(database: Arc<Database>) -> Self {
        PostgresCluster { database }
    }

    /// Registers server `id` as serving at `address`, with a lease of `lease` from now.
    pub async fn join(&self, id: &str, address: &str, lease: Duration) -> Result<(), StoreError> {
        let client = self.database.client().await?;
        client
            .execute(
                "INSERT INTO codemode_replicas (id, address, lease_expires_at)
                 VALUES ($1, $2, now() + $3 * interval '1 millisecond')
                 ON CONFLICT (id) DO UPDATE
                 SET address = EXCLUDED.address, lease_expires_at = EXCLUDED.lease_expires_at",
                &[&id, &address, &millis(lease)],
            )
            .await
            .map_err(|error| self.database.failed("register this server in", error))?;
        Ok(())
    }

    /// Renews server `id`'s lease to `lease` from now.
    pub async fn renew(&self, id: &str, lease: Duration) -> Result<(), StoreError> {
        let client = self.database.client().await?;
        client
            .execute(
                "UPDATE codemode_replicas
                 SET lease_expires_at = now() + $2 * interval '1 millisecond' WHERE id = $1",
                &[&id, &millis(lease)],
            )
            .await
            .map_err(|error| self.database.failed("renew this server's lease in", error))?;
        Ok(())
    }

    /// Ends server `id`'s lease now: it has left, and its cells with it.
    pub async fn leave(&self, id: &str) -> Result<(), StoreError> {
        let client = self.database.client().await?;
        client
            .execute(
                "UPDATE codemode_replicas SET lease_expires_at = now() WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(|error| self.database.failed("remove this server from", error))?;
        Ok(())
    }

    /// Forgets the servers whose leases ran out more than `retention` ago, with what they
    /// journaled (their open cells and sessions, and their cells' tool calls); returns how many.
    /// Until then, `wait` on a cell of such a server can still say which tool calls it had
    /// started.
    pub async fn forget_servers_gone_for(&self, retention: Duration) -> Result<u64, StoreError> {
        let client = self.database.client().await?;
        let row = client
            .query_one(
                "WITH gone AS (
                     DELETE FROM codemode_replicas
                     WHERE lease_expires_at < now() - $1 * interval '1 millisecond'
                     RETURNING id
                 ), cells AS (
                     DELETE FROM codemode_cells WHERE server IN (SELECT id FROM gone)
                 ), sessions AS (
                     DELETE FROM codemode_open_sessions WHERE server IN (SELECT id FROM gone)
                 ), calls AS (
                     DELETE FROM codemode_tool_calls
                     WHERE split_part(cell_id, '-', 1) IN (SELECT id FROM gone)
                 )
                 SELECT count(*) FROM gone",
                &[&millis(retention)],
            )
            .await
            .map_err(|error| {
                self.database
                    .failed("forget servers that are gone from", error)
            })?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// Server `id` as registered, if it ever was.
    pub async fn replica(&self, id: &str) -> Result<Option<Replica>, StoreError> {
        let client = self.database.client().await?;
        let row = client
            .query_opt(
                "SELECT address, lease_expires_at > now(),
                        to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
                 FROM codemode_replicas WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(|error| self.database.failed("look up a server in", error))?;
        Ok(row.map(|row| Replica {
            address: row.get(0),
            alive: row.get(1),
            lease_expires_at: row.get(2),
        }))
    }

    /// Writes one batch of a server's cell activity in one transaction: the cells it started and
    /// the tool calls they started are recorded, and cells that closed forgotten.
    pub async fn journal(&self, server: &str, batch: &JournalBatch) -> Result<(), StoreError> {
        let mut client = self.database.client().await?;
        let failed = |error| self.database.failed("journal cell activity in", error);
        let transaction = client.transaction().await.map_err(failed)?;
        if !batch.cells_started.is_empty() {
            let column = |pick: fn(&(String, String, String)) -> &str| -> Vec<&str> {
                batch.cells_started.iter().map(pick).collect()
            };
            transaction
                .execute(
                    "INSERT INTO codemode_cells (session, cell_id, tenant, server)
                     SELECT session, cell_id, tenant, $4
                     FROM UNNEST($1::text[], $2::text[], $3::text[]) AS c(session, cell_id, tenant)
                     ON CONFLICT DO NOTHING",
                    &[
                        &column(|cell| &cell.0),
                        &column(|cell| &cell.1),
                        &column(|cell| &cell.2),
                        &server,
                    ],
                )
                .await
                .map_err(failed)?;
        }
        if !batch.calls_started.is_empty() {
            let column = |pick: fn(&(String, String, String, String)) -> &str| -> Vec<&str> {
                batch.calls_started.iter().map(pick).collect()
            };
            transaction
                .execute(
                    "INSERT INTO codemode_tool_calls (session, cell_id, call_id, tool)
                     SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[])
                     ON CONFLICT DO NOTHING",
                    &[
                        &column(|call| &call.0),
                        &column(|call| &call.1),
                        &column(|call| &call.2),
                        &column(|call| &call.3),
                    ],
                )
                .await
                .map_err(failed)?;
        }
        if !batch.cells_closed.is_empty() {
            let sessions: Vec<&str> = batch.cells_closed.iter().map(|c| c.0.as_str()).collect();
            let cells: Vec<&str> = batch.cells_closed.iter().map(|c| c.1.as_str()).collect();
            for table in ["codemode_tool_calls", "codemode_cells"] {
                transaction
                    .execute(
                        &format!(
                            "DELETE FROM {table} AS t
                             USING UNNEST($1::text[], $2::text[]) AS closed(session, cell_id)
                             WHERE t.session = closed.session AND t.cell_id = closed.cell_id"
                        ),
                        &[&sessions, &cells],
                    )
                    .await
                    .map_err(failed)?;
            }
        }
        if !batch.sessions_opened.is_empty() {
            let sessions: Vec<&str> = batch.sessions_opened.iter().map(|s| s.0.as_str()).collect();
            let tenants: Vec<&str> = batch.sessions_opened.iter().map(|s| s.1.as_str()).collect();
            transaction
                .execute(
                    "INSERT INTO codemode_open_sessions (server, session, tenant)
                     SELECT $3, session, tenant FROM UNNEST($1::text[], $2::text[]) AS s(session, tenant)
                     ON CONFLICT DO NOTHING",
                    &[&sessions, &tenants, &server],
                )
                .await
                .map_err(failed)?;
        }
        if !batch.sessions_closed.is_empty() {
            transaction
                .execute(
                    "DELETE FROM codemode_open_sessions WHERE server = $1 AND session = ANY($2)",
                    &[&server, &batch.sessions_closed],
                )
                .await
                .map_err(failed)?;
        }
        transaction.commit().await.map_err(failed)
    }

    /// The sessions of `tenant` that the servers other than `server` whose leases run have open.
    pub async fn sessions_elsewhere(
        &self,
        server: &str,
        tenant: &Tenant,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.database.client().await?;
        let rows = client
            .query(
                "SELECT DISTINCT sessions.session
                 FROM codemode_open_sessions AS sessions JOIN codemode_replicas AS servers
                 ON servers.id = sessions.server
                 WHERE sessions.server <> $1 AND sessions.tenant = $2
                   AND servers.lease_expires_at > now()",
                &[&server, &tenant.as_str()],
            )
            .await
            .map_err(|error| {
                self.database
                    .failed("count the cluster's sessions in", error)
            })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// How many cells the servers other than `server` whose leases run have open: of `tenant`,
    /// and in all.
    pub async fn cells_elsewhere(
        &self,
        server: &str,
        tenant: &Tenant,
    ) -> Result<(usize, usize), StoreError> {
        let client = self.database.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE cells.tenant = $2), count(*)
                 FROM codemode_cells AS cells JOIN codemode_replicas AS servers
                 ON servers.id = cells.server
                 WHERE cells.server <> $1 AND servers.lease_expires_at > now()",
                &[&server, &tenant.as_str()],
            )
            .await
            .map_err(|error| self.database.failed("count the cluster's cells in", error))?;
        let count = |index| usize::try_from(row.get::<_, i64>(index)).unwrap_or(0);
        Ok((count(0), count(1)))
    }

    /// The tool calls cell `cell_id` of `session` started and that were recorded, in the order
    /// they started: `(call id, tool)`.
    pub async fn tool_calls_of(
        &self,
        session: &str,
        cell_id: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let client = self.database.client().await?;
        let rows = client
            .query(
                "SELECT call_id, tool FROM codemode_tool_calls
                 WHERE session = $1 AND cell_id = $2 ORDER BY started_at, call_id",
                &[&session, &cell_id],
            )
            .await
            .map_err(|error| self.database.failed("read tool calls from", error))?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }
}

/// One batch of a server's cell activity for [`PostgresCluster::journal`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalBatch {
    /// Cells that started: `(session, cell id, tenant)`.
    pub cells_started: Vec<(String, String, String)>,
    /// Tool calls that cells started: `(session, cell id, call id, tool)`.
    pub calls_started: Vec<(String, String, String, String)>,
    /// Cells that closed: `(session, cell id)`.
    pub cells_closed: Vec<(String, String)>,
    /// Sessions the server opened: `(session, tenant)`.
    pub sessions_opened: Vec<(String, String)>,
    /// Sessions the server closed.
    pub sessions_closed: Vec<String>,
}

impl JournalBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        // Destructured, so that a field added later cannot be forgotten here.
        let JournalBatch {
            cells_started,
            calls_started,
            cells_closed,
            sessions_opened,
            sessions_closed,
        } = self;
        cells_started.is_empty()
            && calls_started.is_empty()
            && cells_closed.is_empty()
            && sessions_opened.is_empty()
            && sessions_closed.is_empty()
    }
}

/// A server of a cluster, as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Replica {
    /// The address it serves (`--advertise`).
    pub address: String,
    /// Whether its lease still runs.
    pub alive: bool,
    /// When its lease ends or ended (UTC, to the second).
    pub lease_expires_at: String,
}

/// `duration` in whole milliseconds, as the database takes it.
fn millis(duration: Duration) -> f64 {
    duration.as_millis() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_only_sessions_opened_or_closed_is_not_empty() {
        assert!(JournalBatch::default().is_empty());
        let mut opened = JournalBatch::default();
        opened
            .sessions_opened
            .push(("alpha/work".to_owned(), "alpha".to_owned()));
        assert!(!opened.is_empty());
        let mut closed = JournalBatch::default();
        closed.sessions_closed.push("alpha/work".to_owned());
        assert!(!closed.is_empty());
    }
}
