//! The protocol between the parent and an engine process: length-prefixed JSON frames over a Unix
//! socket pair (the child's standard input).
//!
//! A frame is a little-endian `u32` length, then that many bytes of one JSON message. JSON rather
//! than a binary codec because tool inputs and results are arbitrary JSON (`serde_json::Value`)
//! and stored values are JSON text already (`codemode_protocol::StoredValue`), which the compact
//! binary codecs of serde cannot carry; messages are
//! small and the encoding is a few microseconds of a round trip (see the benchmark suite).
//!
//! Two kinds of channel: the process's own (its standard input), for the settings, new lanes,
//! terminations, hard stops and probes; and one *lane* a runtime thread of the child (see
//! `codemode_engine::lane`), a socket pair the parent makes and hands over with a [`ToChild::Lane`]
//! message (the descriptor rides along as `SCM_RIGHTS`), for the cells that thread runs, one after
//! another: their starts, commands and controls ([`ToLane`]), and their events, their failed
//! starts and their ends ([`ToParent`]). The thread reads and writes its lane itself, and the
//! parent reads each lane on the async runtime of the cell's owner.
//!
//! Engine events, commands and controls travel as the engine crate's own types. Cells are named on
//! the wire by a number the parent assigns. The child runs each cell with that number as its
//! `call_id`, so that a fatal error on a runtime thread names its cell; the parent puts the real
//! `call_id` back on the notifications it forwards.

use std::io::{self, Read, Write};

use codemode_engine::{
    CellLimits, CellStart, HardStopReason, PendingMode, RuntimeCommand, RuntimeControl,
    RuntimeEvent,
};
use codemode_protocol::ToolDefinition;
use serde::{Deserialize, Serialize};

/// The largest frame the child accepts from the parent: a cell's source (4 MiB at most) and its
/// session's stored values travel in one frame.
pub(crate) const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// Room for a frame's envelope beyond the payload a limit counts (names, numbers, escapes of a
/// short error text).
const ENVELOPE_BYTES: usize = 64 * 1024;

/// The longest error text a child sends; a longer one is cut (the model reads the start).
pub(crate) const MAX_ERROR_TEXT_BYTES: usize = 32 * 1024;

/// The largest output item a child sends; a larger one is replaced by a notice (the cell-actor's
/// budgets would omit it anyway).
pub(crate) const MAX_CONTENT_ITEM_BYTES: usize =
    codemode_protocol::limits::MAX_BUFFERED_OUTPUT_BYTES;

/// The largest frame the parent accepts from a child: the largest message the limits allow (a
/// cell's stored-value writes, escaped as JSON at worst twice their size, or one output item).
pub(crate) const MAX_CHILD_FRAME_BYTES: usize = {
    let writes = 2 * codemode_protocol::limits::MAX_STORED_BYTES_PER_CELL;
    let item = 2 * MAX_CONTENT_ITEM_BYTES;
    (if writes > item { writes } else { item }) + ENVELOPE_BYTES
};

/// The version of this protocol. Parent and child say theirs first; a mismatch (a binary replaced
/// under a running parent by another version) is a clear error, not a garbled frame.
pub(crate) const WIRE_VERSION: u32 = 6;

/// The largest frame a child may send for `event`, given what the limits allow it to carry:
/// `None` when any frame within [`MAX_CHILD_FRAME_BYTES`] will do.
pub(crate) fn event_frame_limit(event: &RuntimeEvent) -> Option<usize> {
    use codemode_protocol::limits::{MAX_NOTIFY_BYTES, MAX_TOOL_INPUT_BYTES};
    match event {
        // A JSON string escapes each byte in at most 6 (a control character as \u00XX).
        RuntimeEvent::ToolCall { .. } => Some(6 * MAX_TOOL_INPUT_BYTES + ENVELOPE_BYTES),
        RuntimeEvent::Notify { .. } => Some(6 * MAX_NOTIFY_BYTES + ENVELOPE_BYTES),
        RuntimeEvent::Result { .. } | RuntimeEvent::ContentItem(_) => None,
        _ => Some(ENVELOPE_BYTES),
    }
}

