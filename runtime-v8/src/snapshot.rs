//! The startup snapshot of the bootstrapped global scope: made once per engine process, before
//! the first runtime is created, by running the bootstrap in a context that V8 then serialises;
//! every isolate created afterwards is made from it, and each cell's global scope is deserialised
//! from it instead of being built by the bootstrap (see `cm_snapshot_prepare` in the shim).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi;

pub use codemode_engine::script::SNAPSHOT_VARIABLE;

/// Makes the process's snapshot for runtimes bootstrapped with `source` and `config`, if none
/// exists yet (unless [`SNAPSHOT_VARIABLE`] is `off`). A snapshot that cannot be made is logged
/// once; the runtimes then run the bootstrap themselves. `snapshot_config` is `config` marked for
/// a snapshot (see `ScriptRuntime::prepare_bootstrap`).
pub(crate) fn prepare(source: &str, config: &str, snapshot_config: &str) {
    if std::env::var_os(SNAPSHOT_VARIABLE).is_some_and(|value| value == "off") {
        return;
    }
    if let Err(why) = ffi::prepare_snapshot(source, config, snapshot_config) {
        static REPORTED: AtomicBool = AtomicBool::new(false);
        if !REPORTED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "V8 builds each cell's global scope with the bootstrap, without a startup \
                 snapshot, which costs more CPU per cell: making the snapshot failed: {why}"
            );
        }
    }
}
