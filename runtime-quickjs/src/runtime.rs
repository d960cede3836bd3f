//! One QuickJS runtime as the engine-independent runtime thread drives it: a [`ScriptRuntime`].
//!
//! A runtime has one context. The bootstrap's `host(op, a?, b?)` is a Rust function over the
//! cell's [`CellHost`]; the dispatcher and the module's evaluation promise are kept as persistent
//! handles, released before the runtime. Everything a limit or a terminator needs on the running
//! thread is read by QuickJS's interrupt handler, which QuickJS calls regularly while JavaScript
//! runs: the terminate flag (set by a [`Halt`] from any thread, or by a host reply), and the CPU
//! budget (the thread's own CPU clock). A runtime whose JavaScript was interrupted, ran out of
//! memory or saw a panic is never used again: the runtime thread ends the cell and drops it.

#![forbid(unsafe_code)]

use std::cell::{Cell, RefCell, RefMut};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::allocator::LimitedAllocator;
use codemode_engine::EngineError;
use codemode_engine::globals::{THROW_SITE_BINDING, THROW_SITE_MODULE, THROW_SITE_PROPERTY};
use codemode_engine::script::{
    BOOTSTRAP_RESOURCE_NAME, CELL_RESOURCE_NAME, CellHost, CpuWatch, Host, HostReply, ModuleState,
    RunStatus, ScriptRuntime, ScriptTerminator,
};
use rquickjs::context::EvalOptions;
use rquickjs::function::Opt;
use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Exception, Function, Module, Persistent, Promise, Runtime, Value};

use crate::errors::{ErrorText, error_text};

/// The largest native stack QuickJS may use for JavaScript (QuickJS recurses on the native stack,
/// a frame or more per JavaScript call): deep recursion ends as a catchable error well before the
/// runtime thread's stack (8 MiB) is used up.
const MAX_STACK_BYTES: usize = 4 * 1024 * 1024;

/// Replaces QuickJS's `Error.stackTraceLimit` and `Error.prepareStackTrace`, whose setters change
/// how the engine builds every error's stack, by plain accessors the cell may set freely.
const SHADOW_STACK_SETTINGS: &str = "(() => {
  for (const name of ['stackTraceLimit', 'prepareStackTrace']) {
    let value = Error[name];
    Object.defineProperty(Error, name, {
      get() { return value; },
      set(next) { value = next; },
      enumerable: false,
      configurable: false,
    });
  }
})()";

/// Stops one runtime's JavaScript from any thread: QuickJS's interrupt handler reads the flag.
#[derive(Debug, Clone, Default)]
pub struct Halt(Arc<AtomicBool>);

impl Halt {
    fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl ScriptTerminator for Halt {
    fn terminate(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A cell's CPU budget, checked by the interrupt handler against the thread's CPU clock.
#[derive(Debug)]
struct CpuBudget {
    /// The thread's CPU time when the cell started (a warm thread used some before).
    baseline: Duration,
    budget: Duration,
    exceeded: Arc<AtomicBool>,
}

/// The CPU watch of a cell: whether the interrupt handler stopped it for its budget (and its
/// place under the watchdog, for a built-in that does not stop).
#[derive(Debug)]
pub struct BudgetWatch {
    exceeded: Arc<AtomicBool>,
    budget: Rc<RefCell<Option<CpuBudget>>>,
    _watchdog: codemode_engine::watchdog::Watch,
}

impl CpuWatch for BudgetWatch {
    fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::SeqCst)
    }
}

impl Drop for BudgetWatch {
    fn drop(&mut self) {
        self.budget.borrow_mut().take();
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Option<Duration> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    Some(Duration::from(now))
}

/// What the host function and the interrupt handler share with the runtime.
#[derive(Debug, Default)]
struct Flags {
    /// A host call panicked; the runtime was stopped.
    host_panicked: Cell<bool>,
    /// QuickJS reported that the memory limit was reached.
    out_of_memory: Cell<bool>,
    /// The last call failed with a bare `null` that no `throw` of the cell made.
    bare_null_thrown: Cell<bool>,
}

/// Refuses every import: a cell has no modules to import.
struct CellImports {
    /// Where the throw-site module's setter records what it throws.
    thrown: ThrownRecord,
}

impl Resolver for CellImports {
    fn resolve<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        _base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        if name == THROW_SITE_MODULE {
            return Ok(name.to_owned());
        }
        Err(Exception::throw_message(
            ctx,
            &format!("Unsupported import in exec: {name}"),
        ))
    }
}

impl Loader for CellImports {
    /// The throw-site module (see `codemode_engine::globals::THROW_SITE_MODULE`): its object's
    /// setter reaches the module through its `import.meta`, which only the module itself reads.
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        if name != THROW_SITE_MODULE {
            return Err(Exception::throw_message(
                ctx,
                &format!("Unsupported import in exec: {name}"),
            ));
        }
        let source = format!(
            "const set = import.meta.set;\n\
             export const {THROW_SITE_BINDING} = Object.freeze(Object.defineProperty(\
             Object.create(null), {THROW_SITE_PROPERTY:?}, \
             {{ get() {{ return undefined; }}, set, enumerable: false, configurable: false }}));"
        );
        let module = Module::declare(ctx.clone(), name, source)?;
        let meta = module.meta()?;
        meta.set("set", throw_site_setter(ctx, Rc::clone(&self.thrown))?)?;
        Ok(module)
    }
}

