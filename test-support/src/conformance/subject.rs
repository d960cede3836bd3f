//! The engine under test ([`Subject`]): how to make its variants, the dialect its error texts
//! speak, the [`Difference`]s it is known to have, and the thread-local that tells each test which
//! engine it runs against.

use std::cell::RefCell;
use std::sync::Arc;

use codemode_engine::Engine;

/// The engine under test and how to make its variants.
#[derive(Clone)]
pub struct Subject {
    /// The engine's name, for messages.
    pub name: &'static str,
    /// An engine with its defaults.
    pub engine: fn() -> Arc<dyn Engine>,
    /// An engine whose cells have `__codemode_test_panic()`.
    pub faulty: fn() -> Arc<dyn Engine>,
    /// An engine that keeps this many runtimes pre-warmed.
    pub warm: fn(usize) -> Arc<dyn Engine>,
    /// What the engine's own messages say, where engines word them differently.
    pub dialect: &'static Dialect,
    /// The tests this engine is known to fail, and why.
    pub differences: &'static [Difference],
}

/// The texts an engine words its own way (its built-ins' messages, where its positions point):
/// the tests read them from here, so that every engine is held to the same behaviour.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// The error of `null.x`.
    pub null_property_read: &'static str,
    /// The column of that error, when `null.x` starts a line (V8 points at `x`).
    pub null_property_read_column: u32,
    /// The start of the syntax error of `const x = ;`.
    pub unexpected_semicolon: &'static str,
    /// The start of `JSON.stringify`'s message for a cycle.
    pub circular_json: &'static str,
    /// `JSON.stringify`'s message for a BigInt.
    pub bigint_json: &'static str,
    /// How many columns after the `new` keyword the position of an error made by `new X()` is.
    pub new_error_column_offset: u32,
}

impl Dialect {
    /// V8's words, which the suite was first written against.
    pub const V8: Dialect = Dialect {
        null_property_read: "TypeError: Cannot read properties of null (reading 'x')",
        null_property_read_column: 6,
        unexpected_semicolon: "SyntaxError: Unexpected token ';'",
        circular_json: "Converting circular structure to JSON",
        bigint_json: "Do not know how to serialize a BigInt",
        new_error_column_offset: 0,
    };
}

/// A test an engine is known to fail, with the reason, in one visible place.
#[derive(Debug, Clone, Copy)]
pub struct Difference {
    /// The test's name (its function's name).
    pub test: &'static str,
    /// Why the engine differs.
    pub why: &'static str,
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject")
            .field("name", &self.name)
            .field("differences", &self.differences)
            .finish_non_exhaustive()
    }
}

impl Subject {
    /// An engine with its defaults.
    pub fn engine(&self) -> Arc<dyn Engine> {
        (self.engine)()
    }

    /// An engine whose cells have `__codemode_test_panic()`.
    pub fn faulty(&self) -> Arc<dyn Engine> {
        (self.faulty)()
    }

    /// An engine that keeps `count` runtimes pre-warmed.
    pub fn warm(&self, count: usize) -> Arc<dyn Engine> {
        (self.warm)(count)
    }
}

thread_local! {
    static SUBJECT: RefCell<Option<Subject>> = const { RefCell::new(None) };
}

/// The engine under test on this thread (each test runs on a thread of its own).
pub fn subject() -> Subject {
    SUBJECT.with(|subject| {
        subject
            .borrow()
            .clone()
            .expect("a conformance test runs through conformance_suite!, which names its engine")
    })
}

/// Runs the conformance test `name` (`test`) against `subject`: it must pass, or, if the subject
/// lists it as a difference, fail.
pub fn check(subject: Subject, name: &str, test: fn()) {
    let difference = subject
        .differences
        .iter()
        .find(|difference| difference.test == name)
        .copied();
    let engine = subject.name;
    SUBJECT.with(|current| *current.borrow_mut() = Some(subject));
    match difference {
        None => test(),
        Some(difference) => {
            let outcome = std::panic::catch_unwind(test);
            assert!(
                outcome.is_err(),
                "{name} is listed as a difference of {engine} ({why}), and passes now: remove \
                 it from the list",
                why = difference.why
            );
            eprintln!("{name}: a known difference of {engine}: {}", difference.why);
        }
    }
}
