//! The actor that runs one cell: a tokio task that owns the cell's lifecycle (the runtime thread and the actor).
//!
//! It holds the engine's end of the channels, the output collected since the last observation,
//! the current observer, the frontier, the tool and notification tasks, and the kill ledger. Each
//! turn of its loop handles exactly one of: a termination request, the observer's yield deadline
//! or signal, a command from a handle, an engine event, or a finished tool or notification task.
//! The terminal outcome itself is decided in [`CellState`], never here.

use codemode_protocol::StoredValues;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use codemode_engine::{
    CellStart, Engine, EngineError, EngineHandles, EventReceiver, PendingMode, RuntimeCommand,
    RuntimeControl, RuntimeEvent, event_channel,
};
use codemode_protocol::{JsonText, ToolKind, ToolName};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::event::{CellError, CellEvent, Observation, ObserveMode, ToolCallFate, ToolCallRecord};
use crate::handle::{CellHandle, Command};
use crate::host::{CellHost, ToolError, ToolInvocation};
use crate::output::{OutputCollector, OutputMode};
use crate::state::{CellState, CompletionDelivery, ObservationRoute, Responder};

/// Told when a cell's runtime fails in a way its owner should know about (the engine thread
/// ended without a result, or panicked). The cell itself completes with an error either way.
pub type FailureHandler = Arc<dyn Fn(String) + Send + Sync>;

/// The error text of a cell whose engine thread ended without a result.
pub const RUNTIME_ENDED_UNEXPECTEDLY: &str = "exec runtime ended unexpectedly";

/// How a cell's actor is set up.
#[derive(Clone)]
pub struct CellConfig {
    /// How output is collected.
    pub output_mode: OutputMode,
    /// Told when the runtime fails (beyond the cell's own error).
    pub failure_handler: Option<FailureHandler>,
}

impl std::fmt::Debug for CellConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellConfig")
            .field("output_mode", &self.output_mode)
            .field("failure_handler", &self.failure_handler.is_some())
            .finish()
    }
}

impl Default for CellConfig {
    fn default() -> Self {
        CellConfig {
            output_mode: OutputMode::Client,
            failure_handler: None,
        }
    }
}

/// The future that answers the first observation.
pub type ObservationFuture = Pin<Box<dyn Future<Output = Result<CellEvent, CellError>> + Send>>;

/// The actor's task: spawn it on a tokio runtime. It ends after the host's `closed` returns.
pub type CellTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A cell whose engine is running and whose actor is ready to be spawned.
pub struct StartedCell {
    /// Observes and terminates the cell.
    pub handle: CellHandle,
    /// The answer to the first observation.
    pub first_observation: ObservationFuture,
    /// The actor: spawn it.
    pub task: CellTask,
}

impl std::fmt::Debug for StartedCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartedCell")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// Starts `cell` on `engine` (always in pause-until-resumed mode: the actor decides when the
/// cell pauses) and prepares its actor, already observed by `first_observation`.
pub fn start_cell<H: CellHost, E: Engine + ?Sized>(
    engine: &E,
    mut cell: CellStart,
    host: Arc<H>,
    config: CellConfig,
    first_observation: Observation,
) -> Result<StartedCell, EngineError> {
    cell.pending_mode = PendingMode::PauseUntilResumed;
    let (event_sender, events) = event_channel(config.output_mode.event_queue_capacity());
    let engine_handles = engine.start(cell, event_sender)?;
    let state = CellState::new();
    let (command_sender, commands) = mpsc::unbounded_channel();
    let handle = CellHandle::new(command_sender, Arc::clone(&state));
    let (respond, first_response) = tokio::sync::oneshot::channel();
    let actor = CellActor {
        host,
        engine: engine_handles,
        state,
        output: OutputCollector::new(config.output_mode),
        observer: Some(Observer::new(first_observation, respond, None)),
        runtime: RuntimeLink::Running,
        runtime_panicked: false,
        cpu_time: None,
        frontier: Frontier::default(),
        ledger: ToolLedger::default(),
        tool_tasks: JoinSet::new(),
        tool_task_calls: HashMap::new(),
        tools_cancel: CancellationToken::new(),
        notification_tasks: JoinSet::new(),
        notifications_cancel: CancellationToken::new(),
        lifecycle: Lifecycle::Running,
        failure_handler: config.failure_handler,
    };
    Ok(StartedCell {
        handle,
        first_observation: Box::pin(async move {
            first_response.await.unwrap_or(Err(CellError::Closed))
        }),
        task: Box::pin(actor.run(events, commands)),
    })
}

