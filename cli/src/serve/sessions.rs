//! The server's codemode sessions: what every request shares (`Shared`), what one MCP session
//! holds (`McpSessionState`), the sessions a client named (held by the server, reached by any
//! request that names them) and unnamed ones (held by their MCP session), opening one within the
//! limits, admitting its cells, and closing it when idle.

use std::sync::Arc;
use std::time::Duration;

use codemode_session::{OutputMode, SessionKey, Store, Tenant};
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData, Peer, RoleServer};
use tokio_util::sync::CancellationToken;

use crate::setup::SessionArgs;

use super::admission::{Admitted, admit};
use super::cluster::Cluster;
use super::identity::Identity;
use super::limits::{ServerLimits, Slot};
use super::live::LiveSession;
use super::push::{LogThreshold, push_completions};
use super::registry::SessionRegistry;

/// What every MCP session of this server shares.
pub(super) struct Shared {
    pub(super) args: SessionArgs,
    pub(super) store: Arc<dyn Store>,
    pub(super) tools: Arc<codemode_host_adapters::CompositeTools>,
    /// Where the tools came from, and the user's rules for the calls cells make (the
    /// configuration's `permissions`); read again on SIGHUP or when the file changes.
    pub(super) toolset: Arc<crate::toolset::ToolSet>,
    /// How long a `wait` with nothing new holds on (`--max-wait-ms`); `None`: not at all.
    pub(super) max_wait: Option<Duration>,
    /// Seals the request state of approvals asked of 2026-07-28 clients (a key of this run's).
    pub(super) request_state: rmcp::model::RequestStateCodec,
    pub(super) limits: ServerLimits,
    /// The sessions open now, and what they hold under the limits.
    pub(super) sessions: SessionRegistry,
    /// This server's place in a cluster (`--advertise`), if it is in one.
    pub(super) cluster: Option<Arc<Cluster>>,
    /// `--trace-content`: model-written content goes into traces (and debug logs).
    pub(super) trace_content: bool,
    /// The `tools/call` requests being answered now: a drain waits for them too, so that the
    /// `wait` that observes a cell's end gets its answer out.
    pub(super) calls_in_flight: std::sync::atomic::AtomicUsize,
    /// The HTTP requests whose responses are not sent whole yet: a drain waits for them, so that
    /// closing the MCP sessions cannot cut an answer off on its way out.
    pub(super) answering: crate::http::Answering,
    /// Cancelled on SIGTERM: the server drains (opens no session and starts no cell, answers
    /// `/readyz` with 503, lets running cells finish) until `shutting_down`.
    pub(super) draining: CancellationToken,
    /// Cancelled when the drain ends, or at once on SIGINT or a second SIGTERM: every cell left
    /// is terminated and the server stops.
    pub(super) shutting_down: CancellationToken,
}

/// What one MCP session holds: who it is (fixed at its first request) and, for a session the
/// client did not name, its codemode session while open (closed after the idle timeout, opened
/// again on the next request). A named session lives in the server's [`SessionRegistry`]
/// instead.
#[derive(Default)]
pub(super) struct McpSessionState {
    pub(super) identity: Option<Identity>,
    pub(super) live: Option<Arc<LiveSession>>,
}

impl Shared {
    /// The configuration of a session of this server: the flags' limits and the user's
    /// permissions.
    pub(super) fn config(&self) -> codemode_session::SessionConfig {
        let mut config = self.args.config();
        config.permissions = self.toolset.permissions();
        config.max_wait = self.max_wait;
        config.log_content = self.trace_content;
        config
    }

    /// How many cells run now, in every session.
    pub(super) fn running_cells(&self) -> usize {
        self.sessions
            .live_sessions()
            .iter()
            .map(|live| live.session.running_cells())
            .sum()
    }

    /// How many cells are registered now, in every session: running, or ended with a result
    /// not yet collected.
    pub(super) fn cells_to_collect(&self) -> usize {
        self.sessions
            .live_sessions()
            .iter()
            .map(|live| live.session.active_cells())
            .sum()
    }

