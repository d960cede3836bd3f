//! Where the workspace and the per-user files are, and the two things every task does with the
//! shell: run a command, copy a file, each failing with a message that names it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root folder.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// The per-user folder of codemode's run-time files, `${XDG_DATA_HOME:-$HOME/.local/share}/codemode`,
/// where the binaries look for V8 and for the engine library on Node's V8.
pub(crate) fn user_data_folder() -> Result<PathBuf, String> {
    let data_home = match (std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME")) {
        (Some(data_home), _) if Path::new(&data_home).is_absolute() => PathBuf::from(data_home),
        (_, Some(home)) => PathBuf::from(home).join(".local/share"),
        _ => return Err("neither XDG_DATA_HOME nor HOME is set: no per-user location".to_owned()),
    };
    Ok(data_home.join("codemode"))
}

/// Copies the file `from` (following links) to `to`.
pub(crate) fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map(|_| ()).map_err(|error| {
        format!(
            "cannot copy {} to {}: {error}",
            from.display(),
            to.display()
        )
    })
}

/// Runs `command`, failing unless it succeeds.
pub(crate) fn run(command: &mut Command) -> Result<(), String> {
    let description = format!("{command:?}");
    let status = command
        .status()
        .map_err(|error| format!("cannot run {description}: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{description} failed with {status}"))
    }
}

/// Puts the folder `staging` in place of `destination`, removing the older one first.
pub(crate) fn replace_folder(staging: &Path, destination: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(destination);
    std::fs::rename(staging, destination).map_err(|error| {
        format!(
            "cannot move {} to {}: {error}",
            staging.display(),
            destination.display()
        )
    })
}
