//! `--config FILE`: the `mcpServers` JSON that MCP clients already use, read into downstream
//! servers.
//!
//! ```json
//! { "mcpServers": {
//!     "fs":     { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
//!                 "env": { "DEBUG": "1" }, "cwd": "/tmp" },
//!     "remote": { "url": "http://127.0.0.1:8080/mcp", "headers": { "Authorization": "Bearer …" } }
//! } }
//! ```
//!
//! Each entry's tools appear in cells as `tools.<entry name>__<tool>`. A top-level `servers`
//! object (VS Code's spelling) is read the same way. Keys clients commonly add are understood
//! (`type`, `disabled`: the entry is skipped, `timeout`: seconds per call, `enabledTools` /
//! `disabledTools`: which of its tools cells see at all, `autoApprove` / `alwaysAllow`: its
//! tools that run without asking) or ignored (`description`, `transportType`, `name`); any other
//! key is a warning naming the entry and the key, so that a typo like `argz` never passes
//! silently. An entry that cannot be started (neither `command` nor `url`, values of the wrong
//! type) is an error naming the entry.
//!
//! Beside the servers, `"permissions": {"allow": [...], "ask": [...], "deny": [...],
//! "default": "ask"}` rules what cells may call, by patterns over the names cells see
//! (`github__delete_*`); without it, read-only tools run and every other call asks the user
//! (see `codemode_session::Permissions`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use codemode_host_adapters::{McpServerConfig, McpTransport};
use codemode_protocol::{ToolName, normalize_identifier};
use codemode_session::{Permissions, Verdict};
use serde_json::{Map, Value};

/// Keys that clients add and that codemode has no use for.
const IGNORED_KEYS: [&str; 3] = ["description", "transportType", "name"];

/// The servers of a configuration file, its permissions, and what was odd about it.
#[derive(Debug)]
pub struct ConfigServers {
    /// The servers to use, in the file's order.
    pub servers: Vec<McpServerConfig>,
    /// What cells may call: the file's `permissions`, with each server's `autoApprove` /
    /// `alwaysAllow` tools as allow rules.
    pub permissions: Permissions,
    /// One line per unknown key (`warning: …` is the caller's to add).
    pub warnings: Vec<String>,
}

/// Reads and checks `path`. The error says what is wrong and where.
pub fn read(path: &Path) -> Result<ConfigServers, String> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        format!(
            "cannot read the MCP configuration {}: {error}",
            path.display()
        )
    })?;
    parse(&text).map_err(|error| format!("{}: {error}", path.display()))
}

/// Checks the text of a configuration file.
pub fn parse(text: &str) -> Result<ConfigServers, String> {
    let document: Value = serde_json::from_str(text).map_err(|error| {
        format!("not valid JSON ({error}); expected {{\"mcpServers\": {{\"name\": {{...}}}}}}")
    })?;
    let Value::Object(document) = document else {
        return Err("expected a JSON object with an \"mcpServers\" object".to_owned());
    };
    let entries = match (document.get("mcpServers"), document.get("servers")) {
        (Some(Value::Object(entries)), _) | (None, Some(Value::Object(entries))) => entries,
        (Some(_), _) | (None, Some(_)) => {
            return Err("\"mcpServers\" must be an object of named servers".to_owned());
        }
        (None, None) => {
            return Err("no \"mcpServers\" object: there are no servers to use".to_owned());
        }
    };
    let mut servers = Vec::new();
    let mut warnings = Vec::new();
    let mut permissions = match document.get("permissions") {
        None | Some(Value::Null) => Permissions::ask_by_default(),
        Some(rules) => read_permissions(rules)?,
    };
    for (name, entry) in entries {
        let Value::Object(entry) = entry else {
            return Err(format!("server \"{name}\" must be an object"));
        };
        if let Some(server) = server(name, entry, &mut warnings)? {
            for key in ["autoApprove", "alwaysAllow"] {
                for tool in names(name, entry, key)?.unwrap_or_default() {
                    permissions = permissions.with_rule(
                        Verdict::Allow,
                        ToolName::namespaced(name, tool).global_name(),
                    );
                }
            }
            servers.push(server);
        }
    }
    Ok(ConfigServers {
        servers,
        permissions,
        warnings,
    })
}

