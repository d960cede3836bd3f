//! `wait` that costs nothing ([`Session::wait_many`]): an observation that would return nothing
//! new holds on, round after round of the yield time, until one of the cells it watches has news
//! (output, its end, a call waiting for the user) or the session's `max_wait` passes; a quiet
//! result then says how long it was quiet and what each cell waits on. One `wait` may watch
//! several cells: every round observes them all at once, and the first with news ends the round
//! for the others (their observations end early, nothing of theirs is lost).

use std::time::{Duration, Instant};

use codemode_cell_actor::{CellEvent, Observation};
use codemode_protocol::{CellId, WaitRequest};
use tokio_util::sync::CancellationToken;

use crate::error::SessionError;
use crate::report::{Quiet, WaitOutcome};
use crate::session::Session;

/// Whether an observation has something to tell the model.
fn has_news(outcome: &WaitOutcome) -> bool {
    match outcome {
        WaitOutcome::NotFound { .. } => true,
        WaitOutcome::Observed(report) => match &report.event {
            CellEvent::Yielded { output } => {
                !output.is_empty() || !report.awaiting_approval.is_empty()
            }
            _ => true,
        },
    }
}

impl Session {
    /// Observes the cells a `wait` names (`cell_id`, then `cell_ids`), or terminates them.
    /// Returns an outcome for each cell with news, in the order named; when none had any by the
    /// end (one yield time, or up to `max_wait` with a holding session), one for each cell,
    /// marked quiet.
    pub async fn wait_many(&self, request: WaitRequest) -> Result<Vec<WaitOutcome>, SessionError> {
        let mut named = vec![request.cell_id.clone()];
        for cell_id in &request.cell_ids {
            if !named.contains(cell_id) {
                named.push(cell_id.clone());
            }
        }
        let mut outcomes = Vec::new();
        let mut ids = Vec::new();
        for text in named {
            // An id this runtime never hands out names no cell.
            match CellId::parse(&text) {
                Some(cell_id) => ids.push(cell_id),
                None => outcomes.push(WaitOutcome::NotFound { cell_id: text }),
            }
        }
        if request.terminate {
            for cell_id in &ids {
                outcomes.push(self.terminate(cell_id).await?);
            }
            return Ok(outcomes);
        }
        if !outcomes.is_empty() || ids.is_empty() {
            return Ok(outcomes);
        }
        let yield_time = self.config().wait_yield(request.yield_time_ms);
        self.hold(&ids, yield_time).await
    }

    /// Rounds of observations of `ids` until one has news, or the holding time passes.
    async fn hold(
        &self,
        ids: &[CellId],
        yield_time: Duration,
    ) -> Result<Vec<WaitOutcome>, SessionError> {
        let began = Instant::now();
        let max_wait = self.config().max_wait;
        let mut round = yield_time;
        loop {
            let outcomes = self.round(ids, round).await?;
            let elapsed = began.elapsed();
            let remaining = max_wait.map_or(Duration::ZERO, |max| max.saturating_sub(elapsed));
            let with_news: Vec<WaitOutcome> =
                outcomes.iter().filter(|o| has_news(o)).cloned().collect();
            if !with_news.is_empty() || remaining.is_zero() {
                let quiet = with_news.is_empty() && max_wait.is_some();
                let chosen = if with_news.is_empty() {
                    outcomes
                } else {
                    with_news
                };
                return Ok(chosen
                    .into_iter()
                    .map(|outcome| match outcome {
                        WaitOutcome::Observed(mut report) => {
                            report.wall_time = elapsed;
                            if quiet {
                                report.quiet = Some(Quiet {
                                    quiet_for: elapsed,
                                    calls: self.shared().calls.of(&report.cell_id),
                                });
                            }
                            WaitOutcome::Observed(report)
                        }
                        other => other,
                    })
                    .collect());
            }
            round = yield_time.min(remaining);
        }
    }

    /// One round: every cell observed at once for `round`, ended early for all when one has
    /// news or one of the session's calls starts waiting for the user.
    async fn round(
        &self,
        ids: &[CellId],
        round: Duration,
    ) -> Result<Vec<WaitOutcome>, SessionError> {
        let news = CancellationToken::new();
        let gate = &self.shared().gate;
        let mut asked = gate.asked();
        asked.borrow_and_update();
        // A question already waiting is news now.
        if ids.iter().any(|cell_id| !gate.awaiting(cell_id).is_empty()) {
            news.cancel();
        }
        let observations = ids.iter().map(|cell_id| {
            let news = news.clone();
            async move {
                let observation = Observation::yield_after(round).with_yield_signal(news.clone());
                let outcome = self.observe(cell_id, observation).await;
                if outcome.as_ref().map_or(true, has_news) {
                    news.cancel();
                }
                outcome
            }
        });
        let asked_meanwhile = async {
            while asked.changed().await.is_ok() {
                news.cancel();
            }
            std::future::pending::<()>().await;
        };
        let results = tokio::select! {
            results = futures::future::join_all(observations) => results,
            () = asked_meanwhile => unreachable!("never ends"),
        };
        // One cell's failure does not lose what the others returned.
        let mut outcomes = Vec::new();
        let mut first_error = None;
        for result in results {
            match result {
                Ok(outcome) => outcomes.push(outcome),
                Err(error) => {
                    tracing::warn!(session = %self.id(), %error, "an observation of a waited cell failed");
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) if outcomes.iter().all(|outcome| !has_news(outcome)) => Err(error),
            _ => Ok(outcomes),
        }
    }
}
