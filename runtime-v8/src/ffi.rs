//! The safe face of the C++ shim (`shim/shim.cc`): the only module of codemode with `unsafe` code.
//!
//! Ownership, mirrored from the shim's header comment:
//! - A [`V8Runtime`] owns one `cm_runtime` (isolate + context) and the boxed [`HostSlot`] whose
//!   address the shim passes back to [`host_trampoline`]. Both are freed in `Drop`, the runtime
//!   first, so the shim never calls into a freed host.
//! - A `V8Runtime` is `!Send`: it stays on the thread that created it, as V8 requires.
//! - [`IsolateTerminator`] is the one thing that crosses threads. It reaches the isolate only under
//!   a mutex that [`V8Runtime`]'s `Drop` takes to detach it before the isolate is disposed, so a
//!   terminate can never touch a freed isolate.
//! - [`V8Runtime::reset`] keeps the isolate for another cell: it detaches every terminator handed
//!   out so far before the shim cancels any termination and makes a fresh context, so no stop
//!   meant for the old cell can reach the new one; terminators handed out after reach the isolate
//!   as before.
//! - Strings cross as pointer + length and are copied on the other side before the call returns.

use parking_lot::Mutex;
use std::ffi::{CStr, c_void};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use codemode_engine::script::{Host, HostReply, ModuleState, RunStatus};

#[repr(C)]
struct RawRuntime {
    _opaque: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CmStr {
    ptr: *const u8,
    len: usize,
}

impl CmStr {
    const ABSENT: CmStr = CmStr {
        ptr: std::ptr::null(),
        len: 0,
    };

    fn borrowed(text: Option<&str>) -> CmStr {
        match text {
            Some(text) => CmStr {
                ptr: text.as_ptr(),
                len: text.len(),
            },
            None => CmStr::ABSENT,
        }
    }

    /// # Safety
    /// `self` must be absent, or point at `len` bytes that stay valid for `'a`.
    unsafe fn as_bytes<'a>(self) -> Option<&'a [u8]> {
        if self.ptr.is_null() {
            None
        } else {
            // SAFETY: the caller promises `ptr` points at `len` live bytes for 'a.
            Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
        }
    }
}

type HostFn = extern "C" fn(*mut c_void, i32, CmStr, CmStr, *mut CmStr) -> i32;
type FatalFn = extern "C" fn(i32, *const std::ffi::c_char, *const std::ffi::c_char);

unsafe extern "C" {
    fn cm_v8_version() -> *const std::ffi::c_char;
    fn cm_v8_initialize() -> i32;
    fn cm_node_attach() -> i32;
    fn _exit(code: i32) -> !;
    fn cm_runtime_new(
        heap_limit_bytes: usize,
        host: HostFn,
        host_data: *mut c_void,
    ) -> *mut RawRuntime;
    fn cm_runtime_delete(runtime: *mut RawRuntime);
    fn cm_runtime_reset(runtime: *mut RawRuntime) -> i32;
    fn cm_runtime_terminate(runtime: *mut RawRuntime);
    fn cm_runtime_heap_limit_hit(runtime: *mut RawRuntime) -> i32;
    fn cm_runtime_last_error(runtime: *mut RawRuntime, length: *mut usize) -> *const u8;
    fn cm_runtime_bootstrap(runtime: *mut RawRuntime, source: CmStr, config: CmStr) -> i32;
    fn cm_snapshot_prepare(
        source: CmStr,
        config: CmStr,
        snapshot_config: CmStr,
        error: *mut CmStr,
    ) -> i32;
    fn cm_runtime_evaluate_module(runtime: *mut RawRuntime, source: CmStr) -> i32;
    fn cm_runtime_dispatch(runtime: *mut RawRuntime, kind: i32, id: CmStr, payload: CmStr) -> i32;
    fn cm_runtime_run_microtasks(runtime: *mut RawRuntime) -> i32;
    fn cm_runtime_module_state(runtime: *mut RawRuntime) -> i32;
    fn cm_current_thread_cpu_clock(clock: *mut i32) -> i32;
    fn cm_set_fatal_hook(hook: Option<FatalFn>);
    fn cm_cpu_clock_nanos(clock: i32) -> i64;
}

/// The V8 version the shim runs on, such as `13.6.233.17-node.37`.
pub fn version() -> String {
    // SAFETY: V8::GetVersion returns a static NUL-terminated string; it needs no initialisation.
    unsafe { CStr::from_ptr(cm_v8_version()) }
        .to_string_lossy()
        .into_owned()
}

/// What kind of fatal error V8 reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatalKind {
    /// A failed V8 check or API misuse.
    Error,
    /// A JavaScript heap past its limit whose termination did not take effect.
    HeapLimit,
    /// The process could not get memory.
    OutOfMemory,
}

