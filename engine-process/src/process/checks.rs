//! The rules a child's frames are held to: the child is hostile native code once it has run a
//! cell, so every frame is checked against what the parent sent it (a cell it hosts, on that
//! cell's lane, within what such a frame may carry), and a frame that breaks a rule ends the
//! process with a [`Misbehaviour`] that says which.

use parking_lot::Mutex;
use std::time::Duration;

use codemode_engine::RuntimeEvent;
use codemode_protocol::JsonText;

use super::state::ProcessState;
use crate::wire::{self, CellNumber, ToParent};

/// Checks a cell's frame from the child (from `check_lane`) against what the parent sent
/// it: a cell it hosts, within the limits of what such a frame may carry. The child is hostile native code once it has
/// run a cell; an error ends it.
pub(super) fn check_cell_frame(
    state: &Mutex<ProcessState>,
    message: &ToParent,
    length: usize,
) -> Result<(), Misbehaviour> {
    use codemode_protocol::limits::{
        MAX_STORED_BYTES_PER_CELL, MAX_TOOL_INPUT_BYTES, MAX_TOOL_INPUT_BYTES_IN_FLIGHT,
    };
    let hosts = |cell: &CellNumber| state.lock().cells.contains_key(cell);
    match message {
        ToParent::Event { cell, event } => {
            let mut state = state.lock();
            let Some(slot) = state.cells.get_mut(cell) else {
                return Err(Misbehaviour::UnknownCell(*cell));
            };
            if let Some(limit) = wire::event_frame_limit(event)
                && length > limit
            {
                return Err(Misbehaviour::OversizedEvent { length, limit });
            }
            match event {
                RuntimeEvent::ToolCall { id, input, .. } => {
                    slot.tool_calls += 1;
                    if slot.tool_calls > slot.max_tool_calls {
                        return Err(Misbehaviour::TooManyToolCalls {
                            limit: slot.max_tool_calls,
                        });
                    }
                    let bytes = input.as_ref().map_or(0, JsonText::len);
                    if let Some(Err(why)) = input.as_ref().map(JsonText::check_readable) {
                        return Err(Misbehaviour::UnreadableToolInput(why));
                    }
                    if bytes > MAX_TOOL_INPUT_BYTES {
                        return Err(Misbehaviour::OversizedToolInput { bytes });
                    }
                    let in_flight = slot.tool_input_in_flight_bytes + bytes;
                    if in_flight > MAX_TOOL_INPUT_BYTES_IN_FLIGHT {
                        return Err(Misbehaviour::ToolInputInFlight { bytes: in_flight });
                    }
                    if slot
                        .tool_input_in_flight
                        .insert(id.clone(), bytes)
                        .is_some()
                    {
                        return Err(Misbehaviour::RepeatedToolCall(id.clone()));
                    }
                    slot.tool_input_in_flight_bytes = in_flight;
                }
                RuntimeEvent::Result {
                    stored_value_writes,
                    ..
                } => {
                    let bytes = codemode_protocol::stored_bytes(stored_value_writes);
                    if bytes > MAX_STORED_BYTES_PER_CELL {
                        return Err(Misbehaviour::StoredValuesTooLarge { bytes });
                    }
                }
                _ => {}
            }
            Ok(())
        }
        ToParent::Ended { cell } | ToParent::StartFailed { cell, .. } if !hosts(cell) => {
            Err(Misbehaviour::EndedUnknownCell(*cell))
        }
        ToParent::Thread { cell, .. } if !hosts(cell) => Err(Misbehaviour::UnknownCell(*cell)),
        // The process's own frames never come here: `check_lane` refuses them first.
        _ => Ok(()),
    }
}

/// Checks a frame from the process's own channel: nothing of a cell comes there.
pub(super) fn check_control(message: &ToParent) -> Result<(), Misbehaviour> {
    match message {
        ToParent::Event { cell, .. }
        | ToParent::Thread { cell, .. }
        | ToParent::Ended { cell }
        | ToParent::StartFailed { cell, .. } => Err(Misbehaviour::OffLane {
            cell: *cell,
            lane: None,
        }),
        ToParent::Ready { .. } | ToParent::Failed { .. } => Err(Misbehaviour::ReadyAgain),
        _ => Ok(()),
    }
}

