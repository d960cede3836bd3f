//! `CellState`: the one place where a cell's terminal outcome is decided (S3 rule 6).
//!
//! Every change of the terminal outcome happens under one mutex, in one of these moves:
//!
//! ```text
//! Running ──commit_completion──▶ Buffered ──delivered to an observer──▶ Delivered
//!    │                              │
//!    │ request_termination          │ request_termination (the terminator gets the completion)
//!    ▼                              ▼
//! Terminating ──finish_termination──▶ Terminated
//! Running, Terminating, Buffered ──close──▶ Closed (the actor is gone)
//! ```
//!
//! A completion commits the cell's stored values in the same critical section that claims the
//! outcome, so a terminated cell never commits, and never even builds its completion.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::event::{CellError, CellEvent};

/// Where an observation's or a termination's answer goes.
pub(crate) type Responder = oneshot::Sender<Result<CellEvent, CellError>>;

/// The outcome of [`CellState::commit_completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionCommit {
    /// The completion claimed the outcome and the stored values were committed.
    Committed,
    /// A termination claimed the outcome first: nothing was committed or built.
    Rejected,
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
    /// It is kept for an observer that was already waiting.
    Terminated {
        outcome: CellEvent,
    },
    /// An observer took the completion.
    Delivered,
    /// The actor is gone.
    Closed,
}

/// The shared, thread-safe lifecycle state of one cell. The actor, its handles and the host's
/// commit all go through it.
#[derive(Debug)]
pub struct CellState {
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
    pub fn new() -> Arc<Self> {
        Arc::new(CellState::default())
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        // The critical sections never panic while holding the lock, so poison is never expected;
        // recover the state anyway rather than spreading a panic.
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Claims the outcome for a completion and commits its stored values, atomically: when the
    /// cell is still running, runs `commit` (the host merges the writes), then builds the event
    /// with `build` and buffers it for an observer. When a termination came first, runs neither.
    ///
    /// A host calls this from `CellHost::commit_completion` while holding whatever lock guards its
    /// stored values, so the commit and the claim are one step.
    pub fn commit_completion(
        &self,
        build: impl FnOnce() -> CellEvent,
        commit: impl FnOnce(),
    ) -> CompletionCommit {
        let mut phase = self.phase();
        if !matches!(*phase, Phase::Running) {
            return CompletionCommit::Rejected;
        }
        commit();
        *phase = Phase::Buffered {
            completion: build(),
            since: Instant::now(),
        };
        CompletionCommit::Committed
    }

    /// Whether a termination has been requested (or the cell was told to stop).
    pub fn termination_requested(&self) -> bool {
        self.termination.is_cancelled()
    }

    pub(crate) fn termination_signal(&self) -> WaitForCancellationFuture<'_> {
        self.termination.cancelled()
    }

    /// Requests termination; the returned receiver gets the outcome. Only the first request claims
    /// it; a buffered completion goes to that first terminator (S3 rule 4).
    pub(crate) fn request_termination(&self) -> oneshot::Receiver<Result<CellEvent, CellError>> {
        let (respond, receiver) = oneshot::channel();
        let mut phase = self.phase();
        match &mut *phase {
            Phase::Running => {
                *phase = Phase::Terminating {
                    terminator: Some(respond),
                };
            }
            Phase::Terminating { terminator } if terminator.is_none() => {
                *terminator = Some(respond);
            }
            Phase::Terminating { .. } | Phase::Terminated { .. } => {
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
                let _ = respond.send(Ok(completion.clone()));
                *phase = Phase::Terminated {
                    outcome: completion,
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
            Phase::Terminated { outcome } => {
                if let Some(observer) = observer {
                    let _ = observer.send(Ok(outcome.clone()));
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
            Phase::Running | Phase::Terminating { .. } | Phase::Delivered | Phase::Closed => {
                CompletionDelivery::Buffered
            }
        }
    }

    /// Routes a new observation: a buffered completion is delivered at once; a finished cell
    /// answers `Closed`; a running one is left to the actor.
    pub(crate) fn route_observation(&self, observer: Responder) -> ObservationRoute {
        let mut phase = self.phase();
        match &*phase {
            Phase::Running | Phase::Terminating { .. } => ObservationRoute::Running(observer),
            Phase::Buffered { .. } => match deliver_buffered(&mut phase, observer, Waited::Yes) {
                CompletionDelivery::Delivered => ObservationRoute::Delivered,
                CompletionDelivery::Buffered => ObservationRoute::StillBuffered,
            },
            Phase::Terminated { .. } | Phase::Delivered | Phase::Closed => {
                let _ = observer.send(Err(CellError::Closed));
                ObservationRoute::Closed
            }
        }
    }

    /// Records the end of a termination: the terminator (if any) gets `terminated`. Returns what
    /// the current observer (if any) gets: `terminated`, or the completion a terminator claimed.
    pub(crate) fn finish_termination(&self, terminated: CellEvent) -> CellEvent {
        let mut phase = self.phase();
        match std::mem::replace(&mut *phase, Phase::Closed) {
            Phase::Terminated { outcome } => {
                let for_observer = outcome.clone();
                *phase = Phase::Terminated { outcome };
                for_observer
            }
            Phase::Terminating { terminator } => {
                if let Some(terminator) = terminator {
                    let _ = terminator.send(Ok(terminated.clone()));
                }
                *phase = Phase::Terminated {
                    outcome: terminated.clone(),
                };
                terminated
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
            Phase::Terminating { terminator } => {
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
    pub fn accepting_observations(&self) -> bool {
        matches!(
            *self.phase(),
            Phase::Running | Phase::Terminating { .. } | Phase::Buffered { .. }
        )
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

    #[tokio::test(start_paused = true)]
    async fn only_the_first_termination_claims_a_buffered_completion() {
        let state = CellState::default();
        assert_eq!(
            state.commit_completion(|| completion("done", Duration::ZERO), || {}),
            CompletionCommit::Committed
        );
        assert_eq!(state.deliver_completion(None), CompletionDelivery::Buffered);
        let first = state.request_termination();
        assert_eq!(
            state.request_termination().await.unwrap(),
            Err(CellError::AlreadyTerminating)
        );
        assert_eq!(first.await.unwrap(), Ok(completion("done", Duration::ZERO)));
        // The actor's termination then hands the same completion to a waiting observer.
        let terminated = CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls: Vec::new(),
        };
        assert_eq!(
            state.finish_termination(terminated),
            completion("done", Duration::ZERO)
        );
    }

    #[tokio::test]
    async fn a_termination_claim_prevents_the_commit_and_the_completion_build() {
        let state = CellState::default();
        let termination = state.request_termination();
        let mut committed = false;
        assert_eq!(
            state.commit_completion(
                || panic!("a terminated cell must not build its completion"),
                || committed = true
            ),
            CompletionCommit::Rejected
        );
        assert!(!committed);
        let terminated = CellEvent::Terminated {
            output: CollectedOutput::default(),
            tool_calls: Vec::new(),
        };
        assert_eq!(state.finish_termination(terminated.clone()), terminated);
        assert_eq!(termination.await.unwrap(), Ok(terminated));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_completion_delivery_buffers_it_again_with_its_original_time() {
        let state = CellState::default();
        state.commit_completion(|| completion("done", Duration::ZERO), || {});
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
}
