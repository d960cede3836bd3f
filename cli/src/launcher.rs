//! `codemode`, the launcher: finds V8 (Debian's `libnode.so.108`) and runs the real program,
//! `codemode-v8`, which sits beside it and links V8.
//!
//! The launcher links nothing but the C library, so it always starts, and a missing V8 is a
//! message that says where it looked and how to fix it, never a loader error. It looks, in order:
//!
//! 1. next to itself: `$ORIGIN/../lib`, then `$ORIGIN/lib` (an unpacked release tarball);
//! 2. `$CODEMODE_V8_PREFIX` (a folder where `libnode108` is unpacked, or a plain `lib` folder);
//! 3. the per-user location that `cargo xtask setup-v8` fills:
//!    `${XDG_DATA_HOME:-$HOME/.local/share}/codemode/v8/lib`;
//! 4. the system's library path (`LD_LIBRARY_PATH`, then the usual library folders).
//!
//! A folder found in steps 1-3 is put in front of `LD_LIBRARY_PATH` for `codemode-v8`; the
//! original value travels in `CODEMODE_ORIGINAL_LD_LIBRARY_PATH`, so that the processes
//! `codemode-v8` starts (downstream MCP servers) see the environment the user gave.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The library every lookup is for.
const LIBNODE: &str = "libnode.so.108";

/// The real program, beside the launcher.
const PROGRAM: &str = "codemode-v8";

/// Where the launcher puts the user's own `LD_LIBRARY_PATH` (unset: empty) for `codemode-v8`.
const ORIGINAL_LIBRARY_PATH: &str = "CODEMODE_ORIGINAL_LD_LIBRARY_PATH";

/// Library folders of a Debian or Ubuntu system, after `LD_LIBRARY_PATH`.
const SYSTEM_FOLDERS: [&str; 5] = [
    "/usr/local/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib",
    "/lib",
];

/// What the lookup needs from the environment, so that it can be tested.
#[derive(Debug, Default)]
struct Environment {
    /// The folder the launcher is in.
    origin: Option<PathBuf>,
    v8_prefix: Option<PathBuf>,
    xdg_data_home: Option<PathBuf>,
    home: Option<PathBuf>,
    library_path: Option<OsString>,
}

/// Where V8 was found.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// In a folder the loader does not search by itself: add it to the library path.
    Folder(PathBuf),
    /// On the system's library path already.
    System,
}

/// The folders looked at, in order, each with whether the loader already searches it.
fn candidates(environment: &Environment) -> Vec<(PathBuf, bool)> {
    let mut folders = Vec::new();
    if let Some(origin) = &environment.origin {
        folders.push((origin.join("../lib"), false));
        folders.push((origin.join("lib"), false));
    }
    if let Some(prefix) = &environment.v8_prefix {
        folders.push((prefix.join("usr/lib/x86_64-linux-gnu"), false));
        folders.push((prefix.join("lib"), false));
        folders.push((prefix.clone(), false));
    }
    if let Some(user) = user_folder(environment) {
        folders.push((user, false));
    }
    if let Some(library_path) = &environment.library_path {
        for folder in std::env::split_paths(library_path) {
            if !folder.as_os_str().is_empty() {
                folders.push((folder, true));
            }
        }
    }
    folders.extend(
        SYSTEM_FOLDERS
            .iter()
            .map(|folder| (PathBuf::from(folder), true)),
    );
    folders
}

/// The per-user location that `cargo xtask setup-v8` fills.
fn user_folder(environment: &Environment) -> Option<PathBuf> {
    let data_home = match (&environment.xdg_data_home, &environment.home) {
        (Some(data_home), _) if data_home.is_absolute() => data_home.clone(),
        (_, Some(home)) => home.join(".local/share"),
        _ => return None,
    };
    Some(data_home.join("codemode/v8/lib"))
}

/// The first folder that has `libnode.so.108`, or every folder looked at.
fn find_v8(environment: &Environment) -> Result<Found, Vec<PathBuf>> {
    let candidates = candidates(environment);
    for (folder, searched_by_loader) in &candidates {
        if folder.join(LIBNODE).is_file() {
            return Ok(if *searched_by_loader {
                Found::System
            } else {
                Found::Folder(folder.clone())
            });
        }
    }
    Err(candidates.into_iter().map(|(folder, _)| folder).collect())
}

fn not_found_message(looked_in: &[PathBuf]) -> String {
    let mut message = format!("error: codemode cannot find V8 ({LIBNODE}). It looked in:\n");
    for folder in looked_in {
        message.push_str(&format!("  {}\n", folder.display()));
    }
    message.push_str(
        "\nFix it with one of:\n  \
         cargo xtask setup-v8              from a clone of the codemode repository (installs V8 for \
         your user)\n  \
         apt-get install libnode108        on Debian bookworm (installs it for the system)\n  \
         CODEMODE_V8_PREFIX=/path/to/v8    a folder where Debian's libnode108 is unpacked\n\
         or unpack a codemode release tarball, whose lib/ folder carries V8.\n\n\
         Or run cells on QuickJS, which needs no system library: build codemode without V8\n  \
         cargo install --path cli --no-default-features\n\
         and its cells run on QuickJS (--engine quickjs).",
    );
    message
}

