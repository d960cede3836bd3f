//! Test support for the cell actor: a scripted engine whose runtime end the test drives by hand,
//! and a host whose tools, notifications and commits the test can watch and hold.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use codemode_cell_actor::{
    CellConfig, CellHost, CompletionClaim, CompletionCommit, Observation, StartedCell, ToolError,
    ToolInvocation, start_cell,
};
use codemode_engine::{
    CellLimits, CellStart, Engine, EngineError, EngineHandles, EventSender, PendingMode,
    RuntimeCommand, RuntimeControl, Terminate, TerminateHandle,
};
use codemode_protocol::{JsonText, ToolDefinition, ToolName};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[allow(unused_imports)] // Not every test binary that includes this module uses both.
pub use codemode_test_support::{wait_until, within};

/// The runtime end of a scripted cell: the test sends events and reads what the actor tells the
/// engine.
pub struct ScriptedRuntime {
    pub events: EventSender,
    pub commands: std::sync::mpsc::Receiver<RuntimeCommand>,
    pub control: std::sync::mpsc::Receiver<RuntimeControl>,
    /// Cancelled when the actor terminates the engine.
    pub terminated: CancellationToken,
}

/// An engine that runs nothing: each start hands a [`ScriptedRuntime`] to the test.
pub struct ScriptedEngine {
    runtimes: Mutex<std::sync::mpsc::Sender<ScriptedRuntime>>,
}

struct ScriptedTerminate(CancellationToken);

impl Terminate for ScriptedTerminate {
    fn terminate(&self) {
        self.0.cancel();
    }
}

impl ScriptedEngine {
    pub fn new() -> (Self, std::sync::mpsc::Receiver<ScriptedRuntime>) {
        let (sender, receiver) = std::sync::mpsc::channel();
        (
            ScriptedEngine {
                runtimes: Mutex::new(sender),
            },
            receiver,
        )
    }
}

impl Engine for ScriptedEngine {
    fn describe(&self) -> String {
        "scripted".into()
    }

    fn start(&self, _cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        let (command_tx, commands) = std::sync::mpsc::channel();
        let (control_tx, control) = std::sync::mpsc::channel();
        let terminated = CancellationToken::new();
        self.runtimes
            .lock()
            .unwrap()
            .send(ScriptedRuntime {
                events,
                commands,
                control,
                terminated: terminated.clone(),
            })
            .unwrap();
        Ok(EngineHandles {
            commands: command_tx.into(),
            control: control_tx.into(),
            terminate: TerminateHandle::new(Arc::new(ScriptedTerminate(terminated))),
        })
    }
}

/// A host for tests. Tools by name: `echo` resolves with its input, `fail` fails with "it failed",
/// `panic` panics, `hang` waits until cancelled, `gate` waits until [`TestHost::open_gates`].
#[derive(Default)]
pub struct TestHost {
    pub stored_values: Mutex<codemode_protocol::StoredValues>,
    pub commits: AtomicUsize,
    pub notifications: Mutex<Vec<(String, String)>>,
    pub notified: Notify,
    /// Cancelled when a commit starts; with `hold_commit`, the commit then waits for it.
    pub commit_started: CancellationToken,
    pub hold_commit: Option<CancellationToken>,
    /// When set, every commit fails (a store that is down): the cell completes with this note.
    pub fail_commits: Option<String>,
    pub tool_calls: Mutex<Vec<ToolInvocation>>,
    /// The cancellation token each tool call was given.
    pub tool_tokens: Mutex<Vec<CancellationToken>>,
    pub gates: CancellationToken,
    pub closed_calls: AtomicUsize,
    /// What the actor said the cell emitted and cost, as it closed.
    pub usage: Mutex<Option<codemode_cell_actor::CellUsage>>,
}

impl TestHost {
    /// How many tool calls have had their cancellation token cancelled.
    pub fn cancelled_tools(&self) -> usize {
        self.tool_tokens
            .lock()
            .unwrap()
            .iter()
            .filter(|token| token.is_cancelled())
            .count()
    }

