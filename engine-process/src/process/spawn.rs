//! Spawning one engine process: the OS process with its channel, the capture of what it prints,
//! its control group, and the handshake (its settings, its first lanes, its `Ready`) that must
//! all succeed before it hosts a cell. What comes out is [`Spawned`], the raw parts the pool
//! makes an [`EngineProcess`](super::engine_process::EngineProcess) of.

use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use codemode_engine::EngineError;

use super::checks::describe_exit;
use super::outbox::{OutFrame, write_out};
use super::state::IdleLanes;
use crate::cgroup::{Bounds, Cgroups, ProcessCgroup};
use crate::config::ProcessEngineConfig;
use crate::lane::Lane;
use crate::wire::{self, ChildSettings, ToChild, ToParent, WIRE_VERSION};

/// How long a new process may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How many engine processes' worth of threads the engine user may have together
/// (`RLIMIT_NPROC` counts every thread of a user): where no control group bounds each process,
/// this bounds them all, far below what exhausts the machine.
const USER_THREADS_PROCESSES: u64 = 64;

/// A process that said it is ready, and what the parent holds of it.
#[derive(Debug)]
pub(super) struct Spawned {
    pub(super) pid: u32,
    pub(super) child: Child,
    /// The parent's end of the process channel, to read from and to write to.
    pub(super) reader: UnixStream,
    pub(super) writer: UnixStream,
    pub(super) cgroup: Option<ProcessCgroup>,
    /// The threads reading what the process prints.
    pub(super) output_readers: Vec<std::thread::JoinHandle<()>>,
    pub(super) fatal_line: crate::log::FatalLine,
    /// Its first lanes, each with a runtime warming in the child.
    pub(super) lanes: IdleLanes,
    /// The engine it runs, as it describes itself.
    pub(super) engine: String,
}

/// Starts one engine process as `config` says, in a control group of its own (named with
/// `cgroup_prefix`) where `cgroups` can make one, and waits until it is ready.
pub(super) fn spawn(
    config: &ProcessEngineConfig,
    cgroups: &Cgroups,
    cgroup_prefix: &str,
) -> Result<Spawned, EngineError> {
    let program = config.program.display().to_string();
    let (mut child, parent_end) = start_child(config, &program)?;
    let pid = child.id();
    let (output_readers, fatal_line) = capture_output(&mut child, pid);
    let mut reader = match parent_end.try_clone() {
        Ok(reader) => reader,
        Err(error) => return Err(failed(&mut child, &program, error.to_string())),
    };
    let mut writer = parent_end;
    // Its control group, before it takes its settings: it runs no cell outside it.
    let cgroup = control_group(config, cgroups, cgroup_prefix, pid);
    let handshake = send_settings(config, &mut writer)
        .and_then(|()| send_first_lanes(config, &mut writer))
        .and_then(|lanes| await_ready(&mut reader).map(|engine| (lanes, engine)));
    let (lanes, engine) = match handshake {
        Ok(done) => done,
        Err(Refused::EndedEarly) => return Err(ended_early(&mut child, &program)),
        Err(Refused::Failed(why)) => return Err(failed(&mut child, &program, why)),
    };
    let _ = reader.set_read_timeout(None);
    // A child that stops reading makes a write wait past this, and is ended.
    let _ = writer.set_write_timeout(Some(config.stall_deadline));
    Ok(Spawned {
        pid,
        child,
        reader,
        writer,
        cgroup,
        output_readers,
        fatal_line,
        lanes,
        engine,
    })
}

/// Why a handshake step failed.
enum Refused {
    /// The process ended (its channel broke or closed) before it was ready.
    EndedEarly,
    /// It said or did something else than it should: why.
    Failed(String),
}

/// The child process, with its end of the channel as its standard input.
fn start_child(
    config: &ProcessEngineConfig,
    program: &str,
) -> Result<(Child, UnixStream), EngineError> {
    let (parent_end, child_end) = UnixStream::pair().map_err(|error| {
        EngineError::Unavailable(format!(
            "cannot make a channel for an engine process: {error}"
        ))
    })?;
    let mut command = Command::new(&config.program);
    if let Some((uid, gid)) = config.user {
        use std::os::unix::process::CommandExt;
        // As root, the standard library also drops the supplementary groups.
        command.uid(uid).gid(gid);
    }
    let child = command
        .args(&config.args)
        .env_clear()
        .envs(config.env.iter().map(|(name, value)| (name, value)))
        .current_dir("/")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(child_end)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| {
            EngineError::Unavailable(format!(
                "cannot start the engine process `{program}`: {error}"
            ))
        })?;
    // The command holds the parent's copy of the child's end of the channel: drop it now, or a
    // child that ends would never be seen to end.
    drop(command);
    Ok((child, parent_end))
}

/// Threads that log what the process prints, and the last fatal-error line they saw.
fn capture_output(
    child: &mut Child,
    pid: u32,
) -> (Vec<std::thread::JoinHandle<()>>, crate::log::FatalLine) {
    let fatal_line = crate::log::FatalLine::default();
    let mut readers = Vec::new();
    let pipes = [
        (
            "stdout",
            child
                .stdout
                .take()
                .map(|pipe| Box::new(pipe) as Box<dyn std::io::Read + Send>),
        ),
        (
            "stderr",
            child
                .stderr
                .take()
                .map(|pipe| Box::new(pipe) as Box<dyn std::io::Read + Send>),
        ),
    ];
    for (stream, pipe) in pipes {
        if let Some(pipe) = pipe {
            readers.extend(crate::log::capture(pid, stream, pipe, fatal_line.clone()));
        }
    }
    (readers, fatal_line)
}

