//! One engine process as the parent holds it ([`EngineProcess`]): its channel (the outbox its
//! writer thread drains, so no thread of the server blocks on a child that does not read; the
//! reader thread, which takes only the process's own frames), its lanes, its cells' slots, and
//! its end. Every change to a process's cells happens under its `state` lock; the one place a
//! process's end is handled is [`EngineProcess::ended`], called once by its reader thread when
//! the channel closes: it decides each cell's fate, which the cell's lane task delivers after
//! whatever the cell sent before the end.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use codemode_engine::{EngineError, HardStopReason};

use super::checks::{Misbehaviour, check_control, describe_exit};
use super::grace::{GraceKills, Overdue};
use super::outbox::{MAX_OUTBOX_BYTES, MAX_OUTBOX_FRAMES, OutFrame, Outbox, write_out};
use super::spawn::Spawned;
use super::state::{CellSlot, IdleLanes, ProcessState, Whose, failure};
use super::verdict::{self, Verdict, Watch};
use crate::config::ProcessEngineConfig;
use crate::lane::{Lane, LaneWriter, Refused};
use crate::wire::{self, CellNumber, ToChild, ToLane, ToParent};

/// What an engine process tells the pool that owns it, and asks of it.
pub(super) trait ProcessOwner: Send + Sync {
    /// `process` has no cells left: the owner keeps or retires it.
    fn idle(&self, process: &Arc<EngineProcess>);
    /// How long a cell may go on after it was asked to stop, or after its last event.
    fn hard_stop_grace(&self) -> Duration;
    /// Where deadlines on this process's cells are armed.
    fn grace_kills(&self) -> &Arc<GraceKills>;
    /// The answer to a sandbox probe (`None`: none will come, the process ended).
    #[cfg(feature = "test-hooks")]
    fn probe_answered(&self, answer: Option<(bool, String)>);
}

/// One engine process.
#[derive(Debug)]
pub(super) struct EngineProcess {
    pub(super) pid: u32,
    /// What waits to be written to the child, by its writer thread: no thread of the server ever
    /// blocks on a child that does not read.
    pub(super) outbox: Mutex<Outbox>,
    pub(super) outbox_ready: Condvar,
    /// The channel, for a frame written at once when nothing waits and the writer thread is idle:
    /// a write that never blocks, so a small frame skips waking the writer thread. `None` if the
    /// socket could not be shared.
    pub(super) direct: Option<std::os::unix::net::UnixStream>,
    pub(super) state: Mutex<ProcessState>,
    /// `None` once reaped.
    pub(super) child: Mutex<Option<Child>>,
    /// Its control group, if one could be made; removed once the process is reaped.
    pub(super) cgroup: Mutex<Option<crate::cgroup::ProcessCgroup>>,
    /// The threads reading what the process prints; they end once it is gone.
    pub(super) output_readers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The last fatal-error line the process printed, if any.
    pub(super) fatal_line: crate::log::FatalLine,
    /// Lanes with no cell, ready for the next; and how many lanes were ever made.
    pub(super) lanes: Mutex<IdleLanes>,
    /// How many idle lanes are kept (each with a warm runtime in the child).
    pub(super) warm_lanes: usize,
    /// Set once the process has ended and each cell's fate is decided.
    pub(super) over: tokio::sync::watch::Sender<bool>,
}

