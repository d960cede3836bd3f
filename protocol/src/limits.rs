//! Defaults and limits, as named constants, so that every layer agrees on them and an embedder can
//! read them. Each may be overridden by configuration where the owning layer allows it.

use std::time::Duration;

/// How long `exec` observes a new cell before yielding, when the request does not say (the model-facing tools).
pub const DEFAULT_EXEC_YIELD_TIME_MS: u64 = 10_000;

/// How long `wait` observes a running cell before yielding, when the request does not say (the model-facing tools).
pub const DEFAULT_WAIT_YIELD_TIME_MS: u64 = 10_000;

/// The output budget of one rendering for the model, in tokens, when the request does not say (output and rendering).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 10_000;

/// The budget of the tool part of the `exec` description, in tokens: hundreds of tools degrade to
/// leaner forms instead of thousands of tokens on every request.
pub const DEFAULT_TOOL_DESCRIPTION_BUDGET_TOKENS: u64 = 2_000;

/// The rough size of one token when budgeting output: tokens ≈ bytes / 4 (output and rendering).
pub const BYTES_PER_TOKEN: u64 = 4;

/// A yield time at or above this threshold gets [`YIELD_GRACE`] added to it (the model-facing tools).
pub const YIELD_GRACE_THRESHOLD: Duration = Duration::from_secs(10);

/// The grace period added to long yield times, so that a cell finishing right at the deadline is
/// reported as finished rather than as still running (the model-facing tools).
pub const YIELD_GRACE: Duration = Duration::from_secs(1);

/// How many cells one session may have running at once (sessions).
pub const DEFAULT_MAX_ACTIVE_CELLS: usize = 128;

/// The V8 heap each cell may use before it is ended with `heap limit exceeded` (heap limit).
pub const DEFAULT_HEAP_LIMIT_BYTES: usize = 256 * 1024 * 1024;

/// The CPU time a cell's thread may use before it is ended with `cpu time limit exceeded` (CPU budget).
/// Waiting (for tools, timers or an observer) uses none.
pub const DEFAULT_CPU_TIME_LIMIT: Duration = Duration::from_secs(60);

/// The shortest yield time `wait` honours, so that a model cannot busy-poll a cell (completion push).
pub const DEFAULT_MIN_WAIT_YIELD_TIME: Duration = Duration::from_millis(500);

/// The smallest heap limit an engine accepts; below this an isolate cannot even start its context.
pub const MIN_HEAP_LIMIT_BYTES: usize = 8 * 1024 * 1024;

/// In server output mode, how many engine events may wait for the cell actor before the engine
/// thread blocks (output and rendering).
pub const BOUNDED_EVENT_QUEUE_CAPACITY: usize = 256;

/// In client output mode, the total bytes of output (text, image and audio payloads) a cell may
/// buffer; items beyond it are dropped and counted where they stood (output and rendering).
pub const MAX_BUFFERED_OUTPUT_BYTES: usize = 64 * 1024 * 1024;

/// In server output mode, the total bytes of output of every kind a cell may buffer between two
/// observations; items beyond it are dropped and counted where they stood (output and rendering).
pub const BOUNDED_OUTPUT_MAX_BYTES: usize = 16 * 1024 * 1024;

/// In server output mode, the total bytes of image URLs a cell may buffer between two observations;
/// images beyond it are dropped and counted (output and rendering).
pub const BOUNDED_OUTPUT_MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;

/// The largest argument of one tool call, as JSON text: a larger one rejects the call's promise.
/// Host memory for arguments is outside the cell's heap, so it is bounded here.
pub const MAX_TOOL_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// The default of the most tool calls one cell may make: the next call is refused, so a runaway
/// loop cannot hammer a downstream server.
pub const DEFAULT_MAX_TOOL_CALLS_PER_CELL: u64 = 10_000;

/// The most argument bytes (JSON text) a cell's unanswered tool calls may hold in all: a call
/// past it is refused, so unawaited calls cannot pile up host memory.
pub const MAX_TOOL_INPUT_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;

/// The default of the most bytes (keys and JSON text) one session's stored values may hold; a
/// commit past it is refused and the cell's text says its values were not saved.
pub const DEFAULT_MAX_STORED_BYTES_PER_SESSION: usize = 64 * 1024 * 1024;

/// The most bytes (keys and JSON text) a cell's stored values may hold in all, each key counted
/// once at its latest value: a `store` past it is refused.
pub const MAX_STORED_BYTES_PER_CELL: usize = 64 * 1024 * 1024;

/// The longest text of one `notify(...)`, in bytes: notifications go to the client at once, so a
/// longer one is refused (long output belongs in `text(...)`).
pub const MAX_NOTIFY_BYTES: usize = 64 * 1024;

/// The largest source a cell accepts, in bytes: larger source is refused before anything runs.
pub const MAX_SOURCE_BYTES: usize = 4 * 1024 * 1024;
