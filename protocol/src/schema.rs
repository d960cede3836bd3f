//! The subset of JSON Schema codemode reads from a tool's input and output schemas, read once
//! into [`Schema`]: the tool declarations show it as TypeScript (`typescript`), and the MCP tool
//! source checks a server's `structuredContent` against it (`check`), so that what the model is
//! told and what is checked are the same keywords.
//!
//! Read: `type` (one or several), `enum`, `const`, `nullable`, `anyOf`, `oneOf`, `allOf`,
//! `properties` (with each property's `description` and `default`), `required`,
//! `additionalProperties`, `items` and `prefixItems`. Anything else (`$ref`, `not`, conditionals,
//! formats, bounds) is not read: a schema made only of it reads as [`Schema::Anything`].

use serde_json::{Map, Value};

/// How deep a schema is read; deeper parts read as [`Schema::Anything`] (a schema from a
/// server is not trusted to be shallow).
const MAX_READ_DEPTH: usize = 64;

/// A JSON Schema as codemode reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    /// `true`, or a schema that is not an object: any value.
    Anything,
    /// `false`: no value.
    Nothing,
    /// An object schema: the keywords of it codemode reads.
    Keywords(Box<Keywords>),
}

/// The keywords of an object schema that codemode reads, as written (each consumer decides how
/// they combine: the declaration shows the first that says most, the check applies all it
/// checks).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Keywords {
    /// `nullable: true` (OpenAPI's way of also allowing `null`).
    pub nullable: bool,
    /// `const`.
    pub constant: Option<Value>,
    /// `enum`.
    pub choices: Option<Vec<Value>>,
    /// `anyOf`.
    pub any_of: Option<Vec<Schema>>,
    /// `oneOf`.
    pub one_of: Option<Vec<Schema>>,
    /// `allOf`.
    pub all_of: Option<Vec<Schema>>,
    /// `type`, as a list (one name, or the names of an array of them); `None` when absent or
    /// neither a string nor an array.
    pub types: Option<Vec<String>>,
    /// `properties`, in order; empty when the keyword is there but not an object.
    pub properties: Option<Vec<Property>>,
    /// `required`.
    pub required: Option<Vec<String>>,
    /// `additionalProperties`.
    pub additional: Option<Schema>,
    /// `items`: one schema for every item, or (an array) one per position.
    pub items: Option<Items>,
    /// `prefixItems`: one schema per position.
    pub prefix_items: Option<Vec<Schema>>,
    /// `description`.
    pub description: Option<String>,
    /// `default`.
    pub default: Option<Value>,
}

/// What `items` says.
#[derive(Debug, Clone, PartialEq)]
pub enum Items {
    /// One schema for every item.
    Each(Box<Schema>),
    /// One schema per position (the older tuple form).
    Tuple(Vec<Schema>),
}

/// One property of an object schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    /// Its name.
    pub name: String,
    /// Its schema.
    pub schema: Schema,
}

impl Schema {
    /// Reads `schema`.
    pub fn read(schema: &Value) -> Schema {
        Schema::read_at(schema, 0)
    }

    fn read_at(schema: &Value, depth: usize) -> Schema {
        let Value::Object(schema) = schema else {
            return match schema {
                Value::Bool(false) => Schema::Nothing,
                _ => Schema::Anything,
            };
        };
        if depth >= MAX_READ_DEPTH {
            return Schema::Anything;
        }
        Schema::Keywords(Box::new(Keywords::read(schema, depth + 1)))
    }

    /// Its keywords, if it is an object schema.
    pub fn keywords(&self) -> Option<&Keywords> {
        match self {
            Schema::Keywords(keywords) => Some(keywords),
            _ => None,
        }
    }
}

