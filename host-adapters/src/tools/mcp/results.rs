//! What a cell receives from a call: the `CallToolResult` the server sent, its structured content
//! checked against the tool's output schema ([`call_result_to_value`]), and tool descriptions
//! with their server's instructions.

use rmcp::model::CallToolResult;
use serde_json::Value;

/// Checks `value` against `schema` as codemode reads schemas ([`codemode_protocol::schema`]): the
/// keywords a tool's TypeScript declaration shows, so that a value that passes is what the model
/// was told to expect. `at` names where `value` is, for the message.
fn check_against_schema(
    value: &Value,
    schema: &Value,
    at: &str,
) -> Result<(), codemode_protocol::schema::SchemaMismatch> {
    codemode_protocol::schema::check(value, &codemode_protocol::schema::Schema::read(schema), at)
}

/// Why a tool's result cannot be handed to the cell (the call then rejects with this text).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallResultError {
    /// Its `structuredContent` is not what the tool's output schema (and so its declaration)
    /// says.
    #[error("the server's structuredContent does not match the tool's output schema: {0}")]
    SchemaMismatch(codemode_protocol::schema::SchemaMismatch),
    /// It cannot be written as JSON.
    #[error("cannot read the tool's result: {0}")]
    Unreadable(serde_json::Error),
}

/// A tool's description with its server's instructions after it (the tool's own text first, so
/// that a one-line summary still says what the tool does).
pub(super) fn with_instructions(description: &str, instructions: Option<&str>) -> String {
    match instructions {
        None => description.to_owned(),
        Some(instructions) if description.trim().is_empty() => instructions.trim().to_owned(),
        Some(instructions) => format!(
            "{}\n\nFrom the server's instructions: {}",
            description.trim_end(),
            instructions.trim()
        ),
    }
}

/// What a cell receives for a tool's result, as upstream code mode has it: the MCP
/// `CallToolResult` as the server sent it (`content`, and `structuredContent`, `isError` and
/// `_meta` when it sent them; a result with `isError: true` resolves too), declared as
/// `CallToolResult<T>` (`codemode_protocol::MCP_TYPES_DECLARATION`). The protocol's
/// `resultType` is not part of it. For a tool with an output schema, `structuredContent` (when
/// present) is checked against the schema, so that `T` is true of what the cell gets; a value
/// that does not match rejects, naming where.
pub fn call_result_to_value(
    result: CallToolResult,
    output_schema: Option<&Value>,
) -> Result<Value, CallResultError> {
    if let (Some(schema), Some(structured)) = (output_schema, &result.structured_content) {
        check_against_schema(structured, schema, "structuredContent")
            .map_err(CallResultError::SchemaMismatch)?;
    }
    let mut value = serde_json::to_value(&result).map_err(CallResultError::Unreadable)?;
    if let Value::Object(fields) = &mut value {
        fields.remove("resultType");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use rmcp::model::ContentBlock;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_is_the_call_tool_result_the_server_sent() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("3"),
            ContentBlock::image("AA==", "image/png"),
            ContentBlock::text("and more"),
        ]);
        result.structured_content = Some(json!({"sum": 3}));
        assert_eq!(
            call_result_to_value(result, None).unwrap(),
            json!({
                "content": [
                    {"type": "text", "text": "3"},
                    {"type": "image", "data": "AA==", "mimeType": "image/png"},
                    {"type": "text", "text": "and more"}
                ],
                "structuredContent": {"sum": 3},
                "isError": false
            })
        );
        let mut bare = CallToolResult::success(Vec::new());
        bare.is_error = None;
        assert_eq!(
            call_result_to_value(bare, None).unwrap(),
            json!({"content": []})
        );
    }

    #[test]
    fn an_error_result_resolves_with_is_error() {
        let result = CallToolResult::error(vec![
            ContentBlock::text("no such file"),
            ContentBlock::text("(at /x)"),
        ]);
        assert_eq!(
            call_result_to_value(result, None).unwrap(),
            json!({
                "content": [
                    {"type": "text", "text": "no such file"},
                    {"type": "text", "text": "(at /x)"}
                ],
                "isError": true
            })
        );
    }

    #[test]
    fn structured_content_is_checked_against_the_output_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "sum": {"type": "number"},
                "unit": {"enum": ["m", "s"]},
                "parts": {"type": "array", "items": {"type": "integer"}},
                "note": {"type": "string", "nullable": true}
            },
            "required": ["sum"],
            "additionalProperties": false
        });
        let with = |structured: Value| {
            let mut result = CallToolResult::success(vec![ContentBlock::text("…")]);
            result.structured_content = Some(structured);
            call_result_to_value(result, Some(&schema))
        };
        let good = json!({"sum": 3.5, "unit": "m", "parts": [1, 2], "note": null});
        assert_eq!(with(good.clone()).unwrap()["structuredContent"], good);
        for (bad, why) in [
            (json!({"unit": "m"}), "structuredContent.sum is missing"),
            (
                json!({"sum": "3"}),
                "structuredContent.sum should be number, and is a string",
            ),
            (
                json!({"sum": 1, "unit": "h"}),
                "structuredContent.unit is \"h\", not one of",
            ),
            (
                json!({"sum": 1, "parts": [1, 2.5]}),
                "structuredContent.parts[1] should be integer",
            ),
            (
                json!({"sum": 1, "extra": true}),
                "structuredContent.extra is not a property",
            ),
            (
                json!([1]),
                "structuredContent should be object, and is an array",
            ),
        ] {
            let error = with(bad).unwrap_err().to_string();
            assert!(
                error.contains("does not match the tool's output schema") && error.contains(why),
                "{error}"
            );
        }
        // No structured content: the declaration's `structuredContent?` holds.
        let without = call_result_to_value(CallToolResult::success(Vec::new()), Some(&schema));
        assert_eq!(without.unwrap(), json!({"content": [], "isError": false}));
    }
}