/// The current observer and its yield deadline.
struct Observer {
    mode: ObserveMode,
    respond: Responder,
    /// When a time-budget observation yields; `None` until the runtime has started (the first
    /// observation's clock starts with the cell) and for frontier observations.
    deadline: Option<Instant>,
    yield_signal: Option<CancellationToken>,
}

impl Observer {
    fn new(observation: Observation, respond: Responder, now: Option<Instant>) -> Self {
        let mut observer = Observer {
            mode: observation.mode,
            respond,
            deadline: None,
            yield_signal: observation.yield_signal,
        };
        if let Some(now) = now {
            observer.start_clock(now);
        }
        observer
    }

    fn start_clock(&mut self, now: Instant) {
        if let ObserveMode::YieldAfter(budget) = self.mode {
            self.deadline.get_or_insert(now + budget);
        }
    }

    fn wants_yields(&self) -> bool {
        matches!(self.mode, ObserveMode::YieldAfter(_))
    }
}

/// Where the engine thread stands, as far as the actor knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuntimeLink {
    Running,
    /// Paused at its pending frontier, waiting for control.
    Paused,
    /// Its event channel is closed (or it sent its result): it runs no more JavaScript.
    Closed,
}

/// The actor's own view of the lifecycle; the terminal outcome is `CellState`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    Running,
    /// Completed and committed; the result waits for an observer.
    Buffered,
    /// Termination was requested; waiting for the runtime to close.
    Terminating,
    /// The outcome was handed out: the actor closes.
    Done,
}

/// The pending frontier: tool calls made since the last delivered frontier, and whether a
/// frontier is ready but undelivered (its observer went away).
#[derive(Debug, Default)]
struct Frontier {
    tool_call_ids: Vec<String>,
    ready: bool,
}

/// Every tool call of the cell, in call order, with what became of it (kill ledger).
#[derive(Debug, Default)]
struct ToolLedger {
    calls: Vec<(String, ToolName, CallState)>,
    index: HashMap<String, usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    InFlight,
    Completed,
    Cancelled,
    NotStarted,
}

impl ToolLedger {
    fn record(&mut self, id: &str, name: &ToolName, state: CallState) {
        self.index.insert(id.to_owned(), self.calls.len());
        self.calls.push((id.to_owned(), name.clone(), state));
    }

    fn settle(&mut self, id: &str, state: CallState) {
        if let Some(&position) = self.index.get(id) {
            self.calls[position].2 = state;
        }
    }

    fn name(&self, id: &str) -> Option<&ToolName> {
        self.index.get(id).map(|&position| &self.calls[position].1)
    }

    fn records(&self) -> Vec<ToolCallRecord> {
        self.calls
            .iter()
            .map(|(id, name, state)| ToolCallRecord {
                id: id.clone(),
                name: name.clone(),
                fate: match state {
                    CallState::Completed => ToolCallFate::Completed,
                    // Every task has been joined by now; one still marked in flight was cut off.
                    CallState::InFlight | CallState::Cancelled => ToolCallFate::Cancelled,
                    CallState::NotStarted => ToolCallFate::NotStarted,
                },
            })
            .collect()
    }
}

/// How a tool task ended.
enum ToolTaskEnd {
    Finished(Result<JsonText, ToolError>),
    Cancelled,
}

/// One turn's cause, from the loop's `select!`.
enum Wake {
    TerminationRequested,
    YieldDue,
    Command(Option<Command>),
    Event(Option<RuntimeEvent>),
    ToolJoined(Result<(tokio::task::Id, ToolTaskEnd), JoinError>),
    NotificationJoined,
}

