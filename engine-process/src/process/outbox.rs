//! What waits to be written to an engine process's channel ([`Outbox`]), and the blocking write
//! of one frame with the socket of a new lane riding on it ([`write_out`]).

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::net::UnixStream;

/// The most bytes waiting to be written to one process; past it the process is taken to have
/// stopped reading.
pub(super) const MAX_OUTBOX_BYTES: usize = 512 * 1024 * 1024;

/// The most messages waiting to be written to one process.
pub(super) const MAX_OUTBOX_FRAMES: usize = 16 * 1024;

/// A frame for the child, with the socket of a new lane riding on it if it announces one.
#[derive(Debug)]
pub(super) struct OutFrame {
    pub(super) bytes: Vec<u8>,
    pub(super) socket: Option<std::os::fd::OwnedFd>,
}

/// The frames waiting for a process's writer thread.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    pub(super) frames: VecDeque<OutFrame>,
    pub(super) bytes: usize,
    /// Write what waits, then end the channel.
    pub(super) closing: bool,
    /// The process is gone or being ended: nothing more is written.
    pub(super) stopped: bool,
    /// The writer thread is writing a frame it took: nothing else may write until it is done.
    pub(super) writing: bool,
}

/// Writes `frame` to the process's channel, blocking; the socket riding on it goes with its
/// first byte.
pub(super) fn write_out(writer: &mut UnixStream, frame: OutFrame) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let sent = match &frame.socket {
        Some(lane) => crate::descriptors::send_with(
            writer.as_raw_fd(),
            &frame.bytes,
            lane,
            nix::sys::socket::MsgFlags::empty(),
        )?,
        None => 0,
    };
    writer.write_all(&frame.bytes[sent..])
}
