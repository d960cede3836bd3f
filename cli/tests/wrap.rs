//! `codemode wrap FILE` on copies of the files each client documents (Claude Code's
//! `.mcp.json`, Claude Desktop's config, Cursor's and VS Code's `mcp.json`, codex's
//! `config.toml`): the servers move into codemode's configuration as written, the file keeps one
//! codemode entry and everything else it had, the change is shown first, nothing is written
//! without `--yes` (no terminal here) or with `--dry-run`, `--undo` puts the file back byte for
//! byte, and a file it does not understand is left untouched with the reason. The agents
//! starting a wrapped file are in `agents.rs`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{CODEMODE, codemode_with_input};
use serde_json::{Value, json};

/// `codemode wrap ARGS…` with nothing on standard input: (status, stdout, stderr).
fn wrap(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["wrap"];
    all.extend_from_slice(args);
    let output = codemode_with_input(all, "");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `text` written at `folder/name` with mode 0600 (a file that holds secrets).
fn file(folder: &Path, name: &str, text: &str) -> PathBuf {
    let path = folder.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The entry that starts codemode on `config`.
fn codemode_entry(config: &Path) -> Value {
    json!({"command": std::fs::canonicalize(CODEMODE).unwrap().display().to_string(),
        "args": ["mcp", "--config", config.display().to_string()]})
}

/// Wraps `path` (a JSON file whose servers are under `key`) and checks what became of it:
/// `config` (codemode's) holds the servers as written, the file one codemode entry and the rest
/// of what it had; then `--undo` puts it back byte for byte.
fn wraps_json(path: &Path, key: &str, config_name: &str, extra_entry: Value) {
    let original = std::fs::read(path).unwrap();
    let before: Value = serde_json::from_slice(&original).unwrap();
    let (status, shown, errors) = wrap(&["--yes", path.to_str().unwrap()]);
    assert_eq!(status, 0, "{shown}{errors}");
    let config = path.with_file_name(config_name);
    // The change was shown: the servers leaving the file, and codemode's configuration.
    assert!(
        shown.contains(&format!("--- {} as it is", path.display())),
        "{shown}"
    );
    for name in before[key].as_object().unwrap().keys() {
        assert!(shown.contains(&format!("\"{name}\"")), "{name}: {shown}");
    }
    assert!(shown.contains(&config.display().to_string()), "{shown}");
    let after: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut entry = codemode_entry(&config);
    for (field, value) in extra_entry.as_object().unwrap() {
        entry[field] = value.clone();
    }
    assert_eq!(after[key], json!({ "codemode": entry }));
    // Everything else the file had stays.
    for (field, value) in before.as_object().unwrap() {
        if field != key {
            assert_eq!(&after[field], value, "{field}");
        }
    }
    // codemode's configuration: the servers exactly as written (variables unexpanded), and
    // codemode reads it.
    let own: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(own[key], before[key]);
    let check = codemode_with_input(["config", "check", config.to_str().unwrap()], "");
    let check = String::from_utf8_lossy(&check.stdout).into_owned();
    for name in before[key].as_object().unwrap().keys() {
        assert!(check.contains(name.as_str()), "{name}: {check}");
    }
    // Secrets stay as private as they were.
    let backup = PathBuf::from(format!("{}.codemode-backup", path.display()));
    assert_eq!(std::fs::read(&backup).unwrap(), original);
    for written in [path, &config, &backup] {
        assert_eq!(mode(written), 0o600, "{}", written.display());
    }
    // A second wrap is refused: the backup of the first is there.
    let wrapped = std::fs::read(path).unwrap();
    let (status, _, errors) = wrap(&["--yes", path.to_str().unwrap()]);
    assert_eq!(status, 2, "{errors}");
    assert!(errors.contains("--undo"), "{errors}");
    assert_eq!(std::fs::read(path).unwrap(), wrapped);
    // And undone: the file as it was, byte for byte.
    let (status, shown, errors) = wrap(&["--undo", path.to_str().unwrap()]);
    assert_eq!(status, 0, "{shown}{errors}");
    assert_eq!(std::fs::read(path).unwrap(), original);
    assert!(!backup.exists());
}

#[test]
fn claude_codes_mcp_json_is_wrapped_and_undone() {
    let folder = codemode_test_support::scratch_folder("wrap-claude-code");
    let path = file(
        &folder,
        ".mcp.json",
        r#"{
  "mcpServers": {
    "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
               "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME:-/tmp}/projects"],
           "env": {"DEBUG": "${DEBUG:-0}"}}
  }
}
"#,
    );
    wraps_json(&path, "mcpServers", ".mcp.codemode.json", json!({}));
}

