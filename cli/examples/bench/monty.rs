//! The table beside pydantic-monty: codemode's engine processes against Monty's subprocess
//! workers, measured in the same run, alternated (a batch of one, a batch of the other, several
//! times) so that a machine's slow minute falls on both. Monty is driven by `monty.py` under the
//! Python that `cargo xtask bench` installed it for (`--monty-python`, pinned in xtask); without
//! one, the table says so and measures nothing.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_engine::{Engine, RuntimeEvent, event_channel};
use rmcp::transport::ConfigureCommandExt;
use serde_json::{Value, json};

use crate::measure::{Stats, cell, mcp_calls, ms, stats, tool_round_trip};

/// A running `monty.py`: one pool of Monty workers answering requests a line each.
pub struct Monty {
    child: Child,
    requests: ChildStdin,
    answers: BufReader<ChildStdout>,
}

impl Monty {
    /// Starts `monty.py` under `python`; `None` (saying why) when it does not come up.
    pub fn start(python: &str) -> Option<Monty> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bench/monty.py");
        let mut child = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|error| eprintln!("cannot start {python} {script}: {error}"))
            .ok()?;
        let requests = child.stdin.take()?;
        let answers = BufReader::new(child.stdout.take()?);
        let mut monty = Monty {
            child,
            requests,
            answers,
        };
        let ready = monty.answer().filter(|ready| ready["ready"] == true);
        if ready.is_none() {
            eprintln!("pydantic-monty did not come up under {python}");
            return None;
        }
        Some(monty)
    }

    fn answer(&mut self) -> Option<Value> {
        let mut line = String::new();
        self.answers.read_line(&mut line).ok()?;
        serde_json::from_str(&line).ok()
    }

    fn ask(&mut self, request: &str) -> Value {
        writeln!(self.requests, "{request}").expect("monty.py takes requests");
        self.answer().expect("monty.py answers")
    }

    /// Microseconds per external function call, over `calls` calls.
    fn round_trip(&mut self, calls: usize) -> f64 {
        self.ask(&format!("round_trip {calls}"))
            .as_f64()
            .expect("a number")
    }

    /// Milliseconds to check out a fresh session and run a trivial snippet, `runs` samples.
    fn fresh_sessions(&mut self, runs: usize, spacing: Duration) -> Vec<f64> {
        let answer = self.ask(&format!("fresh_session {runs} {}", spacing.as_millis()));
        serde_json::from_value(answer).expect("a list of numbers")
    }
}

impl Drop for Monty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One row: codemode's figure beside its yardstick, both medians and p99s of alternated runs.
pub struct MontyRow {
    pub name: String,
    pub figure: Stats,
    pub yardstick_name: &'static str,
    pub yardstick: Stats,
    pub unit: &'static str,
    /// The ratio the issue asks for at most.
    pub target: f64,
}

/// One V8 the table measures: its engine processes, and how `codemode mcp` is told to use it.
pub struct Subject {
    /// Which V8, as the rows name it.
    pub label: &'static str,
    pub processes: Arc<dyn Engine>,
    /// What `codemode mcp` is given as `--v8-library`.
    pub v8_library: Option<String>,
}

/// The V8 engine processes the table measures: the pinned Node 24's.
pub struct Subjects(Vec<Subject>);

impl Subjects {
    /// `processes`, engine processes on the engine library of [`crate::measure::v8_library`],
    /// which `codemode mcp` is told too.
    pub fn new(codemode: &str, processes: Arc<dyn Engine>) -> Self {
        Subjects(vec![Subject {
            label: "engine processes on V8 13.6",
            processes,
            v8_library: Some(crate::measure::v8_library(codemode)),
        }])
    }
}

/// Start to result of `text("hi")` in a new cell of `engine`, as a session starts one: from a
/// task of the async runtime, awaiting the cell's events there.
async fn start_in_task(engine: Arc<dyn Engine>) -> Duration {
    let started = Instant::now();
    let (events, mut receiver) = event_channel(Some(64));
    let _handles = engine.start(cell(r#"text("hi")"#), events).expect("starts");
    while let Some(event) = receiver.recv().await {
        if let RuntimeEvent::Result { .. } = event {
            return started.elapsed();
        }
    }
    panic!("no result");
}

/// `runs` warm starts of `engine`, `spacing` apart, each from a task of `runtime`.
fn warm_starts(
    engine: &Arc<dyn Engine>,
    runtime: &tokio::runtime::Runtime,
    runs: usize,
    spacing: Duration,
) -> Vec<f64> {
    let engine = Arc::clone(engine);
    runtime
        .block_on(runtime.spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..runs {
                tokio::time::sleep(spacing).await;
                samples.push(ms(start_in_task(Arc::clone(&engine)).await));
            }
            samples
        }))
        .expect("the task ends")
}

