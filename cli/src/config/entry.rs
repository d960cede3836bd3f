//! One server entry, whatever file it came from ([`Entry`]), and what it becomes: a downstream
//! server, or the reason it cannot start ([`Entry::build`]), with what `codemode config check`
//! shows of it ([`EntryReport`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use codemode_host_adapters::oauth::OAuthSettings;
use codemode_host_adapters::{McpServerConfig, McpTransport};
use codemode_protocol::normalize_identifier;

use super::expand::{Resolution, Used, Variables};

/// The environment variables codex passes to a stdio server without being asked (its
/// `DEFAULT_ENV_VARS` on Unix); `env_vars` adds more.
const CODEX_INHERITED: [&str; 11] = [
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "USER",
    "__CF_USER_TEXT_ENCODING",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "TZ",
];

/// How a server is reached, as the entry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// A program speaking MCP on stdio.
    Command(String),
    /// Streamable HTTP.
    Http(String),
    /// The legacy HTTP+SSE transport (2024-11-05).
    Sse(String),
}

/// A server entry of any format, before its variables are expanded.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub reach: Reach,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// VS Code's `envFile`: a `.env` file whose variables the server gets (under `env`'s).
    pub env_file: Option<String>,
    pub cwd: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// codex's `bearer_token_env_var`: the variable holding the `Authorization: Bearer` token.
    pub bearer_env: Option<String>,
    /// codex's `env_http_headers`: header name to the variable holding its value (a header whose
    /// variable is not set is left out, as codex leaves it).
    pub env_headers: BTreeMap<String, String>,
    /// codex's environment rule: only these of the user's variables reach a stdio server
    /// (`None`: all of them).
    pub inherit: Option<Vec<String>>,
    pub call_timeout: Option<Duration>,
    pub startup_timeout: Option<Duration>,
    pub enabled_tools: Option<Vec<String>>,
    pub disabled_tools: Vec<String>,
    /// Whether `${...}` in values is expanded (JSON formats; codex's TOML has no such syntax).
    pub expands: bool,
    /// The `oauth` keys: how codemode identifies itself to the server's authorization server.
    pub oauth: OAuthEntry,
}

/// An entry's `oauth` keys, before their variables are expanded.
#[derive(Debug, Clone, Default)]
pub struct OAuthEntry {
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub client_metadata_url: Option<String>,
    pub scopes: Vec<String>,
    pub callback_port: Option<u16>,
}

impl OAuthEntry {
    /// The `oauth` object of an entry: `clientId`, `clientSecret`, `clientMetadataUrl`,
    /// `scopes` (an array, or one space-separated string) and `callbackPort` (each also in
    /// snake case, as codex writes keys).
    pub fn read(name: &str, value: Option<&serde_json::Value>) -> Result<Self, String> {
        use serde_json::Value;
        let Some(value) = value.filter(|value| !value.is_null()) else {
            return Ok(OAuthEntry::default());
        };
        let wrong = |key: &str, expected: &str| {
            format!("server \"{name}\": \"oauth.{key}\" must be {expected}")
        };
        let Value::Object(fields) = value else {
            return Err(format!(
                "server \"{name}\": \"oauth\" must be an object (clientId, clientSecret, \
                 clientMetadataUrl, scopes, callbackPort)"
            ));
        };
        let mut oauth = OAuthEntry::default();
        for (key, value) in fields {
            match (key.as_str(), value) {
                ("clientId" | "client_id", Value::String(id)) => oauth.client_id = Some(id.clone()),
                ("clientSecret" | "client_secret", Value::String(secret)) => {
                    oauth.client_secret = Some(secret.clone());
                }
                ("clientMetadataUrl" | "client_metadata_url", Value::String(url)) => {
                    oauth.client_metadata_url = Some(url.clone());
                }
                ("scopes" | "scope", Value::String(scopes)) => {
                    oauth.scopes = scopes.split_whitespace().map(str::to_owned).collect();
                }
                ("scopes" | "scope", Value::Array(scopes)) => {
                    oauth.scopes = scopes
                        .iter()
                        .map(|scope| scope.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or_else(|| wrong(key, "an array of scope names"))?;
                }
                ("callbackPort" | "callback_port", Value::Number(port)) => {
                    oauth.callback_port = Some(
                        port.as_u64()
                            .and_then(|port| u16::try_from(port).ok())
                            .ok_or_else(|| wrong(key, "a port number"))?,
                    );
                }
                (
                    "clientId"
                    | "client_id"
                    | "clientSecret"
                    | "client_secret"
                    | "clientMetadataUrl"
                    | "client_metadata_url",
                    _,
                ) => return Err(wrong(key, "a string")),
                ("scopes" | "scope", _) => return Err(wrong(key, "an array of scope names")),
                ("callbackPort" | "callback_port", _) => return Err(wrong(key, "a port number")),
                _ => {
                    return Err(format!(
                        "server \"{name}\": \"oauth\" has an unknown key \"{key}\" (known: \
                         clientId, clientSecret, clientMetadataUrl, scopes, callbackPort)"
                    ));
                }
            }
        }
        if oauth.client_secret.is_some() && oauth.client_id.is_none() {
            return Err(format!(
                "server \"{name}\": \"oauth.clientSecret\" needs the \"clientId\" it belongs to"
            ));
        }
        Ok(oauth)
    }
}

/// What became of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It is started when tools are listed.
    Ready,
    /// `disabled: true` / `enabled = false`.
    Disabled,
    /// It cannot be started as configured (a variable is not set, its `envFile` cannot be read).
    Refused(String),
}

