//! A session: the cells it owns, its stored values, its enabled tools, and the operations an
//! embedder (or the model-facing layer) calls on it (sessions).
//!
//! State lives in [`Shared`], behind one `Arc` that each cell's host also holds: the registry of
//! cells (id allocation, the active-cell limit, whether the session still accepts cells) and the
//! stored values, each behind its own small mutex that is never held across an await. A cell is in
//! the registry from its start until its terminal outcome has been delivered (or its actor closed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use codemode_cell_actor::{
    CellConfig, CellError, CellEvent, CellHandle, CellHost, CompletionClaim, CompletionCommit,
    Observation, StartedCell, ToolError, ToolErrorKind, ToolInvocation, start_cell,
};
use codemode_engine::{CellLimits, CellStart, Engine, EngineError, PendingMode};
use codemode_protocol::limits::MAX_SOURCE_BYTES;
use codemode_protocol::{ExecuteRequest, JsonText, StoredValues, ToolDefinition, WaitRequest};

use crate::stored::HeldValues;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::SessionConfig;
use crate::hints::error_hints;
use crate::ids::CellIds;
use crate::model::CellTicket;
use crate::ports::{
    SessionKey, Store, StoreError, ToolCallContext, ToolListError, ToolProgress, ToolProvider,
};
use crate::strip::{StrippedSource, strip_types};

/// How many session events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

/// What an observation of a cell returned.
#[derive(Debug, Clone, PartialEq)]
pub struct CellReport {
    /// The cell observed.
    pub cell_id: String,
    /// What the observation returned.
    pub event: CellEvent,
    /// How long the observation took.
    pub wall_time: Duration,
    /// For a failed cell: where in the source the error points (a code frame), and the closest
    /// tool names; each a paragraph of its own.
    pub error_hints: Vec<String>,
}

/// The result of `wait`: an observation, or no such cell (distinct from any error).
#[derive(Debug, Clone, PartialEq)]
pub enum WaitOutcome {
    /// The cell was observed (or terminated).
    Observed(CellReport),
    /// No cell with this id: never started, or its result was already delivered.
    NotFound {
        /// The id asked for.
        cell_id: String,
    },
}

/// Something a session tells its subscribers.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// A cell finished while nobody was observing it (completion push); `wait` returns its result.
    CellFinished {
        /// The cell.
        cell_id: String,
        /// Its error text, if it failed.
        error_text: Option<String>,
    },
    /// A cell called `notify`.
    Notification {
        /// The cell.
        cell_id: String,
        /// The request that started it.
        call_id: String,
        /// The message.
        text: String,
    },
}

