//! Asking the user of an MCP client about a cell's call that needs approval
//! ([`ClientApprover`]): an `elicitation/create` form naming the tool, its server, its effects
//! and its arguments, with the choices "allow once", "allow this tool for the rest of the
//! session" and "deny". A client that did not declare elicitation cannot be asked: the call
//! fails closed, and the cell's error says which rule would let it run.

use async_trait::async_trait;
use codemode_session::{Approval, ApprovalRequest, Approver};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

/// The answer the form's one field takes, and its choices.
const DECISION: &str = "decision";
const ALLOW_ONCE: &str = "allow_once";
const ALLOW_SESSION: &str = "allow_session";
const DENY: &str = "deny";

/// Asks the user through the client that ran the cell.
pub(super) struct ClientApprover {
    peer: Peer<RoleServer>,
}

impl ClientApprover {
    pub(super) fn new(peer: Peer<RoleServer>) -> Self {
        ClientApprover { peer }
    }

    /// Whether the client said it can show an elicitation form.
    fn can_ask(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| info.capabilities.elicitation.is_some())
    }
}

/// The form: one required choice, titled for the user.
fn form() -> ElicitationSchema {
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

#[async_trait]
impl Approver for ClientApprover {
    async fn ask(&self, request: &ApprovalRequest) -> Approval {
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
                        by: "the user".to_owned(),
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
            ElicitationAction::Decline => Approval::Deny {
                by: "the user".to_owned(),
            },
            // Cancel, or an action this server does not know: not a yes.
            _ => Approval::Deny {
                by: "the user (who dismissed the question)".to_owned(),
            },
        }
    }
}
