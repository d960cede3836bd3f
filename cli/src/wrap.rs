//! `codemode wrap FILE`: puts codemode in front of the servers an agent's MCP configuration
//! already has, in one command. The file's servers move, as written (secrets still as
//! variables), into codemode's own configuration beside it (`NAME.codemode.EXT`), and the file
//! keeps one entry that starts `codemode mcp --config` on it; everything else in the file stays.
//!
//! Understood: `mcpServers` JSON (Claude Code's `.mcp.json`, Claude Desktop, Cursor), VS Code's
//! `servers` (`.vscode/mcp.json`, its `inputs` kept beside them), and codex's `config.toml`
//! (edited in place, its comments and other settings kept; the entry gets the two settings codex
//! needs, `required` and `default_tools_approval_mode`). The change is shown before anything is
//! written (`--dry-run` stops there) and asked for unless `--yes`; the file is kept as
//! `FILE.codemode-backup`, byte for byte, and `--undo` puts it back. Every file is written whole
//! to a temporary file and renamed into place: never half written. A file it does not
//! understand, or one already wrapped, is left untouched, and the error says why.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Map, Value, json};

use crate::exit;

/// `codemode wrap`.
#[derive(Debug, clap::Args)]
pub struct WrapArgs {
    /// The agent's MCP configuration: `.mcp.json`, `claude_desktop_config.json`, Cursor's or VS
    /// Code's `mcp.json`, or codex's `config.toml`.
    pub file: PathBuf,
    /// Show the change and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write without asking.
    #[arg(long)]
    pub yes: bool,
    /// Put the file back as it was before `wrap`, from its backup.
    #[arg(long, conflicts_with_all = ["dry_run"])]
    pub undo: bool,
    /// Where codemode's own configuration goes (default: beside the file, `NAME.codemode.EXT`).
    #[arg(long, value_name = "PATH")]
    pub codemode_config: Option<PathBuf>,
}

/// What wrapping a file writes.
struct Wrapping {
    /// What kind of file it is, as the user knows it.
    kind: &'static str,
    /// The servers that move behind codemode.
    servers: Vec<String>,
    /// The file's new text.
    file: String,
    /// Codemode's configuration: its path and text.
    config: (PathBuf, String),
}

/// Runs `codemode wrap`.
pub fn wrap(args: WrapArgs) -> ExitCode {
    let outcome = if args.undo {
        undo(&args.file)
    } else {
        wrap_file(&args)
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err((status, message)) => {
            eprintln!("error: {message}");
            ExitCode::from(status)
        }
    }
}

/// A failure: the exit status, and what to tell the user.
type Failure = (u8, String);

/// Where the file is kept as it was.
fn backup_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".codemode-backup");
    PathBuf::from(name)
}

fn wrap_file(args: &WrapArgs) -> Result<(), Failure> {
    let file = &args.file;
    let text = std::fs::read_to_string(file).map_err(|error| {
        (
            exit::USAGE,
            format!("cannot read {}: {error}", file.display()),
        )
    })?;
    let backup = backup_of(file);
    if backup.exists() {
        return Err((
            exit::USAGE,
            format!(
                "{} is left as it is: a backup of an earlier wrap is there ({}); run `codemode \
                 wrap --undo {}` first",
                file.display(),
                backup.display(),
                file.display()
            ),
        ));
    }
    let codemode = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|error| {
            (
                exit::FAILED,
                format!("cannot tell where this codemode program is: {error}"),
            )
        })?;
    let wrapping =
        plan(file, &text, &codemode, args.codemode_config.as_deref()).map_err(|why| {
            (
                exit::USAGE,
                format!("{} is left as it is: {why}", file.display()),
            )
        })?;
    let (config_path, config_text) = &wrapping.config;
    if config_path.exists() {
        return Err((
            exit::USAGE,
            format!(
                "{} is left as it is: {} already exists; name another place with \
                 --codemode-config PATH",
                file.display(),
                config_path.display()
            ),
        ));
    }
    println!(
        "{} ({}): {} behind codemode.\n",
        file.display(),
        wrapping.kind,
        wrapping.servers.join(", ")
    );
    println!(
        "--- {} as it is\n+++ {} wrapped",
        file.display(),
        file.display()
    );
    print!(
        "{}",
        similar::TextDiff::from_lines(&text, &wrapping.file)
            .unified_diff()
            .context_radius(3)
    );
    println!(
        "\n+++ {} (new: codemode's configuration, the servers as they were written)\n{config_text}",
        config_path.display()
    );
    println!(
        "The file is kept as {}; `codemode wrap --undo {}` puts it back.",
        backup.display(),
        file.display()
    );
    if args.dry_run {
        println!("--dry-run: nothing was written.");
        return Ok(());
    }
    if !args.yes && !confirmed()? {
        println!("Nothing was written.");
        return Ok(());
    }
    let failed = |what: &Path, error: std::io::Error| {
        (
            exit::FAILED,
            format!("cannot write {}: {error}", what.display()),
        )
    };
    // The backup first, byte for byte: whatever fails after, the user's file is kept. Both new
    // files get the file's permissions: they hold what it held, secrets included.
    let permissions = std::fs::metadata(file)
        .map_err(|error| failed(file, error))?
        .permissions();
    write_new(&backup, text.as_bytes(), &permissions).map_err(|error| failed(&backup, error))?;
    write_new(config_path, config_text.as_bytes(), &permissions)
        .map_err(|error| failed(config_path, error))?;
    replace(file, wrapping.file.as_bytes()).map_err(|error| failed(file, error))?;
    println!("Wrapped {}.", file.display());
    Ok(())
}

