//! How `codemode run` answers a call that needs approval ([`TerminalApprover`]): at a terminal it
//! asks the user there (`/dev/tty`, so that a script read from standard input does not get in
//! the way); without one it follows `--approve` ([`ApprovePolicy`]).

use std::io::{BufRead, IsTerminal, Write};

use async_trait::async_trait;
use codemode_session::{Approval, ApprovalRequest, UserChannel};

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

/// Asks on the controlling terminal; `None` when there is none to ask on (standard error is
/// not a terminal, or no terminal can be opened).
fn ask_on_terminal(message: &str) -> Option<Approval> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut writer = terminal.try_clone().ok()?;
    let _ = write!(
        writer,
        "\n{message}\nAllow? [o] once, [s] this tool for the rest of the session, [N] deny: "
    );
    let _ = writer.flush();
    let mut line = String::new();
    std::io::BufReader::new(terminal)
        .read_line(&mut line)
        .ok()?;
    Some(match line.trim().to_ascii_lowercase().as_str() {
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
}
