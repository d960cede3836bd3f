//! Routing between the servers of a cluster (`--advertise URL`, `--cluster-token-file`, a
//! PostgreSQL `--store`): a running cell cannot move, so a `wait` that reaches another server is
//! forwarded to the one that runs the cell.
//!
//! Each server registers in the database with the address it serves and a lease it renews every
//! third of the lease; its cells' ids start with its id (`<server>-<n>`). A `wait` for a cell of
//! another server looks that server up: if its lease runs, the call is forwarded there, with the
//! cluster token and the tenant it is for (never a tenant's token), and its answer returned as it
//! is; if its lease ran out, the answer says at once that the server stopped and what that means.
//! A forwarded request is never forwarded again. A server stopped with SIGTERM ends its lease as it
//! leaves.
//!
//! The cluster also keeps a journal: sessions tell `SessionConfig::on_cell_activity` of each cell
//! that starts, each tool call it starts and each cell that closes, and the server writes that in
//! batches (`codemode_cells`, `codemode_tool_calls`), with the sessions it opens and closes
//! (`codemode_open_sessions`). A `wait` for a cell of a server whose lease ran out lists the tool
//! calls the cell had started; admission counts a tenant's cells and sessions on the other servers
//! from the same journal. A tenant's stored bytes are counted by the database store itself, exactly
//! across servers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_host_adapters::{JournalBatch, PostgresCluster};
use codemode_protocol::CellId;
use codemode_session::{CellActivity, StoreError, Tenant};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::http;

use super::args::McpArgs;
use super::identity::{Identity, SESSION_HEADER};

/// The header that marks a request one server forwarded to another.
pub(super) const FORWARDED_HEADER: &str = "x-codemode-forwarded";

/// How long a forwarded call may take beyond the wait it carries.
const FORWARD_MARGIN: Duration = Duration::from_secs(30);

/// How long the journal of tool calls gathers activity before it writes it (one transaction).
const JOURNAL_INTERVAL: Duration = Duration::from_millis(50);

/// How long the cluster remembers a server after its lease ran out (so that `wait` on one of its
/// cells can still say which tool calls it had started), and how often a server forgets those gone
/// longer.
const GONE_SERVER_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
const FORGET_GONE_SERVERS_EVERY: Duration = Duration::from_secs(60 * 60);

/// How long the journal waits before it tries a batch the database refused again.
const JOURNAL_RETRY: Duration = Duration::from_millis(500);

/// This server's place in a cluster.
pub(super) struct Cluster {
    /// Its id: 12 hex digits, the prefix of its cells' ids.
    pub(super) id: String,
    registry: PostgresCluster,
    /// What servers of the cluster present to one another.
    token: String,
    lease: Duration,
    /// Where the sessions' activity goes, for the journal writer.
    journal: tokio::sync::mpsc::UnboundedSender<Activity>,
    /// How many live sessions this server has under each session key, journaled under its lock.
    open_sessions: parking_lot::Mutex<Instances>,
}

/// How many instances of each session are open on this server. A named session closed for
/// idleness may still be dropping while a request opens it again: the session is journaled open
/// with its first instance and closed with its last, so the two cannot cross.
#[derive(Default)]
struct Instances(HashMap<String, usize>);

impl Instances {
    /// Counts one more instance of `session`; whether it is the first.
    fn opened(&mut self, session: &str) -> bool {
        let instances = self.0.entry(session.to_owned()).or_default();
        *instances += 1;
        *instances == 1
    }

    /// Counts one instance of `session` fewer; whether that was the last.
    fn closed(&mut self, session: &str) -> bool {
        let Some(instances) = self.0.get_mut(session) else {
            return false;
        };
        *instances -= 1;
        if *instances > 0 {
            return false;
        }
        self.0.remove(session);
        true
    }
}

/// What the journal writer records.
pub(super) enum Activity {
    /// What a session's cells did.
    Cell(CellActivity),
    /// This server opened a session of a tenant.
    SessionOpened { session: String, tenant: Tenant },
    /// This server closed a session.
    SessionClosed { session: String },
}

