//! `CellState`: the one place where a cell's terminal outcome is decided.
//!
//! Every change of the terminal outcome happens under one mutex, in one of these moves:
//!
//! ```text
//! Running ──claim_completion──▶ Committing ──publish──▶ Buffered ──delivered──▶ Delivered
//!    │                              │                       │
//!    │ request_termination          │ request_termination   │ request_termination
//!    │                              │ (waits for publish)   │ (the terminator gets the completion)
//!    ▼                              ▼                       ▼
//! Terminating ──finish_termination──▶ Terminated ◀──────────┘
//! Running, Terminating, Buffered ──close──▶ Closed (the actor is gone)
//! ```
//!
//! A completion first *claims* the outcome (so a terminated cell never commits, and never even
//! builds its completion), then the host commits the stored values with no lock held (a store may
//! be slow or remote), then the completion is *published* for an observer. A termination that
//! arrives while the commit runs gets the completion once it is published: the claim already won.

use codemode_protocol::StoredValues;
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::event::{CellError, CellEvent};

/// Where an observation's or a termination's answer goes.
pub(crate) type Responder = oneshot::Sender<Result<CellEvent, CellError>>;

/// Proof that a completion was published: only [`CompletionClaim::publish`] makes one, so a
/// [`crate::CellHost`] cannot finish `commit_completion` without going through the cell's state.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "the actor needs the proof that the completion was published"]
pub struct CompletionCommit {
    _published: (),
}

/// A completed cell that has claimed its terminal outcome: termination can no longer win, and the
/// host must now commit its stored values and [`publish`](CompletionClaim::publish) it.
///
/// Made only by the cell's state, and handed to [`crate::CellHost::commit_completion`]. If it is
/// dropped unpublished (the host's future was cancelled or panicked), the completion is published
/// with an error saying the stored values were not saved, so the cell still ends.
#[derive(Debug)]
#[must_use = "a claimed completion must be published, or the cell never ends"]
pub struct CompletionClaim {
    state: Arc<CellState>,
    stored_value_writes: StoredValues,
    /// `None` once published.
    completion: Option<CellEvent>,
}

impl CompletionClaim {
    /// What the cell stored (`store(key, value)`), by key: what the host merges into its values.
    pub fn stored_value_writes(&self) -> &StoredValues {
        &self.stored_value_writes
    }

    /// Takes the writes out of the claim (leaving none), to hand them to a store by value.
    pub fn take_stored_value_writes(&mut self) -> StoredValues {
        std::mem::take(&mut self.stored_value_writes)
    }

    /// The cell's error text, if it failed; what a host reports when the result waits unobserved.
    pub fn error_text(&self) -> Option<&str> {
        match &self.completion {
            Some(CellEvent::Completed { error_text, .. }) => error_text.as_deref(),
            _ => None,
        }
    }

    /// Publishes the completion after its stored values were committed: an observer (or a
    /// terminator that arrived during the commit) gets it.
    pub fn publish(mut self) -> CompletionCommit {
        let completion = self.completion.take().expect("published only once");
        self.state.publish_completion(completion)
    }

    /// Publishes the completion after its stored values could not be committed: its error text
    /// gains `note` (on a line of its own), so the model learns that what it stored is lost.
    pub fn publish_with_commit_failure(mut self, note: &str) -> CompletionCommit {
        let completion = self.completion.take().expect("published only once");
        self.state
            .publish_completion(with_error_note(completion, note))
    }
}

impl Drop for CompletionClaim {
    fn drop(&mut self) {
        if let Some(completion) = self.completion.take() {
            tracing::error!("a claimed completion was dropped before it was published");
            let _ = self.state.publish_completion(with_error_note(
                completion,
                "the cell's stored values were not saved: the host gave up its commit",
            ));
        }
    }
}

/// `completion` with `note` added to its error text.
fn with_error_note(completion: CellEvent, note: &str) -> CellEvent {
    match completion {
        CellEvent::Completed {
            output,
            error_text,
            result_buffered_for,
        } => CellEvent::Completed {
            output,
            error_text: Some(match error_text {
                Some(error_text) => format!("{error_text}\n{note}"),
                None => note.to_owned(),
            }),
            result_buffered_for,
        },
        other => other,
    }
}

/// The outcome of handing a committed completion to an observer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CompletionDelivery {
    /// The observer has it; the cell is finished.
    Delivered,
    /// No observer took it; it waits for the next one.
    Buffered,
}

