//! Progress notifications for a call that waits on a cell: the cell's `notify` messages and its
//! tools' progress, sent while the call waits.

use std::time::{Duration, Instant};

use codemode_protocol::CellId;
use codemode_session::{Session, SessionEvent};
use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use serde_json::Value;

/// How often a waiting call reports progress.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

pub(super) fn request_id_text(context: &RequestContext<RoleServer>) -> String {
    serde_json::to_value(&context.id)
        .map(|id| match id {
            Value::String(text) => text,
            other => other.to_string(),
        })
        .unwrap_or_default()
}

/// Which notifications belong to a waiting call.
pub(super) enum Watched {
    /// Those of the cell `exec` starts with this call id.
    Call(String),
    /// Those of this cell (`None`: the wait names no cell id this runtime hands out, so none).
    Cell(Option<CellId>),
}

/// How long a call waits to send one progress notification before it gives up relaying: a
/// client that stops reading must not hold the call's answer back.
const SEND_GUARD: Duration = Duration::from_secs(2);

/// Runs `work` (a call that waits on a cell) and, when the client gave a progress token, relays
/// the watched cell's notifications and a tick every [`PROGRESS_INTERVAL`] to it while `work`
/// runs, in the same task: a relay of its own would cost each call a hand-over between threads
/// to start and to stop it, which on a busy machine was most of a short `exec`. What the cell
/// notified before `work` ended goes out before its answer.
pub(super) async fn relayed<F: Future>(
    context: &RequestContext<RoleServer>,
    session: &Session,
    watched: Watched,
    work: F,
) -> F::Output {
    let Some(token) = context.meta.get_progress_token() else {
        return work.await;
    };
    let peer = &context.peer;
    let mut events = session.subscribe();
    let began = Instant::now();
    let ours = |event: &SessionEvent| match event {
        SessionEvent::Notification {
            cell_id,
            call_id,
            text,
        } => {
            let ours = match &watched {
                Watched::Call(id) => id == call_id,
                Watched::Cell(id) => id.as_ref() == Some(cell_id),
            };
            ours.then(|| text.clone())
        }
        _ => None,
    };
    let mut step = 0.0;
    // Whether the client still takes notifications: one that did not within the guard gets none.
    let mut relaying = true;
    let mut send = async |message: String, relaying: &mut bool| {
        if !*relaying {
            return;
        }
        step += 1.0;
        let notification =
            ProgressNotificationParam::new(token.clone(), step).with_message(message);
        *relaying = matches!(
            tokio::time::timeout(SEND_GUARD, peer.notify_progress(notification)).await,
            Ok(Ok(()))
        );
    };
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + PROGRESS_INTERVAL,
        PROGRESS_INTERVAL,
    );
    let mut work = std::pin::pin!(work);
    loop {
        let message = tokio::select! {
            // Events first: a notification already queued goes out before the call ends.
            biased;
            event = events.recv(), if relaying => match event {
                Ok(event) => match ours(&event) {
                    Some(text) => text,
                    None => continue,
                },
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    relaying = false;
                    continue;
                }
            },
            output = &mut work => {
                // The call is answering: what the cell notified before it ended is queued
                // already; send that first.
                while relaying {
                    match events.try_recv() {
                        Ok(event) => {
                            if let Some(text) = ours(&event) {
                                send(text, &mut relaying).await;
                            }
                        }
                        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                        Err(_) => break,
                    }
                }
                return output;
            }
            _ = ticks.tick(), if relaying => {
                format!("running for {:.0} s", began.elapsed().as_secs_f64())
            }
        };
        send(message, &mut relaying).await;
    }
}
