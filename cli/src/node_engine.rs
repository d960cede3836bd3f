//! Where V8 cells run: engine processes that are the pinned official Node 24 (V8 13.6), the `node`
//! binary, loading the engine library (`libcodemode_v8_engine.so`). This program links no V8.
//!
//! `--v8-library PATH` (or `CODEMODE_V8_LIBRARY`) names the library. Otherwise it is looked for,
//! in order (and when none is there, the error lists where it looked and how to get one):
//!
//! 1. next to this program: `$ORIGIN/../lib/node-engine/` (an unpacked release tarball);
//! 2. in a debug build, the repository it was built from: `target/node-engine/release/`
//!    (`cargo xtask setup-v8` builds it there);
//! 3. the per-user location that `cargo xtask setup-v8` fills:
//!    `${XDG_DATA_HOME:-$HOME/.local/share}/codemode/node-engine/`.
//!
//! The `node` that loads it is the one beside it, unless `--node` names another.

use std::path::{Path, PathBuf};

/// The engine library's file name.
const LIBRARY: &str = "libcodemode_v8_engine.so";

/// The `node` binary and the engine library that V8 engine processes run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEngine {
    /// The pinned official `node`.
    pub node: PathBuf,
    /// The engine library it loads.
    pub library: PathBuf,
}

/// What the lookup needs from the environment, so that it can be tested.
#[derive(Debug, Default)]
pub struct Environment {
    /// The folder this program is in.
    pub origin: Option<PathBuf>,
    /// The repository a debug build was built from.
    pub repository: Option<PathBuf>,
    /// `XDG_DATA_HOME`.
    pub xdg_data_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
}

impl Environment {
    /// This process's.
    pub fn current() -> Environment {
        let origin = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.canonicalize().ok())
            .and_then(|exe| exe.parent().map(Path::to_path_buf));
        let repository =
            cfg!(debug_assertions).then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
        Environment {
            origin,
            repository,
            xdg_data_home: std::env::var_os("XDG_DATA_HOME").map(PathBuf::from),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    /// The folders looked in for the library, in order.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut folders = Vec::new();
        if let Some(origin) = &self.origin {
            folders.push(origin.join("../lib/node-engine"));
        }
        if let Some(repository) = &self.repository {
            folders.push(repository.join("target/node-engine/release"));
        }
        let data_home = match (&self.xdg_data_home, &self.home) {
            (Some(data_home), _) if data_home.is_absolute() => Some(data_home.clone()),
            (_, Some(home)) => Some(home.join(".local/share")),
            _ => None,
        };
        if let Some(data_home) = data_home {
            folders.push(data_home.join("codemode/node-engine"));
        }
        folders
    }
}

/// Why no engine could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum NodeEngineError {
    /// No engine library is installed where this program looks.
    #[error(
        "V8 cells run on the V8 of the pinned Node 24, in engine processes that load codemode's \
         engine library ({LIBRARY}), and none is installed where codemode looks:\n{}\n\
         Fix it with one of:\n  \
         cargo xtask setup-v8        from a clone of the codemode repository (installs Node 24 \
         and the library for your user)\n  \
         --v8-library PATH           an engine library installed elsewhere (the release \
         tarball's lib/node-engine/ carries one)\n\
         or run the cells on QuickJS, which needs neither: --engine quickjs",
        looked_in.iter().map(|folder| format!("  {}", folder.display())).collect::<Vec<_>>().join("\n")
    )]
    NotInstalled {
        /// The folders looked in, in order.
        looked_in: Vec<PathBuf>,
    },
    /// The library named cannot be read.
    #[error(
        "--v8-library {path}: {error} (build it with `cargo xtask build-engine-library --release`)"
    )]
    Library {
        /// The path named.
        path: PathBuf,
        /// Why it cannot be read.
        error: std::io::Error,
    },
    /// The `node` that loads it cannot be read.
    #[error(
        "the node binary {path} that loads the engine library: {error} (install the pinned Node 24 \
         with `cargo xtask setup-v8`, or name one with --node)"
    )]
    Node {
        /// Where it was looked for.
        path: PathBuf,
        /// Why it cannot be read.
        error: std::io::Error,
    },
    /// The engine user may not execute `node` or read the library.
    #[error(
        "--engine-user: the engine user (uid {uid}) cannot use {path}: {closed} is closed to it. \
         Install the engine library and its node where that user can read them (the release \
         tarball's lib/node-engine/, say) and name the library with --v8-library"
    )]
    ClosedToEngineUser {
        /// The file it needs.
        path: PathBuf,
        /// The folder (or the file) whose permissions shut it out.
        closed: PathBuf,
        /// The engine user.
        uid: u32,
    },
}

