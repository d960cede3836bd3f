//! The engine process's sandbox, in two steps. The child is treated as hostile native code once
//! it has run a cell (V8 has public exploits), so each step assumes the one before may fail.
//!
//! **First thing, before any thread exists** ([`enter_early`]), so that every thread inherits it:
//! a session of its own (`setsid`: no controlling terminal to type into), not dumpable (no other
//! process of the same user reads its memory through `/proc`), no capabilities (as root, it can
//! no longer read a non-dumpable process's `/proc` files, override file permissions, signal or
//! renice others), and, where the kernel has Landlock, a file system that holds only what the
//! engine reads: its libraries, `/dev/urandom`, its own `/proc/self`, the CPU list and the time
//! zone data. Everything else (the server's `/proc` files, the token file, every store, the
//! terminal) does not exist for it; it may signal no process outside its own sandbox, and reach
//! no TCP port or abstract socket.
//!
//! **Once the engine is up and warm, before any cell runs** ([`enter`]): resource limits, then
//! (Linux) a seccomp filter on every thread.
//!
//! The filter is an allow-list of what V8, its platform threads, the runtime threads and the
//! channel use (memory, threads, futexes, clocks, signals, reading files already open or opened
//! read-only, the channel's socket). Everything else fails with `EPERM`: opening a file for
//! writing or creating one, sockets (`socket`, `connect`, `bind`…), starting programs (`execve`,
//! `fork`, `clone` without thread flags), `ptrace`, and the rest. The list is the calls of glibc,
//! V8 and the Rust standard library for these jobs; it is checked by running every test and the
//! adversarial corpus with the filter on (a missing call would fail their cells).
//!
//! Limits: no core dumps (a crash must not write the cell's memory to disk), and a ceiling on
//! the data the process may map (`RLIMIT_DATA`, which counts private writable mappings, not V8's
//! reserved address space), so host-side allocations of hostile cells are bounded; reaching it is
//! a crash of one engine process.

use crate::wire::ChildSettings;

/// A sandbox step that could not be taken. The engine process then ends before it runs any
/// cell, and its parent reports that it failed to start, with this text.
#[derive(Debug, thiserror::Error)]
#[error("cannot {step}: {cause}")]
pub(crate) struct ConfinementError {
    /// What was being done.
    step: Step,
    /// What the system answered, in its words.
    cause: String,
}

/// The steps of the sandbox that must not fail (Landlock and the network namespace are best
/// effort and say how far they went instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    LeaveTerminalSession,
    MakeNonDumpable,
    SetNoNewPrivileges,
    DropCapabilities,
    TurnOffCoreDumps,
    SetMemoryCeiling(u64),
    SetThreadCeiling(u64),
    BuildSeccompFilter,
    ApplySeccompFilter,
}

impl std::fmt::Display for Step {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::LeaveTerminalSession => formatter.write_str("leave the terminal's session"),
            Step::MakeNonDumpable => formatter.write_str("make the process non-dumpable"),
            Step::SetNoNewPrivileges => formatter.write_str("set no-new-privileges"),
            Step::DropCapabilities => formatter.write_str("drop the process's capabilities"),
            Step::TurnOffCoreDumps => formatter.write_str("turn off core dumps"),
            Step::SetMemoryCeiling(bytes) => {
                write!(formatter, "set the memory ceiling of {bytes} bytes")
            }
            Step::SetThreadCeiling(threads) => {
                write!(
                    formatter,
                    "set the ceiling of {threads} threads for the engine user"
                )
            }
            Step::BuildSeccompFilter => formatter.write_str("build the seccomp filter"),
            Step::ApplySeccompFilter => formatter.write_str("apply the seccomp filter"),
        }
    }
}

impl Step {
    /// The error of this step failing with `cause`.
    pub(crate) fn failed(self, cause: impl std::fmt::Display) -> ConfinementError {
        ConfinementError {
            step: self,
            cause: cause.to_string(),
        }
    }
}