/// One QuickJS runtime with one context, driven from the thread that created it.
pub struct QuickJsRuntime {
    // Persistent handles first: they are released before the context and the runtime.
    dispatch: Option<Persistent<Function<'static>>>,
    module_promise: Option<Persistent<Promise<'static>>>,
    /// QuickJS's own getter of an error's `stack`, taken before any cell code runs.
    stack_getter: Option<Persistent<Function<'static>>>,
    /// The cell's source, for naming what an error points at.
    source: Option<Rc<str>>,
    context: Context,
    runtime: Runtime,
    host: Rc<RefCell<CellHost>>,
    halt: Halt,
    flags: Rc<Flags>,
    budget: Rc<RefCell<Option<CpuBudget>>>,
    /// What the throw-site setter recorded last: the value and where it was thrown.
    thrown: ThrownRecord,
    heap_limit_bytes: usize,
    /// Set by the runtime's allocator when it refused an allocation past the heap limit.
    refused: Arc<AtomicBool>,
}

impl std::fmt::Debug for QuickJsRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuickJsRuntime")
            .field("heap_limit_bytes", &self.heap_limit_bytes)
            .finish_non_exhaustive()
    }
}

impl Drop for QuickJsRuntime {
    fn drop(&mut self) {
        // Persistent handles must go before their runtime.
        self.dispatch.take();
        self.module_promise.take();
        self.stack_getter.take();
        self.thrown.borrow_mut().take();
    }
}

impl QuickJsRuntime {
    /// A runtime whose heap (every allocation of QuickJS, strings and array buffers included)
    /// may grow to `heap_limit_bytes`.
    pub fn new(heap_limit_bytes: usize, host: CellHost) -> Result<Self, EngineError> {
        // The limit is the allocator's (QuickJS's own is left unset): a refusal is then known.
        let (allocator, refused) = LimitedAllocator::new(heap_limit_bytes);
        let runtime = Runtime::new_with_alloc(allocator).map_err(|error| {
            EngineError::Runtime(format!("QuickJS could not create a runtime: {error}"))
        })?;
        runtime.set_max_stack_size(MAX_STACK_BYTES);
        let thrown: ThrownRecord = Rc::default();
        runtime.set_loader(
            CellImports {
                thrown: Rc::clone(&thrown),
            },
            CellImports {
                thrown: Rc::clone(&thrown),
            },
        );
        let halt = Halt::default();
        let budget: Rc<RefCell<Option<CpuBudget>>> = Rc::default();
        {
            let halt = halt.clone();
            let budget = Rc::clone(&budget);
            let refused = Arc::clone(&refused);
            runtime.set_interrupt_handler(Some(Box::new(move || {
                // An allocation refused for the heap limit ends the cell, even if it caught the
                // error QuickJS threw.
                if halt.requested() || refused.load(Ordering::Relaxed) {
                    return true;
                }
                if let Some(cell) = budget.borrow().as_ref() {
                    let used = thread_cpu_time()
                        .map(|now| now.saturating_sub(cell.baseline))
                        .unwrap_or_default();
                    if used >= cell.budget {
                        cell.exceeded.store(true, Ordering::SeqCst);
                        halt.terminate();
                        return true;
                    }
                }
                false
            })));
        }
        let context = Context::full(&runtime).map_err(|error| {
            EngineError::Runtime(format!("QuickJS could not create a context: {error}"))
        })?;
        Ok(QuickJsRuntime {
            dispatch: None,
            module_promise: None,
            stack_getter: None,
            source: None,
            context,
            runtime,
            host: Rc::new(RefCell::new(host)),
            halt,
            flags: Rc::default(),
            budget,
            thrown,
            heap_limit_bytes,
            refused,
        })
    }

