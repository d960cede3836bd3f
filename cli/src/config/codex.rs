//! codex's `config.toml`: `[mcp_servers.NAME]` tables, read as codex reads them into
//! [`Entry`]s. Values are taken as written (codex expands no `${...}`); secrets come from
//! `bearer_token_env_var` and `env_http_headers`, and a stdio server gets only codex's default
//! variables (`HOME`, `PATH`, `USER`, ...), `env_vars` and `env`. The rest of the file (the model,
//! profiles, ...) is codex's own and not read.

use std::time::Duration;

use serde_json::{Map, Value};

use super::entry::{Entry, Reach, codex_inherited};
use super::json::Fields;

/// The keys a codex server table may have.
const KNOWN_KEYS: [&str; 16] = [
    "command",
    "args",
    "env",
    "env_vars",
    "cwd",
    "url",
    "bearer_token_env_var",
    "http_headers",
    "env_http_headers",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "tool_timeout_sec",
    "enabled",
    "enabled_tools",
    "disabled_tools",
    "oauth",
];

/// The `mcp_servers` tables of a codex configuration, as JSON (in the file's order), or `None`
/// when it has none.
pub fn servers(text: &str) -> Result<Option<Map<String, Value>>, String> {
    let document: toml::Table = toml::from_str(text).map_err(|error| {
        format!(
            "not valid TOML ({}); expected [mcp_servers.NAME] tables",
            error.message()
        )
    })?;
    let Some(servers) = document.get("mcp_servers") else {
        return Ok(None);
    };
    let servers = serde_json::to_value(servers)
        .map_err(|error| format!("cannot read \"mcp_servers\": {error}"))?;
    match servers {
        Value::Object(servers) => Ok(Some(servers)),
        _ => {
            Err("\"mcp_servers\" must be a table of named servers ([mcp_servers.NAME])".to_owned())
        }
    }
}

/// codex's permissions are its own; codemode's `[permissions]` table, when present, as JSON.
pub fn permissions(text: &str) -> Option<Value> {
    let document: toml::Table = toml::from_str(text).ok()?;
    serde_json::to_value(document.get("permissions")?).ok()
}

/// One `[mcp_servers.NAME]` table: the entry, and whether it is disabled.
pub fn entry(
    name: &str,
    value: &Value,
    warnings: &mut Vec<String>,
) -> Result<(Entry, bool), String> {
    let Value::Object(fields) = value else {
        return Err(format!("server \"{name}\" must be a table"));
    };
    let read = Fields { name, fields };
    for key in fields.keys() {
        if !KNOWN_KEYS.contains(&key.as_str()) {
            warnings.push(format!(
                "server \"{name}\" in the codex configuration has an unknown key \"{key}\"; it is \
                 ignored (known keys: {})",
                KNOWN_KEYS.join(", ")
            ));
        }
    }
    let reach = match (read.string("command")?, read.string("url")?) {
        (Some(command), None) if !command.trim().is_empty() => Reach::Command(command),
        (Some(_), None) => return Err(read.wrong("command", "a program to run")),
        (None, Some(url)) => Reach::Http(url),
        (Some(_), Some(_)) => {
            return Err(format!(
                "server \"{name}\" has both \"command\" and \"url\"; give one"
            ));
        }
        (None, None) => {
            return Err(format!(
                "server \"{name}\" cannot be started: it has neither \"command\" nor \"url\""
            ));
        }
    };
    let mut entry = Entry::new(name, reach, false);
    entry.args = read.strings("args")?;
    entry.env = read.string_map("env")?;
    entry.cwd = read.string("cwd")?;
    entry.headers = read.string_map("http_headers")?;
    entry.env_headers = read.string_map("env_http_headers")?;
    entry.bearer_env = read.string("bearer_token_env_var")?;
    entry.inherit = Some(codex_inherited(read.strings("env_vars")?));
    entry.oauth = super::entry::OAuthEntry::read(name, fields.get("oauth"))?;
    entry.enabled_tools = read.names("enabled_tools")?;
    entry.disabled_tools = read.names("disabled_tools")?.unwrap_or_default();
    let seconds = |key: &str, scale: f64| -> Result<Option<Duration>, String> {
        match fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => match number.as_f64() {
                Some(value) if value > 0.0 && value.is_finite() => {
                    Ok(Some(Duration::from_secs_f64(value * scale)))
                }
                _ => Err(read.wrong(key, "a positive number")),
            },
            Some(_) => Err(read.wrong(key, "a positive number")),
        }
    };
    entry.startup_timeout = match seconds("startup_timeout_sec", 1.0)? {
        Some(timeout) => Some(timeout),
        None => seconds("startup_timeout_ms", 0.001)?,
    };
    entry.call_timeout = seconds("tool_timeout_sec", 1.0)?;
    let disabled = match fields.get("enabled") {
        None | Some(Value::Null) | Some(Value::Bool(true)) => false,
        Some(Value::Bool(false)) => true,
        Some(_) => return Err(read.wrong("enabled", "true or false")),
    };
    Ok((entry, disabled))
}
