//! The startup snapshot of the bootstrapped global scope (V8 13.6, inside Node's process): made
//! once per process, before the first runtime is created, by running the bootstrap in a context
//! that V8 then serialises; every isolate created afterwards is made from it, and each cell's
//! global scope is deserialised from it instead of being built by the bootstrap (see
//! `cm_snapshot_prepare` in the shim). V8 10.2 makes none: its runtimes run the bootstrap each time.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi;

/// The built-ins of the prelude that V8 13.6 adds to every context it deserialises (it still
/// ships them behind flags, which it applies to each new context but never to one it snapshots):
/// the bootstrap must not define them in the snapshot, or V8 would add them a second time over
/// the prelude's own.
const ADDED_BY_V8_LATER: &[&str] = &["Promise.try", "RegExp.escape"];

/// The environment variable that, set to `off` in an engine process's environment, makes it run
/// the bootstrap in each global scope instead: to measure what the snapshot saves, or as a way out
/// should it ever misbehave.
pub const SNAPSHOT_VARIABLE: &str = "CODEMODE_V8_SNAPSHOT";

/// Makes the process's snapshot for runtimes bootstrapped with `source` and `config`, if none
/// exists yet (unless [`SNAPSHOT_VARIABLE`] is `off`). A snapshot that cannot be made is logged
/// once; the runtimes then run the bootstrap themselves, as V8 10.2's do.
pub(crate) fn prepare(source: &str, config: &str) {
    if std::env::var_os(SNAPSHOT_VARIABLE).is_some_and(|value| value == "off") {
        return;
    }
    let Some(snapshot_config) = snapshot_config(config) else {
        return;
    };
    if let Err(why) = ffi::prepare_snapshot(source, config, &snapshot_config) {
        static REPORTED: AtomicBool = AtomicBool::new(false);
        if !REPORTED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "V8 builds each cell's global scope with the bootstrap, without a startup \
                 snapshot, which costs more CPU per cell: making the snapshot failed: {why}"
            );
        }
    }
}

/// `config` with what the bootstrap must know when it runs for a snapshot; `None` when `config`
/// is not a JSON object (the bootstrap would refuse it anyway).
fn snapshot_config(config: &str) -> Option<String> {
    let serde_json::Value::Object(mut fields) = serde_json::from_str(config).ok()? else {
        return None;
    };
    fields.insert("forSnapshot".to_owned(), serde_json::Value::Bool(true));
    fields.insert(
        "addedByEngineLater".to_owned(),
        serde_json::json!(ADDED_BY_V8_LATER),
    );
    Some(serde_json::Value::Object(fields).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_config_is_the_config_and_what_v8_adds_later() {
        let config = snapshot_config(r#"{"testHooks":true,"ops":{"TEXT":1}}"#).unwrap();
        let value: serde_json::Value = serde_json::from_str(&config).unwrap();
        assert_eq!(value["testHooks"], true);
        assert_eq!(value["ops"]["TEXT"], 1);
        assert_eq!(value["forSnapshot"], true);
        assert_eq!(
            value["addedByEngineLater"],
            serde_json::json!(["Promise.try", "RegExp.escape"])
        );
        assert_eq!(snapshot_config("[1]"), None);
        assert_eq!(snapshot_config("not json"), None);
    }
}
