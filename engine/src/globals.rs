//! The engine-independent rules of a cell's globals (the globals), as plain Rust over strings and JSON values.
//!
//! An engine does the parts that only JavaScript can do (calling `String(value)`, `JSON.stringify`,
//! invoking a `toJSON`), then hands the results to these functions, which decide what becomes an
//! output item, an event, a stored value, or a refusal with the message the cell sees.
//!
//! The display rule every engine implements in JavaScript, for `text` and `notify`:
//! `undefined`, `null`, booleans, numbers, bigints and strings become `String(value)`; anything else
//! becomes `JSON.stringify(value)`, or `String(value)` when that yields `undefined` (functions,
//! symbols); an exception thrown while stringifying (a throwing `toJSON`, a cycle) propagates to
//! the caller.

use std::collections::HashMap;
use std::sync::Arc;

use codemode_protocol::limits::{
    DEFAULT_MAX_TOOL_CALLS_PER_CELL, MAX_NOTIFY_BYTES, MAX_STORED_BYTES_PER_CELL,
    MAX_TOOL_INPUT_BYTES, MAX_TOOL_INPUT_BYTES_IN_FLIGHT,
};
use codemode_protocol::{
    AudioItem, ImageDetail, ImageItem, JsonText, JsonTextError, OutputItem, StoredValue,
    StoredValues, ToolDefinition, ToolKind, ToolName, stored_entry_bytes,
};
use serde_json::Value;

use crate::RuntimeEvent;

/// A JavaScript string as an engine hands it over: UTF-8 in which each lone surrogate (a UTF-16
/// code unit that JavaScript allows alone and Unicode does not) is encoded as its own three bytes
/// (`ED A0..BF 80..BF`, the generalised UTF-8 that V8 writes by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsString {
    /// The text, each lone surrogate replaced by one U+FFFD.
    pub text: String,
    /// The lone surrogates, in order (as `\uD800` escapes, for messages).
    pub lone_surrogates: Vec<u16>,
}

impl JsString {
    /// Decodes an engine's bytes; anything else that is not UTF-8 is replaced too.
    pub fn decode(bytes: &[u8]) -> Self {
        let mut text = String::with_capacity(bytes.len());
        let mut lone_surrogates = Vec::new();
        let mut start = 0;
        let mut index = 0;
        while index + 2 < bytes.len() {
            if bytes[index] == 0xED
                && (0xA0..=0xBF).contains(&bytes[index + 1])
                && (0x80..=0xBF).contains(&bytes[index + 2])
            {
                text.push_str(&String::from_utf8_lossy(&bytes[start..index]));
                text.push(char::REPLACEMENT_CHARACTER);
                let unit = 0xD000
                    | (u16::from(bytes[index + 1] & 0x3F) << 6)
                    | u16::from(bytes[index + 2] & 0x3F);
                lone_surrogates.push(unit);
                index += 3;
                start = index;
            } else {
                index += 1;
            }
        }
        text.push_str(&String::from_utf8_lossy(&bytes[start..]));
        JsString {
            text,
            lone_surrogates,
        }
    }

    /// The text for a message: each lone surrogate written as its `\uXXXX` escape.
    pub fn escaped(&self) -> String {
        let mut surrogates = self.lone_surrogates.iter();
        self.text
            .chars()
            .map(|character| match character {
                char::REPLACEMENT_CHARACTER => match surrogates.next() {
                    Some(unit) => format!("\\u{unit:04X}"),
                    None => character.to_string(),
                },
                other => other.to_string(),
            })
            .collect()
    }
}

/// Stored values and tool arguments travel as JSON, which holds only Unicode strings; JavaScript
/// strings with lone surrogates are refused (with this reason) rather than silently altered.
const LONE_SURROGATE_REASON: &str = "has a string with a lone surrogate (half of a UTF-16 pair), \
    which JSON text cannot carry exactly; remove it, or replace it with \"\\uFFFD\"";

/// How deeply stored values and tool arguments may nest.
pub const MAX_JSON_DEPTH: usize = 128;

