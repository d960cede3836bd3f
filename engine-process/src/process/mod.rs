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
//! The parts, bottom to top: `state` and `outbox` (plain data), `checks` (the rules a child's
//! frames are held to) and `grace` (deadlines), `spawn` (the OS process and its handshake),
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

pub(crate) use pool::Pool;