/// The parent's number for a cell, unique within one engine.
pub(crate) type CellNumber = u64;

/// What the child is told once, before anything else.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildSettings {
    /// The version of the engine-process protocol the parent speaks.
    pub wire_version: u32,
    /// The heap limit the child's engine keeps runtimes warm for.
    pub warm_heap_limit_bytes: usize,
    /// How many runtimes the child keeps warm: one on each lane it is given as it starts, which
    /// it waits for before it says it is ready.
    pub warm_runtimes: usize,
    /// The most memory the process may map for data (`RLIMIT_DATA`), if any.
    pub memory_ceiling_bytes: Option<u64>,
    /// The most threads all processes of its user may have together (`RLIMIT_NPROC`), set when
    /// it runs as a user of its own (`--engine-user`), whom root's exemption does not cover.
    pub user_threads_ceiling: Option<u64>,
    /// Whether to apply the seccomp filter.
    pub seccomp: bool,
    /// How long a cell past its CPU-time limit may go on before the process is ended.
    pub hard_stop_grace_ms: u64,
    /// Whether the child answers sandbox probes (builds with the `test-hooks` feature only).
    pub test_hooks: bool,
}

/// A message from the parent.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToChild {
    Settings(ChildSettings),
    /// A new lane: its socket is the descriptor sent with this message.
    Lane {
        lane: u64,
    },
    /// Stop the cell's JavaScript wherever it is (its lane is told too, to wake it if it waits).
    Terminate {
        cell: CellNumber,
    },
    /// Try something the sandbox forbids, or misbehave, and report how it went (builds with the
    /// `test-hooks` feature only).
    #[cfg(feature = "test-hooks")]
    Probe {
        what: Probe,
    },
}

/// A message from the parent on a lane, to the thread that serves it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToLane {
    /// Run this cell next.
    Start { cell: CellNumber, start: WireStart },
    Command {
        cell: CellNumber,
        command: RuntimeCommand,
    },
    Control {
        cell: CellNumber,
        control: RuntimeControl,
    },
    /// The cell was asked to stop: wakes its thread if it waits.
    Terminate { cell: CellNumber },
    /// The cell's owner dropped every handle: no command or control will come, so a cell that
    /// waits for one ends, as in-process.
    Abandoned { cell: CellNumber },
}

/// What a test probe tries inside an engine process (builds with the `test-hooks` feature only).
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Probe {
    /// Open a file under `/tmp` for writing.
    OpenForWriting,
    /// Create a TCP socket.
    Socket,
    /// Start another program.
    Exec,
    /// Print a fatal error as V8 does and abort (the crash path; nothing answers).
    FatalError,
    /// Send a frame the parent did not ask for, as a compromised child would (nothing answers).
    Forge(Forgery),
    /// Stop reading the channel, as a compromised or wedged child would (nothing answers).
    StopReading,
    /// Say how many terminations of cells the process's channel has brought so far (allowed,
    /// with the count as the detail).
    TerminationsRead,
    /// Run the native attack probe of the engine host (see `child::serve_with_probe`) against
    /// `target`: the path of a file, or a process id, as the attack needs.
    Native {
        /// Which attack, by the engine host's name for it.
        attack: String,
        /// What it aims at.
        target: String,
    },
}