/// What [`enter_early`] put in force, for the log.
#[derive(Debug)]
pub(crate) struct EarlyConfinement {
    /// Landlock's status on this kernel (fully, partly or not enforced).
    pub(crate) landlock: String,
    /// Whether the process has a network namespace of its own.
    pub(crate) network: String,
    /// Whether the process has a file system of its own (a private root holding only what it
    /// reads).
    pub(crate) root: String,
    /// Whether it made a user namespace of its own to make the others (as a user without the
    /// capability to make them, such as the engine user).
    pub(crate) user: String,
}

/// A user namespace of its own, for a process that lacks the capability to make namespaces (one
/// started as `--engine-user`, or by a server not run as root): in it, the process may make the
/// network and mount namespaces below, and every capability it has there is dropped with the
/// others before any cell runs. Where the kernel allows no unprivileged user namespaces, the
/// process goes on without (and SECURITY.md says what that leaves).
#[cfg(target_os = "linux")]
fn own_user_namespace() -> String {
    use caps::{CapSet, Capability};
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SYS_ADMIN).unwrap_or(false) {
        return "not needed".to_owned();
    }
    if let Err(error) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        return format!("none ({error})");
    }
    // Its own ids map to themselves (a file it makes in its new root needs a mapped owner); no
    // other id is mapped, and it may not change its groups.
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let mapped = std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .and_then(|()| std::fs::write("/proc/self/setgroups", "deny"))
        .and_then(|()| std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")));
    match mapped {
        Ok(()) => "own".to_owned(),
        Err(error) => format!("own, ids not mapped ({error})"),
    }
}

/// The first step of the sandbox; must run before the process starts any thread. Fails only when
/// something that every supported kernel has cannot be done; Landlock is best effort (older
/// kernels lack it) and says how far it went.
#[cfg(target_os = "linux")]
pub(crate) fn enter_early(
    library_path: Option<&std::ffi::OsStr>,
) -> Result<EarlyConfinement, ConfinementError> {
    // A new session: no controlling terminal, so `/dev/tty` names nothing.
    if let Err(error) = nix::unistd::setsid()
        && error != nix::errno::Errno::EPERM
    {
        return Err(Step::LeaveTerminalSession.failed(error));
    }
    // Before it is made non-dumpable: its id maps are files of its own /proc, which a
    // non-dumpable process of another user than root may not write.
    let user = own_user_namespace();
    nix::sys::prctl::set_dumpable(false).map_err(|error| Step::MakeNonDumpable.failed(error))?;
    let network = private_network();
    let (libraries, data) = visible_paths(library_path);
    let root = private_root(&libraries, &data);
    let landlock = landlock_file_system(&libraries, &data);
    drop_capabilities()?;
    Ok(EarlyConfinement {
        landlock,
        network,
        root,
        user,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn enter_early(
    _library_path: Option<&std::ffi::OsStr>,
) -> Result<EarlyConfinement, ConfinementError> {
    Ok(EarlyConfinement {
        landlock: "not on this system".to_owned(),
        network: "shared".to_owned(),
        root: "shared".to_owned(),
        user: "shared".to_owned(),
    })
}

/// The first step's remainder in a program that a launcher executed after taking it
/// ([`enter_early`] then `execve`, see `node_host`). Namespaces, the private root, Landlock, the
/// session and no-new-privileges survive `execve`, and a process without capabilities in its
/// bounding set gains none by it; being non-dumpable does not survive, and is set again here.
/// What must have survived is checked, so that a program started without its launcher refuses
/// to serve.
#[cfg(target_os = "linux")]
pub(crate) fn after_exec() -> Result<(), ConfinementError> {
    use caps::CapSet;
    nix::sys::prctl::set_dumpable(false).map_err(|error| Step::MakeNonDumpable.failed(error))?;
    match nix::sys::prctl::get_no_new_privs() {
        Ok(true) => {}
        Ok(false) => {
            return Err(Step::SetNoNewPrivileges
                .failed("the launcher did not set it before executing this program"));
        }
        Err(error) => return Err(Step::SetNoNewPrivileges.failed(error)),
    }
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Ambient] {
        let held = caps::read(None, set)
            .map_err(|error| Step::DropCapabilities.failed(format!("{set:?}: {error}")))?;
        if !held.is_empty() {
            return Err(Step::DropCapabilities.failed(format!(
                "{set:?} still holds {held:?} after the launcher executed this program"
            )));
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn after_exec() -> Result<(), ConfinementError> {
    Ok(())
}

/// The data this process maps now (`VmData`, what `RLIMIT_DATA` counts), in bytes; 0 if unknown.
/// Inside Node this is mostly reservations made before any cell: Node's own isolate and each
/// warm isolate reserve their code range writable, which `RLIMIT_DATA` counts though it is not
/// memory in use. The ceiling of an engine process in Node is counted from there.
pub(crate) fn mapped_data_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmData:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        })
        .unwrap_or(0)
}

/// A network namespace of its own, with nothing in it: an engine process needs no network (its
/// channel is a socket pair made before), and the host's sockets (the server's listener, its
/// clients, every other process's) are no longer listed in its `/proc/self/net`. Needs the
/// capability to make one (a server run as root has it); elsewhere the namespace stays the
/// host's, and SECURITY.md says what that reveals.
#[cfg(target_os = "linux")]
fn private_network() -> String {
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
        Ok(()) => "private".to_owned(),
        Err(error) => format!("shared with the host ({error})"),
    }
}

/// Drops every capability, from every set and the bounding set (a process of root keeps its user
/// id, but no power beyond it), and sets no-new-privileges.
#[cfg(target_os = "linux")]
fn drop_capabilities() -> Result<(), ConfinementError> {
    use caps::CapSet;
    nix::sys::prctl::set_no_new_privs().map_err(|error| Step::SetNoNewPrivileges.failed(error))?;
    for capability in caps::all() {
        // Dropping from the bounding set needs CAP_SETPCAP, which an unprivileged process lacks
        // (and then has nothing to drop).
        let _ = caps::drop(None, CapSet::Bounding, capability);
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set)
            .map_err(|error| Step::DropCapabilities.failed(format!("{set:?}: {error}")))?;
    }
    Ok(())
}