    /// Whether a drain is done: no cell runs or has a result to collect, and no call is being
    /// answered or its response sent.
    pub(super) fn drained(&self) -> bool {
        let calls = self
            .calls_in_flight
            .load(std::sync::atomic::Ordering::Acquire);
        self.running_cells() == 0
            && self.cells_to_collect() == 0
            && calls == 0
            && self.answering.open() == 0
    }

    /// Terminates every cell of every session and waits for them (stores finish their commits).
    pub(super) async fn shut_down_sessions(&self) {
        for live in self.sessions.live_sessions() {
            live.session.shutdown().await;
        }
    }
}

/// Who holds a session open: an MCP session (an unnamed session), or the server's registry of
/// named sessions, under its store key.
pub(super) enum Owner {
    McpSession(std::sync::Weak<tokio::sync::Mutex<McpSessionState>>),
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

impl Shared {
    /// The codemode session of the MCP session whose state is `state` (or of a request), opened
    /// on first use (and again after it idled out), within the server's session limits: a named
    /// one from the server's registry, an unnamed one from the MCP session's state. Completions
    /// of an unnamed session's cells are pushed to `peer` at `threshold`.
    pub(super) async fn session(
        self: &Arc<Self>,
        state: &Arc<tokio::sync::Mutex<McpSessionState>>,
        extensions: &rmcp::model::Extensions,
        peer: &Peer<RoleServer>,
        threshold: &LogThreshold,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        if self.shutting_down.is_cancelled() {
            return Err(ErrorData::internal_error(
                "the server is shutting down and starts nothing new",
                None,
            ));
        }
        let mut held = state.lock().await;
        let identity = self.identity_in(&mut held, extensions)?;
        if identity.named {
            drop(held);
            return self.named_session(&identity, peer, threshold).await;
        }
        if let Some(live) = &held.live {
            live.touch();
            return Ok(Arc::clone(live));
        }
        self.refuse_while_draining()?;
        let live = self.open(&identity, peer, threshold).await?;
        tokio::spawn(close_when_idle(
            Owner::McpSession(Arc::downgrade(state)),
            Arc::downgrade(&live),
            self.limits.idle_timeout,
        ));
        held.live = Some(Arc::clone(&live));
        Ok(live)
    }

    /// The named session of `identity`: found open without waiting behind another one being
    /// opened, or opened once however many requests name it at once (single-flight per key).
    async fn named_session(
        self: &Arc<Self>,
        identity: &Identity,
        peer: &Peer<RoleServer>,
        threshold: &LogThreshold,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        if let Some(live) = self.sessions.named_session(&identity.key) {
            live.touch();
            return Ok(live);
        }
        let opening = self.sessions.opening_lock(&identity.key);
        let _opening = opening.lock().await;
        if let Some(live) = self.sessions.named_session(&identity.key) {
            live.touch();
            return Ok(live);
        }
        self.refuse_while_draining()?;
        let live = self.open(identity, peer, threshold).await?;
        self.sessions.add_named(&identity.key, &live);
        tokio::spawn(close_when_idle(
            Owner::Server(Arc::downgrade(self), identity.key.clone()),
            Arc::downgrade(&live),
            self.limits.idle_timeout,
        ));
        Ok(live)
    }

    /// While the server drains for shutdown, it opens no session and starts no cell (the open
    /// sessions still answer `wait`, so their running cells can be followed to their end).
    fn refuse_while_draining(&self) -> Result<(), ErrorData> {
        if self.draining.is_cancelled() {
            return Err(ErrorData::internal_error(
                "the server is shutting down: it lets running cells finish and starts nothing \
                 new; send this to another server, or retry once it is back",
                None,
            ));
        }
        Ok(())
    }

