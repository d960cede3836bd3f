//! How `codemode run` answers a call that needs approval ([`TerminalApprover`]): at a terminal it
//! asks the user there (`/dev/tty`, so that a script read from standard input does not get in
//! the way); without one it follows `--approve` ([`ApprovePolicy`]).
//!
//! A downstream server's form (`elicitation/create`) is answered the same way: at a terminal the
//! user sees its message and the values it proposes (each field's default, SEP-1034) and accepts
//! or declines them; without one, `--approve all` accepts the defaults when every required field
//! has one, and anything else declines. Its URL elicitations, sampling requests and roots have no
//! answer here: declined, refused, and no roots.

use std::io::{BufRead, IsTerminal, Write};

use async_trait::async_trait;
use codemode_session::{Approval, ApprovalRequest, RelayError, RelayedRequest, UserChannel};
use serde_json::{Map, Value, json};

/// What a call that needs approval gets when there is no terminal to ask on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovePolicy {
    /// Never approved.
    Never,
    /// Approved when the tool says it only reads (`readOnlyHint: true`).
    Reads,
    /// Always approved.
    All,
}

impl ApprovePolicy {
    fn name(self) -> &'static str {
        match self {
            ApprovePolicy::Never => "never",
            ApprovePolicy::Reads => "reads",
            ApprovePolicy::All => "all",
        }
    }

    /// The answer without a terminal.
    fn answer(self, request: &ApprovalRequest) -> Approval {
        let read_only = request
            .annotations
            .is_some_and(|annotations| annotations.is_read_only());
        match (self, read_only) {
            (ApprovePolicy::All, _) | (ApprovePolicy::Reads, true) => Approval::AllowOnce,
            (ApprovePolicy::Reads, false) => Approval::Deny {
                by: "--approve reads (there is no terminal to ask on, and the tool is not \
                     read-only; run with --approve all, or allow it in the configuration's \
                     permissions)"
                    .to_owned(),
            },
            (ApprovePolicy::Never, _) => Approval::Deny {
                by: format!("--approve {} (there is no terminal to ask on)", self.name()),
            },
        }
    }
}

/// Asks at the terminal, or follows the policy.
pub struct TerminalApprover {
    policy: ApprovePolicy,
    /// One question at a time on the terminal.
    asking: tokio::sync::Mutex<()>,
}

impl TerminalApprover {
    pub fn new(policy: ApprovePolicy) -> Self {
        TerminalApprover {
            policy,
            asking: tokio::sync::Mutex::new(()),
        }
    }
}

/// The values a form proposes: each field's default. `Err`: a required field has none.
fn defaults_of(schema: &Value) -> Result<Map<String, Value>, RelayError> {
    let mut values = Map::new();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                values.insert(name.clone(), default.clone());
            }
        }
    }
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !values.contains_key(name) {
            return Err(RelayError::new(format!(
                "the required field \"{name}\" has no default"
            )));
        }
    }
    Ok(values)
}

/// Asks on the controlling terminal whether to send `values`; `None` when there is no terminal.
fn confirm_on_terminal(message: &str, values: &Map<String, Value>) -> Option<bool> {
    let shown = serde_json::to_string_pretty(values).unwrap_or_default();
    let question = format!("\n{message}\nThe values proposed:\n{shown}\nSend them? [y/N]: ");
    let answer = read_answer(&question)?;
    Some(matches!(answer.as_str(), "y" | "yes"))
}

/// Writes `question` to the controlling terminal and reads one line, trimmed and lower-cased;
/// `None` when there is none to ask on (standard error is not a terminal, or no terminal can be
/// opened).
fn read_answer(question: &str) -> Option<String> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut writer = terminal.try_clone().ok()?;
    let _ = write!(writer, "{question}");
    let _ = writer.flush();
    let mut line = String::new();
    std::io::BufReader::new(terminal)
        .read_line(&mut line)
        .ok()?;
    Some(line.trim().to_ascii_lowercase())
}

/// Asks on the controlling terminal; `None` when there is none to ask on (standard error is
/// not a terminal, or no terminal can be opened).
fn ask_on_terminal(message: &str) -> Option<Approval> {
    let answer = read_answer(&format!(
        "\n{message}\nAllow? [o] once, [s] this tool for the rest of the session, [N] deny: "
    ))?;
    Some(match answer.as_str() {
        "o" | "once" | "y" | "yes" => Approval::AllowOnce,
        "s" | "session" => Approval::AllowForSession,
        _ => Approval::Deny {
            by: "the user, at the terminal".to_owned(),
        },
    })
}

#[async_trait]
impl UserChannel for TerminalApprover {
    async fn ask_approval(&self, request: &ApprovalRequest) -> Approval {
        let _asking = self.asking.lock().await;
        let message = request.message();
        let asked = tokio::task::spawn_blocking(move || ask_on_terminal(&message))
            .await
            .ok()
            .flatten();
        asked.unwrap_or_else(|| self.policy.answer(request))
    }

    async fn relay(&self, request: RelayedRequest) -> Result<Value, RelayError> {
        let (server, params) = match request {
            RelayedRequest::Elicit { server, params } => (server, params),
            RelayedRequest::ListRoots { .. } => return Ok(json!({"roots": []})),
            other => return Err(RelayError::unsupported(&other)),
        };
        let declined = Ok(json!({"action": "decline"}));
        if params.get("mode").and_then(Value::as_str) == Some("url") {
            return declined;
        }
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let values = match defaults_of(params.get("requestedSchema").unwrap_or(&Value::Null)) {
            Ok(values) => values,
            Err(why) => {
                tracing::info!(server, %why, "declined a form codemode run cannot fill");
                return declined;
            }
        };
        let _asking = self.asking.lock().await;
        let message = format!("The MCP server \"{server}\" asks: {message}");
        let shown = values.clone();
        let confirmed = tokio::task::spawn_blocking(move || confirm_on_terminal(&message, &shown))
            .await
            .ok()
            .flatten()
            .unwrap_or(self.policy == ApprovePolicy::All);
        if confirmed {
            Ok(json!({"action": "accept", "content": values}))
        } else {
            declined
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forms_defaults_are_its_proposed_values_and_a_required_field_without_one_refuses() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"}
        }, "required": ["name"]});
        assert_eq!(
            Value::Object(defaults_of(&schema).unwrap()),
            json!({"name": "John Doe", "age": 30})
        );
        let missing = json!({"properties": {"email": {"type": "string"}}, "required": ["email"]});
        assert!(
            defaults_of(&missing)
                .unwrap_err()
                .message
                .contains("\"email\"")
        );
    }
}
