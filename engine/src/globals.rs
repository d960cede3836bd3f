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

use codemode_protocol::{
    AudioItem, ImageDetail, ImageItem, OutputItem, ToolDefinition, ToolKind, ToolName,
};
use serde_json::Value;

use crate::RuntimeEvent;

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
    stored_values: HashMap<String, Value>,
    stored_value_writes: HashMap<String, Value>,
    tool_calls_made: u64,
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
}

impl CellGlobals {
    /// The globals' state for one cell: its call id, tools and stored-value snapshot.
    pub fn new(
        call_id: String,
        tools: Vec<ToolDefinition>,
        stored_values: HashMap<String, Value>,
    ) -> Self {
        CellGlobals {
            call_id,
            tools,
            stored_values,
            stored_value_writes: HashMap::new(),
            tool_calls_made: 0,
        }
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
            })
            .collect()
    }

    /// A call of the tool at `tool_index` with its JSON-serialised argument (`None`: called without
    /// one). Returns the [`RuntimeEvent::ToolCall`] to emit, with a fresh id.
    pub fn tool_call(
        &mut self,
        tool_index: usize,
        input_json: Option<&str>,
    ) -> Result<RuntimeEvent, Refusal> {
        let tool = self
            .tools
            .get(tool_index)
            .ok_or_else(|| Refusal::new(format!("unknown tool index {tool_index}")))?;
        let input = match input_json {
            None => None,
            Some(json) => Some(serde_json::from_str(json).map_err(|error| {
                Refusal::new(format!(
                    "tools.{} received an argument that is not valid JSON: {error}",
                    tool.global_name()
                ))
            })?),
        };
        self.tool_calls_made += 1;
        Ok(RuntimeEvent::ToolCall {
            id: format!("tool-{}", self.tool_calls_made),
            name: ToolName::clone(&tool.name),
            kind: ToolKind::clone(&tool.kind),
            input,
        })
    }

    /// `store(key, value)`: `key` is already `String(key)`; `serialized` is `JSON.stringify(value)`,
    /// or `None` when that threw or yielded `undefined`.
    pub fn store(&mut self, key: String, serialized: Option<&str>) -> Result<(), Refusal> {
        let unstorable = || {
            Refusal::new(format!(
                "Unable to store {key:?}. Only plain serializable objects can be stored."
            ))
        };
        let value: Value = match serialized {
            Some(json) => serde_json::from_str(json).map_err(|_| unstorable())?,
            None => return Err(unstorable()),
        };
        self.stored_values.insert(key.clone(), value.clone());
        self.stored_value_writes.insert(key, value);
        Ok(())
    }

    /// `load(key)`: the stored value as JSON text, for the engine to parse into a fresh copy, or
    /// `None` for `undefined`.
    pub fn load(&self, key: &str) -> Option<String> {
        self.stored_values.get(key).map(Value::to_string)
    }

    /// `notify(value)` with `value` already displayed: the event to deliver, or the refusal of an
    /// empty or whitespace-only text.
    pub fn notify(&self, text: String) -> Result<RuntimeEvent, Refusal> {
        if text.trim().is_empty() {
            return Err(Refusal::new("notify expects non-empty text"));
        }
        Ok(RuntimeEvent::Notify {
            call_id: self.call_id.clone(),
            text,
        })
    }

    /// The values this cell stored, to be committed when it completes; taken out, so a second
    /// call returns none.
    pub fn take_stored_value_writes(&mut self) -> HashMap<String, Value> {
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
                (mcp_data_url(&mut object, "image")?, None)
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

    fn globals() -> CellGlobals {
        CellGlobals::new(
            "call-1".into(),
            vec![ToolDefinition::function(
                ToolName::namespaced("web", "search"),
                "Search.",
            )],
            HashMap::from([("seen".to_owned(), json!({"n": 1}))]),
        )
    }

    #[test]
    fn tool_calls_get_sequential_ids_and_parsed_input() {
        let mut globals = globals();
        let first = globals.tool_call(0, Some(r#"{"q":"x"}"#)).unwrap();
        let second = globals.tool_call(0, None).unwrap();
        assert_eq!(
            first,
            RuntimeEvent::ToolCall {
                id: "tool-1".into(),
                name: ToolName::namespaced("web", "search"),
                kind: ToolKind::Function,
                input: Some(json!({"q": "x"})),
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
        assert_eq!(globals.load("seen").as_deref(), Some(r#"{"n":1}"#));
        assert_eq!(globals.load("missing"), None);
        globals.store("k".into(), Some("[1,2]")).unwrap();
        assert_eq!(globals.load("k").as_deref(), Some("[1,2]"));
        assert_eq!(
            globals.store("f".into(), None).unwrap_err().message,
            "Unable to store \"f\". Only plain serializable objects can be stored."
        );
        assert_eq!(
            globals.take_stored_value_writes(),
            HashMap::from([("k".to_owned(), json!([1, 2]))])
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
