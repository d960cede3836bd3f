//! Today's built-ins: the ES2023–ES2025 library and syntax that model-written cells use (and
//! explicit resource management, which upstream's current V8 runs). Each engine runs them or
//! lists them among its [`Difference`](super::Difference)s with the reason. Both engines the
//! project ships run all of them natively: the bootstrap supplies no built-in of the language.

use super::harness::texts_of;

/// A conformance test.
pub fn array_find_last_and_the_copying_methods_leave_the_array_alone() {
    assert_eq!(
        texts_of(
            r#"
            const numbers = [3, 1, 2];
            text([numbers.findLast((n) => n > 1), numbers.findLastIndex((n) => n > 5)]);
            text([numbers.toSorted(), numbers.toReversed(), numbers.toSpliced(1, 1, 9), numbers.with(-1, 0)]);
            text(numbers);
            "#
        ),
        ["[2,-1]", "[[1,2,3],[2,1,3],[3,9,2],[3,1,0]]", "[3,1,2]"]
    );
}

/// A conformance test.
pub fn symbols_are_weak_map_keys() {
    assert_eq!(
        texts_of(
            r#"
            const weak = new WeakMap();
            const key = Symbol("key");
            weak.set(key, 1);
            text(weak.get(key));
            try { weak.set(Symbol.for("registered"), 2); } catch (error) { text(error.name); }
            "#
        ),
        ["1", "TypeError"]
    );
}

/// A conformance test.
pub fn strings_say_whether_they_are_well_formed_and_repair_lone_surrogates() {
    assert_eq!(
        texts_of(
            r#"
            const broken = "a\uD800b\uDFFFc";
            text(["ok", "😀", broken, "\uDC00\uD800"].map((s) => s.isWellFormed()));
            text([...broken.toWellFormed()].map((c) => c.codePointAt(0).toString(16)));
            text("😀".toWellFormed() === "😀");
            text(String.prototype.isWellFormed.call(12));
            try { String.prototype.toWellFormed.call(null); } catch (error) { text(error.name); }
            "#
        ),
        [
            "[true,true,false,false]",
            r#"["61","fffd","62","fffd","63"]"#,
            "true",
            "true",
            "TypeError",
        ]
    );
}

/// A conformance test.
pub fn set_methods_combine_and_compare_sets_and_set_likes() {
    assert_eq!(
        texts_of(
            r#"
            const a = new Set([1, 2, 3]);
            const b = new Set([3, 4]);
            const list = (set) => [...set];
            text([list(a.union(b)), list(a.intersection(b)), list(a.difference(b)), list(a.symmetricDifference(b))]);
            text([a.isSubsetOf(b), new Set([3]).isSubsetOf(b), a.isSupersetOf(new Set([1, 3])), a.isDisjointFrom(new Set([7]))]);
            const likeMap = new Map([[2, "two"], [9, "nine"]]);
            text(list(a.intersection(likeMap)));
            const setLike = { size: 2, has: (n) => n % 2 === 0, keys: () => [10, 20][Symbol.iterator]() };
            text([list(a.union(setLike)), list(a.difference(setLike)), a.isDisjointFrom(setLike)]);
            text(list(a));
            for (const bad of [[1], { size: NaN, has() {}, keys() {} }, { size: 1, has: 1, keys() {} }]) {
              try { a.union(bad); } catch (error) { text(error.name); }
            }
            try { a.union({ size: -1, has() {}, keys() {} }); } catch (error) { text(error.name); }
            try { Set.prototype.union.call([], b); } catch (error) { text(error.name); }
            "#
        ),
        [
            "[[1,2,3,4],[3],[1,2],[1,2,4]]",
            "[false,true,true,true]",
            "[2]",
            "[[1,2,3,10,20],[1,2,3],true]",
            "[1,2,3]",
            "TypeError",
            "TypeError",
            "TypeError",
            "RangeError",
            "TypeError",
        ]
    );
}

/// A conformance test.
pub fn iterator_helpers_are_lazy_and_close_what_they_leave() {
    assert_eq!(
        texts_of(
            r#"
            const seen = [];
            function* counting() {
              try { for (let n = 1; ; n++) { seen.push(n); yield n; } } finally { seen.push("closed"); }
            }
            const doubledOdds = counting().filter((n) => n % 2).map((n, i) => [i, n * 2]).take(3);
            text(seen.length);
            text(doubledOdds.toArray());
            text(seen);
            text([1, 2, 3].values().drop(1).toArray());
            text([1, 2].values().flatMap((n) => [n, n * 10]).toArray());
            text([1, 2, 3, 4].values().reduce((sum, n) => sum + n));
            text([1, 2, 3].values().reduce((sum, n) => sum + n, 10));
            text([[1, 2, 3].values().some((n) => n > 2), [1, 2].values().every((n) => n > 1), [5, 6].values().find((n) => n > 5)]);
            const visited = [];
            new Set(["a", "b"]).values().forEach((value, index) => visited.push(value + index));
            text(visited);
            text(Object.prototype.toString.call([].values().map((x) => x)));
            const early = counting();
            text(early.some((n) => n === 2));
            try { [].values().reduce((a, b) => a + b); } catch (error) { text(error.name); }
            try { [1].values().take(-1); } catch (error) { text(error.name); }
            try { [1].values().map(1); } catch (error) { text(error.name); }
            try { [1].values().flatMap((n) => n).toArray(); } catch (error) { text(error.name); }
            "#
        ),
        [
            "0",
            "[[0,2],[1,6],[2,10]]",
            r#"[1,2,3,4,5,"closed"]"#,
            "[2,3]",
            "[1,10,2,20]",
            "10",
            "16",
            "[true,false,6]",
            r#"["a0","b1"]"#,
            "[object Iterator Helper]",
            "true",
            "TypeError",
            "RangeError",
            "TypeError",
            "TypeError",
        ]
    );
}

