//! The configurations users already have, through the built binary against real servers: one
//! file per client format (Claude Code, VS Code, Cursor, codex), each with its variables in
//! headers and `env`, driving a cell that calls a stdio server (which refuses to start unless
//! its variable arrived) and an HTTP server that demands its bearer token; a Python SDK server
//! over the legacy SSE transport; broken servers beside a healthy one; `codemode servers` and
//! `codemode config check`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use codemode_test_support::ListeningServer;
use serde_json::Value;

mod common;

use common::{CODEMODE, output_texts as texts};

const TOKEN: &str = "tok_5ecret_for_tests";
const STDIO_KEY: &str = "stdio-key-value";

fn scratch(name: &str) -> PathBuf {
    codemode_test_support::scratch_folder(&format!("user-config-{name}"))
}

/// The demo server over HTTP, answering 401 without `Authorization: Bearer TOKEN`.
fn bearer_server() -> ListeningServer {
    let mut command = Command::new(CODEMODE);
    command.args([
        "demo-mcp-server",
        "--http",
        "127.0.0.1:0",
        "--bearer",
        TOKEN,
    ]);
    ListeningServer::spawn(command)
}

/// A shell line that starts the demo stdio server only if `$DEMO_KEY` is the expected value.
fn guarded_stdio() -> String {
    format!(
        "test \"$DEMO_KEY\" = '{STDIO_KEY}' || {{ echo \"DEMO_KEY is wrong\" >&2; exit 7; }}; exec '{CODEMODE}' demo-mcp-server"
    )
}

/// `codemode COMMAND... --config CONFIG -` with `source` on stdin and `environment` added.
fn codemode(args: &[&str], config: &Path, source: &str, environment: &[(&str, &str)]) -> Output {
    let mut all: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    all.extend([std::ffi::OsStr::new("--config"), config.as_os_str()]);
    if args[0] == "run" {
        all.push(std::ffi::OsStr::new("-"));
    }
    common::codemode_with_env(all, source, environment)
}

/// The cell every format runs: one call to the stdio server, one to the HTTP server.
const BOTH_CALLS: &str = r#"
    text((await tools.local__add({a: 2, b: 3})).structuredContent.sum);
    text((await tools.remote__add({a: 10, b: 5})).structuredContent.sum);
"#;

fn run_format(file: &Path, environment: &[(&str, &str)]) {
    // Every log on, so that a secret written to any of them would show.
    let mut environment = environment.to_vec();
    environment.push(("CODEMODE_LOG", "trace"));
    let environment = environment.as_slice();
    let output = codemode(
        &["run", "--json", "--no-demo-tools"],
        file,
        BOTH_CALLS,
        environment,
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}: {output:?}",
        file.display()
    );
    assert_eq!(texts(&output), ["5", "15"], "{}", file.display());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains(TOKEN),
        "the token leaked to stderr: {stderr}"
    );
}