struct CellActor<H: CellHost> {
    host: Arc<H>,
    engine: EngineHandles,
    state: Arc<CellState>,
    output: OutputCollector,
    observer: Option<Observer>,
    runtime: RuntimeLink,
    runtime_panicked: bool,
    /// The CPU time the engine reported for the cell (before its result).
    cpu_time: Option<Duration>,
    frontier: Frontier,
    ledger: ToolLedger,
    tool_tasks: JoinSet<ToolTaskEnd>,
    /// Which tool call each task runs.
    tool_task_calls: HashMap<tokio::task::Id, String>,
    tools_cancel: CancellationToken,
    notification_tasks: JoinSet<()>,
    notifications_cancel: CancellationToken,
    lifecycle: Lifecycle,
    failure_handler: Option<FailureHandler>,
}

impl<H: CellHost> CellActor<H> {
    async fn run(mut self, mut events: EventReceiver, commands: mpsc::UnboundedReceiver<Command>) {
        let mut commands = Some(commands);
        while self.lifecycle != Lifecycle::Done {
            let wake = self.next_wake(&mut events, &mut commands).await;
            match wake {
                Wake::TerminationRequested => self.begin_termination().await,
                Wake::YieldDue => self.deliver_yield(),
                Wake::Command(Some(command)) => self.on_command(command),
                Wake::Command(None) => {
                    // Every handle is gone: nobody can observe the cell any more.
                    commands = None;
                    self.state.terminate_unobserved();
                }
                Wake::Event(event) => self.on_event(event).await,
                Wake::ToolJoined(joined) => self.on_tool_joined(joined),
                Wake::NotificationJoined => {}
            }
        }
        self.close(commands).await;
    }

    /// Waits for the next thing to handle. Termination comes first, then the yield deadline
    /// (which pre-empts output still queued from the engine, actor rule 3), then the rest.
    async fn next_wake(
        &mut self,
        events: &mut EventReceiver,
        commands: &mut Option<mpsc::UnboundedReceiver<Command>>,
    ) -> Wake {
        let terminating = self.lifecycle == Lifecycle::Terminating;
        let (deadline, yield_signal) = match &self.observer {
            Some(observer) if !terminating && observer.wants_yields() => {
                (observer.deadline, observer.yield_signal.clone())
            }
            _ => (None, None),
        };
        let deadline_passed = deadline.is_some_and(|deadline| deadline <= Instant::now());
        let receive_events = self.runtime != RuntimeLink::Closed && !deadline_passed;
        let state = Arc::clone(&self.state);
        tokio::select! {
            biased;
            _ = state.termination_signal(), if !terminating => Wake::TerminationRequested,
            _ = sleep_until(deadline), if deadline.is_some() => Wake::YieldDue,
            _ = cancelled(yield_signal.as_ref()), if yield_signal.is_some() => Wake::YieldDue,
            // While terminating, an observation is still dequeued: it is answered `Closed` at once.
            command = recv_command(commands), if commands.is_some() => Wake::Command(command),
            event = events.recv(), if receive_events => Wake::Event(event),
            joined = self.tool_tasks.join_next_with_id(), if !self.tool_tasks.is_empty() => {
                Wake::ToolJoined(joined.expect("the set is not empty"))
            }
            _ = self.notification_tasks.join_next(), if !self.notification_tasks.is_empty() => {
                Wake::NotificationJoined
            }
        }
    }

    // ---- observers ----

    fn on_command(&mut self, command: Command) {
        let Command::Observe {
            observation,
            respond,
        } = command;
        if respond.is_closed() {
            // Dropped before it was dequeued: it takes nothing.
            return;
        }
        let respond = match self.state.route_observation(respond) {
            ObservationRoute::Running(respond) => respond,
            ObservationRoute::Delivered => {
                self.lifecycle = Lifecycle::Done;
                return;
            }
            ObservationRoute::StillBuffered | ObservationRoute::Closed => return,
        };
        if self
            .observer
            .as_ref()
            .is_some_and(|observer| observer.respond.is_closed())
        {
            // The current observer went away; its output was never taken, so nothing is lost.
            self.observer = None;
        }
        if self.observer.is_some() {
            let _ = respond.send(Err(CellError::Busy));
            return;
        }
        if observation.mode == ObserveMode::PendingFrontier && self.frontier.ready {
            self.deliver_pending(respond);
            return;
        }
        // Only the first observation's clock waits for the cell to start; a later observer's
        // budget runs from its arrival.
        let mode = observation.mode;
        self.observer = Some(Observer::new(observation, respond, Some(Instant::now())));
        self.steer_runtime_for(mode);
    }

