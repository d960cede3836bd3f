//! `--config FILE`: the MCP configuration the user's agent already has, read into downstream
//! servers and the rules for calling them.
//!
//! The formats ([`Format`]), chosen by the file's extension or content:
//! - `mcpServers` JSON (Claude Desktop, Claude Code's `.mcp.json`, Cursor, Windsurf):
//!   ```json
//!   { "mcpServers": {
//!       "fs":     { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
//!                   "env": { "DEBUG": "1" } },
//!       "github": { "type": "http", "url": "https://api.githubcopilot.com/mcp/",
//!                   "headers": { "Authorization": "Bearer ${GITHUB_TOKEN}" } }
//!   } }
//!   ```
//! - VS Code's `servers` with `inputs` (`.vscode/mcp.json`, or `"mcp": {"servers": ...}` in its
//!   settings), with `envFile`;
//! - codex's `config.toml` (`[mcp_servers.NAME]`, see [`codex`]).
//!
//! Each entry's tools appear in cells as `tools.<entry name>__<tool>`. Variables in JSON values
//! are expanded as the clients expand them ([`expand`]); an entry whose variable is not set is not
//! started, and is reported down with the server, the key and the variable named ("servers fail
//! alone"), never started with the placeholder. Entry keys: see [`json`] and [`codex`].
//!
//! Beside the servers, `"permissions": {"allow": [...], "ask": [...], "deny": [...],
//! "default": "ask"}` (a `[permissions]` table in TOML) rules what cells may call, by patterns
//! over the names cells see (`github__delete_*`); without it, read-only tools run and every other
//! call asks the user (see `codemode_session::Permissions`). `codemode config check FILE` shows
//! what was read ([`check`]).

pub mod check;
mod codex;
mod entry;
pub mod expand;
mod json;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use codemode_host_adapters::McpServerConfig;
use codemode_protocol::ToolName;
use codemode_session::{Permissions, RulesFile, Verdict};
use serde_json::Value;

pub use entry::{EntryReport, Outcome};
use expand::Variables;

/// Which kind of file it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"mcpServers": {...}}`.
    McpServers,
    /// VS Code's `{"servers": {...}, "inputs": [...]}`.
    VsCode,
    /// codex's `config.toml`.
    Codex,
}

impl Format {
    /// The format's name, as `config check` prints it.
    pub fn describe(self) -> &'static str {
        match self {
            Format::McpServers => "JSON with \"mcpServers\" (Claude, Cursor, Windsurf)",
            Format::VsCode => "JSON with \"servers\" (VS Code)",
            Format::Codex => "TOML with [mcp_servers.NAME] (codex)",
        }
    }
}

/// The servers of a configuration file, its permissions, and what was odd about it.
#[derive(Debug)]
pub struct ConfigServers {
    /// Which kind of file it was.
    pub format: Format,
    /// The servers to start, in the file's order.
    pub servers: Vec<McpServerConfig>,
    /// Servers that cannot start as configured (a variable not set, an `envFile` missing): by
    /// name, with why. They are reported down; the others run.
    pub refused: Vec<(String, String)>,
    /// What cells may call: the file's `permissions`, with each server's `autoApprove` /
    /// `alwaysAllow` tools as allow rules.
    pub permissions: Permissions,
    /// One line per unknown key (`warning: …` is the caller's to add).
    pub warnings: Vec<String>,
    /// What became of each entry, for `config check`.
    pub reports: Vec<EntryReport>,
}

/// Where a configuration's variables come from: the environment, and the file's place.
pub fn variables(path: Option<&Path>, environment: BTreeMap<String, String>) -> Variables {
    let workspace = path.and_then(|path| {
        let path = std::path::absolute(path).ok()?;
        let folder = path.parent()?;
        // `.vscode/mcp.json` and `.cursor/mcp.json` belong to the folder above.
        let named = |name: &str| folder.file_name().is_some_and(|folder| folder == name);
        Some(if named(".vscode") || named(".cursor") {
            folder.parent().unwrap_or(folder).to_path_buf()
        } else {
            folder.to_path_buf()
        })
    });
    let home = environment.get("HOME").map(PathBuf::from);
    Variables {
        environment,
        workspace,
        home,
        inputs: Vec::new(),
    }
}

