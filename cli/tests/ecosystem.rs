//! `codemode mcp` against the MCP ecosystem's own tools, as MCP developers first try a server:
//! the official conformance suite (two releases: 0.1, and 0.2, which covers 2026-07-28), the MCP
//! Inspector's CLI (v1, and v2 in its default mode) over stdio and HTTP, and the TypeScript and
//! Python SDKs' clients (`ecosystem/sdk_client.mjs`, `ecosystem/sdk_client.py`; also with and
//! without an elicitation handler, asked to approve a nested call). All are
//! installed from the npm registry and PyPI at pinned versions
//! (`codemode_test_support::mcp_servers`), with the Node.js 22 they need.
//!
//! Every scenario of the suite, the server's and the client's (codemode calling a downstream
//! server, through `ecosystem/conformance_client.sh`), is either run, and must pass, or listed
//! here as not applicable with why: a new release's new scenario fails the test until it is
//! classified.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use codemode_test_support::ListeningServer;
use codemode_test_support::mcp_servers::{self, McpServers};
use serde_json::Value;

mod common;

use common::CODEMODE;

/// The token of the HTTP servers these tests start.
const TOKEN: &str = "ecosystem-token-0123456789abcdef";

/// A run of an ecosystem tool that takes longer than this has hung.
const HANG_GUARD: Duration = Duration::from_secs(180);

fn tools() -> McpServers {
    mcp_servers::install(&mcp_servers::workspace_root())
        .unwrap_or_else(|error| panic!("cannot install the MCP ecosystem's tools: {error}"))
}

/// Runs `command` (with Node.js 22 first on its `PATH`) to its end, or kills it past the hang
/// guard.
fn run(tools: &McpServers, mut command: Command) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![tools.node22_bin()];
    paths.extend(std::env::split_paths(&path));
    command
        .env("PATH", std::env::join_paths(paths).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let description = format!("{command:?}");
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {description}: {error}"));
    let started = Instant::now();
    // Read both pipes on threads, so a chatty tool never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).map(|_| bytes)
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG_GUARD {
            let _ = child.kill();
            panic!("hung: {description} ran past {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap().unwrap_or_default(),
        stderr: err.join().unwrap().unwrap_or_default(),
    }
}

/// [`run`], which must succeed (`what` names it in the failure); its standard output.
fn run_ok(tools: &McpServers, command: Command, what: &str) -> String {
    let output = run(tools, command);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `codemode mcp --http` on a loopback port, with `extra` flags.
fn http_server(extra: &[&str]) -> ListeningServer {
    let mut command = Command::new(CODEMODE);
    command
        .args(["mcp", "--http", "127.0.0.1:0"])
        .args(extra)
        .env("CODEMODE_AUTH_TOKEN", TOKEN);
    ListeningServer::spawn(command)
}

/// One release of the conformance suite, and how each of its server scenarios applies.
struct Release {
    /// Its folder among the ecosystem tools.
    tool: &'static str,
    /// The scenarios that apply to a server offering only tools (`exec` and `wait`): each must
    /// pass, but for the checks in `partly`.
    applicable: &'static [&'static str],
    /// Checks of applicable scenarios that cannot apply, with why: `(scenario, check, why)`.
    partly: &'static [(&'static str, &'static str, &'static str)],
    /// Flags that run a scenario whatever revision the release calls current (0.2 leaves
    /// 2026-07-28's out of its default suite; 0.1 knows no such flag).
    run_any_revision: &'static [&'static str],
}

