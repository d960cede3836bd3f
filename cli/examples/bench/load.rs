//! `--load-only`: one `codemode mcp --http` server under load as an operator runs it: two
//! tenants, 40 MCP sessions each running short cells (five `echo` calls, a store and a load) in a
//! loop for 90 s, the server's engine processes SIGKILLed every 10 s. It reports the `exec` rate
//! and latency, and every cell that did not complete: those in a killed process (expected), and
//! those lost outside one (which must be none), with the server's "misbehaved" lines.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use codemode_test_support::ListeningServer;
use parking_lot::Mutex;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use crate::measure::{isolation_args, stats};

/// What the load run is given (`--seconds`, `--sessions`, `--kill-every`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) seconds: u64,
    pub(crate) sessions: usize,
    pub(crate) kill_every_seconds: u64,
}

impl Load {
    /// The operator's run: 40 sessions for 90 s, engine processes killed every 10 s.
    pub(crate) const DEFAULT: Load = Load {
        seconds: 90,
        sessions: 40,
        kill_every_seconds: 10,
    };
}

const TOKENS: [(&str, &str); 2] = [
    ("alpha", "alpha-token-0123456789abcdef"),
    ("beta", "beta-token-0123456789abcdef0"),
];

/// How long a call may go unanswered before the run counts it as lost (a hang guard).
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The cell each session runs, numbered: five awaited calls, a store, a load, and its number.
fn cell(number: usize) -> String {
    format!(
        "let sum = 0;\nfor (let i = 0; i < 5; i++) sum += (await tools.echo({{n: i}})).n;\n\
         store(\"last\", {number});\ntext(`done {number} ${{sum}} ${{load(\"last\")}}`);"
    )
}

/// How one `exec` ended.
enum Outcome {
    Completed,
    /// Its engine process was killed by the run (SIGKILL): expected.
    InKilledProcess,
    /// Anything else: lost work.
    Lost(String),
}

fn classify(number: usize, answer: &str) -> Outcome {
    if answer.contains(&format!("done {number} 10 {number}")) && !answer.contains("Script failed") {
        Outcome::Completed
    } else if answer.contains("killed by SIGKILL") {
        Outcome::InKilledProcess
    } else {
        Outcome::Lost(answer.chars().take(400).collect())
    }
}

/// The `tools/call` of `exec` or `wait`, its text.
async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
    arguments: serde_json::Value,
) -> String {
    let params = CallToolRequestParams::new(tool)
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let asked = utc_time_of_day();
    let answer = tokio::time::timeout(HANG_GUARD, client.call_tool(params)).await;
    let Ok(answer) = answer else {
        return format!(
            "no answer to {tool} asked at {asked} UTC within {} s",
            HANG_GUARD.as_secs()
        );
    };
    match answer {
        Ok(result) => result
            .content
            .iter()
            .filter_map(|content| content.as_text().map(|text| text.text.clone()))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(error) => format!("the call failed: {error}"),
    }
}

/// The time of day now, UTC (`HH:MM:SS.mmm`), to find a lost call in the server's log.
fn utc_time_of_day() -> String {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let millis = since_epoch.as_millis() % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        millis / 3_600_000,
        millis / 60_000 % 60,
        millis / 1000 % 60,
        millis % 1000
    )
}

/// One session's loop until `stop`: each `exec` (and its `wait`s, if it yields), its latency and
/// outcome.
async fn session_loop(
    url: String,
    token: &'static str,
    stop: Arc<AtomicBool>,
    results: Arc<Mutex<Vec<(f64, Outcome)>>>,
) {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    let client = ().serve(transport).await.expect("a client connects");
    let mut number = 0;
    while !stop.load(Ordering::Relaxed) {
        number += 1;
        let began = Instant::now();
        let mut answer = call(&client, "exec", json!({"code": cell(number)})).await;
        while let Some(cell_id) = answer
            .lines()
            .next()
            .filter(|line| line.starts_with("Script running"))
            .and_then(|line| line.split("cell_id: ").nth(1))
            .map(|id| id.trim_end_matches(')').to_owned())
        {
            answer = call(&client, "wait", json!({"cell_id": cell_id})).await;
        }
        let outcome = classify(number, &answer);
        results
            .lock()
            .push((crate::measure::ms(began.elapsed()), outcome));
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
}

/// The engine processes of the server `pid`: its child processes.
fn engine_processes(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The parent's pid is the second field after the command's closing parenthesis.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|parent| parent.parse::<u32>().ok());
        if parent == Some(pid) {
            children.push(child);
        }
    }
    children
}

