//! The instruments: OpenTelemetry's MCP conventions (`mcp.server.operation.duration`,
//! `mcp.client.operation.duration`) and the runtime's own (`codemode.*`). Events are recorded
//! as they happen (requests by the server, cells and tool calls through the session's activity
//! hook); state (cells running, engine processes, stored bytes, downstream servers) is read from
//! the server whenever metrics are collected, through [`ServerState`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use codemode_session::{CellActivity, CellActivityHook};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

/// The bucket bounds of durations, in seconds, as the MCP conventions advise.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The instruments that record events.
pub struct Metrics {
    server_duration: Histogram<f64>,
    client_duration: Histogram<f64>,
    cell_duration: Histogram<f64>,
    cells_started: Counter<u64>,
    tool_calls: Counter<u64>,
    gate_decisions: Counter<u64>,
}

fn meter() -> Meter {
    opentelemetry::global::meter("codemode")
}

/// The process's instruments (made on first use, from the meter provider `init` installed).
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let meter = meter();
        let duration = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build()
        };
        Metrics {
            server_duration: duration(
                "mcp.server.operation.duration",
                "MCP requests served, by method (and tool), and how long each took",
            ),
            client_duration: duration(
                "mcp.client.operation.duration",
                "Tool calls cells made to downstream MCP servers, and how long each took",
            ),
            cell_duration: duration(
                "codemode.cell.duration",
                "Cells that ended, by outcome, and how long each ran",
            ),
            cells_started: meter
                .u64_counter("codemode.cells.started")
                .with_description("Cells started")
                .build(),
            tool_calls: meter
                .u64_counter("codemode.tool.calls")
                .with_description("Tool calls cells made, by server, tool and outcome")
                .build(),
            gate_decisions: meter
                .u64_counter("codemode.gate.decisions")
                .with_description("Rulings of the gate on tool calls, by decision")
                .build(),
        }
    })
}

impl Metrics {
    /// One MCP request served: its method, the tool it called (`tools/call`), how it failed
    /// (`error.type`), and how long it took.
    pub fn record_request(
        &self,
        method: &str,
        tool: Option<&str>,
        error_type: Option<&str>,
        duration: Duration,
    ) {
        let mut attributes = vec![KeyValue::new("mcp.method.name", method.to_owned())];
        if let Some(tool) = tool {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
        }
        if let Some(error_type) = error_type {
            attributes.push(KeyValue::new("error.type", error_type.to_owned()));
        }
        self.server_duration
            .record(duration.as_secs_f64(), &attributes);
    }

    /// What a session's cells do, recorded: cells started and ended, tool calls and the gate's
    /// rulings. `then` (the cluster's journal) hears every activity after.
    pub fn activity_hook(&'static self, then: Option<CellActivityHook>) -> CellActivityHook {
        Arc::new(move |activity: CellActivity| {
            self.record_activity(&activity);
            if let Some(then) = &then {
                then(activity);
            }
        })
    }

    fn record_activity(&self, activity: &CellActivity) {
        match activity {
            CellActivity::CellStarted { .. } => self.cells_started.add(1, &[]),
            CellActivity::CellEnded {
                outcome, duration, ..
            } => self.cell_duration.record(
                duration.as_secs_f64(),
                &[KeyValue::new("codemode.cell.outcome", *outcome)],
            ),
            CellActivity::ToolCallEnded {
                tool,
                server,
                decision,
                outcome,
                duration,
                ..
            } => {
                let server = server.clone().unwrap_or_default();
                self.tool_calls.add(
                    1,
                    &[
                        KeyValue::new("codemode.server", server.clone()),
                        KeyValue::new("gen_ai.tool.name", tool.clone()),
                        KeyValue::new("codemode.outcome", *outcome),
                    ],
                );
                self.gate_decisions.add(
                    1,
                    &[KeyValue::new("codemode.gate.decision", decision.as_str())],
                );
                if !duration.is_zero() {
                    let mut attributes = vec![
                        KeyValue::new("mcp.method.name", "tools/call"),
                        KeyValue::new("gen_ai.tool.name", tool.clone()),
                        KeyValue::new("codemode.server", server),
                    ];
                    if *outcome != "ok" {
                        attributes.push(KeyValue::new("error.type", *outcome));
                    }
                    self.client_duration
                        .record(duration.as_secs_f64(), &attributes);
                }
            }
            _ => {}
        }
    }
}