    pub fn open_gates(&self) {
        self.gates.cancel();
    }

    pub async fn wait_for_notifications(&self, count: usize) {
        within("waiting for notifications", async {
            loop {
                let notified = self.notified.notified();
                if self.notifications.lock().unwrap().len() >= count {
                    return;
                }
                notified.await;
            }
        })
        .await
    }
}

impl CellHost for TestHost {
    async fn invoke_tool(
        &self,
        invocation: ToolInvocation,
        cancellation: CancellationToken,
    ) -> Result<JsonText, ToolError> {
        self.tool_calls.lock().unwrap().push(invocation.clone());
        self.tool_tokens.lock().unwrap().push(cancellation.clone());
        match invocation.name.name.as_str() {
            "echo" => Ok(invocation
                .input
                .unwrap_or_else(|| JsonText::from(Value::Null))),
            "fail" => Err("it failed".into()),
            "panic" => panic!("the tool exploded"),
            // The cancellation lands while the tool is being polled, and the tool answers it.
            "cancelled-mid-poll" => {
                cancellation.cancel();
                Err("cancelled".into())
            }
            "gate" => {
                tokio::select! {
                    _ = self.gates.cancelled() => Ok(json!({"released": invocation.id}).into()),
                    _ = cancellation.cancelled() => Err("cancelled".into()),
                }
            }
            _ => {
                cancellation.cancelled().await;
                Err("cancelled".into())
            }
        }
    }

    async fn notify(&self, call_id: String, text: String, _cancellation: CancellationToken) {
        self.notifications.lock().unwrap().push((call_id, text));
        self.notified.notify_waiters();
    }

    async fn commit_completion(&self, claim: CompletionClaim) -> CompletionCommit {
        // The outcome is claimed before the host is called: a held commit is a slow store.
        self.commit_started.cancel();
        if let Some(hold) = &self.hold_commit {
            hold.cancelled().await;
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        if let Some(note) = &self.fail_commits {
            return claim.publish_with_commit_failure(note);
        }
        self.stored_values
            .lock()
            .unwrap()
            .extend(claim.stored_value_writes().clone());
        claim.publish()
    }

    fn usage(&self, usage: codemode_cell_actor::CellUsage) {
        *self.usage.lock().unwrap() = Some(usage);
    }

    async fn closed(&self) {
        self.closed_calls.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn tool(name: &str) -> ToolDefinition {
    ToolDefinition::function(ToolName::plain(name), format!("The {name} tool."))
}

pub fn cell_start(source: &str) -> CellStart {
    CellStart {
        tenant: None,
        call_id: "call-1".into(),
        source: source.into(),
        enabled_tools: ["echo", "fail", "panic", "hang", "gate"].map(tool).to_vec(),
        unavailable_servers: Vec::new(),
        stored_values: Default::default(),
        limits: CellLimits::default(),
        pending_mode: PendingMode::PauseUntilResumed,
    }
}

/// Starts a scripted cell with its actor spawned.
pub fn scripted_cell(
    host: Arc<TestHost>,
    config: CellConfig,
    first: Observation,
) -> ScriptedCellParts {
    let (engine, runtimes) = ScriptedEngine::new();
    let StartedCell {
        handle,
        first_observation,
        task,
    } = start_cell(&engine, cell_start("scripted"), host, config, first).unwrap();
    let runtime = runtimes.recv().unwrap();
    ScriptedCellParts {
        runtime,
        handle,
        first_observation,
        actor: tokio::spawn(task),
    }
}

pub struct ScriptedCellParts {
    pub runtime: ScriptedRuntime,
    pub handle: codemode_cell_actor::CellHandle,
    pub first_observation: codemode_cell_actor::ObservationFuture,
    pub actor: tokio::task::JoinHandle<()>,
}