/// The process's own control group, bounding its threads and memory, if one can be made and it
/// can be moved there.
fn control_group(
    config: &ProcessEngineConfig,
    cgroups: &Cgroups,
    cgroup_prefix: &str,
    pid: u32,
) -> Option<ProcessCgroup> {
    cgroups
        .create(
            &format!("{cgroup_prefix}-{pid}"),
            Bounds {
                threads: config.threads_per_process,
                memory_bytes: config.memory_ceiling(),
            },
        )
        .filter(|cgroup| match cgroup.admit(pid) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(pid, %error, "cannot move an engine process into its control group");
                false
            }
        })
}

/// Whether a channel error means the child is gone.
fn broken(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

/// Sends the child its settings: what it may do, and how it applies its own walls.
fn send_settings(config: &ProcessEngineConfig, writer: &mut UnixStream) -> Result<(), Refused> {
    let settings = ChildSettings {
        wire_version: WIRE_VERSION,
        warm_heap_limit_bytes: config.warm_heap_limit_bytes,
        warm_runtimes: config.warm_runtimes,
        memory_ceiling_bytes: Some(config.memory_ceiling()),
        user_threads_ceiling: config.user.map(|_| {
            config
                .threads_per_process
                .saturating_mul(USER_THREADS_PROCESSES)
        }),
        seccomp: config.seccomp,
        hard_stop_grace_ms: u64::try_from(config.hard_stop_grace.as_millis()).unwrap_or(u64::MAX),
        test_hooks: config.test_hooks,
    };
    wire::write(writer, &ToChild::Settings(settings)).map_err(|error| {
        if broken(&error) {
            Refused::EndedEarly
        } else {
            Refused::Failed(format!("it did not take its settings ({error})"))
        }
    })
}

/// Sends the child its first lanes, whose runtimes it warms before it says it is ready.
fn send_first_lanes(
    config: &ProcessEngineConfig,
    writer: &mut UnixStream,
) -> Result<IdleLanes, Refused> {
    let mut lanes = IdleLanes::default();
    for _ in 0..config.warm_runtimes {
        lanes.made += 1;
        let sent = UnixStream::pair().and_then(|(ours, theirs)| {
            ours.set_nonblocking(true)?;
            let frame = wire::encode(&ToChild::Lane { lane: lanes.made })?;
            write_out(
                writer,
                OutFrame {
                    bytes: frame,
                    socket: Some(theirs.into()),
                },
            )?;
            Ok(ours)
        });
        match sent {
            Ok(socket) => lanes.idle.push(Lane {
                number: lanes.made,
                socket,
            }),
            Err(error) if broken(&error) => return Err(Refused::EndedEarly),
            Err(error) => {
                return Err(Refused::Failed(format!(
                    "it did not take its lanes ({error})"
                )));
            }
        }
    }
    Ok(lanes)
}

/// Waits for the child's `Ready` (its engine's description), in this build's protocol version.
fn await_ready(reader: &mut UnixStream) -> Result<String, Refused> {
    let _ = reader.set_read_timeout(Some(READY_TIMEOUT));
    match wire::read_bounded::<ToParent>(reader, wire::MAX_CHILD_FRAME_BYTES)
        .map(|frame| frame.map(|(message, _)| message))
    {
        Ok(Some(ToParent::Ready {
            engine,
            wire_version,
        })) if wire_version == WIRE_VERSION => Ok(engine),
        Ok(Some(ToParent::Ready { wire_version, .. })) => Err(Refused::Failed(format!(
            "it speaks version {wire_version} of the engine-process protocol and this program \
             version {WIRE_VERSION}; run engine processes from the same build"
        ))),
        Ok(Some(ToParent::Failed { error })) => Err(Refused::Failed(error)),
        Ok(Some(other)) => Err(Refused::Failed(format!(
            "it said {other:?} before it was ready"
        ))),
        Ok(None) => Err(Refused::EndedEarly),
        Err(error) if broken(&error) => Err(Refused::EndedEarly),
        Err(error) => Err(Refused::Failed(format!("no answer ({error})"))),
    }
}

/// Ends a child that failed its start, saying why.
fn failed(child: &mut Child, program: &str, why: String) -> EngineError {
    let _ = child.kill();
    let _ = child.wait();
    EngineError::Unavailable(format!(
        "the engine process `{program}` could not start: {why}"
    ))
}

/// Reaps a child that ended before it was ready, saying how it ended.
fn ended_early(child: &mut Child, program: &str) -> EngineError {
    let status = child.wait().map(describe_exit).unwrap_or_default();
    EngineError::Unavailable(format!(
        "the engine process `{program}` ended before it was ready ({status}); is it a codemode \
         binary that has the engine-host mode?"
    ))
}

/// Raises this process's soft limit of open descriptors to its hard limit: every live cell in an
/// engine process holds a lane's socket here, so a server with a thousand parked cells needs more
/// than the usual soft limit of 1,024 (as Go's runtime does for every program).
pub(super) fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(%error, soft, "cannot raise the limit of open descriptors");
    }
}