/// An entry as `codemode config check` shows it: never a secret's value.
#[derive(Debug, Clone)]
pub struct EntryReport {
    pub name: String,
    /// The transport and its target as written (variables unexpanded).
    pub transport: String,
    /// Names of the headers and environment variables it sets (values never shown).
    pub secrets: Vec<String>,
    /// The variables it uses, and how each resolved.
    pub used: Vec<Used>,
    pub outcome: Outcome,
}

impl Entry {
    /// An entry of server `name` reached through `reach`, with nothing else set.
    pub fn new(name: &str, reach: Reach, expands: bool) -> Self {
        Entry {
            name: name.to_owned(),
            reach,
            args: Vec::new(),
            env: BTreeMap::new(),
            env_file: None,
            cwd: None,
            headers: BTreeMap::new(),
            bearer_env: None,
            env_headers: BTreeMap::new(),
            inherit: None,
            call_timeout: None,
            startup_timeout: None,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            expands,
            oauth: OAuthEntry::default(),
        }
    }

    /// What `config check` shows of the entry, before it is built.
    fn report(&self, outcome: Outcome, used: Vec<Used>) -> EntryReport {
        let transport = match &self.reach {
            Reach::Command(command) => {
                let mut line = vec![command.clone()];
                line.extend(self.args.iter().cloned());
                format!(
                    "stdio: {}",
                    shlex::try_join(line.iter().map(String::as_str)).unwrap_or_default()
                )
            }
            Reach::Http(url) => format!("streamable HTTP: {url}"),
            Reach::Sse(url) => format!("SSE (legacy): {url}"),
        };
        let mut secrets: Vec<String> = self
            .headers
            .keys()
            .chain(self.env_headers.keys())
            .map(|name| format!("header {name}"))
            .collect();
        if self.bearer_env.is_some() {
            secrets.push("header Authorization".to_owned());
        }
        secrets.extend(self.env.keys().map(|name| format!("env {name}")));
        if let Some(file) = &self.env_file {
            secrets.push(format!("envFile {file}"));
        }
        if self.oauth.client_secret.is_some() {
            secrets.push("oauth clientSecret".to_owned());
        }
        EntryReport {
            name: self.name.clone(),
            transport,
            secrets,
            used,
            outcome,
        }
    }

    /// The server, or why it cannot start; and its report.
    pub fn build(&self, variables: &Variables) -> (EntryReport, Option<McpServerConfig>) {
        let mut used = Vec::new();
        match self.resolve(variables, &mut used) {
            Ok(server) => (self.report(Outcome::Ready, used), Some(server)),
            Err(why) => (
                self.report(
                    Outcome::Refused(format!("server \"{}\": {why}", self.name)),
                    used,
                ),
                None,
            ),
        }
    }

    /// The report of a disabled entry.
    pub fn disabled(&self) -> EntryReport {
        self.report(Outcome::Disabled, Vec::new())
    }

