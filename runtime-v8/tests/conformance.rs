//! The conformance suite every engine must pass (`codemode_test_support::conformance`), on V8.

use std::sync::Arc;

use codemode_engine::Engine;
use codemode_runtime_v8::V8Engine;
use codemode_test_support::conformance::{Dialect, Subject};

fn v8() -> Subject {
    Subject {
        name: "V8",
        engine: || Arc::new(V8Engine::new()) as Arc<dyn Engine>,
        faulty: || Arc::new(V8Engine::with_fault_injection()) as Arc<dyn Engine>,
        warm: |count| Arc::new(V8Engine::with_warm_runtimes(count)) as Arc<dyn Engine>,
        dialect: &Dialect::V8,
        // V8 is the engine the suite was written on: it differs in nothing.
        differences: &[],
    }
}

codemode_test_support::conformance_suite!(v8());
