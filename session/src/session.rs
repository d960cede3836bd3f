//! A session: the cells it owns, its stored values, its enabled tools, and the operations an
//! embedder (or the model-facing layer) calls on it (sessions).
//!
//! State lives in [`Shared`], behind one `Arc` that each cell's host also holds: the registry of
//! cells (id allocation, the active-cell limit, whether the session still accepts cells) and the
//! stored values, each behind its own small mutex that is never held across an await. A cell is in
//! the registry from its start until its terminal outcome has been delivered (or its actor closed).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_cell_actor::{
    CellConfig, CellError, CellEvent, CellHandle, Observation, ObservationFuture, StartedCell,
    start_cell,
};
use codemode_engine::{CellLimits, CellStart, Engine, PendingMode};
use codemode_protocol::limits::MAX_SOURCE_BYTES;
use codemode_protocol::{CellId, ExecuteRequest, StoredValues, ToolDefinition, WaitRequest};

use crate::stored::HeldValues;
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::cell_host::{SessionCellHost, cell_tool_progress};
use crate::config::SessionConfig;
use crate::error::SessionError;
use crate::gate::{CellGate, Gate};
use crate::hints::error_hints;
use crate::ids::CellIds;
use crate::ports::{SessionKey, Store, ToolProvider};
use crate::registry::{CellEntry, CellTicket, Registry};
use crate::report::{CellReport, SessionEvent, WaitOutcome};
use crate::shared::{ListedTools, Shared};
use crate::strip::{StrippedSource, UnsupportedTypeScript, strip_types};
use crate::user::UserChannel;
use tokio_util::sync::CancellationToken;

/// How many session events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

