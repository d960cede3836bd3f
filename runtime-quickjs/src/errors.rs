//! The error text of the globals contract, from a QuickJS exception: the thrown value as the
//! engine renders it (`TypeError: not a function`, `null`, `Symbol(boom)`), then the cell's frames
//! as `at NAME (cell.js:LINE:COLUMN)` (the bootstrap's frames dropped), or else the position the
//! throw-site setter recorded for this very value.
//!
//! The value is rendered without running the cell's code where that can be avoided: an object
//! that is not an `Error` is `#<Object>` (its `toString` is never called); an `Error`'s name and
//! message are read as data.

#![forbid(unsafe_code)]

use codemode_engine::script::CELL_RESOURCE_NAME;
use rquickjs::{Ctx, Value};

/// How many columns before the position QuickJS reports for a marked throw's assignment
/// (`$$.t= value`) the `throw` keyword is: QuickJS reports where the assignment starts, which is
/// where the keyword was.
pub(crate) const THROW_SITE_COLUMN_OFFSET: u32 = 0;

/// What an exception says.
pub(crate) enum ErrorText {
    /// QuickJS ran out of memory: the heap limit, not an error of the cell's making.
    OutOfMemory,
    /// The error text.
    Text(String),
}

/// The error text of `value`; `recorded` is where the throw-site setter saw it thrown;
/// `stack_getter` is QuickJS's own getter of an error's stack (a cell may replace the one on
/// `Error.prototype`).
pub(crate) fn error_text<'js>(
    ctx: &Ctx<'js>,
    value: &Value<'js>,
    recorded: Option<(u32, u32)>,
    stack_getter: Option<&rquickjs::Function<'js>>,
    source: Option<&str>,
) -> ErrorText {
    let mut frames = String::new();
    let rendered = if value.is_error() {
        let object = value.as_object().expect("an error is an object");
        let name = object
            .get::<_, Option<String>>("name")
            .ok()
            .flatten()
            .unwrap_or_else(|| "Error".to_owned());
        let message = object
            .get::<_, Option<String>>("message")
            .ok()
            .flatten()
            .unwrap_or_default();
        if name == "InternalError" && message == "out of memory" {
            return ErrorText::OutOfMemory;
        }
        let stack = match stack_getter {
            Some(getter) => getter
                .call::<_, Option<String>>((rquickjs::function::This(value.clone()),))
                .ok()
                .flatten(),
            None => object.get::<_, Option<String>>("stack").ok().flatten(),
        };
        if let Some(stack) = stack {
            frames = cell_frames(&stack);
        }
        let message = v8_shaped_message(
            &name,
            &message,
            source,
            frames.lines().nth(1).and_then(first_cell_position),
        );
        if message.is_empty() {
            name
        } else {
            format!("{name}: {message}")
        }
    } else {
        render_value(ctx, value)
    };
    if frames.is_empty()
        && let Some((line, column)) = recorded
    {
        frames = format!("\n    at {CELL_RESOURCE_NAME}:{line}:{column}");
    }
    if frames.is_empty() && !value.is_object() {
        frames = "\n    (a thrown value that is not an Error carries no position; throw new \
                  Error(...) to get one)"
            .to_owned();
    }
    ErrorText::Text(rendered + &frames)
}

/// QuickJS's message in the shape V8 gives it, which the session's hints read:
/// `'x' is not defined` becomes `x is not defined`, and `not a function` names what was called
/// (`tools.ecoh is not a function`), read from the cell's source where the error points.
fn v8_shaped_message(
    name: &str,
    message: &str,
    source: Option<&str>,
    position: Option<(u32, u32)>,
) -> String {
    if name == "ReferenceError"
        && let Some(quoted) = message.strip_suffix(" is not defined")
        && let Some(bare) = quoted
            .strip_prefix('\'')
            .and_then(|rest| rest.strip_suffix('\''))
    {
        return format!("{bare} is not defined");
    }
    if name == "TypeError"
        && message == "not a function"
        && let (Some(source), Some((line, column))) = (source, position)
        && let Some(callee) = callee_at(source, line, column)
    {
        return format!("{callee} is not a function");
    }
    message.to_owned()
}