impl Cluster {
    /// Joins the cluster when `--advertise` is given: checks the flags that go with it, and
    /// registers this server. `None` without `--advertise`.
    pub(super) async fn join(args: &McpArgs) -> Result<Option<Arc<Cluster>>, String> {
        let Some(address) = &args.advertise else {
            if args.cluster_token_file.is_some() {
                return Err(
                    "--cluster-token-file is for a server in a cluster: give --advertise \
                            URL too"
                        .to_owned(),
                );
            }
            return Ok(None);
        };
        if args.http.is_none() {
            return Err(
                "--advertise is for a server over HTTP: give --http ADDRESS too".to_owned(),
            );
        }
        let url = args.session.database_url().ok_or_else(|| {
            "a cluster shares its sessions through PostgreSQL: give --store \
                 postgres://USER@HOST:PORT/DATABASE with --advertise"
                .to_owned()
        })?;
        let token_file = args.cluster_token_file.as_deref().ok_or_else(|| {
            "the servers of a cluster authenticate one another with a shared secret: give \
             --cluster-token-file FILE (the same file on every server)"
                .to_owned()
        })?;
        let token = http::read_secret(token_file)?;
        let registry = PostgresCluster::connect(url)
            .await
            .map_err(|error| error.to_string())?;
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes)
            .map_err(|error| format!("cannot make a server id: no randomness ({error})"))?;
        let id: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let lease = Duration::from_secs(args.lease_secs.max(1));
        registry
            .join(&id, address, lease)
            .await
            .map_err(|error| error.to_string())?;
        tracing::info!(server = %id, %address, "joined the cluster");
        let (journal, activity) = tokio::sync::mpsc::unbounded_channel();
        let cluster = Arc::new(Cluster {
            id,
            registry,
            token,
            lease,
            journal,
            open_sessions: parking_lot::Mutex::default(),
        });
        tokio::spawn(write_journal(Arc::clone(&cluster), activity));
        Ok(Some(cluster))
    }

    /// What the sessions tell of their cells' tool calls and ends: journaled in the database, so
    /// that the rest of the cluster can say what a cell had started if this server dies.
    pub(super) fn activity_hook(&self) -> codemode_session::CellActivityHook {
        let journal = self.journal.clone();
        Arc::new(move |activity| {
            let _ = journal.send(Activity::Cell(activity));
        })
    }

    /// Journals that this server opened a session of `tenant` (when no other instance of it is
    /// open here).
    pub(super) fn session_opened(&self, session: &str, tenant: &Tenant) {
        let mut open = self.open_sessions.lock();
        if open.opened(session) {
            let _ = self.journal.send(Activity::SessionOpened {
                session: session.to_owned(),
                tenant: tenant.clone(),
            });
        }
    }

    /// Journals that this server closed a session (when that was its last open instance here).
    pub(super) fn session_closed(&self, session: &str) {
        let mut open = self.open_sessions.lock();
        if open.closed(session) {
            let _ = self.journal.send(Activity::SessionClosed {
                session: session.to_owned(),
            });
        }
    }

    /// The sessions of `tenant` the other servers of the cluster have open (as last journaled).
    pub(super) async fn sessions_elsewhere(
        &self,
        tenant: &Tenant,
    ) -> Result<Vec<String>, StoreError> {
        self.registry.sessions_elsewhere(&self.id, tenant).await
    }

    /// The secret the gate admits other servers of the cluster with.
    pub(super) fn token(&self) -> String {
        self.token.clone()
    }

    /// Renews the lease every third of it until `stop` is cancelled; now and then, forgets the
    /// servers gone longer than [`GONE_SERVER_RETENTION`].
    pub(super) fn renew_until(self: &Arc<Self>, stop: CancellationToken) {
        let cluster = Arc::clone(self);
        tokio::spawn(async move {
            let mut last_forgot: Option<Instant> = None;
            loop {
                if last_forgot.is_none_or(|at| at.elapsed() >= FORGET_GONE_SERVERS_EVERY) {
                    last_forgot = Some(Instant::now());
                    match cluster
                        .registry
                        .forget_servers_gone_for(GONE_SERVER_RETENTION)
                        .await
                    {
                        Ok(0) => {}
                        Ok(forgotten) => {
                            tracing::info!(forgotten, "forgot servers gone for over a day");
                        }
                        Err(error) => {
                            tracing::warn!(%error, "cannot forget the servers that are gone");
                        }
                    }
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(cluster.lease / 3) => {}
                }
                if let Err(error) = cluster.registry.renew(&cluster.id, cluster.lease).await {
                    tracing::warn!(server = %cluster.id, %error, "cannot renew this server's lease");
                }
            }
        });
    }

    /// Ends this server's lease: the cluster knows at once that its cells are gone.
    pub(super) async fn leave(&self) {
        match self.registry.leave(&self.id).await {
            Ok(()) => tracing::info!(server = %self.id, "left the cluster"),
            Err(error) => tracing::warn!(server = %self.id, %error, "cannot leave the cluster"),
        }
    }

    /// How many cells the other servers of the cluster run: of `tenant`, and in all (as last
    /// journaled, a moment behind).
    pub(super) async fn cells_elsewhere(
        &self,
        tenant: &Tenant,
    ) -> Result<(usize, usize), StoreError> {
        self.registry.cells_elsewhere(&self.id, tenant).await
    }

    /// The id of the server that runs cell `cell_id`, when that is another server.
    pub(super) fn owner_of_cell(&self, cell_id: &str) -> Option<String> {
        let server = CellId::parse(cell_id)?.server()?.to_owned();
        self.another_server(server)
    }

    /// The id of the server whose task `task_id` is (this server's id, a dash, and rmcp's id
    /// of the task: see [`Cluster::public_task_id`]), when that is another server.
    pub(super) fn owner_of_task(&self, task_id: &str) -> Option<String> {
        let (server, _) = task_id.split_once('-')?;
        self.another_server(server.to_owned())
    }

    /// `server`, if it is a server id and not this server's.
    fn another_server(&self, server: String) -> Option<String> {
        (server != self.id && server.len() == 12 && server.bytes().all(|b| b.is_ascii_hexdigit()))
            .then_some(server)
    }

    /// Answers `wait` for a cell of server `owner`: forwarded there while its lease runs, or a
    /// clear error when it is gone.
    pub(super) async fn forward_wait(
        &self,
        owner: &str,
        identity: &Identity,
        cell_id: &str,
        arguments: Map<String, Value>,
        yield_time: Duration,
        progress: Option<ProgressRelay>,
    ) -> CallToolResult {
        let failed = |text: String| CallToolResult::error(vec![ContentBlock::text(text)]);
        let replica = match self.registry.replica(owner).await {
            Ok(Some(replica)) => replica,
            Ok(None) => return failed(format!("No cell with ID {cell_id}.")),
            Err(error) => {
                tracing::warn!(cell_id, %error, "cannot look up the server that runs a cell");
                return failed(format!(
                    "Cell {cell_id} runs on another server of this cluster, which cannot be found \
                     just now. Call wait with cell_id \"{cell_id}\" again in a few seconds."
                ));
            }
        };
        if !replica.alive {
            let started = match self
                .registry
                .tool_calls_of(&identity.key.to_string(), cell_id)
                .await
            {
                Ok(calls) if calls.is_empty() => {
                    " It had started no tool call that the cluster recorded.".to_owned()
                }
                Ok(calls) => format!(
                    " The tool calls it had started, which may or may not have taken effect: {}.",
                    calls
                        .iter()
                        .map(|(call, tool)| format!("tools.{tool} ({call})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(error) => {
                    tracing::warn!(cell_id, %error, "cannot read the tool calls of a lost cell");
                    " Which tool calls it had started cannot be read just now.".to_owned()
                }
            };
            tracing::info!(
                cell_id,
                server = %replica.address,
                lease_expired_at = %replica.lease_expires_at,
                "wait for a cell whose server has stopped"
            );
            return failed(format!(
                "Cell {cell_id} ran on another server of this cluster, which has stopped. What \
                 the cell showed before is all there is, and its stored values were not \
                 committed.{started} Run it again if you need its result."
            ));
        }
        let Some(name) = identity.session_name() else {
            return failed(format!("No cell with ID {cell_id}."));
        };
        let mut call = CallToolRequestParams::new("wait").with_arguments(arguments);
        // The owner reports progress to this server, which passes it on to the caller.
        if let Some(relay) = &progress {
            call.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
                relay.token.clone(),
            ));
        }
        let forwarded = self
            .forward(
                &replica.address,
                &identity.tenant,
                name,
                yield_time + FORWARD_MARGIN,
                Forwarder { progress },
                |peer| async move { peer.call_tool(call).await },
            )
            .await;
        match forwarded {
            Ok(result) => result,
            Err(error) => {
                tracing::warn!(cell_id, server = %replica.address, %error, "a forwarded wait got no answer");
                failed(format!(
                    "Cell {cell_id} runs on another server of this cluster, which did not answer. \
                     If that server has stopped, this is known within its lease; call wait with \
                     cell_id \"{cell_id}\" again in a few seconds."
                ))
            }
        }
    }

    /// The id rmcp knows a task of this server by: `task_id` without this server's prefix.
    pub(super) fn local_task_id<'a>(&self, task_id: &'a str) -> &'a str {
        task_id
            .strip_prefix(self.id.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .unwrap_or(task_id)
    }

    /// The id a client knows a task of this server by: rmcp's id with this server's prefix.
    pub(super) fn public_task_id(&self, local: &str) -> String {
        format!("{}-{local}", self.id)
    }

    /// Sends a task request (`tasks/get`, `tasks/cancel`, `tasks/update`) for a task of server
    /// `owner` there, and returns its answer; a clear error when that server is gone.
    pub(super) async fn forward_task<T, F, Fut>(
        &self,
        owner: &str,
        identity: &Identity,
        task_id: &str,
        request: F,
    ) -> Result<T, ErrorData>
    where
        F: FnOnce(rmcp::Peer<rmcp::RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        let unknown = || ErrorData::invalid_params(format!("unknown task: {task_id}"), None);
        let replica = match self.registry.replica(owner).await {
            Ok(Some(replica)) => replica,
            Ok(None) => return Err(unknown()),
            Err(error) => {
                tracing::warn!(task_id, %error, "cannot look up the server that runs a task");
                return Err(ErrorData::internal_error(
                    format!(
                        "task {task_id} runs on another server of this cluster, which cannot be \
                         found just now; ask again in a few seconds"
                    ),
                    None,
                ));
            }
        };
        if !replica.alive {
            return Err(ErrorData::internal_error(
                format!(
                    "task {task_id} ran on another server of this cluster, which has stopped. \
                     What its cell showed before is all there is, and its stored values were not \
                     committed. Run it again if you need its result."
                ),
                None,
            ));
        }
        let Some(name) = identity.session_name() else {
            return Err(unknown());
        };
        match self
            .forward(
                &replica.address,
                &identity.tenant,
                name,
                FORWARD_MARGIN,
                Forwarder::default(),
                request,
            )
            .await
        {
            Ok(answer) => Ok(answer),
            // The owner's own answer (an unknown task, say) is the answer.
            Err(Forwarded::Refused(error)) => Err(error),
            Err(error) => {
                tracing::warn!(task_id, server = %replica.address, %error, "a forwarded task request got no answer");
                Err(ErrorData::internal_error(
                    format!(
                        "task {task_id} runs on another server of this cluster, which did not \
                         answer; ask again in a few seconds"
                    ),
                    None,
                ))
            }
        }
    }

    /// Makes `request` of the server at `address`, for `tenant`'s session `name`, as a client of
    /// the 2026-07-28 revision (each request stands alone) that declares the tasks extension.
    async fn forward<T, F, Fut>(
        &self,
        address: &str,
        tenant: &Tenant,
        name: &str,
        time_limit: Duration,
        forwarder: Forwarder,
        request: F,
    ) -> Result<T, Forwarded>
    where
        F: FnOnce(rmcp::Peer<rmcp::RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
        let header = |value: &str| {
            axum::http::HeaderValue::from_str(value)
                .map_err(|error| Forwarded::Failed(format!("bad header: {error}")))
        };
        let mut config =
            StreamableHttpClientTransportConfig::with_uri(address).auth_header(self.token.clone());
        config.custom_headers.insert(
            axum::http::HeaderName::from_static(http::TENANT_HEADER),
            header(tenant.as_str())?,
        );
        config.custom_headers.insert(
            axum::http::HeaderName::from_static(SESSION_HEADER),
            header(name)?,
        );
        config.custom_headers.insert(
            axum::http::HeaderName::from_static(FORWARDED_HEADER),
            header(&self.id)?,
        );
        let call = async {
            let client = forwarder
                .serve_with_lifecycle(
                    StreamableHttpClientTransport::from_config(config),
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
                .map_err(|error| Forwarded::Failed(error.to_string()))?;
            let answer = request(client.peer().clone())
                .await
                .map_err(|error| match error {
                    rmcp::ServiceError::McpError(error) => Forwarded::Refused(error),
                    other => Forwarded::Failed(other.to_string()),
                });
            let _ = client.cancel().await;
            answer
        };
        tokio::time::timeout(time_limit, call)
            .await
            .map_err(|_| Forwarded::Failed("it took too long".to_owned()))?
    }
}

