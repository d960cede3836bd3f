//! The task that reads one cell's lane while it runs, on the async runtime of the cell's owner:
//! it checks each frame, hands each event to the cell's actor (waiting while its queue is full,
//! so that back-pressure reaches the child), writes what waits for the lane as the socket
//! drains, and at the cell's end gives the lane back; if the process ends first, it delivers
//! what the cell sent before the end, then the cell's fate.

use std::os::fd::AsFd;
use std::sync::{Arc, Weak};

use codemode_engine::{EventSender, RuntimeEvent};

use super::checks::{Misbehaviour, check_lane};
use super::engine_process::{EngineProcess, ProcessOwner};
use super::grace::{Deadline, Overdue};
use super::state::failure;
use super::verdict::{self, Verdict, Watch};
use crate::lane::{Lane, LaneWriter};
use crate::wire::{self, CellNumber, FrameBuffer, ToChild, ToParent};

/// The task that reads the lane of cell `cell` while it runs, on the async runtime of its
/// owner: checks each frame, hands each event to the cell's actor (waiting while its queue is
/// full, so that back-pressure reaches the child), writes what waits for the lane as the
/// socket drains, and at the cell's end gives the lane back. If the process ends first, it
/// delivers what the cell sent before the end, then the cell's fate.
pub(super) async fn serve_cell(
    process: Arc<EngineProcess>,
    owner: Weak<dyn ProcessOwner>,
    cell: CellNumber,
    lane: Lane,
    writer: Arc<LaneWriter>,
    events: EventSender,
) {
    let mut guard = LaneGuard {
        process: Arc::clone(&process),
        cell,
        done: false,
    };
    let number = lane.number;
    let ending = match tokio::net::UnixStream::from_std(lane.socket) {
        Ok(socket) => {
            let ending = read_lane(&process, cell, &socket, &writer, &events, &owner).await;
            (ending, Some(socket))
        }
        Err(error) => {
            tracing::error!(pid = process.pid, %error, "cannot read a lane of an engine process");
            (LaneEnding::Broke, None)
        }
    };
    let between_frames = writer.close();
    guard.done = true;
    match ending {
        (LaneEnding::Ended, Some(socket)) => {
            let (slot, now_idle) = {
                let mut state = process.state.lock();
                let slot = state.cells.remove(&cell);
                (slot, state.cells.is_empty())
            };
            drop(slot);
            drop(events);
            // The lane goes back for the next cell, while few enough wait.
            if let Ok(socket) = socket.into_std() {
                let mut lanes = process.lanes.lock();
                if between_frames && lanes.idle.len() < process.warm_lanes && process.alive() {
                    lanes.idle.push(Lane { number, socket });
                }
            }
            if now_idle && let Some(owner) = owner.upgrade() {
                owner.idle(&process);
            }
        }
        (ending, socket) => {
            match ending {
                LaneEnding::Misbehaved(why) => process.misbehaved(why),
                // The process is gone or going (a live one does not close a lane): make sure.
                _ => process.kill(),
            }
            drop(socket);
            let mut over = process.over.subscribe();
            let _ = over.wait_for(|over| *over).await;
            let (slot, fate) = {
                let mut state = process.state.lock();
                (state.cells.remove(&cell), state.fates.remove(&cell))
            };
            // A cell whose result came before the end keeps it: the end was not its.
            let finished = slot.as_ref().is_some_and(|slot| slot.finished);
            drop(slot);
            if let Some(Some(fate)) = fate
                && !finished
            {
                let _ = events.send(fate).await;
            }
        }
    }
}

/// Reads the lane of cell `cell` until the cell ends, the lane does, or the child misbehaves.
async fn read_lane(
    process: &Arc<EngineProcess>,
    cell: CellNumber,
    socket: &tokio::net::UnixStream,
    writer: &LaneWriter,
    events: &EventSender,
    owner: &Weak<dyn ProcessOwner>,
) -> LaneEnding {
    let mut buffer = FrameBuffer::default();
    // The deadline for the child to say the cell ended passed: judged once what waits is read.
    let mut judging = false;
    // The process is over: what it sent is read to the last byte, then the lane is done. (The
    // child's end of a lane made as it died may still wait in its outbox here, so the socket
    // need not close.)
    let mut over = process.over.subscribe();
    let mut process_over = false;
    loop {
        loop {
            let (message, length) = match buffer.next::<ToParent>(wire::MAX_CHILD_FRAME_BYTES) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    return LaneEnding::Misbehaved(Misbehaviour::InvalidFrame(error));
                }
            };
            if let Err(why) = check_lane(&process.state, cell, &message, length) {
                return LaneEnding::Misbehaved(why);
            }
            match message {
                ToParent::Event { mut event, .. } => {
                    let last = matches!(
                        event,
                        RuntimeEvent::Result { .. } | RuntimeEvent::ThreadPanicked
                    );
                    if last {
                        finished(process, cell, owner);
                    }
                    {
                        let mut state = process.state.lock();
                        if let Some(slot) = state.cells.get_mut(&cell) {
                            slot.started = true;
                            // The child knows the cell by its number: a notification gets
                            // the real call id back.
                            if let RuntimeEvent::Notify { call_id, .. } = &mut event {
                                call_id.clone_from(&slot.call_id);
                            }
                        }
                    }
                    // An owner that stopped listening leaves the rest unread by anyone.
                    let _ = events.send(event).await;
                }
                ToParent::StartFailed { error, .. } => {
                    finished(process, cell, owner);
                    let _ = events.send(RuntimeEvent::Started).await;
                    let _ = events.send(failure(error)).await;
                }
                ToParent::Thread { thread, .. } => {
                    if let Some(slot) = process.state.lock().cells.get_mut(&cell) {
                        slot.thread = Some(thread);
                    }
                }
                ToParent::Ended { .. } => return LaneEnding::Ended,
                // Refused by the check.
                _ => {}
            }
        }
        if std::mem::take(&mut judging)
            && let Some(why) = judge_end(process, cell, owner)
        {
            return LaneEnding::Misbehaved(why);
        }
        if process_over {
            match read_waiting(socket, &mut buffer) {
                Ok(read) if read > 0 => continue,
                _ => return LaneEnding::Broke,
            }
        }
        tokio::select! {
            biased;
            readable = socket.readable() => {
                if readable.is_err() {
                    return LaneEnding::Broke;
                }
                let room = buffer.wanted().clamp(16 * 1024, 1 << 20);
                match socket.try_read_buf(buffer.space(room)) {
                    Ok(0) => return LaneEnding::Broke,
                    Ok(_) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return LaneEnding::Broke,
                }
            }
            writable = socket.writable(), if writer.waiting() => {
                if writable.is_err() || writer.write_waiting(socket).is_err() {
                    return LaneEnding::Broke;
                }
            }
            () = writer.waiting_bytes.notified() => {}
            () = writer.end_overdue.notified() => {
                // What the child sent before now is read first: the parent's own delay (this
                // task waiting for its turn) is never the child's.
                if read_waiting(socket, &mut buffer).is_err() {
                    return LaneEnding::Broke;
                }
                judging = true;
            }
            _ = over.wait_for(|over| *over) => process_over = true,
        }
    }
}

