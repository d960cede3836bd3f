//! The adversarial corpus: hostile cells and hostile MCP requests, each sent to one real
//! `codemode mcp` server (engine processes, a file store), with a mechanical verdict. Every case
//! must end with the expected outcome and a clear error, keep the output it emitted before a limit,
//! and leave the server alive and the store intact (checked after every case).
//!
//! By default the binary under test is the one built for these tests; CI also runs the corpus
//! against the release binary by setting `CODEMODE_CORPUS_BINARY`. The counts by category are
//! printed (`--nocapture` shows them).

#![allow(deprecated)] // MCP logging notifications.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult, LoggingMessageNotificationParam};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};

mod common;

use common::text_of;

/// How a cell must end.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Completed,
    /// Failed, with an error that contains one of these.
    Failed(&'static [&'static str]),
    /// Still running after a short yield; terminated through `wait`.
    TerminatedByWait,
}

use Outcome::*;

struct Case {
    category: &'static str,
    name: &'static str,
    code: &'static str,
    outcome: Outcome,
    /// Text the cell emits before its limit, which must be in its output.
    kept: Option<&'static str>,
}

const fn case(
    category: &'static str,
    name: &'static str,
    code: &'static str,
    outcome: Outcome,
    kept: Option<&'static str>,
) -> Case {
    Case {
        category,
        name,
        code,
        outcome,
        kept,
    }
}

const HEAP: &[&str] = &["heap limit exceeded"];
const CPU: &[&str] = &["cpu time limit exceeded"];
const ANY_LIMIT: &[&str] = &[
    "heap limit exceeded",
    "cpu time limit exceeded",
    "Invalid",
    "allocation failed",
];

