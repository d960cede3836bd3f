//! What a downstream server tells the client unasked: that its tools changed (the provider's
//! tools version counts up) and the progress of a call, routed by progress token to the call's
//! [`ToolProgress`] as a line a cell's watchers read.

use codemode_session::ToolProgress;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RoleClient;

/// The client side of a connection: counts the server's `notifications/tools/list_changed`, and
/// hands its progress notifications to the calls they belong to.
#[derive(Debug, Clone)]
pub(super) struct ListWatcher {
    pub(super) version: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub(super) namespace: String,
    pub(super) progress: ProgressRoutes,
}

/// The calls in flight that asked for progress, by their progress token: where each one's
/// progress goes, and the tool's name for the message.
pub(super) type ProgressRoutes = std::sync::Arc<
    parking_lot::Mutex<
        std::collections::HashMap<rmcp::model::NumberOrString, (ToolProgress, String)>,
    >,
>;

impl rmcp::ClientHandler for ListWatcher {
    fn get_info(&self) -> ClientConfig {
        // Declares the tasks extension: a server may answer a call with a task to poll.
        let mut capabilities = ClientCapabilities::default();
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                Default::default(),
            );
        // What `initialize` offers a server of an older revision: the newest one that has
        // `initialize` (a 2026-07-28 server is reached with `server/discover` instead).
        ClientConfig::new(
            capabilities,
            Implementation::new("codemode", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
    }

    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        tracing::info!(server = %self.namespace, "the MCP server's tools changed; they are listed again for the next cell");
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        let route = self.progress.lock().get(&params.progress_token.0).cloned();
        if let Some((progress, tool)) = route {
            progress.report(progress_text(
                &tool,
                params.progress,
                params.total,
                params.message,
            ));
        }
        std::future::ready(())
    }
}

/// A downstream progress notification as the cell's watchers read it:
/// `tools.<tool>: <progress>[/<total>][ <message>]`.
pub(super) fn progress_text(
    tool: &str,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
) -> String {
    let number = |value: f64| {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            format!("{}", value as i64)
        } else {
            format!("{value}")
        }
    };
    let mut text = format!("tools.{tool}: {}", number(progress));
    if let Some(total) = total {
        text.push('/');
        text.push_str(&number(total));
    }
    if let Some(message) = message.filter(|message| !message.trim().is_empty()) {
        text.push(' ');
        text.push_str(&message);
    }
    text
}

/// Routes a call's progress notifications while it is in flight.
pub(super) struct ProgressRoute {
    pub(super) routes: ProgressRoutes,
    pub(super) token: rmcp::model::NumberOrString,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock().remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_the_tool_its_count_and_its_message() {
        assert_eq!(
            progress_text("fs__copy", 1.0, Some(4.0), Some("copying".to_owned())),
            "tools.fs__copy: 1/4 copying"
        );
        assert_eq!(progress_text("x", 0.5, None, None), "tools.x: 0.5");
        assert_eq!(
            progress_text("x", 2.0, None, Some("  ".to_owned())),
            "tools.x: 2"
        );
    }
}
