//! The tidy test: rules of the house that no compiler checks, read off every source file of the
//! workspace (as rust-analyzer keeps one). Each rule names what broke it and what to do.
//!
//! - `unsafe` code only in the files of [`UNSAFE_ALLOWED`], the audited native layers.
//! - `Result<_, String>` only in the files of [`STRING_ERRORS_ALLOWED`], the edges where an error
//!   is text for a person; everything between parts fails with a typed error.
//! - No source file outside tests over [`LINE_BUDGET`] lines unless [`OVER_BUDGET`] names it
//!   (and a file named there that fits again must leave the list).
//! - Every module starts with its `//!` comment, saying its role.
//! - Locks in the crates' sources are `parking_lot`'s, which cannot be poisoned: no
//!   `std::sync::Mutex` and no poisoned-lock recovery written by hand.
//! - No loop of imports between the modules of any crate.
//! - The serving layers of `cli/src/serve/` ([`SERVE_LAYERS`]): each file imports only from the
//!   layers below its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The files that may hold `unsafe` code, and why.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    (
        "runtime-v8/src/ffi.rs",
        "the safe face of the V8 shim: its ownership rules at its top",
    ),
    (
        "engine-library/src/lib.rs",
        "one attribute: the exported name Node looks up to initialise the engine library",
    ),
    (
        "engine-process/src/native_probe.rs",
        "the test-only native attack probe's one call: its rules at its top",
    ),
    (
        "runtime-quickjs/src/allocator.rs",
        "QuickJS's allocator, passed on to rquickjs's RustAllocator and held to the heap limit: its rules at its top",
    ),
    (
        "engine-process/src/descriptors.rs",
        "two system calls on descriptors (SCM_RIGHTS, closing inherited ones): its rules at its top",
    ),
];

/// The files that may return `Result<_, String>`, and why.
const STRING_ERRORS_ALLOWED: &[(&str, &str)] = &[
    (
        "cli/src/config/mod.rs",
        "the binary's edge: what is wrong in a config file, printed for its author",
    ),
    (
        "cli/src/config/entry.rs",
        "the binary's edge: why a config entry cannot start, printed and reported as its reason",
    ),
    (
        "cli/src/config/json.rs",
        "the binary's edge: what is wrong in a JSON config entry, printed for its author",
    ),
    (
        "cli/src/wrap.rs",
        "the binary's edge: why an agent's configuration file is left as it is, printed for its owner",
    ),
    (
        "cli/src/config/codex.rs",
        "the binary's edge: what is wrong in a codex config entry, printed for its author",
    ),
    (
        "cli/src/config/expand.rs",
        "the binary's edge: a variable a config names that cannot be resolved, printed",
    ),
    (
        "cli/src/toolset.rs",
        "the binary's edge: a reloaded config refused, logged with its reason",
    ),
    (
        "cli/src/servers.rs",
        "the binary's edge: a server `login` cannot use, printed",
    ),
    (
        "cli/src/run.rs",
        "the binary's edge: a source file that cannot be read, printed",
    ),
    (
        "cli/src/http/tokens.rs",
        "the binary's edge: token and secret files refused at start-up, printed",
    ),
    (
        "cli/src/http/gate.rs",
        "the binary's edge: a cluster token refused at start-up, printed",
    ),
    (
        "cli/src/http/tenant.rs",
        "the binary's edge: a name refused, the text handed to the client as it is",
    ),
    (
        "cli/examples/bench/mode.rs",
        "the bench's command line, refused with a message for its user",
    ),
    (
        "cli/src/serve/mod.rs",
        "the binary's edge: start-up refusals, printed before exiting",
    ),
    (
        "cli/src/serve/cluster.rs",
        "the binary's edge: joining a cluster at start-up, printed before exiting",
    ),
    (
        "engine-process/src/child.rs",
        "the test-only native probe, whose answer is a report for the test",
    ),
    (
        "engine-process/src/child/probe.rs",
        "the test-only native probe, whose answer is a report for the test",
    ),
    (
        "engine-process/src/sandbox.rs",
        "the test-only native probe, whose answer is a report for the test",
    ),
    (
        "engine-process/src/native_probe.rs",
        "the test-only native probe, whose answer is a report for the test",
    ),
    (
        "runtime-v8/src/ffi.rs",
        "the shim's own words for why the startup snapshot could not be made, logged once",
    ),
];

