//! The parent side of engine processes: the pool of engine processes, one process's channel and reader, its lanes,
//! and what happens to a process's cells when it ends.
//!
//! A process has its own channel (settings, new lanes, terminations, hard stops), read by a thread
//! of its own, and a lane per runtime thread (see `wire` and `lane`). A cell placed in a process
//! takes an idle lane of it (or a new one) and its start is written there; a task on the async
//! runtime of whoever started the cell reads the lane while the cell runs, checks each frame and
//! hands each event to the cell's actor, then gives the lane back.
//!
//! Every change to a process's cells happens under its `state` lock; the one place a process's
//! end is handled is [`EngineProcess::ended`], called once by its reader thread when the channel
//! closes: it decides each cell's fate, which the cell's lane task delivers after whatever the
//! cell sent before the end.
//!
//! # A cell's way through
//!
//! `Pool::start` never waits: a cell goes to a process of its tenant with room (or a spare) in one
//! critical section under the pool's lock (`place_now`, `EngineProcess::admit`), or waits in the
//! pool's queue for a process started for it on a thread of its own (`QueuedStart`; its
//! `CellRoute` keeps what the actor sends meanwhile, in order, and a termination just ends the
//! wait); a process that cannot start fails the cells waiting for it with events. A placed cell
//! takes a lane of its process (`open_lane`: an idle one, or a new socket pair whose child end is
//! sent over the process channel as `SCM_RIGHTS`), its start frame is written there, and a task on
//! the async runtime it was started from (or `lane::fallback_runtime` for a start from a plain
//! thread) reads the lane while the cell runs (`lane_task`): it checks each frame, hands each event
//! to the cell's `EventSender` (awaiting a full queue, so back-pressure reaches the child's runtime
//! thread through the socket), writes what waits for the lane as it drains (`LaneWriter`), and at
//! the cell's `Ended` gives the lane back, kept idle with its warm runtime in the child. A child
//! that does not take a start up within the stall deadline is ended (`Deadline::Start`).
//!
//! # Ends and stops
//!
//! A reader thread per process reads the process channel (hard stops, probe answers; a cell's
//! frame there ends the process) and, when it closes, decides every cell's fate
//! (`EngineProcess::ended`, the one place), which each lane task delivers after what its cell sent:
//! a cell terminated on request ends without a result; a cell the child named in a hard stop fails
//! with its limit's error; the others fail saying the process crashed or was stopped for another
//! cell. A termination asks the child, then kills the process after the grace period if the cell
//! has not ended (`grace`: one thread per pool keeps every armed deadline, woken only by one
//! earlier than it sleeps until). A cell whose result has come is not asked: the child must say it
//! ended within ten grace periods of its result (`Deadline::End`, judged by the cell's lane task
//! once it has read what waits), or is ended for keeping a cell going where no termination
//! reaches it. Both are counted in the CPU time of the thread that runs the cell (`verdict`): a
//! child that waits for a CPU is slow, not hostile, and is ended only after 20 grace periods of
//! wall time. A process that breaks a rule of `checks` is ended with the `Misbehaviour` that
//! says which; one writer thread per process drains a bounded `Outbox`, so
//! no caller ever blocks on a child.
//!
//! The parts, bottom to top: `state` and `outbox` (plain data), `checks` (the rules a child's
//! frames are held to), `verdict` and `grace` (deadlines), `spawn` (the OS process and its handshake),
//! `engine_process` (one process's channel and end), `lane_task` (a cell's lane while it runs),
//! `route` (where a cell's commands go), and `pool`, which places cells.

mod checks;
mod engine_process;
mod grace;
mod lane_task;
mod outbox;
mod pool;
mod route;
mod spawn;
mod state;
mod verdict;

pub(crate) use pool::Pool;
