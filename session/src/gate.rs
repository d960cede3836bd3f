//! The one gate every tool call of a cell passes before it is dispatched ([`Gate::admit`]): the
//! user's [`Permissions`], the tools the user allowed for the session, the cell's budget of calls
//! that are not read-only, and the user's answer when a call must ask ([`UserChannel`], the port a
//! host implements to reach its user: an MCP client's elicitation, a terminal).
//!
//! A call that asks stays pending in its cell while the user is asked (observations show it as
//! waiting for approval); one the gate refuses rejects in the cell with an error saying who
//! refused it and what to change, and nothing reaches the tool. Every ruling is a structured
//! `tracing` event (target `codemode::gate`): the tool, a digest of the arguments, the verdict
//! and who decided.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_cell_actor::{ToolError, ToolInvocation};
use codemode_protocol::{CellId, ToolAnnotations};
use parking_lot::Mutex;

use crate::permissions::{Permissions, Reason, Verdict};
use crate::user::{APPROVAL_ARGUMENTS_CHARS, Approval, ApprovalRequest, UserChannel};

/// A call that waits for the user's answer, as observations show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AwaitingApproval {
    /// The call's id within its cell.
    pub call_id: String,
    /// The tool's name as cells see it.
    pub tool: String,
    /// The arguments, cut as the question shows them.
    pub arguments: String,
    /// How long it has waited.
    pub waited: Duration,
}

/// How the gate ruled on a call, as metrics and traces record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateDecision {
    /// The user's rules (or the tool's annotations) let it run.
    Allowed,
    /// The user was asked and allowed it (once, or for the session).
    AllowedByUser,
    /// The user's rules, or a limit, refused it.
    Denied,
    /// The user was asked and chose to refuse it.
    DeniedByUser,
    /// The question was declined without a choice (perhaps by a client with nobody to show it).
    Declined,
    /// The question was dismissed (perhaps by a client with nobody to show it).
    Dismissed,
    /// It needed the user's approval and nobody could be asked.
    Unanswered,
}

impl GateDecision {
    /// Its name in metrics and traces: `allowed`, `allowed_by_user`, `denied`,
    /// `denied_by_user`, `declined`, `dismissed`, `unanswered`.
    pub fn as_str(self) -> &'static str {
        match self {
            GateDecision::Allowed => "allowed",
            GateDecision::AllowedByUser => "allowed_by_user",
            GateDecision::Denied => "denied",
            GateDecision::DeniedByUser => "denied_by_user",
            GateDecision::Declined => "declined",
            GateDecision::Dismissed => "dismissed",
            GateDecision::Unanswered => "unanswered",
        }
    }
}

/// The gate of one session: its rules, what the user allowed for it, and the calls waiting for
/// an answer.
pub(crate) struct Gate {
    /// The user's rules; replaced whole when the configuration is reloaded.
    permissions: Mutex<Arc<Permissions>>,
    max_writes_per_cell: Option<u64>,
    /// Tools the user allowed for the rest of the session.
    granted: Mutex<HashSet<String>>,
    /// Calls waiting for the user, by cell and call id, with when they started waiting.
    awaiting: Mutex<HashMap<(CellId, String), Waiting>>,
    /// Moves each time a call starts waiting for the user: a holding `wait` returns then.
    asked: tokio::sync::watch::Sender<u64>,
}

/// A call waiting for the user: its tool, its arguments as shown, and since when.
struct Waiting {
    tool: String,
    arguments: String,
    since: Instant,
}

/// What one cell's calls share at the gate: who to ask, and how many writes it made.
pub(crate) struct CellGate {
    pub(crate) user: Option<Arc<dyn UserChannel>>,
    pub(crate) writes: std::sync::atomic::AtomicU64,
}

