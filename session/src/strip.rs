//! TypeScript cells: type syntax is erased before the engine sees the source, with SWC's fast
//! type stripper (the one behind Node's type stripping) in strip-only mode.
//!
//! Types are replaced by whitespace, so every line and column of the stripped source is the
//! model's own: error positions, the code frame and the hints point at what it wrote. Plain
//! JavaScript comes out unchanged. Source the TypeScript parser rejects is handed to the engine as
//! it is, so that a JavaScript syntax error is reported by the engine, as for any cell. TypeScript
//! that needs a transform rather than erasure (`enum`, `namespace` with values, parameter
//! properties, `import x = require(...)`, `export =`, `<T>value` assertions) is refused with an
//! error that names the construct and says what to write instead.
//!
//! The stripped source then has its `throw` statements marked (`crate::throw_sites`), positions
//! kept as well.

use parking_lot::Mutex;
use std::sync::Arc;

use swc_common::errors::{DiagnosticBuilder, Emitter, Handler};
use swc_common::sync::Lrc;
use swc_common::{BytePos, SourceMap};
use swc_ts_fast_strip::{ErrorCode, Mode, Options, operate};

use crate::throw_sites::mark_throw_sites;

/// TypeScript the stripper cannot erase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnsupportedTypeScript {
    /// The error text of the cell, with its position as `cell.js:LINE:COLUMN`.
    pub(crate) error_text: String,
}

/// What stripping made of a cell's source.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StrippedSource {
    /// Types were erased (or there were none): run this.
    Stripped(String),
    /// Not valid TypeScript: run the source as it is, and let the engine report the error.
    AsWritten,
}

/// Erases the types of `source`.
pub(crate) fn strip_types(source: &str) -> Result<StrippedSource, UnsupportedTypeScript> {
    let source_map: Lrc<SourceMap> = Default::default();
    let diagnostics = Arc::new(Mutex::new(Vec::new()));
    let handler = Handler::with_emitter(false, false, Box::new(Collect(Arc::clone(&diagnostics))));
    let options = Options {
        module: Some(true),
        filename: Some("cell.ts".to_owned()),
        mode: Mode::StripOnly,
        ..Options::default()
    };
    // The stripper is third-party parsing of hostile input: a panic in it must not take the
    // session down. Without its result, the source runs as written.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        operate(&source_map, &handler, source.to_owned(), options)
    }));
    match result {
        Ok(Ok(output)) => {
            // Then each `throw` is marked so that it reports its position, whatever it throws.
            let code = mark_throw_sites(&output.code).unwrap_or(output.code);
            Ok(StrippedSource::Stripped(code))
        }
        Ok(Err(error)) if matches!(error.code, ErrorCode::UnsupportedSyntax) => {
            let diagnostics = diagnostics.lock();
            let (message, position) = diagnostics
                .first()
                .cloned()
                .unwrap_or_else(|| (error.message.clone(), None));
            let location = position
                .map(|position| {
                    let location = source_map.lookup_char_pos(position);
                    format!("\n    at cell.js:{}:{}", location.line, location.col.0 + 1)
                })
                .unwrap_or_default();
            Err(UnsupportedTypeScript {
                error_text: format!("SyntaxError: {}{location}", explain(&message)),
            })
        }
        Ok(Err(_)) | Err(_) => Ok(StrippedSource::AsWritten),
    }
}

/// The stripper's message, with what to write instead.
fn explain(message: &str) -> String {
    let advice = if message.contains("enum") {
        "TypeScript `enum` needs a transform, which cells do not run: use a plain object \
         instead, such as `const Color = { Red: \"red\", Green: \"green\" } as const;`"
    } else if message.contains("namespace") || message.contains("module") {
        "a TypeScript `namespace` with values needs a transform, which cells do not run: use a \
         plain object or top-level functions instead"
    } else if message.contains("parameter propert") {
        "TypeScript parameter properties (`constructor(private x: T)`) need a transform, which \
         cells do not run: declare the field and assign it in the constructor instead"
    } else if message.contains("type assertion") || message.contains("angle") {
        "`<T>value` type assertions are not supported: write `value as T` instead"
    } else if message.contains("import") && message.contains("require") {
        "`import x = require(...)` is not supported: cells cannot import anything"
    } else if message.contains("export =") || message.contains("export assignment") {
        "`export =` is not supported: a cell exports nothing"
    } else {
        return format!("unsupported TypeScript: {message}");
    };
    format!("{advice} ({message})")
}

/// A diagnostic's message and where it points.
type Diagnostic = (String, Option<BytePos>);

/// Collects each diagnostic.
struct Collect(Arc<Mutex<Vec<Diagnostic>>>);

impl Emitter for Collect {
    fn emit(&mut self, diagnostic: &mut DiagnosticBuilder<'_>) {
        let position = diagnostic.span.primary_span().map(|span| span.lo);
        self.0.lock().push((diagnostic.message(), position));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(source: &str) -> String {
        match strip_types(source) {
            Ok(StrippedSource::Stripped(code)) => code,
            other => panic!("not stripped: {other:?}"),
        }
    }

    #[test]
    fn types_become_whitespace_and_positions_are_kept() {
        let source = "interface Row { id: number }\nconst rows: Row[] = [{ id: 1 }];\nconst first = rows[0]!;\ntext(first.id satisfies number);";
        let code = stripped(source);
        assert_eq!(code.lines().count(), source.lines().count());
        for (before, after) in source.lines().zip(code.lines()) {
            assert_eq!(before.len(), after.len(), "{before:?} -> {after:?}");
        }
        assert!(code.contains("const rows        = [{ id: 1 }];"), "{code}");
        assert!(!code.contains("interface"), "{code}");
        assert!(!code.contains("satisfies"), "{code}");
    }

    #[test]
    fn plain_javascript_is_unchanged() {
        let source = "const a = { b: 1 };\nfor (const x of [1, 2]) text(x < 2 ? a.b : x);\nawait tools.echo(1);";
        assert_eq!(stripped(source), source);
    }

    #[test]
    fn source_that_is_not_typescript_runs_as_written() {
        assert_eq!(strip_types("const = ;"), Ok(StrippedSource::AsWritten));
    }

    #[test]
    fn an_enum_is_refused_with_its_position_and_what_to_write_instead() {
        let error = strip_types("const a = 1;\n  enum Color { Red }\n").unwrap_err();
        assert!(
            error
                .error_text
                .starts_with("SyntaxError: TypeScript `enum`"),
            "{error:?}"
        );
        assert!(error.error_text.contains("const Color = {"), "{error:?}");
        assert!(error.error_text.ends_with("at cell.js:2:3"), "{error:?}");
    }

    #[test]
    fn parameter_properties_and_namespaces_are_refused_by_name() {
        let error = strip_types("class A { constructor(private x: number) {} }").unwrap_err();
        assert!(
            error.error_text.contains("parameter properties"),
            "{error:?}"
        );
        let error = strip_types("namespace N { export const a = 1; }").unwrap_err();
        assert!(error.error_text.contains("namespace"), "{error:?}");
    }
}