#[test]
fn claude_desktops_config_keeps_its_other_settings() {
    let folder = codemode_test_support::scratch_folder("wrap-claude-desktop");
    let path = file(
        &folder,
        "claude_desktop_config.json",
        r#"{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
    "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=Europe/Oslo"]}
  }
}
"#,
    );
    wraps_json(
        &path,
        "mcpServers",
        "claude_desktop_config.codemode.json",
        json!({}),
    );
}

#[test]
fn cursors_mcp_json_is_wrapped() {
    let folder = codemode_test_support::scratch_folder("wrap-cursor");
    let path = file(
        &folder,
        ".cursor/mcp.json",
        r#"{"mcpServers": {"linear": {"url": "https://mcp.linear.app/mcp"},
 "db": {"command": "npx", "args": ["-y", "mcp-postgres"], "env": {"DATABASE_URL": "${env:DATABASE_URL}"}}}}"#,
    );
    wraps_json(&path, "mcpServers", "mcp.codemode.json", json!({}));
}

#[test]
fn vs_codes_mcp_json_keeps_its_inputs_beside_the_servers() {
    let folder = codemode_test_support::scratch_folder("wrap-vscode");
    let path = file(
        &folder,
        ".vscode/mcp.json",
        r#"{
  "inputs": [{"type": "promptString", "id": "github-token", "description": "GitHub token", "password": true}],
  "servers": {
    "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
               "headers": {"Authorization": "Bearer ${input:github-token}"}},
    "fetch": {"type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"]}
  }
}
"#,
    );
    let before: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let config = path.with_file_name("mcp.codemode.json");
    // The inputs go with the servers that name them (codemode reads them from CODEMODE_INPUT_*).
    let (status, shown, errors) = wrap(&["--dry-run", path.to_str().unwrap()]);
    assert_eq!(status, 0, "{shown}{errors}");
    assert!(shown.contains("\"inputs\""), "{shown}");
    wraps_json(
        &path,
        "servers",
        "mcp.codemode.json",
        json!({"type": "stdio"}),
    );
    // wraps_json undid it; wrap again to read codemode's configuration.
    std::fs::remove_file(&config).unwrap();
    assert_eq!(wrap(&["--yes", path.to_str().unwrap()]).0, 0);
    let own: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(own["inputs"], before["inputs"]);
}