impl NodeEngine {
    /// Whether the engine user `uid` (group `gid`, no others: engine processes have no
    /// supplementary groups) may execute `node` and read the library, by their permission bits
    /// and those of every folder above them; the error names the first that is closed to it.
    pub fn open_to(&self, uid: u32, gid: u32) -> Result<(), NodeEngineError> {
        for (path, wanted) in [(&self.node, READ | EXECUTE), (&self.library, READ)] {
            if let Some(closed) = closed_to(path, wanted, uid, gid) {
                return Err(NodeEngineError::ClosedToEngineUser {
                    path: path.clone(),
                    closed,
                    uid,
                });
            }
        }
        Ok(())
    }
}

/// A permission bit of a file's class (owner, group or other): read.
const READ: u32 = 4;
/// Execute, or search for a folder.
const EXECUTE: u32 = 1;

/// The first of `path`'s folders that `uid`/`gid` may not search, or `path` itself when it may
/// not use it as `wanted` asks ([`READ`], [`EXECUTE`]), by permission bits; `None` when open to it.
fn closed_to(path: &Path, wanted: u32, uid: u32, gid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let allows = |at: &Path, bits: u32| match std::fs::metadata(at) {
        Err(_) => false,
        Ok(_) if uid == 0 => true,
        Ok(metadata) => {
            let shift = if metadata.uid() == uid {
                6
            } else if metadata.gid() == gid {
                3
            } else {
                0
            };
            (metadata.mode() >> shift) & bits == bits
        }
    };
    let mut folders: Vec<&Path> = path.ancestors().skip(1).collect();
    folders.reverse();
    folders
        .into_iter()
        .find(|folder| !allows(folder, EXECUTE))
        .map(Path::to_path_buf)
        .or_else(|| (!allows(path, wanted)).then(|| path.to_path_buf()))
}