/// Why a forwarded request has no answer.
#[derive(Debug)]
enum Forwarded {
    /// The other server answered with an error.
    Refused(ErrorData),
    /// It could not be reached, or did not answer in time.
    Failed(String),
}

impl std::fmt::Display for Forwarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Forwarded::Refused(error) => write!(f, "{}", error.message),
            Forwarded::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// The client one server of the cluster is to another: it declares the tasks extension, so that
/// it may follow a client's `exec` task where its cell runs, and passes the progress the other
/// server reports on to the caller.
#[derive(Clone, Default)]
struct Forwarder {
    progress: Option<ProgressRelay>,
}

/// Where the progress of a forwarded call goes: the caller, under the token it gave.
#[derive(Clone)]
pub(super) struct ProgressRelay {
    pub(super) caller: Peer<RoleServer>,
    pub(super) token: rmcp::model::ProgressToken,
}

impl rmcp::ClientHandler for Forwarder {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let Some(relay) = &self.progress else {
            return;
        };
        let mut relayed = params;
        relayed.progress_token = relay.token.clone();
        if let Err(error) = relay.caller.notify_progress(relayed).await {
            tracing::debug!(%error, "cannot pass a forwarded call's progress on");
        }
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_tasks()
                .build(),
            rmcp::model::Implementation::new("codemode-cluster", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Whether a request was forwarded by another server of the cluster (it is never forwarded
/// again).
pub(super) fn was_forwarded(extensions: &rmcp::model::Extensions) -> bool {
    extensions
        .get::<axum::http::request::Parts>()
        .is_some_and(|parts| parts.headers.contains_key(FORWARDED_HEADER))
}

/// Writes the sessions' cell activity to the journal, gathered for [`JOURNAL_INTERVAL`] at a time
/// (so what happened in the last moment before a crash may be missing), until the cluster goes. A
/// batch the database refuses is kept, merged with what comes after, and tried again.
async fn write_journal(
    cluster: Arc<Cluster>,
    mut activity: tokio::sync::mpsc::UnboundedReceiver<Activity>,
) {
    let cluster = Arc::downgrade(&cluster);
    let mut batch = JournalBatch::default();
    loop {
        if batch.is_empty() {
            let Some(first) = activity.recv().await else {
                return;
            };
            add_to(&mut batch, first);
        }
        tokio::time::sleep(JOURNAL_INTERVAL).await;
        while let Ok(each) = activity.try_recv() {
            add_to(&mut batch, each);
        }
        if batch.is_empty() {
            continue;
        }
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        match cluster.registry.journal(&cluster.id, &batch).await {
            Ok(()) => batch = JournalBatch::default(),
            Err(error) => {
                tracing::warn!(%error, "cannot journal the cells' activity; trying again");
                tokio::time::sleep(JOURNAL_RETRY).await;
            }
        }
    }
}

/// Adds one piece of activity to the batch being gathered. A session opened and closed within one
/// batch cancel out, in either order, so the batch ends with the session's last state.
fn add_to(batch: &mut JournalBatch, activity: Activity) {
    match activity {
        Activity::Cell(CellActivity::CellStarted {
            session,
            cell_id,
            tenant,
        }) => batch.cells_started.push((
            session,
            cell_id.to_string(),
            tenant.map(|tenant| tenant.to_string()).unwrap_or_default(),
        )),
        Activity::Cell(CellActivity::ToolCallStarted {
            session,
            cell_id,
            call_id,
            tool,
        }) => batch
            .calls_started
            .push((session, cell_id.to_string(), call_id, tool)),
        Activity::Cell(CellActivity::CellClosed { session, cell_id }) => {
            batch.cells_closed.push((session, cell_id.to_string()));
        }
        Activity::Cell(_) => {}
        Activity::SessionOpened { session, tenant } => {
            batch.sessions_closed.retain(|closed| *closed != session);
            batch.sessions_opened.push((session, tenant.to_string()));
        }
        Activity::SessionClosed { session } => {
            batch
                .sessions_opened
                .retain(|(opened, _)| *opened != session);
            batch.sessions_closed.push(session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_open_from_its_first_instance_to_its_last() {
        let mut instances = Instances::default();
        assert!(instances.opened("alpha/work"));
        // Reopened while the instance closed for idleness is still dropping.
        assert!(!instances.opened("alpha/work"));
        assert!(!instances.closed("alpha/work"));
        assert!(instances.closed("alpha/work"));
        // A close of nothing open says nothing.
        assert!(!instances.closed("alpha/work"));
        assert!(instances.opened("alpha/work"));
    }

    #[test]
    fn a_session_opened_and_closed_within_one_batch_ends_in_its_last_state() {
        let opened = || Activity::SessionOpened {
            session: "alpha/work".to_owned(),
            tenant: Tenant::new("alpha"),
        };
        let closed = || Activity::SessionClosed {
            session: "alpha/work".to_owned(),
        };
        let mut batch = JournalBatch::default();
        add_to(&mut batch, opened());
        add_to(&mut batch, closed());
        assert!(batch.sessions_opened.is_empty());
        assert_eq!(batch.sessions_closed, ["alpha/work"]);
        add_to(&mut batch, opened());
        assert!(batch.sessions_closed.is_empty());
        assert_eq!(
            batch.sessions_opened,
            [("alpha/work".to_owned(), "alpha".to_owned())]
        );
    }
}
