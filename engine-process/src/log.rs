//! What an engine process prints: captured from its standard output and error, truncated and
//! rate-limited, and logged through `tracing`, never passed to a standard stream of the parent.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

/// The longest line logged; the rest is cut.
const MAX_LINE_CHARS: usize = 500;
/// How many lines of one stream are logged per window.
const LINES_PER_WINDOW: usize = 20;
/// The rate-limit window.
const WINDOW: Duration = Duration::from_secs(10);
/// The longest line read; the rest of a longer one is skipped, not buffered.
const MAX_READ_BYTES: u64 = 64 * 1024;

/// What a reader thread keeps of its stream: the last fatal-error line V8 printed, if any.
pub(crate) type FatalLine = std::sync::Arc<parking_lot::Mutex<Option<String>>>;

/// Whether V8 (or the C++ runtime) says with this line why it is about to end the process.
fn is_fatal_line(line: &str) -> bool {
    [
        "Fatal error",
        "Check failed",
        "Fatal javascript OOM",
        // A value past the sizes V8 can hold (an array of 2e8 elements): V8 ends the process.
        "Fatal JavaScript",
        "Fatal process out of memory",
        "Debug check failed",
    ]
    .iter()
    .any(|marker| line.contains(marker))
}

/// Reads `pipe` on a thread of its own until it closes, logging what it carries and keeping the
/// last fatal-error line in `fatal`. The thread ends when the process's end of the pipe closes.
pub(crate) fn capture(
    pid: u32,
    stream: &'static str,
    pipe: Box<dyn Read + Send>,
    fatal: FatalLine,
) -> Option<std::thread::JoinHandle<()>> {
    let spawned = std::thread::Builder::new()
        .name(format!("codemode-engine-{stream}"))
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut window = Instant::now();
            let mut logged = 0usize;
            let mut dropped = 0usize;
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut reader)
                    .take(MAX_READ_BYTES)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if window.elapsed() >= WINDOW {
                    if dropped > 0 {
                        tracing::info!(
                            pid,
                            stream,
                            dropped,
                            "an engine process printed more lines than are logged"
                        );
                    }
                    window = Instant::now();
                    logged = 0;
                    dropped = 0;
                }
                let text: String = String::from_utf8_lossy(&line)
                    .trim()
                    .trim_start_matches('#')
                    .trim()
                    .chars()
                    .take(MAX_LINE_CHARS)
                    .collect();
                // Kept even when the line itself is not logged: it names a crash.
                if is_fatal_line(&text) {
                    *fatal.lock() = Some(text.clone());
                }
                if logged >= LINES_PER_WINDOW {
                    dropped += 1;
                    continue;
                }
                logged += 1;
                tracing::info!(pid, stream, "engine process printed: {text}");
            }
        });
    match spawned {
        Ok(thread) => Some(thread),
        Err(_) => {
            tracing::error!(pid, stream, "cannot read what an engine process prints");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines V8 prints before it ends a process name the crash; its banner alone does not.
    #[test]
    fn the_lines_that_say_why_v8_ends_the_process_are_kept() {
        for line in [
            "Check failed: a test-only fatal error.",
            "Fatal JavaScript invalid size error 200000001",
            "Fatal javascript OOM in MarkCompactCollector",
            "Fatal process out of memory: Zone",
        ] {
            assert!(is_fatal_line(line), "{line}");
        }
        assert!(!is_fatal_line("==== C stack trace ==="));
    }
}
