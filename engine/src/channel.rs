//! The three channels between a runtime thread and its cell actor (the runtime thread and the actor), and the event sender that
//! implements both output modes.
//!
//! - Events flow from the runtime thread to the actor through an [`EventSender`]. In client mode the
//!   queue is unbounded; in server mode it is bounded, and a full queue blocks the runtime thread
//!   (back-pressure) until the actor drains it. The runtime thread is the only sender; the channel
//!   closing tells the actor the thread has ended.
//! - Commands ([`RuntimeCommand`]) and control ([`RuntimeControl`]) flow from the actor to the
//!   runtime thread over `std::sync::mpsc`, because the receiver is a plain thread that blocks.

use codemode_protocol::StoredValues;

use codemode_protocol::{JsonText, OutputItem, ToolKind, ToolName};
use tokio::sync::mpsc;

/// What a runtime thread reports to its cell actor. Serialisable, so that an engine in another
/// process can send it over its channel.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum RuntimeEvent {
    /// The thread is up and about to evaluate the source; the yield clock starts here.
    Started,
    /// The cell emitted an output item.
    ContentItem(OutputItem),
    /// The cell called a tool; answer with [`RuntimeCommand::ToolResponse`] or
    /// [`RuntimeCommand::ToolError`] carrying the same id.
    ToolCall {
        /// `tool-1`, `tool-2`, … in call order, per cell.
        id: String,
        /// The tool called.
        name: ToolName,
        /// Its kind.
        kind: ToolKind,
        /// The argument, as the JSON text the cell made of it (never expanded on its way to the
        /// tool); `None` when the tool was called without one.
        input: Option<JsonText>,
    },
    /// The cell called `notify`; delivered to the host at once, not into the output.
    Notify {
        /// The id of the request that started the cell.
        call_id: String,
        /// The message.
        text: String,
    },
    /// The cell called `yield_control()`.
    YieldRequested,
    /// Nothing is runnable: the cell waits on tool results or timers. In
    /// [`crate::PendingMode::PauseUntilResumed`] it is sent only when the thread pauses.
    Pending,
    /// The cell finished: successfully (`error_text` is `None`) or with the text of its error.
    Result {
        /// What the cell stored, by key: committed only if the cell completes.
        stored_value_writes: StoredValues,
        /// The error text of a failed cell.
        error_text: Option<String>,
    },
    /// The runtime thread panicked; it ends without a result.
    ThreadPanicked,
    /// What running the cell cost, sent just before its [`RuntimeEvent::Result`] by an engine
    /// that measures it: telemetry only, nothing depends on it.
    Usage {
        /// CPU time the cell's thread spent on it, from `Started` to its result.
        cpu_time: std::time::Duration,
    },
}

/// What the cell actor tells a running cell.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RuntimeCommand {
    /// A tool call succeeded: its promise resolves with `result`.
    ToolResponse {
        /// The tool call's id.
        id: String,
        /// Its result, as JSON text (handed to the cell's `JSON.parse` as it is).
        result: JsonText,
    },
    /// A tool call failed: its promise rejects with an `Error` whose message is `error_text`.
    ToolError {
        /// The tool call's id.
        id: String,
        /// What the promise is rejected with.
        error_text: String,
    },
    /// The timer `id` is due: its callback runs. The runtime's own timer table produces these; a
    /// host may send them too, to fire a timer early.
    TimeoutFired {
        /// The timer's id.
        id: u64,
    },
    /// Turn pausing back on: pause at the next pending frontier (emitting
    /// [`RuntimeEvent::Pending`]), at once if the cell is idle now. Does nothing when pausing is
    /// already on. Only meaningful in [`crate::PendingMode::PauseUntilResumed`].
    ObservePendingFrontier,
    /// Stop the cell; the same as [`crate::TerminateHandle::terminate`] when it is idle.
    Terminate,
}

/// What the cell actor tells a cell paused at its pending frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RuntimeControl {
    /// Go on, and stop pausing at idle points until asked again.
    Continue,
    /// Go on, and pause again at the next idle point.
    Resume,
    /// Stop the cell.
    Terminate,
}