impl CellGate {
    pub(crate) fn new(user: Option<Arc<dyn UserChannel>>) -> Self {
        CellGate {
            user,
            writes: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

/// Removes a waiting call from the gate's list however its wait ends.
struct AwaitingGuard<'a> {
    gate: &'a Gate,
    key: (CellId, String),
}

impl Drop for AwaitingGuard<'_> {
    fn drop(&mut self) {
        self.gate.awaiting.lock().remove(&self.key);
    }
}

impl Gate {
    pub(crate) fn new(permissions: Arc<Permissions>, max_writes_per_cell: Option<u64>) -> Self {
        Gate {
            permissions: Mutex::new(permissions),
            max_writes_per_cell,
            granted: Mutex::new(HashSet::new()),
            awaiting: Mutex::new(HashMap::new()),
            asked: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Rules the calls made from now on by `permissions` (a reloaded configuration's); what
    /// the user allowed for the session stays allowed.
    pub(crate) fn set_permissions(&self, permissions: Arc<Permissions>) {
        *self.permissions.lock() = permissions;
    }

    /// Changes each time one of the session's calls starts waiting for the user.
    pub(crate) fn asked(&self) -> tokio::sync::watch::Receiver<u64> {
        self.asked.subscribe()
    }

    /// The calls of `cell_id` waiting for the user now.
    pub(crate) fn awaiting(&self, cell_id: &CellId) -> Vec<AwaitingApproval> {
        let mut awaiting: Vec<AwaitingApproval> = self
            .awaiting
            .lock()
            .iter()
            .filter(|((cell, _), _)| cell == cell_id)
            .map(|((_, call_id), waiting)| AwaitingApproval {
                call_id: call_id.clone(),
                tool: waiting.tool.clone(),
                arguments: waiting.arguments.clone(),
                waited: waiting.since.elapsed(),
            })
            .collect();
        awaiting.sort_by_key(|waiting| std::cmp::Reverse(waiting.waited));
        awaiting
    }

    /// Decides on `invocation` of the tool cells call `tool`, which says `annotations` of itself
    /// (`None` when it says nothing, or is no longer listed), asking the cell's user when the
    /// rules say so. `Ok`: dispatch the call. `Err`: the call rejects in the cell with this error.
    pub(crate) async fn admit(
        &self,
        session: &str,
        cell_id: &CellId,
        cell: &CellGate,
        invocation: &ToolInvocation,
        tool: &str,
        annotations: Option<ToolAnnotations>,
    ) -> (GateDecision, Result<(), ToolError>) {
        // The digest is made only for a log that records the ruling.
        let digest = if tracing::enabled!(target: "codemode::gate", tracing::Level::INFO) {
            arguments_digest(invocation)
        } else {
            String::new()
        };
        let ruled = |decision: GateDecision, by: &str| {
            record(session, cell_id, tool, &digest, decision, by)
        };
        let permissions = Arc::clone(&self.permissions.lock());
        let mut ruling = permissions.decide_by_name(tool, annotations);
        if ruling.verdict != Verdict::Deny
            && ruling.verdict != Verdict::Allow
            && self.granted.lock().contains(tool)
        {
            ruling.verdict = Verdict::Allow;
            ruling.reason = Reason::AllowedForSession;
        }
        if ruling.verdict == Verdict::Deny {
            ruled(GateDecision::Denied, &ruling.reason.to_string());
            return (
                GateDecision::Denied,
                Err(ToolError::denied(format!(
                    "tools.{tool} was denied by {} in the permissions of the configuration; nothing \
                 was sent to the tool",
                    ruling.reason
                ))),
            );
        }
        let writes = !annotations.is_some_and(|annotations| annotations.is_read_only());
        if writes && let Some(max) = self.max_writes_per_cell {
            let made = cell
                .writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if made >= max {
                cell.writes
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                ruled(GateDecision::Denied, "--max-writes-per-cell");
                return (
                    GateDecision::Denied,
                    Err(ToolError::denied(format!(
                        "tools.{tool}: this cell has made {made} calls that are not read-only, its \
                     limit (--max-writes-per-cell {max}); nothing was sent to the tool. Do the \
                     rest in another cell, or ask the user to raise the limit"
                    ))),
                );
            }
        }
        let answer = match ruling.verdict {
            Verdict::Ask => {
                let request = ApprovalRequest {
                    session: session.to_owned(),
                    cell_id: cell_id.clone(),
                    call_id: invocation.id.clone(),
                    tool: tool.to_owned(),
                    server: invocation.name.namespace.clone(),
                    annotations,
                    arguments: readable_arguments(invocation),
                    reason: ruling.reason.clone(),
                };
                Some(self.ask(cell, request).await)
            }
            _ => None,
        };
        // A question declined or dismissed without a choice (`how`), by `by`.
        let unseen = |decision: GateDecision, how: &str, by: &str| {
            ruled(decision, &format!("{by}, which {how} the question"));
            (
                decision,
                Some(unseen_refusal(tool, &ruling.reason, by, how, &permissions)),
            )
        };
        let (decision, refusal) = match answer {
            None => {
                // The common path: no string is made for a log that does not record it.
                if tracing::enabled!(target: "codemode::gate", tracing::Level::INFO) {
                    ruled(GateDecision::Allowed, &ruling.reason.to_string());
                }
                (GateDecision::Allowed, None)
            }
            Some(Approval::AllowOnce) => {
                ruled(GateDecision::AllowedByUser, "the user, once");
                (GateDecision::AllowedByUser, None)
            }
            Some(Approval::AllowForSession) => {
                self.granted.lock().insert(tool.to_owned());
                ruled(GateDecision::AllowedByUser, "the user, for the session");
                (GateDecision::AllowedByUser, None)
            }
            Some(Approval::Deny { by }) => {
                ruled(GateDecision::DeniedByUser, &by);
                (
                    GateDecision::DeniedByUser,
                    Some(format!(
                        "tools.{tool} was denied by {by}; nothing was sent to the tool"
                    )),
                )
            }
            Some(Approval::Declined { by }) => unseen(GateDecision::Declined, "declined", &by),
            Some(Approval::Dismissed { by }) => unseen(GateDecision::Dismissed, "dismissed", &by),
            Some(Approval::Unavailable { why }) => {
                ruled(GateDecision::Unanswered, "nobody could be asked");
                (
                    GateDecision::Unanswered,
                    Some(format!(
                        "tools.{tool} needs the user's approval ({} asks), and nobody could be asked: \
                     {why}. Nothing was sent to the tool. To let it run without asking, {}",
                        ruling.reason,
                        permissions.how_to_allow(tool)
                    )),
                )
            }
        };
        match refusal {
            None => (decision, Ok(())),
            Some(message) => {
                if writes && self.max_writes_per_cell.is_some() {
                    cell.writes
                        .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
                (decision, Err(ToolError::denied(message)))
            }
        }
    }

    async fn ask(&self, cell: &CellGate, request: ApprovalRequest) -> Approval {
        let Some(user) = &cell.user else {
            return Approval::Unavailable {
                why: "this session has no way to ask its user".to_owned(),
            };
        };
        // The question is put to the user first (a channel that answers at once, from a policy,
        // never shows as waiting), and only then shown as waiting: whoever reads the waiting
        // calls finds the user's side of the question already there.
        let mut answer = std::pin::pin!(user.ask_approval(&request));
        if let std::task::Poll::Ready(answer) = futures::poll!(answer.as_mut()) {
            return answer;
        }
        let key = (request.cell_id.clone(), request.call_id.clone());
        self.awaiting.lock().insert(
            key.clone(),
            Waiting {
                tool: request.tool.clone(),
                arguments: request.arguments.clone(),
                since: Instant::now(),
            },
        );
        let _guard = AwaitingGuard { gate: self, key };
        self.asked.send_modify(|asked| *asked += 1);
        answer.await
    }
}

/// The error of a call whose question was declined or dismissed (`how`) without a choice: what
/// a client with nobody to show it answers (`codex exec` declines, `claude -p` dismisses), so it
/// says that no one may have seen it, and names the rule that lets the call run unasked.
fn unseen_refusal(
    tool: &str,
    reason: &crate::permissions::Reason,
    by: &str,
    how: &str,
    permissions: &Permissions,
) -> String {
    format!(
        "tools.{tool} was not run: it needs the user's approval ({reason} asks), and the question \
         was {how} by {by} without a choice being made. A client running without a person (CI, `codex \
         exec`, `claude -p`) {how} every question, so no one may have seen it. Nothing was sent \
         to the tool. To let it run without asking, {}",
        permissions.how_to_allow(tool)
    )
}

/// One ruling, as a structured event: the verdict (`allow`, `deny`), the decision that tells how
/// it was reached (`declined`, `dismissed`, `denied_by_user`, ...), and who decided.
fn record(
    session: &str,
    cell_id: &CellId,
    tool: &str,
    digest: &str,
    decision: GateDecision,
    by: &str,
) {
    let verdict = match decision {
        GateDecision::Allowed | GateDecision::AllowedByUser => "allow",
        _ => "deny",
    };
    tracing::info!(
        target: "codemode::gate",
        session,
        %cell_id,
        tool,
        arguments_sha256 = digest,
        verdict,
        decision = decision.as_str(),
        decided_by = by,
        "tool call ruled"
    );
}

/// The first 16 hex digits of the SHA-256 of the call's argument text: enough to tell calls
/// apart in a log, nothing of what they carried.
fn arguments_digest(invocation: &ToolInvocation) -> String {
    let text = invocation.input.as_ref().map_or("", |input| input.as_str());
    let mut digest = crate::digest::sha256_hex(text);
    digest.truncate(16);
    digest
}

/// The arguments as the user reads them: pretty JSON, cut at [`APPROVAL_ARGUMENTS_CHARS`].
fn readable_arguments(invocation: &ToolInvocation) -> String {
    let Some(input) = &invocation.input else {
        return "(none)".to_owned();
    };
    // Large arguments are shown as written (their start), not parsed to be pretty.
    let pretty = (input.as_str().len() <= 64 * 1024)
        .then(|| serde_json::from_str::<serde_json::Value>(input.as_str()).ok())
        .flatten()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| input.as_str().to_owned());
    let total = pretty.chars().count();
    if total <= APPROVAL_ARGUMENTS_CHARS {
        return pretty;
    }
    let cut: String = pretty.chars().take(APPROVAL_ARGUMENTS_CHARS).collect();
    format!("{cut}… ({total} characters in all)")
}
