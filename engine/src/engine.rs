//! The [`Engine`] trait: what every JavaScript engine implements to run cells.

use crate::channel::EventSender;
use crate::error::EngineError;
use crate::handles::EngineHandles;
use crate::lane;
use crate::start::CellStart;
use crate::stats::EngineStats;

/// A JavaScript engine that can run cells. Implemented by `runtime-v8`, `runtime-quickjs` and
/// `engine-process`; a scripted engine can implement it in tests that need exact control of event
/// order.
pub trait Engine: Send + Sync + 'static {
    /// A short human-readable name and version, such as `V8 13.6.233.17-node.37`.
    fn describe(&self) -> String;

    /// Starts `cell` on a new OS thread (or in another process). The run sends
    /// [`RuntimeEvent::Started`](crate::RuntimeEvent::Started) first and, unless terminated, [`RuntimeEvent::Result`](crate::RuntimeEvent::Result) last,
    /// then drops `events`.
    ///
    /// Returns at once: callers start cells from async workers, so an engine never waits here
    /// for anything slow (an engine process being started, a lock held across I/O). What the
    /// cell needs is prepared after this returns; a failure found then arrives as events
    /// (`Started`, then a `Result` carrying the error), and commands sent meanwhile are kept
    /// in order until the cell runs. `Err` is for what is known at once (a limit the engine does
    /// not accept, no thread to be had).
    fn start(&self, cell: CellStart, events: EventSender) -> Result<EngineHandles, EngineError>;

    /// Serves `lane` on a thread of the engine's own: waits on it for cells, one after another,
    /// each run on that thread with the lane's inbox for its commands (see [`lane`]). Returns
    /// once the thread is started; the thread ends when the lane closes. An engine that cannot
    /// run cells that way answers [`EngineError::Unavailable`] (the default); an engine process
    /// needs it, and one whose engine cannot serve lanes fails to start, saying so.
    fn serve_lane(&self, lane: Box<dyn lane::CellLane>) -> Result<(), EngineError> {
        drop(lane);
        Err(EngineError::Unavailable(format!(
            "{} cannot serve lanes",
            self.describe()
        )))
    }

    /// What the engine counts for an operator's metrics (engine processes, cells waiting for
    /// one). The default, for an engine without processes, counts nothing.
    fn stats(&self) -> EngineStats {
        EngineStats::default()
    }
}
