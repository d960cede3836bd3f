//! Lanes: a way for a runtime thread to wait for its own work, with nothing in between.
//!
//! In-process, a cell's commands reach its runtime thread over a channel ([`crate::CommandSender`]).
//! An engine process can do better than a channel: it gives each runtime thread a *lane* of its
//! own (a socket to the parent), and the thread itself blocks on the lane for its next cell's
//! start, then for that cell's commands and controls, and writes the cell's events to it. No
//! other thread of the process wakes to carry a message, so a tool's answer reaches the waiting
//! cell with one thread crossing (the parent's) instead of two.
//!
//! [`CellLane`] is what the thread waits on for cells, [`CellInbox`] what the running cell waits
//! on for commands; an engine serves a lane through [`crate::Engine::serve_lane`]. A script
//! engine runs each cell on a runtime it created before the cell's start arrived, so a warm start
//! is the lane's read of the start and nothing else.

use std::time::Instant;

use crate::{CellStart, EventSender, RuntimeCommand, RuntimeControl, TerminateHandle};

/// How long [`CellInbox::next_command`] may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Not at all: only a message already here, or one that can be read without blocking.
    No,
    /// Until this instant (a timer falls due then).
    Until(Instant),
    /// Until a message comes or the inbox closes.
    Forever,
}

/// What a wait on an inbox ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum Received<T> {
    /// The next message.
    Message(T),
    /// Nothing came within the wait.
    Nothing,
    /// Nothing ever will: the sending side is gone (the cell's owner, or the parent).
    Closed,
}

/// A running cell's commands and controls, read by its runtime thread itself. Commands and
/// controls that arrive while the thread waits for the other kind are kept, in order, for later.
pub trait CellInbox: Send {
    /// The next command, waiting for one as `wait` says.
    fn next_command(&mut self, wait: Wait) -> Received<RuntimeCommand>;

    /// The next control, waiting for it as long as it takes (a cell paused at its pending
    /// frontier waits for nothing else).
    fn next_control(&mut self) -> Received<RuntimeControl>;
}

/// The inbox of a cell whose commands come over channels (in-process, and any cell started
/// through [`crate::Engine::start`]).
#[derive(Debug)]
pub struct ChannelInbox {
    /// The cell's commands.
    pub commands: std::sync::mpsc::Receiver<RuntimeCommand>,
    /// The pending-frontier controls.
    pub control: std::sync::mpsc::Receiver<RuntimeControl>,
}

impl CellInbox for ChannelInbox {
    fn next_command(&mut self, wait: Wait) -> Received<RuntimeCommand> {
        use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
        match wait {
            Wait::No => match self.commands.try_recv() {
                Ok(command) => Received::Message(command),
                Err(TryRecvError::Empty) => Received::Nothing,
                Err(TryRecvError::Disconnected) => Received::Closed,
            },
            Wait::Until(deadline) => {
                let timeout = deadline.saturating_duration_since(Instant::now());
                match self.commands.recv_timeout(timeout) {
                    Ok(command) => Received::Message(command),
                    Err(RecvTimeoutError::Timeout) => Received::Nothing,
                    Err(RecvTimeoutError::Disconnected) => Received::Closed,
                }
            }
            Wait::Forever => match self.commands.recv() {
                Ok(command) => Received::Message(command),
                Err(_) => Received::Closed,
            },
        }
    }

    fn next_control(&mut self) -> Received<RuntimeControl> {
        match self.control.recv() {
            Ok(control) => Received::Message(control),
            Err(_) => Received::Closed,
        }
    }
}

/// One cell that arrived on a lane: its start, where its events go, and its inbox.
#[non_exhaustive]
pub struct LaneCell {
    /// What to run.
    pub start: CellStart,
    /// Where its events go (written to the lane by the thread that sends them).
    pub events: EventSender,
    /// Its commands and controls.
    pub inbox: Box<dyn CellInbox>,
}

impl LaneCell {
    /// A cell with its start, events and inbox.
    pub fn new(start: CellStart, events: EventSender, inbox: Box<dyn CellInbox>) -> Self {
        LaneCell {
            start,
            events,
            inbox,
        }
    }
}

impl std::fmt::Debug for LaneCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneCell")
            .field("call_id", &self.start.call_id)
            .finish_non_exhaustive()
    }
}

/// A lane: where one thread waits for its cells, one after another.
pub trait CellLane: Send {
    /// Whether more cells may come. Asked before a runtime is made ready for the next cell, so
    /// that a lane being closed costs no runtime.
    fn open(&mut self) -> bool;

    /// Blocks until the next cell arrives; `None` once the lane is closed.
    fn next_cell(&mut self) -> Option<LaneCell>;

    /// The cell that just arrived can now be stopped through `terminate` (from another thread:
    /// a running cell reads nothing until it waits).
    fn started(&mut self, terminate: TerminateHandle);
}
