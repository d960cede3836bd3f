//! Where the workspace is, and the two things every task does with the shell: run a command,
//! copy a file, each failing with a message that names it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root folder.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
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