#[test]
fn each_clients_format_reaches_a_stdio_and_a_bearer_http_server_with_secrets_from_the_environment()
{
    let server = bearer_server();
    let url = server.url();
    let stdio = guarded_stdio();
    let folder = scratch("formats");
    let secrets = [("API_TOKEN", TOKEN), ("DEMO_KEY_VALUE", STDIO_KEY)];

    // Claude Code's .mcp.json: ${VAR} and ${VAR:-default}.
    let claude = folder.join(".mcp.json");
    std::fs::write(
        &claude,
        format!(
            r#"{{"mcpServers": {{
                "local": {{"command": "sh", "args": ["-c", {stdio:?}], "env": {{"DEMO_KEY": "${{DEMO_KEY_VALUE}}"}}}},
                "remote": {{"type": "http", "url": "${{REMOTE_URL:-{url}}}",
                            "headers": {{"Authorization": "Bearer ${{API_TOKEN}}"}}}}
            }}}}"#
        ),
    )
    .unwrap();
    run_format(&claude, &secrets);

    // Cursor's ~/.cursor/mcp.json: ${env:NAME}.
    let cursor_folder = folder.join(".cursor");
    std::fs::create_dir_all(&cursor_folder).unwrap();
    let cursor = cursor_folder.join("mcp.json");
    std::fs::write(
        &cursor,
        format!(
            r#"{{"mcpServers": {{
                "local": {{"command": "sh", "args": ["-c", {stdio:?}], "env": {{"DEMO_KEY": "${{env:DEMO_KEY_VALUE}}"}}}},
                "remote": {{"url": "{url}", "headers": {{"Authorization": "Bearer ${{env:API_TOKEN}}"}}}}
            }}}}"#
        ),
    )
    .unwrap();
    run_format(&cursor, &secrets);

    // VS Code's .vscode/mcp.json: servers, inputs (from CODEMODE_INPUT_<ID>) and envFile.
    let vscode_folder = folder.join(".vscode");
    std::fs::create_dir_all(&vscode_folder).unwrap();
    std::fs::write(folder.join("demo.env"), format!("DEMO_KEY={STDIO_KEY}\n")).unwrap();
    let vscode = vscode_folder.join("mcp.json");
    std::fs::write(
        &vscode,
        format!(
            r#"{{
              "inputs": [{{"type": "promptString", "id": "api-token", "description": "API token", "password": true}}],
              "servers": {{
                "local": {{"type": "stdio", "command": "sh", "args": ["-c", {stdio:?}], "envFile": "${{workspaceFolder}}/demo.env"}},
                "remote": {{"type": "http", "url": "{url}", "headers": {{"Authorization": "Bearer ${{input:api-token}}"}}}}
              }}
            }}"#
        ),
    )
    .unwrap();
    run_format(&vscode, &[("CODEMODE_INPUT_API_TOKEN", TOKEN)]);

    // codex's config.toml: bearer_token_env_var, env_vars.
    let codex = folder.join("config.toml");
    std::fs::write(
        &codex,
        format!(
            "model = \"gpt-5-codex\"\n\n[mcp_servers.local]\ncommand = \"sh\"\nargs = [\"-c\", {stdio:?}]\nenv_vars = [\"DEMO_KEY\"]\n\n[mcp_servers.remote]\nurl = \"{url}\"\nbearer_token_env_var = \"API_TOKEN\"\n"
        ),
    )
    .unwrap();
    run_format(&codex, &[("API_TOKEN", TOKEN), ("DEMO_KEY", STDIO_KEY)]);
}