/// The module every engine resolves for a cell that imports it (and only this one): it exports
/// [`THROW_SITE_BINDING`], an object whose property [`THROW_SITE_PROPERTY`] has a setter that
/// throws the value assigned to it, recording where the assignment is as the throw's position
/// (line, and the column of the `throw` it stands for), so that a thrown value that is not an
/// `Error` (`throw null`, `throw { code: 1 }`), which JavaScript engines keep no position for,
/// still has one in the cell's error text.
///
/// The session writes each `throw` statement of a cell as [`THROW_SITE_MARKER`], the same length
/// (`throw x;` runs as `$$.t= x;`), so every other line and column is unchanged, and appends
/// [`THROW_SITE_IMPORT`] as a last line of its own (imports are hoisted). The binding is the
/// module's own: no global is defined, so a cell's view of `globalThis` is the same whether it was
/// marked or not. A cell that names the binding itself is left as written. The V8 shim keeps the
/// same names (`kThrowSiteModule`, `kThrowSiteBinding`, `kThrowSiteProperty`).
pub const THROW_SITE_MODULE: &str = "codemode:throw-site";

/// The name the throw-site module exports its object under, and the cell imports it as.
pub const THROW_SITE_BINDING: &str = "$$";

/// The property of the throw-site object whose setter throws.
pub const THROW_SITE_PROPERTY: &str = "t";

/// What each marked `throw` keyword is written as: an assignment to the throw-site object's
/// property, exactly as long as `throw`.
pub const THROW_SITE_MARKER: &str = "$$.t=";

/// The line the session appends to a marked cell: the import of the throw-site object.
pub const THROW_SITE_IMPORT: &str = "\nimport { $$ } from \"codemode:throw-site\";";

const _: () = {
    assert!(THROW_SITE_MARKER.len() == "throw".len());
};

/// Why `serialized` (the output of `JSON.stringify`) is not a value codemode can keep: a phrase
/// that follows "the value" or "the argument".
fn unrepresentable(serialized: &str, error: &serde_json::Error) -> String {
    let message = error.to_string();
    if message.contains("surrogate") || has_surrogate_escape(serialized) {
        LONE_SURROGATE_REASON.to_owned()
    } else if message.contains("recursion limit") {
        format!(
            "is nested more than {MAX_JSON_DEPTH} levels deep, past the limit; flatten it, or \
             pass it as a JSON string"
        )
    } else {
        format!("is not valid JSON ({message})")
    }
}

/// Why JSON text a cell made cannot be passed on: a phrase that follows "the argument".
fn unreadable_text(error: &JsonTextError) -> String {
    match error {
        JsonTextError::LoneSurrogate => LONE_SURROGATE_REASON.to_owned(),
        JsonTextError::TooDeep => format!(
            "is nested more than {MAX_JSON_DEPTH} levels deep, past the limit; flatten it, or pass \
             it as a JSON string"
        ),
        other => other.to_string(),
    }
}

