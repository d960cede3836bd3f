//! Pre-warmed runtimes (pre-warming): threads that have already created their isolate and context and
//! wait for a cell, so that starting a cell does not pay for isolate creation on its critical path
//! (measured: creation is most of a cell's start-up).
//!
//! Each warm thread runs exactly one cell, as a cold one does; isolates are never reused. When a
//! cell is handed to a warm thread, the caller that handed it asks the pool's refiller thread for
//! a replacement, which starts it off the cell's path (measured: spawning a thread on that path
//! cost about 0.2 ms of a QuickJS cell's 0.5 ms start; waking the refiller from the cell's own
//! thread cost the cell a system call, and a scheduler trace showed the refiller taking the
//! cell's CPU on two cores). The pool serves cells with its heap limit; others take the cold
//! path. A replacement is started a moment later, so as not to compete with the cell that is starting,
//! and is handed work only once its runtime is ready: a cell that finds no ready runtime takes the
//! cold path at once rather than waiting behind a replacement (measured: back to back, waiting
//! made a start 2.8 times slower than cold). Dropping the last handle to the pool ends the idle
//! threads, which dispose of their isolates, and the refiller.

use parking_lot::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::driver::{self, ScriptRuntime, ThreadContext, WarmRuntime};
use crate::CellStart;

/// How long a replacement waits before it is started: creating one while the cell that
/// took its predecessor starts competes with that cell for the CPU (measured: it cost about half
/// of the gain), and a cell's start-up is over well within this.
const REFILL_DELAY: Duration = Duration::from_millis(10);

/// A cell handed to a warm thread (boxed: it is large, and moves through a channel).
pub type Job<R> = Box<(CellStart, ThreadContext<<R as ScriptRuntime>::Terminator>)>;

/// Threads that have created their runtime and wait for a cell.
pub struct WarmPool<R: ScriptRuntime> {
    size: usize,
    heap_limit_bytes: usize,
    test_hooks: bool,
    stack_bytes: usize,
    /// One sender per warm thread whose runtime is ready and which waits for a cell.
    idle: Mutex<Vec<Sender<Job<R>>>>,
    /// Threads started and still creating their runtime (counted against `size`).
    warming: std::sync::atomic::AtomicUsize,
    /// Asks the refiller thread for replacements (`None` if the OS refused that thread: then a
    /// warm thread starts its replacement itself, at once).
    refills: Option<Sender<()>>,
}

impl<R: ScriptRuntime> std::fmt::Debug for WarmPool<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool")
            .field("size", &self.size)
            .field("heap_limit_bytes", &self.heap_limit_bytes)
            .field("ready", &self.ready())
            .finish_non_exhaustive()
    }
}

impl<R: ScriptRuntime> WarmPool<R> {
    /// A pool that keeps `size` warm threads with `heap_limit_bytes` heaps, each with a stack of
    /// `stack_bytes`.
    pub fn new(
        size: usize,
        heap_limit_bytes: usize,
        test_hooks: bool,
        stack_bytes: usize,
    ) -> Arc<Self> {
        let pool = Arc::new_cyclic(|pool: &Weak<Self>| WarmPool {
            size,
            heap_limit_bytes,
            test_hooks,
            stack_bytes,
            idle: Mutex::new(Vec::new()),
            warming: std::sync::atomic::AtomicUsize::new(0),
            refills: start_refiller(pool.clone()),
        });
        for _ in 0..size {
            pool.add_thread();
        }
        pool
    }

    /// Has a replacement for a warm thread that took a cell started, after [`REFILL_DELAY`].
    fn refill(self: &Arc<Self>) {
        match &self.refills {
            Some(refills) => {
                let _ = refills.send(());
            }
            None => self.add_thread(),
        }
    }

    /// Hands `job` to a warm thread and asks for its replacement; gives the job back when none
    /// can take it (the cold path then runs it).
    pub fn dispatch(self: &Arc<Self>, job: Job<R>) -> Result<(), Job<R>> {
        if job.0.limits.heap_limit_bytes != self.heap_limit_bytes {
            return Err(job);
        }
        let mut job = job;
        loop {
            let Some(idle) = self.idle.lock().pop() else {
                return Err(job);
            };
            match idle.send(job) {
                Ok(()) => {
                    self.refill();
                    return Ok(());
                }
                // That thread could not warm up and is gone; try the next.
                Err(returned) => job = returned.0,
            }
        }
    }

    /// How many warm runtimes are ready for a cell now.
    pub fn ready(&self) -> usize {
        self.idle.lock().len()
    }

    /// Starts one more warm thread, unless the pool is full (or the OS refuses a thread).
    fn add_thread(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        let idle = self.idle.lock();
        if idle.len() + self.warming.load(Ordering::SeqCst) >= self.size {
            return;
        }
        self.warming.fetch_add(1, Ordering::SeqCst);
        drop(idle);
        let pool = Arc::downgrade(self);
        let heap_limit_bytes = self.heap_limit_bytes;
        let test_hooks = self.test_hooks;
        let spawned = std::thread::Builder::new()
            .name("codemode-cell-warm".into())
            .stack_size(self.stack_bytes)
            .spawn(move || warm_thread(heap_limit_bytes, test_hooks, pool));
        if spawned.is_err() {
            self.warming.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A warm thread's runtime is ready (or could not be made): it stops counting as warming,
    /// and, when ready, offers itself for work.
    fn warmed(&self, ready: Option<Sender<Job<R>>>) {
        let mut idle = self.idle.lock();
        self.warming
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(sender) = ready {
            idle.push(sender);
        }
    }
}

/// Starts the thread that starts replacements: each request waits [`REFILL_DELAY`], then every
/// request that came meanwhile is served at once. It ends with the pool.
fn start_refiller<R: ScriptRuntime>(pool: Weak<WarmPool<R>>) -> Option<Sender<()>> {
    let (refills, requests) = channel::<()>();
    std::thread::Builder::new()
        .name("codemode-cell-refill".into())
        .spawn(move || {
            while requests.recv().is_ok() {
                std::thread::sleep(REFILL_DELAY);
                let wanted = 1 + requests.try_iter().count();
                let Some(pool) = pool.upgrade() else { return };
                for _ in 0..wanted {
                    pool.add_thread();
                }
            }
        })
        .ok()
        .map(|_| refills)
}

/// A warm thread: creates its runtime, offers itself to the pool, waits for a cell (whose
/// dispatcher has asked for the thread's replacement), runs the cell.
fn warm_thread<R: ScriptRuntime>(
    heap_limit_bytes: usize,
    test_hooks: bool,
    pool: Weak<WarmPool<R>>,
) {
    let warm = WarmRuntime::<R>::create(heap_limit_bytes, test_hooks);
    let Some(offered_to) = pool.upgrade() else {
        return;
    };
    let Ok(warm) = warm else {
        offered_to.warmed(None);
        return;
    };
    let (sender, jobs): (Sender<Job<R>>, Receiver<Job<R>>) = channel();
    offered_to.warmed(Some(sender));
    drop(offered_to);
    let Ok(job) = jobs.recv() else {
        // The pool is gone: dispose of the isolate and end.
        return;
    };
    drop(jobs);
    let (cell, context) = *job;
    debug_assert_eq!(warm.heap_limit_bytes(), cell.limits.heap_limit_bytes);
    driver::run_warm(warm, cell, context);
}