/// Runs the load and prints what it measured.
pub(crate) fn run(codemode: &str, isolation: &str, load: Load) {
    let folder = std::env::temp_dir().join(format!("codemode-bench-load-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let tokens = folder.join("tokens");
    let lines: String = TOKENS
        .iter()
        .map(|(tenant, token)| format!("{tenant} {token}\n"))
        .collect();
    std::fs::write(&tokens, lines).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let log = folder.join("server.log");
    let mut command = std::process::Command::new(codemode);
    command
        .args([
            "mcp",
            "--http",
            "127.0.0.1:0",
            "--demo-tools",
            "--auth-token-file",
        ])
        .arg(&tokens)
        .args(isolation_args(isolation))
        .args(["--max-sessions", "200", "--max-cells", "200"])
        .stderr(std::fs::File::create(&log).unwrap());
    let server = ListeningServer::spawn(command);
    let url = format!("{}/mcp", server.url().trim_end_matches("/mcp"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let results = Arc::new(Mutex::new(Vec::new()));
    let sessions: Vec<_> = (0..load.sessions)
        .map(|index| {
            runtime.spawn(session_loop(
                url.clone(),
                TOKENS[index % TOKENS.len()].1,
                Arc::clone(&stop),
                Arc::clone(&results),
            ))
        })
        .collect();
    let began = Instant::now();
    let mut killed = 0;
    let mut next_kill = began + Duration::from_secs(load.kill_every_seconds);
    while began.elapsed() < Duration::from_secs(load.seconds) {
        std::thread::sleep(Duration::from_millis(100));
        if load.kill_every_seconds > 0 && Instant::now() >= next_kill {
            for pid in engine_processes(server.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                killed += 1;
            }
            next_kill += Duration::from_secs(load.kill_every_seconds);
        }
    }
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for session in sessions {
            let _ = session.await;
        }
    });
    let elapsed = began.elapsed();
    let results = std::mem::take(&mut *results.lock());
    drop(server);
    let misbehaved = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("misbehaved"))
        .count();
    let (mut completed, mut in_killed, mut lost) = (0, 0, Vec::new());
    let mut latencies = Vec::new();
    for (latency, outcome) in results {
        latencies.push(latency);
        match outcome {
            Outcome::Completed => completed += 1,
            Outcome::InKilledProcess => in_killed += 1,
            Outcome::Lost(why) => lost.push(why),
        }
    }
    let total = latencies.len();
    let latency = stats(latencies);
    println!(
        "load ({isolation}): {} sessions of 2 tenants for {:.0} s, engine processes killed every {} s ({killed} killed)",
        load.sessions,
        elapsed.as_secs_f64(),
        load.kill_every_seconds
    );
    println!(
        "exec: {total} ({:.0} a second), p50 {:.1} ms, p99 {:.1} ms; completed {completed}, in killed processes {in_killed}, lost outside them {}; server said \"misbehaved\" {misbehaved} times",
        total as f64 / elapsed.as_secs_f64(),
        latency.median,
        latency.p99,
        lost.len(),
    );
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    for why in &lost {
        let last_line = why.lines().last().unwrap_or_default();
        *reasons
            .entry(last_line.chars().take(200).collect())
            .or_default() += 1;
    }
    for (why, count) in &reasons {
        println!("  lost {count}: {why}");
    }
    if lost.is_empty() {
        let _ = std::fs::remove_dir_all(&folder);
    } else {
        println!("  the server's log is kept: {}", log.display());
    }
}
