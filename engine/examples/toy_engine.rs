//! Recipe: implementing the [`Engine`] trait.
//!
//! A toy engine whose "language" is one instruction a line: `text <words>` emits a text item,
//! `tool <name>` calls a tool and waits for its answer, `fail <words>` ends the cell with an error.
//! It shows what every engine owes its actor: a thread of its own per cell, `Started` first, a
//! `Result` last (unless terminated), commands read from the command channel, and a terminate
//! handle that works from any thread.
//!
//! ```text
//! cargo run -p codemode-engine --example toy_engine
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use codemode_engine::{
    CellStart, Engine, EngineError, EngineHandles, EventSender, PendingMode, RuntimeCommand,
    RuntimeEvent, Terminate, TerminateHandle, event_channel,
};
use codemode_protocol::{OutputItem, ToolKind, ToolName};
use serde_json::json;

/// Runs each cell's lines on a thread of its own.
struct ToyEngine;

/// Terminating a toy cell sets a flag its thread checks between lines.
struct ToyTerminate(Arc<AtomicBool>);

impl Terminate for ToyTerminate {
    fn terminate(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Engine for ToyEngine {
    fn describe(&self) -> String {
        "toy 1.0".to_owned()
    }

    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        let (commands, command_receiver) = mpsc::channel();
        let (control, _control_receiver) = mpsc::channel();
        let terminated = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&terminated);
        std::thread::Builder::new()
            .name("toy-cell".to_owned())
            .spawn(move || run(cell, events, command_receiver, flag))
            .map_err(EngineError::Thread)?;
        Ok(EngineHandles {
            commands: commands.into(),
            control: control.into(),
            terminate: TerminateHandle::new(Arc::new(ToyTerminate(terminated))),
        })
    }
}

/// The cell's thread: one line at a time, until the end, an error or termination.
fn run(
    cell: CellStart,
    events: EventSender,
    commands: mpsc::Receiver<RuntimeCommand>,
    terminated: Arc<AtomicBool>,
) {
    let _ = events.send_blocking(RuntimeEvent::Started);
    let mut calls = 0;
    for line in cell.source.lines() {
        if terminated.load(Ordering::SeqCst) {
            return; // A terminated cell sends no result.
        }
        let (instruction, rest) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        match instruction {
            "text" => {
                let _ = events.send_blocking(RuntimeEvent::ContentItem(OutputItem::text(rest)));
            }
            "tool" => {
                calls += 1;
                let id = format!("tool-{calls}");
                let _ = events.send_blocking(RuntimeEvent::ToolCall {
                    id: id.clone(),
                    name: ToolName::plain(rest),
                    kind: ToolKind::Function,
                    input: Some(json!({"from": "toy"}).into()),
                });
                // Wait for this call's answer; the actor sends it as a command.
                let answer = match commands.recv() {
                    Ok(RuntimeCommand::ToolResponse { result, .. }) => result.to_string(),
                    Ok(RuntimeCommand::ToolError { error_text, .. }) => error_text,
                    _ => return,
                };
                let text = format!("{rest} answered {answer}");
                let _ = events.send_blocking(RuntimeEvent::ContentItem(OutputItem::text(text)));
            }
            "fail" => {
                let _ = events.send_blocking(RuntimeEvent::Result {
                    stored_value_writes: HashMap::new(),
                    error_text: Some(rest.to_owned()),
                });
                return;
            }
            _ => {}
        }
    }
    let _ = events.send_blocking(RuntimeEvent::Result {
        stored_value_writes: HashMap::new(),
        error_text: None,
    });
}

fn main() {
    let engine = ToyEngine;
    let (sender, mut receiver) = event_channel(None);
    let cell = CellStart {
        tenant: None,
        call_id: "call-1".to_owned(),
        source: "text hello\ntool clock\ntext bye".to_owned(),
        enabled_tools: Vec::new(),
        unavailable_servers: Vec::new(),
        stored_values: Default::default(),
        limits: Default::default(),
        pending_mode: PendingMode::Continue,
    };
    let handles = engine.start(cell, sender).expect("the toy engine starts");
    println!("running on {}", engine.describe());
    // What a cell actor does, by hand: answer tool calls, collect output, stop at the result.
    while let Some(event) = receiver.blocking_recv() {
        match event {
            RuntimeEvent::ContentItem(OutputItem::Text { text }) => println!("text: {text}"),
            RuntimeEvent::ToolCall { id, .. } => {
                let _ = handles.commands.send(RuntimeCommand::ToolResponse {
                    id,
                    result: json!("12:00").into(),
                });
            }
            RuntimeEvent::Result { error_text, .. } => {
                println!("result: {}", error_text.as_deref().unwrap_or("completed"));
                break;
            }
            _ => {}
        }
    }
}
