//! The parent side: the pool of engine processes, one process's channel and reader, its lanes,
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

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SendError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use codemode_engine::{
    CellStart, CommandSender, EngineError, EngineHandles, EventSender, HardStopReason,
    RuntimeEvent, Terminate, TerminateHandle,
};
use codemode_protocol::JsonText;

use crate::config::ProcessEngineConfig;
use crate::lane::{Lane, LaneWriter, Refused};
#[cfg(feature = "test-hooks")]
use crate::wire::Probe;
use crate::wire::{
    self, CellNumber, ChildSettings, FrameBuffer, ToChild, ToLane, ToParent, WIRE_VERSION,
    WireStart,
};

/// How long a new process may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes waiting to be written to one process; past it the process is taken to have
/// stopped reading.
const MAX_OUTBOX_BYTES: usize = 512 * 1024 * 1024;

/// The most messages waiting to be written to one process.
const MAX_OUTBOX_FRAMES: usize = 16 * 1024;

/// Whose cells a process holds: bound when its first cell is placed, never changed.
type Tenant = Option<String>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The engine processes of one [`crate::ProcessEngine`].
#[derive(Debug)]
pub(crate) struct Pool {
    config: ProcessEngineConfig,
    processes: Mutex<Processes>,
    next_cell: AtomicU64,
    engine: OnceLock<String>,
    grace_kills: Arc<GraceKills>,
    /// Where each engine process gets a control group of its own (found once).
    cgroups: crate::cgroup::Cgroups,
    /// Names the control groups of this pool's processes apart from other pools' and servers'.
    cgroup_prefix: String,
    /// Where the answer to a sandbox probe goes.
    #[cfg(feature = "test-hooks")]
    probe_answer: Mutex<Option<std::sync::mpsc::Sender<(bool, String)>>>,
    myself: Weak<Pool>,
}

#[derive(Debug, Default)]
struct Processes {
    /// Processes that take new cells, oldest first.
    active: Vec<Arc<EngineProcess>>,
    /// Ready processes with no cells yet.
    spares: Vec<Arc<EngineProcess>>,
    /// Spares being started.
    spawning: usize,
    /// The process that took the most recent cell.
    latest: Option<Weak<EngineProcess>>,
    /// Cells waiting for a process being started for them, oldest first.
    queued: VecDeque<QueuedStart>,
    /// Processes being started for queued cells, by tenant.
    starting_for: HashMap<Tenant, usize>,
}

/// A cell that found no process with room: it waits for one being started for it.
#[derive(Debug)]
struct QueuedStart {
    tenant: Tenant,
    /// Its `Start` frame, for its lane.
    frame: Vec<u8>,
    slot: Box<CellSlot>,
    route: Arc<CellRoute>,
    /// The async runtime it was started from, which reads its lane.
    runtime: Option<tokio::runtime::Handle>,
}

/// Where a cell's commands and control go: held while the cell waits for a process, then sent
/// to the process it was placed in.
#[derive(Debug)]
struct CellRoute {
    number: CellNumber,
    state: Mutex<RouteState>,
}

#[derive(Debug)]
enum RouteState {
    /// Waiting for a process: what the cell's actor sent meanwhile, in order.
    Queued(Vec<ToLane>),
    /// In this process.
    Placed(Weak<EngineProcess>),
    /// Ended before it was placed (terminated, or no process could be started for it).
    Gone,
}

impl CellRoute {
    /// Sends `message` (made into a frame by `frame`) to the cell's process, or holds it until
    /// the cell is placed; refused once the cell is gone.
    fn forward<T>(
        &self,
        message: T,
        frame: impl FnOnce(Option<&EngineProcess>, T) -> ToLane,
    ) -> Result<(), SendError<T>> {
        let mut route = lock(&self.state);
        match &mut *route {
            RouteState::Queued(early) => {
                // Only what the actor sends before the cell starts waits here: a handful.
                early.push(frame(None, message));
                Ok(())
            }
            RouteState::Placed(process) => match process.upgrade() {
                Some(process) if process.hosts(self.number) => {
                    drop(route);
                    process.send_lane(self.number, &frame(Some(&process), message));
                    Ok(())
                }
                _ => Err(SendError(message)),
            },
            RouteState::Gone => Err(SendError(message)),
        }
    }
}

impl Pool {
    pub(crate) fn new(config: ProcessEngineConfig) -> Arc<Pool> {
        static POOLS: AtomicU64 = AtomicU64::new(0);
        raise_descriptor_limit();
        let cgroups = if config.control_groups {
            crate::cgroup::Cgroups::discover()
        } else {
            crate::cgroup::Cgroups::default()
        };
        let pool = Arc::new_cyclic(|myself| Pool {
            config,
            cgroups,
            cgroup_prefix: format!(
                "{}{}-{}",
                crate::cgroup::PREFIX,
                std::process::id(),
                POOLS.fetch_add(1, Ordering::Relaxed)
            ),
            processes: Mutex::default(),
            next_cell: AtomicU64::new(1),
            engine: OnceLock::new(),
            grace_kills: Arc::default(),
            #[cfg(feature = "test-hooks")]
            probe_answer: Mutex::new(None),
            myself: myself.clone(),
        });
        pool.refill();
        pool
    }

    pub(crate) fn describe(&self) -> Option<String> {
        self.engine.get().cloned()
    }

    pub(crate) fn check(&self) -> Result<String, EngineError> {
        let process = self.spawn()?;
        lock(&self.processes).spares.push(process);
        Ok(self.describe().unwrap_or_default())
    }

    pub(crate) fn process_ids(&self) -> Vec<u32> {
        let processes = lock(&self.processes);
        processes
            .active
            .iter()
            .chain(&processes.spares)
            .filter(|process| process.alive())
            .map(|process| process.pid)
            .collect()
    }

