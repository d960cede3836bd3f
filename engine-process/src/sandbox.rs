//! The engine process's sandbox, entered once the engine is up and before any cell runs: resource
//! limits, then (Linux) a seccomp filter on every thread.
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

/// Enters the sandbox `settings` ask for.
pub(crate) fn enter(settings: &ChildSettings) -> Result<(), String> {
    limits(settings)?;
    if settings.seccomp {
        seccomp()?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn limits(settings: &ChildSettings) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(Resource::RLIMIT_CORE, 0, 0)
        .map_err(|error| format!("cannot turn off core dumps: {error}"))?;
    if let Some(ceiling) = settings.memory_ceiling_bytes {
        setrlimit(Resource::RLIMIT_DATA, ceiling, ceiling).map_err(|error| {
            format!("cannot set the memory ceiling of {ceiling} bytes: {error}")
        })?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn limits(_settings: &ChildSettings) -> Result<(), String> {
    Ok(())
}

#[cfg(target_os = "linux")]
fn seccomp() -> Result<(), String> {
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };

    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| format!("no seccomp filter for {}", std::env::consts::ARCH))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALLOWED.iter().map(|&call| (call, Vec::new())).collect();
    // Opening files read-only (the time zone, /proc/self for V8's stack and memory maps): none
    // of the write, create or truncate flags.
    let write_flags =
        (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND) as u64;
    let read_only = |flags_argument: u8| -> Result<Vec<SeccompRule>, String> {
        let condition = SeccompCondition::new(
            flags_argument,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(write_flags),
            0,
        )
        .map_err(|error| error.to_string())?;
        Ok(vec![
            SeccompRule::new(vec![condition]).map_err(|error| error.to_string())?,
        ])
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
    .map_err(|error| error.to_string())?;
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![thread]).map_err(|error| error.to_string())?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .map_err(|error| format!("cannot build the seccomp filter: {error}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| {
            format!("cannot compile the seccomp filter: {error}")
        })?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|error| format!("cannot apply the seccomp filter: {error}"))
}

#[cfg(not(target_os = "linux"))]
fn seccomp() -> Result<(), String> {
    Err("the seccomp sandbox exists only on Linux; turn it off to run engine processes here".into())
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
    libc::SYS_clone3,
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_setscheduler,
    libc::SYS_setpriority,
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
    // Signals (V8's profiler and the runtime's own stops; kill only to abort itself).
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_tgkill,
    libc::SYS_tkill,
    libc::SYS_kill,
    // Clocks and resources.
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_getrusage,
    libc::SYS_getrlimit,
    libc::SYS_prlimit64,
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
    libc::SYS_ioctl,
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
