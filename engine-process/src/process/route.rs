//! Where a cell's commands and control go ([`CellRoute`]): held, in order, while the cell waits
//! for a process being started for it, then sent to the lane of the process it was placed in.

use parking_lot::Mutex;
use std::sync::Weak;
use std::sync::mpsc::SendError;

use super::engine_process::EngineProcess;
use crate::wire::{CellNumber, ToLane};

/// Where a cell's commands and control go: held while the cell waits for a process, then sent
/// to the process it was placed in.
#[derive(Debug)]
pub(super) struct CellRoute {
    pub(super) number: CellNumber,
    pub(super) state: Mutex<RouteState>,
}

#[derive(Debug)]
pub(super) enum RouteState {
    /// Waiting for a process: what the cell's actor sent meanwhile, in order.
    Queued(Vec<ToLane>),
    /// In this process.
    Placed(Weak<EngineProcess>),
    /// Ended before it was placed (terminated, or no process could be started for it).
    Gone,
}

impl CellRoute {
    /// Sends `message` (made into a frame by `frame`) to the cell's process, or holds it until
    /// the cell is placed; refused once the cell is gone.
    pub(super) fn forward<T>(
        &self,
        message: T,
        frame: impl FnOnce(Option<&EngineProcess>, T) -> ToLane,
    ) -> Result<(), SendError<T>> {
        let mut route = self.state.lock();
        match &mut *route {
            RouteState::Queued(early) => {
                // Only what the actor sends before the cell starts waits here: a handful.
                early.push(frame(None, message));
                Ok(())
            }
            RouteState::Placed(process) => match process.upgrade() {
                Some(process) if process.hosts(self.number) => {
                    drop(route);
                    process.send_lane(self.number, &frame(Some(&process), message));
                    Ok(())
                }
                _ => Err(SendError(message)),
            },
            RouteState::Gone => Err(SendError(message)),
        }
    }
}
