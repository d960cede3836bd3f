//! codemode inside the agents people use: Claude Code and Codex CLI (pinned, from npm, installed
//! with the ecosystem tools), each starting `codemode mcp` from the settings the README gives
//! (extracted from README.md here, so the README cannot drift), driven offline by a scripted
//! model endpoint on loopback ([`model`]) that speaks each one's streaming API. One headless run
//! per client plays a whole exchange: the tools offered (names, and `exec`'s descriptions as
//! codemode serves them, whole), a round trip, a running cell and `wait`, a nested write asked of
//! a client with nobody to answer (refused, saying so, and naming the rule), a thrown error and
//! the next `exec`; Claude Code passing the approval to its host (stream-json control requests)
//! and codemode following both answers; and each agent starting codemode from a file
//! `codemode wrap` wrote; and every JSON block of the README's quick start (Claude Code's
//! `.mcp.json`, Claude Desktop and Cursor, VS Code) starting codemode as written. Each client's
//! non-essential traffic is off; nothing needs the internet.

mod common;

#[path = "agents/model.rs"]
mod model;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codemode_test_support::mcp_servers::{self, McpServers};
use common::{CODEMODE, RawClient};
use model::{ScriptedModel, Step};
use serde_json::{Value, json};

/// An agent's run that takes longer than this has hung.
const HANG_GUARD: Duration = Duration::from_secs(180);

fn tools() -> McpServers {
    mcp_servers::install(&mcp_servers::workspace_root())
        .unwrap_or_else(|error| panic!("cannot install the agents: {error}"))
}

/// The README, as a newcomer reads it.
fn readme() -> String {
    std::fs::read_to_string(mcp_servers::workspace_root().join("README.md")).unwrap()
}

/// The README's text from the line that starts with `heading` on.
fn section<'a>(readme: &'a str, heading: &str) -> &'a str {
    let at = readme
        .find(heading)
        .unwrap_or_else(|| panic!("the README has no {heading:?}"));
    &readme[at..]
}

/// The first fenced block of `language` in `text`.
fn block(text: &str, language: &str) -> String {
    let fence = format!("```{language}\n");
    let start = text
        .find(&fence)
        .unwrap_or_else(|| panic!("no ```{language} block in {text}"))
        + fence.len();
    let end = start + text[start..].find("```").unwrap();
    text[start..end].to_owned()
}

/// The README's placeholders made real: `codemode` is the binary under test, and the user's
/// configuration is `config`.
fn made_real(text: &str, config: &Path) -> String {
    text.replace(
        "/home/you/.config/codemode/mcp.json",
        &config.display().to_string(),
    )
    .replace("~/.config/codemode/mcp.json", &config.display().to_string())
    .replace(
        "\"command\": \"codemode\"",
        &format!("\"command\": \"{CODEMODE}\""),
    )
    .replace(
        "command = \"codemode\"",
        &format!("command = \"{CODEMODE}\""),
    )
    .replace("-- codemode mcp", &format!("-- {CODEMODE} mcp"))
}

/// A configuration for codemode with the demo server (its notes in `folder/notes`), whose `note`
/// (unannotated) asks the user.
fn codemode_config(folder: &Path) -> PathBuf {
    let config = folder.join("codemode.json");
    let document = json!({"mcpServers": {"demo": {"command": CODEMODE, "args": ["demo-mcp-server"],
        "env": {"CODEMODE_DEMO_NOTES": folder.join("notes")}}}});
    std::fs::write(&config, document.to_string()).unwrap();
    config
}