impl EngineProcess {
    /// Makes the parent's side of a spawned process and starts its writer and reader threads;
    /// what the process reports goes to `owner`.
    pub(super) fn start(
        spawned: Spawned,
        config: &ProcessEngineConfig,
        owner: Weak<dyn ProcessOwner>,
    ) -> Result<Arc<EngineProcess>, EngineError> {
        let Spawned {
            pid,
            child,
            reader,
            writer,
            cgroup,
            output_readers,
            fatal_line,
            lanes,
            engine: _,
        } = spawned;
        let process = Arc::new(EngineProcess {
            pid,
            outbox: Mutex::new(Outbox::default()),
            outbox_ready: Condvar::new(),
            direct: writer.try_clone().ok(),
            state: Mutex::new(ProcessState::default()),
            child: Mutex::new(Some(child)),
            cgroup: Mutex::new(cgroup),
            output_readers: Mutex::new(output_readers),
            fatal_line,
            lanes: Mutex::new(lanes),
            warm_lanes: config.warm_runtimes,
            over: tokio::sync::watch::Sender::new(false),
        });
        let writing = Arc::clone(&process);
        let stall_deadline = config.stall_deadline;
        if let Err(error) = std::thread::Builder::new()
            .name(format!("codemode-engine-{pid}-writer"))
            .spawn(move || writing.write_until_closed(writer, stall_deadline))
        {
            process.kill();
            return Err(EngineError::Unavailable(format!(
                "cannot start the writer of an engine process: {error}"
            )));
        }
        let reading = Arc::clone(&process);
        std::thread::Builder::new()
            .name(format!("codemode-engine-{pid}"))
            .spawn(move || reading.read_until_closed(reader, owner))
            .map_err(|error| {
                process.kill();
                EngineError::Unavailable(format!(
                    "cannot start the reader of an engine process: {error}"
                ))
            })?;
        Ok(process)
    }

    pub(super) fn alive(&self) -> bool {
        !self.state.lock().ended
    }

    pub(super) fn hosts(&self, cell: CellNumber) -> bool {
        self.state.lock().cells.contains_key(&cell)
    }

    /// Places cell `number` of `tenant` here, its slot and all, if there is room and the process
    /// is that tenant's (or no one's yet); otherwise gives the slot back. One critical section,
    /// so that two starts at once never both take the last place.
    pub(super) fn admit(
        &self,
        config: &ProcessEngineConfig,
        tenant: &Whose,
        number: CellNumber,
        slot: Box<CellSlot>,
    ) -> Result<(), Box<CellSlot>> {
        let mut state = self.state.lock();
        if state.ended || state.retired || state.cells.len() >= config.cells_per_process {
            return Err(slot);
        }
        match &state.tenant {
            Some(owner) if owner != tenant => return Err(slot),
            Some(_) => {}
            None => state.tenant = Some(tenant.clone()),
        }
        state.hosted += 1;
        if state.hosted >= config.cells_per_process_lifetime {
            state.retired = true;
        }
        state.cells.insert(number, *slot);
        Ok(())
    }

    pub(super) fn send(&self, message: &ToChild) -> Result<(), EngineError> {
        let frame = wire::encode(message).map_err(|error| {
            EngineError::Unavailable(format!("cannot encode for the engine process: {error}"))
        })?;
        self.send_frame(frame)
    }

    /// Queues `frame` for the writer thread; never blocks.
    pub(super) fn send_frame(&self, frame: Vec<u8>) -> Result<(), EngineError> {
        self.send_out(OutFrame {
            bytes: frame,
            socket: None,
        })
    }

    /// An idle lane, or a new one: its child end sent to the child with a `Lane` frame.
    pub(super) fn take_lane(&self) -> Result<Lane, EngineError> {
        let number = {
            let mut lanes = self.lanes.lock();
            // The lane idle longest: one given back a moment ago may still be making its runtime.
            if !lanes.idle.is_empty() {
                return Ok(lanes.idle.remove(0));
            }
            lanes.made += 1;
            lanes.made
        };
        let (ours, theirs) = UnixStream::pair().map_err(|error| {
            EngineError::Unavailable(format!("cannot make a lane for an engine process: {error}"))
        })?;
        ours.set_nonblocking(true).map_err(|error| {
            EngineError::Unavailable(format!("cannot make a lane for an engine process: {error}"))
        })?;
        let frame = wire::encode(&ToChild::Lane { lane: number }).map_err(|error| {
            EngineError::Unavailable(format!("cannot encode for the engine process: {error}"))
        })?;
        self.send_out(OutFrame {
            bytes: frame,
            socket: Some(theirs.into()),
        })?;
        Ok(Lane {
            number,
            socket: ours,
        })
    }

    /// Writes `frame` to a cell's lane; a child that lets too much wait there is ended.
    pub(super) fn write_lane(&self, writer: &LaneWriter, frame: Vec<u8>) {
        if let Err(Refused::Full { waiting }) = writer.send(frame) {
            self.misbehaved(Misbehaviour::StoppedReading { waiting });
        }
    }