/// The `permissions` object: `allow`, `ask` and `deny` lists of patterns, and a `default`.
fn read_permissions(rules: &Value) -> Result<Permissions, String> {
    let expected = "\"permissions\" must be {\"allow\": [patterns], \"ask\": [patterns], \
                    \"deny\": [patterns], \"default\": \"allow\" | \"ask\" | \"deny\"}";
    let Value::Object(rules) = rules else {
        return Err(expected.to_owned());
    };
    let mut permissions = Permissions::ask_by_default();
    for (key, value) in rules {
        match (key.as_str(), value) {
            ("default", Value::String(name)) => {
                let verdict = Verdict::parse(name).ok_or_else(|| {
                    format!("\"permissions\": \"default\" must be \"allow\", \"ask\" or \"deny\", not \"{name}\"")
                })?;
                permissions = permissions.with_default(verdict);
            }
            (list @ ("allow" | "ask" | "deny"), Value::Array(patterns)) => {
                let verdict = Verdict::parse(list).expect("a list named by its verdict");
                for pattern in patterns {
                    let Value::String(pattern) = pattern else {
                        return Err(format!(
                            "\"permissions\": \"{list}\" must be an array of tool name patterns \
                             (\"github__delete_*\"), not {pattern}"
                        ));
                    };
                    permissions = permissions.with_rule(verdict, pattern.clone());
                }
            }
            _ => return Err(format!("{expected}; \"{key}\" is not understood")),
        }
    }
    Ok(permissions)
}

/// An entry's list of tool names under `key`, if it has one.
fn names(name: &str, entry: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(values)) => values
            .iter()
            .map(|value| value.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| format!("server \"{name}\": \"{key}\" must be an array of tool names")),
        Some(_) => Err(format!(
            "server \"{name}\": \"{key}\" must be an array of tool names"
        )),
    }
}

