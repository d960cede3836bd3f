//! The exit statuses of `codemode`: what a shell or a parent process reads of how a command
//! ended.

/// The cell completed (or the server stopped cleanly).
pub const COMPLETED: u8 = 0;
/// The cell failed, or the command could not do its work.
pub const FAILED: u8 = 1;
/// The command line or a file it names was wrong.
pub const USAGE: u8 = 2;
/// The cell was terminated.
pub const TERMINATED: u8 = 3;
