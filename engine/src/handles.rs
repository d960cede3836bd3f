//! What an engine hands back for a started cell ([`EngineHandles`]), and the handle that stops a
//! cell from any thread ([`TerminateHandle`]).

use std::fmt;
use std::sync::Arc;

use crate::channel::{CommandSender, RuntimeCommand, RuntimeControl};

/// What an engine hands back for a started cell. Dropping every sender lets the thread end once it
/// next looks at its channels.
#[derive(Debug)]
pub struct EngineHandles {
    /// Commands for the running cell: tool results, timer firings, frontier observation.
    pub commands: CommandSender<RuntimeCommand>,
    /// Control for a cell paused at its pending frontier.
    pub control: CommandSender<RuntimeControl>,
    /// Stops the cell from any thread.
    pub terminate: TerminateHandle,
}

/// Stops one cell's JavaScript at any point: in an infinite loop, a microtask loop, a timer callback,
/// or while it waits for tool results or is paused.
///
/// Cloneable and usable from any thread. It targets exactly the run it was made for, and stays safe
/// (a no-op) after that run has ended and its engine instance is gone.
#[derive(Clone)]
pub struct TerminateHandle(Arc<dyn Terminate>);

impl TerminateHandle {
    /// A handle that stops the run through `target`.
    pub fn new(target: Arc<dyn Terminate>) -> Self {
        TerminateHandle(target)
    }

    /// Asks the cell to stop. Returns at once; the runtime thread then ends without a
    /// [`RuntimeEvent::Result`](crate::RuntimeEvent::Result) and drops its event sender.
    pub fn terminate(&self) {
        self.0.terminate();
    }
}

impl fmt::Debug for TerminateHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminateHandle").finish_non_exhaustive()
    }
}

/// What an engine implements behind a [`TerminateHandle`].
pub trait Terminate: Send + Sync + 'static {
    /// Stops the run; idempotent; must not block on the runtime thread.
    fn terminate(&self);
}
