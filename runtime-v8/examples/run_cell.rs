//! Runs a `.js` file as one cell on V8 and prints its output items, one JSON object a line, then
//! how it ended.
//!
//! Two demo tools are enabled so that scripts can exercise tool calls with nothing else installed:
//! `tools.echo(value)` resolves with its argument, `tools.sleep({ms})` resolves after that long.
//!
//! ```text
//! cargo run -p codemode-runtime-v8 --example run_cell -- examples/hello.js
//! ```

use std::process::ExitCode;
use std::time::Duration;

use codemode_engine::{
    CellLimits, CellStart, Engine, PendingMode, RuntimeCommand, RuntimeEvent, event_channel,
};
use codemode_protocol::{ToolDefinition, ToolName};
use codemode_runtime_v8::V8Engine;
use serde_json::json;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: run_cell <file.js>");
        return ExitCode::from(2);
    };
    let source = match std::fs::read_to_string(&path) {
        Ok(source) => source,
        Err(error) => {
            eprintln!("error: cannot read {path}: {error}");
            return ExitCode::from(2);
        }
    };
    let mut echo = ToolDefinition::function(ToolName::plain("echo"), "Resolves with its argument.");
    echo.input_schema = Some(json!({}));
    let mut sleep = ToolDefinition::function(
        ToolName::plain("sleep"),
        "Resolves after `ms` milliseconds.",
    );
    sleep.input_schema = Some(json!({"type": "object", "properties": {"ms": {"type": "integer"}}}));
    let engine = V8Engine::new();
    let (events, mut receiver) = event_channel(None);
    let cell = CellStart {
        tenant: None,
        call_id: "example".into(),
        source,
        enabled_tools: vec![echo, sleep],
        unavailable_servers: Vec::new(),
        stored_values: Default::default(),
        limits: CellLimits::default(),
        pending_mode: PendingMode::Continue,
    };
    let handles = match engine.start(cell, events) {
        Ok(handles) => handles,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    while let Some(event) = receiver.blocking_recv() {
        match event {
            RuntimeEvent::ContentItem(item) => {
                println!("{}", serde_json::to_string(&item).unwrap())
            }
            RuntimeEvent::Notify { text, .. } => eprintln!("notify: {text}"),
            RuntimeEvent::ToolCall {
                id, name, input, ..
            } => {
                let commands = handles.commands.clone();
                let input = input
                    .and_then(|text| text.to_value().ok())
                    .unwrap_or(serde_json::Value::Null);
                match name.name.as_str() {
                    "sleep" => {
                        let ms = input
                            .get("ms")
                            .and_then(serde_json::Value::as_u64)
                            .unwrap_or(0);
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(ms));
                            let _ = commands.send(RuntimeCommand::ToolResponse {
                                id,
                                result: json!(null).into(),
                            });
                        });
                    }
                    _ => {
                        let _ = commands.send(RuntimeCommand::ToolResponse {
                            id,
                            result: input.into(),
                        });
                    }
                }
            }
            RuntimeEvent::Result {
                error_text: Some(error_text),
                ..
            } => {
                eprintln!("cell failed:\n{error_text}");
                return ExitCode::FAILURE;
            }
            RuntimeEvent::Result {
                stored_value_writes,
                error_text: None,
            } => {
                eprintln!(
                    "cell completed; stored values written: {}",
                    stored_value_writes.len()
                );
                return ExitCode::SUCCESS;
            }
            RuntimeEvent::ThreadPanicked => {
                eprintln!("the runtime thread panicked");
                return ExitCode::FAILURE;
            }
            _ => {}
        }
    }
    eprintln!("the runtime ended without a result");
    ExitCode::FAILURE
}
