//! The conformance suite every engine must pass (`codemode_test_support::conformance`), on V8.

use std::sync::Arc;

use codemode_engine::Engine;
use codemode_runtime_v8::V8Engine;
use codemode_test_support::conformance::{Dialect, Difference, Subject};

/// What V8 10.2 (Debian bookworm's libnode108) lacks of today's built-ins: syntax and types that
/// the bootstrap's prelude cannot supply from JavaScript (it supplies the library functions).
/// The suite was written on V8, which otherwise differs in nothing.
const DIFFERENCES: &[Difference] = &[
    Difference {
        test: "array_buffers_resize_and_transfer",
        why: "V8 10.2 has no resizable ArrayBuffer (V8 11.1) and no transfer (V8 11.4); a \
              prelude cannot detach a buffer",
    },
    Difference {
        test: "float16_arrays_round_to_half_precision",
        why: "V8 10.2 has no Float16Array or Math.f16round (V8 13.5); a typed array cannot be \
              supplied from JavaScript",
    },
    Difference {
        test: "regexps_take_the_v_flag_duplicate_group_names_and_modifiers",
        why: "the `v` flag (V8 11.2), duplicate named groups (V8 12.5) and modifiers (V8 12.5) \
              are regular-expression syntax that V8 10.2 refuses",
    },
    Difference {
        test: "using_declarations_dispose_at_the_end_of_their_block",
        why: "`using` declarations are syntax that V8 10.2 refuses (V8 13.4 runs them)",
    },
];

fn v8() -> Subject {
    Subject {
        name: "V8",
        engine: || Arc::new(V8Engine::new()) as Arc<dyn Engine>,
        faulty: || Arc::new(V8Engine::with_fault_injection()) as Arc<dyn Engine>,
        warm: |count| Arc::new(V8Engine::with_warm_runtimes(count)) as Arc<dyn Engine>,
        dialect: &Dialect::V8,
        differences: DIFFERENCES,
    }
}

codemode_test_support::conformance_suite!(v8());
