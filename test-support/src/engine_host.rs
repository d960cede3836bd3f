//! The arguments that start an engine process of the `codemode-v8` binary in its engine-host
//! mode, as the binary itself starts them: with V8 on the pinned Node 24's V8 when
//! `CODEMODE_V8_LIBRARY` names an engine library (the binary's `--v8-library`), the `node` beside
//! it unless `CODEMODE_NODE` names one.

use std::ffi::OsString;
use std::path::PathBuf;

/// The engine library `CODEMODE_V8_LIBRARY` names, if any.
pub fn v8_library() -> Option<PathBuf> {
    std::env::var_os("CODEMODE_V8_LIBRARY")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

/// `engine-host --engine ENGINE`, and for `v8` with an engine library `--node NODE --library
/// LIBRARY` (from the environment, see [`v8_library`]).
pub fn arguments(engine: &str) -> Vec<OsString> {
    match (engine, v8_library()) {
        ("v8", Some(library)) => arguments_in_node(library),
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
