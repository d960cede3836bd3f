//! The conformance suite every engine must pass (`codemode_test_support::conformance`), on
//! QuickJS.

use std::sync::Arc;

use codemode_engine::Engine;
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_test_support::conformance::{Dialect, Difference, Subject};

/// How QuickJS words what V8 words otherwise.
const DIALECT: Dialect = Dialect {
    null_property_read: "TypeError: cannot read property 'x' of null",
    null_property_read_column: 1,
    unexpected_semicolon: "SyntaxError: unexpected token in expression: ';'",
    circular_json: "circular reference",
    bigint_json: "BigInt are forbidden in JSON.stringify",
    new_error_column_offset: 4,
};

/// What QuickJS does differently from V8, test by test, and why.
const DIFFERENCES: &[Difference] = &[
    Difference {
        test: "intl_works_with_the_system_icu",
        why: "QuickJS-NG has no Intl (no ICU): toLocaleString and Intl.* are not there",
    },
    Difference {
        test: "an_unmarked_throw_in_a_callback_keeps_its_position",
        why: "a `throw` of a value that is not an Error, left unmarked, has no position on \
              QuickJS even in a callback (V8 keeps one in its message); the session marks every \
              `throw` of a cell, so cells get the position on both engines",
    },
];

fn quickjs() -> Subject {
    Subject {
        name: "QuickJS",
        engine: || Arc::new(QuickJsEngine::new()) as Arc<dyn Engine>,
        faulty: || Arc::new(QuickJsEngine::with_fault_injection()) as Arc<dyn Engine>,
        warm: |count| Arc::new(QuickJsEngine::with_warm_runtimes(count)) as Arc<dyn Engine>,
        dialect: &DIALECT,
        differences: DIFFERENCES,
    }
}

codemode_test_support::conformance_suite!(quickjs());