fn environment() -> Environment {
    let origin = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    Environment {
        origin,
        v8_prefix: std::env::var_os("CODEMODE_V8_PREFIX").map(PathBuf::from),
        xdg_data_home: std::env::var_os("XDG_DATA_HOME").map(PathBuf::from),
        home: std::env::var_os("HOME").map(PathBuf::from),
        library_path: std::env::var_os("LD_LIBRARY_PATH"),
    }
}

fn main() -> ExitCode {
    let environment = environment();
    let Some(origin) = &environment.origin else {
        eprintln!("error: codemode cannot tell where it is installed (no /proc/self/exe?)");
        return ExitCode::FAILURE;
    };
    let program = origin.join(PROGRAM);
    if !program.is_file() {
        eprintln!(
            "error: {} is missing: the codemode launcher runs it, and it belongs beside the \
             launcher. Reinstall codemode (cargo install --path cli, or unpack the release \
             tarball again).",
            program.display()
        );
        return ExitCode::FAILURE;
    }
    let mut command = Command::new(&program);
    command.args(std::env::args_os().skip(1));
    if !cfg!(feature = "v8") {
        // A build without V8: the program links nothing to find.
        let error = command.exec();
        eprintln!("error: cannot start {}: {error}", program.display());
        return ExitCode::FAILURE;
    }
    match find_v8(&environment) {
        Ok(Found::System) => {}
        Ok(Found::Folder(folder)) => {
            let original = environment.library_path.clone().unwrap_or_default();
            let mut library_path = vec![folder];
            library_path.extend(std::env::split_paths(&original));
            match std::env::join_paths(library_path) {
                Ok(joined) => {
                    command.env("LD_LIBRARY_PATH", joined);
                    command.env(ORIGINAL_LIBRARY_PATH, original);
                }
                Err(error) => {
                    eprintln!("error: cannot put V8's folder on the library path: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
        Err(looked_in) => {
            eprintln!("{}", not_found_message(&looked_in));
            return ExitCode::FAILURE;
        }
    }
    // Only returns if the program could not be started.
    let error = command.exec();
    eprintln!("error: cannot start {}: {error}", program.display());
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("codemode-launcher-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        folder
    }

    fn with_libnode(folder: &Path) {
        std::fs::create_dir_all(folder).unwrap();
        std::fs::write(folder.join(LIBNODE), b"").unwrap();
    }

    #[test]
    fn the_lib_folder_beside_the_launcher_comes_first() {
        let root = scratch("origin");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        with_libnode(&root.join("lib"));
        let prefix = root.join("prefix");
        with_libnode(&prefix.join("usr/lib/x86_64-linux-gnu"));
        let environment = Environment {
            origin: Some(root.join("bin")),
            v8_prefix: Some(prefix),
            ..Environment::default()
        };
        assert_eq!(
            find_v8(&environment),
            Ok(Found::Folder(root.join("bin/../lib")))
        );
    }

    #[test]
    fn then_the_prefix_then_the_per_user_location() {
        let root = scratch("order");
        let user = root.join("home/.local/share/codemode/v8/lib");
        with_libnode(&user);
        let home_only = Environment {
            origin: Some(root.join("bin")),
            home: Some(root.join("home")),
            ..Environment::default()
        };
        assert_eq!(find_v8(&home_only), Ok(Found::Folder(user)));
        let prefix = root.join("prefix");
        with_libnode(&prefix.join("usr/lib/x86_64-linux-gnu"));
        let with_prefix = Environment {
            v8_prefix: Some(prefix.clone()),
            ..home_only
        };
        assert_eq!(
            find_v8(&with_prefix),
            Ok(Found::Folder(prefix.join("usr/lib/x86_64-linux-gnu")))
        );
    }

    #[test]
    fn a_folder_on_the_library_path_needs_nothing_added() {
        let root = scratch("system");
        with_libnode(&root.join("libs"));
        let environment = Environment {
            library_path: Some(root.join("libs").into_os_string()),
            ..Environment::default()
        };
        assert_eq!(find_v8(&environment), Ok(Found::System));
    }

    #[test]
    fn nothing_found_lists_every_folder_looked_in_and_the_fix() {
        let root = scratch("nowhere");
        let environment = Environment {
            origin: Some(root.join("bin")),
            home: Some(root.join("home")),
            ..Environment::default()
        };
        let looked_in = match find_v8(&environment) {
            Err(looked_in)
                if !Path::new("/usr/lib/x86_64-linux-gnu")
                    .join(LIBNODE)
                    .exists() =>
            {
                looked_in
            }
            // This machine has V8 installed system-wide: the lookup rightly finds it.
            Ok(Found::System) => return,
            other => panic!("unexpected: {other:?}"),
        };
        assert_eq!(looked_in[0], root.join("bin/../lib"));
        let message = not_found_message(&looked_in);
        assert!(
            message.contains(
                &root
                    .join("home/.local/share/codemode/v8/lib")
                    .display()
                    .to_string()
            )
        );
        assert!(message.contains("cargo xtask setup-v8"), "{message}");
    }
}