/// What an engine process reads: its libraries and program (read and executed), and its data
/// (read). Paths this system lacks are in the lists too; each user skips them.
#[cfg(target_os = "linux")]
fn visible_paths(
    library_path: Option<&std::ffi::OsStr>,
) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
    let mut libraries: Vec<std::path::PathBuf> = ["/lib", "/lib64", "/usr/lib", "/usr/lib64"]
        .map(Into::into)
        .to_vec();
    if let Some(path) = library_path {
        libraries.extend(std::env::split_paths(path));
    }
    if let Ok(program) = std::env::current_exe()
        && let Some(folder) = program.parent()
    {
        libraries.push(folder.to_path_buf());
    }
    let data = [
        "/dev/urandom",
        "/dev/random",
        "/dev/null",
        // Its own process only: /proc/self is resolved when Landlock's rule is made, to this
        // process's folder.
        "/proc/self",
        "/sys/devices/system/cpu",
        "/etc/localtime",
        "/usr/share/zoneinfo",
        "/usr/share/zoneinfo-icu",
        "/usr/share/icu",
    ]
    .map(Into::into)
    .to_vec();
    (libraries, data)
}

/// A file system of its own: a new mount namespace whose root is an empty, read-only `tmpfs`
/// holding only what the engine reads (`libraries` and `data`, each bound read-only at its own
/// path, and `/proc`), so that nothing else of the host (other tenants' store files, the token
/// file, the server's folders) exists for it, not even to `stat()`. Needs the capability to make
/// a mount namespace (a server run as root has it); elsewhere the root stays the host's, which
/// Landlock still narrows for everything but metadata. Best effort: returns how far it went.
#[cfg(target_os = "linux")]
fn private_root(libraries: &[std::path::PathBuf], data: &[std::path::PathBuf]) -> String {
    match enter_private_root(libraries, data) {
        Ok(()) => "private".to_owned(),
        Err(error) => format!("shared with the host ({error})"),
    }
}

