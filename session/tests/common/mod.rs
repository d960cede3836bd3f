//! Test support for sessions on QuickJS: an in-memory store, and a tool provider whose tools the
//! test controls (`gate` calls wait until released).

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use codemode_protocol::{CellId, ExecuteRequest, JsonText, ToolDefinition, ToolName};
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{
    CellReport, Session, SessionConfig, SessionKey, Store, StoreError, ToolCallContext, ToolError,
    ToolInvocation, ToolListError, ToolProvider, WaitOutcome,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use codemode_test_support::within;

/// Stored values per session, in memory; `fail_commits` makes every commit fail,
/// `hold_commits` makes every commit wait until `release_commits` (a slow or remote store), and
/// `shared` says other processes commit to it too (as a shared database does), and counts loads.
#[derive(Default)]
pub struct MemoryStore {
    pub sessions: Mutex<HashMap<String, codemode_protocol::StoredValues>>,
    pub fail_commits: AtomicBool,
    pub hold_commits: AtomicBool,
    /// Cancelled when a commit begins.
    pub commit_started: CancellationToken,
    pub release_commits: CancellationToken,
    pub shared: AtomicBool,
    pub fail_loads: AtomicBool,
    pub loads: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn load(
        &self,
        session: &SessionKey,
    ) -> Result<codemode_protocol::StoredValues, StoreError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.fail_loads.load(Ordering::SeqCst) {
            return Err(StoreError::of(
                codemode_session::StoreErrorKind::Unavailable,
                "the database is restarting",
            ));
        }
        Ok(self
            .sessions
            .lock()
            .unwrap()
            .get(&session.to_string())
            .cloned()
            .unwrap_or_default())
    }

    fn shared_between_processes(&self) -> bool {
        self.shared.load(Ordering::SeqCst)
    }

    async fn commit(
        &self,
        session: &SessionKey,
        writes: &codemode_protocol::StoredValues,
    ) -> Result<(), StoreError> {
        self.commit_started.cancel();
        if self.hold_commits.load(Ordering::SeqCst) {
            self.release_commits.cancelled().await;
        }
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StoreError::new("the disk is full"));
        }
        self.sessions
            .lock()
            .unwrap()
            .entry(session.to_string())
            .or_default()
            .extend(writes.clone());
        Ok(())
    }
}

/// Tools: `echo` resolves with its argument, `fail` fails, `gate` waits until [`TestTools::release`].
#[derive(Default)]
pub struct TestTools {
    pub gate: CancellationToken,
    pub calls: Mutex<Vec<ToolInvocation>>,
    /// The cancellation token each call was given.
    pub tokens: Mutex<Vec<CancellationToken>>,
    /// Tools added since the session opened (see [`TestTools::add_tool`]).
    pub added: Mutex<Vec<String>>,
    pub version: std::sync::atomic::AtomicU64,
}

impl TestTools {
    pub fn release(&self) {
        self.gate.cancel();
    }

    /// Offers one more tool, `name`, which resolves with `{ "added": name }`, and says the list
    /// changed, as a downstream server's `tools/list_changed` would.
    pub fn add_tool(&self, name: &str) {
        self.added.lock().unwrap().push(name.to_owned());
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl ToolProvider for TestTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        Ok(vec![
            ToolDefinition::function(ToolName::plain("echo"), "Resolves with its argument."),
            ToolDefinition::function(ToolName::plain("fail"), "Always fails."),
            ToolDefinition::function(
                ToolName::plain("gate"),
                "Resolves when the test opens the gate.",
            ),
            ToolDefinition::function(ToolName::namespaced("web", "search"), "Searches the web."),
        ]
        .into_iter()
        .chain(self.added.lock().unwrap().iter().map(|name| {
            ToolDefinition::function(ToolName::plain(name), "Added after the session opened.")
        }))
        .collect())
    }

    fn tools_version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        let cancellation = context.cancellation;
        self.calls.lock().unwrap().push(call.clone());
        self.tokens.lock().unwrap().push(cancellation.clone());
        match call.name.name.as_str() {
            "echo" => Ok(call.input.unwrap_or_else(|| JsonText::from(Value::Null))),
            "fail" => Err("the tool failed".into()),
            "gate" => tokio::select! {
                _ = self.gate.cancelled() => Ok(json!({"released": call.id}).into()),
                _ = cancellation.cancelled() => Err("cancelled".into()),
            },
            "search" => Ok(json!({"results": ["a", "b"]}).into()),
            added => Ok(json!({ "added": added }).into()),
        }
    }
}

pub type TestSession = Session;

pub async fn open(
    id: &str,
    store: &Arc<MemoryStore>,
    config: SessionConfig,
) -> (TestSession, Arc<TestTools>) {
    let tools = Arc::new(TestTools::default());
    let session = Session::open(
        id,
        Arc::new(QuickJsEngine::new()),
        Arc::clone(store) as Arc<dyn Store>,
        Arc::clone(&tools) as Arc<dyn ToolProvider>,
        config,
    )
    .await
    .expect("the session opens");
    (session, tools)
}

/// Starts a cell and returns the report of its first observation; `what` names it in a failure.
pub async fn execute(session: &Session, what: &str, request: ExecuteRequest) -> CellReport {
    within(what, session.execute(request))
        .await
        .unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// Terminates a cell that must exist, and returns its report.
pub async fn terminate(session: &Session, what: &str, cell_id: &CellId) -> CellReport {
    observed(
        within(what, session.terminate(cell_id))
            .await
            .unwrap_or_else(|error| panic!("{what}: {error}")),
    )
}

/// The texts among an event's output items, in order.
pub fn texts(event: &codemode_session::CellEvent) -> Vec<String> {
    event
        .output()
        .clone()
        .into_items()
        .into_iter()
        .filter_map(|item| match item {
            codemode_protocol::OutputItem::Text { text } => Some(text),
            _ => None,
        })
        .collect()
}

pub fn request(source: &str) -> ExecuteRequest {
    ExecuteRequest {
        call_id: "call-1".into(),
        source: source.into(),
        yield_time_ms: None,
        max_output_tokens: None,
    }
}

/// A request that yields at once if the cell is still running.
pub fn background(source: &str) -> ExecuteRequest {
    ExecuteRequest {
        yield_time_ms: Some(0),
        ..request(source)
    }
}

pub fn observed(outcome: WaitOutcome) -> CellReport {
    match outcome {
        WaitOutcome::Observed(report) => report,
        WaitOutcome::NotFound { cell_id } => panic!("cell {cell_id} not found"),
    }
}