/// One entry, or `None` when it is disabled.
fn server(
    name: &str,
    entry: &Map<String, Value>,
    warnings: &mut Vec<String>,
) -> Result<Option<McpServerConfig>, String> {
    let wrong =
        |key: &str, expected: &str| format!("server \"{name}\": \"{key}\" must be {expected}");
    let string = |key: &str| -> Result<Option<String>, String> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(value)) => Ok(Some(value.clone())),
            Some(_) => Err(wrong(key, "a string")),
        }
    };
    let strings = |key: &str| -> Result<Vec<String>, String> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(values)) => values
                .iter()
                .map(|value| value.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| wrong(key, "an array of strings")),
            Some(_) => Err(wrong(key, "an array of strings")),
        }
    };
    let string_map = |key: &str| -> Result<BTreeMap<String, String>, String> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(values)) => values
                .iter()
                .map(|(name, value)| value.as_str().map(|value| (name.clone(), value.to_owned())))
                .collect::<Option<BTreeMap<_, _>>>()
                .ok_or_else(|| wrong(key, "an object of strings")),
            Some(_) => Err(wrong(key, "an object of strings")),
        }
    };
    for key in entry.keys() {
        let known = matches!(
            key.as_str(),
            "command"
                | "args"
                | "env"
                | "cwd"
                | "url"
                | "headers"
                | "type"
                | "disabled"
                | "timeout"
                | "enabledTools"
                | "disabledTools"
                | "autoApprove"
                | "alwaysAllow"
        ) || IGNORED_KEYS.contains(&key.as_str());
        if !known {
            warnings.push(format!(
                "server \"{name}\" in the MCP configuration has an unknown key \"{key}\"; it is \
                 ignored (known keys: command, args, env, cwd, url, headers, type, disabled, \
                 timeout, enabledTools, disabledTools, autoApprove, alwaysAllow)"
            ));
        }
    }
    match entry.get("disabled") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => return Ok(None),
        Some(_) => return Err(wrong("disabled", "true or false")),
    }
    let kind = string("type")?;
    let command = string("command")?;
    let url = string("url")?;
    let transport = match (command, url) {
        (Some(command), None) => {
            if let Some(kind) = kind.as_deref().filter(|kind| *kind != "stdio") {
                return Err(format!(
                    "server \"{name}\" has a \"command\" but \"type\": \"{kind}\"; a command is a \
                     stdio server"
                ));
            }
            if command.trim().is_empty() {
                return Err(wrong("command", "a program to run"));
            }
            McpTransport::Stdio {
                program: command,
                args: strings("args")?,
                env: string_map("env")?,
                cwd: string("cwd")?.map(PathBuf::from),
            }
        }
        (None, Some(url)) => {
            match kind.as_deref() {
                None | Some("http") | Some("streamable-http") | Some("streamableHttp") => {}
                Some("sse") => {
                    return Err(format!(
                        "server \"{name}\" uses the legacy SSE transport, which codemode does not \
                         speak; give the URL of its streamable HTTP endpoint instead"
                    ));
                }
                Some(kind) => {
                    return Err(format!(
                        "server \"{name}\" has a \"url\" but \"type\": \"{kind}\"; use \"http\""
                    ));
                }
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(wrong("url", "an http:// or https:// URL"));
            }
            McpTransport::Http {
                url,
                headers: string_map("headers")?,
            }
        }
        (Some(_), Some(_)) => {
            return Err(format!(
                "server \"{name}\" has both \"command\" and \"url\"; give one: a command for a \
                 stdio server, a url for a streamable HTTP one"
            ));
        }
        (None, None) => {
            return Err(format!(
                "server \"{name}\" cannot be started: it has neither \"command\" (a stdio server) \
                 nor \"url\" (a streamable HTTP server)"
            ));
        }
    };
    let mut config = McpServerConfig::new(normalize_identifier(name), transport).with_tool_filter(
        names(name, entry, "enabledTools")?,
        names(name, entry, "disabledTools")?.unwrap_or_default(),
    );
    match entry.get("timeout") {
        None | Some(Value::Null) => {}
        Some(Value::Number(seconds)) => match seconds.as_f64() {
            Some(seconds) if seconds > 0.0 && seconds.is_finite() => {
                config = config.with_call_timeout(Duration::from_secs_f64(seconds));
            }
            _ => return Err(wrong("timeout", "a positive number of seconds")),
        },
        Some(_) => return Err(wrong("timeout", "a positive number of seconds")),
    }
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_and_http_entries_become_servers_and_disabled_ones_are_skipped() {
        let parsed = parse(
            r#"{"mcpServers": {
                "my-fs": {"command": "npx", "args": ["-y", "server"], "env": {"A": "1"}, "cwd": "/tmp", "type": "stdio"},
                "remote": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer x"}, "timeout": 5},
                "off": {"command": "nothing", "disabled": true},
                "quiet": {"command": "x", "autoApprove": ["a"], "description": "d"}
            }}"#,
        )
        .unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let names: Vec<&str> = parsed
            .servers
            .iter()
            .map(|server| server.namespace.as_str())
            .collect();
        assert_eq!(names, ["my_fs", "remote", "quiet"]);
        assert_eq!(
            parsed.servers[0].transport,
            McpTransport::Stdio {
                program: "npx".into(),
                args: vec!["-y".into(), "server".into()],
                env: BTreeMap::from([("A".into(), "1".into())]),
                cwd: Some("/tmp".into()),
            }
        );
        assert_eq!(parsed.servers[1].call_timeout, Duration::from_secs(5));
        assert!(matches!(
            &parsed.servers[1].transport,
            McpTransport::Http { headers, .. } if headers["Authorization"] == "Bearer x"
        ));
    }

    #[test]
    fn an_unknown_key_is_a_warning_naming_the_entry_and_the_key() {
        let parsed = parse(r#"{"mcpServers": {"fs": {"command": "npx", "argz": ["x"]}}}"#).unwrap();
        assert_eq!(parsed.servers.len(), 1);
        assert_eq!(parsed.warnings.len(), 1);
        assert!(
            parsed.warnings[0].contains("server \"fs\""),
            "{:?}",
            parsed.warnings
        );
        assert!(
            parsed.warnings[0].contains("\"argz\""),
            "{:?}",
            parsed.warnings
        );
    }

    #[test]
    fn entries_that_cannot_start_are_errors_naming_the_entry() {
        for (text, expected) in [
            (
                r#"{"mcpServers": {"a": {}}}"#,
                "server \"a\" cannot be started",
            ),
            (
                r#"{"mcpServers": {"b": {"command": 3}}}"#,
                "server \"b\": \"command\" must be a string",
            ),
            (
                r#"{"mcpServers": {"c": {"command": "x", "args": "y"}}}"#,
                "server \"c\": \"args\" must be an array",
            ),
            (
                r#"{"mcpServers": {"d": {"command": "x", "url": "http://h/mcp"}}}"#,
                "server \"d\" has both",
            ),
            (
                r#"{"mcpServers": {"e": {"url": "http://h/sse", "type": "sse"}}}"#,
                "server \"e\" uses the legacy SSE",
            ),
            (
                r#"{"mcpServers": {"f": {"command": "x", "env": {"A": 1}}}}"#,
                "server \"f\": \"env\" must be an object of strings",
            ),
            (
                r#"{"mcpServers": {"g": "npx"}}"#,
                "server \"g\" must be an object",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_malformed_file_says_what_was_expected() {
        assert!(parse("{not json").unwrap_err().contains("not valid JSON"));
        assert!(parse("[]").unwrap_err().contains("\"mcpServers\""));
        assert!(parse("{}").unwrap_err().contains("no \"mcpServers\""));
        assert_eq!(
            parse(r#"{"servers": {"x": {"command": "y"}}}"#)
                .unwrap()
                .servers
                .len(),
            1
        );
    }

    #[test]
    fn permissions_are_read_beside_the_servers_and_bad_ones_say_what_is_expected() {
        use codemode_protocol::{ToolAnnotations, ToolDefinition};
        let parsed = parse(
            r#"{"mcpServers": {"gh": {"command": "x", "alwaysAllow": ["list_repos"]}},
                "permissions": {"allow": ["fs__*"], "deny": ["gh__delete_*"], "default": "deny"}}"#,
        )
        .unwrap();
        let tool = |name: &str| ToolDefinition::function(ToolName::namespaced("gh", name), "");
        let verdict = |tool: ToolDefinition| parsed.permissions.decide(&tool).verdict;
        assert_eq!(verdict(tool("delete_repo")), Verdict::Deny);
        assert_eq!(verdict(tool("list_repos")), Verdict::Allow);
        assert_eq!(verdict(tool("create_issue")), Verdict::Deny);
        assert_eq!(
            verdict(tool("get_issue").with_annotations(ToolAnnotations::read_only())),
            Verdict::Allow
        );
        // Without a permissions object: read-only runs, the rest asks.
        let plain = parse(r#"{"mcpServers": {"gh": {"command": "x"}}}"#).unwrap();
        assert_eq!(plain.permissions.decide(&tool("x")).verdict, Verdict::Ask);
        for (text, expected) in [
            (r#""permissions": []"#, "\"permissions\" must be"),
            (
                r#""permissions": {"allow": "fs__*"}"#,
                "\"allow\" is not understood",
            ),
            (
                r#""permissions": {"deny": [3]}"#,
                "array of tool name patterns",
            ),
            (r#""permissions": {"default": "maybe"}"#, "not \"maybe\""),
        ] {
            let error = parse(&format!(
                r#"{{"mcpServers": {{"a": {{"command": "x"}}}}, {text}}}"#
            ))
            .unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let error =
            parse(r#"{"mcpServers": {"a": {"command": "x", "disabledTools": "rm"}}}"#).unwrap_err();
        assert!(
            error.contains("server \"a\": \"disabledTools\" must be an array of tool names"),
            "{error}"
        );
    }
}
