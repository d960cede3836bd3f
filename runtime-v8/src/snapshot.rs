//! The startup snapshot of the bootstrapped global scope (V8 13.6, inside Node's process): made
//! once per process, before the first runtime is created, by running the bootstrap in a context
//! that V8 then serialises; every isolate created afterwards is made from it, and each cell's
//! global scope is deserialised from it instead of being built by the bootstrap (see
//! `cm_snapshot_prepare` in the shim). V8 10.2 makes none: its runtimes run the bootstrap each time.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi;

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

/// `config` telling the bootstrap that it runs for a snapshot (`forSnapshot`: it leaves alone what
/// V8 adds or looks for in each context it deserialises); `None` when `config` is not a JSON
/// object (the bootstrap would refuse it anyway).
fn snapshot_config(config: &str) -> Option<String> {
    let serde_json::Value::Object(mut fields) = serde_json::from_str(config).ok()? else {
        return None;
    };
    fields.insert("forSnapshot".to_owned(), serde_json::Value::Bool(true));
    Some(serde_json::Value::Object(fields).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_config_is_the_config_marked_for_a_snapshot() {
        let config = snapshot_config(r#"{"testHooks":true,"ops":{"TEXT":1}}"#).unwrap();
        let value: serde_json::Value = serde_json::from_str(&config).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"testHooks": true, "ops": {"TEXT": 1}, "forSnapshot": true})
        );
        assert_eq!(snapshot_config("[1]"), None);
        assert_eq!(snapshot_config("not json"), None);
    }
}