/// The process's fatal hook, set once.
static FATAL_HOOK: OnceLock<fn(FatalKind, &str)> = OnceLock::new();

extern "C" fn fatal_trampoline(
    kind: i32,
    location: *const std::ffi::c_char,
    message: *const std::ffi::c_char,
) {
    let Some(hook) = FATAL_HOOK.get() else {
        return;
    };
    let text = |pointer: *const std::ffi::c_char| {
        if pointer.is_null() {
            String::new()
        } else {
            // SAFETY: the shim passes NUL-terminated strings valid for the duration of this call,
            // and they are copied here.
            unsafe { CStr::from_ptr(pointer) }
                .to_string_lossy()
                .into_owned()
        }
    };
    let kind = match kind {
        1 => FatalKind::HeapLimit,
        2 => FatalKind::OutOfMemory,
        _ => FatalKind::Error,
    };
    let (location, message) = (text(location), text(message));
    let description = match (location.is_empty(), message.is_empty()) {
        (false, false) => format!("{message} in {location}"),
        (true, false) => message,
        _ => location,
    };
    // A panic must not unwind into V8's C++ frames.
    let _ = catch_unwind(AssertUnwindSafe(|| hook(kind, &description)));
}

/// Sets the process's fatal hook (only the first call counts): V8 calls it on the thread that hit
/// a fatal error (a failed check, an out-of-memory, a heap that went on growing past its limit
/// after termination was asked) just before it ends the process. Also arms the heap-limit case:
/// without a hook, a heap past its limit is given room and the process is left to V8.
pub fn set_fatal_hook(hook: fn(FatalKind, &str)) {
    if FATAL_HOOK.set(hook).is_ok() {
        // SAFETY: the trampoline is a plain function that lives for the whole process.
        unsafe { cm_set_fatal_hook(Some(fatal_trampoline)) };
    }
}

/// V8 refused to initialise: the library loaded is not the one the shim was built against.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "V8 failed to initialise: the library does not match the headers the shim was built with; \
     run `cargo xtask setup-v8` and rebuild"
)]
pub struct InitializeError;

/// Initialises V8 once per process (the shim guards it too); the outcome is remembered.
pub fn initialize() -> Result<(), InitializeError> {
    static INITIALIZED: OnceLock<Result<(), InitializeError>> = OnceLock::new();
    *INITIALIZED.get_or_init(|| {
        // SAFETY: cm_v8_initialize is idempotent and thread-safe (std::call_once inside).
        match unsafe { cm_v8_initialize() } {
            0 => Ok(()),
            _ => Err(InitializeError),
        }
    })
}

