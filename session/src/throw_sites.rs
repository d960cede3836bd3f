//! `throw` statements that report where they threw, whatever they throw.
//!
//! A JavaScript engine keeps no position for a thrown value that is not an `Error` (`throw null`,
//! `throw { code: 1 }` from a module's body): the cell's error text would say only what was
//! thrown. So each `throw` statement of a cell runs as an assignment to the throw-site object's
//! property, whose setter every engine defines to record the position and throw the value:
//! `throw x;` runs as `$$.t= x;` (`codemode_engine::globals::THROW_SITE_MARKER`). The two are the
//! same length, so every line and column of the cell stays the model's own. The object is
//! imported from the throw-site module by a line appended to the cell
//! (`codemode_engine::globals::THROW_SITE_IMPORT`; imports are hoisted), so it is a binding of
//! the cell's module, not a global: the cell's `globalThis` is the same whether it was marked or
//! not.
//!
//! Only statements whose meaning the assignment keeps are marked: the argument of `throw` is any
//! expression, and an assignment's right-hand side is any expression but a comma sequence
//! (`throw a, b` throws `b`; `$$.t= a, b` would throw `a`), so a sequence is left as written. A
//! cell that names the binding itself (`$$`) or the module is left as written, and so is one the
//! parser rejects (the engine reports its syntax error). Cells without the word `throw` are not
//! parsed at all.

use codemode_engine::globals::{
    THROW_SITE_BINDING, THROW_SITE_IMPORT, THROW_SITE_MARKER, THROW_SITE_MODULE,
};
use swc_common::BytePos;
use swc_ecma_ast::{EsVersion, Expr, Ident, ThrowStmt};
use swc_ecma_parser::{EsSyntax, Lexer, Parser, StringInput, Syntax};
use swc_ecma_visit::{Visit, VisitWith};

/// `source` with each `throw` statement that can be marked written as an assignment to the
/// throw-site object, and the object's import appended; `None` when nothing was marked (run
/// `source` as it is).
pub(crate) fn mark_throw_sites(source: &str) -> Option<String> {
    if !source.contains("throw") || source.contains(THROW_SITE_MODULE) {
        return None;
    }
    // The parser is third-party code reading hostile input: if it panics, the cell runs unmarked.
    let starts = std::panic::catch_unwind(|| throw_keyword_offsets(source))
        .ok()
        .flatten()?;
    if starts.is_empty() {
        return None;
    }
    let mut marked = String::with_capacity(source.len() + THROW_SITE_IMPORT.len());
    let mut copied = 0;
    for start in starts {
        if start < copied || source.get(start..start + "throw".len()) != Some("throw") {
            // Not where the parser said: leave the cell as written rather than guess.
            return None;
        }
        marked.push_str(&source[copied..start]);
        marked.push_str(THROW_SITE_MARKER);
        copied = start + "throw".len();
    }
    marked.push_str(&source[copied..]);
    marked.push_str(THROW_SITE_IMPORT);
    Some(marked)
}

/// The byte offsets of the `throw` keywords to mark, in order; `None` when `source` does not parse
/// as a module, or names the throw-site binding itself.
fn throw_keyword_offsets(source: &str) -> Option<Vec<usize>> {
    // Positions start at 1: swc keeps 0 for spans that point nowhere.
    let start = BytePos(1);
    let end = BytePos(u32::try_from(source.len()).ok()?.checked_add(1)?);
    let input = StringInput::new(source, start, end);
    let lexer = Lexer::new(
        Syntax::Es(EsSyntax::default()),
        EsVersion::latest(),
        input,
        None,
    );
    let mut parser = Parser::new_from(lexer);
    let module = parser.parse_module().ok()?;
    if !parser.take_errors().is_empty() {
        return None;
    }
    let mut finder = ThrowFinder::default();
    module.visit_with(&mut finder);
    if finder.names_the_binding {
        return None;
    }
    let mut offsets: Vec<usize> = finder
        .starts
        .into_iter()
        .map(|position| (position.0 - start.0) as usize)
        .collect();
    offsets.sort_unstable();
    Some(offsets)
}

/// Collects where each markable `throw` statement starts, and whether the cell names the
/// throw-site binding (as a variable of its own, or one it expects to find).
#[derive(Default)]
struct ThrowFinder {
    starts: Vec<BytePos>,
    names_the_binding: bool,
}

impl Visit for ThrowFinder {
    fn visit_throw_stmt(&mut self, statement: &ThrowStmt) {
        if !matches!(*statement.arg, Expr::Seq(_)) {
            self.starts.push(statement.span.lo);
        }
        // A throw inside the argument (in a function expression) is a statement of its own.
        statement.visit_children_with(self);
    }

    fn visit_ident(&mut self, ident: &Ident) {
        if &*ident.sym == THROW_SITE_BINDING {
            self.names_the_binding = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_throw_becomes_an_assignment_of_the_same_length() {
        let source = "if (a) throw null;\nconst f = () => { throw{ code: 1 } };\nthrow(\"x\");";
        let marked = mark_throw_sites(source).unwrap();
        let (body, import) = marked.split_at(source.len());
        assert_eq!(
            body,
            "if (a) $$.t= null;\nconst f = () => { $$.t={ code: 1 } };\n$$.t=(\"x\");"
        );
        assert_eq!(import, "\nimport { $$ } from \"codemode:throw-site\";");
    }

    #[test]
    fn the_word_throw_outside_a_throw_statement_is_left_alone() {
        let source = "const throwing = \"throw it\"; // throw\nlet o = { throw: 1 }; o.throw;\n\
                      const t = `throw ${1}`; const r = /throw/; throw new Error(\"throw\");";
        let marked = mark_throw_sites(source).unwrap();
        assert_eq!(
            marked,
            source.replace("throw new Error", "$$.t= new Error") + THROW_SITE_IMPORT
        );
    }

    #[test]
    fn what_the_assignment_would_change_or_cannot_read_is_left_as_written() {
        // A comma sequence: the assignment would throw its first value, not its last.
        assert_eq!(mark_throw_sites("throw 1, 2;"), None);
        // Nested: the inner throw is marked, the sequence is not.
        assert_eq!(
            mark_throw_sites("throw (() => { throw 1; }), 2;").as_deref(),
            Some(format!("throw (() => {{ $$.t= 1; }}), 2;{THROW_SITE_IMPORT}").as_str())
        );
        // The cell names the binding itself, or the module.
        assert_eq!(mark_throw_sites("let $$ = 1; throw 2;"), None);
        assert_eq!(mark_throw_sites("throw $$;"), None);
        assert_eq!(
            mark_throw_sites("text(\"codemode:throw-site\"); throw 2;"),
            None
        );
        // `$$` in a string or a template is not the binding.
        assert!(mark_throw_sites("text(`$${1}`); throw 2;").is_some());
        // Not a module the parser reads: the engine reports the error.
        assert_eq!(mark_throw_sites("throw ;"), None);
        // No throw at all: not parsed.
        assert_eq!(mark_throw_sites("text(1)"), None);
        // Non-ASCII text before a throw keeps its offsets.
        assert_eq!(
            mark_throw_sites("text(\"é🙂\"); throw 1;").as_deref(),
            Some(format!("text(\"é🙂\"); $$.t= 1;{THROW_SITE_IMPORT}").as_str())
        );
    }
}
