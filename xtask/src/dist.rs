//! `cargo xtask dist` and `cargo xtask dist-check`: the release tarball, and the proof that it
//! runs where it is unpacked.
//!
//! The tarball holds `bin/codemode` (which links no V8 and needs only the C and C++ runtimes of
//! the system), `lib/node-engine/` with the pinned official `node` and the engine library it loads
//! (V8 engine processes run on its V8 13.6), `licenses/node.LICENSE`, and a README.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::node::{LibraryBuild, build_engine_library, node_package, stage_node_engine};
use crate::shell::{copy, run, workspace_root};

const TARGET: &str = "x86_64-linux-gnu";

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn package_name() -> String {
    format!("codemode-{}-{TARGET}", version())
}

/// Builds the tarball and returns its path.
pub fn dist() -> Result<PathBuf, String> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run(Command::new(&cargo)
        .args(["build", "--release", "-p", "codemode-cli"])
        .current_dir(&root))?;
    let release = root.join("target/release");
    let dist = root.join("target/dist");
    let staging = dist.join(package_name());
    let _ = std::fs::remove_dir_all(&staging);
    for folder in ["bin", "lib", "licenses"] {
        std::fs::create_dir_all(staging.join(folder))
            .map_err(|error| format!("cannot create {}: {error}", staging.display()))?;
    }
    let shipped = staging.join("bin/codemode");
    copy(&release.join("codemode"), &shipped)?;
    // Symbols are for debugging a build, not for running it; keep going without `strip`.
    let _ = Command::new("strip").arg(&shipped).status();
    // V8 engine processes: the pinned Node and the engine library on its V8.
    let library = build_engine_library(LibraryBuild::Release)?;
    stage_node_engine(
        &library,
        &staging.join("lib/node-engine"),
        &staging.join("licenses/node.LICENSE"),
    )?;
    let _ = Command::new("strip")
        .arg(staging.join("lib/node-engine/libcodemode_v8_engine.so"))
        .status();
    std::fs::write(
        staging.join("README.md"),
        readme(&crate::node::pinned_version()?),
    )
    .map_err(|error| format!("cannot write the README: {error}"))?;
    let tarball = dist.join(format!("{}.tar.gz", package_name()));
    let partial = tarball.with_extension("partial");
    run(Command::new("tar")
        .arg("-czf")
        .arg(&partial)
        .arg("-C")
        .arg(&dist)
        .arg(package_name()))?;
    std::fs::rename(&partial, &tarball)
        .map_err(|error| format!("cannot move {} into place: {error}", partial.display()))?;
    Ok(tarball)
}

fn readme(node_version: &str) -> String {
    format!(
        "# codemode {version} ({TARGET})\n\n\
         Run model-written JavaScript that orchestrates tools, in V8 cells.\n\n\
         - `bin/codemode run script.js`: run a cell from the shell.\n\
         - `bin/codemode mcp --config ~/.config/mcp.json`: serve `exec` and `wait` to any MCP client, with \
         the tools of the servers in an `mcpServers` file.\n\n\
         Unpack anywhere. Nothing else is needed on a Debian 12 or Ubuntu 22.04+ system (x86-64).\n\n\
         V8 cells run in engine processes on the V8 13.6 of the official Node.js {node} binary in \
         `lib/node-engine/`, with the engine library it loads; `bin/codemode` finds them there. \
         Node's licence is in `licenses/`. This copy of Node gets no security updates from your \
         system: unpack a newer release to update it.\n",
        version = version(),
        node = node_version,
    )
}

