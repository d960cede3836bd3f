//! The conformance suite every engine must pass (`codemode_test_support::conformance`), on the
//! V8 of the pinned official Node 24 (V8 13.6): cells run in engine processes that are `node`
//! loading the engine library (`cargo xtask setup-v8` builds it with test hooks; or name one with
//! `CODEMODE_V8_LIBRARY`), launched by the real `codemode` binary. It runs every built-in of
//! today that the suite holds: this V8 has no differences of its own.

use std::sync::Arc;

use codemode_engine::Engine;
use codemode_engine_process::{ProcessEngine, ProcessEngineConfig};
use codemode_protocol::limits::DEFAULT_HEAP_LIMIT_BYTES;
use codemode_test_support::conformance::{Dialect, Subject};

/// Engine processes on Node's V8, keeping `warm` runtimes ready in each; with `test_hooks`, its
/// cells have `__codemode_test_panic()`.
fn config(warm: usize, test_hooks: bool) -> Arc<dyn Engine> {
    let arguments = codemode_test_support::engine_host::arguments_in_node(
        codemode_test_support::engine_host::v8_library(),
    );
    let mut config = ProcessEngineConfig::new(env!("CARGO_BIN_EXE_codemode"), arguments)
        .with_warm_runtimes(warm, DEFAULT_HEAP_LIMIT_BYTES);
    if test_hooks {
        config = config.with_test_hooks();
    }
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        config = config.with_env("LD_LIBRARY_PATH", path);
    }
    Arc::new(ProcessEngine::new(config))
}

fn engine() -> Arc<dyn Engine> {
    config(2, false)
}

fn faulty() -> Arc<dyn Engine> {
    config(2, true)
}

fn engine_with_warm(warm: usize) -> Arc<dyn Engine> {
    config(warm, false)
}

fn node_v8() -> Subject {
    Subject {
        name: "V8 13.6 in Node 24",
        engine,
        faulty,
        warm: engine_with_warm,
        dialect: &Dialect::V8,
        differences: &[],
    }
}

codemode_test_support::conformance_suite!(node_v8());
