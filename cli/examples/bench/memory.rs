//! Memory measures: resident and proportional sizes of this process and of process trees, the
//! peak of a `codemode run`, bytes held per byte stored, parked cells, and one engine process's
//! spawn and idle cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_engine::{Engine, RuntimeEvent, event_channel};
use codemode_engine_process::ProcessEngine;
use codemode_host_adapters::{InProcessTools, MemoryStore};
use codemode_session::{Session, SessionConfig};

use crate::measure::{Stats, cell, ms, process_config, run_in, stats};

pub(crate) fn rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// The resident memory of process `pid` and every descendant, in KiB (0 once it is gone).
pub(crate) fn tree_rss_kib(pid: u32) -> f64 {
    let own = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0.0);
    let children: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    own + children.into_iter().map(tree_rss_kib).sum::<f64>()
}

/// Proportional resident memory (KiB) of this process and `children`: shared pages (the V8
/// library) are split between the processes that map them, so a process is not charged for the
/// library again.
pub(crate) fn pss_kib(children: &[u32]) -> f64 {
    let pss = |pid: String| {
        std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .ok()
            .and_then(|rollup| {
                rollup
                    .lines()
                    .find_map(|line| line.strip_prefix("Pss:"))
                    .and_then(|value| {
                        value
                            .trim()
                            .trim_end_matches("kB")
                            .trim()
                            .parse::<f64>()
                            .ok()
                    })
            })
            .unwrap_or(0.0)
    };
    pss("self".into()) + children.iter().map(|pid| pss(pid.to_string())).sum::<f64>()
}

/// Bytes of this process's resident memory per byte stored, with 3 sessions that each store
/// 16 MiB of JSON and then start 5 more cells that read it: what a tenant's stored values cost
/// the server (the values are held once, shared by the sessions' cells and the store).
pub(crate) async fn memory_per_stored_byte(engine: Arc<dyn Engine>) -> f64 {
    let store = Arc::new(MemoryStore::new());
    let mut sessions = Vec::new();
    for index in 0..3 {
        let session = Session::open(
            format!("stored-{index}"),
            Arc::clone(&engine),
            Arc::clone(&store) as Arc<dyn codemode_session::Store>,
            Arc::new(InProcessTools::new()),
            SessionConfig::default(),
        )
        .await
        .unwrap();
        sessions.push(session);
    }
    // Warm each session's path once, so the figure is the values, not first-use costs.
    for session in &sessions {
        run_in(session, "store('warm', 1)").await;
    }
    let before = rss_kib();
    for session in &sessions {
        run_in(
            session,
            "const a = Array(1 << 20).fill(0); store('k', Array(8).fill(a));",
        )
        .await;
        for _ in 0..5 {
            run_in(session, "text(typeof load('warm'))").await;
        }
    }
    let after = rss_kib();
    let stored: usize = sessions.iter().map(Session::stored_bytes).sum();
    for session in sessions {
        session.shutdown().await;
    }
    (after - before).max(0.0) * 1024.0 / stored as f64
}

/// The peak resident memory, in MiB, of `codemode run ARGS` running `source` (the server and its
/// engine processes together, sampled every 2 ms until it exits).
pub(crate) fn peak_run_memory_mib(codemode: &str, source: &str, args: &[&str]) -> f64 {
    let file = std::env::temp_dir().join(format!("codemode-bench-{}.js", std::process::id()));
    std::fs::write(&file, source).unwrap();
    let mut child = std::process::Command::new(codemode)
        .arg("run")
        .args(args)
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut peak: f64 = 0.0;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(tree_rss_kib(child.id()));
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::fs::remove_file(&file);
    peak / 1024.0
}

/// The cell of the corpus that piles up large tool arguments (40 calls of 8 MB each, awaited
/// together), ended by its wall-clock limit or its caps.
pub(crate) const PILED_ARGUMENTS: &str = r#"text("before"); const big = "x".repeat(8e6); const calls = []; for (let i = 0; i < 40; i++) calls.push(tools.echo(big)); await Promise.all(calls)"#;

/// MiB of memory per cell parked on a promise that never settles: resident memory of this
/// process for the in-process engine; proportional memory of this process and its engine
/// processes for engine processes.
pub(crate) fn parked_cells(
    engine: &dyn Engine,
    processes: Option<&ProcessEngine>,
    count: usize,
) -> f64 {
    std::thread::sleep(Duration::from_millis(200));
    let memory = || match processes {
        Some(processes) => pss_kib(&processes.process_ids()),
        None => rss_kib(),
    };
    let before = memory();
    let mut parked = Vec::new();
    for _ in 0..count {
        let (events, mut receiver) = event_channel(None);
        let mut start = cell("await tools.never();");
        start.enabled_tools = vec![codemode_protocol::ToolDefinition::function(
            codemode_protocol::ToolName::plain("never"),
            "Never answers.",
        )];
        let handles = engine.start(start, events).unwrap();
        while let Some(event) = receiver.blocking_recv() {
            if event == RuntimeEvent::Pending {
                break;
            }
        }
        parked.push((handles, receiver));
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = memory();
    for (handles, _) in &parked {
        handles.terminate.terminate();
    }
    (after - before) / 1024.0 / count as f64
}

/// What one engine process costs: spawn to ready (ms, each a fresh process), and its
/// proportional memory when idle with its warm runtimes (MiB).
pub(crate) fn process_cost(codemode: &str, runs: usize) -> (Stats, f64) {
    let spawns: Vec<f64> = (0..runs)
        .map(|_| {
            let engine = ProcessEngine::new(
                process_config(codemode, codemode_engine::script::DEFAULT_WARM_RUNTIMES)
                    .with_spare_processes(0),
            );
            let started = Instant::now();
            engine.check().expect("engine processes start");
            ms(started.elapsed())
        })
        .collect();
    let engine = ProcessEngine::new(
        process_config(codemode, codemode_engine::script::DEFAULT_WARM_RUNTIMES)
            .with_spare_processes(0),
    );
    engine.check().expect("engine processes start");
    std::thread::sleep(Duration::from_millis(300));
    let idle = (pss_kib(&engine.process_ids()) - pss_kib(&[])) / 1024.0;
    (stats(spawns), idle)
}
