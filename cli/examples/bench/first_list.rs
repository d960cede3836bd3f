//! `--first-list-only`: how long a client waits, from starting `codemode mcp`, for its first
//! `tools/list` answer when a downstream server is slow to start (one that takes 2 s, one that
//! takes 30 s), beside the `initialize` answer of the same run (the yardstick: what a client
//! waits for the server itself), with the startup window (the default, 5 s) and without it
//! (`--startup-window-ms 0`, every server waited for: the behaviour before the window).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One start of `codemode mcp`: the times to the `initialize` and first `tools/list` answers.
fn first_list(codemode: &str, config: &std::path::Path, window_ms: &str) -> (Duration, Duration) {
    let began = Instant::now();
    let mut child = Command::new(codemode)
        .args(["mcp", "--config"])
        .arg(config)
        .args(["--startup-window-ms", window_ms])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start codemode mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answer = |id: u64| loop {
        let line = lines.next().expect("an answer").expect("a line");
        let message: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        if message["id"] == id {
            return began.elapsed();
        }
    };
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"bench","version":"1"}}}}}}"#
    )
    .unwrap();
    let initialized = answer(1);
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list"}}"#).unwrap();
    let listed = answer(2);
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    (initialized, listed)
}

/// The rows: a 2 s server and a 30 s one beside a quick one, with and without the window.
pub(crate) fn run(codemode: &str) {
    let folder =
        std::env::temp_dir().join(format!("codemode-bench-first-list-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    println!(
        "time from starting codemode mcp to its first answers (one downstream server quick, one slow)"
    );
    println!(
        "{:<44} {:>14} {:>16} {:>8}",
        "case", "initialize ms", "tools/list ms", "ratio"
    );
    for slow_secs in [2, 30] {
        let config = folder.join(format!("slow-{slow_secs}.json"));
        let slow = format!("sleep {slow_secs}; exec '{codemode}' demo-mcp-server");
        let document = serde_json::json!({"mcpServers": {
            "quick": {"command": codemode, "args": ["demo-mcp-server"]},
            "slow": {"command": "sh", "args": ["-c", slow]}
        }});
        std::fs::write(&config, document.to_string()).unwrap();
        for (label, window) in [
            ("window 5 s (default)", "5000"),
            ("no window (before)", "0"),
        ] {
            let (initialized, listed) = first_list(codemode, &config, window);
            println!(
                "{:<44} {:>14.1} {:>16.1} {:>8.1}",
                format!("server taking {slow_secs} s, {label}"),
                initialized.as_secs_f64() * 1e3,
                listed.as_secs_f64() * 1e3,
                listed.as_secs_f64() / initialized.as_secs_f64()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&folder);
}
