//! The Rust side of the bootstrap's `host(op, a?, b?)`: turns each call of a global into an event,
//! an answer, or a refusal, by way of the engine-independent rules in [`crate::globals`].
//!
//! State: the cell's [`CellGlobals`] (tool-call ids, stored values and writes), its timer table, the
//! event sender, and what the cell asked of the runtime thread (exit, or that nobody listens).

use std::time::Instant;

use super::ops::HostOp;
use crate::globals::{self, CellGlobals, JsString, Refusal};
use crate::timers::{Timers, normalize_delay};
use crate::{EventSender, RuntimeEvent};

/// What the host answers to one host call from JavaScript.
#[derive(Debug)]
pub enum HostReply {
    /// Return `undefined`.
    Undefined,
    /// Return this string.
    String(String),
    /// Throw an `Error` with this message.
    Throw(String),
    /// Terminate execution at once.
    Terminate,
}

/// The Rust side of the host-call entry point, as an engine's runtime calls it.
pub trait Host {
    /// `host(op, a?, b?)` from the bootstrap; `a` and `b` are `None` when JavaScript passed
    /// `undefined`. The bytes are the engine's UTF-8, in which a lone surrogate may be its own
    /// three bytes (decoded with [`JsString`]).
    fn call(&mut self, op: i32, a: Option<&[u8]>, b: Option<&[u8]>) -> HostReply;
}

/// Why the host stopped the cell's JavaScript from inside a host call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostStop {
    /// The cell called `exit()`.
    Exit,
    /// The event receiver is gone: nobody will ever read this cell's output.
    Abandoned,
}

/// The host of one cell's bootstrap: the cell's globals, timers and events.
#[derive(Debug)]
pub struct CellHost {
    /// The cell's globals: tool calls, stored values.
    pub globals: CellGlobals,
    /// The cell's timers.
    pub timers: Timers,
    events: EventSender,
    /// The first reason the host stopped the cell, if it did.
    pub stop: Option<HostStop>,
    /// Whether the test-only ops answer (an engine built with its test hooks sets this).
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    test_hooks: bool,
}

impl CellHost {
    /// The host of a cell with these globals, sending its events to `events`; `test_hooks` makes
    /// the test-only ops answer (only engines built for tests pass true).
    pub fn new(globals: CellGlobals, events: EventSender, test_hooks: bool) -> Self {
        CellHost {
            globals,
            timers: Timers::default(),
            events,
            stop: None,
            test_hooks,
        }
    }

    /// Lets go of the cell's event sender (a closed one takes its place), so that the cell's
    /// owner sees its events end while the runtime is still being disposed of.
    pub fn release_events(&mut self) {
        let (closed, _) = crate::event_channel(None);
        self.events = closed;
    }

    /// Sends an event; returns false (and records that the cell is abandoned) if nobody listens.
    pub fn emit(&mut self, event: RuntimeEvent) -> bool {
        if self.events.send_blocking(event).is_ok() {
            return true;
        }
        self.stop.get_or_insert(HostStop::Abandoned);
        false
    }

    fn emit_reply(&mut self, event: RuntimeEvent) -> HostReply {
        if self.emit(event) {
            HostReply::Undefined
        } else {
            HostReply::Terminate
        }
    }

    fn stop_with(&mut self, stop: HostStop) -> HostReply {
        self.stop.get_or_insert(stop);
        HostReply::Terminate
    }
}

fn refused(refusal: Refusal) -> HostReply {
    HostReply::Throw(refusal.message)
}

/// A JavaScript string from the engine, decoded (each lone surrogate one U+FFFD, and recorded).
fn js_string(bytes: Option<&[u8]>) -> JsString {
    JsString::decode(bytes.unwrap_or_default())
}

/// Text the bootstrap produced itself (JSON, numbers), which never holds a lone surrogate:
/// borrowed, not copied, and decoded only by the ops that read it.
fn plain(bytes: Option<&[u8]>) -> Option<std::borrow::Cow<'_, str>> {
    bytes.map(String::from_utf8_lossy)
}

