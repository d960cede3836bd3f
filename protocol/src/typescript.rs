//! TypeScript declarations of tools, generated from their JSON Schemas: the whole
//! `declare const tools: { name(args: {...}): Promise<...>; ... }` block, grouped by namespace,
//! for the `exec` description, and one tool's declaration, which `ALL_TOOLS` carries so that a
//! cell can look up the tools the description leaves out.
//!
//! Supported: objects (properties, required and optional, nested, `additionalProperties` as an
//! index signature), arrays and tuples, `enum` and `const` as literal types, `anyOf`/`oneOf` and
//! type lists as unions, `allOf` as intersections, `nullable`, and descriptions as doc comments.
//! Anything else (`$ref`, `not`, conditionals, schemas nested too deeply) is `unknown`.

use std::fmt::Write;

use crate::schema::{Items, Keywords, Property, Schema};
use crate::{ResultType, ToolDefinition, ToolKind};
use serde_json::Value;

/// Past this nesting depth a schema is `unknown`, to keep declarations readable.
const MAX_DEPTH: usize = 6;

/// The tools grouped by namespace (`None`: no namespace): tools without one first, then each
/// namespace in order of first appearance, each group in the tools' order.
pub fn namespace_groups(tools: &[ToolDefinition]) -> Vec<(Option<&str>, Vec<&ToolDefinition>)> {
    let mut groups: Vec<(Option<&str>, Vec<&ToolDefinition>)> = Vec::new();
    for tool in tools {
        let namespace = tool.name.namespace.as_deref();
        match groups.iter_mut().find(|(group, _)| *group == namespace) {
            Some((_, members)) => members.push(tool),
            None => groups.push((namespace, vec![tool])),
        }
    }
    groups.sort_by_key(|(namespace, _)| namespace.is_some());
    groups
}

