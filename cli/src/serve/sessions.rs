//! The server's codemode sessions: what every request shares (`Shared`), who a request is
//! (`Identity`: tenant and session name), the sessions a client named (held by the server, reached
//! by any request that names them) and unnamed ones (held by their MCP session), opening one within
//! the limits, closing it when idle, and completion push.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_session::{OutputMode, Session, SessionEvent, SessionKey, Store};
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData, Peer, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::http;
use crate::setup::SessionArgs;

use super::cluster::Cluster;
use super::handler::{CodemodeServer, ServerState};
use super::limits::{ServerLimits, Slot, SlotsFull};
use super::registry::SessionRegistry;

/// The header an HTTP client names its session with, so its stored values persist across
/// reconnects and restarts.
pub(super) const SESSION_HEADER: &str = "x-codemode-session";

/// What every MCP session of this server shares.
pub(super) struct Shared {
    pub(super) args: SessionArgs,
    pub(super) store: Arc<dyn Store>,
    pub(super) tools: Arc<codemode_host_adapters::CompositeTools>,
    pub(super) limits: ServerLimits,
    /// The sessions open now, and what they hold under the limits.
    pub(super) sessions: SessionRegistry,
    /// This server's place in a cluster (`--advertise`), if it is in one.
    pub(super) cluster: Option<Arc<Cluster>>,
    /// Cancelled on SIGTERM or SIGINT.
    pub(super) shutting_down: CancellationToken,
}

impl Shared {
    /// Terminates every cell of every session and waits for them (stores finish their commits).
    pub(super) async fn shut_down_sessions(&self) {
        for live in self.sessions.live_sessions() {
            live.session.shutdown().await;
        }
    }
}

/// One open codemode session, whose tenant it is, when it was last used, and its `exec` tasks
/// (another session's task ids find nothing here).
pub(super) struct LiveSession {
    /// Its place under the session limits, given back when it closes.
    _slot: Slot,
    pub(super) session: Session,
    pub(super) tenant: String,
    pub(super) last_used: std::sync::Mutex<Instant>,
    pub(super) tasks: TaskManager,
    /// The cluster this server is in, told when the session closes.
    pub(super) cluster: Option<Arc<Cluster>>,
    /// The `wait` calls observing a cell now, by cell id.
    pub(super) waits: std::sync::Mutex<HashMap<String, WaitInFlight>>,
}

/// A `wait` call observing a cell: whether its client cancelled it, and when it let go.
#[derive(Clone)]
pub(super) struct WaitInFlight {
    /// The request's token, cancelled by the client's `notifications/cancelled`.
    cancelled: CancellationToken,
    /// Cancelled once the call stopped observing.
    released: CancellationToken,
}

/// Holds a cell's [`WaitInFlight`] entry while a `wait` observes it; dropping it lets go.
pub(super) struct WaitRegistration {
    live: Arc<LiveSession>,
    cell_id: String,
    released: CancellationToken,
}

impl Drop for WaitRegistration {
    fn drop(&mut self) {
        self.released.cancel();
        let mut waits = self
            .live
            .waits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if waits
            .get(&self.cell_id)
            .is_some_and(|wait| wait.released.is_cancelled())
        {
            waits.remove(&self.cell_id);
        }
    }
}

/// The longest a `wait` waits for a cancelled one to let go of its cell (it lets go as soon as
/// its task runs again).
const CANCELLED_WAIT_RELEASE: Duration = Duration::from_secs(2);

impl Drop for LiveSession {
    fn drop(&mut self) {
        if let Some(cluster) = &self.cluster {
            cluster.session_closed(self.session.id());
        }
    }
}

impl LiveSession {
    /// Registers a `wait` on `cell_id` whose request is cancelled by `cancelled`. A `wait` the
    /// client cancelled that has not let go of the cell yet is given the moment it needs first,
    /// so that the new one observes the cell instead of being told it is busy.
    pub(super) async fn start_wait(
        self: &Arc<Self>,
        cell_id: &str,
        cancelled: CancellationToken,
    ) -> WaitRegistration {
        let previous = self
            .waits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(cell_id)
            .cloned();
        if let Some(previous) = previous
            && previous.cancelled.is_cancelled()
        {
            let _ =
                tokio::time::timeout(CANCELLED_WAIT_RELEASE, previous.released.cancelled()).await;
        }
        let released = CancellationToken::new();
        let mut waits = self
            .waits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A wait still holding the cell keeps its entry (this one will be told the cell is busy).
        if waits
            .get(cell_id)
            .is_none_or(|holding| holding.released.is_cancelled())
        {
            waits.insert(
                cell_id.to_owned(),
                WaitInFlight {
                    cancelled,
                    released: released.clone(),
                },
            );
        }
        drop(waits);
        WaitRegistration {
            live: Arc::clone(self),
            cell_id: cell_id.to_owned(),
            released,
        }
    }