/// Whether the process has a startup snapshot for runtimes bootstrapped with `source` and
/// `config`, after making it if no snapshot exists yet: the bootstrap runs once, with
/// `snapshot_config`, in a context kept in the snapshot, and every runtime created afterwards
/// deserialises that context instead of running the bootstrap.
/// `Ok(false)` when there is none for them; `Err` says why making it failed (it is not tried
/// again). Thread-safe.
pub fn prepare_snapshot(source: &str, config: &str, snapshot_config: &str) -> Result<bool, String> {
    let mut error = CmStr::ABSENT;
    // SAFETY: the strings outlive the call; the shim serialises callers with a mutex, and the
    // error text it writes lives as long as the process, so it is copied at leisure.
    let status = unsafe {
        cm_snapshot_prepare(
            CmStr::borrowed(Some(source)),
            CmStr::borrowed(Some(config)),
            CmStr::borrowed(Some(snapshot_config)),
            &mut error,
        )
    };
    match status {
        0 => Ok(true),
        1 => Ok(false),
        // SAFETY: the error text, when set, lives as long as the process (see above).
        _ => Err(unsafe { error.as_bytes() }
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .unwrap_or_else(|| "the V8 shim failed".to_owned())),
    }
}

/// Inside the `node` binary (the engine library): finds Node's V8 platform, which every isolate
/// of this crate is then registered with. Must be called on Node's main thread while Node runs
/// JavaScript (the library's module initialiser), before [`initialize`].
pub fn attach_to_node() -> Result<(), InitializeError> {
    // SAFETY: the shim's rules for cm_node_attach: called on Node's main thread with Node's
    // isolate entered, which the caller's contract guarantees; it only reads Node's state.
    match unsafe { cm_node_attach() } {
        0 => Ok(()),
        _ => Err(InitializeError),
    }
}

/// Ends the process at once with `code`, running no exit handler and no static destructor: how
/// the engine library leaves Node, whose exit handlers would tear V8 down under the isolate its
/// main thread still has entered (and abort).
pub fn end_process(code: i32) -> ! {
    // SAFETY: _exit takes a plain integer and never returns; it touches no memory of ours.
    unsafe { _exit(code) }
}

/// The CPU-time clock of one thread, readable from any thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadCpuClock(i32);

impl ThreadCpuClock {
    /// The clock of the calling thread.
    pub fn current() -> Option<Self> {
        let mut clock = 0;
        // SAFETY: the out-pointer is our local; the call only queries the calling thread.
        let status = unsafe { cm_current_thread_cpu_clock(&mut clock) };
        (status == 0).then_some(ThreadCpuClock(clock))
    }

    /// The CPU time its thread has used, or `None` once the thread has ended.
    pub fn elapsed(self) -> Option<std::time::Duration> {
        // SAFETY: reading a clock id is harmless even if its thread has ended (the call fails).
        let nanos = unsafe { cm_cpu_clock_nanos(self.0) };
        u64::try_from(nanos)
            .ok()
            .map(std::time::Duration::from_nanos)
    }
}

/// What the shim reads through `host_data`: the host and the buffer that keeps the last string
/// answer alive until the shim has copied it.
struct HostSlot<H> {
    host: H,
    reply: String,
    panicked: bool,
}

extern "C" fn host_trampoline<H: Host>(
    host_data: *mut c_void,
    op: i32,
    a: CmStr,
    b: CmStr,
    out: *mut CmStr,
) -> i32 {
    const UNDEFINED: i32 = 0;
    const STRING: i32 = 1;
    const THROW: i32 = 2;
    const TERMINATE: i32 = 3;
    // SAFETY: host_data is the HostSlot<H> that V8Runtime::new boxed and passed to cm_runtime_new;
    // it outlives the runtime, and no other reference to it is live while JavaScript runs, because
    // every V8Runtime method that runs JavaScript takes `&mut self`.
    let slot = unsafe { &mut *host_data.cast::<HostSlot<H>>() };
    // SAFETY: the shim passes strings it keeps alive for the duration of this call.
    let (a, b) = unsafe { (a.as_bytes(), b.as_bytes()) };
    let reply = catch_unwind(AssertUnwindSafe(|| slot.host.call(op, a, b)));
    let reply = reply.unwrap_or_else(|_| {
        slot.panicked = true;
        HostReply::Terminate
    });
    let (status, text) = match reply {
        HostReply::Undefined => (UNDEFINED, None),
        HostReply::String(text) => (STRING, Some(text)),
        HostReply::Throw(text) => (THROW, Some(text)),
        HostReply::Terminate => (TERMINATE, None),
    };
    if let Some(text) = text {
        slot.reply = text;
        // SAFETY: `out` is the shim's local, valid for writes; the pointer we store stays valid
        // until the next host call replaces `slot.reply`, after the shim has copied it.
        unsafe {
            *out = CmStr::borrowed(Some(&slot.reply));
        }
    }
    status
}

