//! The engine-independent half of a *script engine*: one that runs the JavaScript bootstrap
//! ([`BOOTSTRAP_JS`]) to install the globals, then the cell's ES module. An engine of this kind
//! (V8, QuickJS) implements [`ScriptRuntime`] for one runtime of its JavaScript engine, and gets
//! from here everything else that every such engine must do the same way:
//!
//! - the globals' JavaScript face (the bootstrap) and their Rust side, [`CellHost`], which answers
//!   the bootstrap's `host(op, a?, b?)` calls by the rules of [`crate::globals`];
//! - the runtime thread of a cell ([`run`], [`run_warm`]): evaluate the module, run microtasks,
//!   timers and tool results, report the pending frontier and pause there, end on termination,
//!   limits, `exit()`, a settled module or an await that nothing can settle;
//! - pre-warmed runtimes ([`WarmPool`]), the start of a cell ([`start_cell`]), a lane's thread
//!   ([`serve_lane`]: a runtime made ready before each start arrives), and the engine itself
//!   ([`ScriptEngine`], generic over the runtime).
//!
//! So an engine adds only what its JavaScript engine decides: how a runtime is made, how
//! JavaScript is called and stopped, how its errors read.

mod driver;
mod engine;
mod host;
mod lane;
mod ops;
mod pool;

use std::sync::Arc;
use std::sync::mpsc;

pub use driver::{
    BOOTSTRAP_JS, BOOTSTRAP_RESOURCE_NAME, CELL_RESOURCE_NAME, CellTerminator, CpuWatch,
    LaneTerminator, ModuleState, RunStatus, ScriptRuntime, ScriptTerminator, TerminateTarget,
    ThreadContext, WarmRuntime, run, run_warm, run_warm_then_reuse,
};
pub use engine::{DEFAULT_WARM_RUNTIMES, ScriptEngine};
pub use host::{CellHost, Host, HostReply, HostStop};
pub use lane::serve_lane;
pub use ops::HostOp;
pub use pool::{Job, WarmPool};

/// The environment variable that, set to `off` in an engine process's environment, makes an
/// engine that prepares a snapshot of the bootstrapped global scope
/// ([`ScriptRuntime::prepare_bootstrap`]; V8's does) run the bootstrap in each global scope
/// instead: to measure what the snapshot saves, or as a way out should it ever misbehave. Named
/// here, below every engine, so that the launchers that pass it on need not link the engine
/// that reads it.
pub const SNAPSHOT_VARIABLE: &str = "CODEMODE_V8_SNAPSHOT";

use crate::{CellStart, EngineError, EngineHandles, EventSender, TerminateHandle};

/// Starts `cell` on a runtime of `R`: on a warm thread of `pool` when one is ready for its heap
/// limit, else on a new thread with a stack of `stack_bytes` (the cold path).
pub fn start_cell<R: ScriptRuntime>(
    pool: Option<&Arc<WarmPool<R>>>,
    cell: CellStart,
    events: EventSender,
    test_hooks: bool,
    stack_bytes: usize,
) -> Result<EngineHandles, EngineError> {
    crate::check_heap_limit(cell.limits.heap_limit_bytes)?;
    let (command_tx, command_rx) = mpsc::channel();
    let (control_tx, control_rx) = mpsc::channel();
    let target = Arc::new(TerminateTarget::default());
    let context = ThreadContext {
        events,
        inbox: Box::new(crate::lane::ChannelInbox {
            commands: command_rx,
            control: control_rx,
        }),
        terminate: Arc::clone(&target),
        test_hooks,
    };
    let cold = match pool {
        Some(pool) => pool.dispatch(Box::new((cell, context))).err(),
        None => Some(Box::new((cell, context))),
    };
    if let Some(job) = cold {
        let (cell, context) = *job;
        std::thread::Builder::new()
            .name(format!("codemode-cell-{}", cell.call_id))
            .stack_size(stack_bytes)
            .spawn(move || run::<R>(cell, context))
            .map_err(EngineError::Thread)?;
    }
    let terminator = CellTerminator {
        target,
        commands: command_tx.clone(),
        control: control_tx.clone(),
    };
    Ok(EngineHandles {
        commands: command_tx.into(),
        control: control_tx.into(),
        terminate: TerminateHandle::new(Arc::new(terminator)),
    })
}
