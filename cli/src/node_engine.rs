//! Which V8 runs V8 cells in engine processes: the V8 13.6 of the pinned official Node 24 (the
//! `node` binary loading the engine library, `libcodemode_v8_engine.so`) wherever one is
//! installed, else the V8 10.2 this program links.
//!
//! `--v8-library PATH` (or `CODEMODE_V8_LIBRARY`) names the library, `--v8-library linked` asks
//! for the linked V8. Otherwise the library is looked for, in order:
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

/// The value of `--v8-library` that asks for the V8 this program links.
pub const LINKED: &str = "linked";

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

/// Node's V8 for engine processes, or `None` for the linked V8: the library `named` (a path, or
/// [`LINKED`]), else the first one installed; `node` is the one named, else the one beside it.
pub fn choose(
    named: Option<&Path>,
    node: Option<&Path>,
    environment: &Environment,
) -> Result<Option<NodeEngine>, NodeEngineError> {
    let library = match named {
        Some(named) if named == Path::new(LINKED) => return Ok(None),
        Some(named) => named.to_path_buf(),
        None => {
            let found = environment
                .candidates()
                .into_iter()
                .map(|folder| folder.join(LIBRARY))
                .find(|library| library.is_file());
            match found {
                Some(library) => library,
                None => return Ok(None),
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
    Ok(Some(NodeEngine { node, library }))
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
        assert_eq!(choose(None, None, &environment).unwrap(), None);
        install(&root.join("data/codemode/node-engine"));
        let chosen = |environment: &Environment| {
            choose(None, None, environment)
                .unwrap()
                .expect("a library is installed")
        };
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
    fn linked_asks_for_the_linked_v8_even_when_a_library_is_installed() {
        let root = scratch("linked");
        install(&root.join("lib/node-engine"));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        let environment = Environment {
            origin: Some(root.join("bin")),
            ..Environment::default()
        };
        assert!(choose(None, None, &environment).unwrap().is_some());
        assert_eq!(
            choose(Some(Path::new(LINKED)), None, &environment).unwrap(),
            None
        );
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
