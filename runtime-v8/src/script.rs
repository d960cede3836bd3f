//! V8 as a [`ScriptRuntime`]: the engine-independent runtime thread, host and warm pool of
//! `codemode_engine::script` drive a [`V8Runtime`] through this.

#![forbid(unsafe_code)]

use std::time::Duration;

use codemode_engine::EngineError;
use codemode_engine::script::{CellHost, ModuleState, RunStatus, ScriptRuntime, ScriptTerminator};

use crate::ffi::{IsolateTerminator, V8Runtime};
use crate::hard_stop::{self, RunningCell};
use crate::snapshot;
use crate::watchdog;
use codemode_engine::watchdog::Watch;

impl ScriptTerminator for IsolateTerminator {
    fn terminate(&self) {
        IsolateTerminator::terminate(self);
    }
}

impl ScriptRuntime for V8Runtime<CellHost> {
    // V8 keeps its own stack limit (about 1 MiB below where the isolate is entered), so deep
    // recursion ends as a `RangeError` well before the thread's 8 MiB are used up.

    fn describe() -> String {
        format!("V8 {}", crate::v8_version())
    }

    fn initialize() -> Result<(), EngineError> {
        crate::ffi::initialize().map_err(|error| EngineError::Unavailable(error.to_string()))
    }

    type Terminator = IsolateTerminator;
    type CpuWatch = Watch;
    type CellGuard = RunningCell;
    type HostGuard<'a> = &'a mut CellHost;

    fn create(heap_limit_bytes: usize, host: CellHost) -> Result<Self, EngineError> {
        V8Runtime::new(heap_limit_bytes, host)
            .map_err(|error| EngineError::Runtime(error.to_string()))
    }

    fn host(&mut self) -> &mut CellHost {
        V8Runtime::host(self)
    }

    fn reset(&mut self, host: CellHost) -> bool {
        V8Runtime::reset(self, host)
    }

    fn terminator(&self) -> IsolateTerminator {
        V8Runtime::terminator(self)
    }

    fn host_panicked(&self) -> bool {
        V8Runtime::host_panicked(self)
    }

    fn heap_limit_hit(&self) -> bool {
        V8Runtime::heap_limit_hit(self)
    }

    /// V8's `FixedArray::kMaxLength` with pointer compression (Node 24's build): an array past it
    /// is a fatal error ("invalid size"), which ends the process.
    const LONGEST_ARRAY: Option<u32> = Some(134_217_725);

    fn prepare_bootstrap(source: &str, config: &str, snapshot_config: &str) {
        snapshot::prepare(source, config, snapshot_config);
    }

    fn bootstrap(&mut self, source: &str, config: &str) -> RunStatus {
        V8Runtime::bootstrap(self, source, config)
    }

    fn evaluate_module(&mut self, source: &str) -> RunStatus {
        V8Runtime::evaluate_module(self, source)
    }

    fn dispatch(&mut self, kind: i32, id: &str, payload: Option<&str>) -> RunStatus {
        V8Runtime::dispatch(self, kind, id, payload)
    }

    fn run_microtasks(&mut self) -> RunStatus {
        V8Runtime::run_microtasks(self)
    }

    fn module_state(&mut self) -> ModuleState {
        V8Runtime::module_state(self)
    }

    fn watch_cpu(&self, budget: Duration, call_id: String) -> Result<Watch, EngineError> {
        watchdog::watch(budget, V8Runtime::terminator(self), call_id)
    }

    fn enter_cell(call_id: &str) -> RunningCell {
        hard_stop::running(call_id)
    }
}
