//! The pool of engine processes ([`Pool`]): placing each cell in a process of its tenant with
//! room (or queueing it for one being started for it), keeping spares and idle processes, and
//! retiring them; and stopping a cell ([`CellTerminator`]), wherever it is.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use codemode_engine::{
    CellStart, CommandSender, EngineError, EngineHandles, EventSender, RuntimeEvent, Terminate,
    TerminateHandle,
};

use super::engine_process::{EngineProcess, ProcessOwner};
use super::grace::{Deadline, GraceKills, Overdue};
use super::lane_task::serve_cell;
use super::route::{CellRoute, RouteState};
use super::spawn::{raise_descriptor_limit, spawn};
use super::state::{CellSlot, Whose, failure};
use super::verdict::Watch;
use crate::config::ProcessEngineConfig;
use crate::lane::LaneWriter;
#[cfg(feature = "test-hooks")]
use crate::wire::Probe;
use crate::wire::{self, CellNumber, ToChild, ToLane, WireStart};

/// How many processes with no cells are kept (each bound to its tenant) besides the spares.
const MAX_IDLE_PROCESSES: usize = 4;

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
    /// Engine processes started, for metrics.
    spawned: AtomicU64,
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
    starting_for: HashMap<Whose, usize>,
    /// Cells that waited in `queued` and were placed, and how long they waited in all.
    waited: (u64, Duration),
}

