//! The real third-party MCP servers the end-to-end tests drive, and the MCP ecosystem's own tools
//! the conformance tests run (the official conformance suite, the MCP Inspector, the TypeScript
//! SDK, and the Node.js 22 they need) and the agents the agent tests drive (Claude Code, Codex
//! CLI), installed from their registries at pinned versions into
//! `target/mcp-servers/` (npm servers under `npm/`, Python packages in a virtual environment
//! `python/`, each ecosystem tool in a folder of its own under `tools/`), touching nothing
//! system-wide: by the test that needs them, or
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

/// The PyPI packages, pinned: two servers, and the official Python SDK, whose client the
/// ecosystem tests drive (the servers depend on it too).
pub const PYTHON_PACKAGES: [&str; 3] = [
    "mcp-server-git==2026.10.19",
    "mcp-server-time==2026.10.19",
    "mcp==2.3.0",
];

/// The MCP ecosystem's tools, pinned, each with the folder under `tools/` it goes to: two
/// releases of one package cannot share one `node_modules`. Node.js 22 comes from the npm
/// registry's `node` package, as the conformance suite needs 22 or later.
pub const ECOSYSTEM_TOOLS: [(&str, &str); 9] = [
    ("node22", "node@22.23.3"),
    (
        "conformance-0.1",
        "@modelcontextprotocol/conformance@0.1.16",
    ),
    (
        "conformance-0.2",
        "@modelcontextprotocol/conformance@0.2.0-alpha.12",
    ),
    ("inspector-1", "@modelcontextprotocol/inspector@1.0.3"),
    ("inspector-2", "@modelcontextprotocol/inspector@2.12.0"),
    ("sdk", "@modelcontextprotocol/sdk@1.32.2"),
    // The TypeScript compiler, which checks a tool's declaration against the values it resolves
    // with.
    ("typescript", "typescript@5.9.3"),
    // The agents people put codemode in front of, driven offline by a scripted model endpoint
    // (`cli/tests/agents.rs`): each a native program inside its npm package.
    ("claude-code", "@anthropic-ai/claude-code@2.1.337"),
    ("codex", "@openai/codex@0.171.0"),
];

/// Where they go.
pub fn folder(root: &Path) -> PathBuf {
    root.join("target/mcp-servers")
}

/// What the `ready` file holds for these pins.
fn pins() -> String {
    let mut pins: Vec<&str> = NPM_PACKAGES.to_vec();
    pins.extend(PYTHON_PACKAGES);
    pins.extend(ECOSYSTEM_TOOLS.iter().map(|(_, package)| *package));
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

    /// The folder of Node.js 22's `node` program (to put first on `PATH`).
    pub fn node22_bin(&self) -> PathBuf {
        self.folder.join("tools/node22/node_modules/.bin")
    }

    /// Node.js 22's `node` program.
    pub fn node22(&self) -> PathBuf {
        self.node22_bin().join("node")
    }

    /// Type-checks `values` against `declarations` (TypeScript source that declares `tools`, as
    /// a cell's tools are declared to the model): each `(tool, value)` must be assignable to
    /// what `tools.<tool>` resolves with (`value` as JSON text). `Err` holds the compiler's
    /// complaints and the source it checked.
    pub fn typecheck(&self, declarations: &str, values: &[(String, String)]) -> Result<(), String> {
        let mut source = declarations.to_owned();
        source.push_str("\n\n");
        for (index, (tool, value)) in values.iter().enumerate() {
            source.push_str(&format!(
                "const value{index}: Awaited<ReturnType<typeof tools.{tool}>> = {value};\n"
            ));
        }
        let folder = std::env::temp_dir().join(format!(
            "codemode-typecheck-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::create_dir_all(&folder).map_err(|error| error.to_string())?;
        let file = folder.join("values.ts");
        std::fs::write(&file, &source).map_err(|error| error.to_string())?;
        let output = Command::new(self.node22())
            .arg(
                self.ecosystem_package("typescript", "typescript")
                    .join("bin/tsc"),
            )
            .args([
                "--noEmit", "--strict", "--target", "es2022", "--lib", "es2022",
            ])
            .arg(&file)
            .output()
            .map_err(|error| format!("cannot run tsc: {error}"))?;
        let _ = std::fs::remove_dir_all(&folder);
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}\n--- checked source ---\n{source}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// The program `name` (`claude`, `codex`) of the ecosystem tool in `tool` (a folder of
    /// [`ECOSYSTEM_TOOLS`]).
    pub fn ecosystem_program(&self, tool: &str, name: &str) -> PathBuf {
        self.folder
            .join("tools")
            .join(tool)
            .join("node_modules/.bin")
            .join(name)
    }

    /// The installed package `package` (such as `@modelcontextprotocol/conformance`) of the
    /// ecosystem tool in `tool` (a folder of [`ECOSYSTEM_TOOLS`]).
    pub fn ecosystem_package(&self, tool: &str, package: &str) -> PathBuf {
        self.folder
            .join("tools")
            .join(tool)
            .join("node_modules")
            .join(package)
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
    for (tool, package) in ECOSYSTEM_TOOLS {
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(folder.join("tools").join(tool))
                .arg(package),
            "the npm registry",
        )?;
    }
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