/// Why a scenario the suite offers is not run against codemode, or `None` when it is.
fn not_applicable(scenario: &str) -> Option<&'static str> {
    let by_prefix: &[(&str, &str)] = &[
        (
            "tools-call-",
            "calls the suite's fixture tools (test_simple_text, test_image_content, …); codemode \
             offers exec and wait, whose results other tests check",
        ),
        (
            "elicitation-",
            "calls the suite's fixture tools that elicit input from the client",
        ),
        ("resources-", "codemode offers no resources"),
        ("prompts-", "codemode offers no prompts"),
        (
            "input-required-result-",
            "calls the suite's fixture tools that ask the client for input (2026-07-28 \
             input-required results); codemode's tools never ask",
        ),
        (
            "tasks-",
            "the tasks extension's scenarios call the suite's fixture tools (greet, \
             slow_compute, failing_job, …); codemode's exec tasks are tested in tests/tasks.rs",
        ),
        (
            "sep-2640-",
            "the skills extension: codemode offers no skills",
        ),
    ];
    let exact: &[(&str, &str)] = &[
        (
            "completion-complete",
            "codemode offers no prompts or resource templates to complete, and does not \
             declare the completions capability",
        ),
        (
            "json-schema-2020-12",
            "looks for the suite's fixture tool json_schema_2020_12_tool",
        ),
        (
            "http-custom-header-server-validation",
            "needs a tool with x-mcp-header annotations; codemode's tools have none",
        ),
        (
            "sep-2164-resource-not-found",
            "codemode offers no resources to be found or not",
        ),
    ];
    by_prefix
        .iter()
        .find(|(prefix, _)| scenario.starts_with(prefix))
        .or_else(|| exact.iter().find(|(name, _)| *name == scenario))
        .map(|(_, why)| *why)
}

/// The checks of `server-stateless` that need the suite's diagnostic tools.
const STATELESS_FIXTURE_CHECKS: [(&str, &str, &str); 4] = [
    (
        "server-stateless",
        "sep-2575-server-rejects-undeclared-capability",
        "calls the suite's diagnostic tool test_missing_capability; codemode's tools need no \
         client capability",
    ),
    (
        "server-stateless",
        "sep-2575-missing-capability-http-400",
        "the HTTP status of the same diagnostic tool's error",
    ),
    (
        "server-stateless",
        "sep-2575-http-server-no-independent-requests-on-stream",
        "calls the suite's diagnostic tool test_streaming_elicitation; codemode never sends the \
         client requests",
    ),
    (
        "server-stateless",
        "sep-2575-server-no-log-without-loglevel",
        "calls the suite's diagnostic tool test_logging_tool; codemode sends no log message \
         without an MCP session",
    ),
];

const RELEASE_0_1: Release = Release {
    tool: "conformance-0.1",
    applicable: &[
        "server-initialize",
        "logging-set-level",
        "ping",
        "tools-list",
        "server-sse-polling",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    ],
    partly: &[],
    run_any_revision: &[],
};

const RELEASE_0_2: Release = Release {
    tool: "conformance-0.2",
    applicable: &[
        "server-initialize",
        "server-session-lifecycle",
        "server-stateless",
        "logging-set-level",
        "ping",
        "tools-list",
        "server-sse-polling",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
        "caching",
        "http-header-validation",
    ],
    partly: &[
        STATELESS_FIXTURE_CHECKS[0],
        STATELESS_FIXTURE_CHECKS[1],
        STATELESS_FIXTURE_CHECKS[2],
        STATELESS_FIXTURE_CHECKS[3],
        (
            "caching",
            "sep-2549-prompts-list-caching-hints",
            "codemode offers no prompts to list",
        ),
        (
            "caching",
            "sep-2549-resources-list-caching-hints",
            "codemode offers no resources to list",
        ),
        (
            "caching",
            "sep-2549-resources-templates-list-caching-hints",
            "codemode offers no resource templates to list",
        ),
    ],
    run_any_revision: &["--force"],
};

/// The conformance suite's program in `release`, run by Node.js 22.
fn suite(tools: &McpServers, release: &Release) -> Command {
    let mut command = Command::new(tools.node22());
    command.arg(
        tools
            .ecosystem_package(release.tool, "@modelcontextprotocol/conformance")
            .join("dist/index.js"),
    );
    command
}

