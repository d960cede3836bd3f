//! What the bench is asked to do ([`Mode`]): the whole suite, or one quick mode, read once from
//! the command line with the options every mode shares ([`Options`]).

/// What one run of the bench measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every table, and the JSON file (the default).
    Suite,
    /// `--round-trip-only`: tool round trips in-process and in engine processes.
    RoundTrip { engine: String },
    /// `--round-trips-in-process N`: N in-process round trips, for instruction counts.
    RoundTripsInProcess { engine: String, iterations: usize },
    /// `--quickjs-start-only`: QuickJS's warm start in-process.
    QuickJsStart,
    /// `--quickjs-process-start-only`: QuickJS's warm start in an engine process.
    QuickJsProcessStart,
    /// `--quickjs-targets`: QuickJS and V8 in engine processes beside the yardsticks.
    QuickJsTargets,
    /// `--spawn-only`: one engine process's spawn to ready, and its idle memory.
    Spawn,
    /// `--payload-only`: the large-payload rows.
    Payload,
    /// `--stored-only`: the stored-value rows.
    Stored,
    /// `--stores-only`: the stores' table.
    Stores,
    /// `--monty-only`: the table beside pydantic-monty (needs `--monty-python`).
    Monty { python: String },
    /// `--fresh-scope-only`: a fresh global scope on V8 from the startup snapshot and without it.
    FreshScope,
    /// `--exec-only`: `exec` over MCP back to back beside a trivial MCP tool.
    Exec { isolation: String, runs: usize },
    /// `--engines-only`: the engines' table.
    Engines,
    /// `--first-list-only`: from starting `codemode mcp` to its first `tools/list` answer, with a
    /// downstream server slow to start, beside its `initialize` answer.
    FirstList,
    /// `--tracing-only`: `exec` back to back and a tool round trip, with traces off and
    /// exported to a collector stand-in, alternately; with `--baseline BINARY`, beside that
    /// binary too (a build without the telemetry, say), to show what "off" costs.
    Tracing {
        runs: usize,
        baseline: Option<String>,
    },
    /// `--load-only`: one HTTP server under load, its engine processes killed at intervals
    /// (`--seconds`, `--sessions`, `--kill-every`, `--isolation`).
    Load {
        isolation: String,
        load: crate::load::Load,
    },
}

/// What every mode may be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    /// The release binary (`--codemode`).
    pub(crate) codemode: String,
    /// Where the suite writes its figures (`--json`).
    pub(crate) json: Option<String>,
    /// The Python of pydantic-monty's environment (`--monty-python`).
    pub(crate) monty_python: Option<String>,
    /// The engine library V8 engine processes load (`--v8-library`), else the release one
    /// `cargo xtask setup-v8` builds.
    pub(crate) v8_library: Option<String>,
}

/// The flags that choose a mode; at most one is given.
const MODE_FLAGS: &[&str] = &[
    "--round-trip-only",
    "--round-trips-in-process",
    "--quickjs-start-only",
    "--quickjs-process-start-only",
    "--quickjs-targets",
    "--spawn-only",
    "--payload-only",
    "--stored-only",
    "--stores-only",
    "--monty-only",
    "--fresh-scope-only",
    "--exec-only",
    "--engines-only",
    "--tracing-only",
    "--first-list-only",
    "--load-only",
];

/// The value after `--name`, if given.
fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .cloned()
}

/// Reads the mode and the options from the arguments (without the program's name).
pub(crate) fn parse(args: &[String]) -> Result<(Mode, Options), String> {
    let options = Options {
        codemode: flag(args, "--codemode").unwrap_or_else(|| "target/release/codemode".into()),
        json: flag(args, "--json"),
        monty_python: flag(args, "--monty-python"),
        v8_library: flag(args, "--v8-library"),
    };
    let chosen: Vec<&str> = MODE_FLAGS
        .iter()
        .copied()
        .filter(|mode| args.iter().any(|arg| arg == mode))
        .collect();
    let engine = || match flag(args, "--engine").as_deref() {
        None | Some("v8") => Ok("v8".to_owned()),
        Some("quickjs") => Ok("quickjs".to_owned()),
        Some(other) => Err(format!("--engine takes v8 or quickjs, not {other}")),
    };
    let count = |name: &str, default: usize| match flag(args, name) {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| format!("{name} takes a number, not {text}")),
    };
    let mode = match chosen.as_slice() {
        [] => Mode::Suite,
        ["--round-trip-only"] => Mode::RoundTrip { engine: engine()? },
        ["--round-trips-in-process"] => Mode::RoundTripsInProcess {
            engine: engine()?,
            iterations: count("--round-trips-in-process", 0)?,
        },
        ["--quickjs-start-only"] => Mode::QuickJsStart,
        ["--quickjs-process-start-only"] => Mode::QuickJsProcessStart,
        ["--quickjs-targets"] => Mode::QuickJsTargets,
        ["--spawn-only"] => Mode::Spawn,
        ["--payload-only"] => Mode::Payload,
        ["--stored-only"] => Mode::Stored,
        ["--stores-only"] => Mode::Stores,
        ["--monty-only"] => Mode::Monty {
            python: options
                .monty_python
                .clone()
                .ok_or("--monty-only needs --monty-python, the Python of Monty's environment")?,
        },
        ["--fresh-scope-only"] => Mode::FreshScope,
        ["--exec-only"] => Mode::Exec {
            isolation: flag(args, "--isolation").unwrap_or_else(|| "process".into()),
            runs: count("--runs", 40)?,
        },
        ["--engines-only"] => Mode::Engines,
        ["--first-list-only"] => Mode::FirstList,
        ["--tracing-only"] => Mode::Tracing {
            runs: count("--runs", 40)?,
            baseline: flag(args, "--baseline"),
        },
        ["--load-only"] => Mode::Load {
            isolation: flag(args, "--isolation").unwrap_or_else(|| "process".into()),
            load: crate::load::Load {
                seconds: count("--seconds", crate::load::Load::DEFAULT.seconds as usize)? as u64,
                sessions: count("--sessions", crate::load::Load::DEFAULT.sessions)?,
                kill_every_seconds: count(
                    "--kill-every",
                    crate::load::Load::DEFAULT.kill_every_seconds as usize,
                )? as u64,
            },
        },
        several => {
            return Err(format!(
                "give one mode at most, not {}",
                several.join(" and ")
            ));
        }
    };
    Ok((mode, options))
}