/// Asks on the terminal whether to write; an error when there is none to ask on.
fn confirmed() -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err((
            exit::USAGE,
            "nothing was written: there is no terminal to ask on; pass --yes to write without \
             asking, or --dry-run to only see the change"
                .to_owned(),
        ));
    }
    print!("Write these changes? [y/N] ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|error| (exit::FAILED, format!("cannot read the answer: {error}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

fn undo(file: &Path) -> Result<(), Failure> {
    let backup = backup_of(file);
    if !backup.exists() {
        return Err((
            exit::USAGE,
            format!(
                "{} has no backup ({} is not there): it was not wrapped, or was put back already",
                file.display(),
                backup.display()
            ),
        ));
    }
    std::fs::rename(&backup, file).map_err(|error| {
        (
            exit::FAILED,
            format!(
                "cannot put {} back over {}: {error}",
                backup.display(),
                file.display()
            ),
        )
    })?;
    println!(
        "Put {} back as it was before codemode wrap (codemode's configuration beside it stays; \
         delete it if you no longer need it).",
        file.display()
    );
    Ok(())
}

/// What wrapping `file` (its `text`) writes; the error says why it is not understood.
fn plan(
    file: &Path,
    text: &str,
    codemode: &Path,
    config: Option<&Path>,
) -> Result<Wrapping, String> {
    let toml = file
        .extension()
        .is_some_and(|extension| extension == "toml");
    let config = config.map_or_else(|| codemode_config_beside(file), Path::to_path_buf);
    let mut wrapping = if toml {
        plan_codex(text, codemode, &config)?
    } else {
        plan_json(text, codemode, &config)?
    };
    wrapping.config.0 = config;
    Ok(wrapping)
}

/// `NAME.codemode.EXT` beside `file`.
fn codemode_config_beside(file: &Path) -> PathBuf {
    let stem = file
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extension = file
        .extension()
        .map(|extension| extension.to_string_lossy().into_owned())
        .unwrap_or_else(|| "json".to_owned());
    file.with_file_name(format!("{stem}.codemode.{extension}"))
}

/// The arguments of the entry that starts codemode on `config`.
fn codemode_args(config: &Path) -> Vec<String> {
    vec![
        "mcp".to_owned(),
        "--config".to_owned(),
        std::path::absolute(config)
            .unwrap_or_else(|_| config.to_path_buf())
            .display()
            .to_string(),
    ]
}

/// Whether an entry already starts codemode's MCP server.
fn is_codemode(name: &str, command: Option<&str>, first_arg: Option<&str>) -> bool {
    name == "codemode"
        || (command.is_some_and(|command| command.ends_with("codemode"))
            && first_arg == Some("mcp"))
}

/// A JSON file: `mcpServers` (Claude Code, Claude Desktop, Cursor) or VS Code's `servers`.
fn plan_json(text: &str, codemode: &Path, config: &Path) -> Result<Wrapping, String> {
    let document: Value =
        serde_json::from_str(text).map_err(|error| format!("it is not valid JSON ({error})"))?;
    let Value::Object(mut document) = document else {
        return Err("it is not a JSON object".to_owned());
    };
    let (key, kind) = match (document.get("mcpServers"), document.get("servers")) {
        (Some(Value::Object(_)), _) => ("mcpServers", "mcpServers JSON"),
        (None, Some(Value::Object(_))) => ("servers", "VS Code's servers"),
        _ => {
            return Err(
                "it has no \"mcpServers\" or \"servers\" object (VS Code's settings.json keeps \
                 its servers under \"mcp\"; wrap its .vscode/mcp.json instead)"
                    .to_owned(),
            );
        }
    };
    let Some(Value::Object(servers)) = document.remove(key) else {
        unreachable!("checked above")
    };
    let names = checked_names(servers.iter().map(|(name, entry)| {
        (
            name.as_str(),
            entry["command"].as_str(),
            entry["args"][0].as_str(),
        )
    }))?;
    let mut own = Map::new();
    own.insert(key.to_owned(), Value::Object(servers));
    if key == "servers"
        && let Some(inputs) = document.get("inputs")
    {
        own.insert("inputs".to_owned(), inputs.clone());
    }
    let mut entry = Map::new();
    if key == "servers" {
        entry.insert("type".to_owned(), json!("stdio"));
    }
    entry.insert("command".to_owned(), json!(codemode.display().to_string()));
    entry.insert("args".to_owned(), json!(codemode_args(config)));
    document.insert(key.to_owned(), json!({ "codemode": Value::Object(entry) }));
    Ok(Wrapping {
        kind,
        servers: names,
        file: pretty(&Value::Object(document)),
        config: (PathBuf::new(), pretty(&Value::Object(own))),
    })
}

/// codex's `config.toml`, edited in place.
fn plan_codex(text: &str, codemode: &Path, config: &Path) -> Result<Wrapping, String> {
    let mut document: toml_edit::DocumentMut = text
        .parse()
        .map_err(|error| format!("it is not valid TOML ({error})"))?;
    let servers = match document.remove("mcp_servers") {
        Some(toml_edit::Item::Table(servers)) => servers,
        Some(_) => return Err("its mcp_servers is not a table".to_owned()),
        None => return Err("it has no [mcp_servers.NAME] tables".to_owned()),
    };
    let names = checked_names(servers.iter().map(|(name, entry)| {
        (
            name,
            entry.get("command").and_then(|command| command.as_str()),
            entry
                .get("args")
                .and_then(|args| args.as_array())
                .and_then(|args| args.get(0))
                .and_then(|arg| arg.as_str()),
        )
    }))?;
    let mut own = toml_edit::DocumentMut::new();
    own.insert("mcp_servers", toml_edit::Item::Table(servers));
    let mut entry = toml_edit::Table::new();
    entry.insert("command", toml_edit::value(codemode.display().to_string()));
    let mut args = toml_edit::Array::new();
    for arg in codemode_args(config) {
        args.push(arg);
    }
    entry.insert("args", toml_edit::value(args));
    // codex waits for codemode before the first turn, and lets codemode's gate ask.
    entry.insert("required", toml_edit::value(true));
    entry.insert("default_tools_approval_mode", toml_edit::value("approve"));
    let mut wrapped = toml_edit::Table::new();
    wrapped.set_implicit(true);
    wrapped.insert("codemode", toml_edit::Item::Table(entry));
    document.insert("mcp_servers", toml_edit::Item::Table(wrapped));
    Ok(Wrapping {
        kind: "codex's config.toml",
        servers: names,
        file: document.to_string(),
        config: (PathBuf::new(), own.to_string().trim_start().to_owned()),
    })
}

/// The names of `servers` (name, command, first argument); an error when there are none, or
/// one already starts codemode.
fn checked_names<'a>(
    servers: impl Iterator<Item = (&'a str, Option<&'a str>, Option<&'a str>)>,
) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for (name, command, first_arg) in servers {
        if is_codemode(name, command, first_arg) {
            return Err(format!(
                "its server \"{name}\" already starts codemode (run `codemode wrap --undo` to put \
                 back a file codemode wrapped)"
            ));
        }
        names.push(name.to_owned());
    }
    if names.is_empty() {
        return Err("it has no servers to put behind codemode".to_owned());
    }
    Ok(names)
}

/// JSON as people write it: two spaces, a final newline.
fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("a JSON value serialises");
    text.push('\n');
    text
}

/// A temporary file beside `path` with `permissions`, written whole and synced. Created with
/// no access for others first, so that nothing it holds is readable before its permissions are
/// set.
fn written_beside(
    path: &Path,
    bytes: &[u8],
    permissions: &std::fs::Permissions,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".codemode-{}.tmp", std::process::id()));
    let temporary = PathBuf::from(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.set_permissions(permissions.clone()))
        .and_then(|()| file.sync_all());
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    Ok(temporary)
}

/// Writes `path`, which must not exist, whole.
fn write_new(path: &Path, bytes: &[u8], permissions: &std::fs::Permissions) -> std::io::Result<()> {
    let temporary = written_beside(path, bytes, permissions)?;
    // A hard link fails if `path` appeared meanwhile: nothing is overwritten.
    let linked = std::fs::hard_link(&temporary, path);
    let _ = std::fs::remove_file(&temporary);
    linked
}

/// Replaces `path` whole, keeping its permissions.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let permissions = std::fs::metadata(path)?.permissions();
    let temporary = written_beside(path, bytes, &permissions)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}