/// Why a session operation failed. Each message carries its cause; none has a separate source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("the session is shut down and starts no more cells")]
    /// `shutdown` was called.
    ShutDown,
    #[error(
        "too many active cells: this session already has {limit} cells running or waiting to be \
         observed (the max_active_cells limit); wait for or terminate one before starting another"
    )]
    /// The active-cell limit is reached.
    TooManyCells {
        /// The limit.
        limit: usize,
    },
    #[error("this session has used every cell id and can start no more cells; open a new session")]
    /// Every cell id was used.
    CellIdsExhausted,
    /// The source is larger than a cell accepts.
    #[error(
        "the source is {size} bytes, more than the {limit} bytes a cell accepts; send smaller \
         code, and pass large data through tools or stored values"
    )]
    SourceTooLarge {
        /// The source's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// An observation or termination of a cell got no event.
    #[error("cell {cell_id}: {error}")]
    Cell {
        /// The cell's id.
        cell_id: String,
        /// What went wrong with it.
        error: CellError,
    },
    #[error(transparent)]
    /// The engine could not start the cell.
    Engine(#[from] EngineError),
    #[error("failed to load the session's stored values: {0}")]
    /// The store could not load the values.
    Store(StoreError),
    #[error("failed to list the session's tools: {0}")]
    /// The provider could not list its tools.
    Tools(ToolListError),
}

/// Everything a session and its cells' hosts share.
struct Shared {
    key: SessionKey,
    /// The key's text form, for logs and events.
    id: String,
    engine: Arc<dyn Engine>,
    store: Arc<dyn Store>,
    provider: Arc<dyn ToolProvider>,
    /// The tools as last listed; listed again before a cell starts when the provider's
    /// `tools_version` moved.
    tools: Mutex<ListedTools>,
    config: SessionConfig,
    /// The stored values as of the last commit, and what they cost; each cell starts with a
    /// reference to them.
    values: Mutex<HeldValues>,
    /// Held (asynchronously) across one cell's store commit and its merge into `values`, so that
    /// commits reach the store and `values` in the same order. Nothing else waits for it: starts,
    /// observations and terminations never touch it.
    commit_order: tokio::sync::Mutex<()>,
    registry: Mutex<Registry>,
    events: broadcast::Sender<SessionEvent>,
    /// The cells' actor tasks; `shutdown` waits for them.
    tasks: TaskTracker,
}

/// The provider's tools as of one listing.
struct ListedTools {
    version: u64,
    tools: Arc<[ToolDefinition]>,
    names: Arc<[String]>,
}

impl ListedTools {
    fn new(version: u64, tools: Vec<ToolDefinition>) -> Self {
        let names = tools.iter().map(ToolDefinition::global_name).collect();
        ListedTools {
            version,
            tools: tools.into(),
            names,
        }
    }
}

#[derive(Default)]
struct Registry {
    cells: HashMap<String, CellEntry>,
    /// Cells whose engine start is under way (no lock is held while an engine starts a cell):
    /// counted against the active-cell limit.
    starting: usize,
    ids: CellIds,
    shut_down: bool,
}

struct CellEntry {
    handle: CellHandle,
    /// The source as the engine ran it, for error hints.
    source: Arc<str>,
    /// What the embedder gave the cell to hold while it is registered.
    _ticket: Option<CellTicket>,
}

/// Sources up to this size have their types stripped on the async worker that starts the cell (a
/// few microseconds, less than a hop to a blocking thread); larger ones on a blocking thread.
const STRIP_ON_WORKER_BYTES: usize = 16 * 1024;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections here never panic; recover the data anyway rather than spread a panic.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A session: create it with [`Session::open`], give the model `exec` and `wait` through
/// [`Session::exec_tool`] and [`Session::wait_tool`], or call the operations directly. Dropping it
/// terminates its cells.
pub struct Session {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .field("tools", &lock(&self.shared.tools).names)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Opens session `key` (a name alone, or a [`SessionKey`] with its tenant): loads its stored
    /// values and lists its tools.
    pub async fn open(
        key: impl Into<SessionKey>,
        engine: Arc<dyn Engine>,
        store: Arc<dyn Store>,
        provider: Arc<dyn ToolProvider>,
        config: SessionConfig,
    ) -> Result<Self, SessionError> {
        let key = key.into();
        let id = key.to_string();
        let values = store.load(&key).await.map_err(SessionError::Store)?;
        let values = HeldValues::new(values, config.stored_bytes_budgets.clone());
        let version = provider.tools_version();
        let tools = provider.list_tools().await.map_err(SessionError::Tools)?;
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let registry = Registry {
            ids: CellIds::default().with_prefix(config.cell_id_prefix.clone()),
            ..Registry::default()
        };
        Ok(Session {
            shared: Arc::new(Shared {
                key,
                id,
                engine,
                store,
                provider,
                tools: Mutex::new(ListedTools::new(version, tools)),
                config,
                values: Mutex::new(values),
                commit_order: tokio::sync::Mutex::new(()),
                registry: Mutex::new(registry),
                events,
                tasks: TaskTracker::new(),
            }),
        })
    }

    /// The session's key, under which its values are stored.
    pub fn key(&self) -> &SessionKey {
        &self.shared.key
    }

    /// The text form of its key (`tenant/name`, or the name alone), as logs and events name it.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Its configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.shared.config
    }

    /// The tools cells of this session may call, as last listed.
    pub fn tools(&self) -> Arc<[ToolDefinition]> {
        Arc::clone(&lock(&self.shared.tools).tools)
    }

    /// Lists the tools again if the provider says they may have changed since the last listing
    /// (a downstream server's `tools/list_changed`, or a restart). A listing that fails keeps
    /// the tools as they were.
    async fn refresh_tools(&self) {
        let shared = &self.shared;
        let version = shared.provider.tools_version();
        if lock(&shared.tools).version == version {
            return;
        }
        match shared.provider.list_tools().await {
            Ok(tools) => {
                tracing::info!(session = %shared.id, tools = tools.len(), "tools listed again");
                *lock(&shared.tools) = ListedTools::new(version, tools);
            }
            Err(error) => {
                tracing::warn!(session = %shared.id, %error, "cannot list the tools again; keeping the last listing");
            }
        }
    }

    /// The session's stored values now (shared, not copied).
    pub fn stored_values(&self) -> Arc<StoredValues> {
        Arc::clone(&lock(&self.shared.values).values)
    }

    /// The bytes (keys and JSON text) of the session's stored values now.
    pub fn stored_bytes(&self) -> usize {
        lock(&self.shared.values).bytes
    }

    /// How many cells are running or waiting to be observed.
    pub fn active_cells(&self) -> usize {
        lock(&self.shared.registry).cells.len()
    }

    /// Session events: cells that finished unobserved, and notifications.
    pub fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        self.shared.events.subscribe()
    }

    /// Starts a cell and observes it until its yield time (the yield defaults and grace apply).
    pub async fn execute(&self, request: ExecuteRequest) -> Result<CellReport, SessionError> {
        let yield_time = self.shared.config.exec_yield(request.yield_time_ms);
        self.start(request, Observation::yield_after(yield_time), None)
            .await
    }

    /// Starts a cell and observes it until its pending frontier (or its end).
    pub async fn execute_to_pending(
        &self,
        request: ExecuteRequest,
    ) -> Result<CellReport, SessionError> {
        self.start(request, Observation::pending_frontier(), None)
            .await
    }

    /// Observes a running cell again until its yield time, or terminates it.
    pub async fn wait(&self, request: WaitRequest) -> Result<WaitOutcome, SessionError> {
        if request.terminate {
            return self.terminate(&request.cell_id).await;
        }
        let yield_time = self.shared.config.wait_yield(request.yield_time_ms);
        self.observe(&request.cell_id, Observation::yield_after(yield_time))
            .await
    }

    /// Observes a running cell until its pending frontier (or its end).
    pub async fn wait_to_pending(&self, cell_id: &str) -> Result<WaitOutcome, SessionError> {
        self.observe(cell_id, Observation::pending_frontier()).await
    }

    /// Terminates a cell; its report carries every item produced before the kill.
    pub async fn terminate(&self, cell_id: &str) -> Result<WaitOutcome, SessionError> {
        let Some((handle, source)) = self.entry(cell_id) else {
            return Ok(WaitOutcome::NotFound {
                cell_id: cell_id.to_owned(),
            });
        };
        let began = Instant::now();
        tracing::info!(session = %self.shared.id, cell_id, "terminating cell");
        let answer = handle.terminate().await;
        self.conclude(cell_id, &source, answer, began)
    }

    /// Terminates every cell (CPU-bound ones too), waits until all have stopped, and refuses new
    /// cells from then on.
    pub async fn shutdown(&self) {
        let handles = self.close_registry();
        for handle in &handles {
            // The request takes effect at once; the answer is not needed.
            drop(handle.terminate());
        }
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        tracing::info!(session = %self.shared.id, cells = handles.len(), "session shut down");
    }

    fn close_registry(&self) -> Vec<CellHandle> {
        let mut registry = lock(&self.shared.registry);
        registry.shut_down = true;
        registry
            .cells
            .values()
            .map(|entry| entry.handle.clone())
            .collect()
    }

    /// The handle and source of a cell, taken before observing it: the cell may leave the
    /// registry while the observation runs.
    fn entry(&self, cell_id: &str) -> Option<(CellHandle, Arc<str>)> {
        lock(&self.shared.registry)
            .cells
            .get(cell_id)
            .map(|entry| (entry.handle.clone(), Arc::clone(&entry.source)))
    }

    /// Starts a cell, which holds `ticket` while it is registered (dropped at once if it does not
    /// start).
    pub(crate) async fn start(
        &self,
        request: ExecuteRequest,
        observation: Observation,
        ticket: Option<CellTicket>,
    ) -> Result<CellReport, SessionError> {
        let shared = &self.shared;
        let began = Instant::now();
        self.refresh_tools().await;
        if request.source.len() > MAX_SOURCE_BYTES {
            return Err(SessionError::SourceTooLarge {
                size: request.source.len(),
                limit: MAX_SOURCE_BYTES,
            });
        }
        // Another process may have committed to this session since: the cell starts from the
        // latest committed values (no lock is held while the store answers).
        if shared.store.shared_between_processes() {
            let latest = shared
                .store
                .load(&shared.key)
                .await
                .map_err(SessionError::Store)?;
            lock(&shared.values).refresh(latest);
        }
        // TypeScript is erased before the engine sees the source (positions kept), outside any
        // lock. Hints read the source as the model wrote it.
        let stripped = if request.source.len() <= STRIP_ON_WORKER_BYTES {
            strip_types(&request.source)
        } else {
            // Parsing a large source takes milliseconds: not on an async worker.
            let source = request.source.clone();
            tokio::task::spawn_blocking(move || strip_types(&source))
                .await
                .unwrap_or(Ok(StrippedSource::AsWritten))
        };
        let (cell_id, source, cell) = {
            let mut registry = lock(&shared.registry);
            if registry.shut_down {
                return Err(SessionError::ShutDown);
            }
            if registry.cells.len() + registry.starting >= shared.config.max_active_cells {
                return Err(SessionError::TooManyCells {
                    limit: shared.config.max_active_cells,
                });
            }
            let cell_id = registry
                .ids
                .allocate()
                .ok_or(SessionError::CellIdsExhausted)?;
            let source: Arc<str> = Arc::from(request.source.as_str());
            let runnable = match stripped {
                Ok(StrippedSource::Stripped(code)) => code,
                Ok(StrippedSource::AsWritten) => request.source,
                Err(unsupported) => {
                    drop(registry);
                    // The cell fails as a syntax error would, without running.
                    let event = CellEvent::Completed {
                        output: Default::default(),
                        error_text: Some(unsupported.error_text),
                        result_buffered_for: Duration::ZERO,
                    };
                    return match self.conclude(&cell_id, &source, Ok(event), began)? {
                        WaitOutcome::Observed(report) => Ok(report),
                        WaitOutcome::NotFound { cell_id } => Err(SessionError::Cell {
                            cell_id,
                            error: CellError::Closed,
                        }),
                    };
                }
            };
            registry.starting += 1;
            let cell = CellStart {
                tenant: shared.config.tenant.clone(),
                call_id: request.call_id.clone(),
                source: runnable,
                enabled_tools: lock(&shared.tools).tools.to_vec(),
                stored_values: Arc::clone(&lock(&shared.values).values),
                limits: CellLimits::default()
                    .with_heap_limit_bytes(shared.config.heap_limit_bytes)
                    .with_cpu_time_limit(shared.config.cpu_time_limit)
                    .with_max_tool_calls(shared.config.max_tool_calls),
                pending_mode: PendingMode::PauseUntilResumed,
            };
            (cell_id, source, cell)
        };
        // No lock is held while the engine starts the cell: an engine may have to start a process
        // for it, and other cells of the session go on meanwhile.
        let host = Arc::new(SessionCellHost {
            shared: Arc::clone(shared),
            cell_id: cell_id.clone(),
            tool_progress: cell_tool_progress(shared, &cell_id, &request.call_id),
            error_text: Mutex::new(None),
        });
        let config = CellConfig {
            output_mode: shared.config.output_mode,
            failure_handler: shared.config.on_runtime_failure.clone(),
        };
        let started = start_cell(&*shared.engine, cell, host, config, observation);
        let first_observation = {
            let mut registry = lock(&shared.registry);
            registry.starting -= 1;
            let StartedCell {
                handle,
                first_observation,
                task,
            } = started?;
            let span = tracing::info_span!("cell", session = %shared.id, cell_id = %cell_id);
            shared.tasks.spawn(task.instrument(span));
            if registry.shut_down {
                // The session shut down while the cell started: it ends at once.
                drop(handle.terminate());
                return Err(SessionError::ShutDown);
            }
            registry.cells.insert(
                cell_id.clone(),
                CellEntry {
                    handle,
                    source: Arc::clone(&source),
                    _ticket: ticket,
                },
            );
            // Under the registry's lock, which the cell's close takes too: heard before it.
            if let Some(hook) = &shared.config.on_cell_activity {
                hook(crate::CellActivity::CellStarted {
                    session: shared.id.clone(),
                    cell_id: cell_id.clone(),
                    tenant: shared.config.tenant.clone(),
                });
            }
            first_observation
        };
        tracing::info!(session = %shared.id, cell_id, "cell started");
        let answer = first_observation.await;
        match self.conclude(&cell_id, &source, answer, began)? {
            WaitOutcome::Observed(report) => Ok(report),
            // The cell's actor closed before answering its first observation.
            WaitOutcome::NotFound { cell_id } => Err(SessionError::Cell {
                cell_id,
                error: CellError::Closed,
            }),
        }
    }

    async fn observe(
        &self,
        cell_id: &str,
        observation: Observation,
    ) -> Result<WaitOutcome, SessionError> {
        let Some((handle, source)) = self.entry(cell_id) else {
            return Ok(WaitOutcome::NotFound {
                cell_id: cell_id.to_owned(),
            });
        };
        let began = Instant::now();
        let answer = handle.observe(observation).await;
        self.conclude(cell_id, &source, answer, began)
    }

    /// Turns an observation's answer into a report: removes a finished cell from the registry,
    /// adds error hints, and logs the outcome.
    fn conclude(
        &self,
        cell_id: &str,
        source: &str,
        answer: Result<CellEvent, CellError>,
        began: Instant,
    ) -> Result<WaitOutcome, SessionError> {
        let event = match answer {
            Ok(event) => event,
            // The cell ended and its result was delivered meanwhile: it is gone.
            Err(CellError::Closed) => {
                return Ok(WaitOutcome::NotFound {
                    cell_id: cell_id.to_owned(),
                });
            }
            Err(error) => {
                return Err(SessionError::Cell {
                    cell_id: cell_id.to_owned(),
                    error,
                });
            }
        };
        if event.is_terminal() {
            lock(&self.shared.registry).cells.remove(cell_id);
        }
        let error_hints = match &event {
            CellEvent::Completed {
                error_text: Some(error_text),
                ..
            } => error_hints(error_text, source, &lock(&self.shared.tools).names),
            _ => Vec::new(),
        };
        log_observation(&self.shared.id, cell_id, &event);
        Ok(WaitOutcome::Observed(CellReport {
            cell_id: cell_id.to_owned(),
            event,
            wall_time: began.elapsed(),
            error_hints,
        }))
    }
}