impl Keywords {
    fn read(schema: &Map<String, Value>, depth: usize) -> Keywords {
        let list = |key: &str| match schema.get(key) {
            Some(Value::Array(members)) => Some(
                members
                    .iter()
                    .map(|member| Schema::read_at(member, depth))
                    .collect(),
            ),
            _ => None,
        };
        Keywords {
            nullable: schema.get("nullable").and_then(Value::as_bool) == Some(true),
            constant: schema.get("const").cloned(),
            choices: match schema.get("enum") {
                Some(Value::Array(values)) => Some(values.clone()),
                _ => None,
            },
            any_of: list("anyOf"),
            one_of: list("oneOf"),
            all_of: list("allOf"),
            types: match schema.get("type") {
                Some(Value::String(kind)) => Some(vec![kind.clone()]),
                Some(Value::Array(kinds)) => Some(
                    kinds
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                ),
                _ => None,
            },
            properties: schema.get("properties").map(|properties| {
                properties
                    .as_object()
                    .map(|properties| {
                        properties
                            .iter()
                            .map(|(name, property)| Property {
                                name: name.clone(),
                                schema: Schema::read_at(property, depth),
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            }),
            required: schema
                .get("required")
                .and_then(Value::as_array)
                .map(|required| {
                    required
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                }),
            additional: schema
                .get("additionalProperties")
                .map(|additional| Schema::read_at(additional, depth)),
            items: schema.get("items").map(|items| match items {
                Value::Array(_) => Items::Tuple(list("items").unwrap_or_default()),
                each => Items::Each(Box::new(Schema::read_at(each, depth))),
            }),
            prefix_items: list("prefixItems"),
            description: schema
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            default: schema.get("default").cloned(),
        }
    }

    /// Whether it is an object schema by its `type`, or by having `properties` and no `type`.
    pub fn is_object(&self) -> bool {
        match &self.types {
            Some(types) => types.len() == 1 && types[0] == "object",
            None => self.properties.is_some(),
        }
    }
}

/// Checks `value` against the keywords of `schema` that a declaration shows (`type`, `enum`,
/// `const`, `properties`, `required`, `additionalProperties: false` or a schema, `items`,
/// `anyOf`/`oneOf`, `nullable`), so that a value that passes is what the model was told to
/// expect. `allOf`, tuples and every keyword not read are not checked. `at` names where `value`
/// is, for the message.
pub fn check(value: &Value, schema: &Schema, at: &str) -> Result<(), SchemaMismatch> {
    let mismatch = |at: &str, problem| {
        Err(SchemaMismatch {
            at: at.to_owned(),
            problem: Box::new(problem),
        })
    };
    let keywords = match schema {
        Schema::Anything => return Ok(()),
        Schema::Nothing => return mismatch(at, Mismatch::NotAllowed),
        Schema::Keywords(keywords) => keywords,
    };
    if value.is_null() && keywords.nullable {
        return Ok(());
    }
    if let Some(choices) = &keywords.choices
        && !choices.contains(value)
    {
        return mismatch(
            at,
            Mismatch::NotAChoice {
                value: value.clone(),
                choices: choices.clone(),
            },
        );
    }
    if let Some(constant) = &keywords.constant
        && constant != value
    {
        return mismatch(
            at,
            Mismatch::NotTheConstant {
                value: value.clone(),
                constant: constant.clone(),
            },
        );
    }
    for (keyword, options) in [("anyOf", &keywords.any_of), ("oneOf", &keywords.one_of)] {
        if let Some(options) = options
            && !options
                .iter()
                .any(|option| check(value, option, at).is_ok())
        {
            return mismatch(at, Mismatch::NoOptionMatches { keyword });
        }
    }
    if let Some(allowed) = &keywords.types {
        let is = |kind: &str| match kind {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "string" => value.is_string(),
            "number" => value.is_number(),
            "integer" => {
                value.as_i64().is_some()
                    || value.as_u64().is_some()
                    || value.as_f64().is_some_and(|number| number.fract() == 0.0)
            }
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => true,
        };
        if !allowed.is_empty() && !allowed.iter().any(|kind| is(kind)) {
            return mismatch(
                at,
                Mismatch::WrongType {
                    expected: allowed.clone(),
                    actual: kind_of(value),
                },
            );
        }
    }
    if let Value::Object(object) = value {
        for name in keywords.required.iter().flatten() {
            if !object.contains_key(name) {
                return mismatch(&format!("{at}.{name}"), Mismatch::Missing);
            }
        }
        for (name, member) in object {
            let property = keywords
                .properties
                .iter()
                .flatten()
                .find(|property| &property.name == name);
            match (property, &keywords.additional) {
                (Some(property), _) => check(member, &property.schema, &format!("{at}.{name}"))?,
                (None, Some(Schema::Nothing)) => {
                    return mismatch(&format!("{at}.{name}"), Mismatch::NotAProperty);
                }
                (None, Some(additional @ Schema::Keywords(_))) => {
                    check(member, additional, &format!("{at}.{name}"))?
                }
                (None, _) => {}
            }
        }
    }
    if let (Value::Array(items), Some(Items::Each(each))) = (value, &keywords.items) {
        for (index, item) in items.iter().enumerate() {
            check(item, each, &format!("{at}[{index}]"))?;
        }
    }
    Ok(())
}

/// Where a value breaks its schema, and how; displays as a sentence such as
/// `structuredContent.count should be integer, and is a string`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{at} {problem}")]
#[non_exhaustive]
pub struct SchemaMismatch {
    /// Where the value is, from the name given to [`check`] (`structuredContent.items[2]`).
    pub at: String,
    /// What is wrong with it (boxed: the values it names are large beside a passing `Ok`).
    pub problem: Box<Mismatch>,
}

/// How a value breaks its schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Mismatch {
    /// The schema is `false`: nothing is allowed here.
    #[error("is not allowed")]
    NotAllowed,
    /// `enum`: the value is not one of the choices.
    #[error("is {value}, not one of {}", Value::Array(choices.clone()))]
    NotAChoice {
        /// The value found.
        value: Value,
        /// The values the schema allows.
        choices: Vec<Value>,
    },
    /// `const`: the value is another.
    #[error("is {value}, not {constant}")]
    NotTheConstant {
        /// The value found.
        value: Value,
        /// The one value the schema allows.
        constant: Value,
    },
    /// `anyOf` or `oneOf` (the keyword): no option accepts the value.
    #[error("matches none of the schema's {keyword} choices")]
    NoOptionMatches {
        /// `anyOf` or `oneOf`.
        keyword: &'static str,
    },
    /// `type`: the value is of another kind.
    #[error("should be {}, and is {actual}", expected.join(" or "))]
    WrongType {
        /// The types the schema allows.
        expected: Vec<String>,
        /// The kind of value found ("a string").
        actual: &'static str,
    },
    /// `required`: the property is missing.
    #[error("is missing")]
    Missing,
    /// `additionalProperties: false`: the property is not declared.
    #[error("is not a property the schema allows")]
    NotAProperty,
}

/// What kind of JSON value `value` is, for a message.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_reading_serves_the_check() {
        let schema = Schema::read(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
            "required": ["n"],
            "additionalProperties": false
        }));
        assert_eq!(check(&json!({"n": 1, "tags": ["a"]}), &schema, "x"), Ok(()));
        let missing = check(&json!({"tags": []}), &schema, "x").unwrap_err();
        assert_eq!(
            (missing.at.as_str(), &*missing.problem),
            ("x.n", &Mismatch::Missing)
        );
        assert_eq!(missing.to_string(), "x.n is missing");
        assert_eq!(
            check(&json!({"n": 1.5}), &schema, "x").map_err(|error| error.to_string()),
            Err("x.n should be integer, and is a number".to_owned())
        );
        assert_eq!(
            check(&json!({"n": 1, "tags": ["c"]}), &schema, "x").map_err(|error| error.to_string()),
            Err(r#"x.tags[0] is "c", not one of ["a","b"]"#.to_owned())
        );
        assert_eq!(
            check(&json!({"n": 1, "extra": true}), &schema, "x").map_err(|error| error.to_string()),
            Err("x.extra is not a property the schema allows".to_owned())
        );
        assert!(schema.keywords().unwrap().is_object());
    }

    /// A schema from a server may nest without end: what lies past the reading depth reads as
    /// anything, and reading it neither recurses without bound nor fails.
    #[test]
    fn a_schema_nested_past_the_reading_depth_reads_as_anything_below_it() {
        let mut schema = json!({"type": "string"});
        for _ in 0..200 {
            schema = json!({"type": "array", "items": schema});
        }
        let read = Schema::read(&schema);
        let mut value = json!(1);
        for _ in 0..200 {
            value = json!([value]);
        }
        // The number at the bottom is not a string, but it lies below the depth read.
        assert_eq!(check(&value, &read, "x"), Ok(()));
        assert_eq!(
            check(&json!("not an array"), &read, "x").map_err(|error| error.to_string()),
            Err("x should be array, and is a string".to_owned())
        );
    }
}