/// A cell that found no process with room: it waits for one being started for it.
#[derive(Debug)]
struct QueuedStart {
    tenant: Whose,
    /// Its `Start` frame, for its lane.
    frame: Vec<u8>,
    slot: Box<CellSlot>,
    route: Arc<CellRoute>,
    /// The async runtime it was started from, which reads its lane.
    runtime: Option<tokio::runtime::Handle>,
    /// When it began to wait.
    since: Instant,
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
            spawned: AtomicU64::new(0),
        });
        pool.refill();
        pool
    }

    /// The processes alive and started, and the cells waiting for one, for metrics.
    pub(crate) fn stats(&self) -> codemode_engine::EngineStats {
        let processes = self.processes.lock();
        let mut stats = codemode_engine::EngineStats::default();
        stats.processes_alive = processes.active.len() + processes.spares.len();
        stats.processes_spawned = self.spawned.load(Ordering::Relaxed);
        stats.cells_queued = processes.queued.len();
        (stats.cells_that_waited, stats.queue_wait) = processes.waited;
        stats
    }

    pub(crate) fn describe(&self) -> Option<String> {
        self.engine.get().cloned()
    }

    pub(crate) fn check(&self) -> Result<String, EngineError> {
        let process = self.spawn()?;
        self.processes.lock().spares.push(process);
        Ok(self.describe().unwrap_or_default())
    }

    pub(crate) fn process_ids(&self) -> Vec<u32> {
        let processes = self.processes.lock();
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
        let latest = self
            .processes
            .lock()
            .latest
            .as_ref()
            .and_then(Weak::upgrade);
        latest
            .and_then(|process| {
                process
                    .cgroup
                    .lock()
                    .as_ref()
                    .map(|cgroup| cgroup.folders().to_vec())
            })
            .unwrap_or_default()
    }

    #[cfg(feature = "test-hooks")]
    pub(crate) fn probe(&self, what: Probe) -> Result<(bool, String), EngineError> {
        let process = self
            .processes
            .lock()
            .latest
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or_else(|| EngineError::Unavailable("no engine process has run a cell".into()))?;
        let (sender, receiver) = std::sync::mpsc::channel();
        *self.probe_answer.lock() = Some(sender);
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
        let slot = Box::new(CellSlot::new(
            events,
            call_id,
            heap_limit_bytes,
            cpu_time_limit,
            max_tool_calls,
        ));
        self.place(number, &tenant, slot, frame, &route, runtime)?;
        Ok(self.handles(number, route))
    }

    /// Places a new cell: in a process with room now, or in the queue for one being started for
    /// it. A start never waits for a process (the caller may be an async worker). A process that
    /// died a moment ago may still look alive: its channel refuses the cell, and the cell is
    /// placed again (three times at most).
    fn place(
        &self,
        number: CellNumber,
        tenant: &Whose,
        mut slot: Box<CellSlot>,
        frame: Vec<u8>,
        route: &Arc<CellRoute>,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<(), EngineError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut processes = self.processes.lock();
            match self.place_now(&mut processes, tenant, number, slot) {
                Ok((process, took_spare)) => {
                    drop(processes);
                    if took_spare {
                        self.refill();
                    }
                    *route.state.lock() = RouteState::Placed(Arc::downgrade(&process));
                    let Err((error, taken)) = self.open_lane(
                        &process,
                        number,
                        frame.clone(),
                        Vec::new(),
                        runtime.clone(),
                    ) else {
                        break;
                    };
                    process.state.lock().retired = true;
                    // `None`: the process ended meanwhile, and the cell's lane task ends it.
                    let Some(taken) = taken else { break };
                    if attempts >= 3 {
                        return Err(error);
                    }
                    slot = taken;
                    *route.state.lock() = RouteState::Queued(Vec::new());
                }
                Err(slot) => {
                    processes.queued.push_back(QueuedStart {
                        tenant: tenant.clone(),
                        frame,
                        slot,
                        route: Arc::clone(route),
                        runtime: runtime.clone(),
                        since: Instant::now(),
                    });
                    let spawners = self.spawners_needed(&mut processes, tenant);
                    drop(processes);
                    self.start_processes_for(tenant, spawners);
                    break;
                }
            }
        }
        Ok(())
    }

    /// The handles of cell `number`: its commands and controls go by its `route`, and its
    /// termination asks the child, then kills the process after the grace period.
    fn handles(&self, number: CellNumber, route: Arc<CellRoute>) -> EngineHandles {
        // Held by both senders: once the owner has dropped every clone of both, the cell is told.
        let owned = Arc::new(Owned(Arc::clone(&route)));
        let commands = {
            let route = Arc::clone(&route);
            let owned = Arc::clone(&owned);
            CommandSender::forward(move |command: codemode_engine::RuntimeCommand| {
                let _owned = &owned;
                route.forward(command, |process, command| {
                    if let codemode_engine::RuntimeCommand::ToolResponse { id, .. }
                    | codemode_engine::RuntimeCommand::ToolError { id, .. } = &command
                        && let Some(process) = process
                        && let Some(slot) = process.state.lock().cells.get_mut(&number)
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
                let _owned = &owned;
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
        EngineHandles {
            commands,
            control,
            terminate,
        }
    }

    /// Places cell `number` of `tenant` (its `slot`) in a process with room for it now: an
    /// active one of the tenant, else a spare (bound to the tenant from now on, and `true` to say
    /// that one was taken). A process never holds cells of two tenants: a cell that takes its
    /// process over reaches only its own tenant's. `Err` gives the slot back when no process has
    /// room.
    fn place_now(
        &self,
        processes: &mut Processes,
        tenant: &Whose,
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
    fn spawners_needed(&self, processes: &mut Processes, tenant: &Whose) -> usize {
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
    fn start_processes_for(&self, tenant: &Whose, count: usize) {
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
        for_tenant: Option<&Whose>,
    ) {
        let mut failed = Vec::new();
        // Cells the new process could not take after all: failed once the pool's lock is let go.
        let mut failed_now = Vec::new();
        // Processes still needed for cells that wait: started once the pool's lock is let go.
        let mut still_needed = Vec::new();
        {
            let mut processes = self.processes.lock();
            if let Some(tenant) = for_tenant
                && let Some(starting) = processes.starting_for.get_mut(tenant)
            {
                *starting = starting.saturating_sub(1);
            }
            // A process that ended as it became ready (killed, say) could not start after all.
            let spawned = spawned.and_then(|process| {
                if process.alive() {
                    Ok(process)
                } else {
                    Err(EngineError::Unavailable(
                        "the engine process ended as it became ready".to_owned(),
                    ))
                }
            });
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
                    } else if process.alive() {
                        processes.spares.push(process);
                    }
                    // Cells it could not take (it ended just after the check above, say) would
                    // wait for ever if no process were starting for them.
                    for waiting in [tenant.as_ref(), for_tenant].into_iter().flatten() {
                        let needed = self.spawners_needed(&mut processes, waiting);
                        if needed > 0 && !still_needed.iter().any(|(t, _)| t == waiting) {
                            still_needed.push((waiting.clone(), needed));
                        }
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
                        *queued.route.state.lock() = RouteState::Gone;
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
        for (tenant, count) in still_needed {
            self.start_processes_for(&tenant, count);
        }
    }

    /// Places the queued cells of `tenant` in the new `process`, oldest first, as many as it has
    /// room for; how many it took. Each cell's start, and what its actor sent while it waited,
    /// are sent in order before its commands go to the process directly.
    fn place_queued(
        &self,
        processes: &mut Processes,
        process: &Arc<EngineProcess>,
        tenant: &Whose,
        failed: &mut Vec<(Box<CellSlot>, EngineError)>,
    ) -> usize {
        let mut placed = 0;
        let mut kept = VecDeque::new();
        for queued in std::mem::take(&mut processes.queued) {
            if &queued.tenant != tenant {
                kept.push_back(queued);
                continue;
            }
            let mut route = queued.route.state.lock();
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
            processes.waited.0 += 1;
            processes.waited.1 += queued.since.elapsed();
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
            let slot = process.state.lock().cells.remove(&number).map(Box::new);
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
            let mut state = process.state.lock();
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
        runtime.spawn(serve_cell(
            Arc::clone(process),
            self.myself.clone(),
            number,
            lane,
            Arc::clone(&writer),
            events,
        ));
        // A start the child does not take up in time is a child that stopped reading.
        let armed = self.grace_kills.arm(
            Instant::now() + self.config.stall_deadline,
            Arc::downgrade(process) as Weak<dyn Overdue>,
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
            let mut processes = self.processes.lock();
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
            let mut processes = self.processes.lock();
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
                    pool.processes.lock().spawning -= 1;
                    pool.process_started(spawned, None);
                });
            if started.is_err() {
                self.processes.lock().spawning -= 1;
            }
        }
    }

    /// `process` has no cells left: retire it if its tenant has another idle process, or the
    /// pool has enough idle ones without it.
    fn idle(&self, process: &Arc<EngineProcess>) {
        let mut processes = self.processes.lock();
        // Cells are placed under the pool's lock: one placed since the last cell ended keeps
        // the process.
        let tenant = {
            let state = process.state.lock();
            if !state.cells.is_empty() {
                return;
            }
            state.tenant.clone()
        };
        let idle: Vec<Option<Whose>> = processes
            .active
            .iter()
            .filter(|other| other.alive() && !Arc::ptr_eq(other, process))
            .filter_map(|other| {
                let state = other.state.lock();
                state.cells.is_empty().then(|| state.tenant.clone())
            })
            .collect();
        let retired = process.state.lock().retired;
        let twin = idle.contains(&tenant);
        if retired || twin || idle.len() >= MAX_IDLE_PROCESSES {
            processes
                .active
                .retain(|other| !Arc::ptr_eq(other, process));
            drop(processes);
            process.close();
        }
    }

    /// Starts one engine process and waits until it is ready.
    fn spawn(&self) -> Result<Arc<EngineProcess>, EngineError> {
        let spawned = spawn(&self.config, &self.cgroups, &self.cgroup_prefix)?;
        self.spawned.fetch_add(1, Ordering::Relaxed);
        let _ = self.engine.set(spawned.engine.clone());
        EngineProcess::start(spawned, &self.config, self.myself.clone())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.grace_kills.close();
        let processes = self.processes.lock();
        for process in processes.active.iter().chain(&processes.spares) {
            process.close();
        }
    }
}

impl ProcessOwner for Pool {
    fn idle(&self, process: &Arc<EngineProcess>) {
        Pool::idle(self, process);
    }

    fn hard_stop_grace(&self) -> Duration {
        self.config.hard_stop_grace
    }

    fn grace_kills(&self) -> &Arc<GraceKills> {
        &self.grace_kills
    }

    #[cfg(feature = "test-hooks")]
    fn probe_answered(&self, answer: Option<(bool, String)>) {
        let waiting = self.probe_answer.lock().take();
        if let (Some(sender), Some(answer)) = (waiting, answer) {
            let _ = sender.send(answer);
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
            let mut route = self.route.state.lock();
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
        let thread = {
            let mut state = process.state.lock();
            match state.cells.get_mut(&cell) {
                Some(slot) if !slot.terminating && !slot.finished => {
                    slot.terminating = true;
                    slot.thread
                }
                _ => return,
            }
        };
        // The grace kill is armed before the child is asked: a child that never reads the
        // request is still stopped in time.
        let watch = Watch::start(process.pid, thread, self.grace);
        let armed = self.pool.upgrade().is_some_and(|pool| {
            pool.grace_kills.arm(
                watch.first_deadline(),
                placed.clone(),
                cell,
                Deadline::Stop(watch),
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

/// What a cell's command and control senders hold together: when the last of them is dropped, its
/// owner can send nothing more, and the cell's lane is told (a cell that waits for a command or a
/// control then ends, as in-process, instead of holding its lane until it is terminated).
struct Owned(Arc<CellRoute>);

impl Drop for Owned {
    fn drop(&mut self) {
        let cell = self.0.number;
        let _ = self.0.forward((), |_, ()| ToLane::Abandoned { cell });
    }
}
