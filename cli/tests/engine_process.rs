//! Cells in engine processes: the real `codemode` binary in its engine-host mode, driven
//! through the `ProcessEngine` library API. What a crash, a hard stop and the sandbox do to the
//! cells of a process, and that nothing else is touched.

use std::collections::HashMap;
use std::time::Duration;

use codemode_engine::{
    CellLimits, CellStart, Engine, EngineHandles, EventReceiver, PendingMode, RuntimeCommand,
    RuntimeEvent, event_channel,
};
use codemode_engine_process::{Probe, ProcessEngine, ProcessEngineConfig};
use codemode_protocol::{OutputItem, ToolDefinition, ToolName};
use serde_json::{Value, json};

const HANG_GUARD: Duration = Duration::from_secs(60);

fn config() -> ProcessEngineConfig {
    config_for("v8")
}

/// Engine processes of the engine named `engine` (`v8` or `quickjs`). V8's are the pinned Node 24
/// loading the engine library with test hooks (`CODEMODE_V8_LIBRARY`, else the one `cargo xtask
/// setup-v8` built).
fn config_for(engine: &str) -> ProcessEngineConfig {
    let arguments = codemode_test_support::engine_host::arguments(engine);
    let mut config =
        ProcessEngineConfig::new(env!("CARGO_BIN_EXE_codemode"), arguments).with_test_hooks();
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        config = config.with_env("LD_LIBRARY_PATH", path);
    }
    config
}

/// The engine named in the engine processes' check (`v8` or `quickjs`).
fn what_engine(engine: &ProcessEngine) -> &'static str {
    let described = engine.check().unwrap_or_default();
    if described.to_lowercase().contains("quickjs") {
        "quickjs"
    } else {
        "v8"
    }
}

fn cell(source: &str) -> CellStart {
    CellStart {
        tenant: None,
        call_id: "call-1".into(),
        source: source.into(),
        enabled_tools: vec![ToolDefinition::function(ToolName::plain("echo"), "echo")],
        unavailable_servers: Vec::new(),
        stored_values: Default::default(),
        limits: CellLimits::default(),
        pending_mode: PendingMode::Continue,
    }
}

struct Running {
    handles: EngineHandles,
    events: EventReceiver,
}

fn start(engine: &ProcessEngine, cell: CellStart) -> Running {
    let (sender, events) = event_channel(None);
    let handles = engine.start(cell, sender).expect("the cell starts");
    Running { handles, events }
}

/// What a cell ended with: its texts, and its result (`None`: ended without one, terminated).
#[derive(Debug)]
struct Ended {
    texts: Vec<String>,
    result: Option<(HashMap<String, Value>, Option<String>)>,
}

impl Running {
    /// Answers `echo` calls (all but forged ones) until the cell ends.
    fn finish(mut self) -> Ended {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let commands = self.handles.commands.clone();
        std::thread::spawn(move || {
            let mut texts = Vec::new();
            let mut result = None;
            while let Some(event) = self.events.blocking_recv() {
                match event {
                    RuntimeEvent::ContentItem(OutputItem::Text { text }) => texts.push(text),
                    // Forged calls are left unanswered, as by a slow host, so that they pile up.
                    RuntimeEvent::ToolCall { id, .. } if id.starts_with("tool-forged") => {}
                    RuntimeEvent::ToolCall { id, input, .. } => {
                        let _ = commands.send(RuntimeCommand::ToolResponse {
                            id,
                            result: input.unwrap_or_else(|| Value::Null.into()),
                        });
                    }
                    RuntimeEvent::Result {
                        stored_value_writes,
                        error_text,
                    } => {
                        let trees = stored_value_writes
                            .iter()
                            .map(|(key, value)| (key.clone(), value.to_value().unwrap()))
                            .collect();
                        result = Some((trees, error_text))
                    }
                    _ => {}
                }
            }
            let _ = done_tx.send(Ended { texts, result });
        });
        done_rx
            .recv_timeout(HANG_GUARD)
            .expect("hung: the cell never ended")
    }