    pub(super) fn touch(&self) {
        *self
            .last_used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Instant::now();
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .elapsed()
    }
}

/// Whose stored values an MCP session uses: the store key of its codemode session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    /// Whose token the client holds (over stdio, the one local tenant).
    pub(super) tenant: String,
    /// Where its stored values are kept: the tenant's session of that name over HTTP, the
    /// `--session` of no tenant over stdio.
    pub(super) key: SessionKey,
    /// Whether the client named the session (X-Codemode-Session): then any request or MCP
    /// session that names it reaches it. An unnamed one lives and ends with its MCP session.
    pub(super) named: bool,
}

impl Identity {
    /// The session's name as the client gave it (`X-Codemode-Session`), if it named one.
    pub(super) fn session_name(&self) -> Option<&str> {
        self.named.then_some(self.key.name.as_str())
    }

    /// Over stdio, the parent process owns the server: `--session` names the values. Over HTTP,
    /// the tenant of the token, and the session the client names in `X-Codemode-Session` or a
    /// fresh, unguessable one.
    pub(super) fn of(
        shared: &Shared,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Self, ErrorData> {
        let Some(parts) = extensions.get::<axum::http::request::Parts>() else {
            return Ok(Identity {
                tenant: LOCAL_TENANT.to_owned(),
                key: SessionKey::new(shared.args.session.clone()),
                named: false,
            });
        };
        let tenant = parts
            .extensions
            .get::<http::Tenant>()
            .map(|tenant| tenant.0.clone())
            .unwrap_or_else(|| http::ANONYMOUS_TENANT.to_owned());
        let (name, named) = match parts.headers.get(SESSION_HEADER) {
            Some(value) => {
                let name = value.to_str().unwrap_or_default();
                http::check_name("session", name)
                    .map_err(|message| ErrorData::invalid_request(message, None))?;
                (name.to_owned(), true)
            }
            None => (
                fresh_session_name().map_err(|error| {
                    ErrorData::internal_error(
                        format!("cannot make a session name: no randomness ({error})"),
                        None,
                    )
                })?,
                false,
            ),
        };
        Ok(Identity {
            key: SessionKey::of_tenant(tenant.clone(), name),
            tenant,
            named,
        })
    }
}

/// The tenant of a server over stdio: the parent process that owns it.
pub(super) const LOCAL_TENANT: &str = "local";

/// 128 random bits, as hex: a name no other client can guess.
pub(super) fn fresh_session_name() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(format!(
        "anonymous-{}",
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    ))
}

/// Completion push: tells the client about cells that finish while nobody waits on them, for as
/// long as the session lives.
pub(super) fn push_completions(session: &Session, peer: Peer<RoleServer>, threshold: LogThreshold) {
    let mut events = session.subscribe();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let SessionEvent::CellFinished {
                cell_id,
                error_text,
            } = event
            {
                let status = if error_text.is_some() {
                    "failed"
                } else {
                    "completed"
                };
                let message = format!(
                    "Cell {cell_id} {status} in the background; call wait with cell_id \"{cell_id}\" for its output."
                );
                if push_log(
                    &peer,
                    &threshold,
                    json!({"cell_id": cell_id, "status": status, "message": message}),
                )
                .await
                .is_err()
                {
                    break;
                }
            }
        }
    });
}

/// Who holds a session open: an MCP session (an unnamed session), or the server's registry of
/// named sessions, under its store key.
pub(super) enum Owner {
    McpSession(std::sync::Weak<tokio::sync::Mutex<ServerState>>),
    Server(std::sync::Weak<Shared>, SessionKey),
}