/// `exec` as codemode serves it for `config` to the client named `client`: its description and
/// its `code` argument's.
async fn served_exec(config: &Path, client: &str) -> (String, String) {
    let config = config.display().to_string();
    let mut client = RawClient::start_as(&["--config", &config], json!({}), client).await;
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let listed = client.response(1).await;
    let exec = &listed["result"]["tools"][0];
    (
        exec["description"].as_str().unwrap().to_owned(),
        exec["inputSchema"]["properties"]["code"]["description"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

/// Fails unless the agent passed `sent` to its model as `served`: the first difference, shown.
fn assert_passed_whole(sent: &Value, served: &str) {
    let sent = sent.as_str().unwrap_or_default();
    if sent == served {
        return;
    }
    let at = sent
        .char_indices()
        .zip(served.chars())
        .find(|((_, a), b)| a != b)
        .map_or(sent.len().min(served.len()), |((at, _), _)| at);
    let from = at.saturating_sub(200);
    panic!(
        "the model got another text ({} characters, {} served); from character {from}:\n--- sent ---\n{}\n--- served ---\n{}",
        sent.chars().count(),
        served.chars().count(),
        sent.get(from..)
            .unwrap_or_default()
            .chars()
            .take(600)
            .collect::<String>(),
        served
            .get(from..)
            .unwrap_or_default()
            .chars()
            .take(600)
            .collect::<String>(),
    );
}

/// Runs `command` to its end within the hang guard; its output, whatever its status.
fn run(mut command: Command) -> String {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let description = format!("{command:?}");
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {description}: {error}"));
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("hung: {description}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The tool named `name` among those a model request (or a namespace of tools) offers.
fn offered(offering: &Value, name: &str) -> Value {
    offering["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|tool| tool["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is not offered: {offering}"))
}

/// Claude Code from `tools`, in `folder`, with a home of its own there, on `model`, its
/// non-essential traffic off.
fn claude(tools: &McpServers, model: &ScriptedModel, folder: &Path) -> Command {
    let home = folder.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut command = Command::new(tools.ecosystem_program("claude-code", "claude"));
    command
        .current_dir(folder)
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-scripted")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1");
    command
}

/// The settings that make `model` codex's model provider, to go first in its `config.toml`.
fn codex_provider(model: &ScriptedModel) -> String {
    format!(
        "model = \"scripted\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\n\
         name = \"scripted\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
         env_key = \"CODEMODE_TEST_MODEL_KEY\"\n\n",
        model.url
    )
}

/// `codex exec` from `tools` with its settings in `codex_home`, in `folder`.
fn codex_exec(tools: &McpServers, codex_home: &Path, folder: &Path) -> Command {
    let mut command = Command::new(tools.ecosystem_program("codex", "codex"));
    command
        .args(["exec", "--skip-git-repo-check", "Use codemode."])
        .current_dir(folder)
        .env("CODEX_HOME", codex_home)
        .env("CODEMODE_TEST_MODEL_KEY", "scripted");
    command
}

/// The exchange each agent plays, one step per model turn.
fn exchange() -> Vec<Step> {
    vec![
        Step::exec("text('hello ' + (1 + 2))"),
        Step::exec(
            "// @exec: {\"yield_time_ms\": 100}\nawait new Promise((r) => setTimeout(r, 1500)); text('late');",
        ),
        Step::wait_on_the_running_cell(),
        Step::exec(
            "try { await tools.demo__note({text: 'from the agent'}); text('noted'); } \
             catch (e) { text('refused: ' + e.message); }",
        ),
        Step::exec("throw new Error('boom')"),
        Step::exec("text('after the error')"),
    ]
}

/// What the agent sent back for the exchange: every step answered as it should be, and the
/// nested write refused as a question `how` ("dismissed", "declined") that no one may have seen.
fn check_the_exchange(
    model: &ScriptedModel,
    folder: &Path,
    config: &Path,
    how: &str,
    output: &str,
) {
    let results = model.results();
    assert_eq!(
        results.len(),
        model.steps(),
        "the agent stopped early: {results:#?}\n{output}"
    );
    assert!(
        results[0].contains("Script completed") && results[0].contains("hello 3"),
        "{results:#?}"
    );
    assert!(
        results[1].contains("Script running with cell ID "),
        "{results:#?}"
    );
    assert!(
        results[2].contains("Script completed") && results[2].contains("late"),
        "{results:#?}"
    );
    for expected in [
        "refused: tools.demo__note was not run".to_owned(),
        format!("the question was {how} by the MCP client"),
        "no one may have seen it".to_owned(),
        format!(
            "add \"demo__note\" to \"permissions\": {{\"allow\": [...]}} in {}",
            config.display()
        ),
    ] {
        assert!(results[3].contains(&expected), "{expected}\n{results:#?}");
    }
    assert!(
        results[4].contains("Script failed") && results[4].contains("boom"),
        "{results:#?}"
    );
    assert!(
        results[5].contains("Script completed") && results[5].contains("after the error"),
        "{results:#?}"
    );
    // Nothing reached the downstream server's write.
    assert!(!folder.join("notes").exists(), "a refused note was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_codemode_from_the_readmes_settings() {
    let tools = tools();
    let folder = codemode_test_support::scratch_folder("agents-claude");
    let config = codemode_config(&folder);
    let project = folder.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let readme = readme();
    let claude_section = section(&readme, "**Claude Code**");
    let model = ScriptedModel::start(exchange()).await;
    let agent = |args: &[String]| {
        let mut command = claude(&tools, &model, &project);
        command.args(args);
        command
    };
    // `claude mcp add ...` as the README writes it.
    let add = made_real(block(claude_section, "sh").trim(), &config);
    let add = shlex::split(&add).expect("a command line");
    assert_eq!(add[0], "claude", "{add:?}");
    let added = run(agent(&add[1..]));
    assert!(added.to_lowercase().contains("codemode"), "{added}");
    // The README's headless line, as written, with `--output-format json` added.
    let headless = block(
        &claude_section[claude_section.find("Headless").unwrap()..],
        "sh",
    );
    let mut headless = shlex::split(headless.trim()).expect("a command line");
    assert_eq!(headless[..2], ["claude", "-p"], "{headless:?}");
    assert!(
        headless.iter().any(|arg| arg == "--allowedTools"),
        "{headless:?}"
    );
    headless.extend(["--output-format".to_owned(), "json".to_owned()]);
    let output = run(agent(&headless[1..]));
    // The first request offers exec and wait, and exec as codemode serves it, whole.
    let requests = model.requests();
    let first = requests
        .first()
        .unwrap_or_else(|| panic!("no model request: {output}"));
    let exec = offered(first, "mcp__codemode__exec");
    offered(first, "mcp__codemode__wait");
    let (description, code) = served_exec(&config, "claude-code").await;
    assert_passed_whole(&exec["description"], &description);
    assert_passed_whole(
        &exec["input_schema"]["properties"]["code"]["description"],
        &code,
    );
    assert!(code.contains("demo__note("), "{code}");
    check_the_exchange(&model, &folder, &config, "dismissed", &output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_codemode_from_the_readmes_settings() {
    let tools = tools();
    let folder = codemode_test_support::scratch_folder("agents-codex");
    let config = codemode_config(&folder);
    let codex_home = folder.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let readme = readme();
    let model = ScriptedModel::start(exchange()).await;
    // The scripted model as codex's provider, then the README's entry as written.
    let entry = made_real(&block(section(&readme, "**Codex CLI**"), "toml"), &config);
    let settings = format!("{}{entry}", codex_provider(&model));
    std::fs::write(codex_home.join("config.toml"), settings).unwrap();
    let command = codex_exec(&tools, &codex_home, &folder);
    let output = run(command);
    let requests = model.requests();
    let first = requests
        .first()
        .unwrap_or_else(|| panic!("no model request: {output}"));
    // Codex offers a server's tools in a namespace of its own.
    let namespace = offered(first, "mcp__codemode");
    let exec = offered(&namespace, "exec");
    offered(&namespace, "wait");
    // Codex passes the whole description, declarations included.
    let (description, _) = served_exec(&config, "codex-mcp-client").await;
    assert!(description.contains("demo__note("), "{description}");
    assert_passed_whole(&exec["description"], &description);
    check_the_exchange(&model, &folder, &config, "declined", &output);
}

/// `codemode wrap --yes FILE`: it must succeed.
fn wrapped(file: &Path) {
    let output = Command::new(CODEMODE)
        .args(["wrap", "--yes"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One step: a read-only call of the demo server's `add` through codemode.
fn a_sum() -> Vec<Step> {
    vec![Step::exec(
        "const r = await tools.demo__add({a: 2, b: 3}); text('sum ' + r.structuredContent.sum);",
    )]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_agents_start_codemode_from_a_file_codemode_wrap_wrote() {
    let tools = tools();
    let folder = codemode_test_support::scratch_folder("agents-wrapped");
    let demo = json!({"command": CODEMODE, "args": ["demo-mcp-server"]});
    // Claude Code: a project's .mcp.json with the demo server, wrapped.
    let project = folder.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mcp_json = project.join(".mcp.json");
    std::fs::write(&mcp_json, json!({"mcpServers": {"demo": demo}}).to_string()).unwrap();
    wrapped(&mcp_json);
    let model = ScriptedModel::start(a_sum()).await;
    let mut claude = claude(&tools, &model, &project);
    claude
        .args(["-p", "Use codemode.", "--mcp-config"])
        .arg(&mcp_json)
        .args(["--allowedTools", "mcp__codemode__exec,mcp__codemode__wait"]);
    let output = run(claude);
    let results = model.results();
    assert!(
        results
            .first()
            .is_some_and(|result| result.contains("sum 5")),
        "{results:#?}\n{output}"
    );
    // Codex: a config.toml with its model settings and the demo server, wrapped.
    let codex_home = folder.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let model = ScriptedModel::start(a_sum()).await;
    let config_toml = codex_home.join("config.toml");
    std::fs::write(
        &config_toml,
        format!(
            "{}[mcp_servers.demo]\ncommand = \"{CODEMODE}\"\nargs = [\"demo-mcp-server\"]\n",
            codex_provider(&model)
        ),
    )
    .unwrap();
    wrapped(&config_toml);
    let codex = codex_exec(&tools, &codex_home, &folder);
    let output = run(codex);
    let results = model.results();
    assert!(
        results
            .first()
            .is_some_and(|result| result.contains("sum 5")),
        "{results:#?}\n{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_passes_the_approval_to_its_host_and_codemode_follows_both_answers() {
    let tools = tools();
    let folder = codemode_test_support::scratch_folder("agents-claude-asked");
    let config = codemode_config(&folder);
    let attempt = |text: &str| {
        Step::exec(&format!(
            "try {{ await tools.demo__note({{text: '{text}'}}); text('noted {text}'); }} \
             catch (e) {{ text('refused: ' + e.message); }}"
        ))
    };
    let model = ScriptedModel::start(vec![attempt("yes"), attempt("no")]).await;
    let servers = folder.join("servers.json");
    std::fs::write(
        &servers,
        json!({"mcpServers": {"codemode": {"command": CODEMODE,
            "args": ["mcp", "--config", config.display().to_string()]}}})
        .to_string(),
    )
    .unwrap();
    // Claude Code driven as its SDK drives it: stream-json both ways, the host answering the
    // control requests; an elicitation carries codemode's approval form.
    let mut child = claude(&tools, &model, &folder)
        .args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--strict-mcp-config",
            "--mcp-config",
        ])
        .arg(&servers)
        .args(["--allowedTools", "mcp__codemode__exec,mcp__codemode__wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let host = std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let send = |stdin: &mut std::process::ChildStdin, message: Value| {
            writeln!(stdin, "{message}").unwrap();
            stdin.flush().unwrap();
        };
        send(
            &mut stdin,
            json!({"type": "user", "message": {"role": "user", "content": "Use codemode."}}),
        );
        let mut asked = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(message) = serde_json::from_str::<Value>(&line.unwrap()) else {
                continue;
            };
            match message["type"].as_str() {
                Some("control_request") if message["request"]["subtype"] == "elicitation" => {
                    let question = message["request"]["message"].as_str().unwrap().to_owned();
                    let decision = if question.contains("\"yes\"") {
                        "allow_once"
                    } else {
                        "deny"
                    };
                    asked.push(question);
                    send(
                        &mut stdin,
                        json!({"type": "control_response", "response": {"subtype": "success",
                            "request_id": message["request_id"],
                            "response": {"action": "accept", "content": {"decision": decision}}}}),
                    );
                }
                Some("result") => break,
                _ => {}
            }
        }
        drop(stdin);
        asked
    });
    let started = Instant::now();
    while !host.is_finished() {
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("hung: Claude Code in stream-json");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = host.join().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(asked.len(), 2, "{asked:#?}");
    assert!(asked[0].contains("demo__note"), "{asked:#?}");
    let results = model.results();
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(results[0].contains("noted yes"), "{results:#?}");
    assert!(
        results[1].contains("refused: tools.demo__note was denied by the user, who chose \"Deny\""),
        "{results:#?}"
    );
    // The allowed call reached the server; the denied one did not.
    assert_eq!(
        std::fs::read_to_string(folder.join("notes"))
            .unwrap()
            .trim(),
        "yes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_block_of_the_readmes_quick_start_starts_codemode() {
    let folder = codemode_test_support::scratch_folder("agents-readme-blocks");
    let config = codemode_config(&folder);
    let readme = readme();
    let start = readme.find("Then add codemode to your agent").unwrap();
    let end = readme.find("## What the model sees").unwrap();
    let mut quick_start = &readme[start..end];
    let mut clients = Vec::new();
    while let Some(at) = quick_start.find("```json\n") {
        let text = block(&quick_start[at..], "json");
        quick_start = &quick_start[at + "```json\n".len() + text.len()..];
        let document: Value = serde_json::from_str(&made_real(&text, &config))
            .unwrap_or_else(|error| panic!("not JSON ({error}): {text}"));
        let entry = document["mcpServers"]
            .get("codemode")
            .or_else(|| document["servers"].get("codemode"))
            .unwrap_or_else(|| panic!("no codemode entry: {text}"))
            .clone();
        assert_eq!(entry["command"], CODEMODE, "{text}");
        let args: Vec<String> = entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(args[0], "mcp", "{text}");
        // The entry as a client starts it: codemode's tools, with the configured servers'.
        let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
        let mut client = RawClient::start_with(&args, json!({})).await;
        client
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await;
        let listed = client.response(1).await;
        assert!(
            listed["result"]["tools"][0]["description"]
                .as_str()
                .is_some_and(|description| description.contains("demo__note(")),
            "{listed}"
        );
        clients.push(text);
    }
    // Claude Code's .mcp.json, Claude Desktop and Cursor, VS Code.
    assert_eq!(clients.len(), 3, "{clients:#?}");
}
