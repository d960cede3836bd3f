//! The input of the model-facing `exec` tool (the model-facing tools): JavaScript source, optionally starting with a
//! pragma line that sets the observation's yield time and output budget:
//!
//! ```text
//! // @exec: {"yield_time_ms": 10000, "max_output_tokens": 1000}
//! const results = await tools.search({ q: "x" });
//! ```
//!
//! Only those two keys are allowed, each a non-negative safe integer, and code must follow. The
//! pragma line is replaced by an empty line, so line numbers in errors still match what the model
//! wrote.

use serde_json::Value;

/// The largest integer JavaScript represents exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `exec` input, split into its settings and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecInput {
    /// The source with any pragma line blanked out.
    pub source: String,
    /// The pragma's `yield_time_ms`, if it set one.
    pub yield_time_ms: Option<u64>,
    /// The pragma's `max_output_tokens`, if it set one.
    pub max_output_tokens: Option<u64>,
}

/// Why `exec` input was refused; the message says what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecInputError {
    #[error(
        "exec received no code: send JavaScript source, optionally after a pragma line such as \
         // @exec: {{\"yield_time_ms\": 10000}}"
    )]
    /// There is no source at all.
    Empty,
    #[error(
        "exec received a pragma line but no code after it: put the JavaScript on the lines below"
    )]
    /// A pragma line with no code after it.
    PragmaWithoutCode,
    #[error(
        "invalid @exec pragma: expected a JSON object after `// @exec:`, as in \
         // @exec: {{\"yield_time_ms\": 10000, \"max_output_tokens\": 1000}} ({0})"
    )]
    /// The pragma is not a JSON object (the text says what it is).
    NotAnObject(String),
    #[error(
        "invalid @exec pragma: unknown key \"{0}\"; only yield_time_ms and max_output_tokens are \
         allowed"
    )]
    /// The pragma has a key other than `yield_time_ms` and `max_output_tokens`.
    UnknownKey(String),
    #[error(
        "invalid @exec pragma: {key} must be a non-negative integer no larger than \
         9007199254740991, got {value}"
    )]
    /// A key's value is not a non-negative safe integer.
    BadValue {
        /// The key.
        key: &'static str,
        /// Its value, as JSON.
        value: String,
    },
}

/// The marker that starts a pragma line (after optional whitespace).
const PRAGMA_MARKER: &str = "@exec";

/// Splits `exec` input into settings and source.
pub fn parse_exec_input(input: &str) -> Result<ExecInput, ExecInputError> {
    if input.trim().is_empty() {
        return Err(ExecInputError::Empty);
    }
    let (first_line, rest) = match input.split_once('\n') {
        Some((first, rest)) => (first, Some(rest)),
        None => (input, None),
    };
    let Some(settings) = pragma_body(first_line) else {
        return Ok(ExecInput {
            source: input.to_owned(),
            yield_time_ms: None,
            max_output_tokens: None,
        });
    };
    let object = match serde_json::from_str::<Value>(settings.trim()) {
        Ok(Value::Object(object)) => object,
        Ok(other) => return Err(ExecInputError::NotAnObject(format!("got {other}"))),
        Err(error) => return Err(ExecInputError::NotAnObject(error.to_string())),
    };
    let mut parsed = ExecInput {
        source: String::new(),
        yield_time_ms: None,
        max_output_tokens: None,
    };
    for (key, value) in object {
        let (slot, key) = match key.as_str() {
            "yield_time_ms" => (&mut parsed.yield_time_ms, "yield_time_ms"),
            "max_output_tokens" => (&mut parsed.max_output_tokens, "max_output_tokens"),
            _ => return Err(ExecInputError::UnknownKey(key)),
        };
        *slot = Some(
            safe_integer(&value).ok_or_else(|| ExecInputError::BadValue {
                key,
                value: value.to_string(),
            })?,
        );
    }
    let code = rest.unwrap_or_default();
    if code.trim().is_empty() {
        return Err(ExecInputError::PragmaWithoutCode);
    }
    // Keep the line count: the pragma line becomes an empty line.
    parsed.source = format!("\n{code}");
    Ok(parsed)
}

/// The JSON after `// @exec:` when `line` is a pragma line.
fn pragma_body(line: &str) -> Option<&str> {
    let comment = line.trim_start().strip_prefix("//")?;
    let after_marker = comment.trim_start().strip_prefix(PRAGMA_MARKER)?;
    after_marker.trim_start().strip_prefix(':')
}

fn safe_integer(value: &Value) -> Option<u64> {
    value.as_u64().filter(|number| *number <= MAX_SAFE_INTEGER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_without_a_pragma_is_taken_as_it_is() {
        assert_eq!(
            parse_exec_input("text(1)\n// @exec: {}").unwrap(),
            ExecInput {
                source: "text(1)\n// @exec: {}".into(),
                yield_time_ms: None,
                max_output_tokens: None
            }
        );
    }

    #[test]
    fn a_pragma_sets_yield_time_and_output_budget_and_keeps_line_numbers() {
        let parsed = parse_exec_input(
            "// @exec: {\"yield_time_ms\": 2500, \"max_output_tokens\": 0}\ntext(1);\ntext(2);",
        )
        .unwrap();
        assert_eq!(parsed.yield_time_ms, Some(2500));
        assert_eq!(parsed.max_output_tokens, Some(0));
        assert_eq!(parsed.source, "\ntext(1);\ntext(2);");
        assert_eq!(
            parse_exec_input("  //@exec:{}\ncode()").unwrap().source,
            "\ncode()"
        );
    }

    #[test]
    fn refusals_say_precisely_what_is_wrong() {
        let errors: Vec<String> = [
            "",
            "  \n\t ",
            "// @exec: {\"yield_time_ms\": 10}",
            "// @exec: {\"yield_time_ms\": 10}\n   \n",
            "// @exec: yield 10\ncode()",
            "// @exec: [1]\ncode()",
            "// @exec: {\"timeout\": 5}\ncode()",
            "// @exec: {\"yield_time_ms\": -5}\ncode()",
            "// @exec: {\"max_output_tokens\": 1.5}\ncode()",
            "// @exec: {\"yield_time_ms\": \"100\"}\ncode()",
            "// @exec: {\"yield_time_ms\": 9007199254740992}\ncode()",
        ]
        .into_iter()
        .map(|input| parse_exec_input(input).unwrap_err().to_string())
        .collect();
        insta::assert_debug_snapshot!(errors);
    }
}
