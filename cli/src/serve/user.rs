//! The user of a cell as the MCP client that ran it reaches them ([`ClientUser`]):
//! - a call that needs approval asks with an `elicitation/create` form naming the tool, its
//!   server, its effects and its arguments, with the choices "allow once", "allow this tool for
//!   the rest of the session" and "deny"; a client that did not declare elicitation cannot be
//!   asked, and the call fails closed;
//! - what a downstream server asks of the user while the cell calls it is passed on:
//!   `elicitation/create` (form or URL, the message saying which server asks),
//!   `sampling/createMessage` when the client declared sampling, `roots/list` with the client's
//!   roots (asked once per MCP session, again after `notifications/roots/list_changed`), and its
//!   log messages at the client's `logging/setLevel` threshold, under the server's name. Each is
//!   refused, saying why, when the client did not declare what it needs.

use std::sync::Arc;

use async_trait::async_trait;
use codemode_session::{Approval, ApprovalRequest, RelayError, RelayedRequest, UserChannel};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use super::push::LogThreshold;
use super::questions::Questions;

/// The client's roots, once asked (per MCP session); forgotten when the client says they
/// changed.
pub(super) type RootsCache = Arc<tokio::sync::Mutex<Option<Value>>>;

/// The answer the form's one field takes, and its choices.
const DECISION: &str = "decision";
const ALLOW_ONCE: &str = "allow_once";
const ALLOW_SESSION: &str = "allow_session";
const DENY: &str = "deny";

/// The user of a cell, through the client that ran it.
pub(super) struct ClientUser {
    peer: Peer<RoleServer>,
    /// What the client declared it can do, as its request said.
    capabilities: Option<rmcp::model::ClientCapabilities>,
    log_threshold: LogThreshold,
    roots: RootsCache,
    /// For a 2026-07-28 client: where questions wait for its retry (it takes no requests).
    retries: Option<Arc<Questions>>,
    /// The client as a cell's error names it ([`client_named`]).
    client: String,
}

impl ClientUser {
    pub(super) fn new(
        peer: Peer<RoleServer>,
        capabilities: Option<rmcp::model::ClientCapabilities>,
        log_threshold: LogThreshold,
        roots: RootsCache,
        client: String,
    ) -> Self {
        ClientUser {
            peer,
            capabilities,
            log_threshold,
            roots,
            retries: None,
            client,
        }
    }

    /// This user asking through `questions`, answered by the client's retries (a 2026-07-28
    /// client, which takes no requests from the server).
    pub(super) fn answering_by_retry(mut self, questions: Arc<Questions>) -> Self {
        self.retries = Some(questions);
        self
    }

    /// What the client declared it can do (as its request said, or its `initialize`: the
    /// request context's `client_capabilities`).
    fn capabilities(&self) -> Option<&rmcp::model::ClientCapabilities> {
        self.capabilities.as_ref()
    }

    /// Whether the client said it can show an elicitation form.
    fn can_ask(&self) -> bool {
        self.capabilities()
            .is_some_and(|capabilities| capabilities.elicitation.is_some())
    }

    /// A downstream server's `elicitation/create`, shown as that server's.
    async fn elicit(&self, server: &str, params: Value) -> Result<Value, RelayError> {
        let elicitation = self
            .capabilities()
            .and_then(|capabilities| capabilities.elicitation.clone())
            .ok_or_else(|| {
                RelayError::new("the MCP client of this script did not declare elicitation")
            })?;
        let mut params: ElicitRequestParams = serde_json::from_value(params)
            .map_err(|error| RelayError::new(format!("not an elicitation request: {error}")))?;
        match &mut params {
            ElicitRequestParams::FormElicitationParams { message, .. } => {
                *message = format!("The MCP server \"{server}\" asks: {message}");
            }
            ElicitRequestParams::UrlElicitationParams { message, .. } => {
                if elicitation.url.is_none() {
                    return Err(RelayError::new(
                        "the MCP client of this script does not take URL elicitations",
                    ));
                }
                *message = format!("The MCP server \"{server}\" asks: {message}");
            }
            _ => {
                return Err(RelayError::new(
                    "codemode does not know this kind of elicitation",
                ));
            }
        }
        let answer = self
            .peer
            .create_elicitation(params)
            .await
            .map_err(|error| RelayError::new(format!("the client did not answer: {error}")))?;
        serde_json::to_value(answer).map_err(|error| RelayError::new(error.to_string()))
    }

    /// A downstream server's `sampling/createMessage`.
    #[allow(deprecated)] // Sampling is deprecated by SEP-2577, and still what servers send.
    async fn create_message(&self, params: Value) -> Result<Value, RelayError> {
        if self
            .capabilities()
            .is_none_or(|capabilities| capabilities.sampling.is_none())
        {
            return Err(RelayError::new(
                "the MCP client of this script did not declare sampling, so codemode cannot ask \
                 its model",
            ));
        }
        let params: rmcp::model::CreateMessageRequestParams = serde_json::from_value(params)
            .map_err(|error| RelayError::new(format!("not a sampling request: {error}")))?;
        let answer = self
            .peer
            .create_message(params)
            .await
            .map_err(|error| RelayError::new(format!("the client did not answer: {error}")))?;
        serde_json::to_value(answer).map_err(|error| RelayError::new(error.to_string()))
    }

