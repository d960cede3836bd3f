//! `codemode run` end to end, through the built binary.

mod common;

use common::{CODEMODE, codemode_with_input};
use serde_json::Value;

fn codemode(args: &[&str], stdin: &str) -> std::process::Output {
    codemode_with_input(args, stdin)
}

fn run_json(args: &[&str], source: &str) -> (Value, i32) {
    let mut all = vec!["run", "--json"];
    all.extend_from_slice(args);
    all.push("-");
    let output = codemode(&all, source);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one JSON object on stdout: {stdout}"
    );
    (
        serde_json::from_str(lines[0]).unwrap(),
        output.status.code().unwrap(),
    )
}

fn texts(json: &Value) -> Vec<String> {
    json["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["text"].as_str().map(str::to_owned))
        .collect()
}

fn temporary_directory(name: &str) -> String {
    codemode_test_support::scratch_folder(&format!("cli-{name}"))
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_default_output_is_the_model_facing_rendering() {
    let output = codemode(&["run", "-"], r#"text("hello"); text({ n: 1 });"#);
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("Script completed"));
    assert!(lines.next().unwrap().starts_with("Wall time "));
    assert_eq!(
        lines.collect::<Vec<_>>(),
        ["Output:", "hello", r#"{"n":1}"#]
    );
}

#[test]
fn json_output_is_one_object_with_every_item_in_order() {
    let (json, code) = run_json(
        &[],
        r#"text("a"); image("data:image/png;base64,iVBORw0KGgo=", "low"); yield_control(); text("b");"#,
    );
    assert_eq!(code, 0);
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "status",
            "cell_id",
            "error_text",
            "error_hints",
            "items",
            "wall_time_ms"
        ]
    );
    assert_eq!(json["status"], "completed");
    assert_eq!(json["cell_id"], "1");
    assert_eq!(json["error_text"], Value::Null);
    assert!(json["wall_time_ms"].is_u64());
    assert_eq!(
        json["items"],
        serde_json::json!([
            {"type": "text", "text": "a"},
            {"type": "image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
            {"type": "text", "text": "b"}
        ])
    );
}

#[test]
fn a_failed_script_exits_1_with_its_error() {
    let (json, code) = run_json(&[], "text('before');\nthrow new Error('broken');");
    assert_eq!(code, 1);
    assert_eq!(json["status"], "failed");
    assert!(
        json["error_text"]
            .as_str()
            .unwrap()
            .starts_with("Error: broken")
    );
    assert_eq!(texts(&json), ["before"]);
}

#[test]
fn the_demo_tools_echo_and_sleep_work_and_can_be_left_out() {
    let (json, code) = run_json(
        &[],
        r#"text((await tools.echo({ x: 1 })).x); text(await tools.sleep({ ms: 20 }));"#,
    );
    assert_eq!(
        (code, texts(&json)),
        (0, vec!["1".to_owned(), "null".to_owned()])
    );
    let (json, code) = run_json(
        &["--no-demo-tools"],
        r#"text(ALL_TOOLS.length); await tools.echo(1);"#,
    );
    assert_eq!(code, 1);
    assert_eq!(texts(&json), ["0"]);
    assert!(
        json["error_text"]
            .as_str()
            .unwrap()
            .contains("tools.echo is not a function")
    );
}

#[test]
fn yield_time_ms_observes_in_steps_and_still_collects_everything() {
    let (json, code) = run_json(
        &["--yield-time-ms", "10"],
        r#"for (let i = 0; i < 5; i++) { text(`step ${i}`); await tools.sleep({ ms: 25 }); }"#,
    );
    assert_eq!(code, 0);
    assert_eq!(
        texts(&json),
        ["step 0", "step 1", "step 2", "step 3", "step 4"]
    );
}

#[test]
fn max_output_tokens_truncates_the_rendering() {
    let output = codemode(
        &["run", "--max-output-tokens", "10", "-"],
        r#"text("z".repeat(1000));"#,
    );
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains("[... output truncated: 1000 bytes (about 250 tokens) in all"),
        "{stdout}"
    );
}

#[test]
fn timeout_ms_terminates_an_endless_loop_and_keeps_its_output() {
    let (json, code) = run_json(
        &["--timeout-ms", "300"],
        r#"text("before the loop"); yield_control(); while (true) {}"#,
    );
    assert_eq!(code, 3);
    assert_eq!(json["status"], "terminated");
    assert_eq!(texts(&json), ["before the loop"]);
    let output = codemode(&["run", "--timeout-ms", "200", "-"], "for (;;) await null;");
    assert_eq!(output.status.code(), Some(3));
    assert!(
        String::from_utf8(output.stdout)
            .unwrap()
            .starts_with("Script terminated")
    );
}

#[test]
fn heap_and_cpu_limits_end_the_cell_with_an_error_naming_them() {
    let (json, code) = run_json(
        &["--heap-limit-mb", "16"],
        "const hoard = []; for (;;) hoard.push(new Array(100000).fill(1));",
    );
    assert_eq!(code, 1);
    assert!(
        json["error_text"]
            .as_str()
            .unwrap()
            .starts_with("heap limit exceeded"),
        "{json}"
    );
    assert!(
        json["error_text"].as_str().unwrap().contains("16 MiB"),
        "{json}"
    );
    let (json, code) = run_json(&["--cpu-limit-ms", "200"], "for (;;) {}");
    assert_eq!(code, 1);
    assert!(
        json["error_text"]
            .as_str()
            .unwrap()
            .starts_with("cpu time limit exceeded"),
        "{json}"
    );
}

#[test]
fn max_tool_calls_refuses_the_call_past_it_by_name() {
    let source = r#"let made = 0;
        try { for (;;) { await tools.echo(made); made++; } }
        catch (error) { text(made); text(error.message); }"#;
    let (json, code) = run_json(&["--max-tool-calls", "5"], source);
    assert_eq!(code, 0, "{json}");
    let shown = texts(&json);
    assert_eq!(shown[0], "5", "{json}");
    assert!(
        shown[1].contains("made 5 tool calls") && shown[1].contains("max_tool_calls"),
        "{json}"
    );
    // The same in-process, and by default the cap is far away.
    let (json, _) = run_json(
        &["--isolation", "in-process", "--max-tool-calls", "2"],
        "await tools.echo(1); await tools.echo(2); await tools.echo(3);",
    );
    assert!(
        json["error_text"]
            .as_str()
            .unwrap_or_default()
            .contains("made 2 tool calls"),
        "{json}"
    );
    let (json, _) = run_json(
        &[],
        "for (let i = 0; i < 200; i++) await tools.echo(i); text('ok')",
    );
    assert_eq!(texts(&json), ["ok"]);
}

#[test]
fn store_keeps_values_across_runs() {
    let directory = temporary_directory("store");
    let source = r#"const runs = (load("runs") ?? 0) + 1; store("runs", runs); text(runs);"#;
    let (first, _) = run_json(&["--store", &directory], source);
    let (second, _) = run_json(&["--store", &directory], source);
    assert_eq!(
        (texts(&first), texts(&second)),
        (vec!["1".to_owned()], vec!["2".to_owned()])
    );
    let (other, _) = run_json(&["--store", &directory, "--session", "other"], source);
    assert_eq!(texts(&other), ["1"]);
    let (memory, _) = run_json(&[], source);
    assert_eq!(texts(&memory), ["1"]);
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn mcp_servers_join_the_cells_tools() {
    let server = format!("demo={CODEMODE} demo-mcp-server");
    let (json, code) = run_json(
        &["--mcp", &server],
        r#"text((await tools.demo__add({ a: 1, b: 2 })).structuredContent.sum);"#,
    );
    assert_eq!((code, texts(&json)), (0, vec!["3".to_owned()]));
    // Without a name, the namespace is the program's name.
    let unnamed = format!("{CODEMODE} demo-mcp-server");
    let (json, _) = run_json(
        &["--mcp", &unnamed],
        r#"text(ALL_TOOLS.map((tool) => tool.name).filter((name) => name.includes("__")));"#,
    );
    assert_eq!(
        texts(&json),
        [
            r#"["codemode__add","codemode__fail","codemode__forget","codemode__image","codemode__log","codemode__note","codemode__pid","codemode__sleep","codemode__traceparent"]"#
        ]
    );
}

#[test]
fn a_file_argument_and_its_pragma_are_honoured() {
    let directory = temporary_directory("file");
    std::fs::create_dir_all(&directory).unwrap();
    let path = format!("{directory}/script.js");
    std::fs::write(
        &path,
        "// @exec: {\"max_output_tokens\": 5}\ntext(\"x\".repeat(100));",
    )
    .unwrap();
    let output = codemode(&["run", &path], "");
    assert_eq!(output.status.code(), Some(0));
    assert!(
        String::from_utf8(output.stdout)
            .unwrap()
            .contains("output truncated")
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    let cases: [(&[&str], &str, &str); 4] = [
        (&["run", "-"], "   \n", "error: exec received no code"),
        (
            &["run", "-"],
            "// @exec: {\"yield\": 1}\ntext(1)",
            "error: invalid @exec pragma: unknown key \"yield\"",
        ),
        (
            &["run", "--frobnicate", "-"],
            "",
            "unexpected argument '--frobnicate'",
        ),
        (
            &["run", "/nonexistent/script.js"],
            "",
            "error: cannot read /nonexistent/script.js: No such file or directory",
        ),
    ];
    for (args, stdin, message) in cases {
        let output = codemode(args, stdin);
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    let output = codemode(&["run", "--mcp", "   ", "-"], "text(1)");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("--mcp '   ' names no command")
    );
}

#[test]
fn notifications_are_shown_on_stderr() {
    let output = codemode(&["run", "-"], r#"notify("halfway there"); text("done");"#);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("[notify] halfway there")
    );
}

#[test]
fn a_typescript_cell_runs_from_the_command_line() {
    let (json, code) = run_json(
        &[],
        "interface Point { x: number; y: number }\nconst p: Point = { x: 1, y: 2 };\nconst sum = <T extends number>(a: T, b: T): number => a + b;\ntext(sum(p.x, p.y) satisfies number);",
    );
    assert_eq!(code, 0, "{json}");
    assert_eq!(texts(&json), ["3"]);
}

#[test]
fn a_typescript_enum_fails_with_what_to_write_instead() {
    let (json, code) = run_json(&[], "enum Mode { A }\ntext(Mode.A);");
    assert_eq!(code, 1, "{json}");
    let error = json["error_text"].as_str().unwrap();
    assert!(error.contains("TypeScript `enum`"), "{error}");
}

#[test]
fn json_output_carries_the_error_hints_of_the_rendering() {
    let (json, code) = run_json(&[], "text(1);\nconst hits = await tools.ecoh({ q: 1 });");
    assert_eq!(code, 1, "{json}");
    let hints: Vec<&str> = json["error_hints"]
        .as_array()
        .expect("error_hints is an array")
        .iter()
        .map(|hint| hint.as_str().unwrap())
        .collect();
    assert_eq!(hints.len(), 2, "{json}");
    assert!(hints[0].starts_with("at line 2, column"), "{hints:?}");
    assert!(
        hints[0].contains("2 | const hits = await tools.ecoh({ q: 1 });"),
        "{hints:?}"
    );
    assert!(hints[1].contains("Closest tools: tools.echo"), "{hints:?}");
    let (completed, _) = run_json(&[], "text(1)");
    assert_eq!(completed["error_hints"], serde_json::json!([]));
}

#[test]
fn a_script_awaiting_a_promise_nothing_can_settle_fails_at_once() {
    let (json, code) = run_json(&[], "text(\"waiting\");\nawait new Promise(() => {});");
    assert_eq!(code, 1, "{json}");
    assert_eq!(texts(&json), ["waiting"]);
    assert!(
        json["error_text"]
            .as_str()
            .unwrap()
            .starts_with("the script awaits a promise that nothing can settle"),
        "{json}"
    );
}

#[test]
fn nothing_a_cell_does_reaches_standard_output_beside_the_one_json_object() {
    // An uncaught error in a FinalizationRegistry callback has nobody to go to: V8 would print it
    // on file descriptor 1, forging lines in the JSON (or in the MCP channel).
    let source = r#"
        const registry = new FinalizationRegistry(() => {
            throw new Error('\n{"jsonrpc":"2.0","method":"notifications/message","params":{}}');
        });
        for (let i = 0; i < 20; i++) registry.register({}, i);
        let junk = [];
        for (let i = 0; i < 200; i++) {
            junk.push(new Array(100000).fill(i));
            if (junk.length > 20) junk = [];
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
        text("done");
    "#;
    let (json, code) = run_json(&[], source);
    assert_eq!(code, 0, "{json}");
    assert_eq!(texts(&json), ["done"]);
}

/// V8 cells run in engine processes on the pinned Node 24's V8 13.6 once `cargo xtask setup-v8`
/// has built its engine library (a debug build finds it in the repository's target), which runs
/// `using` declarations and has `Float16Array`. This program links no V8: in-process cells run on
/// QuickJS, in-process V8 cells are refused with what to do instead, and so is an engine library
/// that is not there.
#[test]
fn v8_cells_run_on_node_24s_v8_in_engine_processes_and_nowhere_else() {
    let source =
        "{ using held = { [Symbol.dispose]() { text(`disposed ${typeof Float16Array}`); } }; }";
    let (json, code) = run_json(&["--engine", "v8", "--isolation", "process"], source);
    assert_eq!(
        (code, &json["status"]),
        (0, &Value::from("completed")),
        "{json}"
    );
    assert_eq!(texts(&json), ["disposed function"]);
    let in_process = codemode(
        &["run", "--engine", "v8", "--isolation", "in-process", "-"],
        source,
    );
    let stderr = String::from_utf8_lossy(&in_process.stderr);
    assert_eq!(in_process.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("V8 cells run only in engine processes")
            && stderr.contains("--engine quickjs"),
        "{stderr}"
    );
    // Unnamed, the engine of in-process cells is QuickJS (which has no `Intl`).
    let (json, code) = run_json(&["--isolation", "in-process"], "text(typeof Intl)");
    assert_eq!(
        (code, texts(&json)),
        (0, vec!["undefined".to_owned()]),
        "{json}"
    );
    let missing = temporary_directory("no-library") + "/libcodemode_v8_engine.so";
    let named = codemode(
        &["run", "--engine", "v8", "--v8-library", &missing, "-"],
        source,
    );
    let stderr = String::from_utf8_lossy(&named.stderr);
    assert_eq!(named.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&missing), "{stderr}");
}

/// Engine processes run as `--engine-user`, which must reach `node` and the engine library: one
/// kept in a folder closed to that user (root's home, say) is refused before any cell runs, with
/// the folder named and what to do instead.
#[test]
fn an_engine_library_the_engine_user_cannot_reach_is_refused_naming_the_folder() {
    use std::os::unix::fs::PermissionsExt;
    let folder = std::path::PathBuf::from(temporary_directory("closed-library")).join("private");
    std::fs::create_dir_all(&folder).unwrap();
    // Only the path is checked before anything starts: stand-ins are enough.
    for file in ["node", "libcodemode_v8_engine.so"] {
        std::fs::write(folder.join(file), "").unwrap();
        std::fs::set_permissions(folder.join(file), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
    let library = folder.join("libcodemode_v8_engine.so");
    let output = codemode(
        &[
            "run",
            "--engine",
            "v8",
            "--engine-user",
            "nobody",
            "--v8-library",
            library.to_str().unwrap(),
            "-",
        ],
        "text(1)",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("--engine-user")
            && stderr.contains(&format!("{} is closed to it", folder.display()))
            && stderr.contains("--v8-library"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no cell ran");
}
