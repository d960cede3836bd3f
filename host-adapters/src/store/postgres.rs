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
//!   (keys and JSON text, as the sessions count them), by the tenant of each session's
//!   [`SessionKey`] (a key of no tenant counts as its own). Every commit locks its
//!   tenant's row first, so the commits of one tenant take turns across every server, and the
//!   total stays exact; with [`PostgresStore::limit_bytes_per_tenant`], a commit that would take
//!   its tenant past the limit is refused whole ([`StoreErrorKind::TooLarge`]).
//! - **Loads.** Straight from the table: the store keeps no cache that another server could make
//!   stale ([`Store::shared_between_processes`] tells the session to load before each cell).
//! - **Failures.** A lost connection or a restarting database fails the calls it hits, as
//!   [`StoreErrorKind::Unavailable`]; the pool drops the dead connections and makes new ones when
//!   the database is back, so the server recovers without a restart.
//!
//! - **Cluster.** The registry of a cluster's servers and their journal live in the same
//!   database, beside the store: [`crate::PostgresCluster`] ([`PostgresStore::cluster`] shares
//!   this store's connections).
//!
//! Connections are plain TCP or a Unix socket (no TLS): run the database on the servers' private
//! network or on the same host.

use std::sync::Arc;
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

/// A pool of connections to one database holding codemode's schema: what the store and the
/// cluster's registry ([`crate::PostgresCluster`]) share.
pub(crate) struct Database {
    pool: Pool,
    /// Where the database is, without the password: for messages.
    target: String,
}

/// Stored values in a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresStore {
    database: Arc<Database>,
    /// The most stored bytes one tenant may hold, if limited.
    bytes_per_tenant: Option<u64>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.database.target)
            .finish_non_exhaustive()
    }
}

/// Whether `store` names a database (`postgres://…` or `postgresql://…`) rather than a directory.
pub fn is_database_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

impl Database {
    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, or
    /// any connection string `tokio-postgres` reads), and creates or upgrades its schema.
    pub(crate) async fn connect(url: &str) -> Result<Arc<Self>, StoreError> {
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
        let database = Database { pool, target };
        database.migrate().await?;
        Ok(Arc::new(database))
    }

    /// Where the database is (user, host, port, database; never the password).
    pub(crate) fn target(&self) -> &str {
        &self.target
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

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
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
    pub(crate) fn failed(&self, action: &str, error: tokio_postgres::Error) -> StoreError {
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

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, or
    /// any connection string `tokio-postgres` reads), and creates or upgrades its schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(PostgresStore {
            database: Database::connect(url).await?,
            bytes_per_tenant: None,
        })
    }

    /// The cluster registry in the same database, sharing this store's connections.
    pub fn cluster(&self) -> crate::PostgresCluster {
        crate::PostgresCluster::on(Arc::clone(&self.database))
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
        let client = self.database.client().await?;
        let row = client
            .query_opt(
                "SELECT bytes FROM codemode_tenant_bytes WHERE tenant = $1",
                &[&tenant],
            )
            .await
            .map_err(|error| {
                self.database
                    .failed("read a tenant's stored bytes from", error)
            })?;
        Ok(row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64))
    }

    /// Where the database is (user, host, port, database; never the password).
    pub fn target(&self) -> &str {
        self.database.target()
    }

    /// The schema version the database has now (0: none yet).
    pub async fn schema_version(&self) -> Result<i32, StoreError> {
        let client = self.database.client().await?;
        let exists: bool = client
            .query_one(
                "SELECT to_regclass('codemode_schema_version') IS NOT NULL",
                &[],
            )
            .await
            .map_err(|error| self.database.failed("read the schema version of", error))?
            .get(0);
        if !exists {
            return Ok(0);
        }
        let row = client
            .query_opt("SELECT version FROM codemode_schema_version", &[])
            .await
            .map_err(|error| self.database.failed("read the schema version of", error))?;
        Ok(row.map_or(0, |row| row.get(0)))
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn load(&self, key: &SessionKey) -> Result<StoredValues, StoreError> {
        let session = key.to_string();
        let session = session.as_str();
        let client = self.database.client().await?;
        let statement = client
            .prepare_cached("SELECT key, value FROM codemode_stored_values WHERE session = $1")
            .await
            .map_err(|error| self.database.failed("read stored values from", error))?;
        let rows = client
            .query(&statement, &[&session])
            .await
            .map_err(|error| self.database.failed("read stored values from", error))?;
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
                        self.database.target
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
                        self.database.target
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

    async fn check(&self) -> Result<(), StoreError> {
        let client = self.database.client().await?;
        client
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|error| self.database.failed("query", error))
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
        let failed = |error| self.database.failed("commit stored values to", error);
        let mut client = self.database.client().await?;
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
    fn migrations_reach_the_schema_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }
}
