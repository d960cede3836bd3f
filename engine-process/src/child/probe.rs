//! The test hooks' probes: what a test of the walls asks an engine process to try from inside
//! (a native attack, a forged frame, a file, a socket, a process), and its answer.

#[cfg(feature = "test-hooks")]
use std::collections::HashMap;

#[cfg(feature = "test-hooks")]
use codemode_engine::RuntimeEvent;

#[cfg(feature = "test-hooks")]
use crate::wire::{self, Probe, ToParent};

/// A test-only attack run by native code of the engine host inside the sandbox (builds with the
/// `test-hooks` feature): `(attack, target)` to `Ok(what happened)` if it succeeded, `Err(why
/// not)` if it was refused.
pub type NativeProbe = fn(&str, &str) -> Result<String, String>;

/// What a probe may reach of the process that answers it.
#[cfg(feature = "test-hooks")]
pub(super) struct Reach<'a> {
    /// The native probe of the engine host, if it gave one.
    pub native: Option<NativeProbe>,
    /// How many terminations the process has read.
    pub terminations_read: u64,
    /// Writes bytes straight to the process's control channel.
    pub write_control: &'a dyn Fn(&[u8]),
    /// Writes bytes straight to the lane of the newest cell, past the child's own checks.
    pub write_newest_lane: &'a dyn Fn(&[u8]),
}

/// Tries what `what` names, for tests of the walls: whether it was allowed and what happened,
/// or `None` when nothing answers (the process crashes, or the parent ends it). A forgery is
/// answered once its frames are written, so that the parent has them before anything the test
/// does next (it may have ended the process for them already).
#[cfg(feature = "test-hooks")]
pub(super) fn probe(what: Probe, reach: &Reach<'_>) -> Option<(bool, String)> {
    use crate::wire::Forgery;
    let outcome = match what {
        Probe::Native { attack, target } => {
            let Some(native) = reach.native else {
                return Some((false, "this engine host has no native probe".to_owned()));
            };
            return Some(match native(&attack, &target) {
                Ok(detail) => (true, detail),
                Err(detail) => (false, detail),
            });
        }
        Probe::Forge(forgery) => {
            let forged = match forgery {
                Forgery::EventForAnotherCell(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::ContentItem(codemode_protocol::OutputItem::text(
                        "forged output",
                    )),
                },
                Forgery::ResultForAnotherCell(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::Result {
                        stored_value_writes: HashMap::from([(
                            "forged".to_owned(),
                            codemode_protocol::StoredValue::from(serde_json::Value::from(true)),
                        )]),
                        error_text: None,
                    },
                },
                Forgery::OversizedToolCall(cell) => forged_tool_call(
                    cell,
                    0,
                    Some(
                        serde_json::Value::String(
                            "x".repeat(7 * codemode_protocol::limits::MAX_TOOL_INPUT_BYTES),
                        )
                        .into(),
                    ),
                ),
                Forgery::UnreadableToolCall(cell) => forged_tool_call(
                    cell,
                    0,
                    // Deserialising checks only the syntax: the forged text gets through here.
                    serde_json::from_str(r#"{"text": "\ud800"}"#).ok(),
                ),
                Forgery::ToolCallsPastTheInFlightLimit(cell) => {
                    use codemode_protocol::limits::{
                        MAX_TOOL_INPUT_BYTES, MAX_TOOL_INPUT_BYTES_IN_FLIGHT,
                    };
                    let calls = MAX_TOOL_INPUT_BYTES_IN_FLIGHT / MAX_TOOL_INPUT_BYTES + 1;
                    let input = codemode_protocol::JsonText::from(serde_json::Value::String(
                        "x".repeat(MAX_TOOL_INPUT_BYTES - 2),
                    ));
                    for call in 0..calls {
                        send_forged(reach, &forged_tool_call(cell, call, Some(input.clone())));
                    }
                    return Some((true, "forged".to_owned()));
                }
                Forgery::ToolCallsPastTheCallLimit(cell) => {
                    let calls = codemode_protocol::limits::DEFAULT_MAX_TOOL_CALLS_PER_CELL + 1;
                    for call in 0..calls as usize {
                        send_forged(reach, &forged_tool_call(cell, call, None));
                    }
                    return Some((true, "forged".to_owned()));
                }
                Forgery::StoredValuesPastTheLimit(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::Result {
                        stored_value_writes: (0..5)
                            .map(|key| {
                                let value = serde_json::Value::String("x".repeat(16 << 20));
                                (key.to_string(), codemode_protocol::StoredValue::from(value))
                            })
                            .collect(),
                        error_text: None,
                    },
                },
                Forgery::ResultWithoutEnd(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::Result {
                        stored_value_writes: HashMap::new(),
                        error_text: None,
                    },
                },
                Forgery::HugeHeader => {
                    (reach.write_control)(&u32::MAX.to_le_bytes());
                    return Some((true, "forged".to_owned()));
                }
            };
            send_forged(reach, &forged);
            return Some((true, "forged".to_owned()));
        }
        Probe::StopReading => return None,
        Probe::TerminationsRead => {
            return Some((true, reach.terminations_read.to_string()));
        }
        Probe::OpenForWriting => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(format!("/tmp/codemode-probe-{}", std::process::id()))
            .map(|_| ()),
        Probe::Socket => std::net::UdpSocket::bind("127.0.0.1:0").map(|_| ()),
        Probe::Exec => std::process::Command::new("/bin/true").status().map(|_| ()),
        Probe::FatalError => {
            eprintln!(
                "\n#\n# Fatal error in probe.cc, line 1\n# Check failed: a test-only fatal error.\n#"
            );
            std::process::abort()
        }
    };
    Some(match outcome {
        Ok(()) => (true, "allowed".to_owned()),
        Err(error) => (false, error.to_string()),
    })
}

/// A forged call of `echo` numbered `call`, for cell `cell` (its id starts with `tool-forged`).
#[cfg(feature = "test-hooks")]
fn forged_tool_call(
    cell: u64,
    call: usize,
    input: Option<codemode_protocol::JsonText>,
) -> ToParent {
    ToParent::Event {
        cell,
        event: RuntimeEvent::ToolCall {
            id: format!("tool-forged-{call}"),
            name: codemode_protocol::ToolName::plain("echo"),
            kind: codemode_protocol::ToolKind::Function,
            input,
        },
    }
}

/// Writes a forged frame straight to the lane of the newest cell, past the child's own checks.
#[cfg(feature = "test-hooks")]
fn send_forged(reach: &Reach<'_>, forged: &ToParent) {
    if let Ok(frame) = wire::encode(forged) {
        (reach.write_newest_lane)(&frame);
    }
}