    /// The outcome of a call into JavaScript that failed with `error`, the exception taken.
    fn failed(&self, ctx: &Ctx<'_>, error: rquickjs::Error) -> RunStatus {
        if self.halt.requested() || self.flags.host_panicked.get() {
            // Clear what the interruption left pending; the cell ends anyway.
            let _ = ctx.catch();
            return RunStatus::Terminated;
        }
        match self.describe(ctx, error) {
            ErrorText::OutOfMemory => {
                self.flags.out_of_memory.set(true);
                RunStatus::Terminated
            }
            ErrorText::Text(text) => RunStatus::Exception(text),
        }
    }

    /// The error text of `error` (an exception is taken from the context).
    fn describe(&self, ctx: &Ctx<'_>, error: rquickjs::Error) -> ErrorText {
        let value = match error {
            rquickjs::Error::Exception => ctx.catch(),
            other => return ErrorText::Text(other.to_string()),
        };
        let recorded = self
            .thrown
            .borrow()
            .as_ref()
            .and_then(|(thrown, line, column)| {
                let thrown = thrown.clone().restore(ctx).ok()?;
                same_value(&thrown, &value).then_some((*line, *column))
            });
        if value.type_of() == rquickjs::Type::Uninitialized {
            // No exception value at all: QuickJS could not even allocate one.
            return ErrorText::OutOfMemory;
        }
        // When QuickJS runs out of memory so far that it cannot make the error either, the
        // exception is a bare `null`: no cell threw that one (a cell's `throw` is recorded). The
        // heap is looked at once the context is left (`heap_ran_out`).
        if value.is_null() && recorded.is_none() {
            self.flags.bare_null_thrown.set(true);
        }
        let stack_getter = self
            .stack_getter
            .clone()
            .and_then(|getter| getter.restore(ctx).ok());
        error_text(
            ctx,
            &value,
            recorded,
            stack_getter.as_ref(),
            self.source.as_deref(),
        )
    }

    /// Whether the heap still holds an eighth of its limit after a failed call: QuickJS frees a
    /// failed operation's temporaries at once, so what remains is what the cell kept, and a bare
    /// `null` with that much kept is the limit's doing (a cell that throws `null` itself is
    /// recorded by the throw-site setter). Only outside the context.
    fn memory_is_short(&self) -> bool {
        let used = usize::try_from(self.runtime.memory_usage().malloc_size).unwrap_or(usize::MAX);
        used >= self.heap_limit_bytes / 8
    }

    /// Whether the last call's bare `null` was the memory limit (it was thrown while the heap is
    /// short); records it. Only once the context is left.
    fn heap_ran_out(&self) -> bool {
        let ran_out = self.flags.bare_null_thrown.replace(false) && self.memory_is_short();
        if ran_out {
            self.flags.out_of_memory.set(true);
        }
        ran_out
    }

    /// The status of a call, once its context is left.
    fn after_call(&self, status: RunStatus) -> RunStatus {
        if self.heap_ran_out() {
            RunStatus::Terminated
        } else {
            status
        }
    }

