//! The user's rules for the tools a cell calls ([`Permissions`]): which calls run at once, which
//! ask the user first, which are refused, as plain data read from the user's configuration.
//!
//! A rule is a pattern over the name a cell sees (`github__delete_*`, `fs__*`, `*`; `*` is any
//! run of characters, `?` one). Deciding a call ([`Permissions::decide`]): a `deny` rule that
//! matches wins, then an `ask` rule, then an `allow` rule; with none matching, a tool that says
//! it only reads (`readOnlyHint: true`) runs, and anything else follows the default.

use codemode_protocol::{ToolAnnotations, ToolDefinition};

/// What the gate does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// The call is dispatched.
    Allow,
    /// The user is asked first; the call waits in the cell meanwhile.
    Ask,
    /// The call is refused; nothing reaches the tool.
    Deny,
}

impl Verdict {
    /// The verdict's name as rules spell it: `allow`, `ask`, `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }

    /// The verdict named `name` (`allow`, `ask`, `deny`).
    pub fn parse(name: &str) -> Option<Verdict> {
        match name {
            "allow" => Some(Verdict::Allow),
            "ask" => Some(Verdict::Ask),
            "deny" => Some(Verdict::Deny),
            _ => None,
        }
    }
}

/// Why the gate ruled as it did: the rule that matched, or what applied without one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// A rule of the user's configuration matched (`deny: github__delete_*`).
    Rule {
        /// The list the rule is in.
        list: Verdict,
        /// The pattern as written.
        pattern: String,
    },
    /// No rule matched, and the tool says it only reads (`readOnlyHint: true`).
    ReadOnly,
    /// No rule matched: the default applied.
    Default,
    /// The user allowed this tool for the rest of the session.
    AllowedForSession,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Rule { list, pattern } => {
                write!(f, "the rule \"{}: {pattern}\"", list.as_str())
            }
            Reason::ReadOnly => f.write_str("the tool's readOnlyHint"),
            Reason::Default => f.write_str("the default permission"),
            Reason::AllowedForSession => f.write_str("the user, for this session"),
        }
    }
}

/// The gate's ruling on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ruling {
    /// What happens to the call.
    pub verdict: Verdict,
    /// Why.
    pub reason: Reason,
}

/// A pattern over a tool's name as cells see it: `*` any run of characters, `?` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPattern(String);

impl ToolPattern {
    /// The pattern `text`.
    pub fn new(text: impl Into<String>) -> Self {
        ToolPattern(text.into())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        wildcard_match(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative wildcard matching (`*`, `?`), linear in practice and never recursive: a pattern
/// from a config file cannot make it blow up.
fn wildcard_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The user's rules for the calls cells make.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Permissions {
    /// Calls that run without asking.
    pub allow: Vec<ToolPattern>,
    /// Calls that ask the user first.
    pub ask: Vec<ToolPattern>,
    /// Calls that are refused.
    pub deny: Vec<ToolPattern>,
    /// What a call no rule matches gets (a read-only tool is allowed first).
    pub default: Verdict,
    /// Where these rules are written, if in a file: an error that tells the user how to let a
    /// call run names the line to add and the file it goes in.
    pub written_in: Option<RulesFile>,
}

/// The file a user's rules are written in, and its syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RulesFile {
    /// A JSON configuration: `"permissions": {"allow": [...]}` at its top level.
    Json {
        /// The file's path, as the user would open it.
        path: String,
    },
    /// A TOML configuration (codex's `config.toml`): `allow = [...]` in its `[permissions]`
    /// table.
    Toml {
        /// The file's path, as the user would open it.
        path: String,
    },
}

impl Default for Permissions {
    /// Every call runs: an embedder's own tools, trusted by the embedder. A server that reads a
    /// user's configuration uses [`Permissions::ask_by_default`].
    fn default() -> Self {
        Permissions::allow_all()
    }
}

impl Permissions {
    /// No rules, every call allowed.
    pub fn allow_all() -> Self {
        Permissions {
            allow: Vec::new(),
            ask: Vec::new(),
            deny: Vec::new(),
            default: Verdict::Allow,
            written_in: None,
        }
    }

    /// No rules: read-only tools run, every other call asks (the default of a configuration).
    pub fn ask_by_default() -> Self {
        Permissions {
            default: Verdict::Ask,
            ..Permissions::allow_all()
        }
    }

    /// These permissions with `default` for calls no rule matches.
    pub fn with_default(mut self, default: Verdict) -> Self {
        self.default = default;
        self
    }

    /// These permissions, written in `file`.
    pub fn with_file(mut self, file: RulesFile) -> Self {
        self.written_in = Some(file);
        self
    }

    /// What the user does to let calls of `tool` run without asking: the rule to add, and where
    /// (`add "demo__note" to "permissions": {"allow": [...]} in /home/u/.mcp.json`).
    pub fn how_to_allow(&self, tool: &str) -> String {
        match &self.written_in {
            Some(RulesFile::Json { path }) => {
                format!("add \"{tool}\" to \"permissions\": {{\"allow\": [...]}} in {path}")
            }
            Some(RulesFile::Toml { path }) => {
                format!("add \"{tool}\" to allow = [...] in the [permissions] table of {path}")
            }
            None => format!(
                "add \"{tool}\" to \"permissions\": {{\"allow\": [...]}} in codemode's \
                 configuration (--config FILE)"
            ),
        }
    }

