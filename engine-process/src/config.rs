//! How engine processes are started and what they may do ([`ProcessEngineConfig`]), with the
//! defaults.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES;

/// How long a cell may go on after it was asked to stop before its process is killed.
pub const DEFAULT_HARD_STOP_GRACE: Duration = Duration::from_millis(100);

/// How long a child may leave its channel unread, with messages waiting for it, before it is
/// ended.
pub const DEFAULT_STALL_DEADLINE: Duration = Duration::from_secs(10);

/// How many live cells one engine process hosts by default.
pub const DEFAULT_CELLS_PER_PROCESS: usize = 16;

/// The most threads an engine process may have where its control group bounds them: its cells'
/// runtime threads (16) and warm runtimes, V8's platform workers, the writer, the watchdog, with
/// room to spare; far below what an attack needs to exhaust the machine.
pub const DEFAULT_THREADS_PER_PROCESS: u64 = 256;

/// How an engine process is started and what it may do.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessEngineConfig {
    /// The program that runs [`crate::child::serve`].
    pub program: PathBuf,
    /// Its arguments (the hidden engine-host mode).
    pub args: Vec<OsString>,
    /// The only environment the child gets (typically the library path its loader needs).
    pub env: Vec<(OsString, OsString)>,
    /// How many live cells one process hosts.
    pub cells_per_process: usize,
    /// How many cells a process hosts over its life before it is retired.
    pub cells_per_process_lifetime: usize,
    /// How many ready processes with no cells are kept for the next starts.
    pub spare_processes: usize,
    /// How long a cell asked to stop may go on before its process is killed.
    pub hard_stop_grace: Duration,
    /// How long a process may leave its channel unread, with messages waiting for it, before it
    /// is ended (its cells fail; nothing else waits for it).
    pub stall_deadline: Duration,
    /// The most memory a process may map for data (`RLIMIT_DATA`); `None`: cells per process
    /// times the warm heap limit, times two, plus 1 GiB for the engine itself.
    pub memory_ceiling_bytes: Option<u64>,
    /// Whether the child applies its seccomp filter (Linux).
    pub seccomp: bool,
    /// The heap limit each process keeps runtimes warm for.
    pub warm_heap_limit_bytes: usize,
    /// How many runtimes each process keeps warm.
    pub warm_runtimes: usize,
    /// The user and group ids the child runs as (`None`: this process's).
    pub user: Option<(u32, u32)>,
    /// Whether each process gets a control group of its own where one can be made (Linux, as
    /// root or in a delegated group), bounding its threads and the memory it touches.
    pub control_groups: bool,
    /// The most threads a process may have, where its control group bounds them.
    pub threads_per_process: u64,
    /// Test hooks in the child (probes, forged frames). Only builds with the `test-hooks` feature
    /// have them; never for real cells.
    #[doc(hidden)]
    pub test_hooks: bool,
}

impl ProcessEngineConfig {
    /// Engine processes started as `program args…`, with the defaults.
    pub fn new(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        let program: PathBuf = program.into();
        // The child starts in `/`: a relative path with a folder in it must not be resolved
        // there. A bare name is looked up on PATH, as by a shell.
        let program = if program.is_relative() && program.components().count() > 1 {
            std::path::absolute(&program).unwrap_or(program)
        } else {
            program
        };
        ProcessEngineConfig {
            program,
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cells_per_process: DEFAULT_CELLS_PER_PROCESS,
            cells_per_process_lifetime: 1000,
            spare_processes: 1,
            hard_stop_grace: DEFAULT_HARD_STOP_GRACE,
            stall_deadline: DEFAULT_STALL_DEADLINE,
            memory_ceiling_bytes: None,
            seccomp: true,
            warm_heap_limit_bytes: DEFAULT_HEAP_LIMIT_BYTES,
            warm_runtimes: 2,
            user: None,
            control_groups: true,
            threads_per_process: DEFAULT_THREADS_PER_PROCESS,
            test_hooks: false,
        }
    }

    /// With or without a control group per process (on by default; without one, threads are
    /// unbounded for a server run as root).
    pub fn with_control_groups(mut self, control_groups: bool) -> Self {
        self.control_groups = control_groups;
        self
    }

    /// With another bound on each process's threads (see [`DEFAULT_THREADS_PER_PROCESS`]).
    pub fn with_threads_per_process(mut self, threads: u64) -> Self {
        self.threads_per_process = threads;
        self
    }

    /// Run engine processes as user `uid` and group `gid`, with no supplementary groups (this
    /// process must be allowed to switch to them, typically as root).
    pub fn with_user(mut self, uid: u32, gid: u32) -> Self {
        self.user = Some((uid, gid));
        self
    }

    /// With one more environment variable for the child.
    pub fn with_env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// With another number of live cells per process (at least 1).
    pub fn with_cells_per_process(mut self, cells: usize) -> Self {
        self.cells_per_process = cells.max(1);
        self
    }

    /// With another number of cells a process hosts over its life (at least 1).
    pub fn with_cells_per_process_lifetime(mut self, cells: usize) -> Self {
        self.cells_per_process_lifetime = cells.max(1);
        self
    }

    /// With another number of spare processes.
    pub fn with_spare_processes(mut self, spares: usize) -> Self {
        self.spare_processes = spares;
        self
    }

    /// With another grace period before a hard stop.
    pub fn with_hard_stop_grace(mut self, grace: Duration) -> Self {
        self.hard_stop_grace = grace;
        self
    }

    /// With another deadline for a process that stops reading its channel.
    pub fn with_stall_deadline(mut self, deadline: Duration) -> Self {
        self.stall_deadline = deadline;
        self
    }

    /// With another memory ceiling per process.
    pub fn with_memory_ceiling_bytes(mut self, bytes: Option<u64>) -> Self {
        self.memory_ceiling_bytes = bytes;
        self
    }

    /// With the seccomp filter on or off.
    pub fn with_seccomp(mut self, seccomp: bool) -> Self {
        self.seccomp = seccomp;
        self
    }

    /// Keep `count` runtimes warm in each process for cells whose heap limit is `heap_limit_bytes`.
    pub fn with_warm_runtimes(mut self, count: usize, heap_limit_bytes: usize) -> Self {
        self.warm_runtimes = count;
        self.warm_heap_limit_bytes = heap_limit_bytes;
        self
    }

    /// With the child's test hooks on.
    #[doc(hidden)]
    #[cfg(feature = "test-hooks")]
    pub fn with_test_hooks(mut self) -> Self {
        self.test_hooks = true;
        self
    }

    pub(crate) fn memory_ceiling(&self) -> u64 {
        self.memory_ceiling_bytes.unwrap_or_else(|| {
            let heaps = (self.cells_per_process as u64)
                .saturating_mul(self.warm_heap_limit_bytes as u64)
                .saturating_mul(2);
            heaps.saturating_add(1 << 30)
        })
    }
}
