//! The arguments that start an engine process of the `codemode` binary in its engine-host mode,
//! as the binary itself starts them: V8 engine processes on the pinned Node 24's V8, loading the
//! engine library `CODEMODE_V8_LIBRARY` names, else the one with test hooks that `cargo xtask
//! setup-v8` builds in the repository; the `node` beside it unless `CODEMODE_NODE` names one.

use std::ffi::OsString;
use std::path::PathBuf;

/// The engine library with test hooks: the one `CODEMODE_V8_LIBRARY` names, else the one `cargo
/// xtask setup-v8` builds (`target/node-engine-test-hooks/debug/`). Panics, saying how to build
/// it, when there is none.
pub fn v8_library() -> PathBuf {
    let library = std::env::var_os("CODEMODE_V8_LIBRARY")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/node-engine-test-hooks/debug/libcodemode_v8_engine.so")
        });
    assert!(
        library.exists(),
        "no engine library at {}: run `cargo xtask setup-v8` (it installs the pinned Node 24 and \
         builds the library on its V8, with test hooks, for the tests)",
        library.display()
    );
    library
}

/// `engine-host --engine ENGINE`, and for `v8` `--node NODE --library LIBRARY` (see
/// [`v8_library`]).
pub fn arguments(engine: &str) -> Vec<OsString> {
    match engine {
        "v8" => arguments_in_node(v8_library()),
        _ => vec!["engine-host".into(), "--engine".into(), engine.into()],
    }
}

/// `engine-host --engine v8 --node NODE --library LIBRARY`, with `node` from `CODEMODE_NODE` or
/// beside the library.
pub fn arguments_in_node(library: PathBuf) -> Vec<OsString> {
    let node = std::env::var_os("CODEMODE_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| library.with_file_name("node"));
    vec![
        "engine-host".into(),
        "--engine".into(),
        "v8".into(),
        "--node".into(),
        node.into_os_string(),
        "--library".into(),
        library.into_os_string(),
    ]
}
