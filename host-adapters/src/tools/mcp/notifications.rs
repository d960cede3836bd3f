//! What a downstream server tells the client unasked: that its tools changed (the provider's
//! tools version counts up) and the progress of a call, routed by progress token to the call's
//! [`ToolProgress`] as a line a cell's watchers read.

use codemode_session::{RelayError, RelayedRequest, ToolProgress};

use super::user::UserRoutes;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RoleClient;

/// The client side of a connection: counts the server's `notifications/tools/list_changed`, and
/// hands its progress notifications to the calls they belong to.
#[derive(Debug, Clone)]
pub(super) struct ListWatcher {
    pub(super) version: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub(super) namespace: String,
    pub(super) progress: ProgressRoutes,
    /// The users of the calls in flight: where the server's requests of the user go.
    pub(super) users: UserRoutes,
}

/// The calls in flight that asked for progress, by their progress token: where each one's
/// progress goes, and the tool's name for the message.
pub(super) type ProgressRoutes = std::sync::Arc<
    parking_lot::Mutex<
        std::collections::HashMap<rmcp::model::NumberOrString, (ToolProgress, String)>,
    >,
>;

// Sampling, roots and logging are deprecated by SEP-2577 and still what servers send.
#[allow(deprecated)]
impl rmcp::ClientHandler for ListWatcher {
    fn get_info(&self) -> ClientConfig {
        // Declares the tasks extension: a server may answer a call with a task to poll. And what
        // a server may ask of the user, which is passed on to the user of the cell that calls it.
        let mut capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {"listChanged": true}
        }))
        .expect("the client's capabilities are valid");
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

    fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> impl std::future::Future<Output = Result<rmcp::model::ElicitResult, rmcp::ErrorData>> + Send + '_
    {
        let server = self.namespace.clone();
        async move {
            let params = to_json(&request)?;
            let answer = self
                .users
                .relay(RelayedRequest::Elicit { server, params })
                .await;
            from_relay(answer)
        }
    }

    fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> impl std::future::Future<Output = Result<rmcp::model::CreateMessageResult, rmcp::ErrorData>>
    + Send
    + '_ {
        let server = self.namespace.clone();
        async move {
            let params = to_json(&params)?;
            let answer = self
                .users
                .relay(RelayedRequest::CreateMessage { server, params })
                .await;
            from_relay(answer)
        }
    }

    fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> impl std::future::Future<Output = Result<rmcp::model::ListRootsResult, rmcp::ErrorData>>
    + Send
    + '_ {
        let server = self.namespace.clone();
        async move {
            match self.users.relay(RelayedRequest::ListRoots { server }).await {
                Ok(answer) => from_relay(Ok(answer)),
                // No one user to ask: no roots, as a client without roots would say.
                Err(error) => {
                    tracing::debug!(server = %self.namespace, %error, "roots/list answered with no roots");
                    Ok(rmcp::model::ListRootsResult::default())
                }
            }
        }
    }

    fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        match (self.users.sole_user(), serde_json::to_value(&params)) {
            (Ok(user), Ok(message)) => user.relay_log(&self.namespace, message),
            _ => {
                tracing::debug!(server = %self.namespace, "a log message of the server, with no one user to pass it to")
            }
        }
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

/// A request's params as JSON, for the session's `UserChannel`.
fn to_json(params: &impl serde::Serialize) -> Result<serde_json::Value, rmcp::ErrorData> {
    serde_json::to_value(params)
        .map_err(|error| rmcp::ErrorData::internal_error(error.to_string(), None))
}

/// The user's answer as the MCP result the server expects, or the reason there is none.
fn from_relay<T: serde::de::DeserializeOwned>(
    answer: Result<serde_json::Value, RelayError>,
) -> Result<T, rmcp::ErrorData> {
    let answer = answer.map_err(|error| rmcp::ErrorData::internal_error(error.message, None))?;
    serde_json::from_value(answer).map_err(|error| {
        rmcp::ErrorData::internal_error(
            format!(
                "the user's client answered with something that is not the expected result: {error}"
            ),
            None,
        )
    })
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
