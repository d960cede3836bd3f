//! The JSON formats: `mcpServers` (Claude Desktop, Claude Code, Cursor, Windsurf, Cline) and
//! `servers` with `inputs` (VS Code's `mcp.json`, or `mcp.servers` in its settings), read into
//! [`Entry`]s.
//!
//! Keys clients commonly add are understood (`type`, `disabled`: the entry is skipped,
//! `timeout`: seconds per call, `envFile`, `serverUrl`: Windsurf's `url`, `enabledTools` /
//! `disabledTools`, `autoApprove` / `alwaysAllow`) or ignored (`description`, `transportType`,
//! `name`, `dev`, `gallery`, `version`); any other key is a warning naming the entry and the key,
//! so that a typo like `argz` never passes silently. An entry that cannot be started (neither
//! `command` nor `url`, values of the wrong type) is an error naming the entry.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::entry::{Entry, Reach};

/// Keys that clients add and that codemode has no use for.
const IGNORED_KEYS: [&str; 6] = [
    "description",
    "transportType",
    "name",
    "dev",
    "gallery",
    "version",
];

/// The keys an entry may have.
const KNOWN_KEYS: [&str; 16] = [
    "command",
    "args",
    "env",
    "envFile",
    "cwd",
    "url",
    "serverUrl",
    "headers",
    "type",
    "disabled",
    "timeout",
    "enabledTools",
    "disabledTools",
    "autoApprove",
    "alwaysAllow",
    "oauth",
];

/// One JSON entry: the entry (`None` when disabled, with the entry for its report), and the
/// tools it lets run without asking.
pub struct JsonEntry {
    pub entry: Entry,
    pub disabled: bool,
    pub auto_approve: Vec<String>,
}

/// The entry `name` of a JSON file; unknown keys are added to `warnings`.
pub fn entry(name: &str, value: &Value, warnings: &mut Vec<String>) -> Result<JsonEntry, String> {
    let Value::Object(fields) = value else {
        return Err(format!("server \"{name}\" must be an object"));
    };
    let read = Fields { name, fields };
    for key in fields.keys() {
        if !KNOWN_KEYS.contains(&key.as_str()) && !IGNORED_KEYS.contains(&key.as_str()) {
            warnings.push(format!(
                "server \"{name}\" in the MCP configuration has an unknown key \"{key}\"; it is \
                 ignored (known keys: {})",
                KNOWN_KEYS.join(", ")
            ));
        }
    }
    let disabled = match fields.get("disabled") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(read.wrong("disabled", "true or false")),
    };
    let kind = read.string("type")?;
    let command = read.string("command")?;
    let url = match read.string("url")? {
        Some(url) => Some(url),
        None => read.string("serverUrl")?,
    };
    let reach = match (command, url) {
        (Some(command), None) => {
            if let Some(kind) = kind.as_deref().filter(|kind| *kind != "stdio") {
                return Err(format!(
                    "server \"{name}\" has a \"command\" but \"type\": \"{kind}\"; a command is a \
                     stdio server"
                ));
            }
            if command.trim().is_empty() {
                return Err(read.wrong("command", "a program to run"));
            }
            Reach::Command(command)
        }
        (None, Some(url)) => match kind.as_deref() {
            Some("sse") => Reach::Sse(url),
            // As clients guess: an endpoint named /sse speaks the legacy transport.
            None if url.trim_end_matches('/').ends_with("/sse") => Reach::Sse(url),
            None | Some("http") | Some("streamable-http") | Some("streamableHttp") => {
                Reach::Http(url)
            }
            Some(kind) => {
                return Err(format!(
                    "server \"{name}\" has a \"url\" but \"type\": \"{kind}\"; use \"http\" or \
                     \"sse\""
                ));
            }
        },
        (Some(_), Some(_)) => {
            return Err(format!(
                "server \"{name}\" has both \"command\" and \"url\"; give one: a command for a \
                 stdio server, a url for an HTTP one"
            ));
        }
        (None, None) => {
            return Err(format!(
                "server \"{name}\" cannot be started: it has neither \"command\" (a stdio server) \
                 nor \"url\" (an HTTP server)"
            ));
        }
    };
    let mut entry = Entry::new(name, reach, true);
    entry.args = read.strings("args")?;
    entry.env = read.string_map("env")?;
    entry.env_file = read.string("envFile")?;
    entry.cwd = read.string("cwd")?;
    entry.headers = read.string_map("headers")?;
    entry.oauth = super::entry::OAuthEntry::read(name, fields.get("oauth"))?;
    entry.enabled_tools = read.names("enabledTools")?;
    entry.disabled_tools = read.names("disabledTools")?.unwrap_or_default();
    entry.call_timeout = match fields.get("timeout") {
        None | Some(Value::Null) => None,
        Some(Value::Number(seconds)) => match seconds.as_f64() {
            Some(seconds) if seconds > 0.0 && seconds.is_finite() => {
                Some(Duration::from_secs_f64(seconds))
            }
            _ => return Err(read.wrong("timeout", "a positive number of seconds")),
        },
        Some(_) => return Err(read.wrong("timeout", "a positive number of seconds")),
    };
    let mut auto_approve = Vec::new();
    for key in ["autoApprove", "alwaysAllow"] {
        auto_approve.extend(read.names(key)?.unwrap_or_default());
    }
    Ok(JsonEntry {
        entry,
        disabled,
        auto_approve,
    })
}

/// The ids of VS Code's `inputs` (`[{"type": "promptString", "id": "token", ...}]`).
pub fn inputs(document: &Map<String, Value>) -> Result<Vec<String>, String> {
    match document.get("inputs") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(inputs)) => inputs
            .iter()
            .map(|input| {
                input
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        format!("each of \"inputs\" must have an \"id\" string, not {input}")
                    })
            })
            .collect(),
        Some(_) => Err("\"inputs\" must be an array of {\"id\": ..., \"type\": ...}".to_owned()),
    }
}

/// Typed reads of one entry's fields; errors name the entry and the key.
pub(super) struct Fields<'a> {
    pub(super) name: &'a str,
    pub(super) fields: &'a Map<String, Value>,
}

impl Fields<'_> {
    pub(super) fn wrong(&self, key: &str, expected: &str) -> String {
        format!("server \"{}\": \"{key}\" must be {expected}", self.name)
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(value)) => Ok(Some(value.clone())),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    pub(super) fn strings(&self, key: &str) -> Result<Vec<String>, String> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(values)) => values
                .iter()
                .map(|value| value.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.wrong(key, "an array of strings")),
            Some(_) => Err(self.wrong(key, "an array of strings")),
        }
    }

    pub(super) fn names(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(values)) => values
                .iter()
                .map(|value| value.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "an array of tool names")),
            Some(_) => Err(self.wrong(key, "an array of tool names")),
        }
    }

    pub(super) fn string_map(&self, key: &str) -> Result<BTreeMap<String, String>, String> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(values)) => values
                .iter()
                .map(|(name, value)| value.as_str().map(|value| (name.clone(), value.to_owned())))
                .collect::<Option<BTreeMap<_, _>>>()
                .ok_or_else(|| self.wrong(key, "an object of strings")),
            Some(_) => Err(self.wrong(key, "an object of strings")),
        }
    }
}