    fn status(&self, ctx: &Ctx<'_>, result: rquickjs::Result<()>) -> RunStatus {
        match result {
            Ok(()) if self.halt.requested() => RunStatus::Terminated,
            Ok(()) => RunStatus::Ok,
            Err(error) => self.failed(ctx, error),
        }
    }
}

/// What the throw-site setter records: the value, and its line and column.
type ThrownRecord = Rc<RefCell<Option<(Persistent<Value<'static>>, u32, u32)>>>;

/// The throw-site setter (see `codemode_engine::globals::THROW_SITE_MODULE`): records the value and
/// where the cell assigned it (the `throw` it stands for), then throws it.
fn throw_site_setter<'js>(ctx: &Ctx<'js>, thrown: ThrownRecord) -> rquickjs::Result<Function<'js>> {
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, value: Value<'js>| -> rquickjs::Result<()> {
            // An Error made here carries the stack of the assignment that called the setter.
            if let Ok(probe) = Exception::from_message(ctx.clone(), "")
                && let Some((line, column)) = probe
                    .stack()
                    .as_deref()
                    .and_then(crate::errors::first_cell_position)
            {
                *thrown.borrow_mut() = Some((
                    Persistent::save(&ctx, value.clone()),
                    line,
                    column
                        .saturating_sub(crate::errors::THROW_SITE_COLUMN_OFFSET)
                        .max(1),
                ));
            }
            Err(ctx.throw(value))
        },
    )
}

/// The bootstrap's `host(op, a?, b?)`, over `host`.
fn host_function<'js>(
    ctx: &Ctx<'js>,
    host: Rc<RefCell<CellHost>>,
    flags: Rc<Flags>,
    halt: Halt,
) -> rquickjs::Result<Function<'js>> {
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>,
              op: i32,
              a: Opt<Value<'js>>,
              b: Opt<Value<'js>>|
              -> rquickjs::Result<Value<'js>> {
            let a = host_argument(&ctx, a.0)?;
            let b = host_argument(&ctx, b.0)?;
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                host.borrow_mut().call(op, a.as_deref(), b.as_deref())
            }));
            match reply {
                Ok(HostReply::Undefined) => Ok(Value::new_undefined(ctx)),
                Ok(HostReply::String(text)) => {
                    Ok(rquickjs::String::from_str(ctx, &text)?.into_value())
                }
                Ok(HostReply::Throw(message)) => Err(Exception::throw_message(&ctx, &message)),
                Ok(HostReply::Terminate) => {
                    halt.terminate();
                    Err(Exception::throw_internal(&ctx, "terminated"))
                }
                Err(_) => {
                    flags.host_panicked.set(true);
                    halt.terminate();
                    Err(Exception::throw_internal(&ctx, "the host panicked"))
                }
            }
        },
    )
}

/// Whether two values are the same value (`Object.is`).
fn same_value<'js>(a: &Value<'js>, b: &Value<'js>) -> bool {
    if a.type_of() != b.type_of() {
        return false;
    }
    if let (Some(x), Some(y)) = (a.as_number(), b.as_number()) {
        return x == y || (x.is_nan() && y.is_nan());
    }
    if let (Some(x), Some(y)) = (a.as_string(), b.as_string()) {
        return x.to_string().ok() == y.to_string().ok();
    }
    a == b
}

/// The bytes of a string argument of `host` (`None` for `undefined`), in the generalised UTF-8
/// of the engines: a lone surrogate is its own three bytes, which
/// `codemode_engine::globals::JsString` decodes.
fn host_argument<'js>(
    ctx: &Ctx<'js>,
    value: Option<Value<'js>>,
) -> rquickjs::Result<Option<Vec<u8>>> {
    let Some(value) = value else {
        return Ok(None);
    };
    if value.is_undefined() {
        return Ok(None);
    }
    // The bootstrap passes strings; anything else is made one as JavaScript would.
    let Some(string) = value.as_string() else {
        let text = value.get::<rquickjs::convert::Coerced<String>>()?.0;
        return Ok(Some(text.into_bytes()));
    };
    match string.to_string() {
        Ok(text) => Ok(Some(text.into_bytes())),
        // Not UTF-8: it holds a lone surrogate. Encode its UTF-16 code units one by one.
        Err(_) => {
            let units: Vec<u16> = ctx
                .eval::<Function<'_>, _>(
                    "(s) => { const u = []; for (let i = 0; i < s.length; i++) u.push(s.charCodeAt(i)); return u; }",
                )?
                .call((string.clone(),))?;
            Ok(Some(generalised_utf8(&units)))
        }
    }
}