/// Node's V8 for engine processes: the library `named`, else the first one installed; `node` is
/// the one named, else the one beside it.
pub fn choose(
    named: Option<&Path>,
    node: Option<&Path>,
    environment: &Environment,
) -> Result<NodeEngine, NodeEngineError> {
    let library = match named {
        Some(named) => named.to_path_buf(),
        None => {
            let candidates = environment.candidates();
            let found = candidates
                .iter()
                .map(|folder| folder.join(LIBRARY))
                .find(|library| library.is_file());
            match found {
                Some(library) => library,
                None => {
                    return Err(NodeEngineError::NotInstalled {
                        looked_in: candidates,
                    });
                }
            }
        }
    };
    let library = std::fs::canonicalize(&library).map_err(|error| NodeEngineError::Library {
        path: library.clone(),
        error,
    })?;
    let node = node.map_or_else(|| library.with_file_name("node"), Path::to_path_buf);
    let node = std::fs::canonicalize(&node).map_err(|error| NodeEngineError::Node {
        path: node.clone(),
        error,
    })?;
    Ok(NodeEngine { node, library })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder holding an engine library and a `node` beside it.
    fn install(folder: &Path) {
        std::fs::create_dir_all(folder).unwrap();
        std::fs::write(folder.join(LIBRARY), b"library").unwrap();
        std::fs::write(folder.join("node"), b"node").unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let folder = std::env::temp_dir().join(format!(
            "codemode-node-engine-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        folder
    }

    #[test]
    fn the_tarball_comes_before_the_repository_and_the_user_folder() {
        let root = scratch("order");
        let environment = Environment {
            origin: Some(root.join("dist/bin")),
            repository: Some(root.join("repo")),
            xdg_data_home: Some(root.join("data")),
            home: Some(root.join("home")),
        };
        std::fs::create_dir_all(root.join("dist/bin")).unwrap();
        install(&root.join("data/codemode/node-engine"));
        let chosen =
            |environment: &Environment| choose(None, None, environment).expect("one is installed");
        assert_eq!(
            chosen(&environment).library,
            root.join("data/codemode/node-engine")
                .join(LIBRARY)
                .canonicalize()
                .unwrap()
        );
        install(&root.join("repo/target/node-engine/release"));
        assert!(
            chosen(&environment)
                .library
                .starts_with(root.join("repo").canonicalize().unwrap())
        );
        install(&root.join("dist/lib/node-engine"));
        let tarball = chosen(&environment);
        assert_eq!(
            tarball.node,
            root.join("dist/lib/node-engine/node")
                .canonicalize()
                .unwrap()
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn home_stands_in_for_a_relative_or_missing_xdg_data_home() {
        let environment = Environment {
            xdg_data_home: Some(PathBuf::from("relative")),
            home: Some(PathBuf::from("/home/someone")),
            ..Environment::default()
        };
        assert_eq!(
            environment.candidates(),
            [PathBuf::from(
                "/home/someone/.local/share/codemode/node-engine"
            )]
        );
    }

    #[test]
    fn with_no_library_installed_the_error_lists_where_it_looked_and_how_to_get_one() {
        let root = scratch("none");
        let environment = Environment {
            origin: Some(root.join("bin")),
            repository: Some(root.join("repo")),
            xdg_data_home: None,
            home: Some(root.join("home")),
        };
        let error = choose(None, None, &environment).unwrap_err();
        assert!(
            matches!(&error, NodeEngineError::NotInstalled { looked_in } if *looked_in == environment.candidates()),
            "{error:?}"
        );
        let message = error.to_string();
        for folder in environment.candidates() {
            assert!(message.contains(&folder.display().to_string()), "{message}");
        }
        for fix in [
            "cargo xtask setup-v8",
            "--v8-library PATH",
            "--engine quickjs",
        ] {
            assert!(message.contains(fix), "{message}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_engine_user_shut_out_by_a_folder_is_told_which_folder() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("closed");
        let open = root.join("open");
        install(&open);
        let private = root.join("private");
        install(&private);
        let set = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(&root, 0o755);
        set(&open, 0o755);
        set(&private, 0o700);
        for file in ["node", LIBRARY] {
            set(&open.join(file), 0o755);
            set(&private.join(file), 0o755);
        }
        let engine = |folder: &Path| NodeEngine {
            node: folder.join("node"),
            library: folder.join(LIBRARY),
        };
        // 65534: a user that owns none of it; its group neither.
        assert!(engine(&open).open_to(65534, 65534).is_ok());
        let error = engine(&private).open_to(65534, 65534).unwrap_err();
        assert!(
            matches!(&error, NodeEngineError::ClosedToEngineUser { closed, .. } if closed == &private),
            "{error}"
        );
        assert!(error.to_string().contains("--v8-library"), "{error}");
        // The owner itself may; so may its group, where the group's bits allow.
        let owner = std::fs::metadata(&private).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert!(engine(&private).open_to(owner.uid(), owner.gid()).is_ok());
        // A library nobody but its owner may read is named itself.
        set(&open.join(LIBRARY), 0o700);
        let error = engine(&open).open_to(65534, 65534).unwrap_err();
        assert!(
            matches!(&error, NodeEngineError::ClosedToEngineUser { closed, .. } if closed == &open.join(LIBRARY)),
            "{error}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_named_library_or_node_that_is_missing_is_an_error_that_names_it() {
        let root = scratch("missing");
        let missing = root.join(LIBRARY);
        let error = choose(Some(&missing), None, &Environment::default()).unwrap_err();
        assert!(error.to_string().contains(&missing.display().to_string()));
        install(&root);
        std::fs::remove_file(root.join("node")).unwrap();
        let error = choose(Some(&missing), None, &Environment::default()).unwrap_err();
        assert!(matches!(error, NodeEngineError::Node { .. }), "{error}");
        assert!(error.to_string().contains("--node"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
