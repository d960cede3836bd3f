//! An engine that runs cells in child engine processes, any engine inside: the wall behind the
//! isolate. Inside one process a JavaScript engine can always end the process (a fatal
//! out-of-memory, a failed internal check, a bug); here that ends one engine process, and the
//! cells it hosted end with a clear error while everything else goes on.
//!
//! [`ProcessEngine`] implements [`Engine`] on the parent side. Each engine process is a program
//! (the `codemode` binary in its hidden engine-host mode) that runs [`child::serve`] with a real
//! engine. Parent and child speak length-prefixed JSON frames over a Unix socket pair (see `wire`);
//! the child's standard output and error are pipes the parent reads and logs through `tracing`,
//! truncated and rate-limited, so nothing a cell makes its engine print reaches a standard stream
//! of the parent.
//!
//! # Placement
//!
//! A process hosts up to [`ProcessEngineConfig::cells_per_process`] live cells (16 by default),
//! each in its own isolate on its own thread as in-process, and is retired after
//! [`ProcessEngineConfig::cells_per_process_lifetime`] cells. The blast radius of a crash, or of a
//! hard stop, is the cells of one process. The choice comes from measurements (`cargo xtask
//! bench`, 2 cores): an idle engine process with its warm runtimes costs about 11 MiB of
//! proportional memory (36 MiB resident, the V8 library shared) and 42 ms from spawn to ready; a
//! parked cell costs 1.25 MiB with 16 cells per process (0.93 MiB in-process). One cell per process
//! would cost every parked cell a process of its own (about 12 MiB) and every start beyond the
//! spares a 42 ms spawn. Starts in a shared process cost what in-process starts cost, within the
//! noise of the suite. Warm processes wait ready (V8 initialised, runtimes warm, sandbox on), so a
//! start never pays for a process spawn unless a burst outruns them.
//!
//! # Stops
//!
//! Termination first asks the engine to stop the cell; a cell whose runtime has not ended within
//! [`ProcessEngineConfig::hard_stop_grace`] has its process killed. The child ends itself (after
//! telling the parent which cell and why) when a cell's heap goes on growing past its limit or its
//! CPU-time limit is not honoured within the grace period, or the engine hits a fatal error. The
//! cell responsible ends as it would have (terminated, or failed with its limit's error); the
//! other cells of that process end with an error that says why.
//!
//! This crate knows no concrete engine: the binary that hosts engine processes chooses one.

#![deny(missing_docs)]
// Only `descriptors` may use `unsafe` (two system calls, its rules written at its top).
#![deny(unsafe_code)]

mod cgroup;
pub mod child;
mod config;
#[allow(unsafe_code)]
mod descriptors;
mod lane;
mod log;
#[allow(unsafe_code)]
mod native_probe;
pub mod node_host;
mod process;
mod sandbox;
mod wire;

use std::sync::Arc;

use codemode_engine::{CellStart, Engine, EngineError, EngineHandles, EventSender};

pub use crate::config::{
    DEFAULT_CELLS_PER_PROCESS, DEFAULT_HARD_STOP_GRACE, DEFAULT_STALL_DEADLINE,
    DEFAULT_THREADS_PER_PROCESS, ProcessEngineConfig,
};
pub use crate::descriptors::close_inherited_descriptors;
pub use crate::native_probe::NATIVE_ATTACK_PROBE;
#[cfg(feature = "test-hooks")]
pub use crate::wire::{Forgery, Probe};

/// Runs cells in child engine processes. Cheap to clone (clones share the processes).
#[derive(Debug, Clone)]
pub struct ProcessEngine {
    pool: Arc<process::Pool>,
}

impl ProcessEngine {
    /// An engine whose processes are started with `config`. Starts the spare processes in the
    /// background; the first start waits for one if none is ready.
    ///
    /// Marks this process non-dumpable (Linux): its memory and `/proc` files (where the
    /// environment holds tokens) are then out of reach of processes of the same user without
    /// `CAP_SYS_PTRACE`, such as a compromised engine process.
    pub fn new(config: ProcessEngineConfig) -> Self {
        #[cfg(target_os = "linux")]
        if let Err(error) = nix::sys::prctl::set_dumpable(false) {
            tracing::warn!(%error, "cannot make this process non-dumpable");
        }
        ProcessEngine {
            pool: process::Pool::new(config),
        }
    }

    /// Starts one engine process now and waits until it is ready: an error says why the program
    /// cannot host cells (not found, not an engine host, its engine failed).
    pub fn check(&self) -> Result<String, EngineError> {
        self.pool.check()
    }

    /// The process ids of the engine processes alive now.
    pub fn process_ids(&self) -> Vec<u32> {
        self.pool.process_ids()
    }

    /// The folders of the control groups of the engine process hosting the most recent cell
    /// (empty without one). Only with test hooks.
    #[doc(hidden)]
    #[cfg(feature = "test-hooks")]
    pub fn control_group_folders(&self) -> Vec<std::path::PathBuf> {
        self.pool.control_group_folders()
    }

    /// Asks the engine process hosting the most recent cell to try `what`, which its sandbox
    /// should forbid; returns whether it was allowed and what happened. Only with test hooks.
    #[doc(hidden)]
    #[cfg(feature = "test-hooks")]
    pub fn probe_sandbox(&self, what: Probe) -> Result<(bool, String), EngineError> {
        self.pool.probe(what)
    }
}

impl Engine for ProcessEngine {
    fn stats(&self) -> codemode_engine::EngineStats {
        self.pool.stats()
    }

    fn describe(&self) -> String {
        match self.pool.describe() {
            Some(engine) => format!("{engine} in engine processes"),
            None => "engine processes".to_owned(),
        }
    }

    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError> {
        codemode_engine::check_heap_limit(cell.limits.heap_limit_bytes)?;
        self.pool.start(cell, events)
    }
}
