//! The child side: the loop an engine process runs. The binary that hosts engine processes (the
//! `codemode` binary in its hidden engine-host mode) builds an engine and calls [`serve`].
//!
//! The channel is the process's standard input, a Unix socket the parent made. The loop reads
//! the settings, builds the engine, sandboxes the process, says it is ready, then starts cells and
//! forwards their commands; each cell's events are written to the channel by its runtime thread.
//! When the parent goes away (the channel closes), the process ends.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use codemode_engine::{Engine, EngineError, EngineHandles, EventSender, HardStop, RuntimeEvent};

#[cfg(feature = "test-hooks")]
use crate::wire::Probe;
use crate::wire::{self, CellNumber, ChildSettings, ToChild, ToParent, WIRE_VERSION};

/// A test-only attack run by native code of the engine host inside the sandbox (builds with the
/// `test-hooks` feature): `(attack, target)` to `Ok(what happened)` if it succeeded, `Err(why
/// not)` if it was refused.
pub type NativeProbe = fn(&str, &str) -> Result<String, String>;

/// The channel's writing end, shared by the runtime threads, the writer thread and [`hard_stop`].
static WRITER: OnceLock<Mutex<Writer>> = OnceLock::new();

/// Messages for the writer thread: large ones, and any that must wait behind them.
static QUEUE: OnceLock<std::sync::mpsc::SyncSender<ToParent>> = OnceLock::new();

/// How many messages may wait for the writer thread before a runtime thread blocks.
const QUEUE_CAPACITY: usize = 64;

/// Output up to this many bytes is encoded and written by the runtime thread itself (the fast
/// path of a tool call); larger output is handed to the writer thread, so that encoding it is not
/// charged to the cell's CPU time (in-process it costs the cell nothing either).
const INLINE_PAYLOAD_BYTES: usize = 16 * 1024;

/// The channel's writing end, and how many messages wait for the writer thread: while any wait,
/// every message joins them, so that each cell's messages keep their order.
struct Writer {
    stream: UnixStream,
    queued: usize,
}

/// The settings the parent sent, for the binary's engine (see [`serve`]).
pub use crate::wire::ChildSettings as Settings;

/// Runs the engine-process loop on this process's standard input until the parent goes away.
/// `make_engine` builds the engine from the parent's settings (and should warm it: the process is
/// reported ready once it returns). Returns the process's exit code.
pub fn serve(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, EngineError>,
) -> std::process::ExitCode {
    serve_with_probe(make_engine, None)
}