/// Checks that every scenario `release` offers on `side` (`--server` or `--client`) is either
/// applicable or excused by `not_applicable`, and that it still offers each applicable one.
fn check_classified(
    tools: &McpServers,
    release: &Release,
    side: &str,
    not_applicable: fn(&str) -> Option<&'static str>,
) {
    let mut command = suite(tools, release);
    command.args(["list", side]);
    let output = run(tools, command);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let offered: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|line| {
            line.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(offered.len() > 2, "{} lists {offered:?}", release.tool);
    let unclassified: Vec<&String> = offered
        .iter()
        .filter(|scenario| {
            !release.applicable.contains(&scenario.as_str()) && not_applicable(scenario).is_none()
        })
        .collect();
    assert!(
        unclassified.is_empty(),
        "{} {side}: scenarios neither run nor listed as not applicable: {unclassified:?}",
        release.tool
    );
    for scenario in release.applicable {
        assert!(
            offered.iter().any(|name| name == scenario),
            "{} no longer offers {scenario}",
            release.tool
        );
    }
}

/// Runs `scenario` of `release` (`arguments` say against what), and returns what failed: each
/// check it failed that `release.partly` does not excuse, or that it made none. An excuse for a
/// check the suite no longer makes fails the test: it is stale.
fn failures_of(
    tools: &McpServers,
    release: &Release,
    scenario: &str,
    arguments: impl FnOnce(&mut Command),
) -> Vec<String> {
    let results =
        codemode_test_support::scratch_folder(&format!("ecosystem-{}-{scenario}", release.tool));
    let mut command = suite(tools, release);
    arguments(&mut command);
    command
        .arg("--scenario")
        .arg(scenario)
        .arg("-o")
        .arg(&results);
    let output = run(tools, command);
    // A scenario named `auth/x` writes its results one folder further down.
    let folder = std::fs::read_dir(&results)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .flat_map(|path| {
            let nested: Vec<_> = std::fs::read_dir(&path)
                .map(|entries| {
                    entries
                        .filter_map(|entry| Some(entry.ok()?.path()))
                        .collect()
                })
                .unwrap_or_default();
            std::iter::once(path).chain(nested)
        })
        .find(|path| path.join("checks.json").exists());
    let made: Vec<Value> = folder
        .map(|folder| {
            serde_json::from_str(&std::fs::read_to_string(folder.join("checks.json")).unwrap())
                .unwrap()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&results);
    if made.is_empty() {
        return vec![format!(
            "{} {scenario}: no check was made\n{}",
            release.tool,
            String::from_utf8_lossy(&output.stdout)
        )];
    }
    for (_, check_id, _) in release.partly.iter().filter(|(name, ..)| *name == scenario) {
        assert!(
            made.iter().any(|check| check["id"] == *check_id),
            "{scenario} no longer makes the check {check_id}: drop its excuse"
        );
    }
    made.iter()
        .filter(|check| check["status"] == "FAILURE")
        .filter(|check| {
            !release
                .partly
                .iter()
                .any(|(name, check_id, _)| *name == scenario && check["id"] == *check_id)
        })
        .map(|check| {
            format!(
                "{} {scenario} / {}: {}",
                release.tool,
                check["id"].as_str().unwrap_or_default(),
                check["errorMessage"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn conformance_of_the_server(release: &Release) {
    let tools = tools();
    check_classified(&tools, release, "--server", not_applicable);
    // The suite's server mode sends no credentials: a loopback server without them, as a
    // developer runs it locally.
    let mut command = Command::new(CODEMODE);
    command.args(["mcp", "--http", "127.0.0.1:0", "--no-auth"]);
    let server = ListeningServer::spawn(command);
    let failures: Vec<String> = release
        .applicable
        .iter()
        .flat_map(|scenario| {
            failures_of(&tools, release, scenario, |command| {
                command
                    .args(["server", "--url", server.url()])
                    .args(release.run_any_revision);
            })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_server_passes_the_conformance_suite_0_1() {
    conformance_of_the_server(&RELEASE_0_1);
}

#[test]
fn the_server_passes_the_conformance_suite_0_2_with_2026_07_28() {
    conformance_of_the_server(&RELEASE_0_2);
}

/// Why a client scenario the suite offers is not run against codemode, or `None` when it is.
fn client_not_applicable(scenario: &str) -> Option<&'static str> {
    let by_prefix: &[(&str, &str)] = &[
        (
            "auth/client-credentials-",
            "the client-credentials extension: a machine's own grant, where codemode logs in as \
             its user (authorization code, `codemode login`)",
        ),
        (
            "auth/cross-app-access-",
            "the cross-app access extension: an enterprise identity provider's token exchange, \
             which codemode does not offer",
        ),
        (
            "auth/enterprise-managed-",
            "the enterprise-managed authorization extension, which codemode does not offer",
        ),
        (
            "auth/dpop",
            "the DPoP extension (proof-of-possession tokens), which codemode does not offer",
        ),
        (
            "auth/wif-",
            "the workload identity federation extension: a machine's own grant, which codemode \
             does not offer",
        ),
        (
            "auth/2025-03-26-oauth-metadata-backcompat",
            "release 0.1's fixture serves authorization server metadata whose issuer is not the \
             URL it was fetched from, which codemode refuses (RFC 8414 §3.3, as 0.2's \
             auth/metadata-issuer-mismatch requires); 0.2's version of the scenario runs and \
             passes",
        ),
        (
            "json-schema-2020-12-preservation",
            "asks the client to send a tool's input schema back verbatim; a cell sees a tool as \
             a TypeScript declaration, not as its JSON schema",
        ),
        ("sep-2640-", "the skills extension: codemode uses no skills"),
    ];
    by_prefix
        .iter()
        .find(|(prefix, _)| scenario.starts_with(prefix))
        .map(|(_, why)| *why)
}

/// The authorization scenarios both releases offer: `codemode login`, then `codemode run`.
const AUTH_SCENARIOS: [&str; 18] = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
];

/// The client scenarios each release offers that codemode must pass, besides
/// [`AUTH_SCENARIOS`].
const CLIENT_SCENARIOS: [(&str, &[&str]); 2] = [
    (
        "conformance-0.1",
        &[
            "initialize",
            "tools_call",
            "sse-retry",
            "elicitation-sep1034-client-defaults",
        ],
    ),
    (
        "conformance-0.2",
        &[
            "initialize",
            "tools_call",
            "sse-retry",
            "request-metadata",
            "http-standard-headers",
            "http-custom-headers",
            "http-invalid-tool-headers",
            "json-schema-ref-no-deref",
            "elicitation-sep1034-client-defaults",
            "sep-2322-client-request-state",
            "auth/2025-03-26-oauth-metadata-backcompat",
            "auth/authorization-server-migration",
            "auth/iss-supported",
            "auth/iss-not-advertised",
            "auth/iss-supported-missing",
            "auth/iss-wrong-issuer",
            "auth/iss-unexpected",
            "auth/iss-normalized",
            "auth/metadata-issuer-mismatch",
        ],
    ),
];

#[test]
fn codemode_as_a_client_passes_the_conformance_suites() {
    let tools = tools();
    let driver =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecosystem/conformance_client.sh");
    let mut failures = Vec::new();
    for (tool, own) in CLIENT_SCENARIOS {
        let applicable: &'static [&'static str] = own
            .iter()
            .chain(&AUTH_SCENARIOS)
            .copied()
            .collect::<Vec<_>>()
            .leak();
        let release = Release {
            tool,
            applicable,
            partly: &[],
            run_any_revision: &[],
        };
        check_classified(&tools, &release, "--client", client_not_applicable);
        for scenario in applicable {
            failures.extend(failures_of(&tools, &release, scenario, |command| {
                command
                    .arg("client")
                    .arg("--command")
                    .arg(&driver)
                    .env("CODEMODE_PROGRAM", CODEMODE);
            }));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The Inspector's CLI in `tool` (v1 or v2), with `arguments` after `--cli`.
fn inspector(tools: &McpServers, tool: &str, arguments: &[&str]) -> Value {
    let entry = match tool {
        "inspector-1" => "cli/build/cli.js",
        _ => "clients/launcher/build/index.js",
    };
    let mut command = Command::new(tools.node22());
    command
        .arg(
            tools
                .ecosystem_package(tool, "@modelcontextprotocol/inspector")
                .join(entry),
        )
        .arg("--cli")
        .args(arguments);
    let stdout = run_ok(tools, command, &format!("{tool} {arguments:?}"));
    // v1 prints a deprecation banner before the JSON.
    let json = &stdout[stdout
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {stdout}"))..];
    serde_json::from_str(json).unwrap_or_else(|error| panic!("{error}: {stdout}"))
}

/// Lists the tools and runs a cell through the Inspector `tool`, connected by `target`.
fn inspect(tools: &McpServers, tool: &str, target: &[&str]) {
    let mut list = target.to_vec();
    list.extend(["--method", "tools/list"]);
    let listed = inspector(tools, tool, &list);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["exec", "wait"], "{tool}");
    let mut call = target.to_vec();
    call.extend([
        "--method",
        "tools/call",
        "--tool-name",
        "exec",
        "--tool-arg",
        "code=text(6 * 7)",
    ]);
    let called = inspector(tools, tool, &call);
    assert_eq!(called["isError"], false, "{tool}: {called}");
    let texts: Vec<&str> = called["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect();
    assert!(texts.contains(&"42"), "{tool}: {called}");
}

#[test]
fn the_inspector_cli_v1_and_v2_connect_over_stdio_and_http() {
    let tools = tools();
    let server = http_server(&[]);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    for tool in ["inspector-1", "inspector-2"] {
        inspect(&tools, tool, &[CODEMODE, "mcp"]);
        inspect(
            &tools,
            tool,
            &[server.url(), "--transport", "http", "--header", &bearer],
        );
    }
}

/// `ecosystem/sdk_client.mjs` with `arguments`; its checks all pass.
fn sdk_client(tools: &McpServers, arguments: &[&str]) {
    let mut command = Command::new(tools.node22());
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecosystem/sdk_client.mjs"))
        .arg(tools.ecosystem_package("sdk", "@modelcontextprotocol/sdk"))
        .args(arguments);
    let stdout = run_ok(
        tools,
        command,
        &format!("the TypeScript SDK client {arguments:?}"),
    );
    assert!(stdout.lines().count() >= 12, "{stdout}");
}

/// `ecosystem/sdk_client.py` with `arguments`, on the Python SDK; its checks all pass.
fn python_sdk_client(tools: &McpServers, arguments: &[&str]) {
    let mut command = Command::new(tools.python_program("python"));
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecosystem/sdk_client.py"))
        .args(arguments);
    let stdout = run_ok(
        tools,
        command,
        &format!("the Python SDK client {arguments:?}"),
    );
    assert!(
        stdout
            .lines()
            .filter(|line| line.starts_with("ok "))
            .count()
            >= 8,
        "{stdout}"
    );
}

#[test]
fn the_python_sdk_client_works_over_stdio_and_http() {
    let tools = tools();
    python_sdk_client(&tools, &["stdio", CODEMODE]);
    let server = http_server(&["--demo-tools"]);
    python_sdk_client(&tools, &["http", server.url(), TOKEN]);
}

/// `command` (an SDK client's `approvals` mode) passes its three checks.
fn sdk_approvals(tools: &McpServers, command: Command, what: &str) {
    let stdout = run_ok(tools, command, what);
    assert_eq!(
        stdout
            .lines()
            .filter(|line| line.starts_with("ok "))
            .count(),
        3,
        "{stdout}"
    );
}

#[test]
fn the_python_sdk_clients_elicitation_handler_approves_nested_calls() {
    let tools = tools();
    let mut command = Command::new(tools.python_program("python"));
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecosystem/sdk_client.py"))
        .args(["approvals", CODEMODE]);
    sdk_approvals(&tools, command, "the Python SDK client, approvals");
}

#[test]
fn the_typescript_sdk_clients_elicitation_handler_approves_nested_calls() {
    let tools = tools();
    let mut command = Command::new(tools.node22());
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ecosystem/sdk_client.mjs"))
        .arg(tools.ecosystem_package("sdk", "@modelcontextprotocol/sdk"))
        .args(["approvals", CODEMODE]);
    sdk_approvals(&tools, command, "the TypeScript SDK client, approvals");
}

#[test]
fn the_typescript_sdk_client_works_over_stdio_and_http() {
    let tools = tools();
    sdk_client(&tools, &["stdio", CODEMODE]);
    let server = http_server(&["--demo-tools"]);
    sdk_client(&tools, &["http", server.url(), TOKEN]);
}