const CASES: &[Case] = &[
    // ---- memory ----
    case(
        "memory",
        "one huge ArrayBuffer",
        r#"text("before"); new ArrayBuffer(2**32)"#,
        Failed(&[
            // V8 past the heap limit; QuickJS past the longest buffer it makes.
            "heap limit exceeded",
            "Invalid array buffer length",
            // QuickJS's wording
            "invalid array buffer length",
        ]),
        Some("before"),
    ),
    case(
        "memory",
        "ArrayBuffers until the limit",
        r#"text("before"); const a = []; for (;;) a.push(new ArrayBuffer(1 << 24))"#,
        Failed(ANY_LIMIT),
        Some("before"),
    ),
    case(
        "memory",
        "typed arrays until the limit",
        r#"text("before"); const a = []; for (;;) a.push(new Float64Array(1 << 21))"#,
        Failed(ANY_LIMIT),
        Some("before"),
    ),
    case(
        "memory",
        "strings flattened past the heap",
        r#"text("before");const a="x".repeat(2**29-24);a.indexOf("y");const b="y".repeat(2**29-24);b.indexOf("x")"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "string doubling",
        r#"text("before"); let s = "x"; for (;;) s += s;"#,
        // V8's wording, then QuickJS's
        Failed(&["Invalid string length", "string too long"]),
        Some("before"),
    ),
    case(
        "memory",
        "Array.prototype.fill of a billion",
        r#"text("before"); new Array(1e9).fill(0)"#,
        // V8 13.6 reaches the largest dictionary it allows before the heap limit, and ends the
        // process: the cell is told it ran out of memory.
        Failed(&[
            "heap limit exceeded",
            "cpu time limit exceeded",
            "out of memory: the cell asked for more memory than its engine can give one cell",
        ]),
        Some("before"),
    ),
    case(
        "memory",
        "Map growth",
        r#"text("before"); const m = new Map(); for (let i = 0; ; i++) m.set(i, {i})"#,
        Failed(&[
            "heap limit exceeded",
            "cpu time limit exceeded",
            "Map maximum size",
        ]),
        Some("before"),
    ),
    case(
        "memory",
        "object key growth",
        r#"text("before"); const o = {}; for (let i = 0; ; i++) o["k" + i] = i"#,
        Failed(ANY_LIMIT),
        Some("before"),
    ),
    case(
        "memory",
        "JSON bomb: deep stringify",
        r#"text("before"); let o = {}, x = o; for (let i = 0; i < 1e6; i++) { x.a = {}; x = x.a } JSON.stringify(o)"#,
        Failed(&["Maximum call stack size exceeded"]),
        Some("before"),
    ),
    case(
        "memory",
        "JSON bomb: deep parse",
        r#"text("before"); JSON.parse("[".repeat(1e7) + "]".repeat(1e7))"#,
        Failed(&[
            "Maximum call stack size exceeded",
            "heap limit exceeded",
            "cpu time limit exceeded",
        ]),
        Some("before"),
    ),
    case(
        "memory",
        "JSON bomb: wide parse",
        r#"text("before"); JSON.parse("[" + "1,".repeat(2e8) + "1]")"#,
        // A text that could make an array longer than V8 can hold is refused before V8 ends its
        // process over it; QuickJS reaches the heap limit.
        Failed(&[
            "heap limit exceeded",
            "cpu time limit exceeded",
            "larger than the engine can hold",
        ]),
        Some("before"),
    ),
    // Each allocation a built-in makes is held to the heap limit (256 MiB here), however the
    // built-in makes it: V8 builds some results without checking it, and ends its process over
    // an array longer than it can hold (134,217,725 elements).
    case(
        "memory",
        "a global match's result past the heap limit",
        r#"text("before"); "a".repeat(1e8).match(/a/g)"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "a global match longer than V8's longest array",
        r#"text("before"); "a".repeat(2e8).match(/a/g)"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "a split past the heap limit",
        r#"text("before"); "a".repeat(1e8).split("")"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "a split longer than V8's longest array, by a string and by a regular expression",
        r#"text("before"); try { "a".repeat(2e8).split("") } catch { text("caught") } "a,".repeat(1.5e8).split(/,/)"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "concat past the heap limit",
        r#"text("before"); const a = new Array(1e7).fill(1); a.concat(a, a, a, a, a, a, a)"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "a typed array past the heap limit",
        r#"text("before"); try { new Float64Array(5e7) } catch { text("caught, and retried") } new Float64Array(5e7)"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "JSON.parse past the heap limit",
        r#"text("before"); JSON.parse("[" + "1,".repeat(6e7) + "1]")"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "a string built past the heap limit",
        r#"text("before"); text("x".repeat(2e8).toUpperCase().length)"#,
        Failed(HEAP),
        Some("before"),
    ),
    case(
        "memory",
        "deep recursion",
        r#"text("before"); function f(n) { return f(n + 1) + 1 } f(0)"#,
        Failed(&["Maximum call stack size exceeded"]),
        Some("before"),
    ),
    case(
        "memory",
        "a stored value past the limit",
        r#"text("before"); store("big", "x".repeat(1e8))"#,
        // V8 makes the JSON and store() refuses it; QuickJS runs out of heap making it.
        Failed(&["past the limit of 64 MiB per cell", "heap limit exceeded"]),
        Some("before"),
    ),
    case(
        "memory",
        "a tool argument past the limit",
        r#"text("before"); await tools.echo("x".repeat(2e7))"#,
        Failed(&["past the limit of 16 MiB"]),
        Some("before"),
    ),
    case(
        "memory",
        "forty unawaited large tool calls",
        r#"const big = "x".repeat(4e6); for (let i = 0; i < 40; i++) tools.echo([big]); text("after")"#,
        Completed,
        Some("after"),
    ),
    // ---- cpu ----
    case(
        "cpu",
        "sync loop",
        r#"text("before"); while (true) {}"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "microtask loop",
        r#"text("before"); function f() { Promise.resolve().then(f) } f(); await new Promise(() => {})"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "timer loop",
        r#"text("before"); function t() { setTimeout(t, 0) } t(); await new Promise(() => {})"#,
        TerminatedByWait,
        Some("before"),
    ),
    case(
        "cpu",
        "tool loop",
        // Stopped by the cap on a cell's tool calls (--max-tool-calls: TOOL_CALLS_FOR_CPU_CASES
        // on the server of these cases), not left to hammer the tool until someone terminates it.
        r#"text("before"); for (;;) await tools.echo(1)"#,
        Failed(&["max_tool_calls"]),
        Some("before"),
    ),
    case(
        "cpu",
        "catastrophic regex",
        r#"text("before"); /(a+)+b/.test("a".repeat(40))"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "comparator spin",
        r#"text("before"); [3, 2, 1].sort(() => { while (true) {} })"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "getter spin inside JSON.stringify",
        r#"text("before"); JSON.stringify({ get a() { while (true) {} } })"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "getter spin inside text",
        r#"text("before"); text({ get a() { while (true) {} } })"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "async generator loop",
        r#"text("before"); for await (const x of (async function* () { while (true) yield 1 })()) {}"#,
        Failed(CPU),
        Some("before"),
    ),
    case(
        "cpu",
        "long built-in: sort of a big array",
        r#"text("before"); const a = Array.from({length: 3e6}, (_, i) => -i); for (;;) a.sort()"#,
        // V8 sorts until the CPU limit; QuickJS caches each element's string and reaches the heap
        // limit first.
        Failed(ANY_LIMIT),
        Some("before"),
    ),
    case(
        "cpu",
        "spin while a tool call is pending",
        r#"text("before"); tools.sleep({ms: 100000}); while (true) {}"#,
        Failed(CPU),
        Some("before"),
    ),
    // ---- output floods ----
    case(
        "output",
        "many small items",
        r#"for (let i = 0; i < 200000; i++) text(String(i)); text("end")"#,
        Completed,
        None,
    ),
    case(
        "output",
        "megabytes of text",
        r#"text("before"); const s = "x".repeat(1 << 20); for (let i = 0; i < 300; i++) text(s)"#,
        Completed,
        Some("before"),
    ),
    case(
        "output",
        "one item bigger than the budget",
        r#"text("before"); text("y".repeat(100 << 20))"#,
        Completed,
        Some("before"),
    ),
    case(
        "output",
        "images",
        r#"text("before"); for (let i = 0; i < 500; i++) image("data:image/png;base64," + "A".repeat(1e5))"#,
        Completed,
        Some("before"),
    ),
    case(
        "output",
        "notifications",
        r#"text("before"); for (let i = 0; i < 10000; i++) notify("n" + i)"#,
        Completed,
        Some("before"),
    ),
    case(
        "output",
        "a notification of fifty megabytes",
        r#"text("before"); notify("x".repeat(50 << 20))"#,
        Failed(&["past the limit"]),
        Some("before"),
    ),
    // ---- weird values ----
    case(
        "values",
        "a lone surrogate in text",
        r#"text("before"); text("\uD800 alone")"#,
        Completed,
        Some("before"),
    ),
    case(
        "values",
        "a lone surrogate in a stored value",
        r#"text("before"); store("k", "\uD800")"#,
        Failed(&["lone surrogate"]),
        Some("before"),
    ),
    case(
        "values",
        "a cycle in a stored value",
        r#"text("before"); const a = {}; a.a = a; store("c", a)"#,
        Failed(&["circular"]),
        Some("before"),
    ),
    case(
        "values",
        "a throwing getter in a stored value",
        r#"text("before"); store("k", { get x() { throw new Error("getter boom") } })"#,
        Failed(&["getter boom"]),
        Some("before"),
    ),
    case(
        "values",
        "a throwing toJSON",
        r#"text("before"); store("k", { toJSON() { throw new Error("toJSON boom") } })"#,
        Failed(&["toJSON boom"]),
        Some("before"),
    ),
    case(
        "values",
        "a Proxy whose traps throw",
        r#"text("before"); text(new Proxy({}, { get() { throw new Error("proxy boom") } }))"#,
        Failed(&["proxy boom"]),
        Some("before"),
    ),
    case(
        "values",
        "a revoked Proxy as a tool argument",
        r#"text("before"); const p = Proxy.revocable({}, {}); p.revoke(); await tools.echo(p.proxy)"#,
        Failed(&["revoked"]),
        Some("before"),
    ),
    case(
        "values",
        "a BigInt stored",
        r#"text("before"); text(10n); store("b", 1n)"#,
        Failed(&["BigInt"]),
        Some("10"),
    ),
    case(
        "values",
        "a symbol as text",
        r#"text("before"); text(Symbol("s"))"#,
        Completed,
        Some("Symbol(s)"),
    ),
    case(
        "values",
        "undefined stored",
        r#"text("before"); store("u", undefined)"#,
        Failed(&["Only plain serializable"]),
        Some("before"),
    ),
    case(
        "values",
        "a thrown non-error",
        r#"text("before"); throw { toString() { throw new Error("nested") } }"#,
        Failed(&[""]),
        Some("before"),
    ),
    case(
        "values",
        "a rejected promise of a symbol",
        r#"text("before"); await Promise.reject(Symbol("x"))"#,
        Failed(&["Symbol"]),
        Some("before"),
    ),
    // ---- global tampering ----
    case(
        "globals",
        "text replaced",
        r#"globalThis.text = null; text("x")"#,
        Failed(&["not a function"]),
        None,
    ),
    case(
        "globals",
        "JSON replaced before store",
        r#"JSON.stringify = () => { throw new Error("tampered") }; JSON.parse = null; store("k", {a: 1}); text(String(load("k").a))"#,
        Completed,
        Some("1"),
    ),
    case(
        "globals",
        "Promise.prototype.then replaced",
        r#"text("before"); Promise.prototype.then = function () { throw new Error("then tampered") }; const r = await tools.echo(7); text(String(r))"#,
        Completed,
        Some("before"),
    ),
    case(
        "globals",
        "Object.prototype polluted",
        r#"Object.prototype.toJSON = () => "polluted"; Object.prototype.then = (r) => r(1); store("p", {a: 1}); text("stored")"#,
        Completed,
        Some("stored"),
    ),
    case(
        "globals",
        "tools deleted",
        r#"delete globalThis.tools; text("ok")"#,
        Completed,
        Some("ok"),
    ),
    case(
        "globals",
        "Error.prepareStackTrace reaching for host objects",
        r#"Error.prepareStackTrace = (e, frames) => frames.map((f) => String(f.getThis?.()) + String(f.getFunction?.())).join("|"); text(String(new Error("x").stack)); await tools.echo(1).then(() => { throw new Error("y") }).catch((e) => text(String(e.stack)))"#,
        Completed,
        None,
    ),
    // ---- exit in odd places ----
    case(
        "exit",
        "exit mid-cell",
        r#"text("before"); exit(); text("after")"#,
        Completed,
        Some("before"),
    ),
    case(
        "exit",
        "exit in a microtask",
        r#"text("before"); await Promise.resolve().then(() => exit()); text("after")"#,
        Completed,
        Some("before"),
    ),
    case(
        "exit",
        "exit in a timer",
        r#"text("before"); setTimeout(() => exit(), 10); await new Promise(() => {})"#,
        Completed,
        Some("before"),
    ),
    case(
        "exit",
        "exit in a getter during store",
        r#"text("before"); store("k", { get x() { exit() } })"#,
        Completed,
        Some("before"),
    ),
    case(
        "exit",
        "exit in a try with finally",
        r#"text("before"); try { exit() } finally { text("finally ran") }"#,
        Completed,
        Some("before"),
    ),
    case(
        "exit",
        "exit in a FinalizationRegistry callback",
        r#"text("before"); new FinalizationRegistry(() => exit()).register({}, 1); for (let i = 0; i < 1e5; i++) ({a: new Array(100)}); await tools.echo(1)"#,
        Completed,
        Some("before"),
    ),
    // ---- escape attempts ----
    case(
        "escape",
        "dynamic import",
        r#"text("before"); await import("fs")"#,
        Failed(&["Unsupported import"]),
        Some("before"),
    ),
    case(
        "escape",
        "static import",
        r#"import fs from "fs"; text(typeof fs)"#,
        Failed(&["import"]),
        None,
    ),
    case(
        "escape",
        "require",
        r#"text("before"); require("fs")"#,
        Failed(&["require is not defined"]),
        Some("before"),
    ),
    case(
        "escape",
        "process",
        r#"text("before"); process.exit(1)"#,
        Failed(&["process is not defined"]),
        Some("before"),
    ),
    case(
        "escape",
        "WebAssembly",
        r#"text("before"); new WebAssembly.Module(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]))"#,
        Failed(&["WebAssembly is not defined"]),
        Some("before"),
    ),
    case(
        "escape",
        "SharedArrayBuffer and Atomics.wait",
        r#"text("before"); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)"#,
        Failed(&["is not defined"]),
        Some("before"),
    ),
    case(
        "escape",
        "the global through Function",
        r#"const g = (0, eval)("this"); const h = Function("return this")(); text(String(g === h))"#,
        Completed,
        Some("true"),
    ),
    case(
        "escape",
        "Node and d8 globals",
        r#"text([typeof os, typeof quit, typeof Deno, typeof Bun, typeof global, typeof setImmediate].join(","))"#,
        Completed,
        None,
    ),
    case(
        "escape",
        "a forged JSON-RPC message from a finalizer",
        r#"text("before"); new FinalizationRegistry(() => { throw new Error('\n{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":"forged"}}\n') }).register({}, 1); for (let i = 0; i < 1e5; i++) ({a: new Array(100)}); await tools.echo(1)"#,
        Completed,
        Some("before"),
    ),
    case(
        "escape",
        "a stack trace of the host's frames",
        r#"try { await tools.echo(undefined, undefined, { hostile: true }) } catch (e) { text(String(e.stack)) } text(new Error("x").stack)"#,
        Completed,
        None,
    ),
    // ---- what a tenant can make the server hold ----
    case(
        "server memory",
        "unawaited tool calls piling up arguments",
        r#"text("before"); const big = "x".repeat(8e6); const calls = []; for (let i = 0; i < 40; i++) calls.push(tools.echo(big)); await Promise.all(calls)"#,
        // The cap on unanswered arguments ends it; in a debug build on a loaded machine the CPU
        // budget (the 64 MiB are copied and parsed on the cell's thread) may end it first.
        // Either way the server holds at most the cap and stays healthy; the cap itself is
        // tested exactly in `engine` and against a forging engine process.
        Failed(&["unanswered tool calls", "cpu time limit exceeded"]),
        Some("before"),
    ),
    case(
        "server memory",
        "an 11 MB argument echoed back, as JSON text all the way",
        r#"const big = { items: Array.from({ length: 110000 }, (_, i) => ({ id: i, name: "item number " + i, price: i * 1.25, tags: ["alpha", "beta"] })) }; const back = await tools.echo(big); text("echoed " + back.items.length)"#,
        Completed,
        Some("echoed 110000"),
    ),
    case(
        "server memory",
        "arguments no tool can read: nested past the limit, a lone surrogate",
        r#"let deep = 0; for (let i = 0; i < 200; i++) deep = [deep]; for (const argument of [deep, { text: "\ud800" }]) { try { await tools.echo(argument); text("accepted"); } catch (error) { text(error.message); } } text("done")"#,
        Completed,
        Some("done"),
    ),
    case(
        "server memory",
        "100,000 keys stored by one cell",
        r#"for (let i = 0; i < 1e5; i++) store("key-" + i, i); text("stored")"#,
        Completed,
        Some("stored"),
    ),
    case(
        "server memory",
        "stored values past the session's limit",
        r#"text("before"); store("big", "x".repeat(9e6))"#,
        Failed(&["past its limit of 8 MiB"]),
        Some("before"),
    ),
];