/// A frame a forging child sends.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Forgery {
    /// An output item for a cell number the parent never placed in this process.
    EventForAnotherCell(u64),
    /// A result for a cell number the parent never placed in this process.
    ResultForAnotherCell(u64),
    /// A tool call whose frame is larger than any call the limits allow, for a cell it hosts.
    OversizedToolCall(u64),
    /// Tool calls, each within the per-call limit, whose arguments together pass the limit of
    /// bytes in flight for one cell, for a cell it hosts.
    ToolCallsPastTheInFlightLimit(u64),
    /// One tool call more than a cell may make (each small and answered at once by nobody), for
    /// a cell it hosts.
    ToolCallsPastTheCallLimit(u64),
    /// A result whose stored values pass the per-cell limit, for a cell it hosts.
    StoredValuesPastTheLimit(u64),
    /// A tool call whose argument is JSON no tool could read (a lone surrogate), for a cell it
    /// hosts: the engine would have refused it, and so does the parent.
    UnreadableToolCall(u64),
    /// A frame header announcing more bytes than any message may have, then nothing.
    HugeHeader,
    /// A result for a cell it hosts, on the cell's lane, while the cell goes on and never says
    /// it ended.
    ResultWithoutEnd(u64),
}

/// A message from the child: a cell's `Event`s, `StartFailed` and `Ended` come on its lane, the
/// rest on the process's channel; anything else is a misbehaving child.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToParent {
    /// The engine is up (and sandboxed): cells may start.
    Ready {
        engine: String,
        /// The child's [`WIRE_VERSION`].
        wire_version: u32,
    },
    /// The engine could not start.
    Failed {
        error: String,
    },
    /// A cell's event; a `Notify` carries the cell's number as its `call_id`.
    Event {
        cell: CellNumber,
        event: RuntimeEvent,
    },
    /// The thread (its id in the system) that runs the cell, sent on the cell's lane before
    /// its events: a deadline judges the child by that thread's CPU time.
    Thread {
        cell: CellNumber,
        thread: u32,
    },
    /// The cell's runtime has ended; nothing more comes for it.
    Ended {
        cell: CellNumber,
    },
    StartFailed {
        cell: CellNumber,
        error: String,
    },
    /// A cell could not be stopped from inside the engine (or the engine hit a fatal error): the
    /// process ends right after this frame.
    HardStop {
        cell: Option<CellNumber>,
        reason: HardStopReason,
        message: String,
    },
    #[cfg(feature = "test-hooks")]
    ProbeResult {
        allowed: bool,
        detail: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireStart {
    pub source: String,
    pub enabled_tools: Vec<ToolDefinition>,
    #[serde(default)]
    pub unavailable_servers: Vec<codemode_protocol::Unavailable>,
    pub stored_values: std::sync::Arc<codemode_protocol::StoredValues>,
    pub heap_limit_bytes: usize,
    pub cpu_time_limit_ns: Option<u64>,
    pub max_tool_calls: u64,
    pub pause_until_resumed: bool,
}

impl WireStart {
    pub(crate) fn from_start(cell: CellStart) -> (String, WireStart) {
        let wire = WireStart {
            source: cell.source,
            enabled_tools: cell.enabled_tools,
            unavailable_servers: cell.unavailable_servers,
            stored_values: cell.stored_values,
            heap_limit_bytes: cell.limits.heap_limit_bytes,
            max_tool_calls: cell.limits.max_tool_calls,
            cpu_time_limit_ns: cell
                .limits
                .cpu_time_limit
                .map(|limit| u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX)),
            pause_until_resumed: cell.pending_mode == PendingMode::PauseUntilResumed,
        };
        (cell.call_id, wire)
    }

    pub(crate) fn into_start(self, call_id: String) -> CellStart {
        CellStart {
            tenant: None,
            call_id,
            source: self.source,
            enabled_tools: self.enabled_tools,
            unavailable_servers: self.unavailable_servers,
            stored_values: self.stored_values,
            limits: CellLimits::default()
                .with_heap_limit_bytes(self.heap_limit_bytes)
                .with_cpu_time_limit(self.cpu_time_limit_ns.map(std::time::Duration::from_nanos))
                .with_max_tool_calls(self.max_tool_calls),
            pending_mode: if self.pause_until_resumed {
                PendingMode::PauseUntilResumed
            } else {
                PendingMode::Continue
            },
        }
    }
}