    /// Sends `message` to cell `cell` on its lane; dropped if the cell has none (it ended).
    pub(super) fn send_lane(&self, cell: CellNumber, message: &ToLane) {
        let writer = self
            .state
            .lock()
            .cells
            .get(&cell)
            .and_then(|slot| slot.lane.clone());
        let Some(writer) = writer else { return };
        match wire::encode(message) {
            Ok(frame) => self.write_lane(&writer, frame),
            Err(error) => tracing::error!(%error, "cannot encode a message for a lane"),
        }
    }

    /// Queues `frame` (and the socket riding on it) for the writer thread; never blocks.
    pub(super) fn send_out(&self, frame: OutFrame) -> Result<(), EngineError> {
        let mut outbox = self.outbox.lock();
        if outbox.stopped || outbox.closing {
            return Err(EngineError::Unavailable(
                "the engine process is gone".to_owned(),
            ));
        }
        if outbox.frames.len() >= MAX_OUTBOX_FRAMES
            || outbox.bytes.saturating_add(frame.bytes.len()) > MAX_OUTBOX_BYTES
        {
            let waiting = outbox.bytes;
            drop(outbox);
            self.misbehaved(Misbehaviour::StoppedReading { waiting });
            return Err(EngineError::Unavailable(
                "the engine process stopped reading".to_owned(),
            ));
        }
        let frame = match self.write_directly(&outbox, frame) {
            None => return Ok(()),
            Some(rest) => rest,
        };
        outbox.bytes += frame.bytes.len();
        outbox.frames.push_back(frame);
        drop(outbox);
        self.outbox_ready.notify_one();
        Ok(())
    }

    /// Writes `frame` at once when nothing waits before it and the writer thread is idle (the
    /// outbox lock, held, keeps it so), as far as the socket takes it without blocking; returns
    /// what is left for the writer thread. A full socket or an error leaves the whole frame to
    /// it, and it deals with either as it does with any frame.
    pub(super) fn write_directly(&self, outbox: &Outbox, mut frame: OutFrame) -> Option<OutFrame> {
        use nix::sys::socket::{MsgFlags, send};
        use std::os::fd::AsRawFd;
        let Some(socket) = &self.direct else {
            return Some(frame);
        };
        if outbox.writing || !outbox.frames.is_empty() {
            return Some(frame);
        }
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        let sent = match &frame.socket {
            Some(lane) => {
                crate::descriptors::send_with(socket.as_raw_fd(), &frame.bytes, lane, flags)
                    .map_err(|_| ())
            }
            None => send(socket.as_raw_fd(), &frame.bytes, flags).map_err(|_| ()),
        };
        match sent {
            Ok(written) if written == frame.bytes.len() => None,
            Ok(written) => {
                // The socket went with the first byte.
                frame.socket = None;
                frame.bytes.drain(..written);
                Some(frame)
            }
            Err(()) => Some(frame),
        }
    }

    /// Ends the channel once what waits is written: the child ends once it reads to the end.
    pub(super) fn close(&self) {
        self.outbox.lock().closing = true;
        self.outbox_ready.notify_one();
    }

