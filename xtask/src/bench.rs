//! `bench`: the benchmark suite on a release build, beside pydantic-monty installed from PyPI,
//! with engine processes on the pinned Node 24's V8 13.6 (the release engine library) too.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::node::LibraryBuild;
use crate::shell::{run, workspace_root};

pub(crate) fn bench() -> Result<(), String> {
    crate::node::setup()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = workspace_root();
    run(Command::new(&cargo)
        .args(["build", "--release", "-p", "codemode-cli"])
        .current_dir(&root))?;
    let json = root.join("target/bench/bench.json");
    let codemode = root.join("target/release/codemode");
    let mut bench = Command::new(&cargo);
    bench
        .args([
            "run",
            "--release",
            "-q",
            "-p",
            "codemode-cli",
            "--example",
            "bench",
            "--",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--codemode")
        .arg(&codemode)
        .current_dir(&root);
    if let Some(python) = install_monty(&root) {
        bench.arg("--monty-python").arg(python);
    }
    // V8 engine processes on the release engine library (setup built it).
    bench
        .arg("--v8-library")
        .arg(LibraryBuild::Release.library());
    run(&mut bench)
}

/// The pydantic-monty release the bench measures beside (its yardstick): pinned, so that a
/// comparison over time compares codemode, not Monty.
const MONTY_VERSION: &str = "1.4.0";

/// The OpenTelemetry API installed beside Monty. Monty imports `opentelemetry` twice at each
/// external function call; without the package each import fails, walking every finder of
/// `sys.path`, and the yardstick measured that (370 µs a call instead of 60 µs).
const OPENTELEMETRY_API_VERSION: &str = "1.45.3";

/// Installs pydantic-monty [`MONTY_VERSION`] (and the OpenTelemetry API it looks for,
/// [`OPENTELEMETRY_API_VERSION`]) from PyPI into its own virtual environment under
/// `target/bench/monty`, once; the environment's Python, or `None` (saying why) when Python or
/// PyPI is out of reach, and the bench leaves its table out.
fn install_monty(root: &Path) -> Option<PathBuf> {
    let venv = root.join("target/bench/monty");
    let python = venv.join("bin/python");
    let installed = venv.join(format!(
        "installed-{MONTY_VERSION}-opentelemetry-api-{OPENTELEMETRY_API_VERSION}"
    ));
    if installed.exists() {
        return Some(python);
    }
    let mut make_venv = Command::new("python3");
    make_venv.args(["-m", "venv", "--clear"]).arg(&venv);
    let mut install = Command::new(&python);
    install.args(["-m", "pip", "install", "--quiet"]);
    install.arg(format!("pydantic-monty=={MONTY_VERSION}"));
    install.arg(format!("opentelemetry-api=={OPENTELEMETRY_API_VERSION}"));
    for mut step in [make_venv, install] {
        if let Err(error) = run(&mut step) {
            eprintln!("the bench goes on without pydantic-monty: {error}");
            return None;
        }
    }
    let _ = std::fs::write(&installed, "");
    Some(python)
}