#[cfg(target_os = "linux")]
fn enter_private_root(
    libraries: &[std::path::PathBuf],
    data: &[std::path::PathBuf],
) -> Result<(), String> {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::path::{Path, PathBuf};

    use nix::fcntl::{OFlag, open};
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    use nix::sys::stat::Mode;

    let step = |what: &'static str| move |error: nix::Error| format!("{what}: {error}");
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(step("unshare"))?;
    // Nothing done here reaches the host's mounts.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(step("make the mounts private"))?;
    // What is bound: each path as it really is (links followed), each once, and none that lies
    // inside another (it is seen through that one); a path that is a link, or passes through one
    // (/lib to usr/lib, /etc/localtime, a library folder that links elsewhere), is made again as
    // a link to where it leads, so that it resolves in the new root as it did before.
    let wanted: Vec<&Path> = libraries
        .iter()
        .chain(data.iter().filter(|path| !path.starts_with("/proc")))
        .map(PathBuf::as_path)
        .collect();
    let mut real: Vec<PathBuf> = wanted
        .iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .chain([PathBuf::from("/proc")])
        .collect();
    real.sort();
    real.dedup();
    let mut bound: Vec<PathBuf> = Vec::new();
    for path in real {
        if !bound.iter().any(|outer| path.starts_with(outer)) {
            bound.push(path);
        }
    }
    let links: Vec<(PathBuf, PathBuf)> = wanted
        .iter()
        .filter_map(|path| {
            let real = std::fs::canonicalize(path).ok()?;
            (real != *path).then(|| (path.to_path_buf(), real))
        })
        .collect();
    // Each is opened before the new root is mounted over /tmp, which may hold some of them, and
    // in the new namespace: a bind's source must be a mount of the caller's namespace.
    let mut sources: Vec<(PathBuf, OwnedFd)> = Vec::new();
    for path in bound {
        if let Ok(fd) = open(&path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            sources.push((path, fd));
        }
    }
    let new_root = Path::new("/tmp");
    mount(
        Some("tmpfs"),
        new_root,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=1m,mode=0755"),
    )
    .map_err(step("mount the new root"))?;
    for (path, fd) in &sources {
        let Ok(relative) = path.strip_prefix("/") else {
            continue;
        };
        let target = new_root.join(relative);
        let is_folder = nix::sys::stat::fstat(fd)
            .map(|stat| stat.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .unwrap_or(false);
        let made = if is_folder {
            std::fs::create_dir_all(&target)
        } else {
            target
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::File::create(&target).map(drop))
        };
        if let Err(error) = made {
            return Err(format!("make {}: {error}", target.display()));
        }
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(
            Some(source.as_str()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|error| format!("bind {}: {error}", path.display()))?;
        // Read-only, keeping what the source's mount already forbids.
        let kept = nix::sys::statvfs::statvfs(&target)
            .map(|stat| {
                let flags = stat.flags();
                let mut kept = MsFlags::empty();
                // A user namespace may not clear these on a mount of its parent's (they are
                // locked), so all are kept.
                for (held, flag) in [
                    (nix::sys::statvfs::FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
                    (nix::sys::statvfs::FsFlags::ST_NODEV, MsFlags::MS_NODEV),
                    (nix::sys::statvfs::FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
                    (nix::sys::statvfs::FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
                    (
                        nix::sys::statvfs::FsFlags::ST_NODIRATIME,
                        MsFlags::MS_NODIRATIME,
                    ),
                    (
                        nix::sys::statvfs::FsFlags::ST_RELATIME,
                        MsFlags::MS_RELATIME,
                    ),
                ] {
                    if flags.contains(held) {
                        kept |= flag;
                    }
                }
                kept
            })
            .unwrap_or(MsFlags::empty());
        mount(
            None::<&str>,
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | kept,
            None::<&str>,
        )
        .map_err(|error| format!("make {} read-only: {error}", path.display()))?;
    }
    for (path, real) in &links {
        let Ok(relative) = path.strip_prefix("/") else {
            continue;
        };
        let location = new_root.join(relative);
        // Inside a bound folder it is there already, as the link it is.
        if location.symlink_metadata().is_ok()
            || sources.iter().any(|(outer, _)| path.starts_with(outer))
        {
            continue;
        }
        let made = location
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::os::unix::fs::symlink(real, &location));
        if let Err(error) = made {
            return Err(format!("link {}: {error}", path.display()));
        }
    }
    drop(sources);
    let old_root = new_root.join(".old-root");
    std::fs::create_dir(&old_root)
        .map_err(|error| format!("make the old root's folder: {error}"))?;
    nix::unistd::pivot_root(new_root, &old_root).map_err(step("pivot_root"))?;
    nix::unistd::chdir("/").map_err(step("chdir"))?;
    umount2("/.old-root", MntFlags::MNT_DETACH).map_err(step("detach the old root"))?;
    let _ = std::fs::remove_dir("/.old-root");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(step("make the new root read-only"))?;
    Ok(())
}

/// The Landlock ruleset: read-only access to what the engine reads (`libraries` may also be
/// executed), nothing else of the file system, no TCP, no signals or abstract sockets outside the
/// sandbox. Best effort: returns how far the kernel enforced it.
#[cfg(target_os = "linux")]
fn landlock_file_system(libraries: &[std::path::PathBuf], data: &[std::path::PathBuf]) -> String {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
        path_beneath_rules,
    };
    let abi = ABI::V6;
    let read_files = AccessFs::ReadFile | AccessFs::ReadDir;
    let read_libraries = read_files | AccessFs::Execute;
    let ruleset = (|| -> Result<_, landlock::RulesetError> {
        Ruleset::default()
            .handle_access(AccessFs::from_all(abi))?
            .handle_access(AccessNet::from_all(abi))?
            .scope(Scope::Signal | Scope::AbstractUnixSocket)?
            .create()?
            // Paths this system lacks are skipped by the helper.
            .add_rules(path_beneath_rules(libraries, read_libraries))?
            .add_rules(path_beneath_rules(data, read_files))?
            .restrict_self()
    })();
    match ruleset {
        Ok(status) => format!("{:?}", status.ruleset),
        Err(error) => format!("not enforced ({error})"),
    }
}

/// Enters the second step of the sandbox, as `settings` ask. `host_mapped` is data the program
/// hosting the engine maps for itself before serving, which the memory ceiling is counted from
/// (see [`mapped_data_bytes`]); 0 where the ceiling is absolute.
pub(crate) fn enter(settings: &ChildSettings, host_mapped: u64) -> Result<(), ConfinementError> {
    limits(settings, host_mapped)?;
    if settings.seccomp {
        seccomp()?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn limits(settings: &ChildSettings, host_mapped: u64) -> Result<(), ConfinementError> {
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(|error| Step::TurnOffCoreDumps.failed(error))?;
    if let Some(ceiling) = settings.memory_ceiling_bytes {
        let ceiling = ceiling.saturating_add(host_mapped);
        setrlimit(Resource::RLIMIT_DATA, ceiling, ceiling)
            .map_err(|error| Step::SetMemoryCeiling(ceiling).failed(error))?;
    }
    if let Some(ceiling) = settings.user_threads_ceiling {
        setrlimit(Resource::RLIMIT_NPROC, ceiling, ceiling)
            .map_err(|error| Step::SetThreadCeiling(ceiling).failed(error))?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn limits(_settings: &ChildSettings, _host_mapped: u64) -> Result<(), ConfinementError> {
    Ok(())
}

#[cfg(target_os = "linux")]
fn seccomp() -> Result<(), ConfinementError> {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };

    let arch = std::env::consts::ARCH.try_into().map_err(|_| {
        Step::BuildSeccompFilter.failed(format!("no filter for {}", std::env::consts::ARCH))
    })?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALLOWED.iter().map(|&call| (call, Vec::new())).collect();
    // Opening files read-only (the time zone, /proc/self for V8's stack and memory maps): none
    // of the write, create or truncate flags.
    let write_flags =
        (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND) as u64;
    let build = |error: seccompiler::BackendError| Step::BuildSeccompFilter.failed(error);
    let read_only = |flags_argument: u8| -> Result<Vec<SeccompRule>, ConfinementError> {
        let condition = SeccompCondition::new(
            flags_argument,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(write_flags),
            0,
        )
        .map_err(build)?;
        Ok(vec![SeccompRule::new(vec![condition]).map_err(build)?])
    };
    rules.insert(libc::SYS_openat, read_only(2)?);
    rules.insert(libc::SYS_open, read_only(1)?);
    // Threads, never processes: clone only with CLONE_THREAD.
    let thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        libc::CLONE_THREAD as u64,
    )
    .map_err(build)?;
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![thread]).map_err(build)?],
    );
    // Calls that name a process: only this one (0 means the caller for those that take it).
    let me = u64::from(std::process::id());
    // Process ids, `which` and `who`, and ioctl requests are 32-bit arguments.
    let argument_is = |index: u8, value: u64| {
        SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
            .map_err(build)
    };
    let rule = |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(build);
    // Memory the data limit counts: no shared mapping and no grows-down one, which RLIMIT_DATA
    // does not count (V8, QuickJS and the C library map private memory only). MAP_SHARED's bit
    // is set in MAP_SHARED_VALIDATE too, and clear in MAP_PRIVATE.
    let uncounted = (libc::MAP_SHARED | libc::MAP_GROWSDOWN) as u64;
    rules.insert(
        libc::SYS_mmap,
        vec![rule(vec![
            SeccompCondition::new(
                3,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(uncounted),
                0,
            )
            .map_err(build)?,
        ])?],
    );
    rules.insert(libc::SYS_kill, vec![rule(vec![argument_is(0, me)?])?]);
    rules.insert(libc::SYS_tgkill, vec![rule(vec![argument_is(0, me)?])?]);
    for call in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
    ] {
        rules.insert(
            call,
            vec![
                rule(vec![argument_is(0, 0)?])?,
                rule(vec![argument_is(0, me)?])?,
            ],
        );
    }
    rules.insert(
        libc::SYS_setpriority,
        vec![rule(vec![
            argument_is(0, libc::PRIO_PROCESS as u64)?,
            argument_is(1, 0)?,
        ])?],
    );
    rules.insert(
        libc::SYS_ioctl,
        [
            libc::TCGETS,
            libc::FIONREAD,
            libc::FIONBIO,
            libc::FIOCLEX,
            libc::FIONCLEX,
        ]
        .into_iter()
        // The request type is `u64` on glibc and `c_int` elsewhere.
        .map(|request| {
            #[allow(clippy::unnecessary_cast)]
            let request = request as u64;
            rule(vec![argument_is(1, request)?])
        })
        .collect::<Result<_, _>>()?,
    );
    let compile = |filter: Result<SeccompFilter, seccompiler::BackendError>| {
        let program: BpfProgram = filter.and_then(TryInto::try_into).map_err(build)?;
        Ok::<_, ConfinementError>(program)
    };
    // Allowed here; the filter below answers it first.
    rules.insert(libc::SYS_clone3, Vec::new());
    let allow_list = compile(SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    ))?;
    // clone3 passes its flags in memory, where a filter cannot read them: it fails as if the
    // kernel lacked it, and the C library falls back to clone. Its ERRNO wins over the
    // allow-list's ALLOW (the kernel takes the most restrictive answer of all filters); it is
    // installed first, as the allow-list refuses `seccomp` itself.
    let no_clone3 = compile(SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    ))?;
    for program in [no_clone3, allow_list] {
        seccompiler::apply_filter_all_threads(&program)
            .map_err(|error| Step::ApplySeccompFilter.failed(error))?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn seccomp() -> Result<(), ConfinementError> {
    Err(Step::ApplySeccompFilter.failed(
        "the seccomp sandbox exists only on Linux; turn it off to run engine processes here",
    ))
}

/// System calls allowed without conditions.
#[cfg(target_os = "linux")]
const ALLOWED: &[i64] = &[
    // Memory.
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_mlock,
    libc::SYS_munlock,
    libc::SYS_membarrier,
    // Threads and waiting.
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_getparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_getpriority,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_prctl,
    libc::SYS_arch_prctl,
    libc::SYS_set_tid_address,
    libc::SYS_exit,
    libc::SYS_exit_group,
    // Signals (V8's profiler and the runtime's own stops; signals to itself are allowed below).
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    // Clocks and resources.
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_getrusage,
    libc::SYS_getrlimit,
    libc::SYS_sysinfo,
    libc::SYS_uname,
    libc::SYS_getrandom,
    // Descriptors already open (the channel, the pipes) and files opened read-only.
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_fcntl,
    libc::SYS_readlink,
    libc::SYS_readlinkat,
    libc::SYS_access,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_getcwd,
    libc::SYS_getdents64,
    libc::SYS_dup,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_eventfd2,
    libc::SYS_pipe2,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_shutdown,
];
