//! TypeScript cells on QuickJS: types are erased before the engine runs the source, positions are
//! kept, and constructs that need a transform are refused by name.

mod common;

use std::sync::Arc;

use codemode_session::{CellEvent, CellReport, SessionConfig};
use common::{MemoryStore, execute, open, request, texts};

fn error_text(report: &CellReport) -> &str {
    match &report.event {
        CellEvent::Completed {
            error_text: Some(error_text),
            ..
        } => error_text,
        other => panic!("expected a failed cell: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_generics_interfaces_and_satisfies_run() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("ts", &store, SessionConfig::default()).await;
    let source = r#"
interface Row { id: number; name?: string }
type Rows = Row[];
declare const nothing: unknown;
import type { Something } from "nowhere";
function first<T>(items: T[]): T | undefined { return items[0]; }
const rows: Rows = (await tools.echo([{ id: 1, name: "a" }, { id: 2 }])) as Rows;
const config = { limit: 2 } satisfies Record<string, number>;
const top = first<Row>(rows)!;
class Counter<T> { private count: number = 0; add(item: T): this { this.count++; return this; } get total(): number { return this.count; } }
text(`${top.name} ${rows.length} ${config.limit} ${new Counter<string>().add("x").total}`);
"#;
    let report = execute(&session, "typescript", request(source)).await;
    assert!(
        matches!(
            report.event,
            CellEvent::Completed {
                error_text: None,
                ..
            }
        ),
        "{report:?}"
    );
    assert_eq!(texts(&report.event), ["a 2 2 1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_a_typescript_cell_points_at_the_line_and_column_the_model_wrote() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("ts-error", &store, SessionConfig::default()).await;
    let source = "const items: Array<{ id: number }> = [];\nconst label: string = (items[0] as { id: number }).id.toFixed(2);";
    let report = execute(&session, "typescript error", request(source)).await;
    let error = error_text(&report);
    assert!(error.contains("cell.js:2:"), "{error}");
    let hint = report.error_hints.join("\n\n");
    // The code frame shows the source as written, types included, with the caret under `.id`.
    assert!(
        hint.contains("2 | const label: string = (items[0] as { id: number }).id.toFixed(2);"),
        "{hint}"
    );
    let column: usize = error
        .split("cell.js:2:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .expect("a column");
    let line = source.lines().nth(1).unwrap();
    // QuickJS points at the start of the failing member expression: `items[0]`, after the
    // stripped `: string` on the same line, so the column is the one the model wrote.
    assert!(
        line[column - 1..].starts_with("items[0] as {"),
        "the column points into the original line: {column} in {line:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enum_fails_by_name_with_what_to_write_instead_and_runs_nothing() {
    let store = Arc::new(MemoryStore::default());
    let (session, tools) = open("ts-enum", &store, SessionConfig::default()).await;
    let source = "await tools.echo(1);\nenum Color { Red, Green }\ntext(Color.Red);";
    let report = execute(&session, "enum", request(source)).await;
    let error = error_text(&report);
    assert!(error.contains("TypeScript `enum`"), "{error}");
    assert!(error.contains("as const"), "{error}");
    assert!(error.ends_with("at cell.js:2:1"), "{error}");
    assert!(
        report
            .error_hints
            .join("\n\n")
            .contains("2 | enum Color { Red, Green }"),
        "{report:?}"
    );
    assert!(tools.calls.lock().unwrap().is_empty(), "the cell ran");
    assert_eq!(session.active_cells(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_syntax_error_is_still_reported_by_the_engine() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("js-syntax", &store, SessionConfig::default()).await;
    let report = execute(&session, "syntax", request("text(1);\nconst = 2;")).await;
    let error = error_text(&report);
    assert!(error.starts_with("SyntaxError"), "{error}");
    assert!(error.contains("cell.js:2:"), "{error}");
}