/// Builds the tarball, unpacks it into a fresh folder and, from another working directory, with
/// the repository's Node renamed out of sight and an empty environment, runs a cell and an MCP
/// `initialize` + `tools/list` + `exec` round trip with it.
pub fn check() -> Result<(), String> {
    let tarball = dist()?;
    let scratch = std::env::temp_dir().join(format!("codemode-dist-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let unpacked = scratch.join("unpacked");
    let elsewhere = scratch.join("elsewhere");
    for folder in [&unpacked, &elsewhere] {
        std::fs::create_dir_all(folder)
            .map_err(|error| format!("cannot create {}: {error}", folder.display()))?;
    }
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&unpacked))?;
    let bin = unpacked.join(package_name()).join("bin");
    check_no_absolute_run_path(&bin.join("codemode"))?;
    let _hidden = HiddenFolder::hide(&node_package())?;
    let codemode = bin.join("codemode");
    let clean = |command: &mut Command| {
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &elsewhere)
            .current_dir(&elsewhere);
    };
    // A cell.
    let mut cell = Command::new(&codemode);
    cell.args(["run", "--json", "-"]);
    clean(&mut cell);
    let output = run_with_input(&mut cell, "text(`relocated ${1 + 1}`)")?;
    if !output.contains("relocated 2") {
        return Err(format!("the unpacked codemode ran no cell: {output}"));
    }
    // On the V8 13.6 of the tarball's Node, which runs `using` declarations and has
    // `Float16Array` (QuickJS, the other engine, has no `Float16Array`).
    let mut modern = Command::new(&codemode);
    modern.args(["run", "--json", "-"]);
    clean(&mut modern);
    let output = run_with_input(
        &mut modern,
        "{ using held = { [Symbol.dispose]() { text(`disposed on ${typeof Float16Array}`); } }; }",
    )?;
    if !output.contains("disposed on function") {
        return Err(format!(
            "the unpacked codemode did not run its cell on the V8 13.6 of lib/node-engine: {output}"
        ));
    }
    // An MCP round trip over stdio.
    let mut server = Command::new(&codemode);
    server.args(["mcp", "--demo-tools"]);
    clean(&mut server);
    mcp_round_trip(&mut server)?;
    let _ = std::fs::remove_dir_all(&scratch);
    println!(
        "dist-check: {} runs cells (on V8 13.6) and serves MCP from {}",
        tarball.display(),
        bin.display()
    );
    Ok(())
}

/// Builds `codemode` without V8 (`--no-default-features`, release) and, with the repository's Node
/// renamed out of sight and an empty environment, checks that it runs a cell on QuickJS and that
/// asked for V8 it says how to get a build with it. Run it last: it leaves
/// `target/release/codemode` built without V8.
pub fn no_v8_check() -> Result<(), String> {
    let root = workspace_root();
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&root)
            .args([
                "build",
                "--release",
                "-p",
                "codemode-cli",
                "--no-default-features",
            ]),
    )?;
    let bin = root.join("target/release");
    let scratch = std::env::temp_dir().join(format!("codemode-no-v8-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .map_err(|error| format!("cannot create {}: {error}", scratch.display()))?;
    let _hidden = HiddenFolder::hide(&node_package())?;
    let clean = |command: &mut Command| {
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &scratch)
            .current_dir(&scratch);
    };
    let mut cell = Command::new(bin.join("codemode"));
    cell.args(["run", "--json", "-"]);
    clean(&mut cell);
    // QuickJS has no Intl: the cell says which engine ran it.
    let output = run_with_input(
        &mut cell,
        "text(`without V8 ${1 + 1}, Intl ${typeof Intl}`)",
    );
    let mut asked_for_v8 = Command::new(bin.join("codemode"));
    asked_for_v8.args(["run", "--engine", "v8", "-"]);
    clean(&mut asked_for_v8);
    // Refused: the error (a failed exit) carries what it said.
    let refusal = run_with_input(&mut asked_for_v8, "text(1)");
    let _ = std::fs::remove_dir_all(&scratch);
    let output = output?;
    if !output.contains("without V8 2, Intl undefined") {
        return Err(format!(
            "the build without V8 ran no QuickJS cell: {output}"
        ));
    }
    match refusal {
        Err(said) if said.contains("built without V8") => {}
        other => {
            return Err(format!(
                "the build without V8, asked for V8, did not say it was built without it: {other:?}"
            ));
        }
    }
    println!(
        "no-v8-check: a codemode built without V8 runs QuickJS cells and says so when asked for V8"
    );
    Ok(())
}