    /// Tells the engine what the new observer needs: a paused runtime goes on (pausing again at
    /// the next frontier only for a frontier observer); a running one is asked to pause at its
    /// next frontier for a frontier observer.
    fn steer_runtime_for(&mut self, mode: ObserveMode) {
        match (self.runtime, mode) {
            (RuntimeLink::Paused, ObserveMode::YieldAfter(_)) => {
                self.frontier = Frontier::default();
                self.control(RuntimeControl::Continue);
            }
            (RuntimeLink::Paused, ObserveMode::PendingFrontier) => {
                self.control(RuntimeControl::Resume);
            }
            (RuntimeLink::Running, ObserveMode::PendingFrontier) => {
                let _ = self
                    .engine
                    .commands
                    .send(RuntimeCommand::ObservePendingFrontier);
            }
            (RuntimeLink::Running, ObserveMode::YieldAfter(_)) | (RuntimeLink::Closed, _) => {}
        }
    }

    fn control(&mut self, control: RuntimeControl) {
        let _ = self.engine.control.send(control);
        self.runtime = RuntimeLink::Running;
    }

    fn deliver_yield(&mut self) {
        let Some(observer) = self.observer.take() else {
            return;
        };
        let event = CellEvent::Yielded {
            output: self.output.take(),
        };
        if let Err(undelivered) = send(observer.respond, event) {
            self.output.restore(undelivered.into_output());
        }
    }

    fn deliver_pending(&mut self, respond: Responder) {
        let event = CellEvent::Pending {
            output: self.output.take(),
            pending_tool_call_ids: std::mem::take(&mut self.frontier.tool_call_ids),
        };
        self.frontier.ready = false;
        if let Err(CellEvent::Pending {
            output,
            pending_tool_call_ids,
        }) = send(respond, event)
        {
            self.output.restore(output);
            self.frontier.tool_call_ids = pending_tool_call_ids;
            self.frontier.ready = true;
        }
    }

    // ---- engine events ----

    async fn on_event(&mut self, event: Option<RuntimeEvent>) {
        let terminating = self.lifecycle == Lifecycle::Terminating;
        let Some(event) = event else {
            self.runtime = RuntimeLink::Closed;
            if terminating {
                self.finish_termination().await;
            } else {
                self.runtime_ended_without_result().await;
            }
            return;
        };
        match event {
            RuntimeEvent::Started => {
                if let Some(observer) = &mut self.observer {
                    observer.start_clock(Instant::now());
                }
            }
            RuntimeEvent::ContentItem(item) => self.output.push(item),
            RuntimeEvent::ToolCall {
                id,
                name,
                kind,
                input,
            } => self.on_tool_call(id, name, kind, input),
            RuntimeEvent::Notify { call_id, text } if !terminating => {
                self.spawn_notification(call_id, text);
            }
            RuntimeEvent::YieldRequested if !terminating => {
                if self.observer.as_ref().is_some_and(Observer::wants_yields) {
                    self.deliver_yield();
                }
            }
            RuntimeEvent::Pending if !terminating => self.on_pending(),
            RuntimeEvent::Result {
                stored_value_writes,
                error_text,
            } => {
                self.runtime = RuntimeLink::Closed;
                if terminating {
                    // Termination won: the result is discarded, nothing is committed.
                    self.finish_termination().await;
                } else {
                    self.complete(stored_value_writes, error_text).await;
                }
            }
            RuntimeEvent::ThreadPanicked => self.runtime_panicked = true,
            RuntimeEvent::Usage { cpu_time } => self.cpu_time = Some(cpu_time),
            RuntimeEvent::Notify { .. } | RuntimeEvent::YieldRequested | RuntimeEvent::Pending => {}
            other => tracing::warn!(?other, "ignoring an engine event this actor does not know"),
        }
    }

