//! Engine processes on the V8 of the official Node 24 binary (V8 13.6), which is reachable only
//! from code that `node` itself loads (`process.dlopen`). Two halves:
//!
//! - **The launcher** ([`exec_node`]): the engine-host program, started by the parent as every
//!   engine process is, takes the sandbox's first step while it is still one thread (its own
//!   session, namespaces, private root, Landlock, no capabilities, no-new-privileges; Node's
//!   folder and the engine library's are among what the process may read and execute), then
//!   executes `node` in place, with an empty environment, Node's permission model on (granting
//!   only the loading of the library), no inspector on `SIGUSR1`, and a boot script whose one
//!   statement loads the library. The boot script is the only JavaScript Node itself runs. The
//!   channel (standard input) is kept through `execve`; nothing else is open.
//! - **The library** ([`serve_in_node`]): called by the engine library's module initialiser on
//!   Node's main thread, it runs the engine-process loop there as [`crate::child::serve`] does,
//!   and takes the rest of the sandbox itself (non-dumpable again, checks of what `execve` had to
//!   keep, resource limits, seccomp on every thread before the first cell). It never returns to
//!   Node: Node's event loop, modules, `require` and `process` never run again, and no cell
//!   reaches them (cells run in isolates of their own, on threads of their own).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;

use codemode_engine::{Engine, EngineError};

use crate::child::{FirstStep, NativeProbe};
use crate::wire::ChildSettings;

/// The boot script: loads the engine library, whose initialiser serves until the parent goes
/// away and then ends the process.
pub const BOOT_SCRIPT: &str = "process.dlopen({ exports: {} }, process.argv[1]);";

/// V8's and Node's flags for an engine process (before the boot script).
fn node_flags(library: &Path) -> Vec<OsString> {
    let mut read_library = OsString::from("--allow-fs-read=");
    read_library.push(library);
    vec![
        // Node's permission model: no file system, child processes, workers or network for
        // Node's own runtime; loading the library is all it may do.
        "--permission".into(),
        "--allow-addons".into(),
        read_library,
        // No inspector for a signal to open.
        "--disable-sigusr1".into(),
        // (V8 13.6 has no `--no-expose-wasm`: the shim refuses to compile WebAssembly instead, and
        // the bootstrap deletes its global.)
    ]
}

/// The launcher: takes the sandbox's first step, then executes `node` to run the engine library
/// `library`. Returns only on failure, having logged why.
pub fn exec_node(node: &Path, library: &Path) -> ExitCode {
    // Where they really are: the folders the sandbox keeps are those, not the links to them.
    let (node, library) = match (std::fs::canonicalize(node), std::fs::canonicalize(library)) {
        (Ok(node), Ok(library)) => (node, library),
        (Err(error), _) => {
            tracing::error!(
                "engine process: cannot find {}: {error} (install the pinned Node 24 with \
                 `cargo xtask setup-v8`)",
                node.display()
            );
            return ExitCode::FAILURE;
        }
        (_, Err(error)) => {
            tracing::error!(
                "engine process: cannot find the engine library {}: {error} (build it with \
                 `cargo xtask build-engine-library`)",
                library.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let (node, library) = (node.as_path(), library.as_path());
    // What the process may read and execute beyond the system's libraries: Node and the library.
    let mut paths: Vec<std::path::PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    paths.extend(node.parent().map(Path::to_path_buf));
    paths.extend(library.parent().map(Path::to_path_buf));
    let paths = match std::env::join_paths(paths) {
        Ok(paths) => paths,
        Err(error) => {
            tracing::error!("engine process: cannot list the folders it reads: {error}");
            return ExitCode::FAILURE;
        }
    };
    let early = match crate::sandbox::enter_early(Some(&paths)) {
        Ok(early) => early,
        Err(error) => {
            tracing::error!("engine process: {error}");
            return ExitCode::FAILURE;
        }
    };
    tracing::debug!(landlock = %early.landlock, network = %early.network, root = %early.root, user = %early.user, "engine process launcher sandboxed");
    let mut command = std::process::Command::new(node);
    command
        .env_clear()
        // No io_uring for libuv: requests on a ring shared with the kernel pass no system call,
        // so a seccomp filter could not refuse them. (Node's event loop never runs here anyway.)
        .env("UV_USE_IO_URING", "0");
    // The log filter, and whether V8 makes each global scope from a startup snapshot (read by
    // the V8 engine inside; `off` turns it off).
    for name in ["CODEMODE_LOG", codemode_engine::script::SNAPSHOT_VARIABLE] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let error = command
        .args(node_flags(library))
        .arg("-e")
        .arg(BOOT_SCRIPT)
        .arg(library)
        .exec();
    tracing::error!(
        "engine process: cannot execute {}: {error} (install the pinned Node 24 with `cargo xtask \
         setup-v8`)",
        node.display()
    );
    ExitCode::FAILURE
}

/// The library's half: runs the engine-process loop on this thread (Node's main thread, from the
/// library's module initialiser) with the engine `make_engine` builds, after [`exec_node`] took
/// the sandbox's first step. Returns the process's exit code.
pub fn serve_in_node(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, EngineError>,
    native_probe: Option<NativeProbe>,
) -> ExitCode {
    crate::child::serve_after(make_engine, native_probe, FirstStep::TakenBeforeExec)
}
