//! The PostgreSQL store: every session's values in one table of a database that several codemode
//! servers share, so that any of them can run a session's next cell (`--store postgres://…`).
//!
//! - **Schema.** Created and upgraded when the store connects, under a transaction-scoped advisory
//!   lock (replicas starting together take turns), and versioned in `codemode_schema_version`.
//!   A database whose schema is newer than this program knows is refused, never written.
//! - **Values.** One row per key: `(session, key, value)`. The key is its UTF-8 bytes (`BYTEA`:
//!   a cell's key may hold a NUL, which `TEXT` cannot); the value is its JSON text exactly as the
//!   cell stored it (`TEXT`, not `JSONB`, which would reorder its keys).
//! - **Commits.** One transaction: every write of the cell lands, merged by key over what is
//!   there, or none does. Two commits of one session on two servers at the same moment both land,
//!   each whole, in some order; rows are written in key order, so two commits that share keys
//!   wait for each other instead of deadlocking.
//! - **Bytes per tenant.** `codemode_tenant_bytes` keeps each tenant's total of stored bytes
//!   (keys and JSON text, as the sessions count them). A session's tenant is its key up to the
//!   first `/` (`codemode mcp --http` names sessions `TENANT/NAME`). Every commit locks its
//!   tenant's row first, so the commits of one tenant take turns across every server, and the
//!   total stays exact; with [`PostgresStore::limit_bytes_per_tenant`], a commit that would take
//!   its tenant past the limit is refused whole ([`StoreErrorKind::TooLarge`]).
//! - **Loads.** Straight from the table: the store keeps no cache that another server could make
//!   stale ([`Store::shared_between_processes`] tells the session to load before each cell).
//! - **Failures.** A lost connection or a restarting database fails the calls it hits, as
//!   [`StoreErrorKind::Unavailable`]; the pool drops the dead connections and makes new ones when
//!   the database is back, so the server recovers without a restart.
//!
//! - **Replicas.** Servers that run as a cluster register in `codemode_replicas` with the
//!   address they serve and a lease they renew ([`PostgresStore::join`], [`PostgresStore::renew`],
//!   [`PostgresStore::leave`]); another server finds where a cell runs, and whether that server
//!   is still there, with [`PostgresStore::replica`]. Leases are judged by the database's clock.
//!   Each server journals its open cells and the tool calls they start
//!   ([`PostgresStore::journal`]), so that the others can count a tenant's cells across the
//!   cluster ([`PostgresStore::cells_elsewhere`]) and, when it dies, say what its cells had set
//!   going.
//!
//! Connections are plain TCP or a Unix socket (no TLS): run the database on the servers' private
//! network or on the same host.

use std::time::Duration;

use async_trait::async_trait;
use codemode_protocol::{StoredValue, StoredValues, stored_entry_bytes};
use codemode_session::{SessionKey, Store, StoreError, StoreErrorKind};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

/// The schema version this program writes and reads.
pub const SCHEMA_VERSION: i32 = 6;

/// The steps from one schema version to the next: step `n` takes version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: stored values.
    "CREATE TABLE codemode_stored_values (
         session TEXT NOT NULL,
         key BYTEA NOT NULL,
         value TEXT NOT NULL,
         committed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
         PRIMARY KEY (session, key)
     )",
    // 1 -> 2: the servers of a cluster, each with the address it serves and its lease.
    "CREATE TABLE codemode_replicas (
         id TEXT PRIMARY KEY,
         address TEXT NOT NULL,
         lease_expires_at TIMESTAMPTZ NOT NULL,
         started_at TIMESTAMPTZ NOT NULL DEFAULT now()
     )",
    // 2 -> 3: the tool calls each server's open cells have started (its kill ledger, should it
    // die).
    "CREATE TABLE codemode_tool_calls (
         session TEXT NOT NULL,
         cell_id TEXT NOT NULL,
         call_id TEXT NOT NULL,
         tool TEXT NOT NULL,
         started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
         PRIMARY KEY (session, cell_id, call_id)
     )",
    // 3 -> 4: each server's open cells and their tenants (for the limits per tenant across the
    // cluster).
    "CREATE TABLE codemode_cells (
         session TEXT NOT NULL,
         cell_id TEXT NOT NULL,
         server TEXT NOT NULL,
         tenant TEXT NOT NULL,
         started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
         PRIMARY KEY (session, cell_id)
     )",
    // 4 -> 5: the sessions each server has open, and their tenants.
    "CREATE TABLE codemode_open_sessions (
         server TEXT NOT NULL,
         session TEXT NOT NULL,
         tenant TEXT NOT NULL,
         opened_at TIMESTAMPTZ NOT NULL DEFAULT now(),
         PRIMARY KEY (server, session)
     )",
    // 5 -> 6: each tenant's total of stored bytes, counted from the values already there.
    "CREATE TABLE codemode_tenant_bytes (
         tenant TEXT PRIMARY KEY,
         bytes BIGINT NOT NULL
     );
     INSERT INTO codemode_tenant_bytes (tenant, bytes)
         SELECT split_part(session, '/', 1), sum(octet_length(key) + octet_length(value))
         FROM codemode_stored_values GROUP BY 1",
];