    fn on_pending(&mut self) {
        self.runtime = RuntimeLink::Paused;
        let frontier_observer = self
            .observer
            .as_ref()
            .is_some_and(|observer| observer.mode == ObserveMode::PendingFrontier);
        if frontier_observer {
            let observer = self.observer.take().expect("checked above");
            self.deliver_pending(observer.respond);
        } else {
            // Nobody watches the frontier: go on, and stop pausing until someone does.
            self.frontier = Frontier::default();
            self.control(RuntimeControl::Continue);
        }
    }

    fn on_tool_call(
        &mut self,
        id: String,
        name: ToolName,
        kind: ToolKind,
        input: Option<JsonText>,
    ) {
        if self.lifecycle == Lifecycle::Terminating {
            self.ledger.record(&id, &name, CallState::NotStarted);
            return;
        }
        self.ledger.record(&id, &name, CallState::InFlight);
        self.frontier.tool_call_ids.push(id.clone());
        let host = Arc::clone(&self.host);
        let cancellation = self.tools_cancel.child_token();
        let invocation = ToolInvocation {
            id: id.clone(),
            name,
            kind,
            input,
        };
        let task = self.tool_tasks.spawn(
            async move {
                let result = tokio::select! {
                    biased;
                    _ = cancellation.cancelled() => return ToolTaskEnd::Cancelled,
                    result = host.invoke_tool(invocation, cancellation.clone()) => result,
                };
                // The token can be cancelled between the two polls above, and a tool that watches it
                // then returns (typically an error saying so). A result that arrives once cancellation
                // was asked for never reaches the cell: the call was cancelled.
                if cancellation.is_cancelled() {
                    ToolTaskEnd::Cancelled
                } else {
                    ToolTaskEnd::Finished(result)
                }
            }
            // In the actor's span (the cell's, for a session): a tool call's logs and spans are
            // the cell's.
            .in_current_span(),
        );
        self.tool_task_calls.insert(task.id(), id);
    }

    fn on_tool_joined(&mut self, joined: Result<(tokio::task::Id, ToolTaskEnd), JoinError>) {
        let (task_id, end) = match joined {
            Ok((task_id, end)) => (task_id, Ok(end)),
            Err(error) => (error.id(), Err(error)),
        };
        let Some(call_id) = self.tool_task_calls.remove(&task_id) else {
            return;
        };
        let command = match end {
            Ok(ToolTaskEnd::Finished(Ok(result))) => RuntimeCommand::ToolResponse {
                id: call_id.clone(),
                result,
            },
            Ok(ToolTaskEnd::Finished(Err(error))) => RuntimeCommand::ToolError {
                id: call_id.clone(),
                error_text: error.message,
            },
            Ok(ToolTaskEnd::Cancelled) => {
                self.ledger.settle(&call_id, CallState::Cancelled);
                return;
            }
            Err(error) if error.is_panic() => {
                let name = self
                    .ledger
                    .name(&call_id)
                    .map(ToolName::global_name)
                    .unwrap_or_default();
                let error_text = format!(
                    "tool {name} failed: it panicked ({})",
                    panic_message(error.into_panic())
                );
                tracing::error!(tool = %name, call_id = %call_id, "{error_text}");
                RuntimeCommand::ToolError {
                    id: call_id.clone(),
                    error_text,
                }
            }
            Err(_) => {
                self.ledger.settle(&call_id, CallState::Cancelled);
                return;
            }
        };
        self.ledger.settle(&call_id, CallState::Completed);
        if self.runtime != RuntimeLink::Closed {
            let _ = self.engine.commands.send(command);
        }
    }

    fn spawn_notification(&mut self, call_id: String, text: String) {
        let host = Arc::clone(&self.host);
        let cancellation = self.notifications_cancel.child_token();
        self.notification_tasks.spawn(
            async move {
                tokio::select! {
                    biased;
                    _ = cancellation.cancelled() => {}
                    () = host.notify(call_id, text, cancellation.clone()) => {}
                }
            }
            .in_current_span(),
        );
    }

    // ---- completion ----

    async fn runtime_ended_without_result(&mut self) {
        let reason = if self.runtime_panicked {
            "the cell's runtime thread panicked"
        } else {
            "the cell's runtime thread ended without a result"
        };
        tracing::error!("{reason}");
        if let Some(handler) = &self.failure_handler {
            handler(reason.to_owned());
        }
        self.complete(HashMap::new(), Some(RUNTIME_ENDED_UNEXPECTEDLY.to_owned()))
            .await;
    }