impl Host for CellHost {
    fn call(&mut self, op: i32, raw_a: Option<&[u8]>, raw_b: Option<&[u8]>) -> HostReply {
        // Once the cell called `exit()` (or nobody listens), its JavaScript may still run until
        // V8 next checks for the termination (a `toJSON` that calls `exit()` returns into the
        // `text()` that called it): nothing it asks for happens any more.
        if self.stop.is_some() {
            return HostReply::Terminate;
        }
        match HostOp::from_number(op) {
            Some(HostOp::Text) => self.emit_reply(RuntimeEvent::ContentItem(globals::text_item(
                js_string(raw_a).text,
            ))),
            Some(HostOp::Image) => match globals::image_item(
                parse_json(plain(raw_a).as_deref()),
                plain(raw_b).as_deref(),
            ) {
                Ok(item) => self.emit_reply(RuntimeEvent::ContentItem(item)),
                Err(refusal) => refused(refusal),
            },
            Some(HostOp::GeneratedImage) => {
                match globals::generated_image_items(parse_json(plain(raw_a).as_deref())) {
                    Ok(items) => {
                        for item in items {
                            if !self.emit(RuntimeEvent::ContentItem(item)) {
                                return HostReply::Terminate;
                            }
                        }
                        HostReply::Undefined
                    }
                    Err(refusal) => refused(refusal),
                }
            }
            Some(HostOp::Audio) => match globals::audio_item(parse_json(plain(raw_a).as_deref())) {
                Ok(item) => self.emit_reply(RuntimeEvent::ContentItem(item)),
                Err(refusal) => refused(refusal),
            },
            Some(HostOp::Store) => match self
                .globals
                .store(&js_string(raw_a), plain(raw_b).as_deref())
            {
                Ok(()) => HostReply::Undefined,
                Err(refusal) => refused(refusal),
            },
            Some(HostOp::Load) => match self.globals.load(&js_string(raw_a)) {
                Some(json) => HostReply::String(json),
                None => HostReply::Undefined,
            },
            Some(HostOp::Notify) => match self.globals.notify(js_string(raw_a).text) {
                Ok(event) => self.emit_reply(event),
                Err(refusal) => refused(refusal),
            },
            Some(HostOp::Yield) => self.emit_reply(RuntimeEvent::YieldRequested),
            Some(HostOp::Exit) => self.stop_with(HostStop::Exit),
            Some(HostOp::ToolCall) => {
                let index = plain(raw_a)
                    .and_then(|index| index.parse::<usize>().ok())
                    .unwrap_or(usize::MAX);
                match self
                    .globals
                    .tool_call(index, plain(raw_b).map(std::borrow::Cow::into_owned))
                {
                    Ok(event) => {
                        let RuntimeEvent::ToolCall { id, .. } = &event else {
                            unreachable!("tool_call returns a ToolCall event");
                        };
                        let id = id.clone();
                        if self.emit(event) {
                            HostReply::String(id)
                        } else {
                            HostReply::Terminate
                        }
                    }
                    Err(refusal) => refused(refusal),
                }
            }
            Some(HostOp::SetTimeout) => {
                let delay = plain(raw_a)
                    .and_then(|delay| delay.parse::<f64>().ok())
                    .unwrap_or(0.0);
                let id = self.timers.set(Instant::now(), normalize_delay(delay));
                HostReply::String(id.to_string())
            }
            Some(HostOp::ClearTimeout) => {
                if let Some(id) = plain(raw_a).and_then(|id| id.parse::<u64>().ok()) {
                    self.timers.clear(id);
                }
                HostReply::Undefined
            }
            // The injected panic exists only in builds made for tests.
            #[cfg(feature = "test-hooks")]
            Some(HostOp::TestPanic) if self.test_hooks => panic!("a panic injected by a test hook"),
            _ => HostReply::Throw(format!("unknown host operation {op}")),
        }
    }
}

fn parse_json(text: Option<&str>) -> Option<serde_json::Value> {
    text.and_then(|text| serde_json::from_str(text).ok())
}