/// Stops the isolate of one [`V8Runtime`] from any thread; a no-op once that runtime is dropped.
#[derive(Clone)]
pub struct IsolateTerminator {
    target: Arc<Mutex<Option<SendRuntimePtr>>>,
}

struct SendRuntimePtr(*mut RawRuntime);

// SAFETY: the pointer is only used for cm_runtime_terminate, which is thread-safe, and only while
// the mutex holding it is locked; V8Runtime::drop clears it under the same mutex before freeing.
unsafe impl Send for SendRuntimePtr {}

impl IsolateTerminator {
    pub fn terminate(&self) {
        let target = self.target.lock();
        if let Some(runtime) = target.as_ref() {
            // SAFETY: the runtime is alive while its pointer is in the locked slot (see above).
            unsafe { cm_runtime_terminate(runtime.0) };
        }
    }
}

impl std::fmt::Debug for IsolateTerminator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsolateTerminator").finish_non_exhaustive()
    }
}

/// One isolate with one context, driven from the thread that created it.
pub struct V8Runtime<H: Host> {
    raw: *mut RawRuntime,
    slot: *mut HostSlot<H>,
    terminator: IsolateTerminator,
    /// A raw pointer field already makes this !Send; this says so on purpose.
    _not_send: PhantomData<*mut ()>,
}

impl<H: Host> std::fmt::Debug for V8Runtime<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V8Runtime").finish_non_exhaustive()
    }
}

/// The isolate could not be created.
#[derive(Debug, thiserror::Error)]
#[error("V8 could not create an isolate with a {heap_limit_bytes}-byte heap limit")]
pub struct CreateError {
    pub heap_limit_bytes: usize,
}

impl<H: Host> V8Runtime<H> {
    pub fn new(heap_limit_bytes: usize, host: H) -> Result<Self, CreateError> {
        initialize().map_err(|_| CreateError { heap_limit_bytes })?;
        let slot = Box::into_raw(Box::new(HostSlot {
            host,
            reply: String::new(),
            panicked: false,
        }));
        // SAFETY: V8 is initialised; `slot` is a live, uniquely owned allocation that we free only
        // after cm_runtime_delete.
        let raw = unsafe { cm_runtime_new(heap_limit_bytes, host_trampoline::<H>, slot.cast()) };
        if raw.is_null() {
            // SAFETY: `slot` came from Box::into_raw above and the shim did not keep it.
            drop(unsafe { Box::from_raw(slot) });
            return Err(CreateError { heap_limit_bytes });
        }
        Ok(V8Runtime {
            raw,
            slot,
            terminator: IsolateTerminator {
                target: Arc::new(Mutex::new(Some(SendRuntimePtr(raw)))),
            },
            _not_send: PhantomData,
        })
    }

    /// A handle that stops this runtime's JavaScript from any thread.
    pub fn terminator(&self) -> IsolateTerminator {
        self.terminator.clone()
    }

    /// The host, between calls into JavaScript.
    pub fn host(&mut self) -> &mut H {
        // SAFETY: `slot` is live for self's lifetime, and `&mut self` excludes any running
        // JavaScript, hence any concurrent use by the trampoline.
        unsafe { &mut (*self.slot).host }
    }

    /// Whether a host call panicked (the panic was caught and execution terminated).
    pub fn host_panicked(&self) -> bool {
        // SAFETY: as in `host`; a shared read between calls.
        unsafe { (*self.slot).panicked }
    }

    /// Whether V8 reported the heap limit as reached.
    pub fn heap_limit_hit(&self) -> bool {
        // SAFETY: `raw` is live; the flag is an atomic read.
        unsafe { cm_runtime_heap_limit_hit(self.raw) != 0 }
    }