/// Encodes `message` as one frame, ready for a single write.
pub(crate) fn encode<T: Serialize>(message: &T) -> io::Result<Vec<u8>> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).map_err(io::Error::other)?;
    let length = frame.len() - 4;
    if length > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a message of {length} bytes is larger than the engine-process limit of {MAX_FRAME_BYTES}"
            ),
        ));
    }
    frame[..4].copy_from_slice(&(length as u32).to_le_bytes());
    Ok(frame)
}

/// Writes `message` as one frame.
pub(crate) fn write<T: Serialize>(writer: &mut impl Write, message: &T) -> io::Result<()> {
    writer.write_all(&encode(message)?)
}

#[cfg(test)]
/// Reads one frame of at most [`MAX_FRAME_BYTES`]; `Ok(None)` at a clean end of the stream.
pub(crate) fn read<T: for<'de> Deserialize<'de>>(reader: &mut impl Read) -> io::Result<Option<T>> {
    read_bounded(reader, MAX_FRAME_BYTES).map(|frame| frame.map(|(message, _)| message))
}

/// Reads one frame of at most `limit` bytes, and its length; `Ok(None)` at a clean end of the
/// stream. The body's buffer grows as its bytes arrive: a header that announces more than the
/// peer sends costs nothing.
pub(crate) fn read_bounded<T: for<'de> Deserialize<'de>>(
    reader: &mut impl Read,
    limit: usize,
) -> io::Result<Option<(T, usize)>> {
    let mut header = [0u8; 4];
    match reader.read_exact(&mut header) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let length = u32::from_le_bytes(header) as usize;
    if length > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {length} bytes is larger than the limit of {limit}"),
        ));
    }
    let mut body = Vec::with_capacity(length.min(64 * 1024));
    reader.take(length as u64).read_to_end(&mut body)?;
    if body.len() < length {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the stream ended inside a frame ({} of {length} bytes)",
                body.len()
            ),
        ));
    }
    serde_json::from_slice(&body)
        .map(|message| Some((message, length)))
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

/// Bytes read from a stream, cut into frames as they complete: for readers that take whatever
/// the stream has (a lane read without blocking, or on an async runtime) rather than a frame at a
/// time.
#[derive(Debug, Default)]
pub(crate) struct FrameBuffer {
    bytes: Vec<u8>,
    /// Where the first frame not yet taken starts.
    start: usize,
}

impl FrameBuffer {
    /// How many more bytes complete the next frame (at least a header's worth), for sizing a read.
    pub(crate) fn wanted(&self) -> usize {
        let held = &self.bytes[self.start..];
        match held.get(..4) {
            Some(header) => {
                let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
                (4 + length as usize).saturating_sub(held.len()).max(1)
            }
            None => 4 - held.len(),
        }
    }

    /// The buffer to read into (append to its end), with room for at least `room` more bytes.
    pub(crate) fn space(&mut self, room: usize) -> &mut Vec<u8> {
        if self.start > 0 && self.start >= self.bytes.len() / 2 {
            self.bytes.drain(..self.start);
            self.start = 0;
        }
        self.bytes.reserve(room);
        &mut self.bytes
    }