/// The most lines a source file outside tests may have.
const LINE_BUDGET: usize = 1_000;

/// Source files allowed past [`LINE_BUDGET`], and why.
const OVER_BUDGET: &[(&str, &str)] = &[];

/// The files of `cli/src/serve/`, bottom layer first: a file imports only from lower layers.
const SERVE_LAYERS: &[&[&str]] = &[
    &["args"],
    &[
        "identity",
        "results",
        "limits",
        "progress",
        "push",
        "questions",
    ],
    &["admission", "cluster", "user"],
    &["live"],
    &["registry", "tasks", "retries"],
    &["sessions"],
    &["handler", "ops"],
    &["mod"],
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// Every `.rs` file of the workspace's crates, as a path relative to the workspace.
fn rust_files() -> Vec<PathBuf> {
    fn walk(folder: &Path, into: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(folder) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    walk(&path, into);
                }
            } else if name.ends_with(".rs") {
                into.push(path);
            }
        }
    }
    let root = workspace();
    let mut files = Vec::new();
    for crate_folder in crate_folders() {
        walk(&root.join(crate_folder), &mut files);
    }
    files
        .into_iter()
        .map(|path| path.strip_prefix(&root).unwrap().to_path_buf())
        .collect()
}

/// The workspace's member folders, as its manifest lists them.
fn crate_folders() -> Vec<String> {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let members = manifest
        .split_once("members = [")
        .expect("the workspace manifest lists its members")
        .1
        .split_once(']')
        .unwrap()
        .0;
    members
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_owned())
        .filter(|member| !member.is_empty())
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap()
}

fn slash(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}

/// Whether `path` is test code: a crate's `tests/`, or the test-support crate.
fn is_test_code(path: &Path) -> bool {
    let text = slash(path);
    text.contains("/tests/") || text.starts_with("test-support/")
}

/// `source` with every `//` comment removed (doc comments too), line by line. A `//` inside a
/// string cuts the rest of its line, which only makes the rules see less.
fn without_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `line` with the text of its string literals left out (their quotes kept).
fn without_strings(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_string = false;
    let mut characters = line.chars().peekable();
    let mut previous = ' ';
    while let Some(character) = characters.next() {
        if in_string {
            match character {
                '\\' => {
                    characters.next();
                }
                '"' => {
                    in_string = false;
                    out.push('"');
                }
                _ => {}
            }
        } else {
            // `'"'` is a character, not the start of a string.
            let is_char_literal = previous == '\'' && characters.peek() == Some(&'\'');
            if character == '"' && !is_char_literal {
                in_string = true;
            }
            out.push(character);
        }
        previous = character;
    }
    out
}

/// `source` without its `#[cfg(test)] mod NAME { ... }` blocks.
fn without_test_modules(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut kept = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let opens_test_module = lines[index].trim() == "#[cfg(test)]"
            && lines.get(index + 1).is_some_and(|next| {
                let next = next.trim_start();
                (next.starts_with("mod ") || next.starts_with("pub mod ")) && next.ends_with('{')
            });
        if !opens_test_module {
            kept.push(lines[index]);
            index += 1;
            continue;
        }
        let mut depth = 0i64;
        index += 1;
        while index < lines.len() {
            let line = without_comments(lines[index]);
            depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
            index += 1;
            if depth <= 0 {
                break;
            }
        }
    }
    kept.join("\n")
}

fn is_identifier_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// The files on a list that no longer exist: a rule's list must stay true.
fn stale_entries(list: &[(&str, &str)], files: &[PathBuf]) -> Vec<String> {
    let present: BTreeSet<String> = files.iter().map(|file| slash(file)).collect();
    list.iter()
        .filter(|(path, _)| !present.contains(*path))
        .map(|(path, _)| (*path).to_owned())
        .collect()
}