fn log_observation(session: &str, cell_id: &str, event: &CellEvent) {
    let items = event.output().entries().len();
    match event {
        CellEvent::Yielded { .. } => tracing::info!(session, cell_id, items, "cell yielded"),
        CellEvent::Pending {
            pending_tool_call_ids,
            ..
        } => tracing::info!(
            session,
            cell_id,
            items,
            pending_tool_calls = pending_tool_call_ids.len(),
            "cell at its pending frontier"
        ),
        CellEvent::Completed { error_text, .. } => tracing::info!(
            session,
            cell_id,
            items,
            failed = error_text.is_some(),
            "cell completed"
        ),
        CellEvent::Terminated { tool_calls, .. } => tracing::info!(
            session,
            cell_id,
            items,
            tool_calls = tool_calls.len(),
            "cell terminated"
        ),
        other => tracing::info!(session, cell_id, items, ?other, "cell observed"),
    }
}

impl Drop for Session {
    /// Dropping a session shuts it down: every cell is told to terminate at once (the actors
    /// finish in the background).
    fn drop(&mut self) {
        for handle in self.close_registry() {
            drop(handle.terminate());
        }
        self.shared.tasks.close();
    }
}

/// A cell's tool progress: published as the cell's notifications, which name the request that
/// started it, so its watchers hear a tool's progress as they hear `notify(...)`.
fn cell_tool_progress(shared: &Arc<Shared>, cell_id: &str, call_id: &str) -> ToolProgress {
    let events = shared.events.clone();
    let (cell_id, call_id) = (cell_id.to_owned(), call_id.to_owned());
    ToolProgress::new(move |text| {
        let _ = events.send(SessionEvent::Notification {
            cell_id: cell_id.clone(),
            call_id: call_id.clone(),
            text,
        });
    })
}