/// The MCP types an MCP tool's result is declared with (`CallToolResult<T>`, its content blocks
/// and their parts), as the MCP schema has them and upstream code mode declares them: once, before
/// `tools`, when a tool uses them.
pub const MCP_TYPES_DECLARATION: &str = r#"// Shared MCP types: what an MCP tool's promise resolves with.
type Role = "user" | "assistant";
type MetaObject = Record<string, unknown>;
type Annotations = {
  audience?: Role[];
  priority?: number;
  lastModified?: string;
};
type Icon = {
  src: string;
  mimeType?: string;
  sizes?: string[];
  theme?: "light" | "dark";
};
type TextResourceContents = {
  uri: string;
  mimeType?: string;
  _meta?: MetaObject;
  text: string;
};
type BlobResourceContents = {
  uri: string;
  mimeType?: string;
  _meta?: MetaObject;
  blob: string;
};
type TextContent = {
  type: "text";
  text: string;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type ImageContent = {
  type: "image";
  data: string;
  mimeType: string;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type AudioContent = {
  type: "audio";
  data: string;
  mimeType: string;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type ResourceLink = {
  type: "resource_link";
  uri: string;
  name: string;
  title?: string;
  description?: string;
  mimeType?: string;
  size?: number;
  icons?: Icon[];
  annotations?: Annotations;
  _meta?: MetaObject;
};
type EmbeddedResource = {
  type: "resource";
  resource: TextResourceContents | BlobResourceContents;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type ContentBlock =
  | TextContent
  | ImageContent
  | AudioContent
  | ResourceLink
  | EmbeddedResource;
/** An MCP tool's result; `isError: true` is a failure the tool reported (the promise still resolves). */
type CallToolResult<TStructured = { [key: string]: unknown }> = {
  _meta?: MetaObject;
  content: ContentBlock[];
  isError?: boolean;
  structuredContent?: TStructured;
  [key: string]: unknown;
};"#;

/// The `declare const tools: {...};` block for `tools`: tools without a namespace first, then each
/// namespace in order of first appearance; the shared MCP types (`CallToolResult`) are declared
/// before it, once, when a tool's result uses them.
pub fn tools_declaration(tools: &[ToolDefinition]) -> String {
    let groups = namespace_groups(tools);
    let mut out = String::new();
    // Shared result shapes first, once each.
    if tools
        .iter()
        .any(|tool| tool.result_type == Some(ResultType::CallToolResult))
    {
        out.push_str(MCP_TYPES_DECLARATION);
        out.push_str("\n\n");
    }
    out.push_str("declare const tools: {\n");
    for (index, (namespace, members)) in groups.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        if let Some(namespace) = namespace {
            let _ = writeln!(out, "  // ---- {namespace} ----");
        }
        for tool in members {
            write_tool(&mut out, tool);
        }
    }
    out.push_str("};");
    out
}

/// One tool's declaration, as a member of `tools`: its doc comment, then
/// `name(args: {...}): Promise<...>;`.
///
/// An MCP tool resolves with `CallToolResult<T>` ([`MCP_TYPES_DECLARATION`]), `T` the type of
/// its output schema when it has one; another tool with an output schema resolves with the
/// schema's type, and one without with `unknown`.
pub fn tool_declaration(tool: &ToolDefinition) -> String {
    let mut out = String::new();
    write_tool(&mut out, tool);
    out.lines()
        .map(|line| line.strip_prefix("  ").unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

fn write_tool(out: &mut String, tool: &ToolDefinition) {
    // What the tool says of its effects ends its doc comment: a model sees which calls only read.
    match tool
        .annotations
        .and_then(|annotations| annotations.summary())
    {
        Some(effects) => write_doc(
            out,
            &format!("{}\n@effects {effects}", tool.description.trim()),
            1,
        ),
        None => write_doc(out, &tool.description, 1),
    }
    let structured = tool
        .output_schema
        .as_ref()
        .map(|schema| ts_type(&Schema::read(schema), 1, 0));
    let result = match (tool.result_type, structured) {
        (Some(shape), Some(structured)) => format!("{}<{structured}>", shape.name()),
        (Some(shape), None) => shape.name().to_owned(),
        (None, Some(structured)) => structured,
        (None, None) => "unknown".to_owned(),
    };
    let parameter = match tool.kind {
        ToolKind::Freeform => "input: string".to_owned(),
        ToolKind::Function => match &tool.input_schema {
            None => "args?: unknown".to_owned(),
            Some(schema) => {
                let schema = Schema::read(schema);
                let argument = ts_type(&schema, 1, 0);
                // A schema that says nothing (`unknown`) accepts no argument too.
                let required = argument != "unknown" && argument_required(&schema);
                let optional = if required { "" } else { "?" };
                format!("args{optional}: {argument}")
            }
        },
    };
    let _ = writeln!(
        out,
        "  {}({parameter}): Promise<{result}>;",
        tool.global_name()
    );
}

/// An object argument with no required properties may be left out.
fn argument_required(schema: &Schema) -> bool {
    match schema.keywords() {
        Some(keywords) => match &keywords.required {
            Some(required) => !required.is_empty(),
            None => !keywords.is_object(),
        },
        None => true,
    }
}

/// Writes `text` as a `/** ... */` comment at `indent` levels (two spaces each).
fn write_doc(out: &mut String, text: &str, indent: usize) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let pad = "  ".repeat(indent);
    let text = text.replace("*/", "*\\/");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() == 1 {
        let _ = writeln!(out, "{pad}/** {} */", lines[0]);
        return;
    }
    let _ = writeln!(out, "{pad}/**");
    for line in lines {
        let _ = writeln!(out, "{pad} * {}", line.trim_end()).map(|_| ());
    }
    let _ = writeln!(out, "{pad} */");
}

/// The TypeScript type of `schema`, written for a position `indent` levels deep.
fn ts_type(schema: &Schema, indent: usize, depth: usize) -> String {
    let keywords = match schema {
        Schema::Nothing => return "never".to_owned(),
        Schema::Anything => return "unknown".to_owned(),
        Schema::Keywords(keywords) => keywords,
    };
    if depth > MAX_DEPTH {
        return "unknown".to_owned();
    }
    let base = base_type(keywords, indent, depth);
    if keywords.nullable && base != "unknown" {
        union(vec![base, "null".to_owned()])
    } else {
        base
    }
}

/// The type the first keyword that says most gives: `const`, `enum`, `anyOf`, `oneOf`, `allOf`,
/// `type`, then `properties` or `items` alone.
fn base_type(schema: &Keywords, indent: usize, depth: usize) -> String {
    if let Some(constant) = &schema.constant {
        return literal(constant);
    }
    if let Some(values) = &schema.choices {
        return union(values.iter().map(literal).collect());
    }
    if let Some(members) = schema.any_of.as_ref().or(schema.one_of.as_ref()) {
        return union(
            members
                .iter()
                .map(|member| ts_type(member, indent, depth + 1))
                .collect(),
        );
    }
    if let Some(members) = &schema.all_of {
        let parts: Vec<String> = members
            .iter()
            .map(|member| ts_type(member, indent, depth + 1))
            .filter(|part| part != "unknown")
            .map(|part| {
                if part.contains(" | ") {
                    format!("({part})")
                } else {
                    part
                }
            })
            .collect();
        return if parts.is_empty() {
            "unknown".to_owned()
        } else {
            parts.join(" & ")
        };
    }
    match &schema.types {
        Some(kinds) => union(
            kinds
                .iter()
                .map(|kind| typed(kind, schema, indent, depth))
                .collect(),
        ),
        None if schema.properties.is_some() => object_type(schema, indent, depth),
        None if schema.items.is_some() => array_type(schema, indent, depth),
        None => "unknown".to_owned(),
    }
}

fn typed(kind: &str, schema: &Keywords, indent: usize, depth: usize) -> String {
    match kind {
        "string" => "string".to_owned(),
        "number" | "integer" => "number".to_owned(),
        "boolean" => "boolean".to_owned(),
        "null" => "null".to_owned(),
        "array" => array_type(schema, indent, depth),
        "object" => object_type(schema, indent, depth),
        _ => "unknown".to_owned(),
    }
}

fn array_type(schema: &Keywords, indent: usize, depth: usize) -> String {
    let tuple = schema.prefix_items.as_ref().or(match &schema.items {
        Some(Items::Tuple(positions)) => Some(positions),
        _ => None,
    });
    if let Some(positions) = tuple {
        let members: Vec<String> = positions
            .iter()
            .map(|item| ts_type(item, indent, depth + 1))
            .collect();
        return format!("[{}]", members.join(", "));
    }
    let item = match &schema.items {
        Some(Items::Each(each)) => ts_type(each, indent, depth + 1),
        _ => "unknown".to_owned(),
    };
    if item.contains(' ') && !item.starts_with('{') {
        format!("({item})[]")
    } else {
        format!("{item}[]")
    }
}

fn object_type(schema: &Keywords, indent: usize, depth: usize) -> String {
    let additional = match &schema.additional {
        Some(Schema::Nothing) | None => None,
        Some(additional) => Some(ts_type(additional, indent + 1, depth + 1)),
    };
    let properties = match &schema.properties {
        Some(properties) if !properties.is_empty() => properties,
        _ => {
            let value = additional.unwrap_or_else(|| "unknown".to_owned());
            return format!("Record<string, {value}>");
        }
    };
    let pad = "  ".repeat(indent + 1);
    let mut out = String::from("{\n");
    for Property {
        name,
        schema: property,
    } in properties
    {
        let keywords = property.keywords();
        if let Some(description) = keywords.and_then(|keywords| keywords.description.as_deref()) {
            let default = keywords.and_then(|keywords| keywords.default.as_ref());
            write_doc(&mut out, &describe(description, default), indent + 1);
        } else if let Some(default) = keywords.and_then(|keywords| keywords.default.as_ref()) {
            write_doc(&mut out, &format!("Default: {default}"), indent + 1);
        }
        let optional = if schema
            .required
            .iter()
            .flatten()
            .any(|required| required == name)
        {
            ""
        } else {
            "?"
        };
        let _ = writeln!(
            out,
            "{pad}{}{optional}: {};",
            property_name(name),
            ts_type(property, indent + 1, depth + 1)
        );
    }
    if let Some(additional) = additional {
        let _ = writeln!(out, "{pad}[key: string]: {additional};");
    }
    let _ = write!(out, "{}}}", "  ".repeat(indent));
    out
}

/// A property's description, with its default when it has one.
fn describe(description: &str, default: Option<&Value>) -> String {
    match default {
        Some(default) => format!("{} (default: {default})", description.trim_end()),
        None => description.to_owned(),
    }
}

fn property_name(name: &str) -> String {
    let identifier = !name.is_empty()
        && !name.starts_with(|first: char| first.is_ascii_digit())
        && name.chars().all(|character| {
            character.is_ascii_alphanumeric() || character == '_' || character == '$'
        });
    if identifier {
        name.to_owned()
    } else {
        Value::String(name.to_owned()).to_string()
    }
}

fn literal(value: &Value) -> String {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => value.to_string(),
        _ => "unknown".to_owned(),
    }
}

/// `a | b | c`, without repeats; `unknown` absorbs everything.
fn union(members: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for member in members {
        if member == "unknown" {
            return "unknown".to_owned();
        }
        if !unique.contains(&member) {
            unique.push(member);
        }
    }
    match unique.len() {
        0 => "never".to_owned(),
        _ => unique.join(" | "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ty(schema: Value) -> String {
        ts_type(&Schema::read(&schema), 0, 0)
    }

    #[test]
    fn primitive_enum_const_and_union_types() {
        assert_eq!(ty(json!({"type": "string"})), "string");
        assert_eq!(ty(json!({"type": "integer"})), "number");
        assert_eq!(ty(json!({"type": ["string", "null"]})), "string | null");
        assert_eq!(ty(json!({"enum": ["a", "b", 3]})), "\"a\" | \"b\" | 3");
        assert_eq!(ty(json!({"const": "fixed"})), "\"fixed\"");
        assert_eq!(
            ty(json!({"anyOf": [{"type": "string"}, {"type": "number"}]})),
            "string | number"
        );
        assert_eq!(
            ty(json!({"type": "string", "nullable": true})),
            "string | null"
        );
        assert_eq!(ty(json!({"$ref": "#/$defs/thing"})), "unknown");
        assert_eq!(ty(json!(true)), "unknown");
    }

    #[test]
    fn arrays_tuples_and_records() {
        assert_eq!(
            ty(json!({"type": "array", "items": {"type": "string"}})),
            "string[]"
        );
        assert_eq!(
            ty(json!({"type": "array", "items": {"type": ["string", "number"]}})),
            "(string | number)[]"
        );
        assert_eq!(ty(json!({"type": "array"})), "unknown[]");
        assert_eq!(
            ty(json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]})),
            "[string, number]"
        );
        assert_eq!(
            ty(json!({"type": "object", "additionalProperties": {"type": "number"}})),
            "Record<string, number>"
        );
        assert_eq!(ty(json!({"type": "object"})), "Record<string, unknown>");
    }

    #[test]
    fn objects_mark_optional_properties_and_quote_odd_names() {
        assert_eq!(
            ty(json!({
                "type": "object",
                "properties": {
                    "q": {"type": "string", "description": "The query."},
                    "max-results": {"type": "integer", "default": 10},
                },
                "required": ["q"]
            })),
            "{\n  /** The query. */\n  q: string;\n  /** Default: 10 */\n  \"max-results\"?: number;\n}"
        );
    }

    #[test]
    fn a_declaration_ends_its_doc_with_the_tools_effects() {
        let tool = ToolDefinition::function(
            crate::ToolName::namespaced("github", "delete_repo"),
            "Deletes a repository.",
        )
        .with_annotations(crate::ToolAnnotations::writes(true));
        assert_eq!(
            tool_declaration(&tool),
            "/**\n * Deletes a repository.\n * @effects writes, destructive\n */\ngithub__delete_repo(args?: unknown): Promise<unknown>;"
        );
        let plain = ToolDefinition::function(crate::ToolName::plain("echo"), "Echoes.");
        assert_eq!(
            tool_declaration(&plain),
            "/** Echoes. */\necho(args?: unknown): Promise<unknown>;"
        );
    }
}
