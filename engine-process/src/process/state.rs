//! What the parent keeps of one engine process and its cells: plain data, changed under the
//! process's `state` lock ([`ProcessState`], a [`CellSlot`] per cell) and its idle lanes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use codemode_engine::{EventSender, HardStopReason, RuntimeEvent};

use super::verdict::Watch;
use crate::lane::{Lane, LaneWriter};
use crate::wire::CellNumber;

/// Whose cells a process holds (`None`: the embedder's one tenant): bound when its first cell is
/// placed, never changed.
pub(super) type Whose = Option<codemode_protocol::Tenant>;

#[derive(Debug, Default)]
pub(super) struct IdleLanes {
    pub(super) idle: Vec<Lane>,
    pub(super) made: u64,
}

#[derive(Debug, Default)]
pub(super) struct ProcessState {
    /// Whose cells it holds: `None` until its first cell is placed.
    pub(super) tenant: Option<Whose>,
    pub(super) cells: HashMap<CellNumber, CellSlot>,
    /// Cells placed over the process's life.
    pub(super) hosted: usize,
    /// Takes no new cells; closed once its last cell ends.
    pub(super) retired: bool,
    /// The channel closed: the process is gone or going.
    pub(super) ended: bool,
    /// What the child said before it ended itself.
    pub(super) hard_stop: Option<(Option<CellNumber>, HardStopReason, String)>,
    /// Once it has ended: how each cell that was in it ends (`None`: with no result), for its
    /// lane task to deliver after what the cell sent.
    pub(super) fates: HashMap<CellNumber, Option<RuntimeEvent>>,
    /// The cell whose stop the parent enforced by killing the process.
    pub(super) killed_for: Option<CellNumber>,
    /// Why the parent ended the process for misbehaving: a frame it did not ask for or that
    /// breaks a limit, or a channel it stopped reading.
    pub(super) misbehaved: Option<String>,
}

#[derive(Debug)]
pub(super) struct CellSlot {
    pub(super) events: EventSender,
    pub(super) call_id: String,
    pub(super) heap_limit_bytes: usize,
    pub(super) cpu_time_limit: Option<Duration>,
    /// Termination was asked: the cell ends without a result, whatever happens to the process.
    pub(super) terminating: bool,
    /// The argument bytes of the cell's tool calls not yet answered, by call id: the child
    /// bounds them, and the parent checks that it did.
    pub(super) tool_input_in_flight: HashMap<String, usize>,
    /// Their sum, kept as calls come and go.
    pub(super) tool_input_in_flight_bytes: usize,
    /// Tool calls the cell has made, and the most it may make.
    pub(super) tool_calls: u64,
    pub(super) max_tool_calls: u64,
    /// Its lane, once it has one.
    pub(super) lane: Option<Arc<LaneWriter>>,
    /// The child took its start up (it said the cell started).
    pub(super) started: bool,
    /// The child relayed the cell's last event (its result, or that its thread panicked): it ends
    /// the cell on its own, within the grace period, and a termination has nothing left to stop
    /// (the cell's owner terminates every cell it closes, so this spares each completed cell two
    /// frames and an armed grace kill).
    pub(super) finished: bool,
    /// The thread of the child that runs the cell, as the child said (`ToParent::Thread`).
    pub(super) thread: Option<u32>,
    /// What the child had when its result came, for judging how long it takes to say the cell
    /// ended (`verdict`).
    pub(super) end_watch: Option<Watch>,
    /// The deadline for that passed: the lane task judges it once it has read what waits.
    pub(super) end_due: bool,
}

/// A cell's failure, as the result its owner receives.
pub(super) fn failure(error_text: String) -> RuntimeEvent {
    RuntimeEvent::Result {
        stored_value_writes: HashMap::new(),
        error_text: Some(error_text),
    }
}

impl CellSlot {
    /// The slot of a cell about to be placed, sending its events to `events`.
    pub(super) fn new(
        events: EventSender,
        call_id: String,
        heap_limit_bytes: usize,
        cpu_time_limit: Option<Duration>,
        max_tool_calls: u64,
    ) -> Self {
        CellSlot {
            events,
            call_id,
            heap_limit_bytes,
            cpu_time_limit,
            terminating: false,
            tool_input_in_flight: HashMap::new(),
            tool_input_in_flight_bytes: 0,
            tool_calls: 0,
            max_tool_calls,
            lane: None,
            started: false,
            finished: false,
            thread: None,
            end_watch: None,
            end_due: false,
        }
    }
}
