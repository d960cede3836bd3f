//! The file store across real processes: values survive a restart, and a process killed with
//! SIGKILL at any point of a commit leaves a valid document equal to one of the committed states.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use codemode_host_adapters::FileStore;

use serde_json::{Value, json};

const FIXTURE: &str = env!("CARGO_BIN_EXE_codemode-store-fixture");

fn fresh_directory(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("codemode-store-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    directory
}

/// The same as the fixture's `state(n)`.
fn state(n: u64) -> Value {
    json!({ "n": n, "check": format!("{n};").repeat(200 + (n % 50) as usize * 40) })
}

fn fixture(args: &[&str]) -> std::process::Output {
    Command::new(FIXTURE)
        .args(args)
        .output()
        .expect("run the store fixture")
}

fn dir(directory: &Path) -> &str {
    directory.to_str().unwrap()
}

#[test]
fn values_survive_a_restart_across_processes() {
    let directory = fresh_directory("restart");
    let first = fixture(&[
        "commit",
        dir(&directory),
        "session-1",
        "answer",
        r#"{"value": 42}"#,
    ]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let second = fixture(&["commit", dir(&directory), "session-1", "list", "[1, 2]"]);
    assert!(second.status.success());
    let loaded = fixture(&["load", dir(&directory), "session-1"]);
    assert!(loaded.status.success());
    let values: HashMap<String, Value> = serde_json::from_slice(&loaded.stdout).unwrap();
    assert_eq!(
        values,
        HashMap::from([
            ("answer".to_owned(), json!({"value": 42})),
            ("list".to_owned(), json!([1, 2]))
        ])
    );
    let other = fixture(&["load", dir(&directory), "session-2"]);
    assert_eq!(String::from_utf8_lossy(&other.stdout).trim(), "{}");
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn a_corrupt_document_gives_an_error_naming_the_file() {
    let directory = fresh_directory("corrupt");
    let store = FileStore::open(&directory).unwrap();
    std::fs::write(store.document_path("s"), b"{\"format_version\": 1, \"sess").unwrap();
    let loaded = fixture(&["load", dir(&directory), "s"]);
    assert!(!loaded.status.success());
    let stderr = String::from_utf8_lossy(&loaded.stderr);
    assert!(
        stderr.contains(&store.document_path("s").display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("it is truncated"), "{stderr}");
    let error = store.load_blocking("s").expect_err("the same, in-process");
    assert_eq!(error.kind, codemode_session::StoreErrorKind::Corrupt);
    std::fs::remove_file(store.document_path("s")).unwrap();
    std::fs::create_dir(store.document_path("s")).unwrap();
    let error = store
        .load_blocking("s")
        .expect_err("a folder is not a document");
    assert_eq!(error.kind, codemode_session::StoreErrorKind::Unavailable);
    // The I/O error is kept for a caller that looks closer, and said once: in the message, not
    // again as the error's source (a chain printed whole names it once).
    let cause = error
        .cause
        .as_ref()
        .expect("the I/O error is kept")
        .to_string();
    assert!(error.message.contains(&cause), "{error}");
    assert!(std::error::Error::source(&error).is_none());
    let _ = std::fs::remove_dir_all(&directory);
}

/// A tiny deterministic generator for the kill delays, so failures can be replayed.
struct Delays(u64);

impl Delays {
    fn next(&mut self) -> Duration {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        Duration::from_micros((self.0 >> 33) % 25_000)
    }
}

#[test]
fn sigkill_during_commits_always_leaves_a_valid_committed_state() {
    let directory = fresh_directory("sigkill");
    let store = FileStore::open(&directory).unwrap();
    let mut delays = Delays(0x5EED_C0DE);
    let mut seen_states = 0;
    for run in 0..200 {
        let mut child = Command::new(FIXTURE)
            .args(["commit-loop", dir(&directory), "killed"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the committing process");
        std::thread::sleep(delays.next());
        // Child::kill sends SIGKILL on Unix: no chance to finish a write or clean up.
        child.kill().expect("kill the committing process");
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "run {run}: the commit loop ended by itself"
        );
        let values = store.load_blocking("killed").unwrap_or_else(|error| {
            panic!("run {run}: the document is not valid after SIGKILL: {error}")
        });
        if let Some(committed) = values.get("state") {
            let committed = &committed.to_value().unwrap();
            let n = committed["n"]
                .as_u64()
                .expect("a committed state has its n");
            assert_eq!(
                committed,
                &state(n),
                "run {run}: the document is not exactly state({n})"
            );
            assert_eq!(values.len(), 1, "run {run}: unexpected keys");
            seen_states += 1;
        }
    }
    // Most runs live long enough to commit something; the check above ran on those.
    assert!(
        seen_states > 100,
        "only {seen_states} of 200 runs committed anything"
    );
    // The next commit clears what killed writers left behind.
    store
        .commit_blocking(
            "killed",
            &codemode_protocol::stored_values_from([("after".to_owned(), json!(true))]),
        )
        .unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "abandoned temporary files: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn only_the_servers_user_can_read_the_store() {
    use std::os::unix::fs::PermissionsExt;
    let directory = fresh_directory("modes").join("nested");
    let committed = fixture(&["commit", dir(&directory), "tenant-a", "secret", r#""s3""#]);
    assert!(
        committed.status.success(),
        "{}",
        String::from_utf8_lossy(&committed.stderr)
    );
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&directory), 0o700, "the store directory");
    let files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(files.len() >= 2, "a document and its lock file: {files:?}");
    for file in files {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let _ = std::fs::remove_dir_all(directory.parent().unwrap());
}