/// The outcome of routing a new observation.
#[derive(Debug)]
pub(crate) enum ObservationRoute {
    /// The cell is still running: the actor decides.
    Running(Responder),
    /// The buffered completion was delivered to this observer.
    Delivered,
    /// The observer went away before taking the buffered completion; it stays buffered.
    StillBuffered,
    /// The cell's result was already delivered; the observer was told.
    Closed,
}

#[derive(Debug)]
enum Phase {
    Running,
    /// A completion claimed the outcome; the host is committing its stored values. A terminator
    /// that arrives meanwhile waits here for the completion.
    Committing {
        terminator: Option<Responder>,
    },
    /// Termination was requested; the actor is stopping the cell. `terminator` is `None` when the
    /// cell is terminated because no handle to it is left.
    Terminating {
        terminator: Option<Responder>,
    },
    /// Completed and committed; waiting for an observer since `since`.
    Buffered {
        completion: CellEvent,
        since: Instant,
    },
    /// A terminator took the outcome (a `Terminated` event, or the completion that was buffered).
    /// `for_observer` is what an observer that was already waiting gets: the same outcome, with
    /// the output left out when the terminator received it, so that no item reaches two callers.
    Terminated {
        for_observer: CellEvent,
    },
    /// An observer took the completion.
    Delivered,
    /// The actor is gone.
    Closed,
}

/// The shared, thread-safe lifecycle state of one cell. The actor, its handles and the host's
/// commit all go through it.
#[derive(Debug)]
pub(crate) struct CellState {
    phase: Mutex<Phase>,
    /// Cancelled when termination is requested (or the cell must stop): wakes the actor.
    termination: CancellationToken,
}

impl Default for CellState {
    fn default() -> Self {
        CellState {
            phase: Mutex::new(Phase::Running),
            termination: CancellationToken::new(),
        }
    }
}