/// Reads and checks `path`, expanding variables from `environment`. The error says what is
/// wrong and where.
pub fn read(path: &Path, environment: BTreeMap<String, String>) -> Result<ConfigServers, String> {
    let text = std::fs::read_to_string(path).map_err(|error| {
        format!(
            "cannot read the MCP configuration {}: {error}",
            path.display()
        )
    })?;
    let toml = path
        .extension()
        .is_some_and(|extension| extension == "toml");
    let mut config = parse(&text, toml, variables(Some(path), environment))
        .map_err(|error| format!("{}: {error}", path.display()))?;
    // A refused call names the rule that would let it run, and this file.
    let shown = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let shown = shown.display().to_string();
    let file = match config.format {
        Format::Codex => RulesFile::Toml { path: shown },
        Format::McpServers | Format::VsCode => RulesFile::Json { path: shown },
    };
    config.permissions = std::mem::take(&mut config.permissions).with_file(file);
    Ok(config)
}

/// Checks the text of a configuration file: TOML when `toml` says so (or when it is not JSON and
/// reads as codex's TOML), JSON otherwise.
pub fn parse(text: &str, toml: bool, mut variables: Variables) -> Result<ConfigServers, String> {
    if toml {
        return parse_codex(text, variables);
    }
    let document: Value = match serde_json::from_str(text) {
        Ok(document) => document,
        Err(error) => {
            if let Ok(Some(_)) = codex::servers(text) {
                return parse_codex(text, variables);
            }
            return Err(format!(
                "not valid JSON ({error}); expected {{\"mcpServers\": {{\"name\": {{...}}}}}}, \
                 VS Code's {{\"servers\": ...}}, or codex's TOML"
            ));
        }
    };
    let Value::Object(document) = document else {
        return Err("expected a JSON object with an \"mcpServers\" object".to_owned());
    };
    // VS Code's settings.json keeps them under "mcp".
    let document = match document.get("mcp") {
        Some(Value::Object(mcp)) if !document.contains_key("mcpServers") => mcp.clone(),
        _ => document,
    };
    let (format, entries) = match (document.get("mcpServers"), document.get("servers")) {
        (Some(Value::Object(entries)), _) => (Format::McpServers, entries),
        (None, Some(Value::Object(entries))) => (Format::VsCode, entries),
        (Some(_), _) | (None, Some(_)) => {
            return Err("\"mcpServers\" must be an object of named servers".to_owned());
        }
        (None, None) => {
            return Err("no \"mcpServers\" object: there are no servers to use".to_owned());
        }
    };
    variables.inputs = json::inputs(&document)?;
    let mut config = ConfigServers::new(format, document.get("permissions"))?;
    for (name, value) in entries {
        let read = json::entry(name, value, &mut config.warnings)?;
        for tool in &read.auto_approve {
            config.permissions = std::mem::take(&mut config.permissions).with_rule(
                Verdict::Allow,
                ToolName::namespaced(name, tool).global_name(),
            );
        }
        config.add(&read.entry, read.disabled, &variables);
    }
    Ok(config)
}

/// A codex `config.toml`.
fn parse_codex(text: &str, variables: Variables) -> Result<ConfigServers, String> {
    let entries =
        codex::servers(text)?.ok_or("no [mcp_servers.NAME] table: there are no servers to use")?;
    let mut config = ConfigServers::new(Format::Codex, codex::permissions(text).as_ref())?;
    for (name, value) in &entries {
        let (entry, disabled) = codex::entry(name, value, &mut config.warnings)?;
        config.add(&entry, disabled, &variables);
    }
    Ok(config)
}