/// The child relayed the last event of cell `cell`: a termination has nothing left to stop
/// there, and the child has its grace period to say that the cell ended, judged by the CPU time
/// it had (the first time only: a child may repeat a result, not the deadline).
fn finished(process: &Arc<EngineProcess>, cell: CellNumber, owner: &Weak<dyn ProcessOwner>) {
    let Some(owner) = owner.upgrade() else {
        return;
    };
    let watch = {
        let mut state = process.state.lock();
        match state.cells.get_mut(&cell) {
            Some(slot) if !slot.finished => {
                let grace = owner.hard_stop_grace() * verdict::END_GRACES;
                let watch = Watch::start(process.pid, slot.thread, grace);
                slot.finished = true;
                slot.end_watch = Some(watch);
                watch
            }
            _ => return,
        }
    };
    arm_end(process, &*owner, cell, watch.first_deadline());
}

/// Arms the deadline for the child to say cell `cell` ended, at `at`.
fn arm_end(
    process: &Arc<EngineProcess>,
    owner: &dyn ProcessOwner,
    cell: CellNumber,
    at: std::time::Instant,
) {
    let armed = owner.grace_kills().arm(
        at,
        Arc::downgrade(process) as Weak<dyn Overdue>,
        cell,
        Deadline::End,
    );
    if !armed {
        tracing::error!("cannot watch for the end of a cell; killing its process now");
        process.kill_for(cell);
    }
}

/// The deadline for the child to say cell `cell` ended passed, and what it sent before is read:
/// the misbehaviour if it had the time ([`Watch::judge`]), else the deadline is armed again.
fn judge_end(
    process: &Arc<EngineProcess>,
    cell: CellNumber,
    owner: &Weak<dyn ProcessOwner>,
) -> Option<Misbehaviour> {
    let watch = {
        let mut state = process.state.lock();
        let slot = state.cells.get_mut(&cell)?;
        if !std::mem::take(&mut slot.end_due) {
            return None;
        }
        slot.end_watch?
    };
    match watch.judge(process.pid) {
        Verdict::Overdue { cpu, wall } => Some(Misbehaviour::EndNotSaid {
            cell,
            after: verdict::in_words(cpu, wall),
        }),
        Verdict::RecheckAt(at) => {
            if let Some(owner) = owner.upgrade() {
                arm_end(process, &*owner, cell, at);
            }
            None
        }
    }
}

/// Reads what waits on the lane now, without waiting (and whatever tokio last saw of the
/// socket's readiness): how many bytes; an error if the lane closed or broke.
fn read_waiting(
    socket: &tokio::net::UnixStream,
    buffer: &mut FrameBuffer,
) -> std::io::Result<usize> {
    const ROOM: usize = 64 * 1024;
    let bytes = buffer.space(ROOM);
    let held = bytes.len();
    bytes.resize(held + ROOM, 0);
    let read = nix::unistd::read(socket.as_fd(), &mut bytes[held..]);
    let read = match read {
        Ok(0) => Err(std::io::ErrorKind::UnexpectedEof.into()),
        Ok(read) => Ok(read),
        Err(nix::errno::Errno::EAGAIN) => Ok(0),
        Err(error) => Err(error.into()),
    };
    bytes.truncate(held + *read.as_ref().unwrap_or(&0));
    read
}

/// How a lane's reading ended.
pub(super) enum LaneEnding {
    /// The cell ended: the lane may serve another.
    Ended,
    /// The lane closed or broke before the cell ended.
    Broke,
    /// The child broke a rule on it.
    Misbehaved(Misbehaviour),
}

/// Held by a lane task: a task dropped before it is done (its runtime shut down, and the cell's
/// owner with it) still takes the cell out of its process and stops it there.
pub(super) struct LaneGuard {
    pub(super) process: Arc<EngineProcess>,
    pub(super) cell: CellNumber,
    pub(super) done: bool,
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let slot = self.process.state.lock().cells.remove(&self.cell);
        if let Some(slot) = slot {
            if let Some(lane) = &slot.lane {
                lane.close();
            }
            let _ = self.process.send(&ToChild::Terminate { cell: self.cell });
        }
    }
}
