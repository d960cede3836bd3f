//! [`EngineStats`]: what an engine tells an operator about itself (its processes and the cells
//! waiting for one), read whenever metrics are collected.

use std::time::Duration;

/// Counts an engine keeps for metrics. An engine that has no processes leaves them at zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Engine processes alive now (hosting cells, or spares).
    pub processes_alive: usize,
    /// Engine processes started since the engine was made.
    pub processes_spawned: u64,
    /// Cells waiting now for a process to be started for them.
    pub cells_queued: usize,
    /// Cells that waited for a process to be started for them, since the engine was made.
    pub cells_that_waited: u64,
    /// How long those cells waited, in all.
    pub queue_wait: Duration,
}
