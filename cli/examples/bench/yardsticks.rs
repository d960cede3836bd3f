//! The yardsticks rows are measured beside: Node's `vm` contexts, a one-byte ping-pong over a
//! Unix socket, and a thread-to-tokio oneshot round trip.

use std::time::Instant;

/// Node's `vm.createContext` and a run in it, in a warm Node process, 20 ms apart.
pub(crate) fn node_vm(runs: usize) -> Option<Vec<f64>> {
    let script = format!(
        "const vm = require('vm'); const out = []; let i = 0;
         function step() {{ const t = process.hrtime.bigint(); const c = vm.createContext({{}});
           vm.runInContext('globalThis.r = String(\"hi\")', c); out.push(Number(process.hrtime.bigint() - t) / 1e6);
           if (++i < {runs}) setTimeout(step, 20); else console.log(JSON.stringify(out)); }}
         step();"
    );
    let output = std::process::Command::new("node")
        .arg("-e")
        .arg(script)
        .output()
        .ok()?;
    serde_json::from_slice(&output.stdout).ok()
}

/// Microseconds per one-byte ping-pong over a Unix socket pair between two plain threads that
/// block: the floor of a round trip that crosses a process boundary (two blocking wake-ups).
pub(crate) fn socket_ping_pong(iterations: usize) -> f64 {
    use std::io::{Read, Write};
    let (mut near, mut far) = std::os::unix::net::UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        while far.read(&mut byte).unwrap_or(0) == 1 {
            if far.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let mut byte = [0u8; 1];
    let started = Instant::now();
    for _ in 0..iterations {
        near.write_all(b"x").unwrap();
        near.read_exact(&mut byte).unwrap();
    }
    let elapsed = started.elapsed();
    drop(near);
    let _ = echo.join();
    elapsed.as_secs_f64() * 1e6 / iterations as f64
}

/// Microseconds per round trip between a plain thread and a tokio task over a oneshot.
pub(crate) fn oneshot_round_trip(iterations: usize, runtime: &tokio::runtime::Runtime) -> f64 {
    let (requests, mut receiver) =
        tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<u64>>();
    runtime.spawn(async move {
        while let Some(reply) = receiver.recv().await {
            let _ = reply.send(1);
        }
    });
    let started = Instant::now();
    for _ in 0..iterations {
        let (reply, answer) = tokio::sync::oneshot::channel();
        requests.send(reply).unwrap();
        answer.blocking_recv().unwrap();
    }
    started.elapsed().as_secs_f64() * 1e6 / iterations as f64
}