/// Checks a frame from the lane of cell `lane_cell`: of that cell, and within its limits.
pub(super) fn check_lane(
    state: &Mutex<ProcessState>,
    lane_cell: CellNumber,
    message: &ToParent,
    length: usize,
) -> Result<(), Misbehaviour> {
    match message {
        ToParent::Event { cell, .. }
        | ToParent::Thread { cell, .. }
        | ToParent::Ended { cell }
        | ToParent::StartFailed { cell, .. }
            if *cell != lane_cell =>
        {
            Err(Misbehaviour::OffLane {
                cell: *cell,
                lane: Some(lane_cell),
            })
        }
        ToParent::Event { .. }
        | ToParent::Thread { .. }
        | ToParent::Ended { .. }
        | ToParent::StartFailed { .. } => check_cell_frame(state, message, length),
        _ => Err(Misbehaviour::OffLane {
            cell: lane_cell,
            lane: None,
        }),
    }
}

/// Why the parent ended an engine process: a frame that breaks what the parent sent it, or a
/// channel it stopped reading. The child is hostile native code once it has run a cell, so each
/// of these ends it, and its cells fail with the reason (worded as "… because {reason}").
#[derive(Debug, thiserror::Error)]
pub(super) enum Misbehaviour {
    #[error("it sent a frame that is not valid: {0}")]
    InvalidFrame(std::io::Error),
    #[error("it sent an event for cell {0}, which it does not host")]
    UnknownCell(CellNumber),
    #[error("it sent an event of {length} bytes where the limits allow {limit}")]
    OversizedEvent { length: usize, limit: usize },
    #[error("it sent more tool calls than the cell's limit of {limit}")]
    TooManyToolCalls { limit: u64 },
    #[error(
        "it sent a tool call with {bytes} bytes of arguments, past the limit of {}",
        codemode_protocol::limits::MAX_TOOL_INPUT_BYTES
    )]
    OversizedToolInput { bytes: usize },
    #[error(
        "it sent tool calls holding {bytes} bytes of arguments at once, past the limit of {}",
        codemode_protocol::limits::MAX_TOOL_INPUT_BYTES_IN_FLIGHT
    )]
    ToolInputInFlight { bytes: usize },
    #[error("it sent a tool call whose argument no tool could read: it {0}")]
    UnreadableToolInput(codemode_protocol::JsonTextError),
    #[error("it sent tool call {0:?} twice")]
    RepeatedToolCall(String),
    #[error(
        "it sent {bytes} bytes of stored values for one cell, past the limit of {}",
        codemode_protocol::limits::MAX_STORED_BYTES_PER_CELL
    )]
    StoredValuesTooLarge { bytes: usize },
    #[error("it said cell {0} ended, which it does not host")]
    EndedUnknownCell(CellNumber),
    #[error("it sent an event for cell {cell} {}", match lane {
        Some(lane) => format!("on the channel of cell {lane}"),
        None => "on a channel that is not the cell's".to_owned(),
    })]
    OffLane {
        cell: CellNumber,
        lane: Option<CellNumber>,
    },
    #[error(
        "it stopped reading its channel: a cell's start was not taken up within {} ms",
        deadline.as_millis()
    )]
    StartNotTaken { deadline: Duration },
    #[error("it said it was ready a second time")]
    ReadyAgain,
    #[error("it stopped reading its channel ({waiting} bytes waited to be written to it)")]
    StoppedReading { waiting: usize },
    #[error("it stopped reading its channel for {} ms", deadline.as_millis())]
    StalledWrite { deadline: Duration },
    #[error("it did not say that cell {cell} ended within {after} of the cell's result")]
    EndNotSaid { cell: CellNumber, after: String },
}

/// How a process ended, in words.
/// How a process ended, in words: its exit code, or its signal by name.
pub(super) fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(signal)
            .map(|signal| signal.as_str().to_owned())
            .unwrap_or_else(|_| format!("signal {signal}"));
        let hint = match name.as_str() {
            "SIGKILL" => ", perhaps the system's out-of-memory killer",
            "SIGABRT" | "SIGTRAP" => ", a fatal error in the engine",
            "SIGSYS" => ", a system call its sandbox forbids",
            _ => "",
        };
        format!("killed by {name}{hint}")
    } else {
        match status.code() {
            Some(code) => format!("exit code {code}"),
            None => status.to_string(),
        }
    }
}