impl CellState {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(CellState::default())
    }

    /// Whether the cell has not ended yet: running, committing its completion, or being
    /// terminated (a completion waiting for its observer has ended).
    pub(crate) fn is_running(&self) -> bool {
        matches!(
            *self.phase(),
            Phase::Running | Phase::Committing { .. } | Phase::Terminating { .. }
        )
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        // The critical sections never panic while holding the lock, so poison is never expected;
        // recover the state anyway rather than spreading a panic.
        self.phase.lock()
    }

    /// Claims the outcome for a completion: when the cell is still running, builds the event with
    /// `build` and returns the claim that the host commits and publishes. When a termination came
    /// first, returns `None` and builds nothing.
    pub(crate) fn claim_completion(
        self: &Arc<Self>,
        stored_value_writes: StoredValues,
        build: impl FnOnce() -> CellEvent,
    ) -> Option<CompletionClaim> {
        let mut phase = self.phase();
        if !matches!(*phase, Phase::Running) {
            return None;
        }
        *phase = Phase::Committing { terminator: None };
        drop(phase);
        Some(CompletionClaim {
            state: Arc::clone(self),
            stored_value_writes,
            completion: Some(build()),
        })
    }

    /// The second half of a completion: buffers it for an observer, or hands it to a terminator
    /// that arrived during the commit.
    fn publish_completion(&self, completion: CellEvent) -> CompletionCommit {
        let mut phase = self.phase();
        match std::mem::replace(&mut *phase, Phase::Closed) {
            Phase::Committing {
                terminator: Some(terminator),
            } => {
                let received = terminator.send(Ok(completion.clone())).is_ok();
                *phase = Phase::Terminated {
                    for_observer: for_another_caller(completion, received),
                };
            }
            Phase::Committing { terminator: None } => {
                *phase = Phase::Buffered {
                    completion,
                    since: Instant::now(),
                };
            }
            // Only a claim publishes, and only once: the phase is Committing. Keep any other
            // phase as it was.
            other => *phase = other,
        }
        CompletionCommit { _published: () }
    }

    pub(crate) fn termination_signal(&self) -> WaitForCancellationFuture<'_> {
        self.termination.cancelled()
    }

    #[cfg(test)]
    fn termination_signal_fired(&self) -> bool {
        self.termination.is_cancelled()
    }

    /// Requests termination; the returned receiver gets the outcome. Only the first request claims
    /// it; a buffered completion goes to that first terminator (actor rule 4).
    pub(crate) fn request_termination(&self) -> oneshot::Receiver<Result<CellEvent, CellError>> {
        let (respond, receiver) = oneshot::channel();
        let mut phase = self.phase();
        match &mut *phase {
            Phase::Running => {
                *phase = Phase::Terminating {
                    terminator: Some(respond),
                };
            }
            Phase::Terminating { terminator } | Phase::Committing { terminator }
                if terminator.is_none() =>
            {
                *terminator = Some(respond);
                // A committing cell's terminator is answered when the completion is published;
                // the actor is not woken.
                if matches!(*phase, Phase::Committing { .. }) {
                    return receiver;
                }
            }
            Phase::Terminating { .. } | Phase::Committing { .. } | Phase::Terminated { .. } => {
                let _ = respond.send(Err(CellError::AlreadyTerminating));
                return receiver;
            }
            Phase::Buffered { .. } => {
                let Phase::Buffered { completion, since } =
                    std::mem::replace(&mut *phase, Phase::Closed)
                else {
                    unreachable!("matched Buffered above");
                };
                let completion = stamp_buffered_for(completion, since);
                let received = respond.send(Ok(completion.clone())).is_ok();
                *phase = Phase::Terminated {
                    for_observer: for_another_caller(completion, received),
                };
            }
            Phase::Delivered | Phase::Closed => {
                let _ = respond.send(Err(CellError::Closed));
                return receiver;
            }
        }
        drop(phase);
        self.termination.cancel();
        receiver
    }

    /// Stops a cell that nobody can observe any more (every handle is gone).
    pub(crate) fn terminate_unobserved(&self) {
        let mut phase = self.phase();
        match *phase {
            Phase::Running => *phase = Phase::Terminating { terminator: None },
            // Nobody is left to take the buffered result.
            Phase::Buffered { .. } => *phase = Phase::Closed,
            _ => {}
        }
        drop(phase);
        self.termination.cancel();
    }

    /// Hands a just-committed completion to the current observer, if there is one that still
    /// listens; otherwise it stays buffered. If a terminator claimed the completion in the
    /// meantime, the observer gets a copy of it.
    pub(crate) fn deliver_completion(&self, observer: Option<Responder>) -> CompletionDelivery {
        let mut phase = self.phase();
        match &*phase {
            Phase::Terminated { for_observer } => {
                if let Some(observer) = observer {
                    let _ = observer.send(Ok(for_observer.clone()));
                }
                CompletionDelivery::Delivered
            }
            // The observer was waiting when the cell completed: the result did not wait at all.
            Phase::Buffered { .. } => match observer {
                Some(observer) => deliver_buffered(&mut phase, observer, Waited::No),
                None => CompletionDelivery::Buffered,
            },
            // The completion was never committed (termination won); the actor finishes the
            // termination instead.
            Phase::Running
            | Phase::Committing { .. }
            | Phase::Terminating { .. }
            | Phase::Delivered
            | Phase::Closed => CompletionDelivery::Buffered,
        }
    }

    /// Routes a new observation: a buffered completion is delivered at once; a cell whose
    /// termination has begun, or that has finished, answers `Closed` (the outcome goes to the
    /// terminator); a running one (or one committing its completion) is left to the actor.
    pub(crate) fn route_observation(&self, observer: Responder) -> ObservationRoute {
        let mut phase = self.phase();
        match &*phase {
            Phase::Running | Phase::Committing { .. } => ObservationRoute::Running(observer),
            Phase::Buffered { .. } => match deliver_buffered(&mut phase, observer, Waited::Yes) {
                CompletionDelivery::Delivered => ObservationRoute::Delivered,
                CompletionDelivery::Buffered => ObservationRoute::StillBuffered,
            },
            Phase::Terminating { .. }
            | Phase::Terminated { .. }
            | Phase::Delivered
            | Phase::Closed => {
                let _ = observer.send(Err(CellError::Closed));
                ObservationRoute::Closed
            }
        }
    }

    /// Records the end of a termination: the terminator (if any) gets `terminated`. Returns what
    /// the current observer (if any) gets: the same outcome (`terminated`, or the completion a
    /// terminator claimed), without the output a terminator already received.
    pub(crate) fn finish_termination(&self, terminated: CellEvent) -> CellEvent {
        let mut phase = self.phase();
        match std::mem::replace(&mut *phase, Phase::Closed) {
            Phase::Terminated { for_observer } => {
                *phase = Phase::Terminated {
                    for_observer: for_observer.clone(),
                };
                for_observer
            }
            Phase::Terminating { terminator } => {
                let received = terminator
                    .is_some_and(|terminator| terminator.send(Ok(terminated.clone())).is_ok());
                let for_observer = for_another_caller(terminated, received);
                *phase = Phase::Terminated {
                    for_observer: for_observer.clone(),
                };
                for_observer
            }
            other => {
                // Not reached by the actor: termination always passes through Terminating or
                // Terminated. Keep the state as it was.
                *phase = other;
                terminated
            }
        }
    }

    /// Marks the actor gone: later observations and terminations get `Closed`.
    pub(crate) fn close(&self) {
        let mut phase = self.phase();
        match &mut *phase {
            // A terminator still waiting hears that the cell is gone.
            Phase::Terminating { terminator } | Phase::Committing { terminator } => {
                if let Some(terminator) = terminator.take() {
                    let _ = terminator.send(Err(CellError::Closed));
                }
                *phase = Phase::Closed;
            }
            Phase::Terminated { .. } | Phase::Delivered => {}
            Phase::Running | Phase::Buffered { .. } | Phase::Closed => *phase = Phase::Closed,
        }
    }

    /// Whether observations can still get something other than `Closed`.
    #[cfg(test)]
    fn accepting_observations(&self) -> bool {
        matches!(
            *self.phase(),
            Phase::Running | Phase::Committing { .. } | Phase::Buffered { .. }
        )
    }
}