    /// The writer thread: writes what the outbox holds, in order, until the channel closes or
    /// the process ends. A write that waits past `stall_deadline` ends the process.
    fn write_until_closed(self: Arc<Self>, mut writer: UnixStream, stall_deadline: Duration) {
        loop {
            let frame = {
                let mut outbox = self.outbox.lock();
                outbox.writing = false;
                loop {
                    if outbox.stopped {
                        return;
                    }
                    if let Some(frame) = outbox.frames.pop_front() {
                        outbox.bytes -= frame.bytes.len();
                        outbox.writing = true;
                        break frame;
                    }
                    if outbox.closing {
                        let _ = writer.shutdown(std::net::Shutdown::Write);
                        return;
                    }
                    self.outbox_ready.wait(&mut outbox);
                }
            };
            if let Err(error) = write_out(&mut writer, frame) {
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    self.misbehaved(Misbehaviour::StalledWrite {
                        deadline: stall_deadline,
                    });
                }
                self.outbox.lock().stopped = true;
                return;
            }
        }
    }

    /// Ends the process for misbehaving: what it sends from now on is not read, and its cells
    /// fail with `why`.
    pub(super) fn misbehaved(&self, why: Misbehaviour) {
        let why = why.to_string();
        {
            let mut state = self.state.lock();
            if state.ended {
                return;
            }
            state.misbehaved.get_or_insert(why.clone());
        }
        self.outbox.lock().stopped = true;
        self.outbox_ready.notify_one();
        tracing::error!(pid = self.pid, reason = %why, "ending an engine process that misbehaved");
        self.kill();
    }

    pub(super) fn kill(&self) {
        if let Some(child) = self.child.lock().as_mut() {
            let _ = child.kill();
        }
    }

    /// Kills the process because `cell` did not stop within its grace period.
    pub(super) fn kill_for(&self, cell: CellNumber) {
        {
            let mut state = self.state.lock();
            if state.ended || !state.cells.contains_key(&cell) {
                return;
            }
            state.killed_for.get_or_insert(cell);
        }
        self.kill();
    }

    fn read_until_closed(self: Arc<Self>, reader: UnixStream, owner: Weak<dyn ProcessOwner>) {
        // Only a probe's answer needs the pool now: each cell's frames come on its lane.
        #[cfg(not(feature = "test-hooks"))]
        drop(owner);
        // Buffered: a frame's header and body come in one read.
        let mut reader = std::io::BufReader::with_capacity(64 * 1024, reader);
        loop {
            let (message, _) = match wire::read_bounded::<ToParent>(
                &mut reader,
                wire::MAX_CHILD_FRAME_BYTES,
            ) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) if error.kind() == std::io::ErrorKind::InvalidData => {
                    self.misbehaved(Misbehaviour::InvalidFrame(error));
                    break;
                }
                Err(error) => {
                    tracing::error!(pid = self.pid, %error, "the channel of an engine process broke");
                    break;
                }
            };
            if let Err(why) = check_control(&message) {
                // Nothing of a misbehaving process reaches a session from here on.
                self.misbehaved(why);
                break;
            }
            match message {
                // Refused by the check: a cell's frames come on its lane.
                ToParent::Event { .. }
                | ToParent::Thread { .. }
                | ToParent::Ended { .. }
                | ToParent::StartFailed { .. } => {}
                ToParent::HardStop {
                    cell,
                    reason,
                    message,
                } => {
                    self.state.lock().hard_stop = Some((cell, reason, message));
                }
                #[cfg(feature = "test-hooks")]
                ToParent::ProbeResult { allowed, detail } => {
                    if let Some(owner) = owner.upgrade() {
                        owner.probe_answered(Some((allowed, detail)));
                    }
                }
                ToParent::Ready { .. } | ToParent::Failed { .. } => {}
            }
        }
        self.ended();
        // A probe this process will never answer is not waited for.
        #[cfg(feature = "test-hooks")]
        if let Some(owner) = owner.upgrade() {
            owner.probe_answered(None);
        }
    }

    /// The channel closed: reap the process and end each of its cells as its fate says.
    pub(super) fn ended(&self) {
        // Nothing more comes from it; make sure it is gone before it is reaped.
        self.kill();
        let status = self
            .child
            .lock()
            .take()
            .and_then(|mut child| child.wait().ok());
        drop(self.cgroup.lock().take());
        // The cells stay until their lane tasks have delivered what they sent, then their fates.
        let (cells, hard_stop, killed_for, misbehaved) = {
            let mut state = self.state.lock();
            state.ended = true;
            let cells: Vec<(CellNumber, bool, usize, Option<Duration>)> = state
                .cells
                .iter()
                .map(|(number, slot)| {
                    (
                        *number,
                        slot.terminating,
                        slot.heap_limit_bytes,
                        slot.cpu_time_limit,
                    )
                })
                .collect();
            (
                cells,
                state.hard_stop.take(),
                state.killed_for,
                state.misbehaved.take(),
            )
        };
        self.outbox.lock().stopped = true;
        self.outbox_ready.notify_one();
        // The process is gone, so its pipes close and the readers end: whatever it printed last
        // has been read.
        for reader in std::mem::take(&mut *self.output_readers.lock()) {
            let _ = reader.join();
        }
        let printed = self.fatal_line.lock().take();
        let crash = match (&hard_stop, status, printed) {
            (Some((_, HardStopReason::Fatal, message)), _, _) => message.clone(),
            (Some((_, HardStopReason::OutOfMemory, message)), _, _) => {
                format!("out of memory: {message}")
            }
            (_, Some(status), Some(printed)) => format!("{printed}; {}", describe_exit(status)),
            (_, Some(status), None) => describe_exit(status),
            (_, None, _) => "it could not be waited for".to_owned(),
        };
        if !cells.is_empty() {
            tracing::warn!(pid = self.pid, cells = cells.len(), reason = %crash, "an engine process ended with cells in it");
        }
        let stopped_for = match (&hard_stop, killed_for) {
            (
                Some((Some(cell), HardStopReason::HeapLimit | HardStopReason::CpuTimeLimit, _)),
                _,
            ) => Some(*cell),
            (_, Some(cell)) => Some(cell),
            _ => None,
        };
        let mut fates = HashMap::new();
        for (number, terminating, heap_limit_bytes, cpu_time_limit) in cells {
            if terminating || killed_for == Some(number) {
                // Terminated, as asked: no result.
                fates.insert(number, None);
                continue;
            }
            let error = match &hard_stop {
                _ if misbehaved.is_some() => format!(
                    "the engine process running this cell was ended because {}; the cell's \
                     output so far is kept and its stored values were not saved; run the cell \
                     again",
                    misbehaved.as_deref().unwrap_or_default()
                ),
                Some((Some(cell), HardStopReason::HeapLimit, _)) if *cell == number => {
                    codemode_engine::heap_limit_error(heap_limit_bytes)
                }
                Some((Some(cell), HardStopReason::CpuTimeLimit, _)) if *cell == number => {
                    codemode_engine::cpu_time_limit_error(cpu_time_limit.unwrap_or_default())
                }
                Some((Some(cell), HardStopReason::OutOfMemory, message)) if *cell == number => {
                    codemode_engine::out_of_memory_error(message)
                }
                _ if stopped_for.is_some() => "the cell was stopped: another cell in its engine process \
                     could not be stopped in time, and the process had to be ended with it; run the \
                     cell again"
                    .to_owned(),
                _ => format!("the engine process running this cell crashed ({crash})"),
            };
            fates.insert(number, Some(failure(error)));
        }
        self.state.lock().fates = fates;
        self.over.send_replace(true);
    }
}