/// A conformance test.
pub fn the_iterator_global_wraps_iterators_and_can_be_extended() {
    assert_eq!(
        texts_of(
            r#"
            let count = 0;
            const plain = { next: () => (count < 3 ? { value: count++, done: false } : { value: undefined, done: true }) };
            const wrapped = Iterator.from(plain);
            text([wrapped instanceof Iterator, wrapped.map((n) => n * 2).toArray()]);
            const array = [1, 2].values();
            text(Iterator.from(array) === array);
            text(Iterator.from("ab").toArray());
            class Countdown extends Iterator {
              constructor(from) { super(); this.n = from; }
              next() { return this.n > 0 ? { value: this.n--, done: false } : { value: undefined, done: true }; }
            }
            text(new Countdown(3).filter((n) => n !== 2).toArray());
            try { new Iterator(); } catch (error) { text(error.name); }
            try { Iterator.from(5); } catch (error) { text(error.name); }
            "#
        ),
        [
            "[true,[0,2,4]]",
            "true",
            r#"["a","b"]"#,
            "[3,1]",
            "TypeError",
            "TypeError",
        ]
    );
}

/// A conformance test.
pub fn promise_try_turns_a_throw_or_a_value_into_a_promise() {
    assert_eq!(
        texts_of(
            r#"
            text(await Promise.try((a, b) => a + b, 1, 2));
            text(await Promise.try(async () => "awaited"));
            try { await Promise.try(() => { throw new Error("thrown"); }); } catch (error) { text(error.message); }
            text(Promise.try(() => 1) instanceof Promise);
            "#
        ),
        ["3", "awaited", "thrown", "true"]
    );
}

/// A conformance test.
pub fn regexp_escape_makes_any_string_a_literal_pattern() {
    assert_eq!(
        texts_of(
            r#"
            text(RegExp.escape("1.5*(x+y)?"));
            text(RegExp.escape("foo-bar, baz"));
            text(RegExp.escape("tab\there\nline \u2028"));
            // Beyond ASCII only the matching is held the same: QuickJS-NG escapes "é" and
            // "😀" too, where the proposal keeps them as they are.
            const wide = "café ☕ 😀";
            text([new RegExp(RegExp.escape(wide)).test("a café ☕ 😀"), new RegExp(RegExp.escape(wide), "u").test(wide)]);
            const needle = "a+b (c)";
            text(new RegExp(RegExp.escape(needle)).test("x a+b (c) y"));
            try { RegExp.escape(5); } catch (error) { text(error.name); }
            "#
        ),
        [
            r"\x31\.5\*\(x\+y\)\?",
            r"\x66oo\x2dbar\x2c\x20baz",
            r"\x74ab\there\nline\x20\u2028",
            "[true,true]",
            "true",
            "TypeError",
        ]
    );
}

/// A conformance test.
pub fn array_buffers_resize_and_transfer() {
    assert_eq!(
        texts_of(
            r#"
            const growing = new ArrayBuffer(2, { maxByteLength: 8 });
            growing.resize(6);
            text([growing.resizable, growing.byteLength, growing.maxByteLength]);
            const original = new ArrayBuffer(4);
            const moved = original.transfer(8);
            text([original.detached, original.byteLength, moved.byteLength]);
            "#
        ),
        ["[true,6,8]", "[true,0,8]"]
    );
}

/// A conformance test.
pub fn regexps_take_the_v_flag_duplicate_group_names_and_modifiers() {
    assert_eq!(
        texts_of(
            r#"
            text(new RegExp("^[\\p{L}--[a-z]]+$", "v").test("ÀB"));
            text(new RegExp("(?<year>\\d{4})-\\d\\d|\\d\\d/(?<year>\\d{4})").exec("12/2025").groups.year);
            text(new RegExp("(?i:a)b").test("Ab"));
            text(new RegExp("(?i:a)b").test("AB"));
            "#
        ),
        ["true", "2025", "true", "false"]
    );
}

/// A conformance test.
pub fn float16_arrays_round_to_half_precision() {
    assert_eq!(
        texts_of(
            r#"
            const halves = new Float16Array([1.5, 1.337, 70000]);
            text([halves[0], halves[1], halves[2], halves.BYTES_PER_ELEMENT, Math.f16round(1.337)]);
            "#
        ),
        ["[1.5,1.3369140625,null,2,1.3369140625]"]
    );
}

/// A conformance test.
pub fn using_declarations_dispose_at_the_end_of_their_block() {
    assert_eq!(
        texts_of(
            r#"
            const log = [];
            const resource = (name) => ({ [Symbol.dispose]() { log.push("disposed " + name); } });
            {
              using first = resource("first");
              using second = resource("second");
              log.push("body");
            }
            text(log);
            "#
        ),
        [r#"["body","disposed second","disposed first"]"#]
    );
}
