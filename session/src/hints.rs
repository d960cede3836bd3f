//! Hints that make a cell's error actionable for the model (actionable errors): where in the source the error
//! points (line, column, the line itself with a caret), and, for an unknown tool or a name that is
//! not defined but is close to a tool's, the closest tool names.

/// The file name the engine gives the cell's source in stack traces.
const CELL_FILE: &str = "cell.js:";

/// How many tool names a hint suggests at most.
const MAX_SUGGESTIONS: usize = 3;

/// The hints for `error_text`, raised by `source`, in a cell whose tools are `tool_names` (global
/// names): where the error points (a code frame), then the closest tool names; empty when there is
/// nothing to add.
pub fn error_hints(error_text: &str, source: &str, tool_names: &[String]) -> Vec<String> {
    let mut hints = Vec::new();
    if let Some(location) = source_location(error_text, source) {
        hints.push(location);
    }
    if let Some(tools) = tool_suggestion(error_text, tool_names) {
        hints.push(tools);
    }
    hints
}

/// `at line L, column C:` with the source line and a caret under the column.
fn source_location(error_text: &str, source: &str) -> Option<String> {
    let (line, column) = first_position(error_text)?;
    let lines: Vec<&str> = source.lines().collect();
    // An error at the end of the input may point one line past the last (an empty last line).
    let text = match line.checked_sub(1)? {
        index if index < lines.len() => lines[index],
        index if index == lines.len() => "",
        _ => return None,
    };
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    // Keep tabs in the caret line so the caret lines up under the column.
    let pad: String = text
        .chars()
        .take(column.saturating_sub(1))
        .map(|character| if character == '\t' { '\t' } else { ' ' })
        .collect();
    Some(format!(
        "at line {line}, column {column}:\n{number} | {text}\n{gutter} | {pad}^"
    ))
}

/// The first `cell.js:LINE:COLUMN` in the error text.
fn first_position(error_text: &str) -> Option<(usize, usize)> {
    error_text.match_indices(CELL_FILE).find_map(|(start, _)| {
        let (line, rest) = leading_number(&error_text[start + CELL_FILE.len()..])?;
        let (column, _) = leading_number(rest.strip_prefix(':')?)?;
        Some((line, column))
    })
}

/// The decimal number at the start of `text`, and what follows it.
fn leading_number(text: &str) -> Option<(usize, &str)> {
    let end = text
        .find(|character: char| !character.is_ascii_digit())
        .unwrap_or(text.len());
    Some((text[..end].parse().ok()?, &text[end..]))
}

/// For `tools.x is not a function` and `x is not defined`, the closest tool names.
fn tool_suggestion(error_text: &str, tool_names: &[String]) -> Option<String> {
    let first_line = error_text.lines().next().unwrap_or_default();
    if let Some(name) = between(first_line, "tools.", " is not a function") {
        let closest = closest(name, tool_names);
        let listing = if closest.is_empty() {
            "ALL_TOOLS lists the tools this cell can call.".to_owned()
        } else {
            format!(
                "Closest tools: {}. ALL_TOOLS lists them all.",
                format_tools(&closest)
            )
        };
        return Some(format!(
            "tools.{name} is not one of the enabled tools. {listing}"
        ));
    }
    if let Some(name) = between(first_line, "ReferenceError: ", " is not defined") {
        let closest = closest(name, tool_names);
        if closest.is_empty() {
            return None;
        }
        return Some(format!(
            "{name} is not a global; tools are called through the tools object, as in \
             tools.{}(...). Closest tools: {}.",
            closest[0],
            format_tools(&closest)
        ));
    }
    None
}

fn between<'a>(text: &'a str, before: &str, after: &str) -> Option<&'a str> {
    let start = text.find(before)? + before.len();
    let end = start + text[start..].find(after)?;
    let name = &text[start..end];
    (!name.is_empty()
        && name.chars().all(|character| {
            character.is_ascii_alphanumeric() || character == '_' || character == '$'
        }))
    .then_some(name)
}

fn format_tools(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("tools.{name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tool names closest to `wanted`: by edit distance to the whole global name or to the part
/// after its namespace, close enough to be a plausible slip, nearest first.
fn closest<'a>(wanted: &str, tool_names: &'a [String]) -> Vec<&'a str> {
    let wanted_lower = wanted.to_ascii_lowercase();
    let mut scored: Vec<(usize, &str)> = tool_names
        .iter()
        .filter_map(|name| {
            let lower = name.to_ascii_lowercase();
            let short = lower.rsplit("__").next().unwrap_or(&lower).to_owned();
            let distance = strsim::levenshtein(&wanted_lower, &lower)
                .min(strsim::levenshtein(&wanted_lower, &short));
            let allowed = (wanted.len().max(short.len()) / 3).max(2);
            let related = lower.contains(&wanted_lower) || wanted_lower.contains(&short);
            (distance <= allowed || related).then_some((distance, name.as_str()))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, name)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hints joined as the rendering shows them; `None` when there are none.
    fn error_hint(error_text: &str, source: &str, tool_names: &[String]) -> Option<String> {
        let hints = error_hints(error_text, source, tool_names);
        (!hints.is_empty()).then(|| hints.join("\n\n"))
    }

    fn tools() -> Vec<String> {
        ["web__search", "web__fetch", "github__create_issue", "echo"]
            .map(str::to_owned)
            .to_vec()
    }

    #[test]
    fn a_runtime_error_points_at_its_line_and_column() {
        let source = "text(1);\nconst x = null;\nx.length;";
        let error =
            "TypeError: Cannot read properties of null (reading 'length')\n    at cell.js:3:3";
        assert_eq!(
            error_hint(error, source, &tools()).unwrap(),
            "at line 3, column 3:\n3 | x.length;\n  |   ^"
        );
    }

    #[test]
    fn an_error_at_the_end_of_the_input_points_past_the_last_line() {
        assert_eq!(
            error_hint(
                "SyntaxError: Unexpected end of input\n    at cell.js:3:1",
                "if (x) {\n  y();\n",
                &tools()
            )
            .unwrap(),
            "at line 3, column 1:\n3 | \n  | ^"
        );
    }

    #[test]
    fn an_unknown_tool_lists_the_closest_names() {
        let hint = error_hint(
            "TypeError: tools.web__serch is not a function\n    at cell.js:1:13",
            "await tools.web__serch({q: 1})",
            &tools(),
        )
        .unwrap();
        assert!(hint.contains("Closest tools: tools.web__search"), "{hint}");
    }

    #[test]
    fn a_reference_error_close_to_a_tool_name_points_to_the_tools_object() {
        let hint = error_hint(
            "ReferenceError: search is not defined\n    at cell.js:1:7",
            "await search()",
            &tools(),
        )
        .unwrap();
        assert!(hint.contains("tools.web__search(...)"), "{hint}");
        assert_eq!(
            error_hint(
                "ReferenceError: frobnicate is not defined",
                "frobnicate()",
                &tools()
            ),
            None
        );
    }
}
