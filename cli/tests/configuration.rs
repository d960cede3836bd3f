//! `--config` against the repository's own demo MCP server (over stdio and over streamable HTTP),
//! its errors and warnings, and what the binary needs of its environment, through the built binary.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use codemode_test_support::ListeningServer;
use serde_json::{Value, json};

mod common;

use common::{CODEMODE, codemode_with_input, output_texts as texts};

fn scratch(name: &str) -> PathBuf {
    codemode_test_support::scratch_folder(&format!("config-{name}"))
}

fn write_config(name: &str, servers: Value) -> PathBuf {
    let path = scratch(name).join("mcp.json");
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&json!({ "mcpServers": servers })).unwrap(),
    )
    .unwrap();
    path
}

/// `codemode run --json --no-demo-tools --config PATH -` with `source` on standard input.
fn run_with_config(config: &Path, source: &str) -> Output {
    let args: [&OsStr; 6] = [
        "run".as_ref(),
        "--json".as_ref(),
        "--no-demo-tools".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "-".as_ref(),
    ];
    codemode_with_input(args, source)
}

#[test]
fn a_stdio_server_from_the_config_is_callable_under_its_name() {
    let config = write_config(
        "stdio",
        json!({
            "demo": {"command": CODEMODE, "args": ["demo-mcp-server"], "env": {"UNUSED": "1"}},
            "off": {"command": "/nonexistent", "disabled": true}
        }),
    );
    let output = run_with_config(
        &config,
        r#"const sum = await tools.demo__add({a: 2, b: 3}); text(sum.structuredContent.sum);
           text(ALL_TOOLS.map((tool) => tool.name).filter((name) => !name.startsWith("demo__")).length);"#,
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(texts(&output), ["5", "0"]);
}

#[test]
fn an_http_server_from_the_config_is_callable_with_its_headers() {
    let mut command = Command::new(CODEMODE);
    command.args(["demo-mcp-server", "--http", "127.0.0.1:0"]);
    let server = ListeningServer::spawn(command);
    let config = write_config(
        "http",
        json!({"remote": {"type": "http", "url": server.url(), "headers": {"X-Test": "yes"}}}),
    );
    let output = run_with_config(
        &config,
        r#"text((await tools.remote__add({a: 1.5, b: 2})).structuredContent.sum);"#,
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(texts(&output), ["3.5"]);
}

#[test]
fn an_unknown_key_is_warned_about_naming_the_entry_and_the_key() {
    let config = write_config(
        "typo",
        json!({"demo": {"command": CODEMODE, "args": ["demo-mcp-server"], "argz": ["x"]}}),
    );
    let output = run_with_config(&config, "text(1)");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "warning: server \"demo\" in the MCP configuration has an unknown key \"argz\""
        ),
        "{stderr}"
    );
}

#[test]
fn a_malformed_config_or_an_entry_that_cannot_start_is_a_usage_error_naming_it() {
    let folder = scratch("malformed");
    let malformed = folder.join("broken.json");
    std::fs::write(&malformed, "{\"mcpServers\": {").unwrap();
    let output = run_with_config(&malformed, "text(1)");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken.json: not valid JSON"), "{stderr}");

    let unstartable = write_config("unstartable", json!({"nothing": {"args": ["x"]}}));
    let output = run_with_config(&unstartable, "text(1)");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("server \"nothing\" cannot be started: it has neither \"command\""),
        "{stderr}"
    );

    let missing = folder.join("missing.json");
    let output = run_with_config(&missing, "text(1)");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read the MCP configuration"));
}

#[test]
fn mcp_offers_no_demo_tools_unless_asked() {
    let description = |extra: &[&str]| {
        let output = Command::new(CODEMODE)
            .arg("mcp")
            .args(extra)
            .arg("--print-exec-description")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let plain = description(&[]);
    assert!(!plain.contains("echo("), "{plain}");
    assert!(!plain.contains("sleep("), "{plain}");
    let with_demo = description(&["--demo-tools"]);
    assert!(with_demo.contains("sleep(args: {"), "{with_demo}");
}

/// With an empty environment (no library path, no `CODEMODE_*` variable, a `HOME` without an
/// installed engine library), a debug `codemode` still runs V8 cells: it links no V8, and finds
/// the engine library `cargo xtask setup-v8` built in the repository.
#[test]
fn in_an_empty_environment_codemode_runs_v8_cells_on_the_engine_library_it_finds() {
    let home = scratch("home");
    let output = Command::new(CODEMODE)
        .args(["run", "--json", "--engine", "v8", "-"])
        .env_clear()
        .env("HOME", &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"text(`on ${typeof Float16Array}`)")?;
            child.wait_with_output()
        })
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(texts(&output), ["on function"], "{stderr}");
}

#[test]
fn a_stdio_server_gets_the_users_environment_its_stderr_is_logged_and_it_ends_cleanly() {
    let folder = scratch("environment");
    let dump = folder.join("environment");
    let exited = folder.join("exited");
    // A shell that records its environment, says something on standard error, runs the demo
    // server, and records how that ended, after a moment of tidying up: only a clean end
    // (standard input closed) writes 0, and only if codemode waits for it.
    let script = format!(
        "env > '{}'; echo 'hello from the downstream server' >&2; '{}' demo-mcp-server; status=$?; sleep 0.5; echo $status > '{}'",
        dump.display(),
        CODEMODE,
        exited.display()
    );
    let config = write_config(
        "environment",
        json!({"envcheck": {"command": "sh", "args": ["-c", script], "env": {"FROM_CONFIG": "yes"}}}),
    );
    let mut child = Command::new(CODEMODE)
        .args(["run", "--json", "--no-demo-tools", "--config"])
        .arg(&config)
        .arg("-")
        .env("USER_VARIABLE", "kept")
        .env("CODEMODE_LOG", "codemode::downstream=info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        b"text((await tools.envcheck__add({a: 1, b: 1})).structuredContent.sum)",
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(texts(&output), ["2"], "{output:?}");
    let environment = std::fs::read_to_string(&dump).unwrap();
    let variable = |name: &str| {
        environment
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .map(str::to_owned)
    };
    assert_eq!(variable("USER_VARIABLE").as_deref(), Some("kept"));
    assert_eq!(variable("FROM_CONFIG").as_deref(), Some("yes"));
    assert_eq!(
        variable("CODEMODE_ORIGINAL_LD_LIBRARY_PATH"),
        None,
        "{environment}"
    );
    assert_eq!(
        variable("LD_LIBRARY_PATH"),
        std::env::var("LD_LIBRARY_PATH")
            .ok()
            .filter(|path| !path.is_empty()),
        "the user's own library path, not the launcher's: {environment}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .lines()
            .any(|line| line.contains("envcheck")
                && line.contains("hello from the downstream server")),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&exited)
            .map(|status| status.trim().to_owned())
            .ok(),
        Some("0".to_owned()),
        "codemode did not let the server end on its own before it exited"
    );
}
