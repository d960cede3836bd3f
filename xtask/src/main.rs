//! `cargo xtask <task>`: project chores that need more than a cargo command.
//!
//! - `setup-v8`: install the pinned official Node 24 (V8 13.6; `engine-library/node/`, from the
//!   npm registry) into the git-ignored `engine-library/node/node_modules/`, whose headers the
//!   `runtime-v8` build compiles against, and build the engine library on its V8 twice (`node`):
//!   with test hooks, for the tests, and for release, which it installs with `node` in the
//!   per-user `${XDG_DATA_HOME:-$HOME/.local/share}/codemode/node-engine/`, where the binaries
//!   find it and run V8 cells on it (so an installed binary keeps working once the checkout is
//!   gone). It touches nothing system-wide.
//! - `build-engine-library [--release]`: that library alone; `--release` builds the one without
//!   test hooks, which `--v8-library` is for.
//! - `dist`: a release tarball, `target/dist/codemode-<version>-x86_64-linux-gnu.tar.gz`, with
//!   the pinned `node`, the engine library, and Node's licence.
//! - `bench`: the benchmark suite (`cli/examples/bench.rs`) on a release build: one table of
//!   figures beside yardsticks measured in the same run, also written to `target/bench/bench.json`.
//! - `dist-check`: unpacks that tarball elsewhere and runs a cell and an MCP round trip with it,
//!   with the repository's Node out of sight.
//! - `no-v8-check`: builds `codemode` without V8 (`--no-default-features`) and, with Node out of
//!   sight, checks that it runs a QuickJS cell and refuses V8 saying why.
//! - `setup-mcp-servers`: the real third-party MCP servers the end-to-end tests drive (npm and
//!   PyPI, pinned) into `target/mcp-servers/`.
//! - `ci`: what `.ci/run` runs: setup-v8, `cargo fmt --check`, clippy with warnings denied,
//!   `cargo doc` with warnings denied, tests.

#![forbid(unsafe_code)]

mod bench;
mod dist;
mod node;
mod shell;

use std::process::{Command, ExitCode};

use bench::bench;
use shell::{run, workspace_root};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup-v8") => node::setup(),
        Some("build-engine-library") => {
            let build = if args.iter().any(|arg| arg == "--release") {
                node::LibraryBuild::Release
            } else {
                node::LibraryBuild::TestHooks
            };
            node::build_engine_library(build).map(|_| ())
        }
        Some("ci") => ci(),
        Some("dist") => dist::dist().map(|tarball| println!("{}", tarball.display())),
        Some("dist-check") => dist::check(),
        Some("no-v8-check") => dist::no_v8_check(),
        Some("bench") => bench(),
        Some("setup-mcp-servers") => codemode_test_support::mcp_servers::install(&workspace_root())
            .map(|_| {
                println!(
                    "MCP servers installed in {}",
                    codemode_test_support::mcp_servers::folder(&workspace_root()).display()
                )
            }),
        _ => {
            eprintln!(
                "usage: cargo xtask <task>\n\n\
                 tasks:\n  setup-v8   install the pinned Node 24 (needed before building), build the engine\n             \
                 library on its V8 and install it for this user\n  \
                 build-engine-library [--release]  the engine library on Node 24's V8 (release: \
                 no test hooks)\n  \
                 ci         setup-v8, fmt --check, clippy -D warnings, docs, tests, dist-check\n  \
                 dist       build the release tarball in target/dist/\n  \
                 dist-check build it, unpack it elsewhere, run a cell and an MCP round trip\n  \
                 no-v8-check  build codemode without V8 and run a QuickJS cell with V8 out of sight\n  \
                 bench      the benchmark suite, release build: a table, and target/bench/bench.json\n  \
                 setup-mcp-servers  install the real MCP servers the tests drive into target/mcp-servers/"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn ci() -> Result<(), String> {
    node::setup()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = workspace_root();
    run(Command::new(&cargo)
        .args(["fmt", "--all", "--", "--check"])
        .current_dir(&root))?;
    run(Command::new(&cargo)
        .args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .current_dir(&root))?;
    run(Command::new(&cargo)
        .args(["doc", "--no-deps", "--workspace"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(&root))?;
    codemode_test_support::mcp_servers::install(&root)?;
    run(Command::new(&cargo)
        .args(["test", "--workspace"])
        .current_dir(&root))?;
    dist::check()
}