    /// Appends bytes read elsewhere.
    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        self.space(bytes.len()).extend_from_slice(bytes);
    }

    /// The next complete frame and its length, if one is here; an error for a frame longer than
    /// `limit` (seen from its header alone) or one that is not a message of `T`.
    pub(crate) fn next<T: for<'de> Deserialize<'de>>(
        &mut self,
        limit: usize,
    ) -> io::Result<Option<(T, usize)>> {
        let held = &self.bytes[self.start..];
        let Some(header) = held.get(..4) else {
            return Ok(None);
        };
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if length > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame of {length} bytes is larger than the limit of {limit}"),
            ));
        }
        let Some(body) = held.get(4..4 + length) else {
            return Ok(None);
        };
        let message = serde_json::from_slice(body)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        self.start += 4 + length;
        if self.start == self.bytes.len() {
            self.bytes.clear();
            self.start = 0;
        }
        Ok(Some((message, length)))
    }

    /// Whether part of a frame is held (a stream that ends now ends inside a frame).
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_a_clean_end_is_none() {
        let mut buffer = Vec::new();
        write(&mut buffer, &ToParent::Ended { cell: 7 }).unwrap();
        write(
            &mut buffer,
            &ToParent::Ready {
                engine: "V8".into(),
                wire_version: WIRE_VERSION,
            },
        )
        .unwrap();
        let mut reader = buffer.as_slice();
        assert!(matches!(
            read(&mut reader).unwrap(),
            Some(ToParent::Ended { cell: 7 })
        ));
        assert!(
            matches!(read(&mut reader).unwrap(), Some(ToParent::Ready { engine, .. }) if engine == "V8")
        );
        assert!(read::<ToParent>(&mut reader).unwrap().is_none());
    }

    #[test]
    fn a_frame_buffer_gives_frames_as_they_complete_whatever_the_reads() {
        let mut stream = Vec::new();
        for cell in 0..3 {
            write(&mut stream, &ToParent::Ended { cell }).unwrap();
        }
        let mut buffer = FrameBuffer::default();
        let mut cells = Vec::new();
        // One byte at a time: every frame comes out whole, once, in order.
        for byte in &stream {
            assert!(buffer.wanted() >= 1);
            buffer.extend(std::slice::from_ref(byte));
            while let Some((ToParent::Ended { cell }, _)) =
                buffer.next::<ToParent>(MAX_FRAME_BYTES).unwrap()
            {
                cells.push(cell);
            }
        }
        assert_eq!(cells, [0, 1, 2]);
        assert!(buffer.is_empty());
        // A header past the limit is refused before its body arrives.
        let mut huge = FrameBuffer::default();
        huge.extend(&u32::MAX.to_le_bytes());
        assert_eq!(
            huge.next::<ToParent>(1024).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn an_oversized_or_garbled_frame_is_an_error_not_a_panic() {
        let mut huge = (u32::MAX).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert_eq!(
            read::<ToParent>(&mut huge.as_slice()).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut garbled = 3u32.to_le_bytes().to_vec();
        garbled.extend_from_slice(b"{{{");
        assert_eq!(
            read::<ToParent>(&mut garbled.as_slice())
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_frame_past_the_callers_limit_is_refused_and_a_short_body_is_an_error() {
        let mut frame = encode(&ToParent::Ended { cell: 1 }).unwrap();
        let length = frame.len() - 4;
        assert!(read_bounded::<ToParent>(&mut frame.as_slice(), length - 1).is_err());
        assert!(
            read_bounded::<ToParent>(&mut frame.as_slice(), length)
                .unwrap()
                .is_some()
        );
        // A header that promises 200 MiB and delivers 3 bytes allocates no 200 MiB.
        frame = (200u32 << 20).to_le_bytes().to_vec();
        frame.extend_from_slice(b"{}x");
        let error = read_bounded::<ToParent>(&mut frame.as_slice(), usize::MAX).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_start_keeps_its_limits_and_mode() {
        let start = CellStart {
            tenant: None,
            call_id: "call-1".into(),
            source: "text(1)".into(),
            enabled_tools: vec![],
            unavailable_servers: Vec::new(),
            stored_values: std::sync::Arc::new(codemode_protocol::stored_values_from([(
                "k",
                serde_json::Value::from(1),
            )])),
            limits: CellLimits::default()
                .with_heap_limit_bytes(64 << 20)
                .with_cpu_time_limit(Some(std::time::Duration::from_millis(1500))),
            pending_mode: PendingMode::PauseUntilResumed,
        };
        let (call_id, wire) = WireStart::from_start(start);
        let back = wire.into_start(call_id);
        assert_eq!(back.call_id, "call-1");
        assert_eq!(back.limits.heap_limit_bytes, 64 << 20);
        assert_eq!(
            back.limits.cpu_time_limit,
            Some(std::time::Duration::from_millis(1500))
        );
        assert_eq!(back.pending_mode, PendingMode::PauseUntilResumed);
        assert_eq!(back.stored_values["k"], serde_json::Value::from(1));
    }
}
