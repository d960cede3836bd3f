//! Each global, used normally and refused, on the engine under test.

use std::collections::HashMap;

use super::harness::{Options, error_of, run, run_with, texts_of};
use super::subject::subject;
use codemode_engine::RuntimeEvent;
use codemode_protocol::{AudioItem, ImageDetail, ImageItem, OutputItem};
use serde_json::json;

const PNG: &str = "data:image/png;base64,iVBORw0KGgo=";

/// A conformance test.
pub fn text_uses_string_for_primitives_and_json_for_everything_else() {
    let texts = texts_of(
        r#"
        text(undefined); text(null); text(true); text(1.5); text(10n); text("plain");
        text({ a: 1, b: [1, "x"] }); text([1, null]); text(Symbol("s"));
        text(function named() { return 1; });
        text({ toJSON() { return "custom"; } });
        "#,
    );
    assert_eq!(
        texts,
        [
            "undefined",
            "null",
            "true",
            "1.5",
            "10",
            "plain",
            r#"{"a":1,"b":[1,"x"]}"#,
            "[1,null]",
            "Symbol(s)",
            "function named() { return 1; }",
            r#""custom""#,
        ]
    );
}

/// A conformance test.
pub fn a_throwing_to_json_surfaces_as_the_cells_error() {
    let error =
        error_of(r#"text("before"); text({ toJSON() { throw new Error("no json for you"); } });"#);
    assert!(error.starts_with("Error: no json for you"), "{error}");
    assert!(error.contains("cell.js:1:"), "{error}");
}

/// A conformance test.
pub fn image_accepts_data_urls_objects_and_mcp_blocks_with_detail_overrides() {
    let finished = run(&format!(
        r#"
        image("{PNG}");
        image("{PNG}", "LOW");
        image({{ image_url: "{PNG}", detail: "auto" }});
        image({{ image_url: "{PNG}", detail: "auto" }}, "original");
        image({{ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" }});
        "#
    ));
    assert_eq!(finished.error(), None);
    let image = |detail| {
        OutputItem::Image(ImageItem {
            image_url: PNG.into(),
            detail,
        })
    };
    assert_eq!(
        finished.items,
        [
            image(ImageDetail::High),
            image(ImageDetail::Low),
            image(ImageDetail::Auto),
            image(ImageDetail::Original),
            image(ImageDetail::High),
        ]
    );
}

/// A conformance test.
pub fn generated_image_emits_the_image_then_its_output_hint() {
    let finished = run(&format!(
        r#"
        generatedImage({{ image_url: "{PNG}", output_hint: "saved as cat.png", revised_prompt: "a cat" }});
        generatedImage({{ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png", detail: "low" }});
        for (const value of [
            {{ image_url: "{PNG}", output_hint: 7 }},
            {{ image_url: "{PNG}", output_hint: null }},
            "{PNG}",
            {{ output_hint: "no image" }},
        ]) {{
            try {{ generatedImage(value); text("accepted"); }} catch (error) {{ text(error.message); }}
        }}
        "#
    ));
    assert_eq!(finished.error(), None);
    let text = |text: &str| OutputItem::Text { text: text.into() };
    assert_eq!(
        finished.items,
        [
            OutputItem::Image(ImageItem {
                image_url: PNG.into(),
                detail: ImageDetail::High,
            }),
            text("saved as cat.png"),
            // An MCP block's own `detail` key is not its detail (its `_meta` is).
            OutputItem::Image(ImageItem {
                image_url: PNG.into(),
                detail: ImageDetail::High,
            }),
            text("generatedImage output_hint must be a string when provided"),
            text("generatedImage output_hint must be a string when provided"),
            text(
                "generatedImage expects an image generation result object, such as { image_url, \
                 output_hint? } or an MCP image block"
            ),
            text(
                "image expects a data: URL string, an object { image_url, detail? }, or an MCP \
                 image block { type: \"image\", data, mimeType }"
            ),
        ]
    );
}

/// A conformance test.
pub fn image_refusals_are_thrown_as_errors_the_cell_can_catch() {
    let texts = texts_of(
        r#"
        for (const [value, detail] of [
            ["https://example.com/cat.png"],
            ["file:///etc/passwd"],
            [undefined],
            [{ image_url: "data:image/png;base64,AA==" }, "huge"],
        ]) {
            try { image(value, detail); text("accepted"); } catch (error) { text(error.message); }
        }
        "#,
    );
    assert_eq!(
        texts,
        [
            "remote image URLs are not supported; the runtime does not fetch them, so pass a base64 data URL (data:<mime>;base64,<payload>) instead",
            "invalid image URL: only data: URLs are accepted (data:<mime>;base64,<payload>)",
            "image expects a data: URL string, an object { image_url, detail? }, or an MCP image block { type: \"image\", data, mimeType }",
            "invalid image detail \"huge\": expected one of auto, low, high, original",
        ]
    );
}

/// A conformance test.
pub fn audio_accepts_data_urls_and_mcp_blocks_and_refuses_remote_urls() {
    let finished = run(r#"
        audio("data:audio/wav;base64,UklGRg==");
        audio({ type: "audio", data: "SUQz", mimeType: "audio/mpeg" });
        try { audio("https://example.com/a.mp3"); } catch (error) { text(error.message); }
        "#);
    assert_eq!(finished.error(), None);
    assert_eq!(
        finished.items,
        [
            OutputItem::Audio(AudioItem {
                audio_url: "data:audio/wav;base64,UklGRg==".into()
            }),
            OutputItem::Audio(AudioItem {
                audio_url: "data:audio/mpeg;base64,SUQz".into()
            }),
            OutputItem::text(
                "remote audio URLs are not supported; the runtime does not fetch them, so pass a base64 data URL (data:<mime>;base64,<payload>) instead"
            ),
        ]
    );
}

/// A conformance test.
pub fn store_and_load_share_values_within_the_cell_as_deep_copies() {
    let finished = run_with(
        r#"
        text(load("from_before").n);
        text(load("missing") === undefined);
        store(42, { list: [1, 2] });
        const copy = load("42");
        copy.list.push(3);
        text(load("42").list.length);
        "#,
        Options {
            stored_values: HashMap::from([("from_before".to_owned(), json!({"n": 7}))]),
            ..Options::default()
        },
    );
    assert_eq!(finished.error(), None);
    assert_eq!(finished.texts(), ["7", "true", "2"]);
    let (writes, _) = finished.result.unwrap();
    assert_eq!(
        writes,
        HashMap::from([("42".to_owned(), json!({"list": [1, 2]}))])
    );
}

/// A conformance test.
pub fn store_refuses_values_without_a_json_form() {
    let texts = texts_of(
        r#"
        const cyclic = {}; cyclic.self = cyclic;
        for (const value of [() => 1, undefined, cyclic, 10n]) {
            try { store("key", value); text("stored"); } catch (error) { text(error.message); }
        }
        "#,
    );
    let refusal = "Unable to store \"key\". Only plain serializable objects can be stored.";
    assert_eq!(texts[..2], [refusal; 2]);
    // Values whose serialisation throws say why.
    let dialect = subject().dialect;
    assert!(
        texts[2].starts_with(&format!(
            "Unable to store \"key\": the value cannot be serialized ({}",
            dialect.circular_json
        )),
        "{}",
        texts[2]
    );
    assert_eq!(
        texts[3],
        format!(
            "Unable to store \"key\": the value cannot be serialized ({}).",
            dialect.bigint_json
        )
    );
}

/// A conformance test.
pub fn notify_delivers_text_to_the_host_and_refuses_blank_text() {
    let finished = run(r#"
        notify({ progress: 0.5 });
        try { notify("   "); } catch (error) { text(error.message); }
        "#);
    assert_eq!(finished.error(), None);
    assert_eq!(finished.texts(), ["notify expects non-empty text"]);
    let notifications: Vec<_> = finished
        .events
        .iter()
        .filter(|event| matches!(event, RuntimeEvent::Notify { .. }))
        .collect();
    assert_eq!(
        notifications,
        [&RuntimeEvent::Notify {
            call_id: "call-1".into(),
            text: r#"{"progress":0.5}"#.into()
        }]
    );
}

/// A conformance test.
pub fn yield_control_asks_the_observer_to_yield_and_the_script_goes_on() {
    let finished = run(r#"text("a"); yield_control(); text("b");"#);
    assert_eq!(finished.error(), None);
    let position = |wanted: &RuntimeEvent| finished.events.iter().position(|event| event == wanted);
    let yield_at = position(&RuntimeEvent::YieldRequested).expect("a yield request");
    assert!(position(&RuntimeEvent::ContentItem(OutputItem::text("a"))) < Some(yield_at));
    assert!(position(&RuntimeEvent::ContentItem(OutputItem::text("b"))) > Some(yield_at));
}

/// A conformance test.
pub fn exit_ends_the_script_successfully_and_cannot_be_caught() {
    let finished = run(r#"
        text("before");
        store("kept", 1);
        try { exit(); } catch (error) { text("caught"); } finally { text("finally"); }
        text("after");
        "#);
    assert_eq!(finished.error(), None);
    assert!(finished.completed());
    assert_eq!(finished.texts(), ["before"]);
    assert_eq!(
        finished.result.unwrap().0,
        HashMap::from([("kept".to_owned(), json!(1))])
    );
}

/// A conformance test.
pub fn exit_inside_an_async_function_and_a_timer_also_ends_the_script() {
    assert_eq!(
        texts_of(r#"await (async () => { await null; text("in"); exit(); })(); text("never");"#),
        ["in"]
    );
    assert_eq!(
        texts_of(r#"await new Promise(() => setTimeout(() => { text("timer"); exit(); }, 1));"#),
        ["timer"]
    );
}

/// A conformance test.
pub fn timers_fire_in_order_with_arguments_and_can_be_cleared() {
    let texts = texts_of(
        r#"
        const done = Promise.withResolvers();
        const cleared = setTimeout(() => text("cleared"), 5);
        setTimeout((a, b) => text(`second ${a}${b}`), 20, "x", "y");
        const first = setTimeout(() => text("first"), 1);
        setTimeout(() => done.resolve(), 40);
        clearTimeout(cleared);
        text(`ids ${cleared} ${first}`);
        await done.promise;
        "#,
    );
    assert_eq!(texts, ["ids 1 3", "first", "second xy"]);
}

/// A conformance test.
pub fn timer_arguments_are_normalised_and_refused_as_s2_says() {
    let texts = texts_of(
        r#"
        const order = [];
        const done = Promise.withResolvers();
        setTimeout(() => order.push("nan"), NaN);
        setTimeout(() => order.push("negative"), -10);
        setTimeout(() => order.push("fraction"), 0.9);
        setTimeout(() => { order.push("last"); done.resolve(); }, 5);
        clearTimeout(undefined); clearTimeout(null); clearTimeout(0); clearTimeout(-1);
        for (const call of [() => setTimeout("code"), () => clearTimeout("1")]) {
            try { call(); text("accepted"); } catch (error) { text(`${error.name}: ${error.message}`); }
        }
        await done.promise;
        text(order.join(","));
        "#,
    );
    assert_eq!(
        texts,
        [
            "TypeError: setTimeout expects a function as its first argument",
            "TypeError: clearTimeout expects a timer id returned by setTimeout",
            "nan,negative,fraction,last",
        ]
    );
}

/// A conformance test.
pub fn pending_timers_do_not_keep_a_finished_cell_alive() {
    let started = std::time::Instant::now();
    let texts = texts_of(r#"setTimeout(() => text("late"), 60_000); text("done");"#);
    assert_eq!(texts, ["done"]);
    // A hang guard, not a timing assertion: the cell must not wait for its timer.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "hung on a pending timer"
    );
}

/// A conformance test.
pub fn a_throwing_timer_callback_fails_the_cell() {
    let finished = run(r#"
        setTimeout(() => { throw new TypeError("from the timer"); }, 1);
        await new Promise(() => {});
        "#);
    let error = finished.error().expect("the cell fails");
    assert!(error.starts_with("TypeError: from the timer"), "{error}");
    assert!(error.contains("cell.js:2:"), "{error}");
}

/// A conformance test.
pub fn forbidden_globals_are_absent() {
    assert_eq!(
        texts_of(
            r#"text([typeof console, typeof SharedArrayBuffer, typeof Atomics, typeof WebAssembly,
                    typeof process, typeof require].join(" "));"#
        ),
        ["undefined undefined undefined undefined undefined undefined"]
    );
}

/// A conformance test.
pub fn all_tools_lists_the_enabled_tools_by_global_name_with_their_declarations() {
    assert_eq!(
        texts_of(
            "text(ALL_TOOLS.map(({ name, description }) => ({ name, description }))); text(Object.keys(tools));"
        ),
        [
            r#"[{"name":"echo","description":"Resolves with its argument."},{"name":"fail","description":"Always fails."},{"name":"web__search","description":"Searches the web."}]"#,
            r#"["echo","fail","web__search"]"#,
        ]
    );
    assert_eq!(
        texts_of("text(ALL_TOOLS[2].declaration);"),
        ["/** Searches the web. */\nweb__search(args?: unknown): Promise<unknown>;"]
    );
}

/// A conformance test.
pub fn search_tools_finds_tools_by_every_word_of_the_query() {
    assert_eq!(
        texts_of(
            r#"text(search_tools("WEB search").map((tool) => tool.name));
               text(search_tools("always").map((tool) => tool.name));
               text(search_tools("nothing matches").length);
               text(search_tools().length);"#
        ),
        [r#"["web__search"]"#, r#"["fail"]"#, "0", "3"]
    );
}

/// A conformance test.
pub fn imports_are_refused_static_and_dynamic() {
    let error = error_of(r#"import fs from "node:fs"; text(1);"#);
    assert!(
        error.starts_with("Error: Unsupported import in exec: node:fs"),
        "{error}"
    );
    assert_eq!(
        texts_of(r#"try { await import("./other.js"); } catch (error) { text(error.message); }"#),
        ["Unsupported import in exec: ./other.js"]
    );
}

/// A conformance test.
pub fn errors_carry_the_stack_with_line_and_column() {
    let error =
        error_of("text(1);\nfunction inner() {\n  throw new RangeError('deep');\n}\ninner();");
    assert!(error.starts_with("RangeError: deep\n"), "{error}");
    let column = 9 + subject().dialect.new_error_column_offset;
    assert!(
        error.contains(&format!("at inner (cell.js:3:{column})")),
        "{error}"
    );
    assert!(error.contains("cell.js:5:1"), "{error}");
    assert!(!error.contains("codemode:bootstrap"), "{error}");
}

/// A conformance test.
pub fn syntax_errors_name_line_and_column() {
    let error = error_of("text(1);\nconst x = ;\n");
    assert!(
        error.starts_with(subject().dialect.unexpected_semicolon),
        "{error}"
    );
    assert!(error.ends_with("at cell.js:2:11"), "{error}");
}

/// A conformance test.
pub fn a_thrown_non_error_becomes_its_string() {
    assert!(error_of(r#"throw "plain words";"#).starts_with("plain words\n"));
    assert!(error_of(r#"await Promise.reject(42);"#).starts_with("42\n"));
}

/// A conformance test.
pub fn the_array_copy_methods_leave_the_array_alone() {
    assert_eq!(
        texts_of(
            r#"
            const base = [3, 1, 2];
            text(base.toSorted()); text(base.toSorted((a, b) => b - a)); text(base.toReversed());
            text(base.with(-1, 9)); text(base.toSpliced(1, 1, "x", "y")); text(base);
            try { base.with(5, 0); } catch (error) { text(error.name); }
            text(Array.prototype.toSorted.call({ length: 2, 0: "b", 1: "a" }));
            "#
        ),
        [
            "[1,2,3]",
            "[3,2,1]",
            "[2,1,3]",
            "[3,1,9]",
            r#"[3,"x","y",2]"#,
            "[3,1,2]",
            "RangeError",
            r#"["a","b"]"#,
        ]
    );
}

/// A conformance test.
pub fn group_by_groups_by_the_callback_s_key() {
    assert_eq!(
        texts_of(
            r#"
            const items = [{ kind: "a", n: 1 }, { kind: "b", n: 2 }, { kind: "a", n: 3 }];
            const byKind = Object.groupBy(items, (item) => item.kind);
            text(Object.getPrototypeOf(byKind) === null);
            text(byKind);
            const byPosition = Map.groupBy([1, 2, 3, 4], (n, index) => (index < 2 ? "first" : n % 2));
            text([...byPosition.entries()]);
            "#
        ),
        [
            "true",
            r#"{"a":[{"kind":"a","n":1},{"kind":"a","n":3}],"b":[{"kind":"b","n":2}]}"#,
            r#"[["first",[1,2]],[1,[3]],[0,[4]]]"#,
        ]
    );
}

/// A conformance test.
pub fn promise_with_resolvers_and_array_from_async_work() {
    assert_eq!(
        texts_of(
            r#"
            const { promise, resolve } = Promise.withResolvers();
            setTimeout(() => resolve("resolved"), 1);
            text(await promise);
            async function* numbers() { yield 1; yield 2; }
            text(await Array.fromAsync(numbers()));
            text(await Array.fromAsync([Promise.resolve(3), 4], (n) => n * 10));
            text(await Array.fromAsync({ length: 2, 0: "a", 1: Promise.resolve("b") }));
            "#
        ),
        ["resolved", "[1,2]", "[30,40]", r#"["a","b"]"#]
    );
}

/// A conformance test.
pub fn intl_works_with_the_system_icu() {
    assert_eq!(
        texts_of("text(new Intl.NumberFormat('de-DE').format(1234.5));"),
        ["1.234,5"]
    );
}

/// A conformance test.
pub fn a_cell_that_overwrites_built_ins_cannot_break_its_own_globals() {
    let finished = run(r#"
        const RealPromise = Promise;
        JSON.stringify = () => "tampered";
        JSON.parse = () => "tampered";
        Map.prototype.get = () => undefined;
        Map.prototype.set = () => { throw new Error("tampered"); };
        Function.prototype.call = () => { throw new Error("tampered"); };
        globalThis.Promise = function () { throw new Error("tampered"); };
        String = () => "tampered";
        text({ still: "json" });
        store("k", [1, 2]);
        text(load("k"));
        text(await tools.echo({ answer: 42 }));
        setTimeout(() => text("timer"), 1);
        await new RealPromise((resolve) => setTimeout(resolve, 5));
        "#);
    assert_eq!(finished.error(), None, "{finished:?}");
    assert_eq!(
        finished.texts(),
        [r#"{"still":"json"}"#, "[1,2]", r#"{"answer":42}"#, "timer"]
    );
}

/// A conformance test.
pub fn the_host_entry_point_is_not_reachable_from_the_cell() {
    assert_eq!(
        texts_of(
            r#"
            const names = Object.getOwnPropertyNames(globalThis).filter((name) => /host|codemode|__/.test(name));
            text(names);
            // The globals are strict functions: their callers (the bootstrap) cannot be reached.
            try { text.caller; text("caller reachable"); } catch (error) { text(error.name); }
            "#
        ),
        ["[]", "TypeError"]
    );
}

/// A conformance test.
pub fn a_lone_surrogate_in_text_becomes_one_replacement_character() {
    assert_eq!(
        texts_of(
            r#"text("a\uD800b"); text("\uDC00"); text("pair \uD83D\uDE00 kept"); notify("x\uD800");"#
        ),
        ["a\u{FFFD}b", "\u{FFFD}", "pair \u{1F600} kept"]
    );
}

/// A conformance test.
pub fn store_refuses_lone_surrogates_by_key_and_reason_so_keys_never_collide() {
    assert_eq!(
        texts_of(
            r#"
            for (const [key, value] of [["\uD800", 1], ["\uDC00", 2], ["k", "x\uD800"], ["deep", JSON.parse("[".repeat(300) + "]".repeat(300))]]) {
                try { store(key, value); text("stored"); } catch (error) { text(error.message); }
            }
            store("\uFFFD", "replacement");
            text(load("\uD800") === undefined);
            text(load("\uFFFD"));
            store("pair \uD83D\uDE00", "ok");
            text(load("pair \uD83D\uDE00"));
            "#
        ),
        [
            r#"Unable to store "\uD800": the key has a string with a lone surrogate (half of a UTF-16 pair), which JSON text cannot carry exactly; remove it, or replace it with "\uFFFD"."#,
            r#"Unable to store "\uDC00": the key has a string with a lone surrogate (half of a UTF-16 pair), which JSON text cannot carry exactly; remove it, or replace it with "\uFFFD"."#,
            r#"Unable to store "k": the value has a string with a lone surrogate (half of a UTF-16 pair), which JSON text cannot carry exactly; remove it, or replace it with "\uFFFD"."#,
            r#"Unable to store "deep": the value is nested more than 128 levels deep, past the limit; flatten it, or pass it as a JSON string."#,
            "true",
            "replacement",
            "ok",
        ]
    );
}

/// A conformance test.
pub fn a_tool_argument_with_a_lone_surrogate_is_refused_with_the_reason() {
    assert_eq!(
        texts_of(
            r#"try { await tools.echo({ q: "\uD800" }); } catch (error) { text(error.message); }"#
        ),
        [
            r#"tools.echo: the argument has a string with a lone surrogate (half of a UTF-16 pair), which JSON text cannot carry exactly; remove it, or replace it with "\uFFFD""#
        ]
    );
}

/// A conformance test.
pub fn any_thrown_value_is_rendered_by_the_engine_with_its_position_when_it_has_one() {
    // Not an Error: V8 renders the value; a module's body keeps no position for it, and says so.
    for (source, rendered) in [
        ("text(1);\nthrow null;", "null"),
        ("throw undefined;", "undefined"),
        ("throw Symbol(\"boom\");", "Symbol(boom)"),
    ] {
        let error = error_of(source);
        assert!(error.starts_with(rendered), "{source}: {error}");
        assert!(
            error.contains("a thrown value that is not an Error carries no position"),
            "{source}: {error}"
        );
    }
    // Marked as the session marks each `throw` (an assignment to the throw-site object's property,
    // the same length, and its import as a last line), the same values have the position of the
    // throw, from the module's body, after an await, in a function, and in a timer.
    let throw = codemode_engine::globals::THROW_SITE_MARKER;
    let import = codemode_engine::globals::THROW_SITE_IMPORT;
    for (source, rendered) in [
        (
            format!("text(1);\n{throw} null;"),
            "null\n    at cell.js:2:1",
        ),
        (format!("await 1;\n  {throw} 5;"), "5\n    at cell.js:2:3"),
        (
            format!("const f = () => {{ {throw}{{ a: 1 }}; }};\nf();"),
            "#<Object>\n    at cell.js:1:19",
        ),
        (
            format!(
                "setTimeout(() => {{ {throw} \"late\"; }}, 1);\nawait new Promise((r) => setTimeout(r, 50));"
            ),
            "late\n    at cell.js:1:20",
        ),
    ] {
        let source = format!("{source}{import}");
        assert_eq!(error_of(&source), rendered, "{source}");
    }
    // Caught, a marked throw is an ordinary throw; and marking defines no global.
    assert_eq!(
        texts_of(&format!(
            "try {{ {throw} 7; }} catch (value) {{ text(value); }}\n\
             text(Object.getOwnPropertyNames(globalThis).filter((name) => name.includes(\"$\")).length);\n\
             text(typeof globalThis.$$);{import}"
        )),
        ["7", "0", "undefined"]
    );
    // The throw-site object cannot be changed by the cell that imported it.
    assert_eq!(
        texts_of(&format!(
            "try {{ $$.t = 1; }} catch (value) {{ text(value); }}\n\
             text(Object.isFrozen($$));{import}"
        )),
        ["1", "true"]
    );
    // Any other import is refused, naming it.
    let refused = error_of("import fs from \"node:fs\";");
    assert!(
        refused.contains("Unsupported import in exec: node:fs"),
        "{refused}"
    );
    // An object whose toString throws is rendered without running it.
    assert!(
        error_of("throw { toString() { throw new Error(\"no\"); } };")
            .starts_with("[object Object]")
    );
}

/// A conformance test.
pub fn an_unmarked_throw_in_a_callback_keeps_its_position() {
    // Thrown where V8 has a message (a timer callback), a primitive has its line and column even
    // without the session's mark.
    assert_eq!(
        error_of(
            "setTimeout(() => { throw null; }, 1);\nawait new Promise((r) => setTimeout(r, 50));"
        ),
        "null\n    at cell.js:1:20"
    );
}

/// A conformance test.
pub fn a_cell_cannot_hide_or_rewrite_its_error_text() {
    for source in [
        "Error.stackTraceLimit = 0;\nnull.x;",
        "Error.prepareStackTrace = () => \"hidden\";\nnull.x;",
        "Object.defineProperty(Error.prototype, \"stack\", { get() { return \"forged\"; } });\nnull.x;",
    ] {
        assert_eq!(
            error_of(source),
            format!(
                "{}\n    at cell.js:2:{}",
                subject().dialect.null_property_read,
                subject().dialect.null_property_read_column
            ),
            "{source}"
        );
    }
    assert_eq!(
        error_of(
            "function inner() { throw new Error(\"deep\"); }\nfunction outer() { inner(); }\nouter();"
        ),
        format!(
            "Error: deep\n    at inner (cell.js:1:{})\n    at outer (cell.js:2:20)\n    at cell.js:3:1",
            26 + subject().dialect.new_error_column_offset
        )
    );
}

/// A conformance test.
pub fn exit_inside_to_json_stops_the_text_that_called_it() {
    let finished = run(
        r#"text("before"); text({ toJSON() { exit(); return "after exit"; } }); text("never");"#,
    );
    assert_eq!(finished.texts(), ["before"]);
    assert_eq!(finished.error(), None);
}

/// A conformance test.
pub fn a_replaced_array_iterator_breaks_none_of_the_globals() {
    assert_eq!(
        texts_of(
            r#"Array.prototype[Symbol.iterator] = function* () { throw new Error("tampered"); };
               await new Promise((resolve) => setTimeout((a, b) => { text(a + b); resolve(); }, 1, 2, 3));
               text([1, 2, 3].toSpliced(1, 1, 9, 8).join());"#
        ),
        ["5", "1,9,8,3"]
    );
}
