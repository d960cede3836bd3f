//! A session's limits and defaults (S4, S6, S7.2, S7.4), all configurable.

use std::time::Duration;

use codemode_cell_actor::{FailureHandler, OutputMode};
use codemode_protocol::limits::{
    DEFAULT_CPU_TIME_LIMIT, DEFAULT_EXEC_YIELD_TIME_MS, DEFAULT_HEAP_LIMIT_BYTES,
    DEFAULT_MAX_ACTIVE_CELLS, DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_MIN_WAIT_YIELD_TIME,
    DEFAULT_WAIT_YIELD_TIME_MS, YIELD_GRACE, YIELD_GRACE_THRESHOLD,
};

/// How a session runs its cells.
#[derive(Clone)]
pub struct SessionConfig {
    /// Cells that may be running (or finished but not yet observed) at once; the next `execute`
    /// is refused.
    pub max_active_cells: usize,
    /// Caps every yield time, grace included. `None`: no cap.
    pub max_yield_time: Option<Duration>,
    /// The shortest yield time `wait` honours (S7.4).
    pub min_wait_yield_time: Duration,
    pub default_exec_yield_time: Duration,
    pub default_wait_yield_time: Duration,
    pub default_max_output_tokens: u64,
    /// The JavaScript heap of each cell.
    pub heap_limit_bytes: usize,
    /// The CPU time of each cell (S7.2). `None`: no limit.
    pub cpu_time_limit: Option<Duration>,
    pub output_mode: OutputMode,
    /// Log output content and tool arguments and results. Off by default: logs then carry only
    /// ids, names, sizes, durations and outcomes.
    pub log_content: bool,
    /// Told when a cell's engine fails in a way its owner should know (beyond the cell's error).
    pub on_runtime_failure: Option<FailureHandler>,
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("max_active_cells", &self.max_active_cells)
            .field("max_yield_time", &self.max_yield_time)
            .field("min_wait_yield_time", &self.min_wait_yield_time)
            .field("default_exec_yield_time", &self.default_exec_yield_time)
            .field("default_wait_yield_time", &self.default_wait_yield_time)
            .field("default_max_output_tokens", &self.default_max_output_tokens)
            .field("heap_limit_bytes", &self.heap_limit_bytes)
            .field("cpu_time_limit", &self.cpu_time_limit)
            .field("output_mode", &self.output_mode)
            .field("log_content", &self.log_content)
            .finish_non_exhaustive()
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_active_cells: DEFAULT_MAX_ACTIVE_CELLS,
            max_yield_time: None,
            min_wait_yield_time: DEFAULT_MIN_WAIT_YIELD_TIME,
            default_exec_yield_time: Duration::from_millis(DEFAULT_EXEC_YIELD_TIME_MS),
            default_wait_yield_time: Duration::from_millis(DEFAULT_WAIT_YIELD_TIME_MS),
            default_max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            heap_limit_bytes: DEFAULT_HEAP_LIMIT_BYTES,
            cpu_time_limit: Some(DEFAULT_CPU_TIME_LIMIT),
            output_mode: OutputMode::Client,
            log_content: false,
            on_runtime_failure: None,
        }
    }
}

impl SessionConfig {
    /// The time an observation waits, from what was asked (S6): the default when nothing was
    /// asked, a 1 s grace added to yields of 10 s or more, and the configured maximum over all.
    pub fn resolve_yield(&self, requested_ms: Option<u64>, default: Duration) -> Duration {
        let requested = requested_ms.map(Duration::from_millis).unwrap_or(default);
        let with_grace = if requested >= YIELD_GRACE_THRESHOLD {
            requested.saturating_add(YIELD_GRACE)
        } else {
            requested
        };
        match self.max_yield_time {
            Some(max) => with_grace.min(max),
            None => with_grace,
        }
    }

    /// The yield of an `execute`.
    pub fn exec_yield(&self, requested_ms: Option<u64>) -> Duration {
        self.resolve_yield(requested_ms, self.default_exec_yield_time)
    }

    /// The yield of a `wait`, never below the minimum wait yield (unless the maximum is lower).
    pub fn wait_yield(&self, requested_ms: Option<u64>) -> Duration {
        let floor = requested_ms.map(|ms| {
            ms.max(u64::try_from(self.min_wait_yield_time.as_millis()).unwrap_or(u64::MAX))
        });
        self.resolve_yield(floor, self.default_wait_yield_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_get_a_grace_second_from_ten_seconds_and_are_capped_by_the_maximum() {
        let config = SessionConfig::default();
        assert_eq!(config.exec_yield(None), Duration::from_secs(11));
        assert_eq!(config.exec_yield(Some(9_999)), Duration::from_millis(9_999));
        assert_eq!(config.exec_yield(Some(10_000)), Duration::from_secs(11));
        let capped = SessionConfig {
            max_yield_time: Some(Duration::from_secs(5)),
            ..SessionConfig::default()
        };
        assert_eq!(capped.exec_yield(Some(60_000)), Duration::from_secs(5));
        assert_eq!(capped.wait_yield(None), Duration::from_secs(5));
    }

    #[test]
    fn wait_never_yields_sooner_than_its_minimum() {
        let config = SessionConfig {
            min_wait_yield_time: Duration::from_millis(500),
            ..SessionConfig::default()
        };
        assert_eq!(config.wait_yield(Some(0)), Duration::from_millis(500));
        assert_eq!(config.wait_yield(Some(2_000)), Duration::from_secs(2));
        assert_eq!(config.wait_yield(None), Duration::from_secs(11));
    }
}