/// Sources up to this size have their types stripped on the async worker that starts the cell (a
/// few microseconds, less than a hop to a blocking thread); larger ones on a blocking thread.
const STRIP_ON_WORKER_BYTES: usize = 16 * 1024;

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
            .field("tools", &self.shared.tools.lock().names)
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
                values: Mutex::new(values),
                commit_order: tokio::sync::Mutex::new(()),
                registry: Mutex::new(registry),
                events,
                tasks: TaskTracker::new(),
                gate: Gate::new(Arc::clone(&config.permissions), config.max_writes_per_cell),
                calls: Default::default(),
                config,
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
        Arc::clone(&self.shared.tools.lock().tools)
    }

    /// Rules the tool calls its cells make from now on by `permissions` (a reloaded
    /// configuration's), running cells included; what the user allowed for the session stays
    /// allowed.
    pub fn set_permissions(&self, permissions: Arc<crate::Permissions>) {
        self.shared.gate.set_permissions(permissions);
    }

    /// The downstream servers (or other parts of the provider) that are down now, and why;
    /// their tools are left out of the cells' view until they are back.
    pub fn unavailable(&self) -> Vec<crate::Unavailable> {
        self.shared.provider.unavailable()
    }

    /// Lists the tools again if the provider says they may have changed since the last listing
    /// (a downstream server's `tools/list_changed`, a server that started late, a restart); each
    /// cell's start does it, and a server should before it describes `exec`. A listing that
    /// fails keeps the tools as they were.
    pub async fn refresh_tools(&self) {
        let shared = &self.shared;
        let version = shared.provider.tools_version();
        if shared.tools.lock().version == version {
            return;
        }
        match shared.provider.list_tools().await {
            Ok(tools) => {
                tracing::info!(session = %shared.id, tools = tools.len(), "tools listed again");
                *shared.tools.lock() = ListedTools::new(version, tools);
            }
            Err(error) => {
                tracing::warn!(session = %shared.id, %error, "cannot list the tools again; keeping the last listing");
            }
        }
    }

    /// The session's stored values now (shared, not copied).
    pub fn stored_values(&self) -> Arc<StoredValues> {
        Arc::clone(&self.shared.values.lock().values)
    }

    /// The bytes (keys and JSON text) of the session's stored values now.
    pub fn stored_bytes(&self) -> usize {
        self.shared.values.lock().bytes
    }

    /// The calls of `cell_id` waiting for the user's approval now.
    pub fn awaiting_approval(&self, cell_id: &CellId) -> Vec<crate::AwaitingApproval> {
        self.shared.gate.awaiting(cell_id)
    }

    /// How many cells are running or waiting to be observed.
    pub fn active_cells(&self) -> usize {
        self.shared.registry.lock().cells.len()
    }

    /// The tracing span of cell `cell_id` while it is registered: an embedder that exports
    /// traces links the requests that observe the cell to it.
    pub fn cell_span(&self, cell_id: &CellId) -> Option<tracing::Span> {
        let registry = self.shared.registry.lock();
        registry.cells.get(cell_id).map(|cell| cell.span.clone())
    }

    /// How many cells are running now (an ended cell waiting to be observed is not): what a
    /// server draining for shutdown waits for.
    pub fn running_cells(&self) -> usize {
        let registry = self.shared.registry.lock();
        registry.starting
            + registry
                .cells
                .values()
                .filter(|cell| cell.handle.is_running())
                .count()
    }

    /// Session events: cells that finished unobserved, and notifications.
    pub fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        self.shared.events.subscribe()
    }

    /// Starts a cell and observes it until its yield time (the yield defaults and grace apply).
    pub async fn execute(&self, request: ExecuteRequest) -> Result<CellReport, SessionError> {
        let yield_time = self.shared.config.exec_yield(request.yield_time_ms);
        self.start(
            request,
            Observation::yield_after(yield_time),
            CellExtras::default(),
        )
        .await
    }

    /// Starts a cell and observes it until its pending frontier (or its end).
    pub async fn execute_to_pending(
        &self,
        request: ExecuteRequest,
    ) -> Result<CellReport, SessionError> {
        self.start(
            request,
            Observation::pending_frontier(),
            CellExtras::default(),
        )
        .await
    }

    /// Observes a running cell again until its yield time, or terminates it.
    ///
    /// With [`SessionConfig::max_wait`] set, an observation that would return nothing new holds
    /// on until the cell has news or that time passes (see [`Session::wait_many`], which also
    /// watches several cells; this returns the first outcome).
    pub async fn wait(&self, request: WaitRequest) -> Result<WaitOutcome, SessionError> {
        let cell_id = request.cell_id.clone();
        Ok(self
            .wait_many(request)
            .await?
            .into_iter()
            .next()
            .unwrap_or(WaitOutcome::NotFound { cell_id }))
    }

    /// Observes a running cell until its pending frontier (or its end).
    pub async fn wait_to_pending(&self, cell_id: &CellId) -> Result<WaitOutcome, SessionError> {
        self.observe(cell_id, Observation::pending_frontier()).await
    }

    /// Terminates a cell; its report carries every item produced before the kill.
    pub async fn terminate(&self, cell_id: &CellId) -> Result<WaitOutcome, SessionError> {
        let Some((handle, source)) = self.entry(cell_id) else {
            return Ok(WaitOutcome::NotFound {
                cell_id: cell_id.to_string(),
            });
        };
        let began = Instant::now();
        tracing::info!(session = %self.shared.id, %cell_id, "terminating cell");
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
        let mut registry = self.shared.registry.lock();
        registry.shut_down = true;
        registry
            .cells
            .values()
            .map(|entry| entry.handle.clone())
            .collect()
    }

    /// The handle and source of a cell, taken before observing it: the cell may leave the
    /// registry while the observation runs.
    fn entry(&self, cell_id: &CellId) -> Option<(CellHandle, Arc<str>)> {
        self.shared
            .registry
            .lock()
            .cells
            .get(cell_id)
            .map(|entry| (entry.handle.clone(), Arc::clone(&entry.source)))
    }

    /// Starts a cell, which holds its ticket while it is registered (dropped at once if it does
    /// not start), and makes its first observation; a cancellation that fires meanwhile stops the
    /// cell and keeps what it produced for a later `wait`.
    pub(crate) async fn start(
        &self,
        request: ExecuteRequest,
        observation: Observation,
        extras: CellExtras,
    ) -> Result<CellReport, SessionError> {
        let began = Instant::now();
        self.refresh_tools().await;
        if request.source.len() > MAX_SOURCE_BYTES {
            return Err(SessionError::SourceTooLarge {
                size: request.source.len(),
                limit: MAX_SOURCE_BYTES,
            });
        }
        self.refresh_values().await?;
        let stripped = erase_types(&request.source).await;
        let call_id = request.call_id.clone();
        let (cell_id, source, cell) = match self.claim_start(request, stripped)? {
            Claimed::Start {
                cell_id,
                source,
                cell,
            } => (cell_id, source, cell),
            Claimed::Unsupported {
                cell_id,
                source,
                error_text,
            } => {
                // The cell fails as a syntax error would, without running.
                let event = CellEvent::Completed {
                    output: Default::default(),
                    error_text: Some(error_text),
                    result_buffered_for: Duration::ZERO,
                };
                return first_report(
                    &cell_id,
                    self.conclude(&cell_id, &source, Ok(event), began)?,
                );
            }
        };
        let CellExtras {
            ticket,
            user,
            cancellation,
            yield_on_approval,
        } = extras;
        // A question for the user ends the first observation (when asked to), as news.
        let asked = CancellationToken::new();
        let observation = if yield_on_approval {
            observation.with_yield_signal(asked.clone())
        } else {
            observation
        };
        let first_observation =
            self.launch(&cell_id, &call_id, &source, cell, observation, ticket, user)?;
        tracing::info!(session = %self.shared.id, %cell_id, "cell started");
        let gate = &self.shared.gate;
        let mut questions = gate.asked();
        let watch_questions = async {
            if !yield_on_approval {
                return std::future::pending::<()>().await;
            }
            loop {
                if !gate.awaiting(&cell_id).is_empty() {
                    asked.cancel();
                }
                if questions.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let first_observation = async {
            tokio::select! {
                answer = first_observation => answer,
                () = watch_questions => unreachable!("never ends"),
            }
        };
        let answer = match cancellation {
            None => first_observation.await,
            Some(cancellation) => {
                let mut first_observation = std::pin::pin!(first_observation);
                tokio::select! {
                    biased;
                    answer = &mut first_observation => answer,
                    () = cancellation.cancelled() => {
                        self.stop_cancelled(&cell_id, &source, first_observation).await;
                        return Err(SessionError::Cancelled {
                            cell_id: cell_id.clone(),
                        });
                    }
                }
            }
        };
        first_report(&cell_id, self.conclude(&cell_id, &source, answer, began)?)
    }

    /// Stops a cell whose `exec` was cancelled while it observed the cell, as a terminating
    /// `wait` would, and keeps its last event (everything it produced, the kill ledger) for the
    /// `wait` that asks for it.
    async fn stop_cancelled(
        &self,
        cell_id: &CellId,
        source: &Arc<str>,
        first_observation: std::pin::Pin<
            &mut impl std::future::Future<Output = Result<CellEvent, CellError>>,
        >,
    ) {
        let Some((handle, _)) = self.entry(cell_id) else {
            return;
        };
        tracing::info!(session = %self.shared.id, %cell_id, "exec cancelled: terminating its cell");
        let terminated = handle.terminate();
        // The observation in flight ends too: with what had reached it already (a yield, the
        // completion), or with a copy of the termination.
        let observed = first_observation.await;
        let event = match (observed, terminated.await) {
            (Ok(observed), Ok(ended)) if !observed.is_terminal() => {
                with_earlier_output(ended, observed.output().clone())
            }
            (Ok(observed), Ok(ended)) => {
                if observed.output().entries().len() > ended.output().entries().len() {
                    observed
                } else {
                    ended
                }
            }
            (Ok(observed), Err(_)) => observed,
            (Err(_), Ok(ended)) => ended,
            (Err(_), Err(_)) => return,
        };
        let mut registry = self.shared.registry.lock();
        registry.cells.remove(cell_id);
        if event.is_terminal() && !registry.shut_down {
            registry
                .kept
                .insert(cell_id.clone(), (event, Arc::clone(source)));
        }
    }

    /// Another process may have committed to this session since its values were loaded: the
    /// cell starts from the latest committed values (no lock is held while the store answers).
    async fn refresh_values(&self) -> Result<(), SessionError> {
        let shared = &self.shared;
        if shared.store.shared_between_processes() {
            let latest = shared
                .store
                .load(&shared.key)
                .await
                .map_err(SessionError::Store)?;
            shared.values.lock().refresh(latest);
        }
        Ok(())
    }

    /// The registry's step of a start, in one critical section: refuses a cell the session
    /// cannot take (shut down, at its active-cell limit, out of ids), allocates its id, and
    /// counts it as starting, with what the engine will be given.
    fn claim_start(
        &self,
        request: ExecuteRequest,
        stripped: Result<StrippedSource, UnsupportedTypeScript>,
    ) -> Result<Claimed, SessionError> {
        let shared = &self.shared;
        let mut registry = shared.registry.lock();
        if registry.shut_down {
            return Err(SessionError::ShutDown);
        }
        if registry.cells.len() + registry.kept.len() + registry.starting
            >= shared.config.max_active_cells
        {
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
                return Ok(Claimed::Unsupported {
                    cell_id,
                    source,
                    error_text: unsupported.error_text,
                });
            }
        };
        registry.starting += 1;
        let cell = CellStart {
            tenant: shared.config.tenant.clone(),
            call_id: request.call_id,
            source: runnable,
            enabled_tools: shared.tools.lock().tools.to_vec(),
            unavailable_servers: shared.provider.unavailable(),
            stored_values: Arc::clone(&shared.values.lock().values),
            limits: CellLimits::default()
                .with_heap_limit_bytes(shared.config.heap_limit_bytes)
                .with_cpu_time_limit(shared.config.cpu_time_limit)
                .with_max_tool_calls(shared.config.max_tool_calls),
            pending_mode: PendingMode::PauseUntilResumed,
        };
        Ok(Claimed::Start {
            cell_id,
            source,
            cell,
        })
    }

    /// Has the engine start a claimed cell (no lock is held meanwhile: an engine may have to
    /// start a process for it, and other cells of the session go on), then registers it, in one
    /// critical section with the end of its claim. Returns its first observation, to await.
    #[allow(clippy::too_many_arguments)] // Each is one thing the new cell is given.
    fn launch(
        &self,
        cell_id: &CellId,
        call_id: &str,
        source: &Arc<str>,
        cell: CellStart,
        observation: Observation,
        ticket: Option<CellTicket>,
        user: Option<Arc<dyn UserChannel>>,
    ) -> Result<ObservationFuture, SessionError> {
        let shared = &self.shared;
        let host = Arc::new(SessionCellHost {
            shared: Arc::clone(shared),
            cell_id: cell_id.clone(),
            tool_progress: cell_tool_progress(shared, cell_id, call_id),
            error_text: Mutex::new(None),
            gate: CellGate::new(user.or_else(|| shared.config.user.clone())),
            started: Instant::now(),
            tool_calls: Default::default(),
            ended_as: Mutex::new(None),
        });
        let config = CellConfig {
            output_mode: shared.config.output_mode,
            failure_handler: shared.config.on_runtime_failure.clone(),
        };
        let started = start_cell(&*shared.engine, cell, host, config, observation);
        let mut registry = shared.registry.lock();
        registry.starting -= 1;
        let StartedCell {
            handle,
            first_observation,
            task,
        } = started?;
        // The cell's span (an OpenTelemetry span where traces are exported): it outlives the
        // request that started the cell, and holds how the cell ended. Never its source.
        let span = tracing::info_span!(
            "cell",
            otel.name = "codemode.cell",
            session = %shared.id,
            cell_id = %cell_id,
            codemode.cell.id = %cell_id,
            codemode.engine = %shared.engine.describe(),
            codemode.cell.source_bytes = source.len(),
            codemode.cell.outcome = tracing::field::Empty,
            codemode.cell.tool_calls = tracing::field::Empty,
            codemode.cell.wall_ms = tracing::field::Empty,
            codemode.cell.cpu_us = tracing::field::Empty,
            codemode.cell.output_items = tracing::field::Empty,
            codemode.cell.output_bytes = tracing::field::Empty,
            codemode.cell.source_sha256 = tracing::field::Empty,
        );
        if !span.is_disabled() {
            span.record(
                "codemode.cell.source_sha256",
                crate::digest::sha256_hex(source),
            );
        }
        shared.tasks.spawn(task.instrument(span.clone()));
        if registry.shut_down {
            // The session shut down while the cell started: it ends at once.
            drop(handle.terminate());
            return Err(SessionError::ShutDown);
        }
        registry.cells.insert(
            cell_id.clone(),
            CellEntry {
                handle,
                source: Arc::clone(source),
                _ticket: ticket,
                span,
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
        Ok(first_observation)
    }

    /// The session's shared state, for the other parts of the crate.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// One observation of `cell_id`: its kept event, if a cancelled `exec` left one, or what
    /// its actor answers.
    pub(crate) async fn observe(
        &self,
        cell_id: &CellId,
        observation: Observation,
    ) -> Result<WaitOutcome, SessionError> {
        // A cell stopped by a cancelled `exec`: its last event, once.
        let kept = self.shared.registry.lock().kept.remove(cell_id);
        if let Some((event, source)) = kept {
            return self.conclude(cell_id, &source, Ok(event), Instant::now());
        }
        let Some((handle, source)) = self.entry(cell_id) else {
            return Ok(WaitOutcome::NotFound {
                cell_id: cell_id.to_string(),
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
        cell_id: &CellId,
        source: &str,
        answer: Result<CellEvent, CellError>,
        began: Instant,
    ) -> Result<WaitOutcome, SessionError> {
        let event = match answer {
            Ok(event) => event,
            // The cell ended and its result was delivered meanwhile: it is gone.
            Err(CellError::Closed) => {
                return Ok(WaitOutcome::NotFound {
                    cell_id: cell_id.to_string(),
                });
            }
            Err(error) => {
                return Err(SessionError::Cell {
                    cell_id: cell_id.clone(),
                    error,
                });
            }
        };
        if event.is_terminal() {
            self.shared.registry.lock().cells.remove(cell_id);
        }
        let error_hints = match &event {
            CellEvent::Completed {
                error_text: Some(error_text),
                ..
            } => {
                let mut hints = error_hints(error_text, source, &self.shared.tools.lock().names);
                hints.extend(crate::availability::down_hint(
                    error_text,
                    &self.shared.provider.unavailable(),
                ));
                hints
            }
            _ => Vec::new(),
        };
        log_observation(&self.shared.id, cell_id, &event);
        let awaiting_approval = if event.is_terminal() {
            Vec::new()
        } else {
            self.shared.gate.awaiting(cell_id)
        };
        Ok(WaitOutcome::Observed(CellReport {
            cell_id: cell_id.clone(),
            event,
            wall_time: began.elapsed(),
            error_hints,
            awaiting_approval,
            quiet: None,
        }))
    }
}

/// What a new cell is given beside its source.
#[derive(Default)]
pub(crate) struct CellExtras {
    /// Held while the cell is registered.
    pub(crate) ticket: Option<CellTicket>,
    /// Who is asked about the cell's calls that need approval (else the session's user).
    pub(crate) user: Option<Arc<dyn UserChannel>>,
    /// Stops the cell while its first observation runs (the `exec` was cancelled).
    pub(crate) cancellation: Option<CancellationToken>,
    /// Ends the first observation when one of the cell's calls waits for approval.
    pub(crate) yield_on_approval: bool,
}

/// `event` with `earlier` output (an observation that raced its end) before its own.
fn with_earlier_output(
    event: CellEvent,
    earlier: codemode_cell_actor::CollectedOutput,
) -> CellEvent {
    let join = |output: codemode_cell_actor::CollectedOutput| {
        codemode_cell_actor::CollectedOutput::from_items(
            earlier
                .clone()
                .into_items()
                .into_iter()
                .chain(output.into_items()),
        )
    };
    match event {
        CellEvent::Terminated { output, tool_calls } => CellEvent::Terminated {
            output: join(output),
            tool_calls,
        },
        CellEvent::Completed {
            output,
            error_text,
            result_buffered_for,
        } => CellEvent::Completed {
            output: join(output),
            error_text,
            result_buffered_for,
        },
        other => other,
    }
}

/// What the registry's step of a start decided.
enum Claimed {
    /// The cell has its id and is counted as starting: the engine runs `cell`.
    Start {
        cell_id: CellId,
        source: Arc<str>,
        cell: CellStart,
    },
    /// The source uses TypeScript that cannot be erased: the cell fails without running.
    Unsupported {
        cell_id: CellId,
        source: Arc<str>,
        error_text: String,
    },
}

/// The report of a new cell's first observation: a cell whose actor closed before answering it
/// is an error, not "no such cell".
fn first_report(cell_id: &CellId, outcome: WaitOutcome) -> Result<CellReport, SessionError> {
    match outcome {
        WaitOutcome::Observed(report) => Ok(report),
        WaitOutcome::NotFound { .. } => Err(SessionError::Cell {
            cell_id: cell_id.clone(),
            error: CellError::Closed,
        }),
    }
}

/// TypeScript erased before the engine sees the source (positions kept), outside any lock.
/// Hints read the source as the model wrote it.
async fn erase_types(source: &str) -> Result<StrippedSource, UnsupportedTypeScript> {
    if source.len() <= STRIP_ON_WORKER_BYTES {
        return strip_types(source);
    }
    // Parsing a large source takes milliseconds: not on an async worker.
    let source = source.to_owned();
    tokio::task::spawn_blocking(move || strip_types(&source))
        .await
        .unwrap_or(Ok(StrippedSource::AsWritten))
}

fn log_observation(session: &str, cell_id: &CellId, event: &CellEvent) {
    let items = event.output().entries().len();
    match event {
        CellEvent::Yielded { .. } => tracing::info!(session, %cell_id, items, "cell yielded"),
        CellEvent::Pending {
            pending_tool_call_ids,
            ..
        } => tracing::info!(
            session,
            %cell_id,
            items,
            pending_tool_calls = pending_tool_call_ids.len(),
            "cell at its pending frontier"
        ),
        CellEvent::Completed { error_text, .. } => tracing::info!(
            session,
            %cell_id,
            items,
            failed = error_text.is_some(),
            "cell completed"
        ),
        CellEvent::Terminated { tool_calls, .. } => tracing::info!(
            session,
            %cell_id,
            items,
            tool_calls = tool_calls.len(),
            "cell terminated"
        ),
        other => tracing::info!(session, %cell_id, items, ?other, "cell observed"),
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