#[test]
fn unsafe_code_lives_only_in_the_audited_native_layers() {
    let files = rust_files();
    let allowed: BTreeSet<&str> = UNSAFE_ALLOWED.iter().map(|(path, _)| *path).collect();
    let mut found = Vec::new();
    for file in &files {
        let code = without_comments(&read(file));
        for (number, line) in code.lines().enumerate() {
            if has_unsafe_code(&without_strings(line)) && !allowed.contains(slash(file).as_str()) {
                found.push(format!("{}:{}: {}", slash(file), number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe code outside the audited native layers ({allowed:?}):\n{}\nmove it behind a safe \
         function there, or, if a new native layer is really needed, add it to UNSAFE_ALLOWED with \
         its reason and write its ownership rules at its top",
        found.join("\n")
    );
    let stale = stale_entries(UNSAFE_ALLOWED, &files);
    assert!(
        stale.is_empty(),
        "UNSAFE_ALLOWED names files that are gone: {stale:?}"
    );
}

/// Whether a line (without comments) holds `unsafe` code: a block, fn, impl, trait, extern block
/// or attribute.
fn has_unsafe_code(line: &str) -> bool {
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) = line[from..].find("unsafe") {
        let start = from + at;
        let end = start + "unsafe".len();
        from = end;
        if start > 0 && (is_identifier_byte(bytes[start - 1]) || bytes[start - 1] == b'"') {
            continue;
        }
        if bytes.get(end).is_some_and(|byte| is_identifier_byte(*byte)) {
            continue;
        }
        let rest = line[end..].trim_start();
        if rest.starts_with('{')
            || rest.starts_with('(')
            || ["fn", "impl", "trait", "extern"]
                .iter()
                .any(|word| rest.starts_with(word))
            || rest.is_empty()
        {
            return true;
        }
    }
    false
}

#[test]
fn strings_are_left_out_before_looking_for_code() {
    assert_eq!(
        without_strings(r#"f("unsafe {", '"', x)"#),
        r#"f("", '"', x)"#
    );
    assert_eq!(without_strings(r#"a("\"unsafe {\"") + b"#), r#"a("") + b"#);
}

#[test]
fn has_unsafe_code_tells_code_from_words() {
    assert!(has_unsafe_code("    unsafe { libc::close(fd) }"));
    assert!(has_unsafe_code("unsafe extern \"C\" {"));
    assert!(has_unsafe_code("pub unsafe fn raw() {}"));
    assert!(has_unsafe_code("#[unsafe(no_mangle)]"));
    assert!(!has_unsafe_code("let text = \"unsafe.\";"));
    assert!(!has_unsafe_code("#![forbid(unsafe_code)]"));
    assert!(!has_unsafe_code("unsafe_op_in_unsafe_fn = \"deny\""));
}

#[test]
fn string_errors_only_at_the_named_edges() {
    let files = rust_files();
    let allowed: BTreeSet<&str> = STRING_ERRORS_ALLOWED
        .iter()
        .map(|(path, _)| *path)
        .collect();
    let mut found = Vec::new();
    for file in files.iter().filter(|file| !is_test_code(file)) {
        if slash(file).starts_with("xtask/") || allowed.contains(slash(file).as_str()) {
            continue;
        }
        let code = without_test_modules(&without_comments(&read(file)));
        for (number, line) in code.lines().enumerate() {
            if returns_string_error(line) {
                found.push(format!("{}:{}: {}", slash(file), number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "Result<_, String> between parts:\n{}\nfail with a typed error (thiserror) that says what \
         broke; only the edges in STRING_ERRORS_ALLOWED hand text to a person",
        found.join("\n")
    );
    let stale = stale_entries(STRING_ERRORS_ALLOWED, &files);
    assert!(
        stale.is_empty(),
        "STRING_ERRORS_ALLOWED names files that are gone: {stale:?}"
    );
}

/// Whether a line names `Result<…, String>`.
fn returns_string_error(line: &str) -> bool {
    let mut from = 0;
    while let Some(at) = line[from..].find("Result<") {
        let start = from + at + "Result<".len();
        from = start;
        // The type's closing `>`, at depth zero.
        let mut depth = 1;
        let mut last_comma = None;
        for (offset, character) in line[start..].char_indices() {
            match character {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        if let Some(comma) = last_comma {
                            let error = line[start + comma + 1..start + offset].trim();
                            if error == "String" || error == "std::string::String" {
                                return true;
                            }
                        }
                        break;
                    }
                }
                ',' if depth == 1 => last_comma = Some(offset),
                _ => {}
            }
        }
    }
    false
}

#[test]
fn returns_string_error_reads_nested_types() {
    assert!(returns_string_error(
        "fn read() -> Result<String, String> {"
    ));
    assert!(returns_string_error(
        "fn join() -> Result<Option<Arc<Cluster>>, String> {"
    ));
    assert!(returns_string_error(
        "let f = |key: &str| -> Result<BTreeMap<String, String>, String> {"
    ));
    assert!(!returns_string_error(
        "fn load() -> Result<BTreeMap<String, String>, StoreError> {"
    ));
    assert!(!returns_string_error("fn id() -> Result<String, Error> {"));
}

#[test]
fn source_files_keep_within_the_line_budget() {
    let files = rust_files();
    let listed: BTreeSet<&str> = OVER_BUDGET.iter().map(|(path, _)| *path).collect();
    let mut over = Vec::new();
    let mut fit = Vec::new();
    for file in files.iter().filter(|file| !is_test_code(file)) {
        let lines = read(file).lines().count();
        let name = slash(file);
        match (lines > LINE_BUDGET, listed.contains(name.as_str())) {
            (true, false) => over.push(format!("{name}: {lines} lines")),
            (false, true) => fit.push(format!("{name}: {lines} lines")),
            _ => {}
        }
    }
    assert!(
        over.is_empty(),
        "source files over {LINE_BUDGET} lines:\n{}\nsplit each into parts, one idea a file, \
         named for it",
        over.join("\n")
    );
    assert!(
        fit.is_empty(),
        "files on OVER_BUDGET that fit the budget now: {fit:?}; take them off the list"
    );
}

#[test]
fn locks_cannot_be_poisoned_and_need_no_recovery() {
    let mut found = Vec::new();
    for file in rust_files() {
        let name = slash(&file);
        if is_test_code(&file) || name.starts_with("xtask/") || !name.contains("/src/") {
            continue;
        }
        let code = without_test_modules(&without_comments(&read(&file)));
        for (number, line) in code.lines().enumerate() {
            let std_lock = [
                "std::sync::Mutex",
                "std::sync::Condvar",
                "std::sync::RwLock",
            ]
            .iter()
            .any(|path| line.contains(path))
                || (line.contains("use std::sync::{")
                    && ["Mutex", "Condvar", "RwLock"].iter().any(|lock| {
                        line.split(['{', '}', ',', ' '])
                            .any(|item| item.trim() == *lock)
                    }));
            if std_lock || line.contains("poisoned") {
                found.push(format!("{name}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "std locks or poisoned-lock recovery in the sources:\n{}\nuse parking_lot::{{Mutex, \
         Condvar}}, whose lock() returns the guard: no lock can be poisoned, so none needs \
         recovering",
        found.join("\n")
    );
}

#[test]
fn every_module_says_its_role_in_a_doc_comment() {
    let missing: Vec<String> = rust_files()
        .into_iter()
        .filter(|file| {
            let source = read(file);
            let first = source
                .lines()
                .find(|line| !line.trim().is_empty())
                .unwrap_or_default();
            !first.starts_with("//!")
        })
        .map(|file| slash(&file))
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a //! comment at their top: {missing:?}; say in a line or two what \
         each is for"
    );
}

/// One crate's modules, each a file, by module path (the root is the empty path).
struct Modules {
    files: BTreeMap<Vec<String>, PathBuf>,
}

impl Modules {
    /// The modules under `crate_folder/src`, or `None` for a crate without sources.
    fn of(crate_folder: &str) -> Option<Modules> {
        let source = PathBuf::from(crate_folder).join("src");
        let mut files = BTreeMap::new();
        for file in rust_files() {
            let Ok(relative) = file.strip_prefix(&source) else {
                continue;
            };
            let mut path: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(
                path.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                path.pop();
            }
            files.insert(path, file);
        }
        (!files.is_empty()).then_some(Modules { files })
    }

    /// The modules each module imports from (itself and its test modules aside).
    fn imports(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        self.files
            .iter()
            .map(|(module, file)| (module.clone(), self.imports_of(module, &read(file))))
            .collect()
    }

    fn imports_of(&self, module: &[String], source: &str) -> BTreeSet<Vec<String>> {
        let code = without_reexports(&without_test_modules(&without_comments(source)));
        let mut found = BTreeSet::new();
        for (prefix, base) in [
            ("crate::", Vec::new()),
            ("super::", module[..module.len().saturating_sub(1)].to_vec()),
            ("self::", module.to_vec()),
        ] {
            for path in paths_after(&code, prefix) {
                found.insert(self.resolve(base.clone(), &path));
            }
        }
        // A child module named bare, as `child::Item` or `use child::…`.
        for child in declared_children(&code) {
            let mut path = module.to_vec();
            path.push(child.clone());
            if self.files.contains_key(&path) && names_bare_path(&code, &child) {
                found.insert(path);
            }
        }
        found.remove(module);
        found
    }

    /// The module file a path from `base` lands in: the longest prefix that is a module.
    fn resolve(&self, mut base: Vec<String>, path: &[String]) -> Vec<String> {
        let mut segments = path.iter().peekable();
        while segments.peek().is_some_and(|segment| *segment == "super") {
            base.pop();
            segments.next();
        }
        for segment in segments {
            let mut deeper = base.clone();
            deeper.push(segment.clone());
            if self.files.contains_key(&deeper) {
                base = deeper;
            } else {
                break;
            }
        }
        base
    }
}

/// `code` without `pub use …;` statements: a module's re-exports are its face, not its imports.
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = find_reexport(rest) {
        out.push_str(&rest[..at]);
        rest = match rest[at..].find(';') {
            Some(end) => &rest[at + end + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

fn find_reexport(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = code[from..].find("pub") {
        let start = from + at;
        from = start + 3;
        if start > 0 && is_identifier_byte(code.as_bytes()[start - 1]) {
            continue;
        }
        let mut rest = &code[start + 3..];
        if rest.starts_with('(') {
            let Some(close) = rest.find(')') else {
                continue;
            };
            rest = &rest[close + 1..];
        }
        if rest.trim_start().starts_with("use ") {
            return Some(start);
        }
    }
    None
}

/// Every path written after `prefix` (`crate::`, `super::`, `self::`), as segments; a group
/// (`prefix{a::X, b}`) gives one path per item. `$crate::` (a macro's) is not an import.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix) {
        let start = from + at;
        from = start + prefix.len();
        if start > 0 && (is_identifier_byte(bytes[start - 1]) || bytes[start - 1] == b'$') {
            continue;
        }
        if start > 1 && &code[start - 2..start] == "::" {
            continue;
        }
        let (head, rest) = read_path(&code[from..]);
        if let Some(group) = rest.strip_prefix('{') {
            for item in group_items(group) {
                let (tail, _) = read_path(item.trim());
                let mut path = head.clone();
                path.extend(tail);
                paths.push(path);
            }
        } else {
            paths.push(head);
        }
    }
    paths
}

/// The `a::b::c` at the start of `text` (identifiers joined by `::`), and what follows its last
/// `::` (or the path).
fn read_path(text: &str) -> (Vec<String>, &str) {
    let mut segments = Vec::new();
    let mut rest = text;
    loop {
        let length = rest
            .bytes()
            .take_while(|byte| is_identifier_byte(*byte))
            .count();
        if length == 0 {
            return (segments, rest);
        }
        segments.push(rest[..length].to_owned());
        match rest[length..].strip_prefix("::") {
            Some(after) => rest = after,
            None => return (segments, &rest[length..]),
        }
    }
}

/// The items of a `{…}` group (the text after its `{`), split at its top-level commas.
fn group_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (index, character) in group.char_indices() {
        match character {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..index]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    items
}

/// The modules a file declares as files of their own (`mod name;`).
fn declared_children(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            let line = match line.strip_prefix("pub(") {
                Some(rest) => rest.split_once(')')?.1.trim_start(),
                None => line,
            };
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect()
}

/// Whether `code` names `child::` as a path of its own (not after another `::`).
fn names_bare_path(code: &str, child: &str) -> bool {
    let needle = format!("{child}::");
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find(&needle) {
        let start = from + at;
        from = start + needle.len();
        let before_ok = start == 0
            || !(is_identifier_byte(bytes[start - 1])
                || bytes[start - 1] == b':'
                || bytes[start - 1] == b'$');
        if before_ok {
            return true;
        }
    }
    false
}

/// The groups of modules that import one another in a circle (Tarjan's strongly connected
/// components of more than one module).
fn loops(imports: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Search<'a> {
        imports: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, module: &'a Vec<String>) {
            let number = self.index.len();
            self.index.insert(module, number);
            self.low.insert(module, number);
            self.stack.push(module);
            self.on_stack.insert(module);
            for target in &self.imports[module] {
                let Some((target, _)) = self.imports.get_key_value(target) else {
                    continue;
                };
                if !self.index.contains_key(target) {
                    self.visit(target);
                    let low = self.low[module].min(self.low[target]);
                    self.low.insert(module, low);
                } else if self.on_stack.contains(target) {
                    let low = self.low[module].min(self.index[target]);
                    self.low.insert(module, low);
                }
            }
            if self.low[module] == self.index[module] {
                let mut group = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    group.push(member.clone());
                    if member == module {
                        break;
                    }
                }
                if group.len() > 1 {
                    self.found.push(group);
                }
            }
        }
    }
    let mut search = Search {
        imports,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in imports.keys() {
        if !search.index.contains_key(module) {
            search.visit(module);
        }
    }
    search.found
}

fn module_name(module: &[String]) -> String {
    if module.is_empty() {
        "(root)".to_owned()
    } else {
        module.join("::")
    }
}

#[test]
fn no_module_imports_from_a_module_that_imports_it_back() {
    let mut report = Vec::new();
    for crate_folder in crate_folders() {
        let Some(modules) = Modules::of(&crate_folder) else {
            continue;
        };
        let imports = modules.imports();
        for group in loops(&imports) {
            let members: BTreeSet<&Vec<String>> = group.iter().collect();
            let edges: Vec<String> = group
                .iter()
                .flat_map(|from| {
                    imports[from]
                        .iter()
                        .filter(|to| members.contains(to))
                        .map(move |to| format!("{} -> {}", module_name(from), module_name(to)))
                })
                .collect();
            report.push(format!("{crate_folder}: {}", edges.join(", ")));
        }
    }
    assert!(
        report.is_empty(),
        "modules that import from one another in a circle:\n{}\nmove what both need into a \
         module of its own below them (a crate root re-exports with `pub use`, which is not an \
         import)",
        report.join("\n")
    );
}

#[test]
fn the_loop_finder_sees_a_loop_through_a_parent_and_a_group() {
    let mut files = BTreeMap::new();
    for module in [vec![], vec!["a".to_owned()], vec!["b".to_owned()]] {
        files.insert(module, PathBuf::new());
    }
    let modules = Modules { files };
    let root = modules.imports_of(&[], "mod a;\nmod b;\npub use a::X;\nfn f() { b::run() }\n");
    let a = modules.imports_of(&["a".to_owned()], "use crate::{b::Y, Z};\n");
    let b = modules.imports_of(&["b".to_owned()], "use super::a::X;\n");
    assert_eq!(root, BTreeSet::from([vec!["b".to_owned()]]));
    assert_eq!(a, BTreeSet::from([vec!["b".to_owned()], vec![]]));
    assert_eq!(b, BTreeSet::from([vec!["a".to_owned()]]));
    let imports = BTreeMap::from([
        (vec![], root),
        (vec!["a".to_owned()], a),
        (vec!["b".to_owned()], b),
    ]);
    let found = loops(&imports);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].len(), 3);
}

#[test]
fn the_serving_layers_import_only_from_below() {
    let modules = Modules::of("cli").expect("the cli crate has sources");
    let layer_of = |name: &str| SERVE_LAYERS.iter().position(|layer| layer.contains(&name));
    let serve = vec!["serve".to_owned()];
    let mut broken = Vec::new();
    let mut unplaced = Vec::new();
    for (module, targets) in modules.imports() {
        let Some(name) = serve_file(&module, &serve) else {
            continue;
        };
        let Some(layer) = layer_of(&name) else {
            unplaced.push(name);
            continue;
        };
        for target in targets {
            let Some(target_name) = serve_file(&target, &serve) else {
                continue;
            };
            match layer_of(&target_name) {
                Some(target_layer) if target_layer < layer => {}
                _ => broken.push(format!("serve/{name} imports serve/{target_name}")),
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "files of cli/src/serve/ in no layer of SERVE_LAYERS: {unplaced:?}; place each"
    );
    assert!(
        broken.is_empty(),
        "the serving layers run bottom to top ({SERVE_LAYERS:?}), each importing only from \
         below:\n{}\nmove what is shared down a layer",
        broken.join("\n")
    );
}

/// The name of a file of `cli/src/serve/` (`mod` for its `mod.rs`), if `module` is one.
fn serve_file(module: &[String], serve: &[String]) -> Option<String> {
    if module == serve {
        return Some("mod".to_owned());
    }
    match module {
        [first, name] if first == &serve[0] => Some(name.clone()),
        _ => None,
    }
}
