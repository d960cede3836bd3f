//! What the CLI's end-to-end tests share: the binary, running it with standard input, and the
//! text of an MCP tool result.

#![allow(dead_code)] // Each test binary uses some of these.

use std::ffi::OsStr;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use rmcp::model::{CallToolResult, ContentBlock};

/// The `codemode` launcher, as built for these tests.
pub const CODEMODE: &str = env!("CARGO_BIN_EXE_codemode");

/// Runs `codemode ARGS…` with `stdin` on its standard input, to its end.
pub fn codemode_with_input(
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    stdin: &str,
) -> Output {
    let mut child = Command::new(CODEMODE)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start codemode");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The text blocks of a tool result, one per line.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads `stderr` (a child's standard error) until a line contains `needle`; fails the test if
/// the child ends first, or past the hang guard.
pub async fn wait_for_line(stderr: tokio::process::ChildStderr, needle: &str) {
    use tokio::io::AsyncBufReadExt;
    codemode_test_support::within(&format!("a line with {needle:?}"), async {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(needle) {
                return;
            }
        }
        panic!("the process ended before it wrote a line with {needle:?}");
    })
    .await
}
