//! Progress notifications for a call that waits on a cell: the cell's `notify` messages and its
//! tools' progress, sent while the call waits.

// The server's parts share its imports and one another's items.
use super::*;

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
    /// Those of this cell.
    Cell(String),
}

/// Progress notifications for one waiting call, when the client gave a progress token.
pub(super) struct Progress {
    pub(super) task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub(super) fn start(
        context: &RequestContext<RoleServer>,
        session: &Session,
        watched: Watched,
    ) -> Self {
        let Some(token) = context.meta.get_progress_token() else {
            return Progress { task: None };
        };
        let peer = context.peer.clone();
        let mut events = session.subscribe();
        let began = Instant::now();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
            ticks.tick().await;
            let mut step = 0.0;
            loop {
                let message = tokio::select! {
                    _ = ticks.tick() => format!("running for {:.0} s", began.elapsed().as_secs_f64()),
                    event = events.recv() => match event {
                        Ok(SessionEvent::Notification { cell_id, call_id, text }) => {
                            let ours = match &watched {
                                Watched::Call(id) => *id == call_id,
                                Watched::Cell(id) => *id == cell_id,
                            };
                            if !ours {
                                continue;
                            }
                            text
                        }
                        Ok(_) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    },
                };
                step += 1.0;
                let notification =
                    ProgressNotificationParam::new(token.clone(), step).with_message(message);
                if peer.notify_progress(notification).await.is_err() {
                    return;
                }
            }
        });
        Progress { task: Some(task) }
    }

    pub(super) fn stop(self) {
        if let Some(task) = self.task {
            task.abort();
        }
    }
}
