//! Stored values as every layer holds them: the JSON text a cell stored, validated once and then
//! shared, never parsed into a tree. A session's values reach each new cell by reference, a commit
//! copies pointers rather than values, and the server holds about 1.5 to 2.5 bytes per byte stored
//! (the map and its keys beside the text; `cargo xtask bench` measures it).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// Stored values by key.
pub type StoredValues = HashMap<String, StoredValue>;

/// One stored value: valid JSON text, cheap to clone (the text is shared).
#[derive(Clone)]
pub struct StoredValue(Arc<RawValue>);

impl StoredValue {
    /// A stored value from JSON text. The text must be one JSON value whose strings are all
    /// representable (no lone surrogate in an escape) and that is nested no deeper than
    /// `serde_json`'s limit of 128 levels; it is kept as it is, whitespace included.
    pub fn from_json(json: String) -> Result<Self, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(&json);
        Validate::deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(StoredValue(Arc::from(RawValue::from_string(json)?)))
    }

    /// The stored value of a JSON tree, as compact text.
    pub fn from_value(value: &Value) -> Self {
        let raw =
            serde_json::value::to_raw_value(value).expect("a serde_json::Value always serialises");
        StoredValue(Arc::from(raw))
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// The value parsed into a tree (for an embedder that inspects it; cells get the text).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.json())
    }

    /// The length of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.json().len()
    }

    /// Whether the text is empty: never, a JSON value has at least one character.
    pub fn is_empty(&self) -> bool {
        self.json().is_empty()
    }
}

/// Stored values from JSON trees, for code that builds them in Rust (tests, fixtures, stores
/// that keep trees).
pub fn stored_values_from<K: Into<String>>(
    entries: impl IntoIterator<Item = (K, Value)>,
) -> StoredValues {
    entries
        .into_iter()
        .map(|(key, value)| (key.into(), StoredValue::from_value(&value)))
        .collect()
}

/// The bytes a key and its value count for against the stored-value limits.
pub fn stored_entry_bytes(key: &str, value: &StoredValue) -> usize {
    key.len().saturating_add(value.len())
}

/// The bytes all of `values` count for against the stored-value limits.
pub fn stored_bytes(values: &StoredValues) -> usize {
    values
        .iter()
        .map(|(key, value)| stored_entry_bytes(key, value))
        .fold(0, usize::saturating_add)
}

impl PartialEq for StoredValue {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Eq for StoredValue {}

/// Equal when the text parses to `other` (for tests and embedders that hold trees).
impl PartialEq<Value> for StoredValue {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|value| value == *other)
    }
}

impl fmt::Debug for StoredValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 200;
        let json = self.json();
        if json.len() <= SHOWN {
            write!(f, "StoredValue({json})")
        } else {
            let end = (0..=SHOWN)
                .rev()
                .find(|&end| json.is_char_boundary(end))
                .unwrap_or(0);
            write!(f, "StoredValue({}… {} bytes)", &json[..end], json.len())
        }
    }
}

impl From<Value> for StoredValue {
    fn from(value: Value) -> Self {
        StoredValue::from_value(&value)
    }
}

/// Serialised as the JSON value itself (with `serde_json`), not as a string holding it.
impl Serialize for StoredValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Read from a JSON value (with `serde_json`), kept as its text. The text is only checked for
/// being JSON here; it came from a writer that validated it with [`StoredValue::from_json`].
impl<'de> Deserialize<'de> for StoredValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(|raw| StoredValue(Arc::from(raw)))
    }
}

/// Walks a JSON value without building it: strings are decoded (so a lone surrogate is an
/// error) and nesting is counted (so the depth limit holds), nothing is kept.
struct Validate;

impl<'de> Deserialize<'de> for Validate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Validate)
    }
}

impl<'de> Visitor<'de> for Validate {
    type Value = Validate;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self, E> {
        Ok(Validate)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self, E> {
        Ok(Validate)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self, E> {
        Ok(Validate)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self, E> {
        Ok(Validate)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self, E> {
        Ok(Validate)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self, E> {
        Ok(Validate)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self, A::Error> {
        while items.next_element::<Validate>()?.is_some() {}
        Ok(Validate)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Self, A::Error> {
        while entries.next_entry::<Validate, Validate>()?.is_some() {}
        Ok(Validate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_is_kept_and_serialised_as_the_value_itself() {
        let value = StoredValue::from_json(r#"{"a": [1, "x"]}"#.to_owned()).unwrap();
        assert_eq!(value.json(), r#"{"a": [1, "x"]}"#);
        assert_eq!(value.to_value().unwrap(), json!({"a": [1, "x"]}));
        let map = StoredValues::from([("k".to_owned(), value.clone())]);
        let text = serde_json::to_string(&map).unwrap();
        assert_eq!(text, r#"{"k":{"a": [1, "x"]}}"#);
        let back: StoredValues = serde_json::from_str(&text).unwrap();
        assert_eq!(back["k"], value);
        assert_eq!(stored_bytes(&back), 1 + value.len());
    }

    #[test]
    fn invalid_text_lone_surrogates_and_deep_nesting_are_refused() {
        assert!(StoredValue::from_json("{".to_owned()).is_err());
        assert!(StoredValue::from_json("1 2".to_owned()).is_err());
        assert!(StoredValue::from_json(r#"["\ud800"]"#.to_owned()).is_err());
        assert!(StoredValue::from_json(r#"{"\udc00": 1}"#.to_owned()).is_err());
        let paired = StoredValue::from_json(r#""\ud83d\ude00""#.to_owned()).unwrap();
        assert_eq!(paired.to_value().unwrap(), json!("😀"));
        let deep = "[".repeat(200) + &"]".repeat(200);
        let error = StoredValue::from_json(deep).unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
    }

    #[test]
    fn clones_share_the_text() {
        let value = StoredValue::from_value(&json!("x".repeat(1000)));
        let clone = value.clone();
        assert!(std::ptr::eq(value.json(), clone.json()));
    }
}
