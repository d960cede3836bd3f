//! Recipe: the cell actor alone, with a custom [`CellHost`] and a scripted engine (no V8, no
//! session, no store).
//!
//! The host answers tool calls, hears notifications, and commits a completed cell's stored values
//! into a map of its own; the engine plays a fixed script on a thread of its own. `start_cell`
//! returns the handle, the answer to the first observation, and the actor's task to spawn.
//!
//! ```text
//! cargo run -p codemode-cell-actor --example custom_host
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_cell_actor::{
    CellConfig, CellEvent, CellHost, CompletionClaim, CompletionCommit, Observation, StartedCell,
    ToolError, ToolInvocation, start_cell,
};
use codemode_engine::{
    CellStart, Engine, EngineError, EngineHandles, EventSender, PendingMode, RuntimeCommand,
    RuntimeEvent, Terminate, TerminateHandle,
};
use codemode_protocol::{JsonText, OutputItem, ToolKind, ToolName};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The owner of the cell: here, a map of stored values and a log line per callback.
#[derive(Default)]
struct MapHost {
    stored_values: Mutex<codemode_protocol::StoredValues>,
}

impl CellHost for MapHost {
    async fn invoke_tool(
        &self,
        invocation: ToolInvocation,
        _cancellation: CancellationToken,
    ) -> Result<JsonText, ToolError> {
        eprintln!("[host] tool {} called", invocation.name.global_name());
        // The argument arrives as the JSON text the cell made: read it here, where it is used.
        let input: Value = invocation
            .input
            .and_then(|text| text.to_value().ok())
            .unwrap_or_default();
        match invocation.name.name.as_str() {
            "double" => Ok(json!(input["n"].as_i64().unwrap_or(0) * 2).into()),
            other => Err(ToolError::not_found(format!("no tool {other}"))),
        }
    }

    async fn notify(&self, _call_id: String, text: String, _cancellation: CancellationToken) {
        eprintln!("[host] notify: {text}");
    }

    async fn commit_completion(&self, claim: CompletionClaim) -> CompletionCommit {
        // The cell has claimed its outcome; save its writes, then publish it.
        let writes = claim.stored_value_writes().clone();
        self.stored_values
            .lock()
            .expect("not poisoned")
            .extend(writes);
        claim.publish()
    }

    async fn closed(&self) {}
}

/// An engine that plays one script: a text, a tool call, a notification, a result.
struct ScriptedEngine;

struct NoTerminate;

impl Terminate for NoTerminate {
    fn terminate(&self) {}
}

impl Engine for ScriptedEngine {
    fn describe(&self) -> String {
        "scripted".to_owned()
    }

    fn start(&self, _cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        let (commands, command_receiver) = std::sync::mpsc::channel();
        let (control, _) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = events.send_blocking(RuntimeEvent::Started);
            let _ = events.send_blocking(RuntimeEvent::ContentItem(OutputItem::text("start")));
            let _ = events.send_blocking(RuntimeEvent::ToolCall {
                id: "tool-1".to_owned(),
                name: ToolName::plain("double"),
                kind: ToolKind::Function,
                input: Some(json!({"n": 21}).into()),
            });
            let Ok(RuntimeCommand::ToolResponse { result, .. }) = command_receiver.recv() else {
                return;
            };
            let _ = events.send_blocking(RuntimeEvent::Notify {
                call_id: "call-1".to_owned(),
                text: "halfway".to_owned(),
            });
            let _ = events.send_blocking(RuntimeEvent::ContentItem(OutputItem::text(format!(
                "double(21) = {result}"
            ))));
            let _ = events.send_blocking(RuntimeEvent::Result {
                stored_value_writes: codemode_protocol::stored_values_from([(
                    "answer".to_owned(),
                    result.to_value().unwrap_or_default(),
                )]),
                error_text: None,
            });
        });
        Ok(EngineHandles {
            commands: commands.into(),
            control: control.into(),
            terminate: TerminateHandle::new(Arc::new(NoTerminate)),
        })
    }
}

#[tokio::main]
async fn main() {
    let host = Arc::new(MapHost::default());
    let cell = CellStart {
        tenant: None,
        call_id: "call-1".to_owned(),
        source: String::new(),
        enabled_tools: Vec::new(),
        unavailable_servers: Vec::new(),
        stored_values: Default::default(),
        limits: Default::default(),
        pending_mode: PendingMode::PauseUntilResumed,
    };
    let StartedCell {
        handle,
        first_observation,
        task,
    } = start_cell(
        &ScriptedEngine,
        cell,
        Arc::clone(&host),
        CellConfig::default(),
        Observation::yield_after(Duration::from_secs(5)),
    )
    .expect("the engine starts");
    tokio::spawn(task);
    match first_observation.await {
        Ok(CellEvent::Completed {
            output, error_text, ..
        }) => {
            for item in output.into_items() {
                if let OutputItem::Text { text } = item {
                    println!("text: {text}");
                }
            }
            println!("error: {error_text:?}");
        }
        other => println!("observed: {other:?}"),
    }
    drop(handle);
    println!(
        "stored: {:?}",
        host.stored_values.lock().expect("not poisoned")
    );
}