/// The dotted name (`tools.web__search`, `run`) that the 1-based `line` and `column` point into,
/// when a call follows it.
fn callee_at(source: &str, line: u32, column: u32) -> Option<String> {
    let text: Vec<char> = source
        .lines()
        .nth(line.checked_sub(1)? as usize)?
        .chars()
        .collect();
    let at = (column.checked_sub(1)? as usize).min(text.len());
    let part = |c: char| c.is_alphanumeric() || c == '_' || c == '$' || c == '.';
    let start = (0..at)
        .rev()
        .take_while(|&i| part(text[i]))
        .last()
        .unwrap_or(at);
    let end = (at..text.len())
        .find(|&i| !part(text[i]))
        .unwrap_or(text.len());
    let callee: String = text[start..end].iter().collect();
    let follows = text[end..].iter().find(|c| !c.is_whitespace());
    (!callee.is_empty() && !callee.starts_with('.') && follows == Some(&'(')).then_some(callee)
}

/// A thrown value that is not an `Error`, as V8 renders one.
fn render_value(ctx: &Ctx<'_>, value: &Value<'_>) -> String {
    if let Some(symbol) = value.as_symbol() {
        let description = symbol
            .description()
            .ok()
            .and_then(|description| {
                description
                    .as_string()
                    .and_then(|text| text.to_string().ok())
            })
            .unwrap_or_default();
        return format!("Symbol({description})");
    }
    if let Some(object) = value.as_object() {
        // As V8 renders a thrown object without running it: `[object Object]` for one with a
        // `toString` of its own (never called), `#<Object>` otherwise.
        let own_to_string = object
            .keys::<String>()
            .any(|key| key.is_ok_and(|key| key == "toString"));
        return if own_to_string {
            "[object Object]".to_owned()
        } else {
            "#<Object>".to_owned()
        };
    }
    let _ = ctx;
    value
        .get::<rquickjs::convert::Coerced<String>>()
        .map(|text| text.0)
        .unwrap_or_else(|_| "uncaught exception (a value QuickJS could not describe)".to_owned())
}

/// The cell's frames of a QuickJS stack (`    at f (cell.js:2:9)` lines), in the form V8's error
/// texts use: `\n    at f (cell.js:2:9)`, or `\n    at cell.js:2:9` for the module's body.
fn cell_frames(stack: &str) -> String {
    let mut frames = String::new();
    for line in stack.lines() {
        let Some(rest) = line.trim().strip_prefix("at ") else {
            continue;
        };
        let (name, location) = match rest.rsplit_once(" (") {
            Some((name, location)) => (name.trim(), location.trim_end_matches(')')),
            None => ("", rest),
        };
        if !location.starts_with(&format!("{CELL_RESOURCE_NAME}:")) {
            continue;
        }
        if name.is_empty() || name == "<anonymous>" || name == "<eval>" {
            frames.push_str(&format!("\n    at {location}"));
        } else {
            frames.push_str(&format!("\n    at {name} ({location})"));
        }
    }
    frames
}

/// The line and column of the first frame of `stack` in the cell.
pub(crate) fn first_cell_position(stack: &str) -> Option<(u32, u32)> {
    stack.lines().find_map(|line| {
        let start = line.find(&format!("{CELL_RESOURCE_NAME}:"))?;
        let location = line[start + CELL_RESOURCE_NAME.len() + 1..].trim_end_matches(')');
        let (line_number, column) = location.split_once(':')?;
        Some((line_number.parse().ok()?, column.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_frames_keep_the_cell_in_v8_form() {
        let stack = "    at f (cell.js:2:9)\n    at g (codemode:bootstrap:10:3)\n    at <anonymous> (cell.js:5:1)\n";
        assert_eq!(
            cell_frames(stack),
            "\n    at f (cell.js:2:9)\n    at cell.js:5:1"
        );
        assert_eq!(first_cell_position(stack), Some((2, 9)));
        assert_eq!(first_cell_position("    at x (native)"), None);
    }

    #[test]
    fn messages_take_v8s_shape() {
        let source = "text(1);\nconst hits = await tools.ecoh({ q: 1 });";
        assert_eq!(
            v8_shaped_message("TypeError", "not a function", Some(source), Some((2, 26))),
            "tools.ecoh is not a function"
        );
        assert_eq!(
            v8_shaped_message("TypeError", "not a function", Some(source), Some((1, 1))),
            "text is not a function"
        );
        // No call there: left as QuickJS says it.
        assert_eq!(
            v8_shaped_message("TypeError", "not a function", Some("x.y;"), Some((1, 3))),
            "not a function"
        );
        assert_eq!(
            v8_shaped_message("ReferenceError", "'fetch' is not defined", None, None),
            "fetch is not defined"
        );
    }
}