#[test]
fn broken_servers_are_reported_and_the_healthy_one_keeps_working() {
    let server = bearer_server();
    let folder = scratch("broken");
    let config = folder.join("mcp.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"mcpServers": {{
                "missing": {{"command": "/nonexistent/mcp-server"}},
                "crashing": {{"command": "sh", "args": ["-c", "echo 'cannot open database' >&2; exit 4"]}},
                "unauthorised": {{"url": "{}"}},
                "unset": {{"url": "{}", "headers": {{"Authorization": "Bearer ${{NO_SUCH_TOKEN}}"}}}},
                "healthy": {{"command": "{CODEMODE}", "args": ["demo-mcp-server"]}}
            }}}}"#,
            server.url(),
            server.url()
        ),
    )
    .unwrap();
    let output = codemode(
        &["run", "--json", "--no-demo-tools"],
        &config,
        r#"text((await tools.healthy__add({a: 1, b: 1})).structuredContent.sum);
           text(ALL_TOOLS.every((tool) => tool.name.startsWith("healthy__")));
           text(ALL_TOOLS.unavailable.map((down) => down.server).sort().join(" "));
           text(ALL_TOOLS.unavailable.find((down) => down.server === "crashing").reason);"#,
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let texts = texts(&output);
    assert_eq!(
        texts[..3],
        ["2", "true", "crashing missing unauthorised unset"]
    );
    assert!(texts[3].contains("cannot open database"), "{texts:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server \"unset\": \"headers.Authorization\": ${NO_SUCH_TOKEN} is not set"),
        "{stderr}"
    );

    let listing = codemode(&["servers"], &config, "", &[]);
    assert_eq!(listing.status.code(), Some(1), "{listing:?}");
    let lines = String::from_utf8_lossy(&listing.stdout);
    let line = |name: &str| {
        lines
            .lines()
            .find(|line| line.starts_with(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{lines}"))
            .to_owned()
    };
    assert_eq!(line("healthy"), "healthy: up, 9 tools");
    assert!(
        line("missing").contains("down: cannot start the MCP server \"missing\""),
        "{lines}"
    );
    let crashing = line("crashing");
    assert!(
        crashing.contains("it exited with status 4") && crashing.contains("cannot open database"),
        "{crashing}"
    );
    let unauthorised = line("unauthorised");
    assert!(
        unauthorised.contains("down: ") && unauthorised.contains("HTTP 401 Unauthorized"),
        "{unauthorised}"
    );
    assert!(
        unauthorised.contains("run `codemode login unauthorised`"),
        "{unauthorised}"
    );
    assert!(line("unset").contains("NO_SUCH_TOKEN"), "{lines}");
}

#[test]
fn a_python_sdk_server_over_the_legacy_sse_transport_serves_cells() {
    let tools = codemode_test_support::mcp_servers::install(
        &codemode_test_support::mcp_servers::workspace_root(),
    )
    .unwrap_or_else(|error| panic!("the Python SDK could not be installed: {error}"));
    let folder = scratch("sse");
    let script = folder.join("legacy.py");
    std::fs::write(
        &script,
        r#"import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("legacy")

@server.tool()
def add(a: float, b: float) -> float:
    """Adds two numbers."""
    return a + b

server.run("sse", host="127.0.0.1", port=int(sys.argv[1]))
"#,
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut python = Command::new(tools.python_program("python"))
        .arg(&script)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the SSE server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = folder.join("mcp.json");
    std::fs::write(
        &config,
        format!(r#"{{"mcpServers": {{"legacy": {{"type": "sse", "url": "http://127.0.0.1:{port}/sse"}}}}}}"#),
    )
    .unwrap();
    let output = codemode(
        &["run", "--json", "--no-demo-tools", "--approve", "all"],
        &config,
        r#"const result = await tools.legacy__add({a: 20, b: 22}); text(result.content[0].text);"#,
        &[],
    );
    let _ = python.kill();
    let _ = python.wait();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(texts(&output), ["42.0"]);
}

#[test]
fn config_check_shows_what_was_read_and_no_secret() {
    let folder = scratch("check");
    let config = folder.join(".mcp.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {
            "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
            "db": {"command": "npx", "args": ["-y", "db-server"], "env": {"DB_URL": "${DATABASE_URL}"}}
        }}"#,
    )
    .unwrap();
    let output = Command::new(CODEMODE)
        .args(["config", "check"])
        .arg(&config)
        .env("GITHUB_TOKEN", TOKEN)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "a server cannot start: {output:?}"
    );
    assert!(!shown.contains(TOKEN), "{shown}");
    for expected in [
        "JSON with \"mcpServers\"",
        "server \"github\": ready",
        &format!("variable GITHUB_TOKEN: set ({} characters)", TOKEN.len()),
        "server \"db\": will not start",
        "variable DATABASE_URL: NOT SET",
    ] {
        assert!(shown.contains(expected), "{expected:?} in:\n{shown}");
    }
    let unreadable = Command::new(CODEMODE)
        .args(["config", "check", "/nonexistent/mcp.json"])
        .output()
        .unwrap();
    assert_eq!(unreadable.status.code(), Some(2));
}