impl ConfigServers {
    /// No servers yet, with the file's `permissions` (or the default: ask).
    fn new(format: Format, permissions: Option<&Value>) -> Result<Self, String> {
        Ok(ConfigServers {
            format,
            servers: Vec::new(),
            refused: Vec::new(),
            permissions: match permissions {
                None | Some(Value::Null) => Permissions::ask_by_default(),
                Some(rules) => read_permissions(rules)?,
            },
            warnings: Vec::new(),
            reports: Vec::new(),
        })
    }

    /// Adds what `entry` becomes.
    fn add(&mut self, entry: &entry::Entry, disabled: bool, variables: &Variables) {
        if disabled {
            self.reports.push(entry.disabled());
            return;
        }
        let (report, server) = entry.build(variables);
        if let Outcome::Refused(why) = &report.outcome {
            self.refused.push((entry.name.clone(), why.clone()));
        }
        self.servers.extend(server);
        self.reports.push(report);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_host_adapters::McpTransport;
    use std::time::Duration;

    fn parse_json(text: &str) -> Result<ConfigServers, String> {
        super::parse(text, false, Variables::default())
    }

    #[test]
    fn stdio_and_http_entries_become_servers_and_disabled_ones_are_skipped() {
        let parsed = parse_json(
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
        let parsed =
            parse_json(r#"{"mcpServers": {"fs": {"command": "npx", "argz": ["x"]}}}"#).unwrap();
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
                r#"{"mcpServers": {"e": {"url": "http://h/mcp", "type": "ws"}}}"#,
                "use \"http\" or \"sse\"",
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
            let error = parse_json(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_malformed_file_says_what_was_expected() {
        assert!(
            parse_json("{not json")
                .unwrap_err()
                .contains("not valid JSON")
        );
        assert!(parse_json("[]").unwrap_err().contains("\"mcpServers\""));
        assert!(parse_json("{}").unwrap_err().contains("no \"mcpServers\""));
        assert_eq!(
            parse_json(r#"{"servers": {"x": {"command": "y"}}}"#)
                .unwrap()
                .servers
                .len(),
            1
        );
    }

    #[test]
    fn permissions_are_read_beside_the_servers_and_bad_ones_say_what_is_expected() {
        use codemode_protocol::{ToolAnnotations, ToolDefinition};
        let parsed = parse_json(
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
        let plain = parse_json(r#"{"mcpServers": {"gh": {"command": "x"}}}"#).unwrap();
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
            let error = parse_json(&format!(
                r#"{{"mcpServers": {{"a": {{"command": "x"}}}}, {text}}}"#
            ))
            .unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let error = parse_json(r#"{"mcpServers": {"a": {"command": "x", "disabledTools": "rm"}}}"#)
            .unwrap_err();
        assert!(
            error.contains("server \"a\": \"disabledTools\" must be an array of tool names"),
            "{error}"
        );
    }
}

/// Each client's format, with its variables, as its documentation writes it.
#[cfg(test)]
mod formats {
    use super::*;
    use codemode_host_adapters::McpTransport;

    fn environment() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("GITHUB_TOKEN".to_owned(), "ghp_s3cret".to_owned()),
            ("HOME".to_owned(), "/home/me".to_owned()),
            ("PATH".to_owned(), "/usr/bin".to_owned()),
            ("AWS_SECRET".to_owned(), "not-for-codex".to_owned()),
            (
                "CODEMODE_INPUT_PERPLEXITY_KEY".to_owned(),
                "pplx".to_owned(),
            ),
        ])
    }

    fn headers(server: &McpServerConfig) -> &BTreeMap<String, String> {
        match &server.transport {
            McpTransport::Http { headers, .. } | McpTransport::Sse { headers, .. } => headers,
            other => panic!("not HTTP: {other:?}"),
        }
    }

    fn env(server: &McpServerConfig) -> &BTreeMap<String, String> {
        match &server.transport {
            McpTransport::Stdio { env, .. } => env,
            other => panic!("not stdio: {other:?}"),
        }
    }

    #[test]
    fn claude_codes_variables_and_defaults_expand_and_a_missing_one_refuses_only_its_server() {
        let text = r#"{"mcpServers": {
            "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
                       "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
            "api": {"type": "sse", "url": "${API_BASE_URL:-https://api.example.com}/sse",
                    "headers": {"X-API-Key": "${API_KEY}"}},
            "fs": {"command": "npx", "args": ["-y", "server-filesystem", "${HOME}/docs"],
                   "env": {"TOKEN": "${GITHUB_TOKEN}"}}
        }}"#;
        let parsed = parse(text, false, variables(None, environment())).unwrap();
        assert_eq!(parsed.format, Format::McpServers);
        assert_eq!(parsed.servers.len(), 2);
        assert_eq!(
            headers(&parsed.servers[0])["Authorization"],
            "Bearer ghp_s3cret"
        );
        assert_eq!(env(&parsed.servers[1])["TOKEN"], "ghp_s3cret");
        let McpTransport::Stdio { args, .. } = &parsed.servers[1].transport else {
            panic!()
        };
        assert_eq!(args[2], "/home/me/docs");
        assert_eq!(parsed.refused.len(), 1);
        let (name, why) = &parsed.refused[0];
        assert_eq!(name, "api");
        assert!(
            why.contains("server \"api\": \"headers.X-API-Key\": ${API_KEY} is not set"),
            "{why}"
        );
    }

    #[test]
    fn vs_codes_servers_inputs_env_file_and_workspace_folder() {
        let folder = std::env::temp_dir().join(format!("codemode-vscode-{}", std::process::id()));
        let vscode = folder.join(".vscode");
        std::fs::create_dir_all(&vscode).unwrap();
        std::fs::write(
            folder.join(".env"),
            "# secrets\nexport DB_URL=\"postgres://db\"\nMODE='fast'\n\nOVERRIDDEN=file\n",
        )
        .unwrap();
        let path = vscode.join("mcp.json");
        std::fs::write(
            &path,
            r#"{
              "inputs": [{"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true}],
              "servers": {
                "Perplexity": {"type": "stdio", "command": "npx", "args": ["-y", "server-perplexity-ask"],
                               "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}", "OVERRIDDEN": "env"},
                               "envFile": "${workspaceFolder}/.env"},
                "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
                           "headers": {"Authorization": "Bearer ${env:GITHUB_TOKEN}"}}
              }
            }"#,
        )
        .unwrap();
        let parsed = read(&path, environment()).unwrap();
        assert_eq!(parsed.format, Format::VsCode);
        assert!(parsed.refused.is_empty(), "{:?}", parsed.refused);
        let env = env(&parsed.servers[0]);
        assert_eq!(env["PERPLEXITY_API_KEY"], "pplx");
        assert_eq!(env["DB_URL"], "postgres://db");
        assert_eq!(env["MODE"], "fast");
        assert_eq!(env["OVERRIDDEN"], "env", "env wins over envFile");
        assert_eq!(
            headers(&parsed.servers[1])["Authorization"],
            "Bearer ghp_s3cret"
        );
        // Without the input's variable: the server is refused, naming the input and the variable.
        let mut without = environment();
        without.remove("CODEMODE_INPUT_PERPLEXITY_KEY");
        let parsed = read(&path, without).unwrap();
        assert!(
            parsed.refused[0]
                .1
                .contains("${input:perplexity-key} is not set: codemode cannot prompt for inputs, so set the environment variable CODEMODE_INPUT_PERPLEXITY_KEY"),
            "{:?}",
            parsed.refused
        );
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn codex_toml_reads_its_keys_and_passes_only_its_variables_to_stdio_servers() {
        let text = r#"
model = "gpt-5-codex"

[mcp_servers.context7]
command = "npx"
args = ["-y", "@upstash/context7-mcp"]
env_vars = ["AWS_SECRET"]
startup_timeout_sec = 20
tool_timeout_sec = 45
enabled_tools = ["resolve", "docs"]

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "GITHUB_TOKEN"
http_headers = { "X-Figma-Region" = "us-east-1" }
env_http_headers = { "X-Org-Id" = "FIGMA_ORG_ID" }

[mcp_servers.off]
command = "nothing"
enabled = false

[mcp_servers.secretless]
url = "https://example.com/mcp"
bearer_token_env_var = "NOT_SET_TOKEN"
"#;
        let parsed = parse(text, true, variables(None, environment())).unwrap();
        assert_eq!(parsed.format, Format::Codex);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let names: Vec<_> = parsed
            .servers
            .iter()
            .map(|server| server.namespace.as_str())
            .collect();
        assert_eq!(names, ["context7", "figma"]);
        let context7 = &parsed.servers[0];
        assert_eq!(context7.connect_timeout, std::time::Duration::from_secs(20));
        assert_eq!(context7.call_timeout, std::time::Duration::from_secs(45));
        assert!(context7.offers("docs") && !context7.offers("other"));
        let inherited: Vec<String> = context7
            .environment
            .as_ref()
            .unwrap()
            .iter()
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert_eq!(inherited, ["AWS_SECRET", "HOME", "PATH"]);
        let figma = headers(&parsed.servers[1]);
        assert_eq!(figma["Authorization"], "Bearer ghp_s3cret");
        assert_eq!(figma["X-Figma-Region"], "us-east-1");
        assert!(
            !figma.contains_key("X-Org-Id"),
            "an unset env_http_headers variable leaves its header out"
        );
        assert_eq!(parsed.refused.len(), 1);
        assert!(
            parsed.refused[0].1.contains("NOT_SET_TOKEN is not set"),
            "{:?}",
            parsed.refused
        );
        // Chosen by content too: TOML in a file without the extension.
        assert_eq!(
            parse(text, false, Variables::default()).unwrap().format,
            Format::Codex
        );
    }

    #[test]
    fn an_sse_url_is_guessed_as_clients_guess_and_windsurfs_server_url_is_read() {
        let parsed = parse(
            r#"{"mcpServers": {"legacy": {"url": "http://127.0.0.1:8000/sse"},
                               "surf": {"serverUrl": "http://127.0.0.1:8000/mcp"}}}"#,
            false,
            Variables::default(),
        )
        .unwrap();
        assert!(matches!(
            parsed.servers[0].transport,
            McpTransport::Sse { .. }
        ));
        assert!(matches!(
            parsed.servers[1].transport,
            McpTransport::Http { .. }
        ));
    }

    #[test]
    fn config_check_names_every_variable_and_shows_no_secret() {
        let text = r#"{"mcpServers": {
            "github": {"url": "https://api.githubcopilot.com/mcp/", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}", "X-Literal": "literal-s3cret"}},
            "fs": {"command": "npx", "args": ["-y", "${MISSING_DIR}"], "env": {"KEY": "plain-s3cret"}},
            "off": {"command": "x", "disabled": true, "argz": 1}
        }}"#;
        let parsed = parse(text, false, variables(None, environment())).unwrap();
        let shown = check::render(std::path::Path::new("mcp.json"), &parsed);
        for secret in ["ghp_s3cret", "literal-s3cret", "plain-s3cret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        for expected in [
            "server \"github\": ready",
            "streamable HTTP: https://api.githubcopilot.com/mcp/",
            "sets (values not shown): header Authorization, header X-Literal",
            "variable GITHUB_TOKEN: set (10 characters)",
            "server \"fs\": will not start: server \"fs\": \"args\": ${MISSING_DIR} is not set",
            "stdio: npx -y '${MISSING_DIR}'",
            "variable MISSING_DIR: NOT SET",
            "server \"off\": disabled (skipped)",
            "ignored:",
            "unknown key \"argz\"",
        ] {
            assert!(shown.contains(expected), "{expected:?} in:\n{shown}");
        }
    }
}
