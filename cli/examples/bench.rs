//! `cargo xtask bench`: codemode's benchmark suite. Each row is a figure (median and p99 over its
//! runs) beside a yardstick measured in the same run, and their ratio. Prints one table and writes
//! the same figures as JSON to the path given with `--json`.
//!
//! Every row is measured twice, side by side: for the in-process engine (QuickJS, the only engine
//! a host's own process runs, with the yardstick and ratio) and for V8 engine processes
//! (`ProcessEngine` on the pinned Node 24, the binary's default). A second table puts the two engines, V8 and
//! QuickJS, side by side on the same rows, in-process and in engine processes; a third puts the
//! stores, files and PostgreSQL, side by side (`bench/stores.rs`; left out, saying so, on a
//! machine without PostgreSQL); a fourth puts engine processes beside pydantic-monty's subprocess
//! workers (`bench/monty.rs`, with the Python given by `--monty-python`; left out, saying so,
//! without one); a fifth, a fresh global scope with and without V8's startup snapshot; last, the
//! time from starting `codemode mcp` to its first `tools/list` with a slow downstream server
//! (`bench/first_list.rs`), and one HTTP server under load, its engine processes killed at
//! intervals, with every result lost outside them (`bench/load.rs`). V8 engine
//! processes load the engine library `--v8-library` names, else the release one `cargo xtask
//! setup-v8` builds. Run on a quiet machine: the figures are wall-clock times.
//!
//! ```text
//! cargo xtask bench            # builds the release binary, then runs this
//! ```
//!
//! A mode other than the suite prints one row or one table alone (`--engines-only`,
//! `--exec-only`, …; see [`Mode`]), for profiling and for comparing builds.

#[path = "bench/engines.rs"]
mod engines;
#[path = "bench/first_list.rs"]
mod first_list;
#[path = "bench/load.rs"]
mod load;
#[path = "bench/measure.rs"]
mod measure;
#[path = "bench/memory.rs"]
mod memory;
#[path = "bench/mode.rs"]
mod mode;
#[path = "bench/monty.rs"]
mod monty;
#[path = "bench/quick.rs"]
mod quick;
#[path = "bench/snapshot.rs"]
mod snapshot;
#[path = "bench/stores.rs"]
mod stores;
#[path = "bench/suite.rs"]
mod suite;
#[path = "bench/yardsticks.rs"]
mod yardsticks;

use mode::Mode;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, options) = match mode::parse(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
    };
    let codemode = options.codemode.as_str();
    if let Some(library) = &options.v8_library {
        measure::set_v8_library(library);
    }
    match mode {
        Mode::Suite => suite::run(codemode, options.json, options.monty_python.as_deref()),
        Mode::RoundTrip { engine } => quick::round_trip(codemode, &engine),
        Mode::RoundTripsInProcess { engine, iterations } => {
            quick::round_trips_in_process(&engine, iterations)
        }
        Mode::QuickJsStart => quick::quickjs_start(),
        Mode::QuickJsProcessStart => quick::quickjs_process_start(codemode),
        Mode::QuickJsTargets => quick::quickjs_targets(codemode),
        Mode::Spawn => quick::spawn(codemode),
        Mode::Payload => quick::payload(codemode),
        Mode::Stored => quick::stored(codemode),
        Mode::Stores => quick::stores(codemode),
        Mode::Monty { python } => quick::monty(codemode, &python),
        Mode::FreshScope => {
            snapshot::print_fresh_scopes(&snapshot::fresh_scopes(
                codemode,
                &measure::v8_library(codemode),
            ));
        }
        Mode::Exec { isolation, runs } => quick::exec(codemode, &isolation, runs),
        Mode::Engines => quick::engines(codemode),
        Mode::FirstList => first_list::run(codemode),
        Mode::Load { isolation, load } => load::run(codemode, &isolation, load),
        Mode::Tracing { runs, baseline } => quick::tracing(codemode, runs, baseline.as_deref()),
    }
}
