//! Progress notifications for a call that waits on a cell: the cell's `notify` messages and its
//! tools' progress, sent while the call waits.

use std::time::{Duration, Instant};

use codemode_protocol::CellId;
use codemode_session::{Session, SessionEvent};
use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

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

/// How long a finishing call waits for its relay to send the notifications already queued: a
/// client that stops reading must not hold the call's answer back.
const FLUSH_GUARD: Duration = Duration::from_secs(2);

/// Progress notifications for one waiting call, when the client gave a progress token.
pub(super) struct Progress {
    relay: Option<(tokio::task::JoinHandle<()>, CancellationToken)>,
}

impl Progress {
    pub(super) fn start(
        context: &RequestContext<RoleServer>,
        session: &Session,
        watched: Watched,
    ) -> Self {
        let Some(token) = context.meta.get_progress_token() else {
            return Progress { relay: None };
        };
        let peer = context.peer.clone();
        let mut events = session.subscribe();
        let began = Instant::now();
        let finish = CancellationToken::new();
        let finishing = finish.clone();
        let task = tokio::spawn(async move {
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
            let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
            ticks.tick().await;
            let mut step = 0.0;
            let mut send = async |message: String| {
                step += 1.0;
                let notification =
                    ProgressNotificationParam::new(token.clone(), step).with_message(message);
                peer.notify_progress(notification).await.is_ok()
            };
            loop {
                let message = tokio::select! {
                    // Events first: a notification already queued goes out before the call ends.
                    biased;
                    event = events.recv() => match event {
                        Ok(event) => match ours(&event) {
                            Some(text) => text,
                            None => continue,
                        },
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                    () = finishing.cancelled() => {
                        // The call is answering: what the cell notified before it ended is
                        // queued already; send that, then stop.
                        loop {
                            match events.try_recv() {
                                Ok(event) => {
                                    if let Some(text) = ours(&event)
                                        && !send(text).await
                                    {
                                        return;
                                    }
                                }
                                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                                Err(_) => return,
                            }
                        }
                    }
                    _ = ticks.tick() => format!("running for {:.0} s", began.elapsed().as_secs_f64()),
                };
                if !send(message).await {
                    return;
                }
            }
        });
        Progress {
            relay: Some((task, finish)),
        }
    }

    /// Ends the relay once it has sent the notifications queued for its call, so that they reach
    /// the client before the call's answer (within [`FLUSH_GUARD`]).
    pub(super) async fn stop(self) {
        if let Some((task, finish)) = self.relay {
            finish.cancel();
            let abort = task.abort_handle();
            if tokio::time::timeout(FLUSH_GUARD, task).await.is_err() {
                abort.abort();
            }
        }
    }
}