/// What the server is now, read at each collection.
pub trait ServerState: Send + Sync + 'static {
    /// Cells running, and cells that ended and wait for an observer.
    fn cells(&self) -> (u64, u64);
    /// The engine's processes and queue.
    fn engine(&self) -> codemode_engine::EngineStats;
    /// Stored bytes the open sessions hold, by tenant.
    fn stored_bytes(&self) -> Vec<(String, u64)>;
    /// Each downstream server, and whether it is up.
    fn servers(&self) -> Vec<(String, bool)>;
}

/// Observes `state` at every collection, for as long as the process runs (the instruments are
/// kept here).
pub fn observe(state: Arc<dyn ServerState>) {
    static KEPT: OnceLock<parking_lot::Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>> =
        OnceLock::new();
    let meter = meter();
    let mut kept: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();
    let cells = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .u64_observable_gauge("codemode.cells")
            .with_description("Cells now: running, or ended and waiting for an observer")
            .with_callback(move |observer| {
                let (running, waiting) = cells.cells();
                observer.observe(running, &[KeyValue::new("state", "running")]);
                observer.observe(waiting, &[KeyValue::new("state", "awaiting_observer")]);
            })
            .build(),
    ));
    let engine = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .u64_observable_gauge("codemode.engine.processes")
            .with_description("Engine processes alive now")
            .with_callback(move |observer| {
                observer.observe(engine.engine().processes_alive as u64, &[]);
            })
            .build(),
    ));
    let engine = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .u64_observable_counter("codemode.engine.processes.spawned")
            .with_description("Engine processes started")
            .with_callback(move |observer| {
                observer.observe(engine.engine().processes_spawned, &[]);
            })
            .build(),
    ));
    let engine = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .u64_observable_gauge("codemode.engine.queue.length")
            .with_description("Cells waiting now for an engine process to be started for them")
            .with_callback(move |observer| {
                observer.observe(engine.engine().cells_queued as u64, &[]);
            })
            .build(),
    ));
    let engine = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .u64_observable_counter("codemode.engine.queue.waits")
            .with_description("Cells that waited for an engine process to be started for them")
            .with_callback(move |observer| {
                observer.observe(engine.engine().cells_that_waited, &[]);
            })
            .build(),
    ));
    let engine = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .f64_observable_counter("codemode.engine.queue.wait")
            .with_unit("s")
            .with_description("How long cells waited for an engine process, in all")
            .with_callback(move |observer| {
                observer.observe(engine.engine().queue_wait.as_secs_f64(), &[]);
            })
            .build(),
    ));
    let stored = Arc::clone(&state);
    kept.push(Box::new(
        meter
            .u64_observable_gauge("codemode.store.bytes")
            .with_unit("By")
            .with_description("Bytes of stored values the open sessions hold, by tenant")
            .with_callback(move |observer| {
                for (tenant, bytes) in stored.stored_bytes() {
                    observer.observe(bytes, &[KeyValue::new("codemode.tenant", tenant)]);
                }
            })
            .build(),
    ));
    let servers = state;
    kept.push(Box::new(
        meter
            .u64_observable_gauge("codemode.downstream.server.up")
            .with_description("Whether each downstream MCP server is up (1) or down (0)")
            .with_callback(move |observer| {
                for (server, up) in servers.servers() {
                    observer.observe(u64::from(up), &[KeyValue::new("codemode.server", server)]);
                }
            })
            .build(),
    ));
    KEPT.get_or_init(Default::default).lock().extend(kept);
}
