//! The child side: the loop an engine process runs. The binary that hosts engine processes (the
//! `codemode` binary in its hidden engine-host mode) builds an engine and calls [`serve`].
//!
//! The process's channel is its standard input, a Unix socket the parent made. The loop reads the
//! settings, builds the engine, takes the first lanes (each served by a thread of the engine that
//! makes a runtime ready and waits on its lane for a cell: see `codemode_engine::lane`), sandboxes
//! the process, says it is ready once those runtimes are, then takes more lanes and terminations
//! until the parent goes away. A cell's start, commands and controls are read from its lane by its
//! runtime thread itself, and its events written there by that thread: no other thread of the
//! process carries them.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use codemode_engine::lane::{CellInbox, CellLane, LaneCell, Received, Wait};
use codemode_engine::{
    Engine, EngineError, EventSender, HardStop, RuntimeCommand, RuntimeControl, RuntimeEvent,
    TerminateHandle,
};

mod probe;
#[cfg(feature = "test-hooks")]
use crate::wire::Probe;
use crate::wire::{
    self, CellNumber, ChildSettings, FrameBuffer, ToChild, ToLane, ToParent, WIRE_VERSION,
};
pub use probe::NativeProbe;
#[cfg(feature = "test-hooks")]
use probe::{Reach, probe};

/// The writing end of the process's channel, shared by [`hard_stop`] and the loop.
static CONTROL: OnceLock<SharedWriter> = OnceLock::new();

/// Messages for the writer thread, with the channel each goes to: large ones, and any that must
/// wait behind them.
static QUEUE: OnceLock<std::sync::mpsc::SyncSender<(SharedWriter, ToParent)>> = OnceLock::new();

/// Messages waiting for the writer thread, on every channel ([`hard_stop`] lets them go first).
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// Lanes whose thread has its runtime ready and waits for a cell.
static WAITING_LANES: AtomicUsize = AtomicUsize::new(0);

/// How many messages may wait for the writer thread before a runtime thread blocks.
const QUEUE_CAPACITY: usize = 64;

/// Output up to this many bytes is encoded and written by the runtime thread itself (the fast
/// path of a tool call); larger output is handed to the writer thread, so that encoding it is not
/// charged to the cell's CPU time (in-process it costs the cell nothing either).
const INLINE_PAYLOAD_BYTES: usize = 16 * 1024;

/// How long to wait for the first lanes' runtimes before saying ready anyway (cells then wait for
/// them).
const WARM_TIMEOUT: Duration = Duration::from_secs(10);

/// The writing end of one channel (the process's, or a lane), and how many messages wait for the
/// writer thread to go there: while any wait, every message joins them, so that each channel's
/// messages keep their order.
struct Writer {
    stream: UnixStream,
    queued: usize,
}

type SharedWriter = Arc<Mutex<Writer>>;

/// The settings the parent sent, for the binary's engine (see [`serve`]).
pub use crate::wire::ChildSettings as Settings;

/// Runs the engine-process loop on this process's standard input until the parent goes away.
/// `make_engine` builds the engine from the parent's settings; the process is reported ready once
/// its first lanes have their runtimes. Returns the process's exit code.
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
    serve_after(make_engine, native_probe, FirstStep::Here)
}

/// [`serve_with_probe`], with the sandbox's first step taken here or before this program was
/// executed.
pub(crate) fn serve_after(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, EngineError>,
    native_probe: Option<NativeProbe>,
    first_step: FirstStep,
) -> std::process::ExitCode {
    #[cfg(not(feature = "test-hooks"))]
    let _ = native_probe;
    #[cfg(feature = "test-hooks")]
    let _ = NATIVE_PROBE.set(native_probe);
    match run(make_engine, first_step) {
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
    #[error("sent a lane without its socket")]
    LaneWithoutSocket,
    #[error("sent {0:?} where the first lanes were due")]
    NotALane(String),
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

/// The reading end of the process's channel: frames, and the lanes' sockets that come with them.
struct ControlReader {
    socket: UnixStream,
    buffer: FrameBuffer,
    sockets: VecDeque<std::os::fd::OwnedFd>,
}

impl ControlReader {
    /// The next message, or `None` once the parent is gone.
    fn next<T: for<'de> serde::Deserialize<'de>>(&mut self) -> std::io::Result<Option<T>> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some((message, _)) = self.buffer.next(wire::MAX_FRAME_BYTES)? {
                return Ok(Some(message));
            }
            let read = crate::descriptors::receive(&self.socket, &mut chunk, &mut self.sockets)?;
            if read == 0 {
                return Ok(None);
            }
            self.buffer.extend(&chunk[..read]);
        }
    }

    /// The socket of the lane just read.
    fn lane_socket(&mut self) -> Result<UnixStream, ChildError> {
        self.sockets
            .pop_front()
            .map(UnixStream::from)
            .ok_or(ChildError::Channel(ChannelFault::LaneWithoutSocket))
    }
}