/// The host of one cell of a session.
struct SessionCellHost {
    shared: Arc<Shared>,
    cell_id: String,
    /// Where the cell's tools report progress (made once per cell, shared by its calls).
    tool_progress: ToolProgress,
    /// The error text of the cell's completion, kept for the completion notice.
    error_text: Mutex<Option<Option<String>>>,
}

impl CellHost for SessionCellHost {
    async fn invoke_tool(
        &self,
        invocation: ToolInvocation,
        cancellation: CancellationToken,
    ) -> Result<JsonText, ToolError> {
        let tool = invocation.name.global_name();
        if let Some(hook) = &self.shared.config.on_cell_activity {
            hook(crate::CellActivity::ToolCallStarted {
                session: self.shared.id.clone(),
                cell_id: self.cell_id.clone(),
                call_id: invocation.id.clone(),
                tool: tool.to_string(),
            });
        }
        let span = tracing::info_span!(
            "tool_call",
            session = %self.shared.id,
            cell_id = %self.cell_id,
            tool = %tool,
            call_id = %invocation.id,
        );
        let log_content = self.shared.config.log_content;
        async move {
            if log_content {
                tracing::debug!(input = ?invocation.input, "tool call input");
            }
            let began = Instant::now();
            let result = self
                .shared
                .provider
                .call_tool(
                    invocation,
                    ToolCallContext::new(cancellation.clone())
                        .with_progress(self.tool_progress.clone()),
                )
                .await;
            let duration_ms = began.elapsed().as_millis() as u64;
            let outcome = match (&result, cancellation.is_cancelled()) {
                (_, true) => "cancelled",
                (Ok(_), false) => "ok",
                (Err(error), false) => match error.kind {
                    ToolErrorKind::NotFound => "not found",
                    ToolErrorKind::InvalidArguments => "invalid arguments",
                    ToolErrorKind::Unavailable => "unavailable",
                    ToolErrorKind::Cancelled => "cancelled",
                    _ => "failed",
                },
            };
            tracing::info!(duration_ms, outcome, "tool call finished");
            if log_content {
                tracing::debug!(result = ?result, "tool call result");
            }
            result
        }
        .instrument(span)
        .await
    }