#[test]
fn codexs_config_toml_keeps_its_comments_and_settings_and_gets_what_codex_needs() {
    let folder = codemode_test_support::scratch_folder("wrap-codex");
    let original = r#"# My codex settings.
model = "gpt-5"

[mcp_servers.docs]
# The docs server, with its token from the environment.
command = "uvx"
args = ["docs-mcp"]
env_vars = ["DOCS_TOKEN"]

[mcp_servers.remote]
url = "https://mcp.example.com/mcp"
bearer_token_env_var = "REMOTE_TOKEN"

[profiles.fast]
model = "gpt-5-mini"
"#;
    let path = file(&folder, "config.toml", original);
    let (status, shown, errors) = wrap(&["--yes", path.to_str().unwrap()]);
    assert_eq!(status, 0, "{shown}{errors}");
    let wrapped = std::fs::read_to_string(&path).unwrap();
    let config = folder.join("config.codemode.toml");
    let document: toml::Table = toml::from_str(&wrapped).unwrap();
    let servers = document["mcp_servers"].as_table().unwrap();
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["codemode"]);
    let entry = &servers["codemode"];
    assert_eq!(
        entry["command"].as_str(),
        Some(
            std::fs::canonicalize(CODEMODE)
                .unwrap()
                .display()
                .to_string()
                .as_str()
        )
    );
    assert_eq!(
        entry["args"].as_array().unwrap()[2].as_str(),
        Some(config.display().to_string().as_str())
    );
    // What codex needs to offer exec on its first turn, and to let codemode's gate ask.
    assert_eq!(entry["required"].as_bool(), Some(true));
    assert_eq!(
        entry["default_tools_approval_mode"].as_str(),
        Some("approve")
    );
    // The rest of the file, comments included, stays.
    assert!(
        wrapped.starts_with("# My codex settings.\nmodel = \"gpt-5\"\n"),
        "{wrapped}"
    );
    assert!(
        wrapped.contains("[profiles.fast]\nmodel = \"gpt-5-mini\""),
        "{wrapped}"
    );
    // codemode's configuration holds the servers as written, their comments too.
    let own = std::fs::read_to_string(&config).unwrap();
    assert!(
        own.contains("# The docs server, with its token from the environment."),
        "{own}"
    );
    let own_table: toml::Table = toml::from_str(&own).unwrap();
    let before: toml::Table = toml::from_str(original).unwrap();
    assert_eq!(own_table["mcp_servers"], before["mcp_servers"]);
    let check = codemode_with_input(["config", "check", config.to_str().unwrap()], "");
    let check = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(
        check.contains("docs") && check.contains("remote"),
        "{check}"
    );
    assert_eq!(mode(&config), 0o600);
    // Undone, byte for byte.
    assert_eq!(wrap(&["--undo", path.to_str().unwrap()]).0, 0);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
}

#[test]
fn a_dry_run_and_a_run_without_yes_or_a_terminal_write_nothing() {
    let folder = codemode_test_support::scratch_folder("wrap-nothing-written");
    let original = r#"{"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}}"#;
    let path = file(&folder, "mcp.json", original);
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let (status, shown, errors) = wrap(&["--dry-run", path.to_str().unwrap()]);
    assert_eq!(status, 0, "{errors}");
    assert!(shown.contains("--dry-run: nothing was written."), "{shown}");
    assert!(shown.contains("+    \"codemode\": {"), "{shown}");
    assert_eq!(listing(), ["mcp.json"]);
    // Standard input is no terminal: it cannot ask, so it writes nothing, and says what to do.
    let (status, _, errors) = wrap(&[path.to_str().unwrap()]);
    assert_eq!(status, 2, "{errors}");
    assert!(errors.contains("pass --yes"), "{errors}");
    assert_eq!(listing(), ["mcp.json"]);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
}

#[test]
fn a_file_it_does_not_understand_is_left_untouched_with_the_reason() {
    let folder = codemode_test_support::scratch_folder("wrap-not-understood");
    let cases = [
        (
            "settings.json",
            r#"{"mcp": {"servers": {}}, "editor.fontSize": 14}"#,
            "no \"mcpServers\" or \"servers\" object",
        ),
        ("broken.json", "{\"mcpServers\": ", "not valid JSON"),
        ("empty.json", r#"{"mcpServers": {}}"#, "no servers"),
        (
            "already.json",
            r#"{"mcpServers": {"codemode": {"command": "codemode", "args": ["mcp"]}}}"#,
            "already starts codemode",
        ),
        (
            "nothing.toml",
            "model = \"gpt-5\"\n",
            "no [mcp_servers.NAME] tables",
        ),
        ("broken.toml", "[mcp_servers.x\n", "not valid TOML"),
    ];
    for (name, text, why) in cases {
        let path = file(&folder, name, text);
        let (status, shown, errors) = wrap(&["--yes", path.to_str().unwrap()]);
        assert_eq!(status, 2, "{name}: {shown}{errors}");
        assert!(errors.contains("is left as it is"), "{name}: {errors}");
        assert!(errors.contains(why), "{name}: {errors}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{name}");
    }
    // Nothing but the files themselves.
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), cases.len());
    // --undo of a file never wrapped says so.
    let (status, _, errors) = wrap(&["--undo", folder.join("empty.json").to_str().unwrap()]);
    assert_eq!(status, 2);
    assert!(errors.contains("has no backup"), "{errors}");
}