    /// The client's roots: asked once per MCP session, again after they changed.
    #[allow(deprecated)] // Roots are deprecated by SEP-2577, and still what servers ask for.
    async fn roots(&self) -> Result<Value, RelayError> {
        if self
            .capabilities()
            .is_none_or(|capabilities| capabilities.roots.is_none())
        {
            return Ok(json!({"roots": []}));
        }
        let mut cached = self.roots.lock().await;
        if let Some(roots) = cached.as_ref() {
            return Ok(roots.clone());
        }
        let answer = self
            .peer
            .list_roots()
            .await
            .map_err(|error| RelayError::new(format!("the client did not answer: {error}")))?;
        let roots =
            serde_json::to_value(answer).map_err(|error| RelayError::new(error.to_string()))?;
        *cached = Some(roots.clone());
        Ok(roots)
    }
}

/// The form: one required choice, titled for the user.
pub(super) fn form() -> ElicitationSchema {
    let schema = json!({
        "type": "object",
        "properties": {
            DECISION: {
                "type": "string",
                "title": "Decision",
                "oneOf": [
                    {"const": ALLOW_ONCE, "title": "Allow once"},
                    {"const": ALLOW_SESSION, "title": "Allow this tool for the rest of the session"},
                    {"const": DENY, "title": "Deny"}
                ]
            }
        },
        "required": [DECISION]
    });
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    ElicitationSchema::from_json_schema(schema).expect("the approval form is a valid schema")
}

/// The user's answer to the approval form, as an [`Approval`]; `client` is who answered (see
/// [`client_named`]). Only a choice of "Deny" is a user's refusal: a form declined or dismissed
/// without a choice is what a client with nobody to show it answers, and is told apart.
pub(super) fn approval_of(answer: &rmcp::model::ElicitResult, client: &str) -> Approval {
    match answer.action {
        ElicitationAction::Accept => {
            let decision = answer
                .content
                .as_ref()
                .and_then(|content| content.get(DECISION))
                .and_then(Value::as_str);
            match decision {
                Some(ALLOW_ONCE) => Approval::AllowOnce,
                Some(ALLOW_SESSION) => Approval::AllowForSession,
                Some(DENY) => Approval::Deny {
                    by: "the user, who chose \"Deny\"".to_owned(),
                },
                // Anything else is not a yes.
                other => Approval::Deny {
                    by: format!(
                        "the user (an answer that is not one of the choices: {})",
                        other.unwrap_or("none")
                    ),
                },
            }
        }
        ElicitationAction::Decline => Approval::Declined {
            by: client.to_owned(),
        },
        // Cancel, or an action this server does not know: not a yes.
        _ => Approval::Dismissed {
            by: client.to_owned(),
        },
    }
}

/// The client as a cell's error names it: `the MCP client "codex-mcp-client"` (the name the
/// request says it has, or it gave when it initialised: `RequestContext::client_info`; cut and
/// kept printable), or `the MCP client`.
pub(super) fn client_named(client: Option<&rmcp::model::Implementation>) -> String {
    let name = client.map(|info| {
        info.name
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect::<String>()
    });
    match name {
        Some(name) if !name.trim().is_empty() => format!("the MCP client \"{name}\""),
        _ => "the MCP client".to_owned(),
    }
}

#[async_trait]
impl UserChannel for ClientUser {
    async fn ask_approval(&self, request: &ApprovalRequest) -> Approval {
        if let Some(questions) = self.retries.as_ref().filter(|_| self.can_ask()) {
            // Asked in the result of the client's `exec` or `wait`, answered by its retry.
            let (_asked, heard) = questions.ask(request);
            return heard.await.unwrap_or(Approval::Unavailable {
                why: "the question was withdrawn before the client answered".to_owned(),
            });
        }
        if !self.can_ask() {
            return Approval::Unavailable {
                why: "the MCP client did not declare the elicitation capability, so codemode \
                      cannot ask its user"
                    .to_owned(),
            };
        }
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: request.message(),
            requested_schema: form(),
        };
        let answer = match self.peer.create_elicitation(params).await {
            Ok(answer) => answer,
            Err(error) => {
                return Approval::Unavailable {
                    why: format!("asking the MCP client's user failed ({error})"),
                };
            }
        };
        approval_of(&answer, &self.client)
    }

    async fn relay(&self, request: RelayedRequest) -> Result<Value, RelayError> {
        match request {
            RelayedRequest::Elicit { server, params } => self.elicit(&server, params).await,
            RelayedRequest::CreateMessage { params, .. } => self.create_message(params).await,
            RelayedRequest::ListRoots { .. } => self.roots().await,
            other => Err(RelayError::unsupported(&other)),
        }
    }

    #[allow(deprecated)] // Logging is deprecated by SEP-2577, and still what servers send.
    fn relay_log(&self, server: &str, message: Value) {
        let Ok(mut message) =
            serde_json::from_value::<rmcp::model::LoggingMessageNotificationParam>(message)
        else {
            return;
        };
        if !self.log_threshold.allows(message.level) {
            return;
        }
        // Under the server's name, so the user knows whose message it is.
        message.logger = Some(match message.logger.take() {
            Some(logger) => format!("{server}/{logger}"),
            None => server.to_owned(),
        });
        let peer = self.peer.clone();
        tokio::spawn(async move {
            if let Err(error) = peer.notify_logging_message(message).await {
                tracing::debug!(%error, "cannot pass a downstream log message on to the client");
            }
        });
    }
}