/// Whether JSON text has a `\\uD800`-`\\uDFFF` escape: `JSON.stringify` writes lone surrogates
/// so (and paired ones as plain UTF-8).
fn has_surrogate_escape(json: &str) -> bool {
    json.as_bytes().windows(4).any(|window| {
        window[0] == b'\\'
            && window[1] == b'u'
            && matches!(window[2], b'd' | b'D')
            && matches!(window[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// A global refused its arguments; the engine throws an `Error` with this message into the cell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// The message the cell's `Error` carries.
    pub message: String,
}

impl Refusal {
    fn new(message: impl Into<String>) -> Self {
        Refusal {
            message: message.into(),
        }
    }
}

/// The state behind the globals of one cell that every engine keeps the same way: tool-call ids,
/// the stored values the cell sees, and the writes it will commit.
#[derive(Debug)]
pub struct CellGlobals {
    call_id: String,
    tools: Vec<ToolDefinition>,
    /// The session's values when the cell started, shared with the session (never copied).
    stored_values: Arc<StoredValues>,
    /// What the cell stored, over `stored_values`.
    stored_value_writes: StoredValues,
    /// The JSON bytes of `stored_value_writes`, kept as writes come and go (bounded).
    stored_write_bytes: usize,
    tool_calls_made: u64,
    max_tool_calls: u64,
    /// The argument bytes of each tool call not yet answered, whose sum is bounded.
    tool_input_in_flight: HashMap<String, usize>,
    tool_input_in_flight_bytes: usize,
}

/// A name and description as `ALL_TOOLS` lists them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolListing {
    /// The tool's global name (`tools.<name>`).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its TypeScript declaration, for a model that looks the tool up from inside a cell.
    pub declaration: String,
    /// What the tool says of its effects, when it says anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<codemode_protocol::ToolAnnotations>,
}

impl CellGlobals {
    /// The globals' state for one cell: its call id, tools and stored-value snapshot.
    pub fn new(
        call_id: String,
        tools: Vec<ToolDefinition>,
        stored_values: Arc<StoredValues>,
    ) -> Self {
        CellGlobals {
            call_id,
            tools,
            stored_values,
            stored_value_writes: StoredValues::new(),
            stored_write_bytes: 0,
            tool_calls_made: 0,
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS_PER_CELL,
            tool_input_in_flight: HashMap::new(),
            tool_input_in_flight_bytes: 0,
        }
    }

    /// These globals with another cap on the cell's tool calls (see `CellLimits::max_tool_calls`).
    pub fn with_max_tool_calls(mut self, max_tool_calls: u64) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    /// The enabled tools as `ALL_TOOLS` lists them, in order; a tool's index here is how an engine
    /// names it in [`CellGlobals::tool_call`].
    pub fn tool_listing(&self) -> Vec<ToolListing> {
        self.tools
            .iter()
            .map(|tool| ToolListing {
                name: tool.global_name(),
                description: tool.description.clone(),
                declaration: codemode_protocol::tool_declaration(tool),
                annotations: tool.annotations,
            })
            .collect()
    }

    /// A call of the tool at `tool_index` with its JSON-serialised argument (`None`: called without
    /// one). Returns the [`RuntimeEvent::ToolCall`] to emit, with a fresh id.
    pub fn tool_call(
        &mut self,
        tool_index: usize,
        input_json: Option<String>,
    ) -> Result<RuntimeEvent, Refusal> {
        let tool = self
            .tools
            .get(tool_index)
            .ok_or_else(|| Refusal::new(format!("unknown tool index {tool_index}")))?;
        if let Some(json) = &input_json
            && json.len() > MAX_TOOL_INPUT_BYTES
        {
            return Err(Refusal::new(format!(
                "tools.{}: the argument is {} bytes of JSON, past the limit of {} MiB; pass less \
                 data per call (split it, or store it and pass a reference)",
                tool.global_name(),
                json.len(),
                MAX_TOOL_INPUT_BYTES >> 20
            )));
        }
        if self.tool_calls_made >= self.max_tool_calls {
            return Err(Refusal::new(format!(
                "tools.{}: this cell has made {} tool calls, its limit (max_tool_calls); do the \
                 work in fewer calls (batch them), or split it across cells",
                tool.global_name(),
                self.tool_calls_made
            )));
        }
        let bytes = input_json.as_ref().map_or(0, String::len);
        let in_flight = self.tool_input_in_flight_bytes.saturating_add(bytes);
        if in_flight > MAX_TOOL_INPUT_BYTES_IN_FLIGHT {
            return Err(Refusal::new(format!(
                "tools.{}: the arguments of this cell's unanswered tool calls would hold {in_flight} \
                 bytes of JSON, past the limit of {} MiB per cell; await some calls before \
                 starting more, or pass less data per call",
                tool.global_name(),
                MAX_TOOL_INPUT_BYTES_IN_FLIGHT >> 20
            )));
        }
        // Kept as the text it is: checked to be JSON a tool can read, never expanded here.
        let input = match input_json {
            None => None,
            Some(json) => Some(JsonText::parse(json).map_err(|error| {
                Refusal::new(format!(
                    "tools.{}: the argument {}",
                    tool.global_name(),
                    unreadable_text(&error)
                ))
            })?),
        };
        self.tool_calls_made += 1;
        let id = format!("tool-{}", self.tool_calls_made);
        self.tool_input_in_flight.insert(id.clone(), bytes);
        self.tool_input_in_flight_bytes = in_flight;
        Ok(RuntimeEvent::ToolCall {
            id,
            name: ToolName::clone(&tool.name),
            kind: ToolKind::clone(&tool.kind),
            input,
        })
    }

    /// `store(key, value)`: `key` is `String(key)`; `serialized` is `JSON.stringify(value)`, or
    /// `None` when that yielded `undefined`.
    ///
    /// Keys and values are kept exactly as JavaScript has them, or refused: a key or a string in
    /// the value with a lone surrogate is refused (JSON, in which values are saved, cannot carry
    /// it), so two keys that differ only in lone surrogates never collide.
    pub fn store(&mut self, key: &JsString, serialized: Option<&str>) -> Result<(), Refusal> {
        if !key.lone_surrogates.is_empty() {
            return Err(Refusal::new(format!(
                "Unable to store \"{}\": the key {LONE_SURROGATE_REASON}.",
                key.escaped()
            )));
        }
        let key = key.text.clone();
        let Some(json) = serialized else {
            return Err(Refusal::new(format!(
                "Unable to store {key:?}. Only plain serializable objects can be stored."
            )));
        };
        let replaced = self
            .stored_value_writes
            .get(&key)
            .map_or(0, |value| stored_entry_bytes(&key, value));
        let total = (self.stored_write_bytes - replaced).saturating_add(key.len() + json.len());
        if total > MAX_STORED_BYTES_PER_CELL {
            return Err(Refusal::new(format!(
                "Unable to store {key:?}: the cell's stored values would hold {total} bytes of JSON, \
                 past the limit of {} MiB per cell; store less, or keep large data outside stored \
                 values",
                MAX_STORED_BYTES_PER_CELL >> 20
            )));
        }
        let value = StoredValue::from_json(json.to_owned()).map_err(|error| {
            Refusal::new(format!(
                "Unable to store {key:?}: the value {}.",
                unrepresentable(json, &error)
            ))
        })?;
        self.stored_write_bytes = total;
        self.stored_value_writes.insert(key, value);
        Ok(())
    }

    /// `load(key)`: the stored value as JSON text, for the engine to parse into a fresh copy, or
    /// `None` for `undefined`.
    pub fn load(&self, key: &JsString) -> Option<String> {
        // No key with a lone surrogate is ever stored.
        if !key.lone_surrogates.is_empty() {
            return None;
        }
        self.stored_value_writes
            .get(&key.text)
            .or_else(|| self.stored_values.get(&key.text))
            .map(|value| value.json().to_owned())
    }

    /// The call `id` was answered (resolved or rejected): its argument no longer counts against
    /// the bytes in flight. Returns whether it was unanswered.
    pub fn tool_call_settled(&mut self, id: &str) -> bool {
        match self.tool_input_in_flight.remove(id) {
            Some(bytes) => {
                self.tool_input_in_flight_bytes -= bytes;
                true
            }
            None => false,
        }
    }

    /// Whether a tool call of this cell is still unanswered.
    pub fn has_unanswered_tool_calls(&self) -> bool {
        !self.tool_input_in_flight.is_empty()
    }

    /// `notify(value)` with `value` already displayed: the event to deliver, or the refusal of an
    /// empty or whitespace-only text.
    pub fn notify(&self, text: String) -> Result<RuntimeEvent, Refusal> {
        if text.trim().is_empty() {
            return Err(Refusal::new("notify expects non-empty text"));
        }
        if text.len() > MAX_NOTIFY_BYTES {
            return Err(Refusal::new(format!(
                "notify: the text is {} bytes, past the limit of {} KiB; notifications are for \
                 short progress messages, put long output in text(...)",
                text.len(),
                MAX_NOTIFY_BYTES >> 10
            )));
        }
        Ok(RuntimeEvent::Notify {
            call_id: self.call_id.clone(),
            text,
        })
    }

    /// The values this cell stored, to be committed when it completes; taken out, so a second
    /// call returns none.
    pub fn take_stored_value_writes(&mut self) -> StoredValues {
        self.stored_write_bytes = 0;
        std::mem::take(&mut self.stored_value_writes)
    }
}

/// `text(value)` with `value` already displayed.
pub fn text_item(text: String) -> OutputItem {
    OutputItem::Text { text }
}

/// `image(urlOrItem, detail?)`. `value` is the first argument as JSON (`None` when it has no JSON
/// form); `detail_override` is `String(detail)` when a second argument was given.
pub fn image_item(
    value: Option<Value>,
    detail_override: Option<&str>,
) -> Result<OutputItem, Refusal> {
    let (url, item_detail) = match value {
        Some(Value::String(url)) => (url, None),
        Some(Value::Object(mut object)) => {
            if object.get("type").and_then(Value::as_str) == Some("image") {
                (
                    mcp_data_url(&mut object, "image")?,
                    mcp_image_detail(&object),
                )
            } else {
                let Some(Value::String(url)) = object.remove("image_url") else {
                    return Err(image_shape_refusal());
                };
                let detail = match object.remove("detail") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(detail)) => Some(detail),
                    Some(_) => return Err(Refusal::new("image detail must be a string")),
                };
                (url, detail)
            }
        }
        _ => return Err(image_shape_refusal()),
    };
    check_data_url(&url, "image")?;
    let detail = match detail_override.or(item_detail.as_deref()) {
        None => ImageDetail::default(),
        Some(detail) => detail
            .parse::<ImageDetail>()
            .map_err(|error| Refusal::new(error.to_string()))?,
    };
    Ok(OutputItem::Image(ImageItem {
        image_url: url,
        detail,
    }))
}

/// `generatedImage(result)`, as upstream code mode has it: the result of an image-generation
/// tool (anything `image` takes as an object: `{ image_url, detail? }` or an MCP image block) with
/// an optional `output_hint` string. The image is emitted first, then the hint as text; both or
/// neither (a refusal emits nothing). The detail is the result's own; there is no override.
pub fn generated_image_items(value: Option<Value>) -> Result<Vec<OutputItem>, Refusal> {
    let Some(Value::Object(mut result)) = value else {
        return Err(Refusal::new(
            "generatedImage expects an image generation result object, such as { image_url, \
             output_hint? } or an MCP image block",
        ));
    };
    let hint = match result.remove("output_hint") {
        None => None,
        Some(Value::String(hint)) => Some(hint),
        Some(_) => {
            return Err(Refusal::new(
                "generatedImage output_hint must be a string when provided",
            ));
        }
    };
    let image = image_item(Some(Value::Object(result)), None)?;
    Ok(std::iter::once(image).chain(hint.map(text_item)).collect())
}

/// `audio(urlOrItem)`: a `data:` URL string, `{ audio_url }`, or an MCP audio block.
pub fn audio_item(value: Option<Value>) -> Result<OutputItem, Refusal> {
    let url = match value {
        Some(Value::String(url)) => url,
        Some(Value::Object(mut object)) => {
            if object.get("type").and_then(Value::as_str) == Some("audio") {
                mcp_data_url(&mut object, "audio")?
            } else {
                let Some(Value::String(url)) = object.remove("audio_url") else {
                    return Err(audio_shape_refusal());
                };
                url
            }
        }
        _ => return Err(audio_shape_refusal()),
    };
    check_data_url(&url, "audio")?;
    Ok(OutputItem::Audio(AudioItem { audio_url: url }))
}

fn image_shape_refusal() -> Refusal {
    Refusal::new(
        "image expects a data: URL string, an object { image_url, detail? }, or an MCP image block \
         { type: \"image\", data, mimeType }",
    )
}

fn audio_shape_refusal() -> Refusal {
    Refusal::new(
        "audio expects a data: URL string, an object { audio_url }, or an MCP audio block \
         { type: \"audio\", data, mimeType }",
    )
}

/// The detail an MCP image block's `_meta` asks for, when it names one codemode knows (a server's
/// unknown value is left out, not an error the cell could do nothing about).
fn mcp_image_detail(block: &serde_json::Map<String, Value>) -> Option<String> {
    let detail = block
        .get("_meta")?
        .get(codemode_protocol::MCP_IMAGE_DETAIL_META)?
        .as_str()?;
    detail
        .parse::<ImageDetail>()
        .is_ok()
        .then(|| detail.to_owned())
}

/// An MCP content block `{ type, data, mimeType }` as a `data:<mime>;base64,<data>` URL.
fn mcp_data_url(block: &mut serde_json::Map<String, Value>, kind: &str) -> Result<String, Refusal> {
    let data = block.remove("data");
    let mime = block.remove("mimeType");
    match (data, mime) {
        (Some(Value::String(data)), Some(Value::String(mime))) if !mime.trim().is_empty() => {
            Ok(format!("data:{mime};base64,{data}"))
        }
        _ => Err(Refusal::new(format!(
            "an MCP {kind} block needs string fields data (base64) and mimeType"
        ))),
    }
}

fn check_data_url(url: &str, kind: &str) -> Result<(), Refusal> {
    let scheme = url
        .split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("data") if url.contains(',') => Ok(()),
        Some("data") => Err(Refusal::new(format!(
            "invalid {kind} data URL: expected data:<mime>;base64,<payload>"
        ))),
        Some("http" | "https") => Err(Refusal::new(format!(
            "remote {kind} URLs are not supported; the runtime does not fetch them, so pass a \
             base64 data URL (data:<mime>;base64,<payload>) instead"
        ))),
        _ => Err(Refusal::new(format!(
            "invalid {kind} URL: only data: URLs are accepted (data:<mime>;base64,<payload>)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_argument_past_the_limit_is_refused_with_the_limit() {
        let mut globals = globals();
        let big = format!("\"{}\"", "x".repeat(MAX_TOOL_INPUT_BYTES));
        let refusal = globals.tool_call(0, Some(big.clone())).unwrap_err();
        assert!(
            refusal.message.contains("past the limit of 16 MiB"),
            "{refusal}"
        );
        // A refused call takes no id: the next call is still tool-1.
        let next = globals.tool_call(0, Some("1".into())).unwrap();
        assert!(matches!(next, RuntimeEvent::ToolCall { ref id, .. } if id == "tool-1"));
    }

    #[test]
    fn stored_values_past_the_per_cell_limit_are_refused_but_overwriting_is_counted_once() {
        let mut globals = globals();
        let key = |text: &str| JsString::decode(text.as_bytes());
        let half = format!("\"{}\"", "x".repeat(MAX_STORED_BYTES_PER_CELL / 2 - 10));
        globals.store(&key("a"), Some(&half)).unwrap();
        // Writing the same key again replaces its size.
        globals.store(&key("a"), Some(&half)).unwrap();
        globals.store(&key("b"), Some(&half)).unwrap();
        let refusal = globals.store(&key("c"), Some(&half)).unwrap_err();
        assert!(
            refusal
                .message
                .contains("past the limit of 64 MiB per cell"),
            "{refusal}"
        );
        assert_eq!(globals.take_stored_value_writes().len(), 2);
    }

    #[test]
    fn unanswered_tool_arguments_are_capped_in_total_and_freed_when_answered() {
        let mut globals = globals();
        let eight_mib = format!("\"{}\"", "x".repeat(8 << 20));
        let mut ids = Vec::new();
        let refusal = loop {
            match globals.tool_call(0, Some(eight_mib.clone())) {
                Ok(RuntimeEvent::ToolCall { id, .. }) => ids.push(id),
                Ok(other) => panic!("{other:?}"),
                Err(refusal) => break refusal,
            }
        };
        // 64 MiB hold seven calls of just over 8 MiB: the eighth is refused, by name.
        assert_eq!(ids.len(), 7);
        assert!(
            refusal.message.contains("unanswered tool calls")
                && refusal.message.contains("64 MiB per cell"),
            "{refusal}"
        );
        assert!(globals.has_unanswered_tool_calls());
        assert!(globals.tool_call_settled(&ids[0]));
        assert!(!globals.tool_call_settled(&ids[0]), "settled once");
        globals.tool_call(0, Some(eight_mib.clone())).unwrap();
        for id in &ids[1..] {
            globals.tool_call_settled(id);
        }
        assert!(
            globals.has_unanswered_tool_calls(),
            "the last call is unanswered"
        );
    }

    #[test]
    fn storing_many_keys_keeps_a_running_total() {
        let mut globals = globals();
        let started = std::time::Instant::now();
        for index in 0..100_000 {
            let key = JsString::decode(format!("key-{index}").as_bytes());
            globals.store(&key, Some("1")).unwrap();
        }
        let writes = globals.take_stored_value_writes();
        assert_eq!(writes.len(), 100_000);
        assert_eq!(total(&writes), codemode_protocol::stored_bytes(&writes));
        // A hang guard, not a timing assertion: quadratic work would take minutes.
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    fn total(writes: &StoredValues) -> usize {
        writes
            .iter()
            .map(|(key, value)| key.len() + value.len())
            .sum()
    }

    #[test]
    fn tool_calls_past_the_cap_are_refused_by_name() {
        let mut globals = globals().with_max_tool_calls(3);
        for _ in 0..3 {
            globals.tool_call(0, Some("1".into())).unwrap();
        }
        let refusal = globals.tool_call(0, Some("1".into())).unwrap_err();
        assert!(
            refusal.message.contains("made 3 tool calls")
                && refusal.message.contains("max_tool_calls"),
            "{refusal}"
        );
    }

    fn globals() -> CellGlobals {
        CellGlobals::new(
            "call-1".into(),
            vec![ToolDefinition::function(
                ToolName::namespaced("web", "search"),
                "Search.",
            )],
            Arc::new(StoredValues::from([(
                "seen".to_owned(),
                StoredValue::from(json!({"n": 1})),
            )])),
        )
    }

    #[test]
    fn tool_calls_get_sequential_ids_and_parsed_input() {
        let mut globals = globals();
        let first = globals.tool_call(0, Some(r#"{"q":"x"}"#.into())).unwrap();
        let second = globals.tool_call(0, None).unwrap();
        assert_eq!(
            first,
            RuntimeEvent::ToolCall {
                id: "tool-1".into(),
                name: ToolName::namespaced("web", "search"),
                kind: ToolKind::Function,
                input: Some(json!({"q": "x"}).into()),
            }
        );
        assert!(
            matches!(second, RuntimeEvent::ToolCall { ref id, input: None, .. } if id == "tool-2")
        );
        assert_eq!(
            globals.tool_call(3, None).unwrap_err().message,
            "unknown tool index 3"
        );
    }

    #[test]
    fn stored_values_are_visible_at_once_and_only_writes_are_committed() {
        let mut globals = globals();
        let key = |text: &str| JsString::decode(text.as_bytes());
        assert_eq!(globals.load(&key("seen")).as_deref(), Some(r#"{"n":1}"#));
        assert_eq!(globals.load(&key("missing")), None);
        globals.store(&key("k"), Some("[1,2]")).unwrap();
        assert_eq!(globals.load(&key("k")).as_deref(), Some("[1,2]"));
        assert_eq!(
            globals.store(&key("f"), None).unwrap_err().message,
            "Unable to store \"f\". Only plain serializable objects can be stored."
        );
        assert_eq!(
            globals.take_stored_value_writes(),
            StoredValues::from([("k".to_owned(), StoredValue::from(json!([1, 2])))])
        );
    }

    #[test]
    fn a_lone_surrogate_decodes_to_one_replacement_character_and_is_remembered() {
        // "a", U+D800 alone, "b", then a proper pair (U+1F600), then U+DC00 alone.
        let bytes = b"a\xED\xA0\x80b\xF0\x9F\x98\x80\xED\xB0\x80";
        let decoded = JsString::decode(bytes);
        assert_eq!(decoded.text, "a\u{FFFD}b\u{1F600}\u{FFFD}");
        assert_eq!(decoded.lone_surrogates, [0xD800, 0xDC00]);
        assert_eq!(decoded.escaped(), "a\\uD800b\u{1F600}\\uDC00");
        assert!(
            JsString::decode("plain \u{FFFD}".as_bytes())
                .lone_surrogates
                .is_empty()
        );
    }

    #[test]
    fn keys_and_values_with_lone_surrogates_are_refused_with_the_reason() {
        let mut globals = globals();
        let high = JsString::decode(b"\xED\xA0\x80");
        let low = JsString::decode(b"\xED\xB0\x80");
        let refusal = globals.store(&high, Some("1")).unwrap_err().message;
        assert!(
            refusal.starts_with(
                "Unable to store \"\\uD800\": the key has a string with a lone surrogate"
            ),
            "{refusal}"
        );
        assert!(globals.store(&low, Some("1")).is_err());
        // A stored U+FFFD key is not what a lone-surrogate key loads.
        globals
            .store(&JsString::decode("\u{FFFD}".as_bytes()), Some("1"))
            .unwrap();
        assert_eq!(globals.load(&high), None);
        let refusal = globals
            .store(&JsString::decode(b"k"), Some(r#"["\ud800"]"#))
            .unwrap_err()
            .message;
        assert!(
            refusal
                .starts_with("Unable to store \"k\": the value has a string with a lone surrogate"),
            "{refusal}"
        );
    }

    #[test]
    fn a_value_nested_past_the_limit_is_refused_naming_the_limit() {
        let mut globals = globals();
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let refusal = globals
            .store(&JsString::decode(b"deep"), Some(&deep))
            .unwrap_err()
            .message;
        assert_eq!(
            refusal,
            "Unable to store \"deep\": the value is nested more than 128 levels deep, past the limit; flatten it, or pass it as a JSON string."
        );
    }

    #[test]
    fn notify_refuses_blank_text() {
        let globals = globals();
        assert_eq!(
            globals.notify(" \n\t".into()).unwrap_err().message,
            "notify expects non-empty text"
        );
        assert_eq!(
            globals.notify("half way".into()).unwrap(),
            RuntimeEvent::Notify {
                call_id: "call-1".into(),
                text: "half way".into()
            }
        );
    }

    #[test]
    fn the_throw_site_names_agree() {
        assert_eq!(
            THROW_SITE_MARKER,
            format!("{THROW_SITE_BINDING}.{THROW_SITE_PROPERTY}=")
        );
        assert_eq!(
            THROW_SITE_IMPORT,
            format!("\nimport {{ {THROW_SITE_BINDING} }} from {THROW_SITE_MODULE:?};")
        );
    }

    #[test]
    fn images_accept_data_urls_objects_and_mcp_blocks() {
        let image = |url: &str, detail| {
            OutputItem::Image(ImageItem {
                image_url: url.into(),
                detail,
            })
        };
        assert_eq!(
            image_item(Some(json!("data:image/png;base64,AA==")), None),
            Ok(image("data:image/png;base64,AA==", ImageDetail::High))
        );
        assert_eq!(
            image_item(
                Some(json!({"image_url": "DATA:image/png;base64,AA==", "detail": "LOW"})),
                None
            ),
            Ok(image("DATA:image/png;base64,AA==", ImageDetail::Low))
        );
        assert_eq!(
            image_item(
                Some(json!({"image_url": "data:image/png;base64,AA==", "detail": "low"})),
                Some("original")
            ),
            Ok(image("data:image/png;base64,AA==", ImageDetail::Original))
        );
        assert_eq!(
            image_item(
                Some(json!({"type": "image", "data": "AA==", "mimeType": "image/jpeg"})),
                Some("auto")
            ),
            Ok(image("data:image/jpeg;base64,AA==", ImageDetail::Auto))
        );
        // The block's `_meta["codex/imageDetail"]` is its detail, unless the cell names one;
        // a value codemode does not know is left out.
        let block = |detail: &str| {
            json!({"type": "image", "data": "AA==", "mimeType": "image/png",
                   "_meta": {"codex/imageDetail": detail}})
        };
        assert_eq!(
            image_item(Some(block("original")), None),
            Ok(image("data:image/png;base64,AA==", ImageDetail::Original))
        );
        assert_eq!(
            image_item(Some(block("original")), Some("low")),
            Ok(image("data:image/png;base64,AA==", ImageDetail::Low))
        );
        assert_eq!(
            image_item(Some(block("sharpest")), None),
            Ok(image("data:image/png;base64,AA==", ImageDetail::High))
        );
    }

    #[test]
    fn image_refusals_say_what_to_pass_instead() {
        let refusals: Vec<String> = [
            image_item(Some(json!("https://example.com/cat.png")), None),
            image_item(Some(json!("ftp://example.com/cat.png")), None),
            image_item(Some(json!("data:image/png;base64")), None),
            image_item(Some(json!(42)), None),
            image_item(None, None),
            image_item(Some(json!("data:image/png;base64,AA==")), Some("medium")),
            image_item(Some(json!({"type": "image", "data": "AA=="})), None),
        ]
        .into_iter()
        .map(|result| result.unwrap_err().message)
        .collect();
        insta::assert_debug_snapshot!(refusals);
    }

    #[test]
    fn audio_accepts_data_urls_objects_and_mcp_blocks_and_refuses_the_rest() {
        let audio = |url: &str| {
            OutputItem::Audio(AudioItem {
                audio_url: url.into(),
            })
        };
        assert_eq!(
            audio_item(Some(json!("data:audio/wav;base64,UklG"))),
            Ok(audio("data:audio/wav;base64,UklG"))
        );
        assert_eq!(
            audio_item(Some(json!({"audio_url": "data:audio/mp3;base64,SUQz"}))),
            Ok(audio("data:audio/mp3;base64,SUQz"))
        );
        assert_eq!(
            audio_item(Some(
                json!({"type": "audio", "data": "UklG", "mimeType": "audio/wav"})
            )),
            Ok(audio("data:audio/wav;base64,UklG"))
        );
        let refusals: Vec<String> = [
            audio_item(Some(json!("http://example.com/a.wav"))),
            audio_item(Some(json!("file:///tmp/a.wav"))),
            audio_item(Some(json!({"url": "data:audio/wav;base64,UklG"}))),
        ]
        .into_iter()
        .map(|result| result.unwrap_err().message)
        .collect();
        insta::assert_debug_snapshot!(refusals);
    }
}