    pub fn bootstrap(&mut self, source: &str, config: &str) -> RunStatus {
        // SAFETY: `raw` is live, we are on its thread, and the strings outlive the call.
        let status = unsafe {
            cm_runtime_bootstrap(
                self.raw,
                CmStr::borrowed(Some(source)),
                CmStr::borrowed(Some(config)),
            )
        };
        self.status(status)
    }

    pub fn evaluate_module(&mut self, source: &str) -> RunStatus {
        // SAFETY: as in `bootstrap`.
        let status = unsafe { cm_runtime_evaluate_module(self.raw, CmStr::borrowed(Some(source))) };
        self.status(status)
    }

    pub fn dispatch(&mut self, kind: i32, id: &str, payload: Option<&str>) -> RunStatus {
        // SAFETY: as in `bootstrap`.
        let status = unsafe {
            cm_runtime_dispatch(
                self.raw,
                kind,
                CmStr::borrowed(Some(id)),
                CmStr::borrowed(payload),
            )
        };
        self.status(status)
    }

    pub fn run_microtasks(&mut self) -> RunStatus {
        // SAFETY: `raw` is live and we are on its thread.
        let status = unsafe { cm_runtime_run_microtasks(self.raw) };
        self.status(status)
    }

    pub fn module_state(&mut self) -> ModuleState {
        // SAFETY: `raw` is live and we are on its thread.
        match unsafe { cm_runtime_module_state(self.raw) } {
            0 => ModuleState::Pending,
            1 => ModuleState::Fulfilled,
            2 => ModuleState::Rejected(self.last_error()),
            _ => ModuleState::Rejected(self.last_error()),
        }
    }

    /// Makes the runtime ready for another cell in the same isolate, with `host` as its host: a
    /// fresh context (the bootstrap must run again), no termination pending, every terminator
    /// handed out before detached. `false` when the isolate is better replaced (its heap reached
    /// the limit, or holds much) or the shim failed: drop it then.
    pub fn reset(&mut self, host: H) -> bool {
        // First: after this, no stop meant for the old cell can reach the isolate.
        self.terminator.target.lock().take();
        // SAFETY: `raw` is live and we are on its thread; no JavaScript runs during the call.
        if unsafe { cm_runtime_reset(self.raw) } != 0 {
            return false;
        }
        self.terminator = IsolateTerminator {
            target: Arc::new(Mutex::new(Some(SendRuntimePtr(self.raw)))),
        };
        // SAFETY: as in `host`: `slot` is live, and `&mut self` excludes running JavaScript.
        let slot = unsafe { &mut *self.slot };
        slot.host = host;
        slot.reply.clear();
        slot.panicked = false;
        true
    }

    fn status(&self, status: i32) -> RunStatus {
        match status {
            0 => RunStatus::Ok,
            2 => RunStatus::Terminated,
            _ => RunStatus::Exception(self.last_error()),
        }
    }

    fn last_error(&self) -> String {
        let mut length = 0;
        // SAFETY: `raw` is live; the returned bytes are owned by the runtime and valid until its
        // next call, and we copy them at once.
        let bytes = unsafe {
            let pointer = cm_runtime_last_error(self.raw, &mut length);
            std::slice::from_raw_parts(pointer, length)
        };
        String::from_utf8_lossy(bytes).into_owned()
    }
}

impl<H: Host> Drop for V8Runtime<H> {
    fn drop(&mut self) {
        // Detach the terminator first: after this no other thread can reach the isolate.
        self.terminator.target.lock().take();
        // SAFETY: `raw` is live and unreachable from other threads now; it is freed exactly once.
        unsafe { cm_runtime_delete(self.raw) };
        // SAFETY: the runtime that could call back into `slot` is gone; `slot` came from
        // Box::into_raw in `new` and is freed exactly once.
        drop(unsafe { Box::from_raw(self.slot) });
    }
}