impl Overdue for EngineProcess {
    /// The stop deadline of cell `cell` passed: a child that had its grace period of CPU time
    /// and has not stopped the cell is killed; one that waited for a CPU is given the rest.
    fn stop_overdue(&self, cell: CellNumber, watch: &Watch) -> Option<Instant> {
        if !self.hosts(cell) {
            return None;
        }
        match watch.judge(self.pid) {
            Verdict::RecheckAt(at) => Some(at),
            Verdict::Overdue { cpu, wall } => {
                tracing::warn!(
                    pid = self.pid,
                    cell,
                    after = %verdict::in_words(cpu, wall),
                    "a cell did not stop within its grace period: killing its engine process"
                );
                self.kill_for(cell);
                None
            }
        }
    }

    /// The end deadline of cell `cell` passed: its lane task, once it has read what the child
    /// sent (so that the parent's own delay is never the child's), judges it.
    fn end_overdue(&self, cell: CellNumber) {
        let lane = {
            let mut state = self.state.lock();
            match state.cells.get_mut(&cell) {
                Some(slot) => {
                    slot.end_due = true;
                    slot.lane.clone()
                }
                None => None,
            }
        };
        if let Some(lane) = lane {
            lane.end_overdue.notify_one();
        }
    }

    /// The start deadline of cell `cell` passed: a child that has not said the cell started by
    /// then stopped reading.
    fn start_overdue(&self, cell: CellNumber, deadline: Duration) {
        let overdue = self
            .state
            .lock()
            .cells
            .get(&cell)
            .is_some_and(|slot| !slot.started);
        if overdue {
            self.misbehaved(Misbehaviour::StartNotTaken { deadline });
        }
    }
}
