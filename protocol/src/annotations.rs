//! What a tool says of its own effects: MCP's tool annotations (`readOnlyHint`,
//! `destructiveHint`, `idempotentHint`, `openWorldHint`), kept from the listing to the cell's
//! view and the gate that decides on each call.
//!
//! JSON shape, as MCP spells it (absent hints are omitted):
//! `{"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}`.
//!
//! They are hints from the tool's server, not guarantees: a server that lies about them fools
//! whatever trusts them (`SECURITY.md` says what the gate does with them).

use serde::{Deserialize, Serialize};

/// A tool's own hints about its effects, as its MCP server declared them; each `None` when the
/// server said nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolAnnotations {
    /// The tool does not change its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// A change it makes may destroy something (meaningful when not read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments does nothing more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// It reaches an open world (the web, other people's systems), not a closed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// Annotations saying the tool only reads.
    pub fn read_only() -> Self {
        ToolAnnotations {
            read_only_hint: Some(true),
            ..ToolAnnotations::default()
        }
    }

    /// Annotations saying the tool changes things, destructively or not.
    pub fn writes(destructive: bool) -> Self {
        ToolAnnotations {
            read_only_hint: Some(false),
            destructive_hint: Some(destructive),
            ..ToolAnnotations::default()
        }
    }

    /// These annotations with `idempotentHint` set.
    pub fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent_hint = Some(idempotent);
        self
    }

    /// These annotations with `openWorldHint` set.
    pub fn with_open_world(mut self, open_world: bool) -> Self {
        self.open_world_hint = Some(open_world);
        self
    }

    /// Whether the tool says it only reads (`readOnlyHint: true`); a tool that says nothing
    /// may write.
    pub fn is_read_only(&self) -> bool {
        self.read_only_hint == Some(true)
    }

    /// Whether the tool may destroy something: not read-only, and not saying it is harmless
    /// (MCP's default for `destructiveHint` is `true`).
    pub fn may_destroy(&self) -> bool {
        !self.is_read_only() && self.destructive_hint != Some(false)
    }

    /// Whether no hint is set.
    pub fn is_empty(&self) -> bool {
        *self == ToolAnnotations::default()
    }

    /// The hints in words, for a doc comment or a question to the user: `read-only`,
    /// `writes, destructive`, `writes, not destructive, idempotent, open world`…; `None` when
    /// no hint is set.
    pub fn summary(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut words: Vec<&str> = Vec::new();
        match self.read_only_hint {
            Some(true) => words.push("read-only"),
            Some(false) => words.push("writes"),
            None => {}
        }
        if !self.is_read_only() {
            match self.destructive_hint {
                Some(true) => words.push("destructive"),
                Some(false) => words.push("not destructive"),
                None => {}
            }
        }
        match self.idempotent_hint {
            Some(true) => words.push("idempotent"),
            Some(false) => words.push("not idempotent"),
            None => {}
        }
        match self.open_world_hint {
            Some(true) => words.push("open world"),
            Some(false) => words.push("closed world"),
            None => {}
        }
        Some(words.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_use_mcp_names_and_omit_absent_hints() {
        let annotations = ToolAnnotations::writes(true).with_idempotent(false);
        insta::assert_json_snapshot!(annotations, @r#"
        {
          "readOnlyHint": false,
          "destructiveHint": true,
          "idempotentHint": false
        }
        "#);
        let read: ToolAnnotations =
            serde_json::from_str(r#"{"readOnlyHint": true, "title": "ignored"}"#).unwrap();
        assert_eq!(read, ToolAnnotations::read_only());
    }

    #[test]
    fn only_an_explicit_read_only_hint_makes_a_tool_read_only() {
        assert!(ToolAnnotations::read_only().is_read_only());
        assert!(!ToolAnnotations::default().is_read_only());
        assert!(!ToolAnnotations::writes(false).is_read_only());
        assert!(ToolAnnotations::default().may_destroy());
        assert!(!ToolAnnotations::writes(false).may_destroy());
        assert!(!ToolAnnotations::read_only().may_destroy());
    }

    #[test]
    fn the_summary_says_each_hint_in_words() {
        assert_eq!(ToolAnnotations::default().summary(), None);
        assert_eq!(
            ToolAnnotations::read_only().summary().as_deref(),
            Some("read-only")
        );
        assert_eq!(
            ToolAnnotations::writes(true)
                .with_open_world(true)
                .summary()
                .as_deref(),
            Some("writes, destructive, open world")
        );
    }
}