    /// The runtime finished: drain notifications, cancel tools, claim the outcome, then let the
    /// host commit and publish it. A termination that arrives before the claim wins: the
    /// completion is never built.
    async fn complete(&mut self, writes: StoredValues, error_text: Option<String>) {
        self.settle_callbacks_for_completion().await;
        let output = &mut self.output;
        let Some(claim) = self
            .state
            .claim_completion(writes, || CellEvent::Completed {
                output: output.take(),
                error_text,
                result_buffered_for: Duration::ZERO,
            })
        else {
            // A termination claimed the outcome; the loop's next turn finishes it.
            return;
        };
        // The host's store may be slow; the claim already decided the outcome, so nothing here
        // waits on a lock. The proof it returns can only come from publishing the claim.
        let _published = self.host.commit_completion(claim).await;
        let observer = self.observer.take().map(|observer| observer.respond);
        self.lifecycle = match self.state.deliver_completion(observer) {
            CompletionDelivery::Delivered => Lifecycle::Done,
            CompletionDelivery::Buffered => {
                self.host.completed_unobserved();
                Lifecycle::Buffered
            }
        };
    }

    async fn settle_callbacks_for_completion(&mut self) {
        self.tools_cancel.cancel();
        let state = Arc::clone(&self.state);
        let mut termination = std::pin::pin!(state.termination_signal());
        while !self.notification_tasks.is_empty() {
            tokio::select! {
                biased;
                _ = &mut termination => {
                    self.notifications_cancel.cancel();
                    break;
                }
                _ = self.notification_tasks.join_next() => {}
            }
        }
        self.join_callbacks().await;
    }

    /// Waits for every tool and notification task to end, recording what became of the tools.
    async fn join_callbacks(&mut self) {
        while let Some(joined) = self.tool_tasks.join_next_with_id().await {
            self.on_tool_joined(joined);
        }
        while self.notification_tasks.join_next().await.is_some() {}
    }

    // ---- termination ----

    async fn begin_termination(&mut self) {
        if self.lifecycle == Lifecycle::Done {
            return;
        }
        self.lifecycle = Lifecycle::Terminating;
        self.engine.terminate.terminate();
        self.tools_cancel.cancel();
        self.notifications_cancel.cancel();
        if self.runtime == RuntimeLink::Closed {
            self.finish_termination().await;
        }
    }

    /// The runtime has closed: wait for the cancelled callbacks, then settle the outcome.
    async fn finish_termination(&mut self) {
        self.join_callbacks().await;
        let terminated = CellEvent::Terminated {
            output: self.output.take(),
            tool_calls: self.ledger.records(),
        };
        let for_observer = self.state.finish_termination(terminated);
        if let Some(observer) = self.observer.take() {
            let _ = observer.respond.send(Ok(for_observer));
        }
        self.lifecycle = Lifecycle::Done;
    }

    async fn close(mut self, commands: Option<mpsc::UnboundedReceiver<Command>>) {
        // Refuse what arrives from now on, then make sure nothing of the cell keeps running.
        self.state.close();
        drop(commands);
        self.engine.terminate.terminate();
        self.tools_cancel.cancel();
        self.notifications_cancel.cancel();
        self.join_callbacks().await;
        if let Some(observer) = self.observer.take() {
            let _ = observer.respond.send(Err(CellError::Closed));
        }
        let (output_items, output_bytes) = self.output.emitted();
        self.host.usage(crate::CellUsage {
            output_items,
            output_bytes,
            cpu_time: self.cpu_time,
        });
        self.host.closed().await;
    }
}

/// Sends an event to an observer; gives it back if the observer went away.
fn send(respond: Responder, event: CellEvent) -> Result<(), CellEvent> {
    match respond.send(Ok(event)) {
        Ok(()) => Ok(()),
        Err(Ok(event)) => Err(event),
        Err(Err(_)) => unreachable!("only Ok values are sent here"),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

async fn recv_command(commands: &mut Option<mpsc::UnboundedReceiver<Command>>) -> Option<Command> {
    match commands {
        Some(commands) => commands.recv().await,
        None => std::future::pending().await,
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => "no message".to_owned(),
        },
    }
}
