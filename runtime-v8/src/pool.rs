//! Pre-warmed runtimes (pre-warming): threads that have already created their isolate and context and
//! wait for a cell, so that starting a cell does not pay for isolate creation on its critical path
//! (measured: creation is most of a cell's start-up).
//!
//! Each warm thread runs exactly one cell, as a cold one does; isolates are never reused. When a
//! warm thread takes a cell it first starts its own replacement, off the caller's path. The pool
//! serves cells with its heap limit; others take the cold path. A replacement waits a moment
//! before creating its isolate, so as not to compete with the cell that is starting. Dropping the last handle to the
//! pool ends the idle threads, which dispose of their isolates.

#![forbid(unsafe_code)]

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use codemode_engine::CellStart;

use crate::RUNTIME_THREAD_STACK_BYTES;
use crate::thread::{self, ThreadContext, WarmRuntime};

/// How long a replacement waits before creating its isolate: creating one while the cell that
/// took its predecessor starts competes with that cell for the CPU (measured: it cost about half
/// of the gain), and a cell's start-up is over well within this.
const REFILL_DELAY: Duration = Duration::from_millis(10);

/// A cell handed to a warm thread (boxed: it is large, and moves through a channel).
pub(crate) type Job = Box<(CellStart, ThreadContext)>;

#[derive(Debug)]
pub(crate) struct WarmPool {
    size: usize,
    heap_limit_bytes: usize,
    test_hooks: bool,
    /// One sender per idle warm thread (possibly still creating its isolate).
    idle: Mutex<Vec<Sender<Job>>>,
}

impl WarmPool {
    /// A pool that keeps `size` warm threads with `heap_limit_bytes` heaps.
    pub(crate) fn new(size: usize, heap_limit_bytes: usize, test_hooks: bool) -> Arc<Self> {
        let pool = Arc::new(WarmPool {
            size,
            heap_limit_bytes,
            test_hooks,
            idle: Mutex::new(Vec::new()),
        });
        for _ in 0..size {
            pool.add_thread(Duration::ZERO);
        }
        pool
    }

    /// Hands `job` to a warm thread; gives it back when none can take it (the cold path then
    /// runs it).
    pub(crate) fn dispatch(&self, job: Job) -> Result<(), Job> {
        if job.0.limits.heap_limit_bytes != self.heap_limit_bytes {
            return Err(job);
        }
        let mut job = job;
        loop {
            let Some(idle) = self.lock_idle().pop() else {
                return Err(job);
            };
            match idle.send(job) {
                Ok(()) => return Ok(()),
                // That thread could not warm up and is gone; try the next.
                Err(returned) => job = returned.0,
            }
        }
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Sender<Job>>> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts one more warm thread, which waits `delay` before creating its isolate, unless the
    /// pool is full (or the OS refuses a thread).
    fn add_thread(self: &Arc<Self>, delay: Duration) {
        let mut idle = self.lock_idle();
        if idle.len() >= self.size {
            return;
        }
        let (sender, receiver) = channel();
        let pool = Arc::downgrade(self);
        let heap_limit_bytes = self.heap_limit_bytes;
        let test_hooks = self.test_hooks;
        let spawned = std::thread::Builder::new()
            .name("codemode-cell-warm".into())
            .stack_size(RUNTIME_THREAD_STACK_BYTES)
            .spawn(move || {
                std::thread::sleep(delay);
                warm_thread(heap_limit_bytes, test_hooks, receiver, pool)
            });
        if spawned.is_ok() {
            idle.push(sender);
        }
    }
}

/// A warm thread: creates its runtime, waits for a cell, starts its replacement, runs the cell.
fn warm_thread(
    heap_limit_bytes: usize,
    test_hooks: bool,
    jobs: Receiver<Job>,
    pool: Weak<WarmPool>,
) {
    let Ok(warm) = WarmRuntime::create(heap_limit_bytes, test_hooks) else {
        // Dropping `jobs` makes a dispatch to this thread fail over to another.
        return;
    };
    let Ok(job) = jobs.recv() else {
        // The pool is gone: dispose of the isolate and end.
        return;
    };
    drop(jobs);
    let (cell, context) = *job;
    if let Some(pool) = pool.upgrade() {
        pool.add_thread(REFILL_DELAY);
    }
    debug_assert_eq!(warm.heap_limit_bytes(), cell.limits.heap_limit_bytes);
    thread::run_warm(warm, cell, context);
}