/// [`serve`], with a native attack probe that test builds run on request (see [`NativeProbe`]);
/// without the `test-hooks` feature the probe is never called.
pub fn serve_with_probe(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, EngineError>,
    native_probe: Option<NativeProbe>,
) -> std::process::ExitCode {
    #[cfg(not(feature = "test-hooks"))]
    let _ = native_probe;
    #[cfg(feature = "test-hooks")]
    let _ = NATIVE_PROBE.set(native_probe);
    match run(make_engine) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("engine process: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Why an engine process ended before its parent let it go.
#[derive(Debug, thiserror::Error)]
enum ChildError {
    #[error(transparent)]
    Confinement(#[from] crate::sandbox::ConfinementError),
    #[error("the channel to the parent {0}")]
    Channel(ChannelFault),
    #[error(
        "this engine host speaks version {WIRE_VERSION} of the engine-process protocol and the \
         parent {}; run engine processes from the same build",
        parent.map_or("another".to_owned(), |version| version.to_string())
    )]
    WireVersion { parent: Option<u64> },
    #[error("cannot read the settings: {0}")]
    Settings(String),
    #[error("cannot start the writer thread: {0}")]
    WriterThread(std::io::Error),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// What went wrong with the channel to the parent.
#[derive(Debug, thiserror::Error)]
enum ChannelFault {
    #[error("is not open: {0}")]
    NotOpen(std::io::Error),
    #[error("cannot be shared: {0}")]
    NotShared(std::io::Error),
    #[error("broke: {0}")]
    Broke(std::io::Error),
}

impl ChildError {
    /// Tells the parent this process cannot serve it, then passes the error on.
    fn reported(self) -> Self {
        send(ToParent::Failed {
            error: self.to_string(),
        });
        self
    }
}

fn run(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, EngineError>,
) -> Result<(), ChildError> {
    // Before any thread exists, so that every thread inherits it.
    let early = crate::sandbox::enter_early(std::env::var_os("LD_LIBRARY_PATH").as_deref())?;
    let channel = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .map_err(|error| ChildError::Channel(ChannelFault::NotOpen(error)))?;
    let writer = channel
        .try_clone()
        .map_err(|error| ChildError::Channel(ChannelFault::NotShared(error)))?;
    let _ = WRITER.set(Mutex::new(Writer {
        stream: writer,
        queued: 0,
    }));
    let (queue, queued) = std::sync::mpsc::sync_channel::<ToParent>(QUEUE_CAPACITY);
    let _ = QUEUE.set(queue);
    std::thread::Builder::new()
        .name("codemode-engine-writer".into())
        .spawn(move || {
            for message in queued {
                let frame = wire::encode(&message);
                let Some(writer) = WRITER.get() else { return };
                let mut writer = lock(writer);
                if let Ok(frame) = frame {
                    let _ = writer.stream.write_all(&frame);
                }
                writer.queued -= 1;
            }
        })
        .map_err(ChildError::WriterThread)?;
    // Buffered: a frame's header and body come in one read.
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, channel);
    // The settings are read as plain JSON first: a parent of another version may send them in
    // another shape, and must be told so, not answered with a parse error.
    let settings = match wire::read::<serde_json::Value>(&mut reader) {
        Ok(Some(first)) => {
            let version = first
                .pointer("/Settings/wire_version")
                .and_then(serde_json::Value::as_u64);
            if version != Some(u64::from(WIRE_VERSION)) {
                return Err(ChildError::WireVersion { parent: version }.reported());
            }
            match serde_json::from_value::<ToChild>(first) {
                Ok(ToChild::Settings(settings)) => settings,
                Ok(other) => {
                    return Err(ChildError::Settings(format!(
                        "expected them first, got {other:?}"
                    )));
                }
                Err(error) => return Err(ChildError::Settings(error.to_string())),
            }
        }
        Ok(None) => return Ok(()),
        Err(error) => return Err(ChildError::Settings(error.to_string())),
    };
    let engine = make_engine(&settings).map_err(|error| ChildError::from(error).reported())?;
    crate::sandbox::enter(&settings).map_err(|error| ChildError::from(error).reported())?;
    tracing::debug!(landlock = %early.landlock, network = %early.network, root = %early.root, user = %early.user, "engine process sandboxed");
    send(ToParent::Ready {
        engine: engine.describe(),
        wire_version: WIRE_VERSION,
    });
    // A cell's slot is reserved before it starts and holds its handles once `start` returns;
    // the slot goes when the cell's events end (which may be before `start` returns).
    let cells: Cells = Arc::default();
    loop {
        let message = match wire::read::<ToChild>(&mut reader) {
            Ok(Some(message)) => message,
            // The parent is gone: so are the cells' owners.
            Ok(None) => return Ok(()),
            Err(error) => return Err(ChildError::Channel(ChannelFault::Broke(error))),
        };
        match message {
            ToChild::Settings(_) => {}
            ToChild::Start { cell, start } => {
                lock(&cells).insert(cell, None);
                let end = CellEnd {
                    cell,
                    cells: Arc::clone(&cells),
                };
                // Small events go to the parent from the runtime thread itself, with no hop
                // through another thread; a full channel blocks the cell (back-pressure).
                let events = EventSender::forward(move |event| {
                    let _end = &end;
                    send(ToParent::Event {
                        cell,
                        event: within_wire_limits(event),
                    });
                    Ok(())
                });
                // Held until the start's outcome is sent, so that a failed start is reported
                // before the end of its events.
                let held = events.clone();
                match engine.start(start.into_start(cell.to_string()), events) {
                    Ok(handles) => {
                        if let Some(slot) = lock(&cells).get_mut(&cell) {
                            *slot = Some(handles);
                        }
                    }
                    Err(error) => send(ToParent::StartFailed {
                        cell,
                        error: error.to_string(),
                    }),
                }
                drop(held);
            }
            ToChild::Command { cell, command } => {
                if let Some(Some(handles)) = lock(&cells).get(&cell) {
                    let _ = handles.commands.send(command);
                }
            }
            ToChild::Control { cell, control } => {
                if let Some(Some(handles)) = lock(&cells).get(&cell) {
                    let _ = handles.control.send(control);
                }
            }
            ToChild::Terminate { cell } => {
                if let Some(Some(handles)) = lock(&cells).get(&cell) {
                    handles.terminate.terminate();
                }
            }
            #[cfg(feature = "test-hooks")]
            ToChild::Probe { what } if settings.test_hooks => {
                if what == Probe::StopReading {
                    // A wedged child: alive, never reading again.
                    loop {
                        std::thread::park();
                    }
                }
                if let Some((allowed, detail)) = probe(what) {
                    send(ToParent::ProbeResult { allowed, detail });
                }
            }
            #[cfg(feature = "test-hooks")]
            ToChild::Probe { .. } => {}
        }
    }
}

/// Ends this engine process because a cell cannot be stopped from inside the engine, or the
/// engine failed: tells the parent which cell and why (the stop's `call_id` is the number the
/// parent gave the cell), then aborts. Safe to call from any thread, including inside the
/// engine's own fatal error handler. An engine process sets it as its engine's hard-stop hook
/// (through [`on_hard_stop`]).
pub fn hard_stop(stop: &HardStop) -> ! {
    let frame = wire::encode(&ToParent::HardStop {
        cell: stop.call_id.as_deref().and_then(|id| id.parse().ok()),
        reason: stop.reason,
        message: stop.message.chars().take(2000).collect(),
    });
    if let (Ok(frame), Some(writer)) = (frame, WRITER.get()) {
        // Another thread may hold the writer in the middle of a frame, and output may still wait
        // for the writer thread: wait a little for both (output emitted before the stop is
        // kept), but never for long (the parent then sees a crash without the reason).
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let writer = match writer.try_lock() {
                Ok(writer) => Some(writer),
                Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            let waiting = Instant::now() < deadline;
            match writer {
                Some(mut writer) if writer.queued == 0 || !waiting => {
                    let _ = writer.stream.write_all(&frame);
                    break;
                }
                _ if waiting => std::thread::sleep(Duration::from_millis(1)),
                _ => break,
            }
        }
    }
    std::process::abort()
}

/// [`hard_stop`] as a [`codemode_engine::HardStopHook`], the hook every engine of an engine
/// process gets.
pub fn on_hard_stop(stop: &HardStop) {
    hard_stop(stop)
}

/// The cells of this process, by number: `None` while a cell is starting.
type Cells = Arc<Mutex<HashMap<CellNumber, Option<EngineHandles>>>>;

/// Held by a cell's event sender: when the runtime drops its last sender, the cell's events are
/// over, and the parent is told.
struct CellEnd {
    cell: CellNumber,
    cells: Cells,
}

impl Drop for CellEnd {
    fn drop(&mut self) {
        let handles = lock(&self.cells).remove(&self.cell);
        // Dropped outside the lock: the handles' senders may belong to a thread that ends now.
        drop(handles);
        send(ToParent::Ended { cell: self.cell });
    }
}

/// Sends `message` to the parent: written at once when it is small and nothing waits for the
/// writer thread, else queued for it.
fn send(message: ToParent) {
    let Some(writer) = WRITER.get() else {
        return;
    };
    let mut guard = lock(writer);
    if guard.queued == 0 && message.is_small() {
        match wire::encode(&message) {
            // A parent that is gone ends the process through the reading side.
            Ok(frame) => {
                let _ = guard.stream.write_all(&frame);
            }
            Err(error) => {
                tracing::error!("engine process: a message could not be encoded: {error}")
            }
        }
        return;
    }
    guard.queued += 1;
    drop(guard);
    if let Some(queue) = QUEUE.get()
        && queue.send(message).is_ok()
    {
        return;
    }
    lock(writer).queued -= 1;
}

impl ToParent {
    /// Whether encoding this costs little enough to do on a runtime thread.
    fn is_small(&self) -> bool {
        match self {
            ToParent::Event { event, .. } => match event {
                RuntimeEvent::ContentItem(item) => item.payload_len() <= INLINE_PAYLOAD_BYTES,
                RuntimeEvent::ToolCall { input, .. } => input
                    .as_ref()
                    .is_none_or(|input| input.len() <= INLINE_PAYLOAD_BYTES),
                RuntimeEvent::Result {
                    stored_value_writes,
                    error_text,
                } => {
                    stored_value_writes.is_empty()
                        && error_text
                            .as_ref()
                            .is_none_or(|text| text.len() <= INLINE_PAYLOAD_BYTES)
                }
                _ => true,
            },
            _ => true,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An event as the wire carries it: an error text past [`wire::MAX_ERROR_TEXT_BYTES`] is cut,
/// and an output item past [`wire::MAX_CONTENT_ITEM_BYTES`] is replaced by a notice (the
/// parent's output budgets would omit it; the parent ends a child that sends more).
fn within_wire_limits(event: RuntimeEvent) -> RuntimeEvent {
    match event {
        RuntimeEvent::ContentItem(item) if item.payload_len() > wire::MAX_CONTENT_ITEM_BYTES => {
            RuntimeEvent::ContentItem(codemode_protocol::OutputItem::text(format!(
                "[an output item of {} bytes was omitted: one item may hold at most {} MiB]",
                item.payload_len(),
                wire::MAX_CONTENT_ITEM_BYTES >> 20
            )))
        }
        RuntimeEvent::Result {
            stored_value_writes,
            error_text: Some(text),
        } if text.len() > wire::MAX_ERROR_TEXT_BYTES => {
            let mut end = wire::MAX_ERROR_TEXT_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            RuntimeEvent::Result {
                stored_value_writes,
                error_text: Some(format!(
                    "{}… [the error text was cut at {} KiB]",
                    &text[..end],
                    wire::MAX_ERROR_TEXT_BYTES >> 10
                )),
            }
        }
        other => other,
    }
}

/// The native probe of the engine host, if it gave one.
#[cfg(feature = "test-hooks")]
static NATIVE_PROBE: OnceLock<Option<NativeProbe>> = OnceLock::new();

/// Tries what `what` names, for tests of the walls: whether it was allowed and what happened,
/// or `None` when nothing answers (the process crashes, or the parent ends it).
#[cfg(feature = "test-hooks")]
fn probe(what: Probe) -> Option<(bool, String)> {
    use crate::wire::Forgery;
    let outcome = match what {
        Probe::Native { attack, target } => {
            let Some(Some(native)) = NATIVE_PROBE.get() else {
                return Some((false, "this engine host has no native probe".to_owned()));
            };
            return Some(match native(&attack, &target) {
                Ok(detail) => (true, detail),
                Err(detail) => (false, detail),
            });
        }
        Probe::Forge(forgery) => {
            let forged = match forgery {
                Forgery::EventForAnotherCell(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::ContentItem(codemode_protocol::OutputItem::text(
                        "forged output",
                    )),
                },
                Forgery::ResultForAnotherCell(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::Result {
                        stored_value_writes: HashMap::from([(
                            "forged".to_owned(),
                            codemode_protocol::StoredValue::from(serde_json::Value::from(true)),
                        )]),
                        error_text: None,
                    },
                },
                Forgery::OversizedToolCall(cell) => forged_tool_call(
                    cell,
                    0,
                    Some(
                        serde_json::Value::String(
                            "x".repeat(7 * codemode_protocol::limits::MAX_TOOL_INPUT_BYTES),
                        )
                        .into(),
                    ),
                ),
                Forgery::UnreadableToolCall(cell) => forged_tool_call(
                    cell,
                    0,
                    // Deserialising checks only the syntax: the forged text gets through here.
                    serde_json::from_str(r#"{"text": "\ud800"}"#).ok(),
                ),
                Forgery::ToolCallsPastTheInFlightLimit(cell) => {
                    use codemode_protocol::limits::{
                        MAX_TOOL_INPUT_BYTES, MAX_TOOL_INPUT_BYTES_IN_FLIGHT,
                    };
                    let calls = MAX_TOOL_INPUT_BYTES_IN_FLIGHT / MAX_TOOL_INPUT_BYTES + 1;
                    let input = codemode_protocol::JsonText::from(serde_json::Value::String(
                        "x".repeat(MAX_TOOL_INPUT_BYTES - 2),
                    ));
                    for call in 0..calls {
                        send_forged(&forged_tool_call(cell, call, Some(input.clone())));
                    }
                    return None;
                }
                Forgery::ToolCallsPastTheCallLimit(cell) => {
                    let calls = codemode_protocol::limits::DEFAULT_MAX_TOOL_CALLS_PER_CELL + 1;
                    for call in 0..calls as usize {
                        send_forged(&forged_tool_call(cell, call, None));
                    }
                    return None;
                }
                Forgery::StoredValuesPastTheLimit(cell) => ToParent::Event {
                    cell,
                    event: RuntimeEvent::Result {
                        stored_value_writes: (0..5)
                            .map(|key| {
                                let value = serde_json::Value::String("x".repeat(16 << 20));
                                (key.to_string(), codemode_protocol::StoredValue::from(value))
                            })
                            .collect(),
                        error_text: None,
                    },
                },
                Forgery::HugeHeader => {
                    if let Some(writer) = WRITER.get() {
                        let _ = lock(writer).stream.write_all(&u32::MAX.to_le_bytes());
                    }
                    return None;
                }
            };
            send_forged(&forged);
            return None;
        }
        Probe::StopReading => return None,
        Probe::OpenForWriting => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(format!("/tmp/codemode-probe-{}", std::process::id()))
            .map(|_| ()),
        Probe::Socket => std::net::UdpSocket::bind("127.0.0.1:0").map(|_| ()),
        Probe::Exec => std::process::Command::new("/bin/true").status().map(|_| ()),
        Probe::FatalError => {
            eprintln!(
                "\n#\n# Fatal error in probe.cc, line 1\n# Check failed: a test-only fatal error.\n#"
            );
            std::process::abort()
        }
    };
    Some(match outcome {
        Ok(()) => (true, "allowed".to_owned()),
        Err(error) => (false, error.to_string()),
    })
}

/// A forged call of `echo` numbered `call`, for cell `cell` (its id starts with `tool-forged`).
#[cfg(feature = "test-hooks")]
fn forged_tool_call(
    cell: u64,
    call: usize,
    input: Option<codemode_protocol::JsonText>,
) -> ToParent {
    ToParent::Event {
        cell,
        event: RuntimeEvent::ToolCall {
            id: format!("tool-forged-{call}"),
            name: codemode_protocol::ToolName::plain("echo"),
            kind: codemode_protocol::ToolKind::Function,
            input,
        },
    }
}

/// Writes a forged frame straight to the channel, past the child's own checks.
#[cfg(feature = "test-hooks")]
fn send_forged(forged: &ToParent) {
    if let (Ok(frame), Some(writer)) = (wire::encode(forged), WRITER.get()) {
        let _ = lock(writer).stream.write_all(&frame);
    }
}
