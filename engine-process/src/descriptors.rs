//! Closing the descriptors an engine process inherited: the first thing the engine-host mode
//! does, so that the process holds nothing but its channel (standard input) and its capture pipes
//! (standard output and error), whatever its parent's parent leaked into it.
//!
//! The one module of this crate with `unsafe` code, kept this small on purpose. Its ownership
//! rules:
//! - it closes descriptors 3 and up, which no Rust value of the calling process may own: call
//!   [`close_inherited_descriptors`] first thing in `main` of an engine process, before any
//!   thread starts and before anything is opened (a `File` or socket opened earlier would be
//!   closed under its owner);
//! - it reads `/proc/self/fd` only where the kernel lacks `close_range` (Linux before 5.9), through
//!   a `ReadDir` it drops before closing anything, so it never closes a descriptor it holds.

use std::os::fd::RawFd;

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