/// The actor's end of the command or control channel of one cell: a plain channel to a runtime
/// thread in this process, or a sink that forwards each message elsewhere (to an engine process).
/// Sending never blocks on the cell.
pub struct CommandSender<T>(CommandSink<T>);

enum CommandSink<T> {
    Channel(std::sync::mpsc::Sender<T>),
    Forward(std::sync::Arc<ForwardFn<T>>),
}

/// A function that forwards one message, or gives it back when the cell is gone.
type ForwardFn<T> = dyn Fn(T) -> Result<(), std::sync::mpsc::SendError<T>> + Send + Sync;

impl<T> CommandSender<T> {
    /// A sender that hands each message to `forward`, which gives it back (as the error) when
    /// the cell can no longer receive it.
    pub fn forward(
        forward: impl Fn(T) -> Result<(), std::sync::mpsc::SendError<T>> + Send + Sync + 'static,
    ) -> Self {
        CommandSender(CommandSink::Forward(std::sync::Arc::new(forward)))
    }

    /// Sends `message` to the cell; gives it back when the cell is gone.
    pub fn send(&self, message: T) -> Result<(), std::sync::mpsc::SendError<T>> {
        match &self.0 {
            CommandSink::Channel(sender) => sender.send(message),
            CommandSink::Forward(forward) => forward(message),
        }
    }
}

impl<T> From<std::sync::mpsc::Sender<T>> for CommandSender<T> {
    fn from(sender: std::sync::mpsc::Sender<T>) -> Self {
        CommandSender(CommandSink::Channel(sender))
    }
}

impl<T> Clone for CommandSender<T> {
    fn clone(&self) -> Self {
        CommandSender(match &self.0 {
            CommandSink::Channel(sender) => CommandSink::Channel(sender.clone()),
            CommandSink::Forward(forward) => CommandSink::Forward(std::sync::Arc::clone(forward)),
        })
    }
}

impl<T> std::fmt::Debug for CommandSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &self.0 {
            CommandSink::Channel(_) => "CommandSender::Channel",
            CommandSink::Forward(_) => "CommandSender::Forward",
        })
    }
}

/// The runtime thread's end of the event channel.
#[derive(Clone)]
#[non_exhaustive]
pub enum EventSender {
    /// Client mode: nothing blocks.
    Unbounded(mpsc::UnboundedSender<RuntimeEvent>),
    /// Server mode: a full queue blocks the sending thread.
    Bounded(mpsc::Sender<RuntimeEvent>),
    /// Each event goes straight to a function on the sending thread (an engine process writes it
    /// to its channel), which may block for back-pressure and gives the event back when nobody
    /// listens any more. Dropping the last clone is the end of the events, as for a channel.
    Forward(std::sync::Arc<ForwardEventFn>),
}

/// What an [`EventSender::Forward`] calls for each event.
pub type ForwardEventFn = dyn Fn(RuntimeEvent) -> Result<(), EventSendError> + Send + Sync;

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EventSender::Unbounded(_) => "EventSender::Unbounded",
            EventSender::Bounded(_) => "EventSender::Bounded",
            EventSender::Forward(_) => "EventSender::Forward",
        })
    }
}

/// The actor's end of the event channel.
#[derive(Debug)]
pub enum EventReceiver {
    /// Client mode: the sender never waits.
    Unbounded(mpsc::UnboundedReceiver<RuntimeEvent>),
    /// Server mode: the sender waits while the queue is full.
    Bounded(mpsc::Receiver<RuntimeEvent>),
}

/// The receiver is gone: nobody is listening to this cell any more.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the cell actor stopped listening to the runtime")]
pub struct EventSendError(pub Box<RuntimeEvent>);