    fn resolve(
        &self,
        variables: &Variables,
        used: &mut Vec<Used>,
    ) -> Result<McpServerConfig, String> {
        let expand = |key: &str, value: &str, used: &mut Vec<Used>| -> Result<String, String> {
            if self.expands {
                variables
                    .expand(value, used)
                    .map_err(|why| format!("\"{key}\": {why}"))
            } else {
                Ok(value.to_owned())
            }
        };
        let transport = match &self.reach {
            Reach::Command(command) => {
                let program = expand("command", command, used)?;
                let args = self
                    .args
                    .iter()
                    .map(|arg| expand("args", arg, used))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut env = BTreeMap::new();
                if let Some(file) = &self.env_file {
                    let path = expand("envFile", file, used)?;
                    let path = match (PathBuf::from(&path), &variables.workspace) {
                        (path, Some(workspace)) if path.is_relative() => workspace.join(path),
                        (path, _) => path,
                    };
                    env.extend(read_env_file(&path)?);
                }
                for (name, value) in &self.env {
                    env.insert(name.clone(), expand(&format!("env.{name}"), value, used)?);
                }
                let cwd = self
                    .cwd
                    .as_ref()
                    .map(|cwd| expand("cwd", cwd, used).map(PathBuf::from))
                    .transpose()?;
                McpTransport::Stdio {
                    program,
                    args,
                    env,
                    cwd,
                }
            }
            Reach::Http(url) | Reach::Sse(url) => {
                let url = expand("url", url, used)?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err("\"url\" must be an http:// or https:// URL".to_owned());
                }
                let mut headers = BTreeMap::new();
                for (name, value) in &self.headers {
                    headers.insert(
                        name.clone(),
                        expand(&format!("headers.{name}"), value, used)?,
                    );
                }
                if let Some(variable) = &self.bearer_env {
                    let token = variables
                        .environment
                        .get(variable)
                        .filter(|token| !token.is_empty());
                    used.push((
                        variable.clone(),
                        token.map_or(Resolution::Missing, |token| {
                            Resolution::Set(token.chars().count())
                        }),
                    ));
                    let token = token.ok_or_else(|| {
                        format!(
                            "\"bearer_token_env_var\": the environment variable {variable} is not set"
                        )
                    })?;
                    headers.insert("Authorization".to_owned(), format!("Bearer {token}"));
                }
                for (name, variable) in &self.env_headers {
                    match variables
                        .environment
                        .get(variable)
                        .filter(|value| !value.is_empty())
                    {
                        Some(value) => {
                            used.push((variable.clone(), Resolution::Set(value.chars().count())));
                            headers.insert(name.clone(), value.clone());
                        }
                        None => used.push((variable.clone(), Resolution::Missing)),
                    }
                }
                match self.reach {
                    Reach::Sse(_) => McpTransport::Sse { url, headers },
                    _ => McpTransport::Http { url, headers },
                }
            }
        };
        let optional = |key: &str, value: &Option<String>, used: &mut Vec<Used>| {
            value
                .as_ref()
                .map(|value| expand(key, value, used))
                .transpose()
        };
        let mut oauth = OAuthSettings::default().with_scopes(self.oauth.scopes.clone());
        if let Some(client_id) = optional("oauth.clientId", &self.oauth.client_id, used)? {
            let secret = optional("oauth.clientSecret", &self.oauth.client_secret, used)?;
            oauth = oauth.with_client(client_id, secret);
        }
        if let Some(url) = optional(
            "oauth.clientMetadataUrl",
            &self.oauth.client_metadata_url,
            used,
        )? {
            oauth = oauth.with_client_metadata_url(url);
        }
        if let Some(port) = self.oauth.callback_port {
            oauth = oauth.with_callback_port(port);
        }
        let mut server = McpServerConfig::new(normalize_identifier(&self.name), transport)
            .with_tool_filter(self.enabled_tools.clone(), self.disabled_tools.clone())
            .with_oauth(oauth);
        if let Some(timeout) = self.call_timeout {
            server = server.with_call_timeout(timeout);
        }
        if let Some(timeout) = self.startup_timeout {
            server = server.with_startup_timeout(timeout);
        }
        let environment: Vec<(std::ffi::OsString, std::ffi::OsString)> = variables
            .environment
            .iter()
            .filter(|(name, _)| {
                self.inherit
                    .as_ref()
                    .is_none_or(|inherit| inherit.iter().any(|kept| kept == *name))
            })
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        Ok(server.with_environment(environment))
    }
}

/// codex's inherited variables with an entry's `env_vars`.
pub fn codex_inherited(extra: Vec<String>) -> Vec<String> {
    CODEX_INHERITED
        .iter()
        .map(|name| (*name).to_owned())
        .chain(extra)
        .collect()
}

/// The variables of a `.env` file: `NAME=value` lines (an optional `export `, values in single
/// or double quotes, `#` comments and blank lines skipped).
fn read_env_file(path: &std::path::Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("\"envFile\": cannot read {}: {error}", path.display()))?;
    let mut variables = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (name, value) = line.split_once('=').ok_or_else(|| {
            format!(
                "\"envFile\": line {} of {} is not NAME=value",
                number + 1,
                path.display()
            )
        })?;
        let value = value.trim();
        let value = [('"', '"'), ('\'', '\'')]
            .iter()
            .find_map(|(open, close)| value.strip_prefix(*open)?.strip_suffix(*close))
            .unwrap_or(value);
        variables.insert(name.trim().to_owned(), value.to_owned());
    }
    Ok(variables)
}