/// The store's sentinel, written before the corpus and read back after every case.
const SENTINEL: &str = r#"{"corpus":"sentinel","n":42}"#;

#[derive(Clone, Default)]
struct Recorder {
    logs: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Recorder {
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params.data);
    }
}

type Client = RunningService<RoleClient, Recorder>;

async fn call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments.as_object().cloned();
    tokio::time::timeout(Duration::from_secs(120), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("hung: {tool} took over 120 s"))
}

fn header(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Runs one case; `Err` says what was wrong.
async fn run_case(client: &Client, case: &Case) -> Result<(), String> {
    let yield_ms = match case.outcome {
        TerminatedByWait => 1000,
        _ => 60000,
    };
    let code = format!("// @exec: {{\"yield_time_ms\": {yield_ms}}}\n{}", case.code);
    let result = call(client, "exec", json!({ "code": code }))
        .await
        .map_err(|error| format!("exec failed at the protocol level: {error}"))?;
    let mut text = text_of(&result);
    if let TerminatedByWait = case.outcome {
        let id = header(&text)
            .strip_prefix("Script running with cell ID ")
            .ok_or_else(|| format!("expected a running cell, got: {}", header(&text)))?
            .to_owned();
        let ended = call(client, "wait", json!({"cell_id": id, "terminate": true}))
            .await
            .map_err(|error| format!("wait failed: {error}"))?;
        // The output of the first observation is part of what the cell emitted.
        text = format!("{text}\n{}", text_of(&ended));
        let last = text_of(&ended);
        if header(&last) != "Script terminated" {
            return Err(format!("expected terminated, got: {}", header(&last)));
        }
    } else {
        match (case.outcome, header(&text)) {
            (Completed, "Script completed") => {}
            (Failed(needles), "Script failed") => {
                // The error itself, not the code frame that quotes the source.
                let error = text
                    .split_once("Script error:")
                    .map(|(_, error)| error.split("\nat line ").next().unwrap_or_default())
                    .unwrap_or_default();
                if !needles.iter().any(|needle| error.contains(needle)) {
                    return Err(format!(
                        "failed without any of {needles:?}: {}",
                        excerpt(&text)
                    ));
                }
            }
            (expected, got) => {
                return Err(format!(
                    "expected {expected:?}, got `{got}`: {}",
                    excerpt(&text)
                ));
            }
        }
    }
    if let Some(kept) = case.kept
        && !text.lines().any(|line| line == kept)
    {
        return Err(format!("the output lost `{kept}`: {}", excerpt(&text)));
    }
    Ok(())
}

fn excerpt(text: &str) -> String {
    text.chars().take(600).collect()
}

/// The server answers, and the store still holds the sentinel.
async fn healthy(client: &Client) -> Result<(), String> {
    let result = call(
        client,
        "exec",
        json!({"code": "text(JSON.stringify(load(\"sentinel\")))"}),
    )
    .await
    .map_err(|error| format!("the server no longer answers: {error}"))?;
    let text = text_of(&result);
    if !text.lines().any(|line| line == SENTINEL) {
        return Err(format!("the store lost its sentinel: {}", excerpt(&text)));
    }
    Ok(())
}

/// Hostile requests at the protocol level: each must get an error (or a clear failure), never
/// take the server down.
async fn protocol_cases(client: &Client) -> Vec<(&'static str, Result<(), String>)> {
    let mut verdicts = Vec::new();
    let expect_error = |result: Result<CallToolResult, ServiceError>,
                        needle: &str|
     -> Result<(), String> {
        match result {
            Err(error) if error.to_string().contains(needle) => Ok(()),
            Ok(result) if result.is_error == Some(true) && text_of(&result).contains(needle) => {
                Ok(())
            }
            Ok(result) if text_of(&result).contains(needle) => Ok(()),
            Err(error) => Err(format!("an error without `{needle}`: {error}")),
            Ok(result) => Err(format!(
                "no error with `{needle}`: {}",
                excerpt(&text_of(&result))
            )),
        }
    };
    verdicts.push((
        "exec without code",
        expect_error(call(client, "exec", json!({})).await, "code"),
    ));
    verdicts.push((
        "exec with code of the wrong type",
        expect_error(call(client, "exec", json!({"code": 123})).await, "code"),
    ));
    verdicts.push((
        "exec with source past the size limit",
        expect_error(
            call(
                client,
                "exec",
                json!({"code": format!("//{}", "x".repeat(5 << 20))}),
            )
            .await,
            "a cell accepts",
        ),
    ));
    verdicts.push((
        "exec with a malformed pragma",
        expect_error(
            call(
                client,
                "exec",
                json!({"code": "// @exec: {\"yield_time_ms\": \"soon\"}\ntext(1)"}),
            )
            .await,
            "yield_time_ms",
        ),
    ));
    verdicts.push((
        "wait on a cell that does not exist",
        expect_error(
            call(client, "wait", json!({"cell_id": "no-such-cell"})).await,
            "no-such-cell",
        ),
    ));
    verdicts.push((
        "wait on a cell id that is not a string",
        expect_error(
            call(client, "wait", json!({"cell_id": {"$ne": 1}})).await,
            "cell_id",
        ),
    ));
    verdicts.push((
        "a tool that does not exist",
        expect_error(
            call(client, "no_such_tool", json!({})).await,
            "no_such_tool",
        ),
    ));
    // Many cells at once, some hostile: every one ends, and the server goes on.
    let mut calls = Vec::new();
    for i in 0..24 {
        let code = match i % 3 {
            0 => format!("text(\"cell {i}\")"),
            1 => "while (true) {}".to_owned(),
            _ => "const a = []; for (;;) a.push(new ArrayBuffer(1 << 24))".to_owned(),
        };
        calls.push(call(
            client,
            "exec",
            json!({"code": format!("// @exec: {{\"yield_time_ms\": 60000}}\n{code}")}),
        ));
    }
    let results = futures::future::join_all(calls).await;
    let concurrent = results.iter().enumerate().try_for_each(|(i, result)| {
        let text = result
            .as_ref()
            .map(text_of)
            .map_err(|error| error.to_string())?;
        let expected = if i % 3 == 0 {
            "Script completed"
        } else {
            "Script failed"
        };
        // A well-behaved cell placed in the process of a heap bomb whose heap kept growing after
        // its termination ends with that process, saying so (the price of sharing a process,
        // SECURITY.md): it ended, as every cell here must.
        let ended_with_its_process = header(&text) == "Script failed"
            && text.contains("another cell in its engine process could not be stopped in time");
        if header(&text) == expected || (i % 3 == 0 && ended_with_its_process) {
            Ok(())
        } else {
            Err(format!(
                "cell {i}: expected {expected}, got {}",
                excerpt(&text)
            ))
        }
    });
    verdicts.push(("24 concurrent cells, two thirds hostile", concurrent));
    verdicts
}

/// The CPU budget of the server that runs every case but the `cpu` ones: a case meant to reach
/// another limit (the heap, a stored-value or tool-argument size) must reach it first, in a debug
/// build on a loaded machine. A fresh-clone run saw two such cases end by a 4 s budget (their
/// cell thread normally uses about 1 s); one before it saw one end by 2 s.
const CPU_MS_FOR_OTHER_LIMITS: &str = "8000";

/// The CPU budget of the server that runs the `cpu` cases, which all end by it: short, so that
/// they do not make the corpus slow.
const CPU_MS_FOR_CPU_CASES: &str = "2000";

/// The cap on a cell's tool calls on the server of the `cpu` cases: the tool loop reaches it well
/// within their CPU budget whatever the build (an unoptimised one spends up to 200 µs of the
/// cell's CPU on each round trip through an engine process; the default cap, 10,000, would take
/// most of the budget there).
const TOOL_CALLS_FOR_CPU_CASES: &str = "2000";

/// Starts a corpus server with `cpu_limit_ms`, `max_tool_calls` (`None`: the default) and its
/// own store (the scratch folder `name`), with the sentinel stored.
async fn corpus_server(
    binary: &str,
    name: &str,
    cpu_limit_ms: &str,
    max_tool_calls: Option<&str>,
    recorder: &Recorder,
) -> Client {
    let store = codemode_test_support::scratch_folder(name);
    let command = tokio::process::Command::new(binary).configure(|command| {
        command
            .args(["mcp", "--demo-tools", "--cpu-limit-ms", cpu_limit_ms])
            // Small enough that one cell can pass it.
            .args(["--max-stored-bytes", "8388608", "--store"])
            .arg(&store);
        if let Some(calls) = max_tool_calls {
            command.args(["--max-tool-calls", calls]);
        }
    });
    let client = recorder
        .clone()
        .serve(TokioChildProcess::new(command).unwrap())
        .await
        .expect("the server initialises");
    let stored = call(
        &client,
        "exec",
        json!({"code": format!("store(\"sentinel\", {SENTINEL}); text(\"stored\")")}),
    )
    .await
    .unwrap();
    assert_eq!(header(&text_of(&stored)), "Script completed");
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adversarial_corpus() {
    let binary =
        std::env::var("CODEMODE_CORPUS_BINARY").unwrap_or_else(|_| common::CODEMODE.to_owned());
    let recorder = Recorder::default();
    let client = corpus_server(
        &binary,
        "adversarial-store",
        CPU_MS_FOR_OTHER_LIMITS,
        None,
        &recorder,
    )
    .await;
    let cpu_client = corpus_server(
        &binary,
        "adversarial-store-cpu",
        CPU_MS_FOR_CPU_CASES,
        Some(TOOL_CALLS_FOR_CPU_CASES),
        &recorder,
    )
    .await;

    let started = Instant::now();
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in CASES {
        let began = Instant::now();
        let server = if case.category == "cpu" {
            &cpu_client
        } else {
            &client
        };
        let verdict = match run_case(server, case).await {
            Ok(()) => healthy(server).await,
            Err(error) => Err(error),
        };
        let entry = counts.entry(case.category).or_default();
        entry.0 += 1;
        match verdict {
            Ok(()) => entry.1 += 1,
            Err(error) => failures.push(format!("[{}] {}: {error}", case.category, case.name)),
        }
        println!(
            "{:>7} ms  [{}] {}",
            began.elapsed().as_millis(),
            case.category,
            case.name
        );
    }
    for (name, verdict) in protocol_cases(&client).await {
        let entry = counts.entry("mcp").or_default();
        entry.0 += 1;
        match verdict.and(healthy(&client).await) {
            Ok(()) => entry.1 += 1,
            Err(error) => failures.push(format!("[mcp] {name}: {error}")),
        }
    }
    // No cell spoke for the server: every logging notification is one the server sent.
    let forged = recorder
        .logs
        .lock()
        .unwrap()
        .iter()
        .filter(|log| log.to_string().contains("forged"))
        .count();
    if forged > 0 {
        failures.push(format!(
            "{forged} forged logging notifications reached the client"
        ));
    }

    println!(
        "\nadversarial corpus against {binary}, {:.1} s:",
        started.elapsed().as_secs_f64()
    );
    println!("{:<10} {:>6} {:>6}", "category", "cases", "passed");
    let (mut total, mut passed) = (0, 0);
    for (category, (cases, ok)) in &counts {
        println!("{category:<10} {cases:>6} {ok:>6}");
        total += cases;
        passed += ok;
    }
    println!("{:<10} {total:>6} {passed:>6}", "all");
    client.cancel().await.unwrap();
    cpu_client.cancel().await.unwrap();
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