    /// These permissions with one more rule: `pattern` in the `verdict` list.
    pub fn with_rule(mut self, verdict: Verdict, pattern: impl Into<String>) -> Self {
        let pattern = ToolPattern::new(pattern);
        match verdict {
            Verdict::Allow => self.allow.push(pattern),
            Verdict::Ask => self.ask.push(pattern),
            Verdict::Deny => self.deny.push(pattern),
        }
        self
    }

    /// The ruling on a call of `tool`: deny, then ask, then allow rules, then the tool's
    /// `readOnlyHint`, then the default.
    pub fn decide(&self, tool: &ToolDefinition) -> Ruling {
        self.decide_by_name(&tool.global_name(), tool.annotations)
    }

    /// The ruling on a call of the tool cells call `name`, which says `annotations` of itself.
    pub fn decide_by_name(&self, name: &str, annotations: Option<ToolAnnotations>) -> Ruling {
        for (verdict, list) in [
            (Verdict::Deny, &self.deny),
            (Verdict::Ask, &self.ask),
            (Verdict::Allow, &self.allow),
        ] {
            if let Some(pattern) = list.iter().find(|pattern| pattern.matches(name)) {
                return Ruling {
                    verdict,
                    reason: Reason::Rule {
                        list: verdict,
                        pattern: pattern.as_str().to_owned(),
                    },
                };
            }
        }
        if annotations.is_some_and(|annotations| annotations.is_read_only()) {
            return Ruling {
                verdict: Verdict::Allow,
                reason: Reason::ReadOnly,
            };
        }
        Ruling {
            verdict: self.default,
            reason: Reason::Default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_protocol::{ToolAnnotations, ToolName};

    fn tool(namespace: &str, name: &str, annotations: Option<ToolAnnotations>) -> ToolDefinition {
        ToolDefinition::function(ToolName::namespaced(namespace, name), "")
            .with_annotations(annotations)
    }

    #[test]
    fn patterns_match_the_whole_name_with_stars_and_question_marks() {
        let cases = [
            ("*", "anything", true),
            ("github__delete_*", "github__delete_repo", true),
            ("github__delete_*", "github__create_repo", false),
            ("fs__*", "fs__read", true),
            ("fs__*", "xfs__read", false),
            ("*__read_?ile", "fs__read_file", true),
            ("*__read_?ile", "fs__read_files", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("", "", true),
            ("**", "", true),
        ];
        for (pattern, name, expected) in cases {
            assert_eq!(
                ToolPattern::new(pattern).matches(name),
                expected,
                "{pattern} ~ {name}"
            );
        }
        // Many stars against a long name that does not match: still quick.
        let long = "a".repeat(10_000);
        assert!(!ToolPattern::new("*a*a*a*a*a*a*a*b").matches(&long));
    }

    #[test]
    fn how_to_allow_names_the_rule_and_the_file_in_its_syntax() {
        let json = Permissions::ask_by_default().with_file(RulesFile::Json {
            path: "/home/u/.mcp.json".to_owned(),
        });
        assert_eq!(
            json.how_to_allow("demo__note"),
            "add \"demo__note\" to \"permissions\": {\"allow\": [...]} in /home/u/.mcp.json"
        );
        let toml = Permissions::ask_by_default().with_file(RulesFile::Toml {
            path: "/home/u/.codex/config.toml".to_owned(),
        });
        assert_eq!(
            toml.how_to_allow("demo__note"),
            "add \"demo__note\" to allow = [...] in the [permissions] table of \
             /home/u/.codex/config.toml"
        );
        assert!(
            Permissions::ask_by_default()
                .how_to_allow("demo__note")
                .ends_with("in codemode's configuration (--config FILE)")
        );
    }

    #[test]
    fn deny_wins_over_ask_and_ask_over_allow() {
        let permissions = Permissions::ask_by_default()
            .with_rule(Verdict::Allow, "*")
            .with_rule(Verdict::Ask, "github__*")
            .with_rule(Verdict::Deny, "github__delete_*");
        let ruling = |name: &str| permissions.decide(&tool("github", name, None));
        assert_eq!(ruling("delete_repo").verdict, Verdict::Deny);
        assert_eq!(
            ruling("delete_repo").reason.to_string(),
            "the rule \"deny: github__delete_*\""
        );
        assert_eq!(ruling("create_issue").verdict, Verdict::Ask);
        assert_eq!(
            permissions.decide(&tool("fs", "write_file", None)).verdict,
            Verdict::Allow
        );
    }

    #[test]
    fn read_only_tools_run_unless_a_rule_says_otherwise_and_the_rest_follow_the_default() {
        let read = tool("db", "query", Some(ToolAnnotations::read_only()));
        let write = tool("db", "drop_table", Some(ToolAnnotations::writes(true)));
        let unannotated = tool("db", "exec", None);
        let permissions = Permissions::ask_by_default();
        assert_eq!(
            permissions.decide(&read),
            Ruling {
                verdict: Verdict::Allow,
                reason: Reason::ReadOnly
            }
        );
        assert_eq!(permissions.decide(&write).verdict, Verdict::Ask);
        assert_eq!(permissions.decide(&unannotated).verdict, Verdict::Ask);
        assert_eq!(permissions.decide(&unannotated).reason, Reason::Default);
        let asked = Permissions::ask_by_default().with_rule(Verdict::Ask, "db__query");
        assert_eq!(asked.decide(&read).verdict, Verdict::Ask);
        let denied = Permissions::allow_all().with_default(Verdict::Deny);
        assert_eq!(denied.decide(&read).verdict, Verdict::Allow);
        assert_eq!(denied.decide(&write).verdict, Verdict::Deny);
        assert_eq!(
            Permissions::default().decide(&write).verdict,
            Verdict::Allow
        );
    }
}