    /// Who the MCP session whose state is `state` (or a request) is: fixed at its first request.
    pub(super) async fn identity(
        &self,
        state: &tokio::sync::Mutex<McpSessionState>,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Identity, ErrorData> {
        let mut held = state.lock().await;
        self.identity_in(&mut held, extensions)
    }

    fn identity_in(
        &self,
        state: &mut McpSessionState,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Identity, ErrorData> {
        if let Some(identity) = &state.identity {
            return Ok(identity.clone());
        }
        let identity = Identity::of(&self.args.session, extensions)?;
        state.identity = Some(identity.clone());
        Ok(identity)
    }

    /// Opens the codemode session of `identity`, within the server's session limits; completions
    /// of an unnamed session's cells are pushed to `peer`.
    async fn open(
        &self,
        identity: &Identity,
        peer: &Peer<RoleServer>,
        threshold: &LogThreshold,
    ) -> Result<Arc<LiveSession>, ErrorData> {
        // In a cluster, the tenant's sessions on every server count (one named session open on
        // several servers is one session, and so is the one being opened).
        let elsewhere = async {
            let cluster = self.cluster.as_ref()?;
            Some(
                cluster
                    .sessions_elsewhere(&identity.tenant)
                    .await
                    .map(|elsewhere| {
                        let opening = identity.key.to_string();
                        let here: std::collections::HashSet<String> = self
                            .sessions
                            .live_sessions()
                            .iter()
                            .filter(|live| live.tenant == identity.tenant)
                            .map(|live| live.session.id().to_owned())
                            .collect();
                        elsewhere
                            .iter()
                            .filter(|key| !here.contains(*key) && **key != opening)
                            .count()
                    }),
            )
        };
        let slot = admit(
            Admitted::Session,
            &self.limits,
            self.sessions.session_slots(),
            &identity.tenant,
            elsewhere,
        )
        .await?;
        let mut config = self.config();
        // A long-running server bounds what it buffers per cell (server output mode).
        config.output_mode = OutputMode::server();
        // Cells of different tenants never share an engine process.
        config.tenant = Some(identity.tenant.clone());
        // What this server holds in memory is bounded in all. A tenant's values are bounded here
        // too, unless a database holds them: it counts them across every server, as it commits.
        config.stored_bytes_budgets = vec![self.sessions.stored_total()];
        if self.args.database_url().is_none() {
            config
                .stored_bytes_budgets
                .push(self.sessions.tenant_stored_budget(&identity.tenant));
        }
        // In a cluster, a cell's id names the server that runs it.
        config.cell_id_prefix = self.cluster.as_ref().map(|cluster| cluster.id.clone());
        // Metrics hear what the cells do; then, in a cluster, the journal.
        config.on_cell_activity = Some(
            crate::telemetry::metrics::metrics()
                .activity_hook(self.cluster.as_ref().map(|cluster| cluster.activity_hook())),
        );
        let session = self
            .args
            .open(
                identity.key.clone(),
                Arc::clone(&self.store),
                Arc::clone(&self.tools),
                config,
            )
            .await
            .map_err(|error| ErrorData::internal_error(error.message, None))?;
        if let Some(cluster) = &self.cluster {
            cluster.session_opened(&identity.key.to_string(), &identity.tenant);
        }
        let live = Arc::new(LiveSession::new(
            slot,
            session,
            identity.tenant.clone(),
            TaskManager::new(),
            self.cluster.clone(),
        ));
        self.sessions.add_live(&live);
        // An unnamed session has one MCP session: it is told. A named one may have many, or
        // none (requests that stand alone): each MCP session subscribes when it starts.
        if !identity.named {
            push_completions(&live.session, peer.clone(), threshold.clone());
        }
        Ok(live)
    }

    /// Reserves a slot for a new cell of `tenant`, refused when the server runs its --max-cells
    /// limit of cells already, or the tenant its share: in a cluster, the tenant's cells on every
    /// server count (as the other servers last journaled them); the --max-cells limit is each
    /// server's own. The new cell holds the slot while its session counts it.
    pub(super) async fn admit_cell(&self, tenant: &Tenant) -> Result<Slot, ErrorData> {
        self.refuse_while_draining()?;
        let elsewhere = async {
            let cluster = self.cluster.as_ref()?;
            Some(
                cluster
                    .cells_elsewhere(tenant)
                    .await
                    .map(|(elsewhere, _)| elsewhere),
            )
        };
        admit(
            Admitted::Cell,
            &self.limits,
            self.sessions.cell_slots(),
            tenant,
            elsewhere,
        )
        .await
    }
}
