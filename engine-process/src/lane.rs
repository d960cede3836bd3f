//! The parent's end of a lane (see `wire`): the socket a runtime thread of an engine process
//! serves, one cell after another. While a cell runs, its lane is read by a task on the async
//! runtime of the cell's owner (the task is in `process`), so the cell's events reach its actor
//! with no thread in between; what is written to the lane (the start, commands, controls, a
//! termination's wake-up) is written at once by whoever sends it, as far as the socket takes it
//! without waiting, and the rest by the task as the socket drains: no thread of the parent ever
//! waits for a child to read.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

/// A lane between cells: its number in its process, and the parent's end of its socket
/// (non-blocking).
#[derive(Debug)]
pub(crate) struct Lane {
    pub number: u64,
    pub socket: UnixStream,
}

/// The most bytes waiting to be written to one lane; past them the child is taken to have stopped
/// reading. A cell waits for its tool calls' answers, which are bounded, so only a child that does
/// not read comes near it.
const MAX_WAITING_BYTES: usize = 512 * 1024 * 1024;

/// Why a lane took no frame.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The cell's time on the lane is over.
    Closed,
    /// This many bytes wait already: the child does not read.
    Full { waiting: usize },
}

/// The writing side of a lane while one cell runs on it: shared by the cell's command sender,
/// its terminator and its lane task.
#[derive(Debug)]
pub(crate) struct LaneWriter {
    /// The lane's socket, valid while `out.open` (the task closes the writer before it lets the
    /// socket go).
    socket: RawFd,
    out: Mutex<Waiting>,
    /// Tells the lane task that bytes wait.
    pub waiting_bytes: tokio::sync::Notify,
    /// Tells the lane task that the deadline for the child to say its cell ended passed.
    pub end_overdue: tokio::sync::Notify,
}

#[derive(Debug)]
struct Waiting {
    frames: VecDeque<Vec<u8>>,
    bytes: usize,
    open: bool,
    /// The first frame waiting is the rest of one partly written: the lane is in the middle of
    /// a frame until it is written.
    partial: bool,
}

impl LaneWriter {
    pub(crate) fn new(lane: &Lane) -> LaneWriter {
        LaneWriter {
            socket: lane.socket.as_raw_fd(),
            out: Mutex::new(Waiting {
                frames: VecDeque::new(),
                bytes: 0,
                open: true,
                partial: false,
            }),
            waiting_bytes: tokio::sync::Notify::new(),
            end_overdue: tokio::sync::Notify::new(),
        }
    }

    /// Writes `frame` as far as the socket takes it without waiting (when nothing waits before
    /// it); the rest waits for the lane task. Never blocks.
    pub(crate) fn send(&self, mut frame: Vec<u8>) -> Result<(), Refused> {
        use nix::sys::socket::{MsgFlags, send};
        let mut out = self.out.lock();
        if !out.open {
            return Err(Refused::Closed);
        }
        if out.frames.is_empty() {
            match send(
                self.socket,
                &frame,
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(written) if written == frame.len() => return Ok(()),
                Ok(written) => {
                    frame.drain(..written);
                    out.partial = true;
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                // The lane broke: its task sees it end, and the cell with it.
                Err(_) => return Ok(()),
            }
        }
        if out.bytes.saturating_add(frame.len()) > MAX_WAITING_BYTES {
            return Err(Refused::Full { waiting: out.bytes });
        }
        out.bytes += frame.len();
        out.frames.push_back(frame);
        drop(out);
        self.waiting_bytes.notify_one();
        Ok(())
    }

    /// Whether bytes wait to be written.
    pub(crate) fn waiting(&self) -> bool {
        !self.out.lock().frames.is_empty()
    }

    /// Writes what waits as far as `socket` (the lane, on the task's runtime) takes it now.
    pub(crate) fn write_waiting(&self, socket: &tokio::net::UnixStream) -> std::io::Result<()> {
        let mut out = self.out.lock();
        let Waiting {
            frames,
            bytes,
            partial,
            ..
        } = &mut *out;
        while let Some(front) = frames.front_mut() {
            match socket.try_write(front) {
                Ok(written) if written == front.len() => {
                    *bytes -= written;
                    *partial = false;
                    frames.pop_front();
                }
                Ok(written) => {
                    *bytes -= written;
                    *partial = true;
                    front.drain(..written);
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Ends the cell's time on the lane: nothing more is written, and what waits is dropped.
    /// Whether the lane is between frames (else it is cut inside one, and serves no other cell).
    pub(crate) fn close(&self) -> bool {
        let mut out = self.out.lock();
        out.open = false;
        out.frames.clear();
        out.bytes = 0;
        !out.partial
    }
}

/// The runtime that reads the lanes of cells started from outside any async runtime (a plain
/// thread): one worker, made the first time it is needed.
pub(crate) fn fallback_runtime() -> std::io::Result<tokio::runtime::Handle> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    static MAKING: Mutex<()> = Mutex::new(());
    let _making = MAKING.lock();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime.handle().clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("codemode-engine-lanes")
        .enable_io()
        .build()?;
    Ok(RUNTIME.get_or_init(|| runtime).handle().clone())
}