    async fn notify(&self, call_id: String, text: String, _cancellation: CancellationToken) {
        if self.shared.config.log_content {
            tracing::debug!(cell_id = %self.cell_id, text = %text, "notification");
        }
        // No subscriber is not an error: notifications are best effort.
        let _ = self.shared.events.send(SessionEvent::Notification {
            cell_id: self.cell_id.clone(),
            call_id,
            text,
        });
    }

    async fn commit_completion(&self, mut claim: CompletionClaim) -> CompletionCommit {
        let shared = &self.shared;
        *lock(&self.error_text) = Some(claim.error_text().map(str::to_owned));
        let writes = claim.take_stored_value_writes();
        if writes.is_empty() {
            return claim.publish();
        }
        // The outcome is already claimed: no lock of the session or the cell is held while the
        // store works, only the commit order (which nothing but other commits waits for).
        let _order = shared.commit_order.lock().await;
        // Only commits change the values, and they run one at a time: what is charged here is
        // what is applied below.
        let charged = lock(&shared.values).charge(&writes, shared.config.max_stored_bytes);
        let committed = match charged {
            Err(refused) => Err(refused),
            Ok(charge) => match shared.store.commit(&shared.key, &writes).await {
                Ok(()) => Ok((charge, writes)),
                Err(error) => {
                    tracing::error!(session = %shared.id, cell_id = %self.cell_id, %error, "failed to commit stored values");
                    Err(error)
                }
            },
        };
        match committed {
            Ok((charge, writes)) => {
                lock(&shared.values).apply(writes, charge);
                claim.publish()
            }
            Err(error) => {
                let note = format!("the cell's stored values could not be saved: {error}");
                let mut error_text = lock(&self.error_text);
                if let Some(text) = error_text.as_mut() {
                    *text = Some(match text.take() {
                        Some(existing) => format!("{existing}\n{note}"),
                        None => note.clone(),
                    });
                }
                drop(error_text);
                claim.publish_with_commit_failure(&note)
            }
        }
    }

    fn completed_unobserved(&self) {
        let error_text = lock(&self.error_text).take().flatten();
        tracing::info!(session = %self.shared.id, cell_id = %self.cell_id, "cell finished in the background");
        let _ = self.shared.events.send(SessionEvent::CellFinished {
            cell_id: self.cell_id.clone(),
            error_text,
        });
    }

    async fn closed(&self) {
        lock(&self.shared.registry).cells.remove(&self.cell_id);
        if let Some(hook) = &self.shared.config.on_cell_activity {
            hook(crate::CellActivity::CellClosed {
                session: self.shared.id.clone(),
                cell_id: self.cell_id.clone(),
            });
        }
    }
}
