//! `CellHandle`: how an owner observes and terminates a running cell. Cheap to clone; when the
//! last handle is dropped, nobody can observe the cell any more and it is terminated.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::event::{CellError, CellEvent, Observation};
use crate::state::{CellState, Responder};

/// A request from a handle to the actor.
#[derive(Debug)]
pub(crate) enum Command {
    Observe {
        observation: Observation,
        respond: Responder,
    },
}

/// Observes and terminates one cell.
#[derive(Debug, Clone)]
pub struct CellHandle {
    /// To the actor; the actor drops the receiver when it closes, which fails later observations
    /// with `Closed`. When every sender is gone, the actor terminates the cell.
    commands: mpsc::UnboundedSender<Command>,
    state: Arc<CellState>,
}

impl CellHandle {
    pub(crate) fn new(commands: mpsc::UnboundedSender<Command>, state: Arc<CellState>) -> Self {
        CellHandle { commands, state }
    }

    /// Observes the cell. The request is queued now, in call order, even if the returned future
    /// is never polled. Dropping the future gives up the observation and loses no output.
    pub fn observe(
        &self,
        observation: impl Into<Observation>,
    ) -> impl Future<Output = Result<CellEvent, CellError>> + Send + 'static {
        let (respond, receiver) = oneshot::channel();
        let queued = self.commands.send(Command::Observe {
            observation: observation.into(),
            respond,
        });
        async move {
            match queued {
                Ok(()) => receiver.await.unwrap_or(Err(CellError::Closed)),
                Err(_) => Err(CellError::Closed),
            }
        }
    }

    /// Whether the cell is still running (or committing, or being terminated): `false` once it
    /// has ended, whether or not its outcome has been observed.
    pub fn is_running(&self) -> bool {
        self.state.is_running()
    }

    /// Terminates the cell; the future resolves with `Terminated` (every item produced before the
    /// kill, and the kill ledger), or with the completion if one was already committed and
    /// buffered. The request takes effect now, even if the future is never polled.
    pub fn terminate(&self) -> impl Future<Output = Result<CellEvent, CellError>> + Send + 'static {
        let receiver = self.state.request_termination();
        async move { receiver.await.unwrap_or(Err(CellError::Closed)) }
    }
}
