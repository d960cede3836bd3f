//! Drives real cells of the engine under test through the engine's channels, as a cell actor
//! would: start a cell, read its events, answer its tools.
//!
//! Deadlines here only guard against hangs: a test that waits longer than [`HANG_GUARD`] for an
//! event fails with "hung".

use std::collections::HashMap;
use std::time::Duration;

use codemode_engine::{
    CellLimits, CellStart, Engine, EngineHandles, EventReceiver, PendingMode, RuntimeCommand,
    RuntimeEvent, event_channel,
};
use codemode_protocol::{JsonText, OutputItem, ToolDefinition, ToolName};
use serde_json::{Value, json};

pub use crate::HANG_GUARD;

use super::subject::subject;

/// Options of a test cell; `Default` is a client-mode cell with the `echo`, `fail` and `web.search`
/// tools, no stored values and the default limits.
pub struct Options {
    /// The tools the cell may call.
    pub tools: Vec<ToolDefinition>,
    /// The stored values the cell starts with.
    pub stored_values: HashMap<String, Value>,
    /// Its heap limit.
    pub heap_limit_bytes: usize,
    /// Its CPU budget.
    pub cpu_time_limit: Option<Duration>,
    /// How it behaves at its pending frontier.
    pub pending_mode: PendingMode,
    /// The engine that runs it.
    pub engine: std::sync::Arc<dyn Engine>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("heap_limit_bytes", &self.heap_limit_bytes)
            .field("cpu_time_limit", &self.cpu_time_limit)
            .field("pending_mode", &self.pending_mode)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// The default options, for a cell of `engine`.
    pub fn for_engine(engine: std::sync::Arc<dyn Engine>) -> Self {
        Options {
            tools: vec![
                ToolDefinition::function(ToolName::plain("echo"), "Resolves with its argument."),
                ToolDefinition::function(ToolName::plain("fail"), "Always fails."),
                ToolDefinition::function(
                    ToolName::namespaced("web", "search"),
                    "Searches the web.",
                ),
            ],
            stored_values: Default::default(),
            heap_limit_bytes: CellLimits::default().heap_limit_bytes,
            cpu_time_limit: CellLimits::default().cpu_time_limit,
            pending_mode: PendingMode::Continue,
            engine,
        }
    }
}

impl Default for Options {
    /// The default options, for a cell of the engine under test.
    fn default() -> Self {
        Options::for_engine(subject().engine())
    }
}

/// A running cell and the test's end of its channels.
pub struct Cell {
    /// The cell's events.
    pub events: EventReceiver,
    /// The cell's commands, controls and terminate handle.
    pub handles: EngineHandles,
    runtime: tokio::runtime::Runtime,
    /// The engine, kept for as long as its cell: an engine of engine processes ends its
    /// processes, and their cells, when it is dropped.
    pub(crate) engine: std::sync::Arc<dyn Engine>,
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell").finish_non_exhaustive()
    }
}

/// How a cell ended, with everything it emitted on the way.
#[derive(Debug, Default)]
pub struct Finished {
    /// The output items, in order.
    pub items: Vec<OutputItem>,
    /// Every event, in order.
    pub events: Vec<RuntimeEvent>,
    /// `Some` when the cell sent a result: the writes and the error text.
    pub result: Option<(HashMap<String, Value>, Option<String>)>,
    /// Whether the runtime thread reported a panic.
    pub panicked: bool,
}