/// Makes an event channel: unbounded when `capacity` is `None` (client mode), bounded with
/// back-pressure otherwise (server mode).
pub fn event_channel(capacity: Option<usize>) -> (EventSender, EventReceiver) {
    match capacity {
        None => {
            let (sender, receiver) = mpsc::unbounded_channel();
            (
                EventSender::Unbounded(sender),
                EventReceiver::Unbounded(receiver),
            )
        }
        Some(capacity) => {
            let (sender, receiver) = mpsc::channel(capacity.max(1));
            (
                EventSender::Bounded(sender),
                EventReceiver::Bounded(receiver),
            )
        }
    }
}

impl EventSender {
    /// A sender that hands each event to `forward` on the sending thread.
    pub fn forward(
        forward: impl Fn(RuntimeEvent) -> Result<(), EventSendError> + Send + Sync + 'static,
    ) -> Self {
        EventSender::Forward(std::sync::Arc::new(forward))
    }

    /// Sends from async code (a scripted engine), waiting while a bounded queue is full.
    pub async fn send(&self, event: RuntimeEvent) -> Result<(), EventSendError> {
        match self {
            EventSender::Forward(forward) => forward(event),
            EventSender::Unbounded(sender) => sender
                .send(event)
                .map_err(|error| EventSendError(Box::new(error.0))),
            EventSender::Bounded(sender) => sender
                .send(event)
                .await
                .map_err(|error| EventSendError(Box::new(error.0))),
        }
    }

    /// Sends from a plain (non-async) thread, blocking while a bounded queue is full.
    ///
    /// Must not be called from inside an async runtime: a runtime thread is a plain OS thread.
    pub fn send_blocking(&self, event: RuntimeEvent) -> Result<(), EventSendError> {
        match self {
            EventSender::Forward(forward) => forward(event),
            EventSender::Unbounded(sender) => sender
                .send(event)
                .map_err(|error| EventSendError(Box::new(error.0))),
            EventSender::Bounded(sender) => sender
                .blocking_send(event)
                .map_err(|error| EventSendError(Box::new(error.0))),
        }
    }
}

impl EventReceiver {
    /// The next event, or `None` once the runtime thread has ended and the queue is empty.
    pub async fn recv(&mut self) -> Option<RuntimeEvent> {
        match self {
            EventReceiver::Unbounded(receiver) => receiver.recv().await,
            EventReceiver::Bounded(receiver) => receiver.recv().await,
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_recv(&mut self) -> Option<RuntimeEvent> {
        match self {
            EventReceiver::Unbounded(receiver) => receiver.try_recv().ok(),
            EventReceiver::Bounded(receiver) => receiver.try_recv().ok(),
        }
    }

    /// Waits for the next event from a plain thread (tests and simple drivers).
    pub fn blocking_recv(&mut self) -> Option<RuntimeEvent> {
        match self {
            EventReceiver::Unbounded(receiver) => receiver.blocking_recv(),
            EventReceiver::Bounded(receiver) => receiver.blocking_recv(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bounded_queue_blocks_the_sender_until_drained() {
        let (sender, mut receiver) = event_channel(Some(1));
        sender.send_blocking(RuntimeEvent::Started).unwrap();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let producer = std::thread::spawn(move || {
            sender.send_blocking(RuntimeEvent::Pending).unwrap();
            sent_tx.send(()).unwrap();
        });
        // The second send cannot complete while the queue holds one event.
        assert!(sent_rx.try_recv().is_err());
        assert_eq!(receiver.blocking_recv(), Some(RuntimeEvent::Started));
        sent_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("hung: the producer stayed blocked after the queue drained");
        assert_eq!(receiver.blocking_recv(), Some(RuntimeEvent::Pending));
        producer.join().unwrap();
        assert_eq!(receiver.blocking_recv(), None);
    }

    #[test]
    fn sending_after_the_receiver_is_gone_returns_the_event() {
        let (sender, receiver) = event_channel(None);
        drop(receiver);
        assert_eq!(
            sender.send_blocking(RuntimeEvent::YieldRequested),
            Err(EventSendError(Box::new(RuntimeEvent::YieldRequested)))
        );
    }
}