/// The advisory lock that serialises schema changes between servers ("codemode" in ASCII).
const SCHEMA_LOCK: i64 = 0x636f_6465_6d6f_6465;

/// How long a call waits for a connection, or to make one, before it fails as unavailable.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How many connections one server keeps at most.
const MAX_CONNECTIONS: usize = 16;

/// Stored values in a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// Where the database is, without the password: for messages.
    target: String,
    /// The most stored bytes one tenant may hold, if limited.
    bytes_per_tenant: Option<u64>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Whether `store` names a database (`postgres://…` or `postgresql://…`) rather than a directory.
pub fn is_database_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, or
    /// any connection string `tokio-postgres` reads), and creates or upgrades its schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|error| {
            StoreError::new(format!(
                "cannot read the database URL (expected postgres://USER@HOST:PORT/DATABASE): \
                 {error}"
            ))
            .with_cause(error)
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECTION_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("codemode");
        }
        let target = describe(&config);
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                // A connection whose database went away is closed by then: dropped, not reused.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(MAX_CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECTION_TIMEOUT))
            .create_timeout(Some(CONNECTION_TIMEOUT))
            .recycle_timeout(Some(CONNECTION_TIMEOUT))
            .build()
            .map_err(|error| {
                StoreError::new(format!("cannot set up connections to {target}: {error}"))
                    .with_cause(error)
            })?;
        let store = PostgresStore {
            pool,
            target,
            bytes_per_tenant: None,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Refuses a commit that would take its tenant's stored values past `limit` bytes (keys and
    /// JSON text), counting every session of the tenant in the database, whichever server
    /// committed them. A commit that does not grow its tenant's total is always taken.
    pub fn limit_bytes_per_tenant(mut self, limit: usize) -> Self {
        self.bytes_per_tenant = Some(u64::try_from(limit).unwrap_or(u64::MAX));
        self
    }

    /// The stored bytes of `tenant` (keys and JSON text), as its last commit left them.
    pub async fn tenant_bytes(&self, tenant: &str) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT bytes FROM codemode_tenant_bytes WHERE tenant = $1",
                &[&tenant],
            )
            .await
            .map_err(|error| self.failed("read a tenant's stored bytes from", error))?;
        Ok(row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64))
    }

    /// Where the database is (user, host, port, database; never the password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The schema version the database has now (0: none yet).
    pub async fn schema_version(&self) -> Result<i32, StoreError> {
        let client = self.client().await?;
        let exists: bool = client
            .query_one(
                "SELECT to_regclass('codemode_schema_version') IS NOT NULL",
                &[],
            )
            .await
            .map_err(|error| self.failed("read the schema version of", error))?
            .get(0);
        if !exists {
            return Ok(0);
        }
        let row = client
            .query_opt("SELECT version FROM codemode_schema_version", &[])
            .await
            .map_err(|error| self.failed("read the schema version of", error))?;
        Ok(row.map_or(0, |row| row.get(0)))
    }

    /// Creates the schema, or upgrades it to [`SCHEMA_VERSION`], in one transaction.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let failed = |error| self.failed("create or upgrade the schema of", error);
        let transaction = client.transaction().await.map_err(failed)?;
        transaction
            .execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .await
            .map_err(failed)?;
        transaction
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS codemode_schema_version (
                     singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
                     version INTEGER NOT NULL
                 )",
            )
            .await
            .map_err(failed)?;
        let found: i32 = transaction
            .query_opt("SELECT version FROM codemode_schema_version", &[])
            .await
            .map_err(failed)?
            .map_or(0, |row| row.get(0));
        if found > SCHEMA_VERSION {
            return Err(StoreError::of(
                StoreErrorKind::Corrupt,
                format!(
                    "the database at {} has codemode's schema version {found}, and this program \
                     knows versions up to {SCHEMA_VERSION}: run a newer codemode, or point this \
                     one at another database. Nothing was changed",
                    self.target
                ),
            ));
        }
        for (version, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            transaction.batch_execute(step).await.map_err(failed)?;
            tracing::info!(
                database = %self.target,
                version = version + 1,
                "upgraded the codemode schema"
            );
        }
        transaction
            .execute(
                "INSERT INTO codemode_schema_version (version) VALUES ($1)
                 ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version",
                &[&SCHEMA_VERSION],
            )
            .await
            .map_err(failed)?;
        transaction.commit().await.map_err(failed)
    }

    /// Registers server `id` as serving at `address`, with a lease of `lease` from now.
    pub async fn join(&self, id: &str, address: &str, lease: Duration) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO codemode_replicas (id, address, lease_expires_at)
                 VALUES ($1, $2, now() + $3 * interval '1 millisecond')
                 ON CONFLICT (id) DO UPDATE
                 SET address = EXCLUDED.address, lease_expires_at = EXCLUDED.lease_expires_at",
                &[&id, &address, &millis(lease)],
            )
            .await
            .map_err(|error| self.failed("register this server in", error))?;
        Ok(())
    }

    /// Renews server `id`'s lease to `lease` from now.
    pub async fn renew(&self, id: &str, lease: Duration) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE codemode_replicas
                 SET lease_expires_at = now() + $2 * interval '1 millisecond' WHERE id = $1",
                &[&id, &millis(lease)],
            )
            .await
            .map_err(|error| self.failed("renew this server's lease in", error))?;
        Ok(())
    }

    /// Ends server `id`'s lease now: it has left, and its cells with it.
    pub async fn leave(&self, id: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE codemode_replicas SET lease_expires_at = now() WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(|error| self.failed("remove this server from", error))?;
        Ok(())
    }

    /// Forgets the servers whose leases ran out more than `retention` ago, with what they
    /// journaled (their open cells and sessions, and their cells' tool calls); returns how many.
    /// Until then, `wait` on a cell of such a server can still say which tool calls it had
    /// started.
    pub async fn forget_servers_gone_for(&self, retention: Duration) -> Result<u64, StoreError> {
        let client = self.client().await?;
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
            .map_err(|error| self.failed("forget servers that are gone from", error))?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// Server `id` as registered, if it ever was.
    pub async fn replica(&self, id: &str) -> Result<Option<Replica>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT address, lease_expires_at > now(),
                        to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
                 FROM codemode_replicas WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(|error| self.failed("look up a server in", error))?;
        Ok(row.map(|row| Replica {
            address: row.get(0),
            alive: row.get(1),
            lease_expires_at: row.get(2),
        }))
    }

    /// Writes one batch of a server's cell activity in one transaction: the cells it started and
    /// the tool calls they started are recorded, and cells that closed forgotten.
    pub async fn journal(&self, server: &str, batch: &JournalBatch) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let failed = |error| self.failed("journal cell activity in", error);
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
        tenant: &str,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT DISTINCT sessions.session
                 FROM codemode_open_sessions AS sessions JOIN codemode_replicas AS servers
                 ON servers.id = sessions.server
                 WHERE sessions.server <> $1 AND sessions.tenant = $2
                   AND servers.lease_expires_at > now()",
                &[&server, &tenant],
            )
            .await
            .map_err(|error| self.failed("count the cluster's sessions in", error))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// How many cells the servers other than `server` whose leases run have open: of `tenant`,
    /// and in all.
    pub async fn cells_elsewhere(
        &self,
        server: &str,
        tenant: &str,
    ) -> Result<(usize, usize), StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE cells.tenant = $2), count(*)
                 FROM codemode_cells AS cells JOIN codemode_replicas AS servers
                 ON servers.id = cells.server
                 WHERE cells.server <> $1 AND servers.lease_expires_at > now()",
                &[&server, &tenant],
            )
            .await
            .map_err(|error| self.failed("count the cluster's cells in", error))?;
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
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT call_id, tool FROM codemode_tool_calls
                 WHERE session = $1 AND cell_id = $2 ORDER BY started_at, call_id",
                &[&session, &cell_id],
            )
            .await
            .map_err(|error| self.failed("read tool calls from", error))?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|error| {
            let message = match &error {
                PoolError::Backend(backend) => format!(
                    "cannot reach the database at {}: {}",
                    self.target,
                    describe_error(backend)
                ),
                _ => format!("cannot reach the database at {}: {error}", self.target),
            };
            StoreError::of(StoreErrorKind::Unavailable, message).with_cause(error)
        })
    }

    /// A database error while trying to `action` the database, as a store error of its kind.
    fn failed(&self, action: &str, error: tokio_postgres::Error) -> StoreError {
        StoreError::of(
            kind_of(&error),
            format!(
                "cannot {action} the database at {}: {}",
                self.target,
                describe_error(&error)
            ),
        )
        .with_cause(error)
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredValues, StoreError> {
        let session = key.to_string();
        let session = session.as_str();
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT key, value FROM codemode_stored_values WHERE session = $1")
            .await
            .map_err(|error| self.failed("read stored values from", error))?;
        let rows = client
            .query(&statement, &[&session])
            .await
            .map_err(|error| self.failed("read stored values from", error))?;
        let mut values = StoredValues::with_capacity(rows.len());
        for row in rows {
            let key: Vec<u8> = row.get(0);
            let key = String::from_utf8(key).map_err(|error| {
                StoreError::of(
                    StoreErrorKind::Corrupt,
                    format!(
                        "a stored key of session {session:?} in the database at {} is not UTF-8 \
                         ({error}); it was left as it is: correct or delete its row in \
                         codemode_stored_values",
                        self.target
                    ),
                )
                .with_cause(error)
            })?;
            let json: String = row.get(1);
            let value = StoredValue::from_json(json).map_err(|error| {
                StoreError::of(
                    StoreErrorKind::Corrupt,
                    format!(
                        "the stored value {key:?} of session {session:?} in the database at {} is \
                         not JSON ({error}); it was left as it is: correct or delete its row in \
                         codemode_stored_values",
                        self.target
                    ),
                )
                .with_cause(error)
            })?;
            values.insert(key, value);
        }
        Ok(values)
    }

    fn shared_between_processes(&self) -> bool {
        true
    }

    async fn commit(&self, key: &SessionKey, writes: &StoredValues) -> Result<(), StoreError> {
        let session = key.to_string();
        let session = session.as_str();
        if writes.is_empty() {
            return Ok(());
        }
        // In key order: two commits that share keys lock their rows in the same order.
        let mut entries: Vec<(&String, &StoredValue)> = writes.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let keys: Vec<&[u8]> = entries.iter().map(|(key, _)| key.as_bytes()).collect();
        let values: Vec<&str> = entries.iter().map(|(_, value)| value.json()).collect();
        let written: i64 = entries
            .iter()
            .map(|(key, value)| stored_entry_bytes(key, value) as i64)
            .sum();
        let tenant = key.owner();
        let failed = |error| self.failed("commit stored values to", error);
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(failed)?;
        let (lock_tenant, write) = tokio::try_join!(
            // Creates the tenant's row if need be, and locks it until the commit: the commits of
            // one tenant take turns here.
            transaction.prepare_cached(
                "INSERT INTO codemode_tenant_bytes (tenant, bytes) VALUES ($1, 0)
                 ON CONFLICT (tenant) DO UPDATE SET bytes = codemode_tenant_bytes.bytes",
            ),
            // Runs after the lock is taken, so its snapshot holds every earlier commit of the
            // tenant and no other can change these rows: what it reads is what it replaces.
            transaction.prepare_cached(
                "WITH written AS (
                     SELECT key, value, position
                     FROM UNNEST($2::bytea[], $3::text[]) WITH ORDINALITY AS w(key, value, position)
                 ), replaced AS (
                     SELECT coalesce(sum(octet_length(stored.key) + octet_length(stored.value)), 0)
                         AS bytes
                     FROM codemode_stored_values AS stored JOIN written USING (key)
                     WHERE stored.session = $1
                 ), upserted AS (
                     INSERT INTO codemode_stored_values (session, key, value)
                     SELECT $1, key, value FROM written ORDER BY position
                     ON CONFLICT (session, key)
                     DO UPDATE SET value = EXCLUDED.value, committed_at = now()
                 )
                 UPDATE codemode_tenant_bytes
                 SET bytes = greatest(bytes + $5 - (SELECT bytes FROM replaced), 0)
                 WHERE tenant = $4
                 RETURNING bytes, $5 - (SELECT bytes FROM replaced)",
            ),
        )
        .map_err(failed)?;
        // Sent together; the database runs them in order.
        let (tenant_only, rows) = (
            [&tenant as _],
            [
                &session as _,
                &keys as _,
                &values as _,
                &tenant as _,
                &written as _,
            ],
        );
        let (locked, counted) = tokio::join!(
            transaction.execute(&lock_tenant, &tenant_only),
            transaction.query_one(&write, &rows),
        );
        // The first error is the cause; a later statement only says the transaction had failed.
        locked.map_err(failed)?;
        let counted = counted.map_err(failed)?;
        let (after, grown): (i64, i64) = (counted.get(0), counted.get(1));
        if let Some(limit) = self.bytes_per_tenant
            && grown > 0
            && after as u64 > limit
        {
            // Nothing of it stays.
            transaction.rollback().await.map_err(failed)?;
            return Err(StoreError::of(
                StoreErrorKind::TooLarge,
                format!(
                    "the stored values of tenant {tenant:?} would hold {after} bytes across every \
                     server sharing the database, past its limit of {limit} bytes; store less \
                     (overwrite keys with smaller values), or keep large data outside stored \
                     values"
                ),
            ));
        }
        transaction.commit().await.map_err(failed)
    }
}