/// Who takes the sandbox's first step (see `sandbox`), which needs a process of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstStep {
    /// This process, first thing.
    Here,
    /// The launcher that executed this program (`node_host`): what `execve` keeps is kept, what
    /// it resets is taken again here.
    TakenBeforeExec,
}

fn run(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, EngineError>,
    first_step: FirstStep,
) -> Result<(), ChildError> {
    let early = match first_step {
        // Before any thread exists, so that every thread inherits it.
        FirstStep::Here => Some(crate::sandbox::enter_early(
            std::env::var_os("LD_LIBRARY_PATH").as_deref(),
        )?),
        FirstStep::TakenBeforeExec => {
            crate::sandbox::after_exec()?;
            None
        }
    };
    let channel = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .map_err(|error| ChildError::Channel(ChannelFault::NotOpen(error)))?;
    let writer = channel
        .try_clone()
        .map_err(|error| ChildError::Channel(ChannelFault::NotShared(error)))?;
    let _ = CONTROL.set(Arc::new(Mutex::new(Writer {
        stream: writer,
        queued: 0,
    })));
    let (queue, queued) = std::sync::mpsc::sync_channel::<(SharedWriter, ToParent)>(QUEUE_CAPACITY);
    let _ = QUEUE.set(queue);
    std::thread::Builder::new()
        .name("codemode-engine-writer".into())
        .spawn(move || {
            for (writer, message) in queued {
                let frame = wire::encode(&message);
                let mut writer = writer.lock();
                if let Ok(frame) = frame {
                    let _ = writer.stream.write_all(&frame);
                }
                writer.queued -= 1;
                QUEUED.fetch_sub(1, Ordering::SeqCst);
            }
        })
        .map_err(ChildError::WriterThread)?;
    let mut control = ControlReader {
        socket: channel,
        buffer: FrameBuffer::default(),
        sockets: VecDeque::new(),
    };
    let broke = |error| ChildError::Channel(ChannelFault::Broke(error));
    // The settings are read as plain JSON first: a parent of another version may send them in
    // another shape, and must be told so, not answered with a parse error.
    let settings = match control.next::<serde_json::Value>() {
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
    let cells: Cells = Arc::default();
    // The first lanes come right after the settings; their runtimes are made before the sandbox
    // closes and before the parent counts on this process.
    for _ in 0..settings.warm_runtimes {
        match control.next::<ToChild>().map_err(broke)? {
            Some(ToChild::Lane { lane }) => {
                let socket = control.lane_socket()?;
                serve_lane(engine.as_ref(), lane, socket, &cells)
                    .map_err(|error| error.reported())?;
            }
            Some(other) => {
                return Err(
                    ChildError::Channel(ChannelFault::NotALane(format!("{other:?}"))).reported(),
                );
            }
            None => return Ok(()),
        }
    }
    let deadline = Instant::now() + WARM_TIMEOUT;
    while WAITING_LANES.load(Ordering::SeqCst) < settings.warm_runtimes && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Inside Node the memory ceiling counts from what Node and the warm isolates reserved.
    let host_mapped = match first_step {
        FirstStep::Here => 0,
        FirstStep::TakenBeforeExec => crate::sandbox::mapped_data_bytes(),
    };
    crate::sandbox::enter(&settings, host_mapped)
        .map_err(|error| ChildError::from(error).reported())?;
    match early {
        Some(early) => {
            tracing::debug!(landlock = %early.landlock, network = %early.network, root = %early.root, user = %early.user, "engine process sandboxed");
        }
        None => tracing::debug!("engine process sandboxed (its first step before exec)"),
    }
    send(ToParent::Ready {
        engine: engine.describe(),
        wire_version: WIRE_VERSION,
    });
    loop {
        let message = match control.next::<ToChild>() {
            Ok(Some(message)) => message,
            // The parent is gone: so are the cells' owners.
            Ok(None) => return Ok(()),
            Err(error) => return Err(broke(error)),
        };
        match message {
            ToChild::Settings(_) => {}
            ToChild::Lane { lane } => {
                let socket = control.lane_socket()?;
                if let Err(error) = serve_lane(engine.as_ref(), lane, socket, &cells) {
                    // Its cell never starts: the parent sees the lane close, and this process
                    // end with the reason.
                    return Err(error.reported());
                }
            }
            ToChild::Terminate { cell } => {
                #[cfg(feature = "test-hooks")]
                TERMINATIONS_READ.fetch_add(1, Ordering::SeqCst);
                let mut cells = cells.lock();
                // A cell whose start its lane's thread has not read yet is stopped as it starts.
                // (A termination that comes after its cell ended leaves a few bytes here, until
                // the process is retired.)
                let hosted = cells.entry(cell).or_insert(Hosted {
                    terminate: None,
                    terminated: false,
                    lane: None,
                });
                match &hosted.terminate {
                    Some(terminate) => terminate.terminate(),
                    None => hosted.terminated = true,
                }
            }
            #[cfg(feature = "test-hooks")]
            ToChild::Probe { what } if settings.test_hooks => {
                if what == Probe::StopReading {
                    // A wedged child: alive, never reading again, on any channel.
                    WEDGED.store(true, Ordering::SeqCst);
                    loop {
                        std::thread::park();
                    }
                }
                let reach = Reach {
                    native: NATIVE_PROBE.get().copied().flatten(),
                    terminations_read: TERMINATIONS_READ.load(Ordering::SeqCst),
                    write_control: &|bytes| {
                        if let Some(writer) = CONTROL.get() {
                            let _ = writer.lock().stream.write_all(bytes);
                        }
                    },
                    write_newest_lane: &|bytes| write_newest_lane(&cells, bytes),
                };
                if let Some((allowed, detail)) = probe(what, &reach) {
                    send(ToParent::ProbeResult { allowed, detail });
                }
            }
            #[cfg(feature = "test-hooks")]
            ToChild::Probe { .. } => {}
        }
    }
}

/// Hands lane `number` (its `socket`) to the engine, whose thread serves it from now on.
fn serve_lane(
    engine: &dyn Engine,
    number: u64,
    socket: UnixStream,
    cells: &Cells,
) -> Result<(), ChildError> {
    let writer = socket
        .try_clone()
        .map_err(|error| ChildError::Channel(ChannelFault::NotShared(error)))?;
    let lane = SocketLane {
        reader: Arc::new(Mutex::new(LaneReader {
            socket,
            buffer: FrameBuffer::default(),
            scratch: vec![0; 16 * 1024],
            cell: None,
            commands: VecDeque::new(),
            controls: VecDeque::new(),
            start: None,
            terminated: false,
            abandoned: false,
            closed: false,
        })),
        writer: Arc::new(Mutex::new(Writer {
            stream: writer,
            queued: 0,
        })),
        cells: Arc::clone(cells),
        cell: None,
    };
    tracing::trace!(lane = number, "serving a lane");
    engine.serve_lane(Box::new(lane))?;
    Ok(())
}

/// The cells of this process, by number, while they run.
type Cells = Arc<Mutex<HashMap<CellNumber, Hosted>>>;

/// A cell of this process: how to stop it, and its lane (which test probes forge frames on).
struct Hosted {
    /// `None` until its thread says.
    terminate: Option<TerminateHandle>,
    /// Termination was asked before its thread said how: it is stopped as soon as it does.
    terminated: bool,
    /// `None` for a cell asked to stop before its start was read.
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    lane: Option<SharedWriter>,
}

/// How many terminations the process's channel has brought (the `TerminationsRead` probe).
/// The native probe of the engine host, if it gave one.
#[cfg(feature = "test-hooks")]
static NATIVE_PROBE: OnceLock<Option<NativeProbe>> = OnceLock::new();

#[cfg(feature = "test-hooks")]
static TERMINATIONS_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Set by the `StopReading` probe: every lane stops reading too.
#[cfg(feature = "test-hooks")]
static WEDGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One lane, as its thread sees it.
struct SocketLane {
    reader: Arc<Mutex<LaneReader>>,
    writer: SharedWriter,
    cells: Cells,
    /// The cell that arrived last.
    cell: Option<CellNumber>,
}

/// The reading end of a lane: what has been read, sorted for the cell it is for.
struct LaneReader {
    socket: UnixStream,
    buffer: FrameBuffer,
    /// Where small reads land first (made once: a cell reads its lane at every step).
    scratch: Vec<u8>,
    /// The cell being run, whose commands and controls are kept; others' are stale and dropped.
    cell: Option<CellNumber>,
    commands: VecDeque<RuntimeCommand>,
    controls: VecDeque<RuntimeControl>,
    /// The next cell, once its start has come.
    start: Option<(CellNumber, wire::WireStart)>,
    /// The current (or next) cell was asked to stop before its thread could be reached from
    /// the process's channel.
    terminated: bool,
    /// The current (or next) cell's owner dropped every handle: nothing more will come for it.
    abandoned: bool,
    /// The parent closed the lane, or it broke.
    closed: bool,
}

impl LaneReader {
    /// Reads once, waiting as `wait` says, and sorts what completed; whether anything came.
    fn fill(&mut self, wait: Wait) -> bool {
        #[cfg(feature = "test-hooks")]
        if WEDGED.load(Ordering::SeqCst) {
            loop {
                std::thread::park();
            }
        }
        use nix::sys::socket::{MsgFlags, recv};
        let flags = match wait {
            Wait::No => MsgFlags::MSG_DONTWAIT,
            Wait::Until(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                // Rounded up, so that a timer is never run before it is due.
                let millis = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                let mut polled = [nix::poll::PollFd::new(
                    self.socket.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let timeout =
                    nix::poll::PollTimeout::try_from(millis).unwrap_or(nix::poll::PollTimeout::MAX);
                match nix::poll::poll(&mut polled, timeout) {
                    Ok(0) => return false,
                    Ok(_) => MsgFlags::MSG_DONTWAIT,
                    Err(nix::errno::Errno::EINTR) => return false,
                    Err(_) => {
                        self.closed = true;
                        return false;
                    }
                }
            }
            Wait::Forever => MsgFlags::empty(),
        };
        let wanted = self.buffer.wanted();
        let read = if wanted > 16 * 1024 {
            // The rest of a large frame: read in place, about a socket's buffer at a time.
            let room = wanted.min(256 * 1024);
            let bytes = self.buffer.space(room);
            let held = bytes.len();
            bytes.resize(held + room, 0);
            let read = recv(self.socket.as_raw_fd(), &mut bytes[held..], flags);
            bytes.truncate(held + read.unwrap_or(0));
            read
        } else {
            let read = recv(self.socket.as_raw_fd(), &mut self.scratch, flags);
            if let Ok(read) = read {
                self.buffer.extend(&self.scratch[..read]);
            }
            read
        };
        match read {
            Ok(0) => {
                self.closed = true;
                false
            }
            Ok(_) => {
                self.sort();
                true
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => false,
            Err(_) => {
                self.closed = true;
                false
            }
        }
    }

    /// Takes the frames that completed: the next start, and the current cell's commands and
    /// controls. A frame that is not one closes the lane (the parent never sends such).
    fn sort(&mut self) {
        loop {
            let message = match self.buffer.next::<ToLane>(wire::MAX_FRAME_BYTES) {
                Ok(Some((message, _))) => message,
                Ok(None) => return,
                Err(error) => {
                    tracing::error!(%error, "engine process: a lane sent a frame that is not valid");
                    self.closed = true;
                    return;
                }
            };
            // What follows a start on the lane is for that cell, even before it is taken.
            let current = self.start.as_ref().map(|(cell, _)| *cell).or(self.cell);
            match message {
                ToLane::Start { cell, start } => {
                    self.start = Some((cell, start));
                    self.terminated = false;
                    self.abandoned = false;
                }
                ToLane::Command { cell, command } if current == Some(cell) => {
                    self.commands.push_back(command)
                }
                ToLane::Control { cell, control } if current == Some(cell) => {
                    self.controls.push_back(control)
                }
                ToLane::Terminate { cell } if current == Some(cell) => {
                    self.terminated = true;
                    self.commands.push_back(RuntimeCommand::Terminate);
                    self.controls.push_back(RuntimeControl::Terminate);
                }
                ToLane::Abandoned { cell } if current == Some(cell) => self.abandoned = true,
                // For a cell that has ended.
                ToLane::Command { .. }
                | ToLane::Control { .. }
                | ToLane::Terminate { .. }
                | ToLane::Abandoned { .. } => {}
            }
        }
    }

    /// Whether the parent closed the lane, seen without waiting and without taking anything.
    fn closed_now(&mut self) -> bool {
        use nix::sys::socket::{MsgFlags, recv};
        if !self.closed && self.buffer.is_empty() {
            let mut byte = [0u8; 1];
            let peeked = recv(
                self.socket.as_raw_fd(),
                &mut byte,
                MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
            );
            if matches!(peeked, Ok(0)) {
                self.closed = true;
            }
        }
        self.closed
    }
}

/// A running cell's inbox: its lane, read by its own thread.
struct LaneInbox(Arc<Mutex<LaneReader>>);

impl CellInbox for LaneInbox {
    fn next_command(&mut self, wait: Wait) -> Received<RuntimeCommand> {
        self.0
            .lock()
            .next(wait, |reader| reader.commands.pop_front())
    }

    fn next_control(&mut self) -> Received<RuntimeControl> {
        self.0
            .lock()
            .next(Wait::Forever, |reader| reader.controls.pop_front())
    }
}

impl LaneReader {
    /// The next message `take` finds among those read, reading more as `wait` allows.
    fn next<T>(&mut self, wait: Wait, take: impl Fn(&mut Self) -> Option<T>) -> Received<T> {
        loop {
            if let Some(message) = take(self) {
                return Received::Message(message);
            }
            if self.closed || self.abandoned {
                return Received::Closed;
            }
            if wait != Wait::No && self.spin() {
                continue;
            }
            if !self.fill(wait) && wait != Wait::Forever && !self.closed {
                return Received::Nothing;
            }
        }
    }

    /// Reads without sleeping for up to [`SPIN`]; whether anything came (or the lane closed).
    /// A cell that waits on its lane mostly waits for a tool's answer, which the parent, on the
    /// other core, sends within tens of microseconds: reading for that long before sleeping
    /// spares the wake-up of a sleeping thread, itself tens of microseconds on a virtual machine.
    fn spin(&mut self) -> bool {
        let began = Instant::now();
        while began.elapsed() < SPIN {
            if self.fill(Wait::No) || self.closed {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }
}

/// How long a runtime thread reads its lane without sleeping before it waits on it.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

impl CellLane for SocketLane {
    fn open(&mut self) -> bool {
        !self.reader.lock().closed_now()
    }

    fn next_cell(&mut self) -> Option<LaneCell> {
        let (cell, start) = {
            let mut reader = self.reader.lock();
            reader.cell = None;
            reader.commands.clear();
            reader.controls.clear();
            WAITING_LANES.fetch_add(1, Ordering::SeqCst);
            let next = loop {
                if let Some(next) = reader.start.take() {
                    break Some(next);
                }
                if reader.closed {
                    break None;
                }
                reader.fill(Wait::Forever);
            };
            WAITING_LANES.fetch_sub(1, Ordering::SeqCst);
            let (cell, start) = next?;
            reader.cell = Some(cell);
            (cell, start)
        };
        self.cell = Some(cell);
        // Which thread runs the cell (this one): the parent judges its deadlines by its CPU time.
        let thread = u32::try_from(nix::unistd::gettid().as_raw()).unwrap_or_default();
        send_on(&self.writer, ToParent::Thread { cell, thread });
        self.cells
            .lock()
            .entry(cell)
            .or_insert(Hosted {
                terminate: None,
                terminated: false,
                lane: None,
            })
            .lane = Some(Arc::clone(&self.writer));
        let end = CellEnd {
            cell,
            lane: Arc::clone(&self.writer),
            cells: Arc::clone(&self.cells),
        };
        let writer = Arc::clone(&self.writer);
        // Events go to the parent from the runtime thread itself; a full lane blocks the cell
        // (back-pressure).
        let events = EventSender::forward(move |event| {
            let _end = &end;
            send_on(
                &writer,
                ToParent::Event {
                    cell,
                    event: within_wire_limits(event),
                },
            );
            Ok(())
        });
        Some(LaneCell::new(
            start.into_start(cell.to_string()),
            events,
            Box::new(LaneInbox(Arc::clone(&self.reader))),
        ))
    }

    fn started(&mut self, terminate: TerminateHandle) {
        let Some(cell) = self.cell else { return };
        let stopped_on_lane = self.reader.lock().terminated;
        let mut cells = self.cells.lock();
        if let Some(hosted) = cells.get_mut(&cell) {
            if hosted.terminated || stopped_on_lane {
                terminate.terminate();
            }
            hosted.terminate = Some(terminate);
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
    if let (Ok(frame), Some(writer)) = (frame, CONTROL.get()) {
        // Another thread may hold the writer in the middle of a frame, and output may still wait
        // for the writer thread: wait a little for both (output emitted before the stop is
        // kept), but never for long (the parent then sees a crash without the reason).
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let writer = writer.try_lock();
            let waiting = Instant::now() < deadline;
            match writer {
                Some(mut writer) if QUEUED.load(Ordering::SeqCst) == 0 || !waiting => {
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

/// Held by a cell's event sender: when the runtime drops its last sender, the cell's events are
/// over, and the parent is told on the cell's lane.
struct CellEnd {
    cell: CellNumber,
    lane: SharedWriter,
    cells: Cells,
}

impl Drop for CellEnd {
    fn drop(&mut self) {
        let hosted = self.cells.lock().remove(&self.cell);
        // Dropped outside the lock: its terminate handle may belong to a thread that ends now.
        drop(hosted);
        send_on(&self.lane, ToParent::Ended { cell: self.cell });
    }
}

/// Sends `message` to the parent on the process's channel.
fn send(message: ToParent) {
    if let Some(control) = CONTROL.get() {
        send_on(control, message);
    }
}

/// Sends `message` on `channel`: written at once when it is small and nothing waits for the
/// writer thread there, else queued for it.
fn send_on(channel: &SharedWriter, message: ToParent) {
    let mut guard = channel.lock();
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
    QUEUED.fetch_add(1, Ordering::SeqCst);
    drop(guard);
    if let Some(queue) = QUEUE.get()
        && queue.send((Arc::clone(channel), message)).is_ok()
    {
        return;
    }
    channel.lock().queued -= 1;
    QUEUED.fetch_sub(1, Ordering::SeqCst);
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

/// Writes `bytes` straight to the lane of the newest cell, past the child's own checks (for a
/// probe's forgeries).
#[cfg(feature = "test-hooks")]
fn write_newest_lane(cells: &Cells, bytes: &[u8]) {
    let lane = {
        let cells = cells.lock();
        cells
            .iter()
            .filter_map(|(cell, hosted)| Some((*cell, Arc::clone(hosted.lane.as_ref()?))))
            .max_by_key(|(cell, _)| *cell)
            .map(|(_, lane)| lane)
    };
    if let Some(lane) = lane {
        let _ = lane.lock().stream.write_all(bytes);
    }
}
