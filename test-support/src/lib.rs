//! Helpers the codemode crates' tests share, written once: a hang guard for async waits, a
//! server child process that says where it listens and is killed when its test ends, failed or
//! not, and the real third-party MCP servers installed from their registries ([`mcp_servers`]).
//!
//! Deadlines here only guard against hangs: a test that hits one fails with "hung: …". Nothing
//! here measures time.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod engine_host;
pub mod mcp_servers;
pub mod postgres;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long any one wait of a test may take before the test fails as hung.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// Awaits `future`, failing the test with "hung: `what`" past [`HANG_GUARD`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("hung: {what}"))
}

/// Waits until `condition` holds, checking every millisecond (so paused test time still
/// advances towards the hang guard).
pub async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    within(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
}

/// A fresh, empty folder for one test: `codemode-NAME-PID` in the temporary directory (emptied if
/// an earlier run left it).
pub fn scratch_folder(name: &str) -> std::path::PathBuf {
    let folder = std::env::temp_dir().join(format!("codemode-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder)
        .unwrap_or_else(|error| panic!("cannot create {}: {error}", folder.display()));
    folder
}

/// Threads of this process whose name starts with `prefix` (Linux keeps 15 bytes of a name): for
/// tests of thread pools, each alone in its test binary.
pub fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("this test reads Linux's /proc")
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with(prefix))
        })
        .count()
}

/// A server process started by a test. It printed `listening on <url>` as its first line; it is
/// killed when this value is dropped, so a failing test leaves no server behind.
#[derive(Debug)]
pub struct ListeningServer {
    child: Child,
    url: String,
}

impl ListeningServer {
    /// Starts `command` with its standard output piped, and reads its first line (within the
    /// hang guard) for the address it listens on.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        // A blocking read has no timeout of its own: read on a thread, wait on a channel.
        let (line_sender, line_receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first_line = String::new();
            let _ = line_sender.send(reader.read_line(&mut first_line).map(|_| first_line));
            // Keep draining, so the server never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        // Built first, so that the child is killed if a check below fails.
        let mut server = ListeningServer {
            child,
            url: String::new(),
        };
        let first_line = match line_receiver.recv_timeout(HANG_GUARD) {
            Ok(Ok(line)) => line,
            Ok(Err(error)) => panic!("cannot read the server's first line: {error}"),
            Err(_) => panic!("hung: the server never said where it listens"),
        };
        server.url = first_line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!("the server's first line is not `listening on …`: {first_line:?}")
            })
            .to_owned();
        server
    }

    /// The URL it listens on, as it printed it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ListeningServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