/// Lines of a child's stderr, as they come.
fn stderr_lines(
    stderr: tokio::process::ChildStderr,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use tokio::io::AsyncBufReadExt;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Waits for a line containing `needle`.
async fn line_with(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    needle: &str,
) -> String {
    codemode_test_support::within(needle, async {
        loop {
            let line = lines.recv().await.expect("the server's stderr ended");
            if line.contains(needle) {
                return line;
            }
        }
    })
    .await
}

/// A configuration of demo servers named `names`, whose calls all run.
fn demo_servers(config: &Path, names: &[&str]) {
    let entries: serde_json::Map<String, Value> = names
        .iter()
        .map(|name| {
            (
                (*name).to_owned(),
                serde_json::json!({"command": CODEMODE, "args": ["demo-mcp-server"]}),
            )
        })
        .collect();
    std::fs::write(
        config,
        serde_json::json!({"mcpServers": entries, "permissions": {"default": "allow"}}).to_string(),
    )
    .unwrap();
}

/// `codemode mcp --config CONFIG FLAGS…` over stdio: a client, its process id, and its log lines
/// (`codemode::config` at info).
async fn serve_config(
    config: &Path,
    flags: &[&str],
) -> (
    common::Client,
    nix::unistd::Pid,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    let command = tokio::process::Command::new(CODEMODE).configure(|command| {
        command
            .args(["mcp", "--config"])
            .arg(config)
            .args(flags)
            .env("CODEMODE_LOG", "codemode::config=info");
    });
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(transport.id().unwrap() as i32);
    let lines = stderr_lines(stderr.unwrap());
    let client = codemode_test_support::within("connect", ().serve(transport))
        .await
        .unwrap();
    (client, pid, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_configuration_while_a_cell_runs_and_a_bad_file_is_refused() {
    let folder = scratch("reload");
    let config = folder.join("mcp.json");
    let write = |names: &[&str]| demo_servers(&config, names);
    write(&["a"]);
    let (client, pid, mut lines) = serve_config(&config, &[]).await;
    let hangup = || nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();

    // A cell on server "a" runs across the reload.
    let running = common::text_of(
        &common::exec(
            &client,
            "// @exec: {\"yield_time_ms\": 100}\nawait tools.a__sleep({ms: 2000}); text(\"slept through\");",
        )
        .await
        .unwrap(),
    );
    let cell_id = common::running_cell_id(&running);

    write(&["a", "b"]);
    hangup();
    let reloaded = line_with(&mut lines, "reloaded").await;
    assert!(
        reloaded.contains("added=[\"b\"]") && reloaded.contains("kept=[\"a\"]"),
        "{reloaded}"
    );
    assert_eq!(
        common::last_line(
            &client,
            "text((await tools.b__add({a: 1, b: 2})).structuredContent.sum)"
        )
        .await,
        "3"
    );
    assert!(
        common::wait_on(&client, &cell_id)
            .await
            .contains("slept through")
    );

    // A file that does not parse is refused; the running configuration stays.
    std::fs::write(&config, "{\"mcpServers\": {not json").unwrap();
    hangup();
    let refused = line_with(&mut lines, "not reloaded").await;
    assert!(refused.contains("not valid JSON"), "{refused}");
    assert_eq!(
        common::last_line(
            &client,
            "text((await tools.b__add({a: 2, b: 2})).structuredContent.sum)"
        )
        .await,
        "4"
    );

    // A server removed leaves the cells' tools.
    write(&["b"]);
    hangup();
    let reloaded = line_with(&mut lines, "reloaded").await;
    assert!(reloaded.contains("removed=[\"a\"]"), "{reloaded}");
    assert_eq!(
        common::last_line(
            &client,
            "text(typeof tools.a__add + ' ' + typeof tools.b__add)"
        )
        .await,
        "undefined function"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_config_reloads_when_the_file_changes() {
    let folder = scratch("watch");
    let config = folder.join("mcp.json");
    demo_servers(&config, &["a"]);
    let (client, _, mut lines) = serve_config(&config, &["--watch-config"]).await;
    demo_servers(&config, &["a", "c"]);
    let reloaded = line_with(&mut lines, "reloaded").await;
    assert!(reloaded.contains("added=[\"c\"]"), "{reloaded}");
    assert_eq!(
        common::last_line(
            &client,
            "text((await tools.c__add({a: 3, b: 4})).structuredContent.sum)"
        )
        .await,
        "7"
    );
    client.cancel().await.unwrap();
}

#[test]
fn login_and_logout_name_what_they_cannot_do() {
    let folder = scratch("login");
    let config = folder.join("mcp.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"mcpServers": {{"local": {{"command": "{CODEMODE}", "args": ["demo-mcp-server"]}},
                                    "remote": {{"url": "https://example.invalid/mcp"}}}}}}"#
        ),
    )
    .unwrap();
    let state = folder.join("state");
    let codemode = |args: &[&str]| {
        Command::new(CODEMODE)
            .args(args)
            .arg("--config")
            .arg(&config)
            .env("XDG_STATE_HOME", &state)
            .output()
            .unwrap()
    };
    let stdio = codemode(&["login", "local"]);
    assert_eq!(stdio.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&stdio.stderr).contains("only remote servers log in"),
        "{stdio:?}"
    );
    let unknown = codemode(&["login", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("names no server \"nope\""),
        "{unknown:?}"
    );
    let logout = codemode(&["logout", "remote"]);
    assert_eq!(logout.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&logout.stderr).contains("there were no tokens"),
        "{logout:?}"
    );
}