/// Closes a session nobody has used for `idle_timeout`: its cells are terminated and its
/// resources freed. It opens again (with the same stored values) on the next request that needs
/// it. Ends when the session or its owner is gone.
pub(super) async fn close_when_idle(
    owner: Owner,
    live: std::sync::Weak<LiveSession>,
    idle_timeout: Duration,
) {
    let check_every = (idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::time::sleep(check_every).await;
        let Some(session) = live.upgrade() else {
            return;
        };
        if session.idle_for() < idle_timeout {
            continue;
        }
        let released = match &owner {
            Owner::McpSession(state) => {
                let Some(state) = state.upgrade() else {
                    return;
                };
                let mut state = state.lock().await;
                let current = state
                    .live
                    .as_ref()
                    .is_some_and(|current| Arc::ptr_eq(current, &session));
                if current {
                    state.live = None;
                }
                current
            }
            Owner::Server(shared, key) => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                // Under its opening lock: a request that names it now opens a new one after.
                let opening = shared.sessions.opening_lock(key);
                let _opening = opening.lock().await;
                shared.sessions.remove_named(key, &session)
            }
        };
        if !released {
            return;
        }
        tracing::info!(
            idle_secs = idle_timeout.as_secs(),
            "closing a session that was idle past --idle-timeout-secs"
        );
        session.session.shutdown().await;
        return;
    }
}

#[allow(deprecated)]
/// Sends a log message (at level `info`) to the client, unless it asked for more severe ones
/// only. MCP logging is deprecated in the SDK, but it is still the one standard way for a server
/// to tell a client something unprompted.
pub(super) async fn push_log(
    peer: &Peer<RoleServer>,
    threshold: &LogThreshold,
    data: Value,
) -> Result<(), rmcp::ServiceError> {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
    if !threshold.allows(LoggingLevel::Info) {
        return Ok(());
    }
    let mut message = LoggingMessageNotificationParam::new(LoggingLevel::Info, data);
    message.logger = Some("codemode".to_owned());
    peer.notify_logging_message(message).await
}

/// The least severe level of log message one MCP session's client wants, as `logging/setLevel`
/// set it (every level until it does, as the specification leaves it to the server). Shared
/// between the handler and the tasks that push messages to that client.
#[derive(Clone, Default)]
pub(super) struct LogThreshold(Arc<std::sync::atomic::AtomicU8>);