/// What a second caller (an observer already waiting) gets of an outcome the terminator took: the
/// outcome itself, without its output when the terminator received it, so that each output item
/// reaches the model once.
fn for_another_caller(outcome: CellEvent, terminator_received: bool) -> CellEvent {
    if !terminator_received {
        return outcome;
    }
    match outcome {
        CellEvent::Completed {
            error_text,
            result_buffered_for,
            ..
        } => CellEvent::Completed {
            output: Default::default(),
            error_text,
            result_buffered_for,
        },
        CellEvent::Terminated { tool_calls, .. } => CellEvent::Terminated {
            output: Default::default(),
            tool_calls,
        },
        other => other,
    }
}

fn stamp_buffered_for(completion: CellEvent, since: Instant) -> CellEvent {
    match completion {
        CellEvent::Completed {
            output, error_text, ..
        } => CellEvent::Completed {
            output,
            error_text,
            result_buffered_for: since.elapsed(),
        },
        other => other,
    }
}

/// Whether a buffered completion waited for the observer it is delivered to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    /// The observer was there when the cell completed.
    No,
    /// The observer came later; the completion waited since it was committed.
    Yes,
}

/// Sends the buffered completion to `observer`; on success the cell is finished, otherwise the
/// completion stays buffered exactly as it was (same `since`).
fn deliver_buffered(phase: &mut Phase, observer: Responder, waited: Waited) -> CompletionDelivery {
    let Phase::Buffered { completion, since } = std::mem::replace(phase, Phase::Closed) else {
        unreachable!("deliver_buffered is called on a buffered phase");
    };
    let since_kept = since;
    let completion = match waited {
        Waited::No => completion,
        Waited::Yes => stamp_buffered_for(completion, since),
    };
    match observer.send(Ok(completion)) {
        Ok(()) => {
            *phase = Phase::Delivered;
            CompletionDelivery::Delivered
        }
        Err(Ok(completion)) => {
            *phase = Phase::Buffered {
                completion,
                since: since_kept,
            };
            CompletionDelivery::Buffered
        }
        Err(Err(_)) => unreachable!("only Ok values are sent here"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::output::CollectedOutput;
    use codemode_protocol::OutputItem;

    fn completion(text: &str, buffered_for: Duration) -> CellEvent {
        CellEvent::Completed {
            output: CollectedOutput::from_items([OutputItem::text(text)]),
            error_text: None,
            result_buffered_for: buffered_for,
        }
    }

    fn claim(state: &Arc<CellState>, text: &str) -> CompletionClaim {
        state
            .claim_completion(Default::default(), || completion(text, Duration::ZERO))
            .expect("the cell is running")
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_first_termination_claims_a_buffered_completion() {
        let state = CellState::new();
        let _ = claim(&state, "done").publish();
        assert_eq!(state.deliver_completion(None), CompletionDelivery::Buffered);
        let first = state.request_termination();
        assert_eq!(
            state.request_termination().await.unwrap(),
            Err(CellError::AlreadyTerminating)
        );
        assert_eq!(first.await.unwrap(), Ok(completion("done", Duration::ZERO)));
        // The actor's termination then tells a waiting observer the same outcome, without the
        // output the terminator received: each item reaches one caller.
        let terminated = CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls: Vec::new(),
        };
        assert_eq!(
            state.finish_termination(terminated),
            CellEvent::Completed {
                output: CollectedOutput::default(),
                error_text: None,
                result_buffered_for: Duration::ZERO,
            }
        );
    }

    #[tokio::test]
    async fn a_termination_claim_prevents_the_commit_and_the_completion_build() {
        let state = CellState::new();
        let termination = state.request_termination();
        assert!(
            state
                .claim_completion(Default::default(), || panic!(
                    "a terminated cell must not build its completion"
                ))
                .is_none()
        );
        let terminated = CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls: Vec::new(),
        };
        assert_eq!(state.finish_termination(terminated.clone()), terminated);
        assert_eq!(termination.await.unwrap(), Ok(terminated));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_completion_delivery_buffers_it_again_with_its_original_time() {
        let state = CellState::new();
        let _ = claim(&state, "done").publish();
        let (gone, receiver) = oneshot::channel();
        drop(receiver);
        assert_eq!(
            state.deliver_completion(Some(gone)),
            CompletionDelivery::Buffered
        );
        assert!(state.accepting_observations());
        let interval = Duration::from_secs(5);
        tokio::time::advance(interval).await;
        let (gone, receiver) = oneshot::channel();
        drop(receiver);
        assert!(matches!(
            state.route_observation(gone),
            ObservationRoute::StillBuffered
        ));
        tokio::time::advance(interval).await;
        let (observer, mut receiver) = oneshot::channel();
        assert!(matches!(
            state.route_observation(observer),
            ObservationRoute::Delivered
        ));
        assert_eq!(
            receiver.try_recv().unwrap(),
            Ok(completion("done", 2 * interval))
        );
        assert!(!state.accepting_observations());
        let (late, mut receiver) = oneshot::channel();
        assert!(matches!(
            state.route_observation(late),
            ObservationRoute::Closed
        ));
        assert_eq!(receiver.try_recv().unwrap(), Err(CellError::Closed));
    }

    #[tokio::test]
    async fn a_termination_during_the_commit_gets_the_completion_once_published() {
        let state = CellState::new();
        let claim = claim(&state, "done");
        let mut first = state.request_termination();
        assert!(first.try_recv().is_err(), "answered before the publish");
        assert!(
            !state.termination_signal_fired(),
            "the actor is not woken: the completion already won"
        );
        assert_eq!(
            state.request_termination().await.unwrap(),
            Err(CellError::AlreadyTerminating)
        );
        let (observer, mut observed) = oneshot::channel();
        assert!(matches!(
            state.route_observation(observer),
            ObservationRoute::Running(_)
        ));
        let _ = claim.publish();
        assert_eq!(first.await.unwrap(), Ok(completion("done", Duration::ZERO)));
        assert!(observed.try_recv().is_err());
        assert_eq!(
            state.deliver_completion(None),
            CompletionDelivery::Delivered
        );
    }

    #[tokio::test]
    async fn a_commit_failure_is_added_to_the_error_text() {
        let state = CellState::new();
        let _ = claim(&state, "done").publish_with_commit_failure("not saved");
        let (observer, mut receiver) = oneshot::channel();
        assert!(matches!(
            state.route_observation(observer),
            ObservationRoute::Delivered
        ));
        let Ok(CellEvent::Completed { error_text, .. }) = receiver.try_recv().unwrap() else {
            panic!("expected a completion");
        };
        assert_eq!(error_text.as_deref(), Some("not saved"));
    }

    #[tokio::test]
    async fn a_claim_dropped_unpublished_still_ends_the_cell_with_an_error() {
        let state = CellState::new();
        drop(claim(&state, "done"));
        let (observer, mut receiver) = oneshot::channel();
        assert!(matches!(
            state.route_observation(observer),
            ObservationRoute::Delivered
        ));
        let Ok(CellEvent::Completed { error_text, .. }) = receiver.try_recv().unwrap() else {
            panic!("expected a completion");
        };
        assert!(error_text.unwrap().contains("were not saved"));
    }

    #[tokio::test]
    async fn an_observer_arriving_once_termination_began_gets_closed() {
        let state = CellState::new();
        let _termination = state.request_termination();
        let (observer, mut receiver) = oneshot::channel();
        assert!(matches!(
            state.route_observation(observer),
            ObservationRoute::Closed
        ));
        assert_eq!(receiver.try_recv().unwrap(), Err(CellError::Closed));
    }
}
