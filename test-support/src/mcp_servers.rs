//! The real third-party MCP servers the end-to-end tests drive, installed from their registries
//! at pinned versions into `target/mcp-servers/` (npm packages under `npm/`, Python packages in a
//! virtual environment `python/`), touching nothing system-wide: by the test that needs them, or
//! ahead of it by `cargo xtask setup-mcp-servers`. A `ready` file records the versions: a second
//! run with the same pins does nothing, a run with other pins installs again. Installs are
//! serialised by a lock file, so test processes running at once install once.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The npm packages, pinned.
pub const NPM_PACKAGES: [&str; 3] = [
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/server-memory@2026.8.31",
];

/// The PyPI packages, pinned.
pub const PYTHON_PACKAGES: [&str; 2] =
    ["mcp-server-git==2026.10.19", "mcp-server-time==2026.10.19"];

/// Where they go.
pub fn folder(root: &Path) -> PathBuf {
    root.join("target/mcp-servers")
}

/// What the `ready` file holds for these pins.
fn pins() -> String {
    let mut pins: Vec<&str> = NPM_PACKAGES.to_vec();
    pins.extend(PYTHON_PACKAGES);
    pins.join("\n") + "\n"
}

/// Where the installed servers' programs are.
#[derive(Debug, Clone)]
pub struct McpServers {
    folder: PathBuf,
}

impl McpServers {
    /// The program of an npm package's server, by its `bin` name (`mcp-server-everything`).
    pub fn npm_program(&self, name: &str) -> PathBuf {
        self.folder.join("npm/node_modules/.bin").join(name)
    }

    /// The program of a Python package's server (`mcp-server-git`).
    pub fn python_program(&self, name: &str) -> PathBuf {
        self.folder.join("python/bin").join(name)
    }
}

/// Installs the servers under `root` (the workspace) unless the same pins are already there.
/// An error says which registry could not be reached.
pub fn install(root: &Path) -> Result<McpServers, String> {
    let folder = folder(root);
    let servers = McpServers {
        folder: folder.clone(),
    };
    let ready = folder.join("ready");
    let installed = || std::fs::read_to_string(&ready).ok().as_deref() == Some(pins().as_str());
    if installed() {
        return Ok(servers);
    }
    std::fs::create_dir_all(root.join("target"))
        .map_err(|error| format!("cannot create {}/target: {error}", root.display()))?;
    let lock_path = root.join("target/mcp-servers.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|error| format!("cannot open {}: {error}", lock_path.display()))?;
    lock.lock()
        .map_err(|error| format!("cannot lock {}: {error}", lock_path.display()))?;
    // Another process may have installed them while this one waited.
    if installed() {
        return Ok(servers);
    }
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder)
        .map_err(|error| format!("cannot create {}: {error}", folder.display()))?;
    let npm = folder.join("npm");
    run(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&npm)
            .args(NPM_PACKAGES),
        "the npm registry",
    )?;
    let python = folder.join("python");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&python),
        "Python's venv module",
    )?;
    run(
        Command::new(python.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(PYTHON_PACKAGES),
        "PyPI",
    )?;
    std::fs::write(&ready, pins())
        .map_err(|error| format!("cannot write {}: {error}", ready.display()))?;
    Ok(servers)
}

/// The workspace this crate is part of.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support lives one folder below the workspace root")
        .to_path_buf()
}

fn run(command: &mut Command, needs: &str) -> Result<(), String> {
    let description = format!("{command:?}");
    // Their output goes to standard error, out of the way of a test's or a task's own.
    let status = command
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|error| format!("cannot run {description}: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{description} failed ({status}); it needs {needs} to be reachable"
        ))
    }
}