#[allow(deprecated)]
impl LogThreshold {
    /// Messages at `level` and above are sent from now on.
    pub(super) fn set(&self, level: rmcp::model::LoggingLevel) {
        self.0
            .store(level as u8, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a message at `level` is sent.
    pub(super) fn allows(&self, level: rmcp::model::LoggingLevel) -> bool {
        level as u8 >= self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl CodemodeServer {
    /// The codemode session of this MCP session or request, opened on first use (and again
    /// after it idled out), within the server's session limits: a named one from the server's
    /// registry, an unnamed one from this MCP session's state.
    pub(super) async fn session(
        &self,
        extensions: &rmcp::model::Extensions,
        peer: &Peer<RoleServer>,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        let shared = &self.shared;
        if shared.shutting_down.is_cancelled() {
            return Err(ErrorData::internal_error(
                "the server is shutting down and starts nothing new",
                None,
            ));
        }
        let mut state = self.state.lock().await;
        let identity = Self::identity_in(&mut state, shared, extensions)?;
        if identity.named {
            drop(state);
            // An open session is found without waiting behind another one being opened.
            if let Some(live) = shared.sessions.named_session(&identity.key) {
                live.touch();
                return Ok(live);
            }
            let opening = shared.sessions.opening_lock(&identity.key);
            let _opening = opening.lock().await;
            if let Some(live) = shared.sessions.named_session(&identity.key) {
                live.touch();
                return Ok(live);
            }
            let live = self.open(&identity, peer).await?;
            shared.sessions.add_named(&identity.key, &live);
            tokio::spawn(close_when_idle(
                Owner::Server(Arc::downgrade(shared), identity.key.clone()),
                Arc::downgrade(&live),
                shared.limits.idle_timeout,
            ));
            return Ok(live);
        }
        if let Some(live) = &state.live {
            live.touch();
            return Ok(Arc::clone(live));
        }
        let live = self.open(&identity, peer).await?;
        tokio::spawn(close_when_idle(
            Owner::McpSession(Arc::downgrade(&self.state)),
            Arc::downgrade(&live),
            shared.limits.idle_timeout,
        ));
        state.live = Some(Arc::clone(&live));
        Ok(live)
    }

    /// Who this MCP session (or request) is: fixed at its first request.
    pub(super) async fn identity(
        &self,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Identity, ErrorData> {
        let mut state = self.state.lock().await;
        Self::identity_in(&mut state, &self.shared, extensions)
    }

    fn identity_in(
        state: &mut ServerState,
        shared: &Shared,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Identity, ErrorData> {
        if let Some(identity) = &state.identity {
            return Ok(identity.clone());
        }
        let identity = Identity::of(shared, extensions)?;
        state.identity = Some(identity.clone());
        Ok(identity)
    }

    /// Opens the codemode session of `identity`, within the server's session limits; completions
    /// of an unnamed session's cells are pushed to `peer`.
    pub(super) async fn open(
        &self,
        identity: &Identity,
        peer: &Peer<RoleServer>,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        let shared = &self.shared;
        let limits = &shared.limits;
        // The slot is reserved before anything is awaited, and given back if the open fails.
        let slot = shared
            .sessions
            .reserve_session(&identity.tenant)
            .map_err(|full| {
                ErrorData::internal_error(
                    match full {
                        SlotsFull::Server { held } => format!(
                            "the server already serves {held} sessions, its --max-sessions limit \
                             of {}; close one, or try again later",
                            limits.max_sessions
                        ),
                        SlotsFull::Tenant { held } => sessions_per_tenant_refusal(held, "", limits),
                    },
                    None,
                )
            })?;
        // In a cluster, the tenant's sessions on every server count (one named session open on
        // several servers is one session).
        if let Some(cluster) = &shared.cluster {
            match cluster.sessions_elsewhere(&identity.tenant).await {
                Ok(elsewhere) => {
                    let opening = identity.key.to_string();
                    let here: std::collections::HashSet<String> = shared
                        .sessions
                        .live_sessions()
                        .iter()
                        .filter(|live| live.tenant == identity.tenant)
                        .map(|live| live.session.id().to_owned())
                        .collect();
                    // This server's count (the new session's slot aside) is exact; a session
                    // open here and elsewhere, or the one being opened, is not another one.
                    let yours = shared
                        .sessions
                        .sessions_held_by(&identity.tenant)
                        .saturating_sub(1)
                        + elsewhere
                            .iter()
                            .filter(|key| !here.contains(*key) && **key != opening)
                            .count();
                    if yours >= limits.max_sessions_per_tenant {
                        return Err(ErrorData::internal_error(
                            sessions_per_tenant_refusal(yours, " across the cluster", limits),
                            None,
                        ));
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot count the cluster's sessions"),
            }
        }
        let mut config = shared.args.config();
        // A long-running server bounds what it buffers per cell (server output mode).
        config.output_mode = OutputMode::server();
        // Cells of different tenants never share an engine process.
        config.tenant = Some(identity.tenant.clone());
        // What this server holds in memory is bounded in all. A tenant's values are bounded here
        // too, unless a database holds them: it counts them across every server, as it commits.
        config.stored_bytes_budgets = vec![shared.sessions.stored_total()];
        if shared.args.database_url().is_none() {
            config
                .stored_bytes_budgets
                .push(shared.sessions.tenant_stored_budget(&identity.tenant));
        }
        // In a cluster, a cell's id names the server that runs it.
        config.cell_id_prefix = shared.cluster.as_ref().map(|cluster| cluster.id.clone());
        config.on_cell_activity = shared
            .cluster
            .as_ref()
            .map(|cluster| cluster.activity_hook());
        let session = shared
            .args
            .open(
                identity.key.clone(),
                Arc::clone(&shared.store),
                Arc::clone(&shared.tools),
                config,
            )
            .await
            .map_err(|error| ErrorData::internal_error(error.message, None))?;
        if let Some(cluster) = &shared.cluster {
            cluster.session_opened(&identity.key.to_string(), &identity.tenant);
        }
        let live = Arc::new(LiveSession {
            _slot: slot,
            session,
            tenant: identity.tenant.clone(),
            last_used: std::sync::Mutex::new(Instant::now()),
            tasks: TaskManager::new(),
            cluster: shared.cluster.clone(),
            waits: std::sync::Mutex::new(HashMap::new()),
        });
        shared.sessions.add_live(&live);
        // An unnamed session has one MCP session: it is told. A named one may have many, or
        // none (requests that stand alone): each MCP session subscribes when it starts.
        if !identity.named {
            push_completions(&live.session, peer.clone(), self.log_threshold.clone());
        }
        Ok(live)
    }
}

fn sessions_per_tenant_refusal(yours: usize, where_: &str, limits: &ServerLimits) -> String {
    format!(
        "your tenant already has {yours} sessions{where_}, the --max-sessions-per-tenant limit of \
         {}; close one, or try again later",
        limits.max_sessions_per_tenant
    )
}
