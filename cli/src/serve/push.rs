//! What the server tells a client unprompted: completion push (a cell that finished while nobody
//! waited on it), as MCP log messages at the level the client set; and that the tools `exec`
//! declares changed (`notifications/tools/list_changed`).

use std::sync::Arc;

use codemode_session::{Session, SessionEvent};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

/// Completion push: tells the client about cells that finish while nobody waits on them, for as
/// long as the session lives.
pub(super) fn push_completions(session: &Session, peer: Peer<RoleServer>, threshold: LogThreshold) {
    let mut events = session.subscribe();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let SessionEvent::CellFinished {
                cell_id,
                error_text,
            } = event
            {
                let status = if error_text.is_some() {
                    "failed"
                } else {
                    "completed"
                };
                let message = format!(
                    "Cell {cell_id} {status} in the background; call wait with cell_id \"{cell_id}\" for its output."
                );
                if push_log(
                    &peer,
                    &threshold,
                    json!({"cell_id": cell_id, "status": status, "message": message}),
                )
                .await
                .is_err()
                {
                    break;
                }
            }
        }
    });
}

/// How often a client's tools are looked at for a change.
const TOOL_CHANGES_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// How often a client's watcher looks whether the client has gone.
const CLIENT_GONE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The changes of the tools `exec` declares (a downstream server that answered after the
/// startup window, one that came back, a reloaded configuration), as one client sees them. The
/// downstream servers' changes only count a version up, so it is looked at now and then: a
/// client costs a timer, not a task per downstream server.
pub(super) struct ToolChanges {
    tools: Arc<dyn codemode_session::ToolProvider>,
    seen: u64,
    look: tokio::time::Interval,
}

impl ToolChanges {
    /// Changes from now on.
    pub(super) fn new(tools: Arc<dyn codemode_session::ToolProvider>) -> Self {
        let seen = tools.tools_version();
        let mut look = tokio::time::interval(TOOL_CHANGES_CHECK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ToolChanges { tools, seen, look }
    }

    /// Returns at the next change.
    pub(super) async fn next(&mut self) {
        loop {
            self.look.tick().await;
            let now = self.tools.tools_version();
            if now != self.seen {
                self.seen = now;
                return;
            }
        }
    }
}

/// Tells the client of an MCP session each time the tools `exec` declares change, until the
/// client is gone or `stop` is cancelled.
pub(super) fn announce_tool_changes(
    tools: Arc<dyn codemode_session::ToolProvider>,
    peer: Peer<RoleServer>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut changes = ToolChanges::new(tools);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = changes.next() => {
                    if let Err(error) = peer.notify_tool_list_changed().await {
                        tracing::debug!(%error, "cannot tell the client that the tools changed");
                        return;
                    }
                }
                // A client that went away while the tools stayed the same ends it too.
                () = tokio::time::sleep(CLIENT_GONE_CHECK_EVERY) => {
                    if peer.is_transport_closed() {
                        return;
                    }
                }
            }
        }
    });
}

#[allow(deprecated)]
/// Sends a log message (at level `info`) to the client, unless it asked for more severe ones
/// only. MCP logging is deprecated in the SDK, but it is still the one standard way for a server
/// to tell a client something unprompted.
pub(super) async fn push_log(
    peer: &Peer<RoleServer>,
    threshold: &LogThreshold,
    data: Value,
) -> Result<(), rmcp::ServiceError> {
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
    if !threshold.allows(LoggingLevel::Info) {
        return Ok(());
    }
    let mut message = LoggingMessageNotificationParam::new(LoggingLevel::Info, data);
    message.logger = Some("codemode".to_owned());
    peer.notify_logging_message(message).await
}

/// The least severe level of log message one MCP session's client wants, as `logging/setLevel`
/// set it (every level until it does, as the specification leaves it to the server). Shared
/// between the handler and the tasks that push messages to that client.
#[derive(Clone, Default)]
pub(super) struct LogThreshold(Arc<std::sync::atomic::AtomicU8>);

#[allow(deprecated)]
impl LogThreshold {
    /// Messages at `level` and above are sent from now on.
    pub(super) fn set(&self, level: rmcp::model::LoggingLevel) {
        self.0
            .store(level as u8, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a message at `level` is sent.
    pub(super) fn allows(&self, level: rmcp::model::LoggingLevel) -> bool {
        level as u8 >= self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}
