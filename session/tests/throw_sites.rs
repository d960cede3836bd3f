//! A thrown value that is not an `Error` still has its position, on QuickJS: the session marks
//! each `throw` (positions kept), the engine records where a marked throw threw.

mod common;

use std::sync::Arc;

use codemode_session::{CellEvent, SessionConfig};
use common::{MemoryStore, execute, open, request, texts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throw_of_any_value_reports_its_line_and_column_and_the_code_frame_shows_it() {
    let store = Arc::new(MemoryStore::default());
    let (session, _) = open("throw-sites", &store, SessionConfig::default()).await;
    for (source, error, frame) in [
        (
            "text(\"before\");\nconst code: number = 7;\n  throw { code };",
            "#<Object>\n    at cell.js:3:3",
            "3 |   throw { code };",
        ),
        (
            "text(\"before\");\nawait 1;\nif (true) throw null;",
            "null\n    at cell.js:3:11",
            "3 | if (true) throw null;",
        ),
        (
            "text(\"before\");\nconst fail = async () => { throw \"no\"; };\nawait fail();",
            "no\n    at cell.js:2:28",
            "2 | const fail = async () => { throw \"no\"; };",
        ),
    ] {
        let report = execute(&session, "throw", request(source)).await;
        let CellEvent::Completed {
            error_text: Some(error_text),
            ..
        } = &report.event
        else {
            panic!("{source}: the cell fails: {report:?}");
        };
        assert_eq!(error_text, error, "{source}");
        // What the cell showed before it threw is kept.
        assert_eq!(texts(&report.event), ["before"], "{source}");
        // The code frame shows the source as written, `throw` and all.
        let hints = report.error_hints.join("\n\n");
        assert!(hints.contains(frame), "{source}: {hints}");
    }
}