impl Finished {
    /// The texts of the text items, in order.
    pub fn texts(&self) -> Vec<String> {
        self.items
            .iter()
            .filter_map(|item| match item {
                OutputItem::Text { text } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    /// The error text of a cell that completed with an error.
    pub fn error(&self) -> Option<&str> {
        self.result.as_ref().and_then(|(_, error)| error.as_deref())
    }

    /// Whether the cell completed (with or without error), as opposed to being terminated.
    pub fn completed(&self) -> bool {
        self.result.is_some()
    }

    /// How many events satisfy `wanted`.
    pub fn count(&self, wanted: fn(&RuntimeEvent) -> bool) -> usize {
        self.events.iter().filter(|event| wanted(event)).count()
    }
}

/// Starts `source` with the default options.
pub fn start(source: &str) -> Cell {
    start_with(source, Options::default())
}

/// Starts `source` with `options`.
pub fn start_with(source: &str, options: Options) -> Cell {
    let (sender, events) = event_channel(None);
    let handles = options
        .engine
        .start(
            CellStart {
                tenant: None,
                call_id: "call-1".into(),
                source: source.into(),
                enabled_tools: options.tools,
                unavailable_servers: Vec::new(),
                stored_values: std::sync::Arc::new(codemode_protocol::stored_values_from(
                    options.stored_values,
                )),
                limits: CellLimits::default()
                    .with_heap_limit_bytes(options.heap_limit_bytes)
                    .with_cpu_time_limit(options.cpu_time_limit),
                pending_mode: options.pending_mode,
            },
            sender,
        )
        .expect("the engine starts the cell");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    Cell {
        events,
        handles,
        runtime,
        engine: options.engine,
    }
}

/// Runs `source` to its end, answering tools the standard way (see [`Cell::answer`]).
pub fn run(source: &str) -> Finished {
    start(source).finish()
}

/// Runs `source` with `options` to its end, answering tools the standard way.
pub fn run_with(source: &str, options: Options) -> Finished {
    start_with(source, options).finish()
}

impl Cell {
    /// The next event, or `None` once the runtime thread has ended; fails the test if it hangs.
    #[allow(clippy::should_implement_trait)] // a blocking read with a hang guard, not an iterator
    pub fn next(&mut self) -> Option<RuntimeEvent> {
        self.next_within(HANG_GUARD)
            .unwrap_or_else(|| panic!("hung: no event from the cell within {HANG_GUARD:?}"))
    }

    /// The next event within `limit`: `None` if none came in time, `Some(None)` if the thread ended.
    pub fn next_within(&mut self, limit: Duration) -> Option<Option<RuntimeEvent>> {
        let events = &mut self.events;
        self.runtime
            .block_on(async { tokio::time::timeout(limit, events.recv()).await.ok() })
    }

    /// Waits for the first event that satisfies `wanted`, recording what came before it.
    pub fn next_matching(
        &mut self,
        seen: &mut Vec<RuntimeEvent>,
        wanted: impl Fn(&RuntimeEvent) -> bool,
    ) -> RuntimeEvent {
        loop {
            let event = self
                .next()
                .expect("the cell ended before the awaited event");
            if wanted(&event) {
                return event;
            }
            seen.push(event);
        }
    }

    /// The standard answers: `echo` resolves with its input, `fail` fails with "it failed",
    /// anything else resolves with `{tool, input}`.
    pub fn answer(&self, id: String, name: &ToolName, input: Option<JsonText>) {
        let command = match name.name.as_str() {
            "echo" => RuntimeCommand::ToolResponse {
                id,
                result: input.unwrap_or_else(|| JsonText::from(Value::Null)),
            },
            "fail" => RuntimeCommand::ToolError {
                id,
                error_text: "it failed".into(),
            },
            _ => RuntimeCommand::ToolResponse {
                id,
                result: json!({
                    "tool": name.global_name(),
                    "input": input.map(|input| input.to_value().expect("the engine checked it")),
                })
                .into(),
            },
        };
        self.handles.commands.send(command).unwrap();
    }

    /// Reads events to the end, answering every tool call at once.
    pub fn finish(self) -> Finished {
        self.collect(ToolCalls::Answer)
    }

    /// Reads events to the end without answering anything.
    pub fn drain(self) -> Finished {
        self.collect(ToolCalls::Ignore)
    }

    fn collect(mut self, tool_calls: ToolCalls) -> Finished {
        let mut finished = Finished::default();
        while let Some(event) = self.next() {
            match &event {
                RuntimeEvent::ContentItem(item) => finished.items.push(item.clone()),
                RuntimeEvent::ToolCall {
                    id, name, input, ..
                } if tool_calls == ToolCalls::Answer => {
                    self.answer(id.clone(), name, input.clone())
                }
                RuntimeEvent::Result {
                    stored_value_writes,
                    error_text,
                } => finished.result = Some((trees(stored_value_writes), error_text.clone())),
                RuntimeEvent::ThreadPanicked => finished.panicked = true,
                _ => {}
            }
            finished.events.push(event);
        }
        finished
    }
}

/// Whether reading a cell to its end answers its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolCalls {
    Answer,
    Ignore,
}

/// The texts of a cell that must complete without error.
pub fn texts_of(source: &str) -> Vec<String> {
    let finished = run(source);
    assert_eq!(finished.error(), None, "the cell failed");
    assert!(
        finished.completed(),
        "the cell did not complete: {finished:?}"
    );
    finished.texts()
}

/// The error text of a cell that must fail.
pub fn error_of(source: &str) -> String {
    let finished = run(source);
    finished
        .error()
        .unwrap_or_else(|| panic!("the cell did not fail: {finished:?}"))
        .to_owned()
}

/// Stored values as trees, for assertions.
pub fn trees(values: &codemode_protocol::StoredValues) -> HashMap<String, Value> {
    values
        .iter()
        .map(|(key, value)| {
            (
                key.clone(),
                value.to_value().expect("stored values are JSON"),
            )
        })
        .collect()
}
