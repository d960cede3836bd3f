//! How a downstream server is reached and named ([`McpServerConfig`], [`McpTransport`]: a stdio
//! child process or streamable HTTP), and how a connection to it starts ([`lifecycle`]: the
//! 2026-07-28 discovery first, `initialize` for an older server).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How the server is reached. Its `Debug` form shows no header or environment value (they hold
/// secrets), only their names, and no URL query (it may hold a key).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program to run.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it, on top of the inherited environment.
        env: BTreeMap<String, String>,
        /// Its working directory; the current one when `None`.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint, such as `http://127.0.0.1:8080/mcp`.
    Http {
        /// The server's URL (`http://host:port/mcp`).
        url: String,
        /// Headers sent with every request (an `Authorization` header, for instance).
        headers: BTreeMap<String, String>,
    },
    /// The legacy HTTP+SSE transport (MCP 2024-11-05): an event stream at `url`, such as
    /// `http://127.0.0.1:8000/sse`, that names where messages are posted.
    Sse {
        /// The event stream's URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |map: &BTreeMap<String, String>| map.keys().cloned().collect::<Vec<_>>();
        match self {
            McpTransport::Stdio {
                program,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("program", program)
                .field("args", &args.len())
                .field("env", &names(env))
                .field("cwd", cwd)
                .finish(),
            McpTransport::Http { url, headers } | McpTransport::Sse { url, headers } => f
                .debug_struct(if matches!(self, McpTransport::Sse { .. }) {
                    "Sse"
                } else {
                    "Http"
                })
                .field("url", &display_url(url))
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

/// A URL as logs and errors show it: without its query, fragment or user info, where keys hide.
pub fn display_url(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..cut];
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/') {
            Some((authority, path)) => {
                let host = authority
                    .rsplit_once('@')
                    .map_or(authority, |(_, host)| host);
                format!("{scheme}://{host}/{path}")
            }
            None => format!(
                "{scheme}://{}",
                rest.rsplit_once('@').map_or(rest, |(_, host)| host)
            ),
        },
        None => url.to_owned(),
    }
}

impl McpTransport {
    /// A stdio server: `program` with `args`, in the inherited environment.
    pub fn stdio(program: impl Into<String>, args: Vec<String>) -> Self {
        McpTransport::Stdio {
            program: program.into(),
            args,
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// A stdio server from a command line such as `node "my server.js" --flag`, split into words
    /// as a POSIX shell would (quotes and backslashes), without running a shell. `None` when the
    /// line names no program or its quotes do not close.
    pub fn stdio_command(command_line: &str) -> Option<Self> {
        let mut words = shlex::split(command_line)?.into_iter();
        let program = words.next()?;
        Some(McpTransport::stdio(program, words.collect()))
    }

    /// A streamable HTTP server at `url`, with no extra headers.
    pub fn http(url: impl Into<String>) -> Self {
        McpTransport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        }
    }
}

/// How a connection starts: `server/discover` first, speaking 2026-07-28 (no `initialize`,
/// each request carrying its protocol version, client info and capabilities in `_meta`, and over
/// HTTP the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers) to a server that answers
/// it; to a server of an older revision, which refuses the method, `initialize` offering
/// 2025-11-25, which it knows (and may answer with an older one it speaks).
pub(super) fn lifecycle() -> rmcp::service::ClientLifecycleMode {
    rmcp::service::ClientLifecycleMode::Auto {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        legacy_version: Some(rmcp::model::ProtocolVersion::V_2025_11_25),
    }
}

/// One downstream server.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpServerConfig {
    /// The namespace of its tools: `tools.<namespace>__<tool>`.
    pub namespace: String,
    /// How to reach the server.
    pub transport: McpTransport,
    /// How long one call may take before it fails.
    pub call_timeout: Duration,
    /// How long starting and initialising the connection may take (`startup_timeout_sec`): by
    /// default 30 s, and 120 s for a command that downloads its server first (`npx`, `uvx`,
    /// `bunx`, `pnpx`, `pipx`).
    pub connect_timeout: Duration,
    /// The whole environment a stdio server starts with, before its transport's `env`; `None`:
    /// this process's environment.
    pub environment: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
    /// The only tools of the server cells see (by the server's own names); `None`: all of them.
    pub enabled_tools: Option<Vec<String>>,
    /// Tools of the server cells never see (by the server's own names), even when enabled.
    pub disabled_tools: Vec<String>,
    /// How codemode authorizes with an HTTP server that wants OAuth (see `oauth`).
    pub oauth: super::oauth::OAuthSettings,
}

/// Everything but the environment's values, which may hold secrets.
impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("namespace", &self.namespace)
            .field("transport", &self.transport)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field(
                "environment",
                &self
                    .environment
                    .as_ref()
                    .map(|environment| environment.len()),
            )
            .field("enabled_tools", &self.enabled_tools)
            .field("disabled_tools", &self.disabled_tools)
            .field("oauth_client", &self.oauth.client_id)
            .finish()
    }
}