/// UTF-16 as UTF-8 in which each lone surrogate is encoded on its own (three bytes).
fn generalised_utf8(units: &[u16]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(units.len() * 3);
    for decoded in char::decode_utf16(units.iter().copied()) {
        match decoded {
            Ok(character) => {
                let mut buffer = [0; 4];
                bytes.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
            }
            Err(lone) => {
                let unit = lone.unpaired_surrogate();
                bytes.push(0xE0 | (unit >> 12) as u8);
                bytes.push(0x80 | ((unit >> 6) & 0x3F) as u8);
                bytes.push(0x80 | (unit & 0x3F) as u8);
            }
        }
    }
    bytes
}

impl ScriptRuntime for QuickJsRuntime {
    // QuickJS's own stack limit (1 MiB) ends deep recursion well before the thread's 8 MiB are
    // used up.

    fn describe() -> String {
        crate::quickjs_version().to_owned()
    }

    type Terminator = Halt;
    type CpuWatch = BudgetWatch;
    type CellGuard = ();
    type HostGuard<'a> = RefMut<'a, CellHost>;

    fn create(heap_limit_bytes: usize, host: CellHost) -> Result<Self, EngineError> {
        QuickJsRuntime::new(heap_limit_bytes, host)
    }

    fn host(&mut self) -> RefMut<'_, CellHost> {
        self.host.borrow_mut()
    }

    fn terminator(&self) -> Halt {
        self.halt.clone()
    }

    fn host_panicked(&self) -> bool {
        self.flags.host_panicked.get()
    }

    fn heap_limit_hit(&self) -> bool {
        self.flags.out_of_memory.get() || self.refused.load(Ordering::Relaxed)
    }

    fn bootstrap(&mut self, source: &str, config: &str) -> RunStatus {
        let context = self.context.clone();
        let status = context.with(|ctx| {
            let result = (|| -> rquickjs::Result<()> {
                let mut options = EvalOptions::default();
                options.global = true;
                options.strict = false;
                options.filename = Some(BOOTSTRAP_RESOURCE_NAME.to_owned());
                let installer: Function<'_> = ctx.eval_with_options(source, options)?;
                let host_function = host_function(
                    &ctx,
                    Rc::clone(&self.host),
                    Rc::clone(&self.flags),
                    self.halt.clone(),
                )?;
                let dispatch: Function<'_> = installer.call((host_function, config))?;
                self.dispatch = Some(Persistent::save(&ctx, dispatch));
                // QuickJS builds an error's stack under `Error.stackTraceLimit` and
                // `Error.prepareStackTrace`: the cell gets properties of its own to set, and the
                // engine keeps its own, so that a cell cannot take the positions out of its own
                // error texts (as on V8, where they never reach them).
                ctx.eval::<(), _>(SHADOW_STACK_SETTINGS)?;
                let stack_getter: Function<'_> =
                    ctx.eval("Object.getOwnPropertyDescriptor(Error.prototype, 'stack').get")?;
                self.stack_getter = Some(Persistent::save(&ctx, stack_getter));
                Ok(())
            })();
            self.status(&ctx, result)
        });
        self.after_call(status)
    }

    fn evaluate_module(&mut self, source: &str) -> RunStatus {
        self.source = Some(Rc::from(source));
        let context = self.context.clone();
        let status = context.with(|ctx| {
            let result = (|| -> rquickjs::Result<()> {
                let module = Module::declare(ctx.clone(), CELL_RESOURCE_NAME, source)?;
                let (_, promise) = module.eval()?;
                self.module_promise = Some(Persistent::save(&ctx, promise));
                Ok(())
            })();
            self.status(&ctx, result)
        });
        self.after_call(status)
    }

    fn dispatch(&mut self, kind: i32, id: &str, payload: Option<&str>) -> RunStatus {
        let Some(dispatch) = self.dispatch.clone() else {
            return RunStatus::Exception("the runtime's bootstrap has not run".to_owned());
        };
        let context = self.context.clone();
        let status = context.with(|ctx| {
            let result = (|| -> rquickjs::Result<()> {
                let dispatch = dispatch.restore(&ctx)?;
                let payload = match payload {
                    Some(payload) => rquickjs::String::from_str(ctx.clone(), payload)?.into_value(),
                    None => Value::new_undefined(ctx.clone()),
                };
                dispatch.call::<_, Value<'_>>((kind, id, payload))?;
                Ok(())
            })();
            self.status(&ctx, result)
        });
        self.after_call(status)
    }

    fn run_microtasks(&mut self) -> RunStatus {
        loop {
            if self.halt.requested() {
                return RunStatus::Terminated;
            }
            match self.runtime.execute_pending_job() {
                Ok(true) => continue,
                Ok(false) => return RunStatus::Ok,
                // A promise job that throws only rejects its promise; a job that fails is one
                // that was stopped (interrupted, out of memory), or a callback with nobody to
                // hand its error to (a FinalizationRegistry's), whose error is dropped as V8
                // drops it.
                Err(job) => {
                    let status = job
                        .0
                        .with(|ctx| self.failed(&ctx, rquickjs::Error::Exception));
                    match self.after_call(status) {
                        RunStatus::Exception(_) => continue,
                        stopped => return stopped,
                    }
                }
            }
        }
    }

    fn module_state(&mut self) -> ModuleState {
        let Some(promise) = self.module_promise.clone() else {
            return ModuleState::Pending;
        };
        let context = self.context.clone();
        let state = context.with(|ctx| {
            let Ok(promise) = promise.restore(&ctx) else {
                return ModuleState::Rejected("the module's promise was lost".to_owned());
            };
            match promise.state() {
                PromiseState::Pending => ModuleState::Pending,
                PromiseState::Resolved => ModuleState::Fulfilled,
                PromiseState::Rejected => match promise.result::<Value<'_>>() {
                    Some(Err(error)) => match self.describe(&ctx, error) {
                        ErrorText::OutOfMemory => {
                            self.flags.out_of_memory.set(true);
                            ModuleState::Rejected("out of memory".to_owned())
                        }
                        ErrorText::Text(text) => ModuleState::Rejected(text),
                    },
                    _ => ModuleState::Rejected("the module failed".to_owned()),
                },
            }
        });
        if matches!(state, ModuleState::Rejected(_)) && self.heap_ran_out() {
            return ModuleState::Rejected("out of memory".to_owned());
        }
        state
    }

    fn watch_cpu(&self, budget: Duration, call_id: String) -> Result<BudgetWatch, EngineError> {
        let exceeded = Arc::new(AtomicBool::new(false));
        let baseline = thread_cpu_time().ok_or_else(|| {
            EngineError::Runtime(
                "cannot read the cell thread's CPU clock to enforce its CPU-time limit".to_owned(),
            )
        })?;
        let halt = self.halt.clone();
        let watchdog = crate::watchdog::register(
            baseline,
            budget,
            move || halt.terminate(),
            Arc::clone(&exceeded),
            call_id,
        )?;
        *self.budget.borrow_mut() = Some(CpuBudget {
            baseline,
            budget,
            exceeded: Arc::clone(&exceeded),
        });
        Ok(BudgetWatch {
            exceeded,
            budget: Rc::clone(&self.budget),
            _watchdog: watchdog,
        })
    }

    fn enter_cell(_call_id: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_are_encoded_on_their_own() {
        assert_eq!(generalised_utf8(&[0x61, 0xD800, 0x62]), b"a\xED\xA0\x80b");
        assert_eq!(generalised_utf8(&[0xD83D, 0xDE00]), "😀".as_bytes());
    }
}
