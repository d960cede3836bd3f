//! Tool definitions: what the host offers a cell, and how each tool is named inside JavaScript (the globals).
//!
//! JSON shape of a definition:
//! `{"name": {"name": "search", "namespace": "web"}, "description": "...", "kind": "function",
//!   "annotations": {"readOnlyHint": true},
//!   "input_schema": {...}, "output_schema": {...}}`; `namespace`, `input_schema` and
//! `output_schema` are omitted when absent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ToolAnnotations;

/// A tool's name as the host knows it: a name, optionally inside a namespace (such as the MCP
/// server it comes from).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolName {
    /// The tool's own name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The namespace it belongs to (a downstream server's name), if any.
    pub namespace: Option<String>,
}

impl ToolName {
    /// A tool outside any namespace.
    pub fn plain(name: impl Into<String>) -> Self {
        ToolName {
            name: name.into(),
            namespace: None,
        }
    }

    /// A tool inside `namespace`.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ToolName {
            name: name.into(),
            namespace: Some(namespace.into()),
        }
    }

    /// The name under which the tool appears in `tools` and `ALL_TOOLS`: the name normalised to a
    /// JavaScript identifier, prefixed with the normalised namespace and `__` when there is one.
    pub fn global_name(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!(
                "{}__{}",
                normalize_identifier(namespace),
                normalize_identifier(&self.name)
            ),
            None => normalize_identifier(&self.name),
        }
    }
}

/// How a tool takes its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// Takes a JSON value described by the input schema.
    #[default]
    Function,
    /// Takes free-form text.
    Freeform,
}

/// One tool the host offers to cells. Build it with [`ToolDefinition::function`] and the
/// `with_*` methods (the struct grows, so it is not built literally outside this crate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// Its name and namespace.
    pub name: ToolName,
    /// What it does, for the model.
    pub description: String,
    #[serde(default)]
    /// What kind of tool it is.
    pub kind: ToolKind,
    /// The JSON Schema of the tool's input, when the tool publishes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The JSON Schema of the tool's result, when the tool publishes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The documented shape the tool's result is wrapped in, when it has one (an MCP tool's
    /// `CallToolResult`, whose `structuredContent` has the output schema's type); `None`: the
    /// result is the output schema's type, or `unknown` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// What the tool says of its effects (MCP's annotations), when it says anything: shown to
    /// the model, and read by the gate that decides on each call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
}

/// A documented result shape that several tools share, declared once in the `exec` description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResultType {
    /// What an MCP tool resolves with, as upstream code mode declares it: see
    /// [`MCP_TYPES_DECLARATION`](crate::MCP_TYPES_DECLARATION).
    #[serde(alias = "mcp_result")]
    CallToolResult,
}

impl ResultType {
    /// Its TypeScript name.
    pub fn name(self) -> &'static str {
        match self {
            ResultType::CallToolResult => "CallToolResult",
        }
    }
}

impl ToolDefinition {
    /// A function tool with no schemas.
    pub fn function(name: ToolName, description: impl Into<String>) -> Self {
        ToolDefinition {
            name,
            description: description.into(),
            kind: ToolKind::Function,
            input_schema: None,
            output_schema: None,
            result_type: None,
            annotations: None,
        }
    }

    /// This definition taking its input as `kind` says.
    pub fn with_kind(mut self, kind: ToolKind) -> Self {
        self.kind = kind;
        self
    }

    /// This definition with the JSON Schema of its input.
    pub fn with_input_schema(mut self, schema: impl Into<Option<Value>>) -> Self {
        self.input_schema = schema.into();
        self
    }

    /// This definition with the JSON Schema of its result.
    pub fn with_output_schema(mut self, schema: impl Into<Option<Value>>) -> Self {
        self.output_schema = schema.into();
        self
    }

    /// This definition with its result wrapped in a documented shape.
    pub fn with_result_type(mut self, result_type: impl Into<Option<ResultType>>) -> Self {
        self.result_type = result_type.into();
        self
    }

    /// This definition with what the tool says of its effects (empty annotations are none).
    pub fn with_annotations(mut self, annotations: impl Into<Option<ToolAnnotations>>) -> Self {
        self.annotations = annotations
            .into()
            .filter(|annotations| !annotations.is_empty());
        self
    }

    /// The tool's name inside JavaScript; see [`ToolName::global_name`].
    pub fn global_name(&self) -> String {
        self.name.global_name()
    }
}

/// Turns any string into a JavaScript identifier: every character outside `[A-Za-z0-9_$]`, and a
/// leading digit, becomes `_`. An empty string becomes `_`.
pub fn normalize_identifier(raw: &str) -> String {
    let mut identifier: String = raw
        .chars()
        .enumerate()
        .map(|(index, character)| {
            let allowed = character.is_ascii_alphanumeric() || character == '_' || character == '$';
            if !allowed || (index == 0 && character.is_ascii_digit()) {
                '_'
            } else {
                character
            }
        })
        .collect();
    if identifier.is_empty() {
        identifier.push('_');
    }
    identifier
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_normalised_to_javascript_identifiers() {
        assert_eq!(normalize_identifier("search"), "search");
        assert_eq!(normalize_identifier("web-search.v2"), "web_search_v2");
        assert_eq!(normalize_identifier("2fa code"), "_fa_code");
        assert_eq!(normalize_identifier("a1$_"), "a1$_");
        assert_eq!(normalize_identifier("héllo"), "h_llo");
        assert_eq!(normalize_identifier(""), "_");
    }

    #[test]
    fn namespaced_tools_join_namespace_and_name_with_two_underscores() {
        assert_eq!(
            ToolName::namespaced("my-server", "get.file").global_name(),
            "my_server__get_file"
        );
        assert_eq!(ToolName::plain("echo").global_name(), "echo");
    }

    #[test]
    fn tool_definitions_have_stable_json_shapes() {
        let definitions = vec![
            ToolDefinition {
                name: ToolName::namespaced("web", "search"),
                description: "Search the web.".into(),
                kind: ToolKind::Function,
                input_schema: Some(json!({
                    "type": "object",
                    "properties": {"q": {"type": "string"}},
                    "required": ["q"]
                })),
                output_schema: Some(json!({"type": "array", "items": {"type": "string"}})),
                result_type: None,
                annotations: Some(ToolAnnotations::read_only().with_open_world(true)),
            },
            ToolDefinition {
                name: ToolName::plain("apply_patch"),
                description: "Apply a patch.".into(),
                kind: ToolKind::Freeform,
                input_schema: None,
                output_schema: None,
                result_type: None,
                annotations: None,
            },
        ];
        insta::assert_json_snapshot!(definitions);
        let round_trip: Vec<ToolDefinition> =
            serde_json::from_value(serde_json::to_value(&definitions).unwrap()).unwrap();
        assert_eq!(round_trip, definitions);
    }
}
