//! The user of a cell, as a host reaches them ([`UserChannel`]): the questions the gate asks
//! about a call ([`ApprovalRequest`], answered by an [`Approval`]), and the requests a tool's
//! server makes of the user while a cell calls it ([`RelayedRequest`]), passed on to the client
//! that ran the cell.

use async_trait::async_trait;
use codemode_protocol::{CellId, ToolAnnotations};

use crate::permissions::Reason;

/// The most characters of a call's arguments a question shows.
pub const APPROVAL_ARGUMENTS_CHARS: usize = 600;

/// A question to the user about one call a cell wants to make.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The session's id.
    pub session: String,
    /// The cell that made the call.
    pub cell_id: CellId,
    /// The call's id within the cell (`tool-3`).
    pub call_id: String,
    /// The tool's name as cells see it (`github__delete_repo`).
    pub tool: String,
    /// The server (namespace) the tool comes from, if any.
    pub server: Option<String>,
    /// What the tool says of its effects.
    pub annotations: Option<ToolAnnotations>,
    /// The arguments, readable and cut to [`APPROVAL_ARGUMENTS_CHARS`] (never the whole payload).
    pub arguments: String,
    /// Why the user is asked (the rule, or the default).
    pub reason: Reason,
}

impl ApprovalRequest {
    /// The question in a sentence or three, for a form or a terminal prompt.
    pub fn message(&self) -> String {
        let mut message = format!(
            "A script (cell {}) wants to call {}",
            self.cell_id, self.tool
        );
        if let Some(server) = &self.server {
            message.push_str(&format!(" on the server \"{server}\""));
        }
        if let Some(effects) = self
            .annotations
            .and_then(|annotations| annotations.summary())
        {
            message.push_str(&format!(" ({effects})"));
        }
        message.push_str(&format!(
            ", with the arguments:\n{}\nIt asks because of {}.",
            self.arguments, self.reason
        ));
        message
    }
}

/// The user's answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Run this call.
    AllowOnce,
    /// Run this call, and every later call of the same tool in this session without asking.
    AllowForSession,
    /// Refuse the call: a choice to deny, made by a person or a policy.
    Deny {
        /// Who refused it, for the cell's error (`the user`, `--approve reads`).
        by: String,
    },
    /// The question was declined without a choice (MCP elicitation's `decline`). A client that
    /// runs without a person (`codex exec`) declines every question, so nobody may have seen
    /// it; the call is refused, and its error says how to let it run without asking.
    Declined {
        /// Who declined it (`the MCP client "codex-mcp-client"`).
        by: String,
    },
    /// The question was dismissed (MCP elicitation's `cancel`). A client that runs without a
    /// person (`claude -p`) dismisses every question, so nobody may have seen it; the call is
    /// refused, and its error says how to let it run without asking.
    Dismissed {
        /// Who dismissed it (`the MCP client "claude-code"`).
        by: String,
    },
    /// Nobody could be asked (a client without elicitation, no terminal): the call fails closed.
    Unavailable {
        /// Why, for the cell's error.
        why: String,
    },
}

/// How a host reaches the user of a cell (the client that ran it): to ask whether a call may run,
/// and to pass on what a tool's server asks of the user while the cell calls it. Implemented by
/// the MCP server (elicitation, sampling, roots and logging of its client), `codemode run` (the
/// terminal), or an embedder. Only `ask_approval` is required: by default nothing is relayed.
#[async_trait]
pub trait UserChannel: Send + Sync + 'static {
    /// Asks about `request`. Dropped (not awaited) when the cell stops waiting for the call:
    /// whatever was shown to the user may go stale then.
    async fn ask_approval(&self, request: &ApprovalRequest) -> Approval;

    /// Passes on a request a tool's server made while a call of this cell ran
    /// (`elicitation/create`, `sampling/createMessage`, `roots/list`), and returns the user's
    /// answer as the MCP result. The default refuses: this host has no way to ask.
    async fn relay(&self, request: RelayedRequest) -> Result<serde_json::Value, RelayError> {
        Err(RelayError::unsupported(&request))
    }

    /// Passes on a log message a tool's server sent while a call of this cell ran (MCP's
    /// `notifications/message` params), tagged with the server's name. The default drops it.
    fn relay_log(&self, server: &str, message: serde_json::Value) {
        let _ = (server, message);
    }
}

/// A request a tool's server made of the user, as MCP JSON (so that this crate knows no MCP
/// library).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RelayedRequest {
    /// `elicitation/create`: a form or a URL for the user.
    Elicit {
        /// The server that asks.
        server: String,
        /// Its `params`.
        params: serde_json::Value,
    },
    /// `sampling/createMessage`: a completion from the user's model.
    CreateMessage {
        /// The server that asks.
        server: String,
        /// Its `params`.
        params: serde_json::Value,
    },
    /// `roots/list`: the user's roots.
    ListRoots {
        /// The server that asks.
        server: String,
    },
}

impl RelayedRequest {
    /// The MCP method of the request.
    pub fn method(&self) -> &'static str {
        match self {
            RelayedRequest::Elicit { .. } => "elicitation/create",
            RelayedRequest::CreateMessage { .. } => "sampling/createMessage",
            RelayedRequest::ListRoots { .. } => "roots/list",
        }
    }
}

/// Why a relayed request got no answer from the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct RelayError {
    /// What happened, for the server that asked.
    pub message: String,
}

impl RelayError {
    /// A relay that failed for `message`.
    pub fn new(message: impl Into<String>) -> Self {
        RelayError {
            message: message.into(),
        }
    }

    /// This host cannot pass `request` on.
    pub fn unsupported(request: &RelayedRequest) -> Self {
        RelayError::new(format!(
            "codemode cannot pass {} on to its user: the client that runs the script does not \
             support it",
            request.method()
        ))
    }
}

/// A user channel that can ask nobody: every question is answered `Unavailable` with `why`.
#[derive(Debug, Clone)]
pub struct NobodyToAsk(pub String);

#[async_trait]
impl UserChannel for NobodyToAsk {
    async fn ask_approval(&self, _request: &ApprovalRequest) -> Approval {
        Approval::Unavailable {
            why: self.0.clone(),
        }
    }
}