fn check_no_absolute_run_path(program: &Path) -> Result<(), String> {
    let output = Command::new("readelf")
        .arg("-d")
        .arg(program)
        .output()
        .map_err(|error| format!("cannot run readelf: {error}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    for line in text
        .lines()
        .filter(|line| line.contains("RPATH") || line.contains("RUNPATH"))
    {
        let paths = line
            .rsplit('[')
            .next()
            .unwrap_or_default()
            .trim_end_matches(']');
        if paths.split(':').any(|path| !path.starts_with("$ORIGIN")) {
            return Err(format!(
                "{} has an absolute run path: {line}",
                program.display()
            ));
        }
    }
    Ok(())
}

/// Renames a folder out of sight for as long as it lives.
struct HiddenFolder {
    original: PathBuf,
    hidden: PathBuf,
}

impl HiddenFolder {
    fn hide(folder: &Path) -> Result<Option<Self>, String> {
        if !folder.exists() {
            return Ok(None);
        }
        let hidden = folder.with_extension(format!("hidden-{}", std::process::id()));
        std::fs::rename(folder, &hidden)
            .map_err(|error| format!("cannot hide {}: {error}", folder.display()))?;
        Ok(Some(HiddenFolder {
            original: folder.to_path_buf(),
            hidden,
        }))
    }
}

impl Drop for HiddenFolder {
    fn drop(&mut self) {
        if let Err(error) = std::fs::rename(&self.hidden, &self.original) {
            eprintln!(
                "error: cannot move {} back to {}: {error}",
                self.hidden.display(),
                self.original.display()
            );
        }
    }
}

/// How long the unpacked program may take to answer anything.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

fn run_with_input(command: &mut Command, input: &str) -> Result<String, String> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot start {command:?}: {error}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(input.as_bytes())
        .map_err(|error| format!("cannot write to {command:?}: {error}"))?;
    let output = child
        .wait_with_output()
        .map_err(|error| format!("{command:?} failed: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{command:?} exited with {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `initialize`, `notifications/initialized`, `tools/list` and a `tools/call` of `exec`, as
/// newline-delimited JSON-RPC over the server's stdin and stdout.
fn mcp_round_trip(command: &mut Command) -> Result<(), String> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|error| format!("cannot start {command:?}: {error}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let (lines, answers) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut exchange = |request: serde_json::Value| -> Result<serde_json::Value, String> {
        writeln!(stdin, "{request}")
            .map_err(|error| format!("cannot write to the server: {error}"))?;
        let Some(id) = request.get("id") else {
            return Ok(serde_json::Value::Null);
        };
        loop {
            let line = answers
                .recv_timeout(ANSWER_TIMEOUT)
                .map_err(|_| format!("no answer to {request}"))?;
            let message: serde_json::Value = serde_json::from_str(&line).map_err(|error| {
                format!("the server wrote a line that is not JSON ({error}): {line}")
            })?;
            if message.get("id") == Some(id) {
                return match message.get("error") {
                    Some(error) => Err(format!("{request} failed: {error}")),
                    None => Ok(message["result"].clone()),
                };
            }
        }
    };
    let outcome = (|| {
        let initialized = exchange(serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "dist-check", "version": "1"}}
        }))?;
        if initialized["serverInfo"].is_null() {
            return Err(format!(
                "initialize answered without serverInfo: {initialized}"
            ));
        }
        exchange(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        let listed =
            exchange(serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))?;
        let names: Vec<&str> = listed["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|tool| tool["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        if names != ["exec", "wait"] {
            return Err(format!("tools/list gave {names:?}, not exec and wait"));
        }
        let called = exchange(serde_json::json!({
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "exec", "arguments": {"code": "text(await tools.echo(\"over mcp\"))"}}
        }))?;
        if !called.to_string().contains("over mcp") {
            return Err(format!("exec did not run the cell: {called}"));
        }
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    outcome
}