    /// Reads the cell's events until `pick` takes one (`what` names it if none comes).
    fn until<T>(&mut self, what: &str, mut pick: impl FnMut(RuntimeEvent) -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + HANG_GUARD;
        loop {
            assert!(std::time::Instant::now() < deadline, "hung: no {what}");
            match self.events.try_recv() {
                Some(event) => {
                    if let Some(picked) = pick(event) {
                        return picked;
                    }
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Waits for the first text the cell emits.
    fn first_text(&mut self) -> String {
        self.until("text", |event| match event {
            RuntimeEvent::ContentItem(OutputItem::Text { text }) => Some(text),
            _ => None,
        })
    }
}

fn error_of(ended: &Ended) -> &str {
    ended
        .result
        .as_ref()
        .and_then(|(_, error)| error.as_deref())
        .unwrap_or_else(|| panic!("expected a failed cell, got {ended:?}"))
}

#[test]
fn a_cell_runs_in_another_process_with_tools_and_stored_values() {
    let engine = ProcessEngine::new(config());
    let ended = start(
        &engine,
        cell(r#"const back = await tools.echo({n: 41}); text(String(back.n + 1)); store("k", {v: 1});"#),
    )
    .finish();
    assert_eq!(ended.texts, ["42"]);
    let (writes, error) = ended.result.expect("completed");
    assert_eq!(error, None);
    assert_eq!(writes["k"], json!({"v": 1}));
    let pids = engine.process_ids();
    assert!(
        !pids.is_empty() && !pids.contains(&std::process::id()),
        "{pids:?}"
    );
    assert!(engine.describe().contains("V8"), "{}", engine.describe());
}

#[test]
fn a_fatal_heap_error_ends_its_cell_with_the_limit_and_its_neighbour_with_a_reason() {
    let engine = ProcessEngine::new(config().with_spare_processes(0));
    // A neighbour in the same process, waiting on a tool call that is never answered.
    let mut neighbour = start(&engine, cell(r#"text("parked"); await tools.echo(1);"#));
    assert_eq!(neighbour.first_text(), "parked");
    let crashing = start(
        &engine,
        cell(
            r#"text("before");const a="x".repeat(2**29-24);a.indexOf("y");const b="y".repeat(2**29-24);b.indexOf("x")"#,
        ),
    );
    let crashed = crashing.finish();
    assert_eq!(
        crashed.texts,
        ["before"],
        "output emitted before the crash is kept"
    );
    assert!(
        error_of(&crashed).starts_with("heap limit exceeded"),
        "{crashed:?}"
    );
    assert!(
        crashed.result.as_ref().unwrap().0.is_empty(),
        "nothing is committed"
    );
    // The neighbour's events were already consumed up to its text; it ends with a reason.
    let neighbour = Running {
        handles: neighbour.handles,
        events: neighbour.events,
    }
    .finish();
    assert!(
        error_of(&neighbour).contains("another cell in its engine process"),
        "{neighbour:?}"
    );
    // The engine goes on with a new process.
    let after = start(&engine, cell(r#"text("still here")"#)).finish();
    assert_eq!(after.texts, ["still here"]);
}

#[test]
fn a_killed_process_ends_its_cells_as_crashed_and_keeps_their_output() {
    let engine = ProcessEngine::new(config());
    let mut parked = start(
        &engine,
        cell(r#"text("kept"); store("x", 1); await tools.echo(1);"#),
    );
    assert_eq!(parked.first_text(), "kept");
    let killed = engine.process_ids();
    for &pid in &killed {
        let status = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let ended = parked.finish();
    let error = error_of(&ended);
    assert!(
        error.starts_with("the engine process running this cell crashed (killed by SIGKILL"),
        "{error}"
    );
    assert!(
        ended.result.as_ref().unwrap().0.is_empty(),
        "no stored values"
    );
    // Once the engine has seen every killed process go, a new cell runs in a new one.
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while engine.process_ids().iter().any(|pid| killed.contains(pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "hung: killed processes still listed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = start(&engine, cell(r#"text("replacement")"#)).finish();
    assert_eq!(after.texts, ["replacement"]);
}

#[test]
fn a_termination_that_does_not_take_effect_kills_the_process_after_the_grace_period() {
    let engine = ProcessEngine::new(
        config()
            .with_spare_processes(0)
            .with_hard_stop_grace(Duration::from_millis(100)),
    );
    let mut neighbour = start(&engine, cell(r#"text("parked"); await tools.echo(1);"#));
    assert_eq!(neighbour.first_text(), "parked");
    // A long built-in that never reaches an interrupt check.
    let mut stuck = start(&engine, cell(r#"text("before"); new Array(1e9).fill(0)"#));
    assert_eq!(stuck.first_text(), "before");
    std::thread::sleep(Duration::from_millis(200));
    stuck.handles.terminate.terminate();
    let stuck = stuck.finish();
    assert!(
        stuck.result.is_none(),
        "terminated cells have no result: {stuck:?}"
    );
    let neighbour = neighbour.finish();
    assert!(
        error_of(&neighbour).contains("another cell in its engine process"),
        "{neighbour:?}"
    );
}

#[test]
fn a_cpu_limit_that_does_not_take_effect_ends_the_cell_with_the_limit_error() {
    assert_hard_stopped_at_the_cpu_limit("v8");
}

#[test]
fn a_quickjs_built_in_that_checks_no_interrupt_is_ended_by_the_hard_stop() {
    // QuickJS's `fill` loops in C without an interrupt check.
    assert_hard_stopped_at_the_cpu_limit("quickjs");
}

/// A long built-in past its CPU budget, with a heap too large to stop it soon: only the engine
/// process's hard stop ends the cell, a grace period after the budget, keeping its output; the
/// engine serves the next cell from a new process.
fn assert_hard_stopped_at_the_cpu_limit(engine_name: &str) {
    let engine = ProcessEngine::new(
        config_for(engine_name).with_hard_stop_grace(Duration::from_millis(100)),
    );
    let mut limited = cell(r#"text("before"); new Array(1e9).fill(0); text("after")"#);
    limited.limits = CellLimits::default()
        .with_heap_limit_bytes(4 << 30)
        .with_cpu_time_limit(Some(Duration::from_millis(200)));
    let ended = start(&engine, limited).finish();
    assert_eq!(ended.texts, ["before"]);
    assert!(
        error_of(&ended).starts_with("cpu time limit exceeded"),
        "{ended:?}"
    );
    let next = start(&engine, cell(r#"text("next")"#)).finish();
    assert_eq!(next.texts, ["next"]);
}

#[test]
fn the_engine_process_is_sandboxed() {
    assert_sandboxed(config());
}

#[test]
fn a_quickjs_engine_process_is_sandboxed_the_same() {
    assert_sandboxed(config_for("quickjs"));
}

/// Engine processes of `config` run under seccomp, refuse the probes, hold only their channel
/// and capture pipes, an empty environment but the library path, and the root as their folder.
fn assert_sandboxed(config: ProcessEngineConfig) {
    // A pipe without close-on-exec: every process this test starts inherits it.
    let leaked = nix::unistd::pipe().unwrap();
    let engine = ProcessEngine::new(config);
    let ended = start(&engine, cell(r#"text("up")"#)).finish();
    assert_eq!(ended.texts, ["up"]);
    let pid = engine.process_ids()[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"]),
        "no seccomp filter in force:\n{status}"
    );
    for what in [Probe::OpenForWriting, Probe::Socket, Probe::Exec] {
        let (allowed, detail) = engine.probe_sandbox(what.clone()).unwrap();
        assert!(!allowed, "{what:?} was allowed");
        assert!(detail.contains("not permitted"), "{what:?}: {detail}");
    }
    // The environment holds only the library path; the working directory is the root.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let names: Vec<String> = environ
        .split(|byte| *byte == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            String::from_utf8_lossy(entry)
                .split('=')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    // In Node, libuv is told to make no io_uring instance for files.
    let node_home = what_engine(&engine) == "v8";
    let allowed_names: &[&str] = if node_home {
        &["LD_LIBRARY_PATH", "UV_USE_IO_URING"]
    } else {
        &["LD_LIBRARY_PATH"]
    };
    assert!(
        names
            .iter()
            .all(|name| allowed_names.contains(&name.as_str())),
        "{names:?}"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        std::path::Path::new("/")
    );
    // No descriptor but the channel (standard input and the process's own duplicates of it),
    // its lanes (unnamed Unix sockets the parent made) and the two capture pipes, though this
    // test leaked a pipe into it on purpose.
    let channel = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap();
    let unnamed_unix_sockets: Vec<String> = std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode [Path]
            (fields.len() == 7).then(|| format!("socket:[{}]", fields[6]))
        })
        .collect();
    let leaked_pipe = format!(
        "pipe:[{}]",
        nix::sys::stat::fstat(&leaked.0).unwrap().st_ino
    );
    let mut lanes = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let number: u32 = entry.file_name().to_string_lossy().parse().unwrap();
        let target = std::fs::read_link(entry.path()).unwrap();
        let target_text = target.to_string_lossy().into_owned();
        let lane = unnamed_unix_sockets.contains(&target_text);
        lanes += usize::from(number > 2 && target != channel && lane);
        assert_ne!(
            target_text, leaked_pipe,
            "the leaked pipe reached the engine process"
        );
        // Node's own event loops (never run here): their epoll and event descriptors, the
        // io_uring each makes to batch epoll changes (whose system call seccomp refuses), and
        // their wake-up pipes, both ends in this process.
        let node_own = node_home
            && (target_text.starts_with("anon_inode:[") || target_text.starts_with("pipe:["));
        assert!(
            number <= 2 || target == channel || lane || node_own,
            "descriptor {number} of the engine process is {target:?}"
        );
    }
    assert!(lanes >= 1, "the engine process has no lane");
    drop(leaked);
    // The engine still runs cells after the probes.
    let ended = start(&engine, cell(r#"text("after")"#)).finish();
    assert_eq!(ended.texts, ["after"]);
}

#[test]
fn a_program_that_is_not_an_engine_host_is_a_clear_error() {
    let engine = ProcessEngine::new(
        ProcessEngineConfig::new("/bin/true", Vec::<String>::new()).with_spare_processes(0),
    );
    let error = engine.check().unwrap_err().to_string();
    assert!(error.contains("ended before it was ready"), "{error}");
    // A start does not wait for the process: its failure ends the cell, as an event.
    let ended = start(&engine, cell("text(1)")).finish();
    let error = error_of(&ended);
    assert!(error.contains("ended before it was ready"), "{error}");
}

#[test]
fn large_output_emitted_before_a_hard_stop_is_kept() {
    let engine = ProcessEngine::new(config());
    let mut hostile = cell(
        r#"text("x".repeat(1 << 20)); text("small"); text("y".repeat(1 << 20)); new Array(1e9).fill(0)"#,
    );
    hostile.limits = CellLimits::default().with_heap_limit_bytes(32 << 20);
    let ended = start(&engine, hostile).finish();
    assert_eq!(ended.texts.len(), 3, "{:?}", ended.result);
    assert_eq!(ended.texts[0].len(), 1 << 20);
    assert_eq!(ended.texts[1], "small");
    assert_eq!(ended.texts[2], "y".repeat(1 << 20));
    assert!(error_of(&ended).contains("limit exceeded"), "{ended:?}");
}

#[test]
fn the_memory_ceiling_ends_only_the_process_that_reaches_it() {
    // A heap limit far above the process's ceiling: the ceiling is what stops the cell.
    let engine = ProcessEngine::new(config().with_memory_ceiling_bytes(Some(600 << 20)));
    assert_eq!(start(&engine, cell(r#"text("up")"#)).finish().texts, ["up"]);
    // The ceiling, and no core dumps, are in force in the process.
    for pid in engine.process_ids() {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let limit = |name: &str| -> Vec<String> {
            let line = limits.lines().find(|line| line.starts_with(name)).unwrap();
            line[name.len()..]
                .split_whitespace()
                .take(2)
                .map(str::to_owned)
                .collect()
        };
        let ceiling = 600u64 << 20;
        let [soft, hard] = [0, 1].map(|at| limit("Max data size")[at].parse::<u64>().unwrap());
        assert_eq!(soft, hard);
        // Counted from what Node and the warm isolates reserved before serving (their code
        // ranges, mapped writable): Node's own 512 MiB and 64 MiB per isolate.
        assert!(
            (ceiling + (512 << 20)..ceiling + (2 << 30)).contains(&soft),
            "{soft}"
        );
        assert_eq!(limit("Max core file size"), ["0", "0"]);
    }
    let mut greedy =
        cell(r#"text("before"); const a = []; for (;;) a.push(new Array(1e5).fill(1.5))"#);
    greedy.limits = CellLimits::default().with_heap_limit_bytes(4 << 30);
    let ended = start(&engine, greedy).finish();
    assert_eq!(ended.texts, ["before"]);
    // Which allocation reaches the ceiling decides how V8 takes it: a heap that cannot grow is
    // stopped as a heap at its limit, an internal allocation that fails is a fatal error that
    // ends the process. Either way the cell ends with a clear error and nothing else is touched.
    let error = error_of(&ended);
    assert!(
        error.starts_with("heap limit exceeded")
            || error.starts_with("out of memory: the cell asked for more memory")
            || error.starts_with("the engine process running this cell crashed ("),
        "{error}"
    );
    let after = start(&engine, cell(r#"text("next")"#)).finish();
    assert_eq!(after.texts, ["next"]);
}

#[test]
fn a_crash_names_the_fatal_error_the_engine_printed() {
    let engine = ProcessEngine::new(config());
    let mut parked = start(&engine, cell(r#"text("kept"); await tools.echo(1);"#));
    assert_eq!(parked.first_text(), "kept");
    engine.probe_sandbox(Probe::FatalError).unwrap();
    let ended = parked.finish();
    assert_eq!(
        error_of(&ended),
        "the engine process running this cell crashed (Check failed: a test-only fatal error.; \
         killed by SIGABRT, a fatal error in the engine)"
    );
}

fn tenant_cell(tenant: &str, source: &str) -> CellStart {
    let mut cell = cell(source);
    cell.tenant = Some(tenant.into());
    cell
}

/// Waits until the cell has made its first tool call (so it is running in its process).
fn until_tool_call(running: &mut Running) -> (String, Option<codemode_protocol::JsonText>) {
    running.until("tool call", |event| match event {
        RuntimeEvent::ToolCall { id, input, .. } => Some((id, input)),
        _ => None,
    })
}

/// A cell that waits for one `echo` call, then says `word`.
fn waiting(word: &str) -> String {
    format!(r#"await tools.echo(1); text("{word}");"#)
}

impl Running {
    /// Answers the tool call already taken from the events, then finishes.
    fn answer_and_finish(self, id: String) -> Ended {
        let _ = self.handles.commands.send(RuntimeCommand::ToolResponse {
            id,
            result: Value::Null.into(),
        });
        self.finish()
    }
}

#[test]
fn cells_of_different_tenants_never_share_a_process() {
    let engine = ProcessEngine::new(config().with_cells_per_process(16));
    let mut first_a = start(&engine, tenant_cell("a", &waiting("a1")));
    let call_a1 = until_tool_call(&mut first_a);
    let mut only_b = start(&engine, tenant_cell("b", &waiting("b")));
    let call_b = until_tool_call(&mut only_b);
    let mut second_a = start(&engine, tenant_cell("a", &waiting("a2")));
    let call_a2 = until_tool_call(&mut second_a);
    assert!(
        engine.process_ids().len() >= 2,
        "{:?}",
        engine.process_ids()
    );
    // The newest cell's process crashes: it takes tenant a's cells, and nothing of tenant b's.
    engine.probe_sandbox(Probe::FatalError).unwrap();
    let first_a = first_a.answer_and_finish(call_a1.0);
    let second_a = second_a.answer_and_finish(call_a2.0);
    let only_b = only_b.answer_and_finish(call_b.0);
    assert!(error_of(&first_a).contains("crashed"), "{first_a:?}");
    assert!(error_of(&second_a).contains("crashed"), "{second_a:?}");
    assert_eq!(only_b.texts, ["b"], "{only_b:?}");
    assert_eq!(only_b.result.map(|(_, error)| error), Some(None));
}

#[test]
fn a_forged_or_oversized_frame_ends_its_process_and_reaches_no_cell() {
    use codemode_engine_process::Forgery;
    // The first cell of a fresh engine is number 1, the second number 2.
    for (forgery, because) in [
        (Forgery::EventForAnotherCell(1), "an event for cell 1"),
        (Forgery::ResultForAnotherCell(1), "an event for cell 1"),
        (
            Forgery::OversizedToolCall(2),
            "bytes where the limits allow",
        ),
        (
            Forgery::ToolCallsPastTheInFlightLimit(2),
            "bytes of arguments at once",
        ),
        (
            Forgery::ToolCallsPastTheCallLimit(2),
            "more tool calls than the cell's limit of 10000",
        ),
        (
            Forgery::StoredValuesPastTheLimit(2),
            "bytes of stored values for one cell",
        ),
        (
            Forgery::UnreadableToolCall(2),
            "a tool call whose argument no tool could read: it has a string with a lone surrogate",
        ),
        (Forgery::HugeHeader, "not valid"),
    ] {
        let engine = ProcessEngine::new(config());
        let mut victim = start(&engine, tenant_cell("victim", &waiting("victim")));
        let victim_call = until_tool_call(&mut victim);
        let mut forger = start(&engine, tenant_cell("forger", &waiting("forger")));
        let forger_call = until_tool_call(&mut forger);
        engine.probe_sandbox(Probe::Forge(forgery.clone())).unwrap();
        let forger = forger.answer_and_finish(forger_call.0);
        let error = error_of(&forger);
        assert!(
            error.contains("was ended because") && error.contains(because),
            "{forgery:?}: {error}"
        );
        // The victim saw nothing forged, and finishes as if nothing happened.
        let victim = victim.answer_and_finish(victim_call.0);
        assert_eq!(victim.texts, ["victim"], "{forgery:?}: {victim:?}");
        let (writes, error) = victim.result.expect("completed");
        assert_eq!(error, None, "{forgery:?}");
        assert!(writes.is_empty(), "{forgery:?}: {writes:?}");
    }
}

#[test]
fn a_child_that_stops_reading_is_ended_and_holds_up_nothing_else() {
    let engine = ProcessEngine::new(
        config()
            .with_cells_per_process(2)
            .with_stall_deadline(Duration::from_millis(500)),
    );
    let mut wedged = start(&engine, tenant_cell("wedged", &waiting("never")));
    let _ = until_tool_call(&mut wedged);
    engine.probe_sandbox(Probe::StopReading).unwrap();
    // A start of 3 MiB for the wedged process fills its channel; it is queued, not written
    // by the caller, so the start returns.
    let big = format!("// {}\ntext(1);", "x".repeat(3 << 20));
    let stuffed = start(&engine, tenant_cell("wedged", &big));
    // Meanwhile other tenants' cells run as usual.
    for round in 0..3 {
        let ended = start(
            &engine,
            tenant_cell("other", &format!("text('ok {round}')")),
        )
        .finish();
        assert_eq!(ended.texts, [format!("ok {round}")]);
    }
    for running in [wedged, stuffed] {
        let ended = running.finish();
        let error = error_of(&ended);
        assert!(error.contains("stopped reading its channel"), "{ended:?}");
    }
}

/// Native code that took over an engine process (a V8 exploit) tries what the issue of the walls
/// found it could: read the server's secrets and other tenants' values, signal, renice or limit
/// the server, start processes, reach the terminal. A native probe compiled into test builds
/// runs each attack inside a real, sandboxed engine process; each must fail.
#[test]
fn native_code_in_an_engine_process_reaches_nothing_of_the_server_or_the_machine() {
    use std::os::unix::fs::PermissionsExt;
    // The server marks itself non-dumpable; so does this parent.
    nix::sys::prctl::set_dumpable(false).unwrap();
    let folder = codemode_test_support::scratch_folder("native-attacks");
    let tokens = folder.join("tokens");
    std::fs::write(&tokens, "alpha alpha-token-0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let store = folder.join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(
        store.join("session-other.json"),
        r#"{"values": {"secret": 1}}"#,
    )
    .unwrap();

    let engine = ProcessEngine::new(config());
    let ended = start(&engine, tenant_cell("attacker", r#"text("up")"#)).finish();
    assert_eq!(ended.texts, ["up"]);
    let attack = |attack: &str, target: &str| {
        engine
            .probe_sandbox(Probe::Native {
                attack: attack.to_owned(),
                target: target.to_owned(),
            })
            .unwrap()
    };
    // The probe works: what the engine itself needs is allowed.
    let (allowed, detail) = attack("read", "/proc/self/status");
    assert!(allowed, "reading its own status: {detail}");
    let (allowed, detail) = attack("prlimit", "0");
    assert!(allowed, "its own limits: {detail}");
    let (allowed, detail) = attack("mmap", "small");
    assert!(allowed, "a private mapping: {detail}");
    let (allowed, detail) = attack("stat", "/dev/null");
    assert!(allowed, "what it reads: {detail}");
    // A socket of the host this test holds open: an engine process that shared the host's
    // network namespace would see it listed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();

    let parent = std::process::id().to_string();
    let token_file = tokens.to_str().unwrap().to_owned();
    let store_folder = store.to_str().unwrap().to_owned();
    let document = store
        .join("session-other.json")
        .to_str()
        .unwrap()
        .to_owned();
    let environ = format!("/proc/{parent}/environ");
    for (name, target) in [
        ("read", environ.as_str()),
        ("mem", parent.as_str()),
        ("read", token_file.as_str()),
        ("list", store_folder.as_str()),
        ("read", document.as_str()),
        ("kill", parent.as_str()),
        ("kill", "-1"),
        ("prlimit", parent.as_str()),
        ("setpriority", parent.as_str()),
        ("setaffinity", parent.as_str()),
        ("clone3", ""),
        ("fork", ""),
        ("io_uring", ""),
        ("tty", ""),
        ("tiocsti", "2"),
        ("ptrace", parent.as_str()),
        ("vm_readv", parent.as_str()),
        ("socket", ""),
        ("dumpable", ""),
        ("mmap", "shared"),
        ("mmap", "growsdown"),
        ("sockets", ""),
    ]
    .into_iter()
    .chain(
        // With a root of its own (as root), another tenant's store file and the token file do
        // not even exist for it: their size and time cannot be read.
        nix::unistd::geteuid()
            .is_root()
            .then_some([
                ("stat", document.as_str()),
                ("stat", token_file.as_str()),
                ("stat", "/etc/passwd"),
                ("stat", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")),
            ])
            .into_iter()
            .flatten(),
    ) {
        let (allowed, detail) = attack(name, target);
        assert!(!allowed, "{name} {target} was allowed: {detail}");
        if name == "clone3" {
            // It looks absent, so the C library falls back to clone, whose flags are checked.
            assert!(detail.contains("errno 38"), "clone3: {detail}");
        }
    }
    // It has a session of its own (no controlling terminal): /proc/PID/stat's sixth field.
    let pid = engine.process_ids()[0];
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(fields[3], pid.to_string(), "session of {pid}: {stat}");
    assert_eq!(fields[4], "0", "a controlling terminal: {stat}");
    // Threads still start (through clone), and cells still run.
    let ended = start(
        &engine,
        tenant_cell(
            "attacker",
            r#"const a = new Array(2e6).fill(1); text(String(a.reduce((x, y) => x + y)))"#,
        ),
    )
    .finish();
    assert_eq!(ended.texts, ["2000000"]);
    drop(listener);
    let _ = std::fs::remove_dir_all(&folder);
}

/// Native code that took over an engine process starts threads without end, or touches memory
/// past its data limit: where the server may make control groups (as root, which RLIMIT_NPROC
/// does not bind), each engine process has one of its own that bounds both, and it goes when
/// the process does.
#[test]
fn an_engine_process_is_bounded_by_a_control_group_of_its_own() {
    const CEILING: u64 = 3 << 30;
    // A group an ended server left behind (named for a process id no process has) goes when the
    // next engine starts.
    let stale = std::path::Path::new("/sys/fs/cgroup/pids/codemode-engine-4194304000-0-1");
    let made_stale = nix::unistd::geteuid().is_root() && std::fs::create_dir(stale).is_ok();
    let engine = ProcessEngine::new(
        config()
            .with_threads_per_process(64)
            .with_memory_ceiling_bytes(Some(CEILING)),
    );
    let ended = start(&engine, tenant_cell("attacker", r#"text("up")"#)).finish();
    assert_eq!(ended.texts, ["up"]);
    let folders = engine.control_group_folders();
    if !nix::unistd::geteuid().is_root() {
        // Elsewhere a delegated group may still give one; without, SECURITY.md says what holds.
        return;
    }
    assert!(
        !folders.is_empty(),
        "no control group for the engine process"
    );
    if made_stale {
        assert!(!stale.exists(), "a stale control group was left");
    }
    let pid = engine.process_ids()[0].to_string();
    let read = |folder: &std::path::Path, file: &str| {
        std::fs::read_to_string(folder.join(file))
            .map(|text| text.trim().to_owned())
            .ok()
    };
    let (mut threads, mut memory) = (None, None);
    for folder in &folders {
        let procs = read(folder, "cgroup.procs").unwrap_or_default();
        assert!(
            procs.lines().any(|line| line == pid),
            "{pid} is not in {}: {procs}",
            folder.display()
        );
        threads = threads.or(read(folder, "pids.max"));
        memory = memory
            .or(read(folder, "memory.max"))
            .or(read(folder, "memory.limit_in_bytes"));
    }
    assert_eq!(threads.as_deref(), Some("64"));
    assert_eq!(memory, Some(CEILING.to_string()));
    let attack = |attack: &str, target: &str| {
        engine
            .probe_sandbox(Probe::Native {
                attack: attack.to_owned(),
                target: target.to_owned(),
            })
            .unwrap()
    };
    let (allowed, detail) = attack("threads", "8");
    assert!(allowed, "a few threads: {detail}");
    let (allowed, detail) = attack("threads", "2000");
    assert!(!allowed, "2000 threads were started: {detail}");
    assert!(detail.contains("errno 11"), "{detail}");
    // The process goes on serving cells.
    let ended = start(&engine, tenant_cell("attacker", r#"text("still up")"#)).finish();
    assert_eq!(ended.texts, ["still up"]);
    // Its groups go with it.
    drop(engine);
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while folders.iter().any(|folder| folder.exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "control groups left behind: {folders:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn engine_processes_run_as_the_engine_user() {
    // 65534 is `nobody` on Debian: a user that owns nothing of the server's.
    let engine = ProcessEngine::new(config().with_user(65534, 65534).with_spare_processes(0));
    if !nix::unistd::geteuid().is_root() {
        // Only root may start a process as another user: anyone else's cell fails with a clear
        // refusal (a start does not wait for the process, so it arrives as the cell's end).
        let ended = start(&engine, cell("text(1)")).finish();
        let error = error_of(&ended).to_owned();
        assert!(
            error.contains("could not start") || error.contains("cannot start"),
            "{error}"
        );
        return;
    }
    let ended = start(&engine, cell(r#"text("as another user")"#)).finish();
    assert_eq!(ended.texts, ["as another user"]);
    let pid = engine.process_ids()[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for field in ["Uid:", "Gid:"] {
        let line = status.lines().find(|line| line.starts_with(field)).unwrap();
        let ids: Vec<&str> = line.split_whitespace().skip(1).collect();
        assert_eq!(ids, ["65534"; 4], "{line}");
    }
    let groups = status
        .lines()
        .find(|line| line.starts_with("Groups:"))
        .unwrap();
    assert_eq!(
        groups.trim(),
        "Groups:",
        "no supplementary groups: {groups}"
    );
    // All its user's threads together are bounded, which they are not for root.
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let processes = limits
        .lines()
        .find(|line| line.starts_with("Max processes"))
        .unwrap();
    let ceiling = (codemode_engine_process::DEFAULT_THREADS_PER_PROCESS * 64).to_string();
    assert_eq!(
        processes.split_whitespace().nth(2),
        Some(ceiling.as_str()),
        "{processes}"
    );
    // Without root's capabilities, it still gets a root and a network of its own, through a user
    // namespace of its own, where the kernel allows one (as here).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for (attack, target) in [("stat", "/etc/passwd"), ("sockets", "")] {
        let (allowed, detail) = engine
            .probe_sandbox(Probe::Native {
                attack: attack.to_owned(),
                target: target.to_owned(),
            })
            .unwrap();
        assert!(!allowed, "{attack} {target} was allowed: {detail}");
    }
    drop(listener);
}

/// `config`, with each process held before it runs the engine host while the file `hold`
/// exists: a process started then cannot be ready until the test lets it.
fn held_while_exists(
    mut config: ProcessEngineConfig,
    hold: &std::path::Path,
) -> ProcessEngineConfig {
    let mut args: Vec<std::ffi::OsString> = vec![
        "-c".into(),
        "while [ -e \"$0\" ]; do /bin/sleep 0.01; done; exec \"$@\"".into(),
        hold.into(),
        config.program.clone().into(),
    ];
    args.extend(config.args.iter().cloned());
    config.program = "/bin/sh".into();
    config.args = args;
    config
}

/// Sixty-four cells start at once with no spare process and no process able to become ready:
/// every start returns at once (the cells wait for their processes), so the one async worker of
/// the runtime goes on serving another session, whose cell runs on its own idle process while
/// the sixty-four wait. Once the processes may start, every waiting cell runs.
#[test]
fn starts_waiting_for_processes_hold_up_no_async_worker() {
    use codemode_host_adapters::{CompositeTools, MemoryStore};
    use codemode_session::{Session, SessionConfig};
    use std::sync::Arc;
    const BURST: usize = 64;
    let folder = codemode_test_support::scratch_folder("engine-process-held-starts");
    let hold = folder.join("hold");
    let engine = ProcessEngine::new(
        held_while_exists(config_for("quickjs"), &hold)
            .with_spare_processes(0)
            .with_cells_per_process(8),
    );
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let engine: Arc<dyn Engine> = Arc::new(engine);
            let store = Arc::new(MemoryStore::new());
            let tools = Arc::new(CompositeTools::new());
            let open = |name: &'static str, cells: usize| {
                let config = SessionConfig::default()
                    .with_tenant(name)
                    .with_max_active_cells(cells);
                Session::open(
                    name,
                    Arc::clone(&engine),
                    store.clone(),
                    tools.clone(),
                    config,
                )
            };
            // The other session's tenant has a process, idle once its first cell is done.
            let other = open("other", 4).await.unwrap();
            let first = other.exec_tool("o-1", "text('ready')").await;
            assert!(format!("{first:?}").contains("ready"), "{first:?}");
            std::fs::write(&hold, "").unwrap();
            let burst = Arc::new(open("burst", BURST).await.unwrap());
            let waiting: Vec<_> = (0..BURST)
                .map(|index| {
                    let burst = Arc::clone(&burst);
                    tokio::spawn(async move {
                        burst
                            .exec_tool(&format!("b-{index}"), &format!("text('cell {index}')"))
                            .await
                    })
                })
                .collect();
            // Let every one of them begin its start.
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            let served = other.exec_tool("o-2", "text(6 * 7)").await;
            assert!(format!("{served:?}").contains("42"), "{served:?}");
            assert!(
                waiting.iter().all(|cell| !cell.is_finished()),
                "a cell ran while no process could be ready"
            );
            std::fs::remove_file(&hold).unwrap();
            for (index, cell) in waiting.into_iter().enumerate() {
                let result = cell.await.unwrap();
                assert!(
                    format!("{result:?}").contains(&format!("cell {index}")),
                    "{result:?}"
                );
            }
        });
        let _ = done.send(());
    });
    outcome
        .recv_timeout(HANG_GUARD * 2)
        .expect("hung: an engine start held up the async worker");
}

/// A cell terminated while it waits for its process ends at once, without a result, and the
/// process started for it stays in the pool for the next cell.
#[test]
fn a_cell_terminated_while_it_waits_for_a_process_ends_without_a_result() {
    let folder = codemode_test_support::scratch_folder("engine-process-terminated-waiting");
    let hold = folder.join("hold");
    std::fs::write(&hold, "").unwrap();
    let engine =
        ProcessEngine::new(held_while_exists(config_for("quickjs"), &hold).with_spare_processes(0));
    let waiting = start(&engine, cell("text('never')"));
    waiting.handles.terminate.terminate();
    let ended = waiting.finish();
    assert_eq!(
        (ended.texts.len(), ended.result.is_none()),
        (0, true),
        "{ended:?}"
    );
    std::fs::remove_file(&hold).unwrap();
    let ended = start(&engine, cell("text('next')")).finish();
    assert_eq!(ended.texts, ["next"]);
}

/// The names of the threads that handed a cell's events to its owner, in order, for a cell
/// started from `runtime` (`None`: from this plain thread). Its one tool call is answered.
fn threads_delivering_events(runtime: Option<&tokio::runtime::Runtime>) -> Vec<String> {
    use std::sync::{Arc, Mutex};
    let engine = ProcessEngine::new(config());
    let seen: Arc<Mutex<Vec<(String, RuntimeEvent)>>> = Arc::default();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
    let recorder = {
        let seen = Arc::clone(&seen);
        let ended_tx = Mutex::new(ended_tx);
        codemode_engine::EventSender::forward(move |event| {
            let thread = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_owned();
            if matches!(event, RuntimeEvent::Result { .. }) {
                let _ = ended_tx.lock().unwrap().send(());
            }
            seen.lock().unwrap().push((thread, event));
            Ok(())
        })
    };
    let source = r#"const echoed = await tools.echo("ping"); text(echoed);"#;
    let handles = match runtime {
        Some(runtime) => {
            let engine = engine.clone();
            runtime
                .block_on(runtime.spawn(async move { engine.start(cell(source), recorder) }))
                .unwrap()
        }
        None => engine.start(cell(source), recorder),
    }
    .expect("the cell starts");
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        assert!(std::time::Instant::now() < deadline, "hung: no tool call");
        let call = seen
            .lock()
            .unwrap()
            .iter()
            .find_map(|(_, event)| match event {
                RuntimeEvent::ToolCall { id, .. } => Some(id.clone()),
                _ => None,
            });
        if let Some(id) = call {
            handles
                .commands
                .send(RuntimeCommand::ToolResponse {
                    id,
                    result: json!("pong").into(),
                })
                .unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    ended_rx
        .recv_timeout(HANG_GUARD)
        .expect("hung: the cell never ended");
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter().any(|(_, event)| matches!(event,
            RuntimeEvent::ContentItem(OutputItem::Text { text }) if text == "pong")),
        "{seen:?}"
    );
    seen.iter().map(|(thread, _)| thread.clone()).collect()
}

/// The parent reads a cell's lane on the async runtime the cell was started from, and hands
/// each event to the cell's owner there: no reader thread of the engine in between (a tool
/// round trip crosses one thread of the parent). A cell started from a plain thread has its
/// lane read by the engine's own runtime.
#[test]
fn a_cells_events_are_read_on_the_async_runtime_it_was_started_from() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("the-owners-runtime")
        .enable_all()
        .build()
        .unwrap();
    let threads = threads_delivering_events(Some(&runtime));
    assert!(
        threads.iter().all(|thread| thread == "the-owners-runtime"),
        "{threads:?}"
    );
    let threads = threads_delivering_events(None);
    assert!(
        threads
            .iter()
            .all(|thread| thread == "codemode-engine-lanes"),
        "{threads:?}"
    );
}

/// In the child, each lane (a socket of its own, from the parent) is read by its own runtime
/// thread and by no other thread: a warm runtime waits on its lane for its start, and a cell
/// that awaits a tool waits on its lane for the answer, with no thread in between.
#[test]
fn each_lane_of_an_engine_process_is_read_by_its_own_runtime_thread() {
    let engine = ProcessEngine::new(config());
    let mut waiting = start(&engine, cell(&waiting("done")));
    let call = until_tool_call(&mut waiting);
    let pid = *engine.process_ids().first().expect("an engine process");
    // The process's sockets: its channel (standard input) and its lanes.
    let socket_of = |fd: &str| {
        std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .ok()
            .map(|target| target.to_string_lossy().into_owned())
            .filter(|target| target.starts_with("socket:"))
    };
    let channel = socket_of("0").expect("the channel is a socket");
    // The system calls a thread blocks in to read a socket.
    let reads = [
        nix::libc::SYS_recvfrom,
        nix::libc::SYS_recvmsg,
        nix::libc::SYS_read,
    ];
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "hung: the lanes were never all waited on by their threads"
        );
        // Each thread blocked reading a socket: its name, and the socket.
        let mut readers: Vec<(String, String)> = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            let syscall = std::fs::read_to_string(task.join("syscall")).unwrap_or_default();
            let mut fields = syscall.split_whitespace();
            let number: Option<i64> = fields.next().and_then(|number| number.parse().ok());
            let fd = fields
                .next()
                .and_then(|fd| i64::from_str_radix(fd.trim_start_matches("0x"), 16).ok());
            if let (Some(number), Some(fd)) = (number, fd)
                && reads.contains(&number)
                && let Some(socket) = socket_of(&fd.to_string())
            {
                readers.push((name.trim().to_owned(), socket));
            }
        }
        let lanes: std::collections::BTreeSet<String> =
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .filter_map(|entry| socket_of(&entry.unwrap().file_name().to_string_lossy()))
                .filter(|socket| *socket != channel)
                .collect();
        let lane_readers: Vec<&(String, String)> = readers
            .iter()
            .filter(|(_, socket)| lanes.contains(socket))
            .collect();
        // Every lane waited on, each by one thread, every one of them a lane's own thread (the
        // running cell's among them: it waits for its tool's answer), and the main thread on
        // the channel. A thread busy for a moment (a lane's making a runtime between two cells)
        // is looked at again.
        let waited: std::collections::BTreeSet<&String> =
            lane_readers.iter().map(|(_, socket)| socket).collect();
        let channel_read = readers.iter().any(|(_, socket)| *socket == channel);
        if lanes.len() >= 2
            && waited.len() == lanes.len()
            && lane_readers.len() == lanes.len()
            && channel_read
        {
            assert!(
                lane_readers.iter().all(|(name, _)| name == "codemode-lane"),
                "{lane_readers:?}"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ended = waiting.answer_and_finish(call.0);
    assert_eq!(ended.texts, ["done"]);
}

/// Every live cell in an engine process holds a lane's socket in the server: an engine raises
/// the server's soft limit of open descriptors to the hard one, so that a thousand parked cells
/// do not run out under the usual soft limit of 1,024.
#[test]
fn an_engine_raises_the_limit_of_open_descriptors_for_its_lanes() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let lowered = hard.min(1024);
    setrlimit(Resource::RLIMIT_NOFILE, lowered, hard).unwrap();
    let engine = ProcessEngine::new(config().with_spare_processes(0));
    assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    drop(engine);
}

/// A cell terminated the moment it starts (its start and the termination on their way to the
/// child together) is stopped as it starts, even in a synchronous loop that never reads again:
/// its process is not killed for it, and the other cell there goes on.
#[test]
fn a_cell_terminated_as_it_starts_is_stopped_without_ending_its_process() {
    let engine = ProcessEngine::new(config().with_cells_per_process(16));
    for round in 0..5 {
        let mut neighbour = start(&engine, tenant_cell("t", &waiting("neighbour")));
        let call = until_tool_call(&mut neighbour);
        let spinner = start(&engine, tenant_cell("t", "while (true) {}"));
        spinner.handles.terminate.terminate();
        let stopped = spinner.finish();
        assert!(stopped.result.is_none(), "round {round}: {stopped:?}");
        // Past the grace period: a termination that was lost would have killed the process.
        std::thread::sleep(Duration::from_millis(300));
        let neighbour = neighbour.answer_and_finish(call.0);
        assert_eq!(
            neighbour.texts,
            ["neighbour"],
            "round {round}: {neighbour:?}"
        );
        assert_eq!(neighbour.result.map(|(_, error)| error), Some(None));
    }
}

impl Running {
    /// Waits for the cell's result, as its owner reads it, and returns its error text.
    fn until_result(&mut self) -> Option<String> {
        self.until("result", |event| match event {
            RuntimeEvent::Result { error_text, .. } => Some(error_text),
            _ => None,
        })
    }
}

/// How many terminations the process of the most recent cell has been sent.
fn terminations_read(engine: &ProcessEngine) -> u64 {
    let (allowed, count) = engine.probe_sandbox(Probe::TerminationsRead).unwrap();
    assert!(allowed, "{count}");
    count.parse().unwrap()
}

/// The cell actor terminates every cell it closes, ended or not, so that nothing of a closed
/// cell runs on. A cell whose result has come has nothing left to stop: its process is sent no
/// termination for it (two frames and a grace kill per cell, before), while a cell that still
/// runs is stopped as before.
#[test]
fn a_cell_that_has_sent_its_result_is_sent_no_termination() {
    let engine = ProcessEngine::new(config());
    for round in 0..30 {
        let mut running = start(&engine, cell(&format!("text('round {round}')")));
        assert_eq!(running.until_result(), None, "round {round}");
        // Closed as soon as its result is read, as the actor closes it.
        running.handles.terminate.terminate();
        let rest = running.finish();
        assert_eq!(rest.texts, Vec::<String>::new(), "round {round}: {rest:?}");
    }
    assert_eq!(terminations_read(&engine), 0);
    let mut waiter = start(&engine, cell(&waiting("never")));
    let _ = until_tool_call(&mut waiter);
    waiter.handles.terminate.terminate();
    let stopped = waiter.finish();
    assert!(stopped.result.is_none(), "{stopped:?}");
    assert_eq!(terminations_read(&engine), 1);
}

/// Since a cell whose result has come is sent no termination, a child must say that the cell
/// ended within the grace period of its result: one that never does (a forged result for a cell
/// that goes on) is ended, as one that does not stop a cell in time is, and its other cells say
/// why.
#[test]
fn a_child_that_never_says_a_cell_with_a_result_ended_is_ended() {
    use codemode_engine_process::Forgery;
    let engine = ProcessEngine::new(config().with_cells_per_process(4));
    // Cell 1, and cell 2 in the same process.
    let mut neighbour = start(&engine, tenant_cell("t", &waiting("neighbour")));
    let _ = until_tool_call(&mut neighbour);
    let mut forger = start(&engine, tenant_cell("t", &waiting("forger")));
    let _ = until_tool_call(&mut forger);
    engine
        .probe_sandbox(Probe::Forge(Forgery::ResultWithoutEnd(2)))
        .unwrap();
    assert_eq!(forger.until_result(), None);
    forger.handles.terminate.terminate();
    // The neighbour's tool call is never answered: it ends only if its process does.
    let neighbour = neighbour.finish();
    let error = error_of(&neighbour);
    assert!(
        error.contains("was ended because")
            && error.contains("did not say that cell 2 ended within"),
        "{error}"
    );
}

/// Sends `signal` (`STOP` or `CONT`) to every engine process of `engine`.
fn signal_processes(engine: &ProcessEngine, signal: &str) {
    for pid in engine.process_ids() {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// On a busy machine a child that stops a cell late is slow, not hostile: a child that gets no
/// CPU (stopped, as the scheduler may leave it) for five grace periods after a termination is
/// not ended, and its other cell goes on to its result.
#[test]
fn a_child_starved_of_cpu_is_not_ended_for_stopping_a_cell_late() {
    let engine = ProcessEngine::new(
        config()
            .with_spare_processes(0)
            .with_cells_per_process(4)
            .with_hard_stop_grace(Duration::from_millis(100)),
    );
    let mut neighbour = start(&engine, tenant_cell("t", &waiting("neighbour")));
    let (call, _) = until_tool_call(&mut neighbour);
    let mut stopped = start(&engine, tenant_cell("t", &waiting("stopped")));
    let _ = until_tool_call(&mut stopped);
    assert_eq!(engine.process_ids().len(), 1, "both cells in one process");
    signal_processes(&engine, "STOP");
    stopped.handles.terminate.terminate();
    std::thread::sleep(Duration::from_millis(500));
    signal_processes(&engine, "CONT");
    let stopped = stopped.finish();
    assert!(stopped.result.is_none(), "terminated: {stopped:?}");
    let neighbour = neighbour.answer_and_finish(call);
    assert_eq!(neighbour.texts, ["neighbour"], "{neighbour:?}");
    assert_eq!(
        neighbour.result.as_ref().map(|(_, error)| error),
        Some(&None),
        "{neighbour:?}"
    );
}

/// A parent that reads a cell's result late (its owner's queue is full) does not hold the
/// child's end of the cell against it: the child said it, the parent had not read it yet.
#[test]
fn a_result_read_late_by_the_parent_does_not_end_its_process() {
    let engine = ProcessEngine::new(
        config()
            .with_spare_processes(0)
            .with_cells_per_process(4)
            .with_hard_stop_grace(Duration::from_millis(100)),
    );
    let mut neighbour = start(&engine, tenant_cell("t", &waiting("neighbour")));
    let (call, _) = until_tool_call(&mut neighbour);
    // A queue of two, not read: `Started` and `Usage` fill it, and the result waits to be
    // handed over for five grace periods.
    let (sender, mut events) = event_channel(Some(2));
    let handles = engine
        .start(tenant_cell("t", r#"store("done", 1)"#), sender)
        .expect("the cell starts");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(events.blocking_recv(), Some(RuntimeEvent::Started));
    assert!(
        matches!(events.blocking_recv(), Some(RuntimeEvent::Usage { .. })),
        "the queue was full of what came before the result"
    );
    let late = Running { handles, events }.finish();
    assert_eq!(
        late.result.as_ref().map(|(stored, _)| stored.clone()),
        Some(HashMap::from([("done".to_owned(), json!(1))]))
    );
    assert_eq!(late.result.as_ref().map(|(_, error)| error), Some(&None));
    let neighbour = neighbour.answer_and_finish(call);
    assert_eq!(
        neighbour.result.as_ref().map(|(_, error)| error),
        Some(&None),
        "{neighbour:?}"
    );
}

/// V8 ends its process over an array longer than 134,217,725 elements, which a global match, a
/// split or JSON.parse of a string that long may ask for: the bootstrap builds those results
/// itself for such strings, and they must be what the language says.
#[test]
fn split_and_match_on_strings_longer_than_v8_s_longest_array_keep_their_meaning() {
    let engine = ProcessEngine::new(config());
    let mut long_strings = cell(
        r#"
        const long = "a".repeat(134217725) + ",b,,c";
        const pieces = long.split(",");
        text([pieces.length, pieces[0].length, pieces[1], pieces[2], pieces[3]].join("|"));
        text(long.split(",", 2).length + "|" + long.split(",", 0).length);
        text(long.split(/(,)/).length + "|" + long.split(/,/).slice(1).join("/"));
        text(long.match(/,./g).join("/") + "|" + long.match(/,./).index + "|" + long.match(/x/g));
        const flags = /,/g; flags.lastIndex = 7; long.match(flags); text(String(flags.lastIndex));
        try { JSON.parse(" ".repeat(134217725) + "1"); text("parsed"); }
        catch (error) { text(error.name + ": " + error.message); }
        "#,
    );
    long_strings.limits = long_strings
        .limits
        .with_heap_limit_bytes(1024 * 1024 * 1024);
    let ended = start(&engine, long_strings).finish();
    assert_eq!(
        ended.result.as_ref().map(|(_, error)| error),
        Some(&None),
        "{ended:?}"
    );
    assert_eq!(
        ended.texts[..5],
        [
            "4|134217725|b||c",
            "2|0",
            "7|b//c",
            ",b/,,|134217725|null",
            "0"
        ]
    );
    assert!(
        ended.texts[5].starts_with("RangeError: JSON.parse: a text of 134217726 characters"),
        "{:?}",
        ended.texts
    );
}

/// A deadline judges the thread that runs its cell, not the whole process: a child late to say
/// that a cell ended (here, never: a forged result) is not ended while another of its cells
/// computes, legitimately, for longer than the grace period on a thread of its own.
#[test]
fn a_late_cell_is_judged_by_its_own_thread_not_by_its_busy_neighbour() {
    use codemode_engine_process::Forgery;
    let engine = ProcessEngine::new(
        config()
            .with_spare_processes(0)
            .with_cells_per_process(4)
            .with_hard_stop_grace(Duration::from_millis(100)),
    );
    // Cell 1 computes for 1.5 s once its call is answered, past the 1 s of CPU time a child has
    // to say a cell ended (ten grace periods); cell 2 gets a forged result.
    let mut busy = start(
        &engine,
        tenant_cell(
            "t",
            r#"await tools.echo(1); const until = Date.now() + 1500; while (Date.now() < until) {} text("done");"#,
        ),
    );
    let (call, _) = until_tool_call(&mut busy);
    let mut forger = start(&engine, tenant_cell("t", &waiting("forger")));
    let _ = until_tool_call(&mut forger);
    engine
        .probe_sandbox(Probe::Forge(Forgery::ResultWithoutEnd(2)))
        .unwrap();
    assert_eq!(forger.until_result(), None);
    let busy = busy.answer_and_finish(call);
    assert_eq!(busy.texts, ["done"], "{busy:?}");
    assert_eq!(
        busy.result.as_ref().map(|(_, error)| error),
        Some(&None),
        "{busy:?}"
    );
    // The forger's process is still ended, once its wall-clock bound has passed.
    forger.handles.terminate.terminate();
    let _ = forger.finish();
}

/// A lane keeps its V8 isolate for the tenant's next cell when its cell ended on its own, with a
/// fresh context: nothing a cell left in its globals, its built-ins' prototypes or its own
/// globals' count reaches the next cell on that lane.
#[test]
fn each_cell_on_a_lane_starts_from_fresh_globals() {
    let engine = ProcessEngine::new(config());
    let probe = r#"
        text([typeof globalThis.mark, typeof [].mark, typeof JSON.mark, Object.getOwnPropertyNames(globalThis).length].join(","));
        text(String(__codemode_test_cells_before()));
        globalThis.mark = 1;
        Array.prototype.mark = 1;
        JSON.mark = 1;
        Object.freeze(Object.prototype);
    "#;
    let first = start(&engine, cell(probe)).finish();
    assert_eq!(first.result.as_ref().map(|(_, error)| error), Some(&None));
    let fresh = first.texts[0].clone();
    assert!(
        fresh.starts_with("undefined,undefined,undefined,"),
        "{first:?}"
    );
    // One after another, as a session runs them: each lane serves many.
    let mut most_before = 0;
    for round in 0..12 {
        let ended = start(&engine, cell(probe)).finish();
        assert_eq!(ended.texts[0], fresh, "round {round}");
        most_before = most_before.max(ended.texts[1].parse::<u32>().unwrap());
    }
    // The lanes did keep their isolates: some cell ran where others had.
    assert!(most_before > 0, "no isolate served a second cell");
}

/// Every cell's global scope is deserialised from the engine process's startup snapshot of a
/// bootstrapped one: on a fresh isolate and on
/// a kept one alike, each scope still has what V8 adds to it (the built-ins it ships behind
/// flags, native), none of what a cell must not have (V8 adds
/// `WebAssembly` back to every scope it makes), and random numbers of its own.
#[test]
fn each_global_scope_comes_from_the_startup_snapshot_on_node_s_v8() {
    let engine = ProcessEngine::new(config());
    let probe = r#"
        text(String(__codemode_test_scope_from_snapshot()));
        text(String(__codemode_test_cells_before()));
        text([typeof console, typeof SharedArrayBuffer, typeof Atomics, typeof WebAssembly].join());
        text([Promise.try, RegExp.escape, Error.isError, Math.f16round].map((f) => String(f).includes("[native code]")).join());
        text(RegExp.escape("a.b") + " " + await Promise.try(() => 5) + " " + typeof DisposableStack);
        text(String(Math.random()));
    "#;
    let mut randoms = std::collections::BTreeSet::new();
    let mut reused = false;
    for round in 0..12 {
        let ended = start(&engine, cell(probe)).finish();
        assert_eq!(
            ended.result.as_ref().map(|(_, error)| error),
            Some(&None),
            "round {round}: {ended:?}"
        );
        assert_eq!(ended.texts[0], "true", "round {round}");
        reused |= ended.texts[1] != "0";
        assert_eq!(
            ended.texts[2], "undefined,undefined,undefined,undefined",
            "round {round}"
        );
        assert_eq!(ended.texts[3], "true,true,true,true", "round {round}");
        assert_eq!(ended.texts[4], "\\x61\\.b 5 function", "round {round}");
        randoms.insert(ended.texts[5].clone());
    }
    assert!(reused, "no isolate served a second cell");
    assert_eq!(
        randoms.len(),
        12,
        "cells drew the same random numbers: {randoms:?}"
    );
}

/// A cell that calls `exit()` leaves a promise job of its own queued; on a lane that keeps its
/// isolate for the next cell, that job can never reach the next cell's output (nor its tools or
/// stored values): code of an ended cell is refused the host.
#[test]
fn code_left_queued_by_an_exited_cell_never_reaches_the_next_one() {
    let engine = ProcessEngine::new(config());
    let mut reused = false;
    for round in 0..8 {
        let exited = start(
            &engine,
            cell("Promise.resolve().then(() => { text('late'); store('late', 1); }); text('a'); exit();"),
        )
        .finish();
        assert_eq!(exited.texts, ["a"], "round {round}");
        let next = start(
            &engine,
            cell("await new Promise((resolve) => setTimeout(resolve, 5)); text('b'); text(String(__codemode_test_cells_before()));"),
        )
        .finish();
        assert_eq!(next.texts[0], "b", "round {round}: {next:?}");
        assert_eq!(next.texts.len(), 2, "round {round}: {next:?}");
        let (writes, error) = next.result.expect("completed");
        assert!(writes.is_empty(), "round {round}: {writes:?}");
        assert_eq!(error, None, "round {round}");
        reused |= next.texts[1] != "0";
    }
    assert!(reused, "no cell ran in the isolate of an exited one");
}