/// One batch of a server's cell activity for [`PostgresStore::journal`].
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

/// What kind of store failure a database error is.
fn kind_of(error: &tokio_postgres::Error) -> StoreErrorKind {
    if error.is_closed() {
        return StoreErrorKind::Unavailable;
    }
    let Some(code) = error.code() else {
        // No SQL state: the connection or the protocol failed.
        return StoreErrorKind::Unavailable;
    };
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        StoreErrorKind::Conflict
    } else if *code == SqlState::PROGRAM_LIMIT_EXCEEDED
        || *code == SqlState::DISK_FULL
        || *code == SqlState::OUT_OF_MEMORY
    {
        StoreErrorKind::TooLarge
    } else if code.code().starts_with("08")
        || *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
        || *code == SqlState::TOO_MANY_CONNECTIONS
    {
        StoreErrorKind::Unavailable
    } else if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        StoreErrorKind::Corrupt
    } else {
        StoreErrorKind::Other
    }
}

/// A database error in one line: the server's message when it sent one, else the client's, with
/// what caused it.
fn describe_error(error: &tokio_postgres::Error) -> String {
    if let Some(database) = error.as_db_error() {
        return format!("{} ({})", database.message(), database.code().code());
    }
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

/// `user@host:port/database`, from a connection config (never its password).
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config.get_hosts().first().map_or_else(
        || "localhost".to_owned(),
        |host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        },
    );
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("?");
    let database = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{database}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_a_database_and_a_path_does_not() {
        assert!(is_database_url("postgres://codemode@db:5432/codemode"));
        assert!(is_database_url("postgresql://codemode@db/codemode"));
        assert!(!is_database_url("/var/lib/codemode"));
        assert!(!is_database_url("postgres"));
    }

    #[test]
    fn the_target_never_shows_the_password() {
        let config: tokio_postgres::Config = "postgres://alice:secret@db.internal:6432/values"
            .parse()
            .unwrap();
        assert_eq!(describe(&config), "alice@db.internal:6432/values");
    }

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

    #[test]
    fn migrations_reach_the_schema_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }
}
