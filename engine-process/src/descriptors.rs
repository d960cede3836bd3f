//! Descriptors: closing the ones an engine process inherited (the first thing the engine-host mode
//! does, so that the process holds nothing but its channel, standard input, and its capture pipes,
//! standard output and error, whatever its parent's parent leaked into it), and passing lanes
//! (sockets) from the parent to the child over the process's channel as `SCM_RIGHTS`.
//!
//! The one module of this crate with `unsafe` code, kept this small on purpose. Its ownership
//! rules:
//! - a descriptor received as `SCM_RIGHTS` was made for this process by the kernel in that very
//!   call and is known to nothing else: [`receive`] wraps each in an `OwnedFd` at once, before
//!   anything else can run, so each has exactly one owner from the start (and closes with it);
//! - it closes descriptors 3 and up, which no Rust value of the calling process may own: call
//!   [`close_inherited_descriptors`] first thing in `main` of an engine process, before any
//!   thread starts and before anything is opened (a `File` or socket opened earlier would be
//!   closed under its owner);
//! - it reads `/proc/self/fd` only where the kernel lacks `close_range` (Linux before 5.9), through
//!   a `ReadDir` it drops before closing anything, so it never closes a descriptor it holds.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The most descriptors one read takes: the parent sends one a message.
const MAX_RECEIVED: usize = 8;

/// Reads what `socket` has into `buffer` (blocking until something comes), and the descriptors
/// that came with it onto `received`, in order; the number of bytes read (0 at the end).
/// Descriptors arrive close-on-exec.
pub fn receive(
    socket: &UnixStream,
    buffer: &mut [u8],
    received: &mut VecDeque<OwnedFd>,
) -> std::io::Result<usize> {
    let mut space = nix::cmsg_space!([RawFd; MAX_RECEIVED]);
    let mut slices = [std::io::IoSliceMut::new(buffer)];
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut slices,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let bytes = message.bytes;
    for control in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(descriptors) = control {
            for descriptor in descriptors {
                // SAFETY: the kernel installed this descriptor in this process during this very
                // recvmsg; nothing else knows it (the module's rule), so it gets its one owner here.
                received.push_back(unsafe { OwnedFd::from_raw_fd(descriptor) });
            }
        }
    }
    Ok(bytes)
}

/// Sends as much of `bytes` as `socket` takes, with `descriptor` riding on its first byte; the
/// number of bytes sent (the rest goes as plain bytes). `MSG_DONTWAIT` in `flags` makes it
/// return `WouldBlock` rather than wait.
pub fn send_with(
    socket: RawFd,
    bytes: &[u8],
    descriptor: &OwnedFd,
    flags: MsgFlags,
) -> std::io::Result<usize> {
    let descriptors = [descriptor.as_raw_fd()];
    let controls = [ControlMessage::ScmRights(&descriptors)];
    let slices = [std::io::IoSlice::new(bytes)];
    Ok(sendmsg::<()>(
        socket,
        &slices,
        &controls,
        flags | MsgFlags::MSG_NOSIGNAL,
        None,
    )?)
}

/// Closes every descriptor of this process from 3 up (see the module's rules for when it may be
/// called). Fails with what the system answered when `close_range` fails for another reason than
/// its absence, or `/proc/self/fd` cannot be listed.
pub fn close_inherited_descriptors() -> Result<(), std::io::Error> {
    // SAFETY: close_range closes descriptors only; by this module's rules no live Rust value
    // owns one from 3 up when it is called, so nothing is closed under its owner.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if closed == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::ENOSYS) {
        return Err(error);
    }
    // An older kernel: close each descriptor listed, once the listing is closed itself.
    let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in listed {
        // SAFETY: as above; the listing's own descriptor, closed already, fails with EBADF,
        // which is ignored.
        unsafe {
            libc::close(fd);
        }
    }
    Ok(())
}