    /// The control-group folders of the process that took the most recent cell (test hooks).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn control_group_folders(&self) -> Vec<std::path::PathBuf> {
        let latest = lock(&self.processes)
            .latest
            .as_ref()
            .and_then(Weak::upgrade);
        latest
            .and_then(|process| {
                lock(&process.cgroup)
                    .as_ref()
                    .map(|cgroup| cgroup.folders().to_vec())
            })
            .unwrap_or_default()
    }

    #[cfg(feature = "test-hooks")]
    pub(crate) fn probe(&self, what: Probe) -> Result<(bool, String), EngineError> {
        let process = lock(&self.processes)
            .latest
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or_else(|| EngineError::Unavailable("no engine process has run a cell".into()))?;
        let (sender, receiver) = std::sync::mpsc::channel();
        *lock(&self.probe_answer) = Some(sender);
        // A crash or a forgery is waited for until the process has ended or answered: what the
        // test does next (on a lane) must not overtake it.
        let answered = !matches!(what, Probe::StopReading);
        let forged = matches!(what, Probe::Forge(_) | Probe::FatalError);
        process.send(&ToChild::Probe { what })?;
        if !answered {
            return Ok((true, "sent".to_owned()));
        }
        match receiver.recv_timeout(Duration::from_secs(30)) {
            Ok(answer) => Ok(answer),
            // The forgery ended the process before its answer was read.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) if forged => {
                Ok((true, "the process was ended".to_owned()))
            }
            Err(_) => Err(EngineError::Unavailable(
                "the engine process did not answer the probe".into(),
            )),
        }
    }

    pub(crate) fn start(
        &self,
        cell: CellStart,
        events: EventSender,
    ) -> Result<EngineHandles, EngineError> {
        let number = self.next_cell.fetch_add(1, Ordering::Relaxed);
        let tenant = cell.tenant.clone();
        let heap_limit_bytes = cell.limits.heap_limit_bytes;
        let cpu_time_limit = cell.limits.cpu_time_limit;
        let max_tool_calls = cell.limits.max_tool_calls;
        let (call_id, start) = WireStart::from_start(cell);
        // Whoever starts a cell from an async runtime has its lane read there, where its actor is.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let frame = wire::encode(&ToLane::Start {
            cell: number,
            start,
        })
        .map_err(|error| {
            EngineError::Unavailable(format!(
                "cannot send the cell to an engine process: {error}"
            ))
        })?;
        let route = Arc::new(CellRoute {
            number,
            state: Mutex::new(RouteState::Queued(Vec::new())),
        });
        let mut slot = Box::new(CellSlot {
            events: events.clone(),
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
        });
        // The cell goes to a process with room now, or waits for one being started for it: a
        // start never waits for a process (the caller may be an async worker). A process that
        // died a moment ago may still look alive: its channel refuses the cell, and the cell is
        // placed again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut processes = lock(&self.processes);
            match self.place_now(&mut processes, &tenant, number, slot) {
                Ok((process, took_spare)) => {
                    drop(processes);
                    if took_spare {
                        self.refill();
                    }
                    *lock(&route.state) = RouteState::Placed(Arc::downgrade(&process));
                    let Err((error, taken)) = self.open_lane(
                        &process,
                        number,
                        frame.clone(),
                        Vec::new(),
                        runtime.clone(),
                    ) else {
                        break;
                    };
                    lock(&process.state).retired = true;
                    // `None`: the process ended meanwhile, and the cell's lane task ends it.
                    let Some(taken) = taken else { break };
                    if attempts >= 3 {
                        return Err(error);
                    }
                    slot = taken;
                    *lock(&route.state) = RouteState::Queued(Vec::new());
                }
                Err(slot) => {
                    processes.queued.push_back(QueuedStart {
                        tenant: tenant.clone(),
                        frame,
                        slot,
                        route: Arc::clone(&route),
                        runtime: runtime.clone(),
                    });
                    let spawners = self.spawners_needed(&mut processes, &tenant);
                    drop(processes);
                    self.start_processes_for(&tenant, spawners);
                    break;
                }
            }
        }
        let commands = {
            let route = Arc::clone(&route);
            CommandSender::forward(move |command: codemode_engine::RuntimeCommand| {
                route.forward(command, |process, command| {
                    if let codemode_engine::RuntimeCommand::ToolResponse { id, .. }
                    | codemode_engine::RuntimeCommand::ToolError { id, .. } = &command
                        && let Some(process) = process
                        && let Some(slot) = lock(&process.state).cells.get_mut(&number)
                        && let Some(bytes) = slot.tool_input_in_flight.remove(id)
                    {
                        slot.tool_input_in_flight_bytes -= bytes;
                    }
                    ToLane::Command {
                        cell: number,
                        command,
                    }
                })
            })
        };
        let control = {
            let route = Arc::clone(&route);
            CommandSender::forward(move |control: codemode_engine::RuntimeControl| {
                route.forward(control, |_, control| ToLane::Control {
                    cell: number,
                    control,
                })
            })
        };
        let terminate = TerminateHandle::new(Arc::new(CellTerminator {
            route,
            pool: self.myself.clone(),
            grace: self.config.hard_stop_grace,
        }));
        Ok(EngineHandles {
            commands,
            control,
            terminate,
        })
    }

    /// Places cell `number` of `tenant` (its `slot`) in a process with room for it now: an
    /// active one of the tenant, else a spare (bound to the tenant from now on, and `true` to say
    /// that one was taken). A process never holds cells of two tenants: a cell that takes its
    /// process over reaches only its own tenant's. `Err` gives the slot back when no process has
    /// room.
    fn place_now(
        &self,
        processes: &mut Processes,
        tenant: &Tenant,
        number: CellNumber,
        mut slot: Box<CellSlot>,
    ) -> Result<(Arc<EngineProcess>, bool), Box<CellSlot>> {
        processes.active.retain(|process| process.alive());
        processes.spares.retain(|process| process.alive());
        for process in &processes.active {
            slot = match process.admit(&self.config, tenant, number, slot) {
                Ok(()) => {
                    processes.latest = Some(Arc::downgrade(process));
                    return Ok((Arc::clone(process), false));
                }
                Err(back) => back,
            };
        }
        // A spare that cannot take it (it ended meanwhile) is dropped.
        while let Some(spare) = processes.spares.pop() {
            slot = match spare.admit(&self.config, tenant, number, slot) {
                Ok(()) => {
                    processes.latest = Some(Arc::downgrade(&spare));
                    processes.active.push(Arc::clone(&spare));
                    return Ok((spare, true));
                }
                Err(back) => back,
            };
        }
        Err(slot)
    }

    /// How many more processes to start for the queued cells of `tenant`, counted as starting.
    fn spawners_needed(&self, processes: &mut Processes, tenant: &Tenant) -> usize {
        let queued = processes
            .queued
            .iter()
            .filter(|queued| &queued.tenant == tenant)
            .count();
        let starting = processes.starting_for.entry(tenant.clone()).or_default();
        let needed = queued
            .div_ceil(self.config.cells_per_process.max(1))
            .saturating_sub(*starting);
        *starting += needed;
        needed
    }

    /// Starts `count` processes for the queued cells of `tenant`, each on a thread of its own.
    fn start_processes_for(&self, tenant: &Tenant, count: usize) {
        for _ in 0..count {
            let (pool, for_tenant) = (self.myself.clone(), tenant.clone());
            let started = std::thread::Builder::new()
                .name("codemode-engine-spawn".into())
                .spawn(move || {
                    if let Some(pool) = pool.upgrade() {
                        let spawned = pool.spawn();
                        pool.process_started(spawned, Some(&for_tenant));
                    }
                });
            if let Err(error) = started {
                self.process_started(Err(EngineError::Thread(error)), Some(tenant));
            }
        }
    }

    /// A process started for the queued cells of `for_tenant` (or as a spare: `None`) is ready,
    /// or could not start. A ready one takes queued cells (of its tenant first, else of the
    /// longest waiting), or becomes a spare. A failure fails the queued cells of the tenant that
    /// the processes still starting for it cannot take.
    fn process_started(
        &self,
        spawned: Result<Arc<EngineProcess>, EngineError>,
        for_tenant: Option<&Tenant>,
    ) {
        let mut failed = Vec::new();
        // Cells the new process could not take after all: failed once the pool's lock is let go.
        let mut failed_now = Vec::new();
        {
            let mut processes = lock(&self.processes);
            if let Some(tenant) = for_tenant
                && let Some(starting) = processes.starting_for.get_mut(tenant)
            {
                *starting = starting.saturating_sub(1);
            }
            match spawned {
                Ok(process) => {
                    let tenant = for_tenant
                        .filter(|tenant| processes.queued.iter().any(|q| &q.tenant == *tenant))
                        .cloned()
                        .or_else(|| processes.queued.front().map(|q| q.tenant.clone()));
                    let placed = match &tenant {
                        Some(tenant) => {
                            self.place_queued(&mut processes, &process, tenant, &mut failed_now)
                        }
                        None => 0,
                    };
                    if placed > 0 {
                        processes.latest = Some(Arc::downgrade(&process));
                        processes.active.push(process);
                    } else {
                        processes.spares.push(process);
                    }
                }
                Err(error) => {
                    let Some(tenant) = for_tenant else {
                        tracing::error!(%error, "cannot start a spare engine process");
                        return;
                    };
                    let starting = processes.starting_for.get(tenant).copied().unwrap_or(0);
                    let covered = starting.saturating_mul(self.config.cells_per_process.max(1));
                    let waiting = processes
                        .queued
                        .iter()
                        .filter(|queued| &queued.tenant == tenant)
                        .count();
                    let mut to_fail = waiting.saturating_sub(covered);
                    let mut kept = VecDeque::new();
                    for queued in std::mem::take(&mut processes.queued) {
                        if to_fail > 0 && &queued.tenant == tenant {
                            to_fail -= 1;
                            failed.push(queued);
                        } else {
                            kept.push_back(queued);
                        }
                    }
                    processes.queued = kept;
                    tracing::error!(%error, cells = failed.len(), "cannot start an engine process for waiting cells");
                    let error = error.to_string();
                    for queued in &failed {
                        *lock(&queued.route.state) = RouteState::Gone;
                    }
                    drop(processes);
                    for queued in failed.drain(..) {
                        let _ = queued.slot.events.send_blocking(RuntimeEvent::Started);
                        let _ = queued.slot.events.send_blocking(failure(error.clone()));
                    }
                    return;
                }
            }
            processes.starting_for.retain(|_, starting| *starting > 0);
        }
        for (slot, error) in failed_now {
            let _ = slot.events.send_blocking(RuntimeEvent::Started);
            let _ = slot.events.send_blocking(failure(error.to_string()));
        }
    }

    /// Places the queued cells of `tenant` in the new `process`, oldest first, as many as it has
    /// room for; how many it took. Each cell's start, and what its actor sent while it waited,
    /// are sent in order before its commands go to the process directly.
    fn place_queued(
        &self,
        processes: &mut Processes,
        process: &Arc<EngineProcess>,
        tenant: &Tenant,
        failed: &mut Vec<(Box<CellSlot>, EngineError)>,
    ) -> usize {
        let mut placed = 0;
        let mut kept = VecDeque::new();
        for queued in std::mem::take(&mut processes.queued) {
            if &queued.tenant != tenant {
                kept.push_back(queued);
                continue;
            }
            let mut route = lock(&queued.route.state);
            let early = match &mut *route {
                // Terminated while it waited: its slot (and events) are dropped here.
                RouteState::Gone | RouteState::Placed(_) => continue,
                RouteState::Queued(early) => std::mem::take(early),
            };
            let number = queued.route.number;
            if let Err(slot) = process.admit(&self.config, tenant, number, queued.slot) {
                *route = RouteState::Queued(early);
                drop(route);
                kept.push_back(QueuedStart { slot, ..queued });
                continue;
            }
            *route = RouteState::Placed(Arc::downgrade(process));
            // Under the route's lock, so that what the actor sends next follows the start on the
            // lane. A process that cannot take the cell has ended: the cell fails with it.
            if let Err((error, Some(slot))) =
                self.open_lane(process, number, queued.frame, early, queued.runtime)
            {
                *route = RouteState::Gone;
                failed.push((slot, error));
            }
            placed += 1;
        }
        processes.queued = kept;
        placed
    }

    /// Gives cell `number`, just placed in `process`, a lane there (an idle one, or a new one the
    /// child is sent), writes its `start` frame and what its actor sent meanwhile (`early`) to it,
    /// and starts the task that reads it, on `runtime` (the async runtime the cell was started
    /// from) or, for a cell started from a plain thread, on the lanes' own runtime. Once the task
    /// runs, it delivers the cell's events and end whatever happens to the process; on `Err` the
    /// cell is out of the process again, its slot handed back.
    fn open_lane(
        &self,
        process: &Arc<EngineProcess>,
        number: CellNumber,
        start: Vec<u8>,
        early: Vec<ToLane>,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<(), (EngineError, Option<Box<CellSlot>>)> {
        let taken = |error: EngineError| {
            let slot = lock(&process.state).cells.remove(&number).map(Box::new);
            (error, slot)
        };
        let runtime = match runtime {
            Some(runtime) => runtime,
            None => crate::lane::fallback_runtime().map_err(|error| {
                taken(EngineError::Unavailable(format!(
                    "cannot make the runtime that reads engine processes: {error}"
                )))
            })?,
        };
        let lane = process.take_lane().map_err(taken)?;
        let writer = Arc::new(LaneWriter::new(&lane));
        let events = {
            let mut state = lock(&process.state);
            match state.cells.get_mut(&number) {
                Some(slot) => {
                    slot.lane = Some(Arc::clone(&writer));
                    slot.events.clone()
                }
                None => {
                    return Err((
                        EngineError::Unavailable("the engine process is gone".to_owned()),
                        None,
                    ));
                }
            }
        };
        runtime.spawn(Arc::clone(process).serve_cell(
            self.myself.clone(),
            number,
            lane,
            Arc::clone(&writer),
            events,
        ));
        // A start the child does not take up in time is a child that stopped reading.
        let armed = self.grace_kills.arm(
            Instant::now() + self.config.stall_deadline,
            Arc::downgrade(process),
            number,
            Deadline::Start(self.config.stall_deadline),
        );
        if !armed {
            tracing::warn!("cannot watch an engine process take up a start");
        }
        for frame in std::iter::once(Ok(start)).chain(early.iter().map(wire::encode)) {
            match frame {
                Ok(frame) => process.write_lane(&writer, frame),
                Err(error) => tracing::error!(%error, "cannot encode a message for a lane"),
            }
        }
        Ok(())
    }

    /// Ends the wait of cell `number` for a process, when it is terminated before it was placed:
    /// dropping its slot closes its events, which the actor reads as the end of a termination.
    fn unqueue(&self, number: CellNumber) {
        let removed = {
            let mut processes = lock(&self.processes);
            let position = processes
                .queued
                .iter()
                .position(|queued| queued.route.number == number);
            position.and_then(|position| processes.queued.remove(position))
        };
        drop(removed);
    }

    /// Starts spares in the background until there are as many as configured.
    fn refill(&self) {
        let missing = {
            let mut processes = lock(&self.processes);
            let have = processes.spares.len() + processes.spawning;
            let missing = self.config.spare_processes.saturating_sub(have);
            processes.spawning += missing;
            missing
        };
        for _ in 0..missing {
            let pool = self.myself.clone();
            let started = std::thread::Builder::new()
                .name("codemode-engine-spawn".into())
                .spawn(move || {
                    let Some(pool) = pool.upgrade() else { return };
                    let spawned = pool.spawn();
                    lock(&pool.processes).spawning -= 1;
                    pool.process_started(spawned, None);
                });
            if started.is_err() {
                lock(&self.processes).spawning -= 1;
            }
        }
    }

    /// Starts one engine process and waits until it is ready.
    fn spawn(&self) -> Result<Arc<EngineProcess>, EngineError> {
        let unavailable = |what: String| EngineError::Unavailable(what);
        let program = self.config.program.display().to_string();
        let (parent_end, child_end) = UnixStream::pair().map_err(|error| {
            unavailable(format!(
                "cannot make a channel for an engine process: {error}"
            ))
        })?;
        let mut command = Command::new(&self.config.program);
        if let Some((uid, gid)) = self.config.user {
            use std::os::unix::process::CommandExt;
            // As root, the standard library also drops the supplementary groups.
            command.uid(uid).gid(gid);
        }
        let mut child = command
            .args(&self.config.args)
            .env_clear()
            .envs(self.config.env.iter().map(|(name, value)| (name, value)))
            .current_dir("/")
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(child_end)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| {
                unavailable(format!(
                    "cannot start the engine process `{program}`: {error}"
                ))
            })?;
        // The command holds the parent's copy of the child's end of the channel: drop it now,
        // or a child that ends would never be seen to end.
        drop(command);
        let pid = child.id();
        let fatal_line = crate::log::FatalLine::default();
        let mut readers = Vec::new();
        for (stream, pipe) in [
            (
                "stdout",
                child
                    .stdout
                    .take()
                    .map(|pipe| Box::new(pipe) as Box<dyn std::io::Read + Send>),
            ),
            (
                "stderr",
                child
                    .stderr
                    .take()
                    .map(|pipe| Box::new(pipe) as Box<dyn std::io::Read + Send>),
            ),
        ] {
            if let Some(pipe) = pipe {
                readers.extend(crate::log::capture(pid, stream, pipe, fatal_line.clone()));
            }
        }
        let failed = |child: &mut Child, why: String| {
            let _ = child.kill();
            let _ = child.wait();
            unavailable(format!(
                "the engine process `{program}` could not start: {why}"
            ))
        };
        let mut reader = match parent_end.try_clone() {
            Ok(reader) => reader,
            Err(error) => return Err(failed(&mut child, error.to_string())),
        };
        let mut writer = parent_end;
        // Its control group, before it takes its settings: it runs no cell outside it.
        let cgroup = self
            .cgroups
            .create(
                &format!("{}-{pid}", self.cgroup_prefix),
                crate::cgroup::Bounds {
                    threads: self.config.threads_per_process,
                    memory_bytes: self.config.memory_ceiling(),
                },
            )
            .filter(|cgroup| match cgroup.admit(pid) {
                Ok(()) => true,
                Err(error) => {
                    tracing::warn!(pid, %error, "cannot move an engine process into its control group");
                    false
                }
            });
        let settings = ChildSettings {
            wire_version: WIRE_VERSION,
            warm_heap_limit_bytes: self.config.warm_heap_limit_bytes,
            warm_runtimes: self.config.warm_runtimes,
            memory_ceiling_bytes: Some(self.config.memory_ceiling()),
            user_threads_ceiling: self.config.user.map(|_| {
                self.config
                    .threads_per_process
                    .saturating_mul(USER_THREADS_PROCESSES)
            }),
            seccomp: self.config.seccomp,
            hard_stop_grace_ms: u64::try_from(self.config.hard_stop_grace.as_millis())
                .unwrap_or(u64::MAX),
            test_hooks: self.config.test_hooks,
        };
        let ended_early = |child: &mut Child| {
            let status = child.wait().map(describe_exit).unwrap_or_default();
            unavailable(format!(
                "the engine process `{program}` ended before it was ready ({status}); is it a \
                 codemode binary that has the engine-host mode?"
            ))
        };
        let broken = |error: &std::io::Error| {
            matches!(
                error.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        };
        if let Err(error) = wire::write(&mut writer, &ToChild::Settings(settings)) {
            if broken(&error) {
                return Err(ended_early(&mut child));
            }
            return Err(failed(
                &mut child,
                format!("it did not take its settings ({error})"),
            ));
        }
        // Its first lanes, whose runtimes it warms before it says it is ready.
        let mut lanes = IdleLanes::default();
        for _ in 0..self.config.warm_runtimes {
            lanes.made += 1;
            let sent = UnixStream::pair().and_then(|(ours, theirs)| {
                ours.set_nonblocking(true)?;
                let frame = wire::encode(&ToChild::Lane { lane: lanes.made })?;
                write_out(
                    &mut writer,
                    OutFrame {
                        bytes: frame,
                        socket: Some(theirs.into()),
                    },
                )?;
                Ok(ours)
            });
            match sent {
                Ok(socket) => lanes.idle.push(Lane {
                    number: lanes.made,
                    socket,
                }),
                Err(error) if broken(&error) => return Err(ended_early(&mut child)),
                Err(error) => {
                    return Err(failed(
                        &mut child,
                        format!("it did not take its lanes ({error})"),
                    ));
                }
            }
        }
        let _ = reader.set_read_timeout(Some(READY_TIMEOUT));
        let engine = match wire::read_bounded::<ToParent>(&mut reader, wire::MAX_CHILD_FRAME_BYTES)
            .map(|frame| frame.map(|(message, _)| message))
        {
            Ok(Some(ToParent::Ready {
                engine,
                wire_version,
            })) if wire_version == WIRE_VERSION => engine,
            Ok(Some(ToParent::Ready { wire_version, .. })) => {
                return Err(failed(
                    &mut child,
                    format!(
                        "it speaks version {wire_version} of the engine-process protocol and this \
                         program version {WIRE_VERSION}; run engine processes from the same build"
                    ),
                ));
            }
            Ok(Some(ToParent::Failed { error })) => return Err(failed(&mut child, error)),
            Ok(Some(other)) => {
                return Err(failed(
                    &mut child,
                    format!("it said {other:?} before it was ready"),
                ));
            }
            Ok(None) => return Err(ended_early(&mut child)),
            Err(error) if broken(&error) => return Err(ended_early(&mut child)),
            Err(error) => return Err(failed(&mut child, format!("no answer ({error})"))),
        };
        let _ = reader.set_read_timeout(None);
        // A child that stops reading makes a write wait past this, and is ended.
        let _ = writer.set_write_timeout(Some(self.config.stall_deadline));
        let _ = self.engine.set(engine);
        let process = Arc::new(EngineProcess {
            pid,
            outbox: Mutex::new(Outbox::default()),
            outbox_ready: Condvar::new(),
            direct: writer.try_clone().ok(),
            state: Mutex::new(ProcessState::default()),
            child: Mutex::new(Some(child)),
            cgroup: Mutex::new(cgroup),
            output_readers: Mutex::new(readers),
            fatal_line,
            lanes: Mutex::new(lanes),
            warm_lanes: self.config.warm_runtimes,
            over: tokio::sync::watch::Sender::new(false),
        });
        let writing = Arc::clone(&process);
        let stall_deadline = self.config.stall_deadline;
        if let Err(error) = std::thread::Builder::new()
            .name(format!("codemode-engine-{pid}-writer"))
            .spawn(move || writing.write_until_closed(writer, stall_deadline))
        {
            process.kill();
            return Err(unavailable(format!(
                "cannot start the writer of an engine process: {error}"
            )));
        }
        let reading = Arc::clone(&process);
        let pool = self.myself.clone();
        std::thread::Builder::new()
            .name(format!("codemode-engine-{pid}"))
            .spawn(move || reading.read_until_closed(reader, pool))
            .map_err(|error| {
                process.kill();
                unavailable(format!(
                    "cannot start the reader of an engine process: {error}"
                ))
            })?;
        Ok(process)
    }

    /// `process` has no cells left: retire it if its tenant has another idle process, or the
    /// pool has enough idle ones without it.
    fn idle(&self, process: &Arc<EngineProcess>) {
        let mut processes = lock(&self.processes);
        // Cells are placed under the pool's lock: one placed since the last cell ended keeps
        // the process.
        let tenant = {
            let state = lock(&process.state);
            if !state.cells.is_empty() {
                return;
            }
            state.tenant.clone()
        };
        let idle: Vec<Option<Tenant>> = processes
            .active
            .iter()
            .filter(|other| other.alive() && !Arc::ptr_eq(other, process))
            .filter_map(|other| {
                let state = lock(&other.state);
                state.cells.is_empty().then(|| state.tenant.clone())
            })
            .collect();
        let retired = lock(&process.state).retired;
        let twin = idle.contains(&tenant);
        if retired || twin || idle.len() >= MAX_IDLE_PROCESSES {
            processes
                .active
                .retain(|other| !Arc::ptr_eq(other, process));
            drop(processes);
            process.close();
        }
    }

    #[cfg(feature = "test-hooks")]
    fn answer_probe(&self, allowed: bool, detail: String) {
        if let Some(sender) = lock(&self.probe_answer).take() {
            let _ = sender.send((allowed, detail));
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.grace_kills.close();
        let processes = lock(&self.processes);
        for process in processes.active.iter().chain(&processes.spares) {
            process.close();
        }
    }
}

/// How many processes with no cells are kept (each bound to its tenant) besides the spares.
const MAX_IDLE_PROCESSES: usize = 4;

/// One engine process.
#[derive(Debug)]
struct EngineProcess {
    pid: u32,
    /// What waits to be written to the child, by its writer thread: no thread of the server ever
    /// blocks on a child that does not read.
    outbox: Mutex<Outbox>,
    outbox_ready: Condvar,
    /// The channel, for a frame written at once when nothing waits and the writer thread is idle:
    /// a write that never blocks, so a small frame skips waking the writer thread. `None` if the
    /// socket could not be shared.
    direct: Option<std::os::unix::net::UnixStream>,
    state: Mutex<ProcessState>,
    /// `None` once reaped.
    child: Mutex<Option<Child>>,
    /// Its control group, if one could be made; removed once the process is reaped.
    cgroup: Mutex<Option<crate::cgroup::ProcessCgroup>>,
    /// The threads reading what the process prints; they end once it is gone.
    output_readers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The last fatal-error line the process printed, if any.
    fatal_line: crate::log::FatalLine,
    /// Lanes with no cell, ready for the next; and how many lanes were ever made.
    lanes: Mutex<IdleLanes>,
    /// How many idle lanes are kept (each with a warm runtime in the child).
    warm_lanes: usize,
    /// Set once the process has ended and each cell's fate is decided.
    over: tokio::sync::watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct IdleLanes {
    idle: Vec<Lane>,
    made: u64,
}

/// A frame for the child, with the socket of a new lane riding on it if it announces one.
#[derive(Debug)]
struct OutFrame {
    bytes: Vec<u8>,
    socket: Option<std::os::fd::OwnedFd>,
}

/// The frames waiting for a process's writer thread.
#[derive(Debug, Default)]
struct Outbox {
    frames: VecDeque<OutFrame>,
    bytes: usize,
    /// Write what waits, then end the channel.
    closing: bool,
    /// The process is gone or being ended: nothing more is written.
    stopped: bool,
    /// The writer thread is writing a frame it took: nothing else may write until it is done.
    writing: bool,
}

#[derive(Debug, Default)]
struct ProcessState {
    /// Whose cells it holds: `None` until its first cell is placed.
    tenant: Option<Tenant>,
    cells: HashMap<CellNumber, CellSlot>,
    /// Cells placed over the process's life.
    hosted: usize,
    /// Takes no new cells; closed once its last cell ends.
    retired: bool,
    /// The channel closed: the process is gone or going.
    ended: bool,
    /// What the child said before it ended itself.
    hard_stop: Option<(Option<CellNumber>, HardStopReason, String)>,
    /// Once it has ended: how each cell that was in it ends (`None`: with no result), for its
    /// lane task to deliver after what the cell sent.
    fates: HashMap<CellNumber, Option<RuntimeEvent>>,
    /// The cell whose stop the parent enforced by killing the process.
    killed_for: Option<CellNumber>,
    /// Why the parent ended the process for misbehaving: a frame it did not ask for or that
    /// breaks a limit, or a channel it stopped reading.
    misbehaved: Option<String>,
}

#[derive(Debug)]
struct CellSlot {
    events: EventSender,
    call_id: String,
    heap_limit_bytes: usize,
    cpu_time_limit: Option<Duration>,
    /// Termination was asked: the cell ends without a result, whatever happens to the process.
    terminating: bool,
    /// The argument bytes of the cell's tool calls not yet answered, by call id: the child
    /// bounds them, and the parent checks that it did.
    tool_input_in_flight: HashMap<String, usize>,
    /// Their sum, kept as calls come and go.
    tool_input_in_flight_bytes: usize,
    /// Tool calls the cell has made, and the most it may make.
    tool_calls: u64,
    max_tool_calls: u64,
    /// Its lane, once it has one.
    lane: Option<Arc<LaneWriter>>,
    /// The child took its start up (it said the cell started).
    started: bool,
    /// The child relayed the cell's last event (its result, or that its thread panicked): it ends
    /// the cell on its own, within the grace period, and a termination has nothing left to stop
    /// (the cell's owner terminates every cell it closes, so this spares each completed cell two
    /// frames and an armed grace kill).
    finished: bool,
}

impl EngineProcess {
    fn alive(&self) -> bool {
        !lock(&self.state).ended
    }

    fn hosts(&self, cell: CellNumber) -> bool {
        lock(&self.state).cells.contains_key(&cell)
    }

    /// Places cell `number` of `tenant` here, its slot and all, if there is room and the process
    /// is that tenant's (or no one's yet); otherwise gives the slot back. One critical section,
    /// so that two starts at once never both take the last place.
    fn admit(
        &self,
        config: &ProcessEngineConfig,
        tenant: &Tenant,
        number: CellNumber,
        slot: Box<CellSlot>,
    ) -> Result<(), Box<CellSlot>> {
        let mut state = lock(&self.state);
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

    fn send(&self, message: &ToChild) -> Result<(), EngineError> {
        let frame = wire::encode(message).map_err(|error| {
            EngineError::Unavailable(format!("cannot encode for the engine process: {error}"))
        })?;
        self.send_frame(frame)
    }

    /// Queues `frame` for the writer thread; never blocks.
    fn send_frame(&self, frame: Vec<u8>) -> Result<(), EngineError> {
        self.send_out(OutFrame {
            bytes: frame,
            socket: None,
        })
    }

    /// An idle lane, or a new one: its child end sent to the child with a `Lane` frame.
    fn take_lane(&self) -> Result<Lane, EngineError> {
        let number = {
            let mut lanes = lock(&self.lanes);
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
    fn write_lane(&self, writer: &LaneWriter, frame: Vec<u8>) {
        if let Err(Refused::Full { waiting }) = writer.send(frame) {
            self.misbehaved(Misbehaviour::StoppedReading { waiting });
        }
    }

    /// Sends `message` to cell `cell` on its lane; dropped if the cell has none (it ended).
    fn send_lane(&self, cell: CellNumber, message: &ToLane) {
        let writer = lock(&self.state)
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
    fn send_out(&self, frame: OutFrame) -> Result<(), EngineError> {
        let mut outbox = lock(&self.outbox);
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
    fn write_directly(&self, outbox: &Outbox, mut frame: OutFrame) -> Option<OutFrame> {
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
    fn close(&self) {
        lock(&self.outbox).closing = true;
        self.outbox_ready.notify_one();
    }

    /// The writer thread: writes what the outbox holds, in order, until the channel closes or
    /// the process ends. A write that waits past `stall_deadline` ends the process.
    fn write_until_closed(self: Arc<Self>, mut writer: UnixStream, stall_deadline: Duration) {
        loop {
            let frame = {
                let mut outbox = lock(&self.outbox);
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
                    outbox = self
                        .outbox_ready
                        .wait(outbox)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
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
                lock(&self.outbox).stopped = true;
                return;
            }
        }
    }

    /// Ends the process for misbehaving: what it sends from now on is not read, and its cells
    /// fail with `why`.
    fn misbehaved(&self, why: Misbehaviour) {
        let why = why.to_string();
        {
            let mut state = lock(&self.state);
            if state.ended {
                return;
            }
            state.misbehaved.get_or_insert(why.clone());
        }
        lock(&self.outbox).stopped = true;
        self.outbox_ready.notify_one();
        tracing::error!(pid = self.pid, reason = %why, "ending an engine process that misbehaved");
        self.kill();
    }

    fn kill(&self) {
        if let Some(child) = lock(&self.child).as_mut() {
            let _ = child.kill();
        }
    }

    /// Kills the process because `cell` did not stop within its grace period.
    fn kill_for(&self, cell: CellNumber) {
        {
            let mut state = lock(&self.state);
            if state.ended || !state.cells.contains_key(&cell) {
                return;
            }
            state.killed_for.get_or_insert(cell);
        }
        tracing::warn!(
            pid = self.pid,
            "a cell did not stop within its grace period: killing its engine process"
        );
        self.kill();
    }

    fn read_until_closed(self: Arc<Self>, reader: UnixStream, pool: Weak<Pool>) {
        // Only a probe's answer needs the pool now: each cell's frames come on its lane.
        #[cfg(not(feature = "test-hooks"))]
        drop(pool);
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
            if let Err(why) = self.check_control(&message) {
                // Nothing of a misbehaving process reaches a session from here on.
                self.misbehaved(why);
                break;
            }
            match message {
                // Refused by the check: a cell's frames come on its lane.
                ToParent::Event { .. } | ToParent::Ended { .. } | ToParent::StartFailed { .. } => {}
                ToParent::HardStop {
                    cell,
                    reason,
                    message,
                } => {
                    lock(&self.state).hard_stop = Some((cell, reason, message));
                }
                #[cfg(feature = "test-hooks")]
                ToParent::ProbeResult { allowed, detail } => {
                    if let Some(pool) = pool.upgrade() {
                        pool.answer_probe(allowed, detail);
                    }
                }
                ToParent::Ready { .. } | ToParent::Failed { .. } => {}
            }
        }
        self.ended();
        // A probe this process will never answer is not waited for.
        #[cfg(feature = "test-hooks")]
        if let Some(pool) = pool.upgrade() {
            lock(&pool.probe_answer).take();
        }
    }

    /// Checks a cell's frame from the child (from `check_lane`) against what the parent sent
    /// it: a cell it hosts, within the limits of what such a frame may carry. The child is hostile native code once it has
    /// run a cell; an error ends it.
    fn check(&self, message: &ToParent, length: usize) -> Result<(), Misbehaviour> {
        use codemode_protocol::limits::{
            MAX_STORED_BYTES_PER_CELL, MAX_TOOL_INPUT_BYTES, MAX_TOOL_INPUT_BYTES_IN_FLIGHT,
        };
        let hosts = |cell: &CellNumber| lock(&self.state).cells.contains_key(cell);
        match message {
            ToParent::Event { cell, event } => {
                let mut state = lock(&self.state);
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
            // The process's own frames never come here: `check_lane` refuses them first.
            _ => Ok(()),
        }
    }

    /// Checks a frame from the process's own channel: nothing of a cell comes there.
    fn check_control(&self, message: &ToParent) -> Result<(), Misbehaviour> {
        match message {
            ToParent::Event { cell, .. }
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
    fn check_lane(
        &self,
        lane_cell: CellNumber,
        message: &ToParent,
        length: usize,
    ) -> Result<(), Misbehaviour> {
        match message {
            ToParent::Event { cell, .. }
            | ToParent::Ended { cell }
            | ToParent::StartFailed { cell, .. }
                if *cell != lane_cell =>
            {
                Err(Misbehaviour::OffLane {
                    cell: *cell,
                    lane: Some(lane_cell),
                })
            }
            ToParent::Event { .. } | ToParent::Ended { .. } | ToParent::StartFailed { .. } => {
                self.check(message, length)
            }
            _ => Err(Misbehaviour::OffLane {
                cell: lane_cell,
                lane: None,
            }),
        }
    }

    /// The channel closed: reap the process and end each of its cells as its fate says.
    fn ended(&self) {
        // Nothing more comes from it; make sure it is gone before it is reaped.
        self.kill();
        let status = lock(&self.child)
            .take()
            .and_then(|mut child| child.wait().ok());
        drop(lock(&self.cgroup).take());
        // The cells stay until their lane tasks have delivered what they sent, then their fates.
        let (cells, hard_stop, killed_for, misbehaved) = {
            let mut state = lock(&self.state);
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
        lock(&self.outbox).stopped = true;
        self.outbox_ready.notify_one();
        // The process is gone, so its pipes close and the readers end: whatever it printed last
        // has been read.
        for reader in std::mem::take(&mut *lock(&self.output_readers)) {
            let _ = reader.join();
        }
        let printed = lock(&self.fatal_line).take();
        let crash = match (&hard_stop, status, printed) {
            (Some((_, HardStopReason::Fatal | HardStopReason::OutOfMemory, message)), _, _) => {
                message.clone()
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
                _ if stopped_for.is_some() => "the cell was stopped: another cell in its engine process \
                     could not be stopped in time, and the process had to be ended with it; run the \
                     cell again"
                    .to_owned(),
                _ => format!("the engine process running this cell crashed ({crash})"),
            };
            fates.insert(number, Some(failure(error)));
        }
        lock(&self.state).fates = fates;
        self.over.send_replace(true);
    }

    /// The task that reads the lane of cell `cell` while it runs, on the async runtime of its
    /// owner: checks each frame, hands each event to the cell's actor (waiting while its queue is
    /// full, so that back-pressure reaches the child), writes what waits for the lane as the
    /// socket drains, and at the cell's end gives the lane back. If the process ends first, it
    /// delivers what the cell sent before the end, then the cell's fate.
    async fn serve_cell(
        self: Arc<Self>,
        pool: Weak<Pool>,
        cell: CellNumber,
        lane: Lane,
        writer: Arc<LaneWriter>,
        events: EventSender,
    ) {
        let mut guard = LaneGuard {
            process: Arc::clone(&self),
            cell,
            done: false,
        };
        let number = lane.number;
        let ending = match tokio::net::UnixStream::from_std(lane.socket) {
            Ok(socket) => {
                let ending = self.read_lane(cell, &socket, &writer, &events, &pool).await;
                (ending, Some(socket))
            }
            Err(error) => {
                tracing::error!(pid = self.pid, %error, "cannot read a lane of an engine process");
                (LaneEnding::Broke, None)
            }
        };
        let between_frames = writer.close();
        guard.done = true;
        match ending {
            (LaneEnding::Ended, Some(socket)) => {
                let (slot, now_idle) = {
                    let mut state = lock(&self.state);
                    let slot = state.cells.remove(&cell);
                    (slot, state.cells.is_empty())
                };
                drop(slot);
                drop(events);
                // The lane goes back for the next cell, while few enough wait.
                if let Ok(socket) = socket.into_std() {
                    let mut lanes = lock(&self.lanes);
                    if between_frames && lanes.idle.len() < self.warm_lanes && self.alive() {
                        lanes.idle.push(Lane { number, socket });
                    }
                }
                if now_idle && let Some(pool) = pool.upgrade() {
                    pool.idle(&self);
                }
            }
            (ending, socket) => {
                match ending {
                    LaneEnding::Misbehaved(why) => self.misbehaved(why),
                    // The process is gone or going (a live one does not close a lane): make sure.
                    _ => self.kill(),
                }
                drop(socket);
                let mut over = self.over.subscribe();
                let _ = over.wait_for(|over| *over).await;
                let (slot, fate) = {
                    let mut state = lock(&self.state);
                    (state.cells.remove(&cell), state.fates.remove(&cell))
                };
                drop(slot);
                if let Some(Some(fate)) = fate {
                    let _ = events.send(fate).await;
                }
            }
        }
    }

    /// Reads the lane of cell `cell` until the cell ends, the lane does, or the child misbehaves.
    async fn read_lane(
        self: &Arc<Self>,
        cell: CellNumber,
        socket: &tokio::net::UnixStream,
        writer: &LaneWriter,
        events: &EventSender,
        pool: &Weak<Pool>,
    ) -> LaneEnding {
        let mut buffer = FrameBuffer::default();
        loop {
            loop {
                let (message, length) = match buffer.next::<ToParent>(wire::MAX_CHILD_FRAME_BYTES) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(error) => {
                        return LaneEnding::Misbehaved(Misbehaviour::InvalidFrame(error));
                    }
                };
                if let Err(why) = self.check_lane(cell, &message, length) {
                    return LaneEnding::Misbehaved(why);
                }
                match message {
                    ToParent::Event { mut event, .. } => {
                        let last = matches!(
                            event,
                            RuntimeEvent::Result { .. } | RuntimeEvent::ThreadPanicked
                        );
                        if last {
                            self.finished(cell, pool);
                        }
                        {
                            let mut state = lock(&self.state);
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
                        self.finished(cell, pool);
                        let _ = events.send(RuntimeEvent::Started).await;
                        let _ = events.send(failure(error)).await;
                    }
                    ToParent::Ended { .. } => return LaneEnding::Ended,
                    // Refused by the check.
                    _ => {}
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
            }
        }
    }

    /// The child relayed the last event of cell `cell`: a termination has nothing left to stop
    /// there, and the child has the grace period to say that the cell ended (the first time
    /// only: a child may repeat a result, not the deadline).
    fn finished(self: &Arc<Self>, cell: CellNumber, pool: &Weak<Pool>) {
        {
            let mut state = lock(&self.state);
            match state.cells.get_mut(&cell) {
                Some(slot) if !slot.finished => slot.finished = true,
                _ => return,
            }
        }
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let grace = pool.config.hard_stop_grace;
        let armed = pool.grace_kills.arm(
            Instant::now() + grace,
            Arc::downgrade(self),
            cell,
            Deadline::End(grace),
        );
        if !armed {
            tracing::error!("cannot watch for the end of a cell; killing its process now");
            self.kill_for(cell);
        }
    }

    /// The end deadline of cell `cell` passed: a child that has not said the cell ended by then,
    /// though it sent its result, keeps it going where no termination reaches it.
    fn end_overdue(&self, cell: CellNumber, grace: Duration) {
        if self.hosts(cell) {
            self.misbehaved(Misbehaviour::EndNotSaid { cell, grace });
        }
    }

    /// The start deadline of cell `cell` passed: a child that has not said the cell started by
    /// then stopped reading.
    fn start_overdue(&self, cell: CellNumber, deadline: Duration) {
        let overdue = lock(&self.state)
            .cells
            .get(&cell)
            .is_some_and(|slot| !slot.started);
        if overdue {
            self.misbehaved(Misbehaviour::StartNotTaken { deadline });
        }
    }
}

/// Raises this process's soft limit of open descriptors to its hard limit: every live cell in an
/// engine process holds a lane's socket here, so a server with a thousand parked cells needs more
/// than the usual soft limit of 1,024 (as Go's runtime does for every program).
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(%error, soft, "cannot raise the limit of open descriptors");
    }
}

/// How a lane's reading ended.
enum LaneEnding {
    /// The cell ended: the lane may serve another.
    Ended,
    /// The lane closed or broke before the cell ended.
    Broke,
    /// The child broke a rule on it.
    Misbehaved(Misbehaviour),
}

/// Held by a lane task: a task dropped before it is done (its runtime shut down, and the cell's
/// owner with it) still takes the cell out of its process and stops it there.
struct LaneGuard {
    process: Arc<EngineProcess>,
    cell: CellNumber,
    done: bool,
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let slot = lock(&self.process.state).cells.remove(&self.cell);
        if let Some(slot) = slot {
            if let Some(lane) = &slot.lane {
                lane.close();
            }
            let _ = self.process.send(&ToChild::Terminate { cell: self.cell });
        }
    }
}

/// Writes `frame` to the process's channel, blocking; the socket riding on it goes with its
/// first byte.
fn write_out(writer: &mut UnixStream, frame: OutFrame) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let sent = match &frame.socket {
        Some(lane) => crate::descriptors::send_with(
            writer.as_raw_fd(),
            &frame.bytes,
            lane,
            nix::sys::socket::MsgFlags::empty(),
        )?,
        None => 0,
    };
    writer.write_all(&frame.bytes[sent..])
}

fn failure(error_text: String) -> RuntimeEvent {
    RuntimeEvent::Result {
        stored_value_writes: HashMap::new(),
        error_text: Some(error_text),
    }
}

/// How many engine processes' worth of threads the engine user may have together
/// (`RLIMIT_NPROC` counts every thread of a user): where no control group bounds each process,
/// this bounds them all, far below what exhausts the machine.
const USER_THREADS_PROCESSES: u64 = 64;

/// Why the parent ended an engine process: a frame that breaks what the parent sent it, or a
/// channel it stopped reading. The child is hostile native code once it has run a cell, so each
/// of these ends it, and its cells fail with the reason (worded as "… because {reason}").
#[derive(Debug, thiserror::Error)]
enum Misbehaviour {
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
    #[error(
        "it did not say that cell {cell} ended within {} ms of the cell's result",
        grace.as_millis()
    )]
    EndNotSaid { cell: CellNumber, grace: Duration },
}

/// How a process ended, in words: its exit code, or its signal by name.
fn describe_exit(status: std::process::ExitStatus) -> String {
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

/// Stops one cell of an engine process: asks the child, then kills the process if the cell has
/// not ended within the grace period. A cell still waiting for a process just stops waiting.
struct CellTerminator {
    route: Arc<CellRoute>,
    pool: Weak<Pool>,
    grace: Duration,
}

impl Terminate for CellTerminator {
    fn terminate(&self) {
        let placed = {
            let mut route = lock(&self.route.state);
            match &*route {
                RouteState::Placed(process) => process.clone(),
                RouteState::Gone => return,
                RouteState::Queued(_) => {
                    *route = RouteState::Gone;
                    drop(route);
                    if let Some(pool) = self.pool.upgrade() {
                        pool.unqueue(self.route.number);
                    }
                    return;
                }
            }
        };
        let Some(process) = placed.upgrade() else {
            return;
        };
        let cell = self.route.number;
        {
            let mut state = lock(&process.state);
            match state.cells.get_mut(&cell) {
                Some(slot) if !slot.terminating && !slot.finished => slot.terminating = true,
                _ => return,
            }
        }
        // The grace kill is armed before the child is asked: a child that never reads the
        // request is still stopped in time.
        let armed = self.pool.upgrade().is_some_and(|pool| {
            pool.grace_kills.arm(
                Instant::now() + self.grace,
                placed.clone(),
                cell,
                Deadline::Stop,
            )
        });
        if !armed {
            tracing::error!("cannot watch a termination's grace period; killing the process now");
            process.kill_for(cell);
            return;
        }
        // The process's channel stops JavaScript that runs; the lane wakes a thread that waits.
        let _ = process.send(&ToChild::Terminate { cell });
        process.send_lane(cell, &ToLane::Terminate { cell });
    }
}

/// What a deadline of [`GraceKills`] waits for.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// The cell, asked to stop, to end (else its process is killed).
    Stop,
    /// The child to take the cell's start up, within this stall deadline (else it stopped
    /// reading).
    Start(Duration),
    /// The child to say that the cell, whose last event it sent, ended, within this grace
    /// period (else it keeps the cell going where no termination reaches it).
    End(Duration),
}

/// The grace kills of one pool, on one thread: a cell asked to stop that has not ended by its
/// deadline has its process killed. The thread starts with the first termination and ends with
/// the pool.
#[derive(Debug, Default)]
struct GraceKills {
    due: Mutex<DueKills>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct DueKills {
    kills: Vec<(Instant, Weak<EngineProcess>, CellNumber, Deadline)>,
    watching: bool,
    /// Until when the watching thread sleeps, if it does: a deadline armed after that one need
    /// not wake it (every completed cell arms one, so most need not).
    sleeping: Sleeping,
    closed: bool,
}

/// What the watching thread of [`GraceKills`] does.
#[derive(Debug, Default, Clone, Copy)]
enum Sleeping {
    /// It looks at the deadlines before it sleeps again.
    #[default]
    Awake,
    /// Until the earliest deadline.
    Until(Instant),
    /// Until a deadline is armed (there is none).
    Untimed,
}

impl GraceKills {
    /// Ends `process` at `deadline` unless cell `cell` has done what `what` waits for by then;
    /// `false` if no thread can watch the deadline.
    fn arm(
        self: &Arc<Self>,
        deadline: Instant,
        process: Weak<EngineProcess>,
        cell: CellNumber,
        what: Deadline,
    ) -> bool {
        let mut due = lock(&self.due);
        due.kills.push((deadline, process, cell, what));
        if !due.watching {
            let kills = Arc::clone(self);
            let started = std::thread::Builder::new()
                .name("codemode-engine-grace".into())
                .spawn(move || kills.watch());
            if started.is_err() {
                due.kills.pop();
                return false;
            }
            due.watching = true;
        }
        let wake = match due.sleeping {
            Sleeping::Awake => false,
            Sleeping::Until(earliest) => deadline < earliest,
            Sleeping::Untimed => true,
        };
        drop(due);
        if wake {
            self.wake.notify_one();
        }
        true
    }

    fn watch(&self) {
        let mut due = lock(&self.due);
        loop {
            due.sleeping = Sleeping::Awake;
            if due.closed {
                return;
            }
            let now = Instant::now();
            let (expired, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut due.kills)
                .into_iter()
                .partition(|(deadline, _, _, _)| *deadline <= now);
            due.kills = waiting;
            if !expired.is_empty() {
                drop(due);
                for (_, process, cell, what) in expired {
                    if let Some(process) = process.upgrade() {
                        match what {
                            Deadline::Stop => process.kill_for(cell),
                            Deadline::Start(deadline) => process.start_overdue(cell, deadline),
                            Deadline::End(grace) => process.end_overdue(cell, grace),
                        }
                    }
                }
                due = lock(&self.due);
                continue;
            }
            let earliest = due.kills.iter().map(|(deadline, _, _, _)| *deadline).min();
            due.sleeping = earliest.map_or(Sleeping::Untimed, Sleeping::Until);
            due = match earliest {
                Some(next) => {
                    self.wake
                        .wait_timeout(due, next.saturating_duration_since(now))
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0
                }
                None => self
                    .wake
                    .wait(due)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            };
        }
    }

    /// Ends the thread (the pool is gone, and its processes with it).
    fn close(&self) {
        lock(&self.due).closed = true;
        self.wake.notify_one();
    }
}