impl McpServerConfig {
    /// A server whose tools appear under `namespace`, reached through `transport`.
    pub fn new(namespace: impl Into<String>, transport: McpTransport) -> Self {
        let connect_timeout = default_startup_timeout(&transport);
        McpServerConfig {
            namespace: namespace.into(),
            transport,
            call_timeout: Duration::from_secs(60),
            connect_timeout,
            environment: None,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            oauth: super::oauth::OAuthSettings::default(),
        }
    }

    /// This configuration with how codemode authorizes with the server over OAuth.
    pub fn with_oauth(mut self, oauth: super::oauth::OAuthSettings) -> Self {
        self.oauth = oauth;
        self
    }

    /// This configuration offering cells only the tools `enabled` names (all when `None`),
    /// less those `disabled` names (`enabledTools`/`disabledTools` of a configuration file).
    pub fn with_tool_filter(mut self, enabled: Option<Vec<String>>, disabled: Vec<String>) -> Self {
        self.enabled_tools = enabled;
        self.disabled_tools = disabled;
        self
    }

    /// Whether cells see the server's tool `name` (its own name, not the namespaced one).
    pub fn offers(&self, name: &str) -> bool {
        let enabled = self
            .enabled_tools
            .as_ref()
            .is_none_or(|enabled| enabled.iter().any(|tool| tool == name));
        enabled && !self.disabled_tools.iter().any(|tool| tool == name)
    }

    /// This configuration with the whole environment a stdio server starts with (the
    /// transport's `env` still goes on top), instead of this process's.
    pub fn with_environment(
        mut self,
        environment: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Self {
        self.environment = Some(environment.into_iter().collect());
        self
    }

    /// This configuration with another startup timeout (starting the server or reaching it,
    /// and its handshake).
    pub fn with_startup_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// This configuration with another per-call timeout.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }
}

/// Commands that download the server before it starts, and so take longer the first time.
const DOWNLOADERS: [&str; 5] = ["npx", "uvx", "bunx", "pnpx", "pipx"];

/// How long a server may take to start unless its configuration says: 120 s for a command that
/// downloads its server first, 30 s for anything else.
fn default_startup_timeout(transport: &McpTransport) -> Duration {
    let downloads = match transport {
        McpTransport::Stdio { program, .. } => std::path::Path::new(program)
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| DOWNLOADERS.contains(&name)),
        _ => false,
    };
    Duration::from_secs(if downloads { 120 } else { 30 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_into_program_and_arguments_as_a_shell_would() {
        assert_eq!(
            McpTransport::stdio_command("node  server.js --port 1"),
            Some(McpTransport::stdio(
                "node",
                vec!["server.js".into(), "--port".into(), "1".into()]
            ))
        );
        assert_eq!(
            McpTransport::stdio_command(r#""/opt/my tools/server" --name 'a b' c\ d"#),
            Some(McpTransport::stdio(
                "/opt/my tools/server",
                vec!["--name".into(), "a b".into(), "c d".into()]
            ))
        );
        assert_eq!(McpTransport::stdio_command("   "), None);
        assert_eq!(McpTransport::stdio_command("node 'unclosed"), None);
    }

    #[test]
    fn debug_forms_and_urls_show_no_secret() {
        let transport = McpTransport::Http {
            url: "https://user:pw@example.com/mcp?key=s3cret#x".into(),
            headers: BTreeMap::from([("Authorization".into(), "Bearer s3cret".into())]),
        };
        let config = McpServerConfig::new("gh", transport).with_environment([(
            std::ffi::OsString::from("TOKEN"),
            std::ffi::OsString::from("s3cret"),
        )]);
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("pw"),
            "{shown}"
        );
        assert!(shown.contains("https://example.com/mcp"), "{shown}");
        assert!(shown.contains("Authorization"), "{shown}");
        let stdio = McpTransport::Stdio {
            program: "server".into(),
            args: vec!["--token".into(), "s3cret".into()],
            env: BTreeMap::from([("KEY".into(), "s3cret".into())]),
            cwd: None,
        };
        assert!(!format!("{stdio:?}").contains("s3cret"));
        assert_eq!(display_url("http://h:1/sse"), "http://h:1/sse");
    }

    #[test]
    fn commands_that_download_their_server_get_longer_to_start() {
        let timeout = |transport| McpServerConfig::new("s", transport).connect_timeout;
        assert_eq!(
            timeout(McpTransport::stdio("/usr/bin/npx", vec!["-y".into()])),
            Duration::from_secs(120)
        );
        assert_eq!(
            timeout(McpTransport::stdio("uvx", Vec::new())),
            Duration::from_secs(120)
        );
        assert_eq!(
            timeout(McpTransport::stdio("node", Vec::new())),
            Duration::from_secs(30)
        );
        assert_eq!(
            timeout(McpTransport::http("http://h/mcp")),
            Duration::from_secs(30)
        );
    }
}
