//! JSON text kept as written: a tool's argument or result on its way between a cell and a tool,
//! passed on as the text it is (through the engine, the engine-process channel, the cell's actor)
//! and expanded into a tree only where something reads it. A `serde_json::Value` tree of a large
//! payload holds several times its text; the text is what the limits count.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// How deeply JSON text may nest (arrays and objects), as `serde_json` reads trees.
pub const MAX_JSON_TEXT_DEPTH: usize = 128;

/// Why text is not a [`JsonText`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonTextError {
    /// It is not one JSON value.
    #[error("is not valid JSON ({0})")]
    Invalid(serde_json::Error),
    /// It nests deeper than [`MAX_JSON_TEXT_DEPTH`].
    #[error("is nested more than {MAX_JSON_TEXT_DEPTH} levels deep")]
    TooDeep,
    /// A string in it has a `\uD800`–`\uDFFF` escape that is not half of a pair: no Rust string
    /// (and so no tree of it) can hold that.
    #[error("has a string with a lone surrogate")]
    LoneSurrogate,
}

/// Valid JSON text (one value), kept as written; serialised as that value, not as a string.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// `text`, once checked to be one JSON value that a tree can hold (nested at most
    /// [`MAX_JSON_TEXT_DEPTH`] levels, no lone surrogate): what reads it later cannot fail on
    /// it. The text is kept, not copied, and no tree is built.
    pub fn parse(text: String) -> Result<JsonText, JsonTextError> {
        check_depth_and_surrogates(&text)?;
        RawValue::from_string(text)
            .map(JsonText)
            .map_err(JsonTextError::Invalid)
    }

    /// Checks text read from elsewhere (a frame of an engine process, which may forge it) the way
    /// [`JsonText::parse`] checks what it keeps: deserialising checks only that it is JSON.
    pub fn check_readable(&self) -> Result<(), JsonTextError> {
        check_depth_and_surrogates(self.as_str())
    }

    /// The text of `value`.
    pub fn from_value(value: &Value) -> JsonText {
        // A `Value` always serialises (its map keys are strings).
        JsonText(serde_json::value::to_raw_value(value).expect("a Value serialises"))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// How many bytes the text holds.
    pub fn len(&self) -> usize {
        self.0.get().len()
    }

    /// Whether the text is empty (never: it is one JSON value).
    pub fn is_empty(&self) -> bool {
        self.0.get().is_empty()
    }

    /// The value as a tree, for code that reads it.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }
}

impl From<&Value> for JsonText {
    fn from(value: &Value) -> JsonText {
        JsonText::from_value(value)
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> JsonText {
        JsonText::from_value(&value)
    }
}

/// Equal when they hold the same JSON value (`{"a": 1}` and `{"a":1}` are equal).
impl PartialEq for JsonText {
    fn eq(&self, other: &JsonText) -> bool {
        self.as_str() == other.as_str()
            || matches!((self.to_value(), other.to_value()), (Ok(a), Ok(b)) if a == b)
    }
}

/// The text, cut to its first 200 bytes when longer: payloads may be megabytes.
impl std::fmt::Debug for JsonText {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.as_str();
        if text.len() <= 200 {
            write!(formatter, "JsonText({text})")
        } else {
            let mut end = 200;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            write!(
                formatter,
                "JsonText({}… {} bytes in all)",
                &text[..end],
                text.len()
            )
        }
    }
}

impl std::fmt::Display for JsonText {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The checks of [`JsonText::parse`] that `RawValue` does not make, in one pass over the bytes:
/// depth, and escapes of surrogates that do not pair (`\uD83D\uDE00` is one character; either
/// half alone is not). Text that is not JSON at all is left to `RawValue`.
fn check_depth_and_surrogates(text: &str) -> Result<(), JsonTextError> {
    let bytes = text.as_bytes();
    let hex = |at: usize| -> Option<u16> {
        let digits = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    };
    let mut depth = 0usize;
    let mut index = 0;
    let mut in_string = false;
    while index < bytes.len() {
        let byte = bytes[index];
        if in_string {
            match byte {
                b'"' => in_string = false,
                b'\\' if bytes.get(index + 1) == Some(&b'u') => {
                    let unit = hex(index + 2);
                    match unit {
                        Some(0xD800..=0xDBFF) => {
                            let paired = bytes.get(index + 6) == Some(&b'\\')
                                && bytes.get(index + 7) == Some(&b'u')
                                && matches!(hex(index + 8), Some(0xDC00..=0xDFFF));
                            if !paired {
                                return Err(JsonTextError::LoneSurrogate);
                            }
                            index += 12;
                            continue;
                        }
                        Some(0xDC00..=0xDFFF) => return Err(JsonTextError::LoneSurrogate),
                        _ => {
                            index += 6;
                            continue;
                        }
                    }
                }
                b'\\' => {
                    index += 2;
                    continue;
                }
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_JSON_TEXT_DEPTH {
                        return Err(JsonTextError::TooDeep);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        index += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_kept_as_written_and_travels_as_the_value_it_is() {
        let text = JsonText::parse(r#"{"b": [1, 2.50], "a": "é"}"#.to_owned()).unwrap();
        assert_eq!(text.as_str(), r#"{"b": [1, 2.50], "a": "é"}"#);
        // Inside a message it is the value, not a string of it.
        #[derive(Serialize, Deserialize)]
        struct Message {
            input: JsonText,
        }
        let message = serde_json::to_string(&Message {
            input: text.clone(),
        })
        .unwrap();
        assert_eq!(message, r#"{"input":{"b": [1, 2.50], "a": "é"}}"#);
        let read: Message = serde_json::from_str(&message).unwrap();
        assert_eq!(read.input.as_str(), text.as_str());
        assert_eq!(
            read.input,
            JsonText::from_value(&json!({"a": "é", "b": [1, 2.5]}))
        );
        assert_eq!(text.to_value().unwrap(), json!({"b": [1, 2.5], "a": "é"}));
    }

    #[test]
    fn what_is_not_one_json_value_is_refused() {
        for bad in ["", "{", "1 2", "[1,]", "nul"] {
            assert!(JsonText::parse(bad.to_owned()).is_err(), "{bad:?}");
        }
        let nested = |levels: usize| "[".repeat(levels) + &"]".repeat(levels);
        assert!(JsonText::parse(nested(128)).is_ok());
        assert!(matches!(
            JsonText::parse(nested(129)),
            Err(JsonTextError::TooDeep)
        ));
        // Brackets in strings do not nest.
        assert!(JsonText::parse(format!("[\"{}\"]", "[".repeat(300))).is_ok());
        // Surrogates: a pair is one character, either half alone is refused, and an escaped
        // backslash before `u` is not an escape.
        assert!(JsonText::parse(r#""\ud83d\ude00""#.to_owned()).is_ok());
        for lone in [r#""\ud83d""#, r#""\ude00x""#, r#""\ud83d\u0041""#] {
            assert!(
                matches!(
                    JsonText::parse(lone.to_owned()),
                    Err(JsonTextError::LoneSurrogate)
                ),
                "{lone}"
            );
        }
        assert!(JsonText::parse(r#""\\ud800""#.to_owned()).is_ok());
        // What a tree would refuse, the text refuses too.
        for text in [r#""\ud83d""#.to_owned(), nested(129)] {
            assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
        }
    }

    #[test]
    fn debug_shows_at_most_the_start_of_a_long_text() {
        let long = JsonText::from_value(&json!("x".repeat(10_000)));
        let shown = format!("{long:?}");
        assert!(
            shown.len() < 300 && shown.ends_with("10002 bytes in all)"),
            "{shown}"
        );
    }
}