/// What one subject measured: tool round trips, warm starts, `exec` over MCP.
#[derive(Default)]
struct Samples {
    trips: Vec<f64>,
    starts: Vec<f64>,
    execs: Vec<f64>,
}

/// The table's rows: each subject's engine processes against Monty, and `codemode mcp`'s exec on
/// it against a trivial MCP tool. Every round measures each subject and then its yardstick, so
/// that a slow minute of the machine falls on all of them.
pub fn monty_comparison(
    codemode: &str,
    subjects: &Subjects,
    runtime: &tokio::runtime::Runtime,
    monty: &mut Monty,
) -> Vec<MontyRow> {
    const ROUNDS: usize = 7;
    let mut samples: Vec<Samples> = subjects.0.iter().map(|_| Samples::default()).collect();
    let (mut monty_trips, mut monty_starts, mut trivials) = (Vec::new(), Vec::new(), Vec::new());
    let spacing = Duration::from_millis(20);
    // Warm all up before anything counts.
    for subject in &subjects.0 {
        runtime.block_on(tool_round_trip(Arc::clone(&subject.processes), 100));
    }
    monty.round_trip(100);
    for _ in 0..ROUNDS {
        for (subject, samples) in subjects.0.iter().zip(&mut samples) {
            samples
                .trips
                .push(runtime.block_on(tool_round_trip(Arc::clone(&subject.processes), 2000)));
        }
        monty_trips.push(monty.round_trip(2000));
        for (subject, samples) in subjects.0.iter().zip(&mut samples) {
            samples
                .starts
                .extend(warm_starts(&subject.processes, runtime, 40, spacing));
        }
        monty_starts.extend(monty.fresh_sessions(40, spacing));
    }
    let exec = |v8_library: Option<&str>, runs| {
        runtime.block_on(mcp_calls(
            tokio::process::Command::new(codemode).configure(|command| {
                command.args(["mcp", "--isolation", "process"]);
                if let Some(library) = v8_library {
                    command.arg("--v8-library").arg(library);
                }
            }),
            "exec",
            json!({"code": "text(\"hi\")"}),
            runs,
            Duration::ZERO,
        ))
    };
    let trivial = |runs| {
        runtime.block_on(mcp_calls(
            tokio::process::Command::new(codemode).configure(|command| {
                command.arg("demo-mcp-server");
            }),
            "add",
            json!({"a": 1, "b": 2}),
            runs,
            Duration::ZERO,
        ))
    };
    for _ in 0..ROUNDS {
        for (subject, samples) in subjects.0.iter().zip(&mut samples) {
            samples
                .execs
                .extend(exec(subject.v8_library.as_deref(), 40));
        }
        trivials.extend(trivial(40));
    }
    let (monty_trips, monty_starts, trivials) =
        (stats(monty_trips), stats(monty_starts), stats(trivials));
    let mut rows = Vec::new();
    for (subject, samples) in subjects.0.iter().zip(samples) {
        rows.push(MontyRow {
            name: format!("awaited tool round trip, {}", subject.label),
            figure: stats(samples.trips),
            yardstick_name: "Monty external function call",
            yardstick: monty_trips,
            unit: "µs",
            target: 1.0,
        });
        rows.push(MontyRow {
            name: format!(
                "warm start of text(\"hi\") in {}, 20 ms apart",
                subject.label
            ),
            figure: stats(samples.starts),
            yardstick_name: "Monty fresh session + trivial snippet",
            yardstick: monty_starts,
            unit: "ms",
            target: 1.5,
        });
        rows.push(MontyRow {
            name: format!("MCP exec over stdio ({}), back to back", subject.label),
            figure: stats(samples.execs),
            yardstick_name: "trivial MCP tool, same client",
            yardstick: trivials,
            unit: "ms",
            target: 1.3,
        });
    }
    rows
}

/// Prints the table; its rows as JSON.
pub fn print_monty(rows: &[MontyRow]) -> Vec<Value> {
    println!(
        "\n| beside Monty | median | p99 | yardstick | its median | its p99 | ratio | target |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    rows.iter()
        .map(|row| {
            let ratio = row.figure.median / row.yardstick.median;
            println!(
                "| {} | {:.3} {unit} | {:.3} {unit} | {} | {:.3} {unit} | {:.3} {unit} | {ratio:.2} | ≤ {:.1} |",
                row.name,
                row.figure.median,
                row.figure.p99,
                row.yardstick_name,
                row.yardstick.median,
                row.yardstick.p99,
                row.target,
                unit = row.unit
            );
            json!({
                "figure": row.name, "unit": row.unit, "median": row.figure.median,
                "p99": row.figure.p99, "yardstick": row.yardstick_name,
                "yardstick_median": row.yardstick.median, "yardstick_p99": row.yardstick.p99,
                "ratio": ratio, "target": row.target,
            })
        })
        .collect()
}
