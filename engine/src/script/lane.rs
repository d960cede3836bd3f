//! A lane's thread for a script engine: makes a runtime ready, waits on the lane for the next
//! cell, runs it there with the lane's inbox, and again, until the lane closes. A runtime whose
//! cell ran to an end of its own is reset for the next cell rather than replaced (the lane's cells
//! are all one tenant's, see `crate::lane`): a fresh global scope in the same isolate costs a
//! fraction of a new isolate. The runtime of a
//! cell whose heap limit is not the one warmed for is made when the cell arrives (the cold path).

use std::sync::Arc;

use super::driver::WarmRuntime;
use super::driver::{self, LaneTerminator, ScriptRuntime, TerminateTarget, ThreadContext};
use crate::lane::{CellLane, LaneCell};
use crate::{EngineError, RuntimeEvent, TerminateHandle};

/// Starts a thread (with a stack of `stack_bytes`) that serves `lane` with runtimes of `R`,
/// warmed for `heap_limit_bytes`.
pub fn serve_lane<R: ScriptRuntime>(
    lane: Box<dyn CellLane>,
    heap_limit_bytes: usize,
    test_hooks: bool,
    stack_bytes: usize,
) -> Result<(), EngineError> {
    R::initialize()?;
    std::thread::Builder::new()
        .name("codemode-lane".into())
        .stack_size(stack_bytes)
        .spawn(move || lane_thread::<R>(lane, heap_limit_bytes, test_hooks))
        .map(drop)
        .map_err(EngineError::Thread)
}

fn lane_thread<R: ScriptRuntime>(
    mut lane: Box<dyn CellLane>,
    heap_limit_bytes: usize,
    test_hooks: bool,
) {
    // The runtime the last cell left ready for the next, if it could (see `run_warm_then_reuse`).
    let mut kept: Option<WarmRuntime<R>> = None;
    while lane.open() {
        // Made before the start arrives: a warm start is the lane's read of it, and the cell.
        let warm = match kept.take() {
            Some(warm) => Ok(warm),
            None => WarmRuntime::<R>::create(heap_limit_bytes, test_hooks),
        };
        let Some(LaneCell {
            start,
            events,
            inbox,
            ..
        }) = lane.next_cell()
        else {
            return;
        };
        let target = Arc::new(TerminateTarget::default());
        lane.started(TerminateHandle::new(Arc::new(LaneTerminator {
            target: Arc::clone(&target),
        })));
        if let Err(error) = crate::check_heap_limit(start.limits.heap_limit_bytes) {
            if events.send_blocking(RuntimeEvent::Started).is_ok() {
                let _ = events.send_blocking(RuntimeEvent::Result {
                    stored_value_writes: Default::default(),
                    error_text: Some(error.to_string()),
                });
            }
            kept = warm.ok();
            continue;
        }
        let context = ThreadContext {
            events,
            inbox,
            terminate: target,
            test_hooks,
        };
        match warm {
            Ok(warm) if warm.heap_limit_bytes() == start.limits.heap_limit_bytes => {
                kept = driver::run_warm_then_reuse(warm, start, context);
            }
            _ => driver::run::<R>(start, context),
        }
    }
}
