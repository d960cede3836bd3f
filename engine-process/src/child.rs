//! The child side: the loop an engine process runs. The binary that hosts engine processes (the
//! `codemode` binary in its hidden engine-host mode) builds an engine and calls [`serve`].
//!
//! The channel is the process's standard input, a Unix socket the parent made. The loop reads
//! the settings, builds the engine, sandboxes the process, says it is ready, then starts cells and
//! forwards their commands; each cell's events go back on a task of a small forwarding runtime.
//! When the parent goes away (the channel closes), the process ends.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use codemode_engine::{Engine, EngineHandles, event_channel};

use crate::wire::{
    self, CellNumber, ChildSettings, HardStopKind, Probe, ToChild, ToParent, WireEvent,
};

/// How many events of one cell may wait in the child before its runtime thread blocks.
const EVENT_QUEUE: usize = 64;

/// The channel's writing end, shared by the forwarders and [`hard_stop`].
static WRITER: OnceLock<Mutex<UnixStream>> = OnceLock::new();

/// The settings the parent sent, for the binary's engine (see [`serve`]).
pub use crate::wire::ChildSettings as Settings;

/// Runs the engine-process loop on this process's standard input until the parent goes away.
/// `make_engine` builds the engine from the parent's settings (and should warm it: the process is
/// reported ready once it returns). Returns the process's exit code.
pub fn serve(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, String>,
) -> std::process::ExitCode {
    match run(make_engine) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("engine process: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(
    make_engine: impl FnOnce(&ChildSettings) -> Result<Box<dyn Engine>, String>,
) -> Result<(), String> {
    let channel = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .map_err(|error| format!("the channel to the parent is not open: {error}"))?;
    let mut reader = channel;
    let writer = reader
        .try_clone()
        .map_err(|error| format!("cannot share the channel: {error}"))?;
    let _ = WRITER.set(Mutex::new(writer));
    let settings = match wire::read::<ToChild>(&mut reader) {
        Ok(Some(ToChild::Settings(settings))) => settings,
        Ok(None) => return Ok(()),
        Ok(Some(other)) => return Err(format!("expected the settings first, got {other:?}")),
        Err(error) => return Err(format!("cannot read the settings: {error}")),
    };
    let engine = match make_engine(&settings) {
        Ok(engine) => engine,
        Err(error) => {
            send(&ToParent::Failed {
                error: error.clone(),
            });
            return Err(error);
        }
    };
    if let Err(error) = crate::sandbox::enter(&settings) {
        send(&ToParent::Failed {
            error: error.clone(),
        });
        return Err(error);
    }
    let forwarding = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|error| format!("cannot build the forwarding runtime: {error}"))?;
    let forwarder = forwarding.handle().clone();
    std::thread::Builder::new()
        .name("codemode-engine-forward".into())
        .spawn(move || forwarding.block_on(std::future::pending::<()>()))
        .map_err(|error| format!("cannot start the forwarding thread: {error}"))?;
    send(&ToParent::Ready {
        engine: engine.describe(),
    });
    let cells: Arc<Mutex<HashMap<CellNumber, EngineHandles>>> = Arc::default();
    loop {
        let message = match wire::read::<ToChild>(&mut reader) {
            Ok(Some(message)) => message,
            // The parent is gone: so are the cells' owners.
            Ok(None) => return Ok(()),
            Err(error) => return Err(format!("the channel to the parent broke: {error}")),
        };
        match message {
            ToChild::Settings(_) => {}
            ToChild::Start { cell, start } => {
                let (events, mut receiver) = event_channel(Some(EVENT_QUEUE));
                match engine.start(start.into_start(cell.to_string()), events) {
                    Ok(handles) => {
                        lock(&cells).insert(cell, handles);
                        let cells = Arc::clone(&cells);
                        forwarder.spawn(async move {
                            while let Some(event) = receiver.recv().await {
                                if let Some(event) = WireEvent::from_event(event) {
                                    send(&ToParent::Event { cell, event });
                                }
                            }
                            lock(&cells).remove(&cell);
                            send(&ToParent::Ended { cell });
                        });
                    }
                    Err(error) => send(&ToParent::StartFailed {
                        cell,
                        error: error.to_string(),
                    }),
                }
            }
            ToChild::Command { cell, command } => {
                if let Some(handles) = lock(&cells).get(&cell) {
                    let _ = handles.commands.send(command.into());
                }
            }
            ToChild::Control { cell, control } => {
                if let Some(handles) = lock(&cells).get(&cell) {
                    let _ = handles.control.send(control.into());
                }
            }
            ToChild::Terminate { cell } => {
                if let Some(handles) = lock(&cells).get(&cell) {
                    handles.terminate.terminate();
                }
            }
            ToChild::Probe { what } if settings.test_hooks => {
                let (allowed, detail) = probe(what);
                send(&ToParent::ProbeResult { allowed, detail });
            }
            ToChild::Probe { .. } => {}
        }
    }
}

/// Ends this engine process because a cell cannot be stopped from inside the engine, or the
/// engine failed: tells the parent which cell and why (`call_id` is the number the parent gave
/// the cell), then aborts. Safe to call from any thread, including inside the engine's own fatal
/// error handler.
pub fn hard_stop(call_id: Option<&str>, reason: HardStopKind, message: &str) -> ! {
    let frame = wire::encode(&ToParent::HardStop {
        cell: call_id.and_then(|id| id.parse().ok()),
        reason,
        message: message.chars().take(2000).collect(),
    });
    if let (Ok(frame), Some(writer)) = (frame, WRITER.get()) {
        // A forwarder may hold the writer in the middle of a frame: wait a little for it, but
        // never forever (the parent then sees a crash without the reason).
        let deadline = Instant::now() + Duration::from_millis(200);
        loop {
            match writer.try_lock() {
                Ok(mut writer) => {
                    let _ = writer.write_all(&frame);
                    break;
                }
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    let _ = poisoned.into_inner().write_all(&frame);
                    break;
                }
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => break,
            }
        }
    }
    std::process::abort()
}

fn send(message: &ToParent) {
    let Ok(frame) = wire::encode(message) else {
        tracing::error!("engine process: a message could not be encoded");
        return;
    };
    if let Some(writer) = WRITER.get() {
        let mut writer = writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A parent that is gone ends the process through the reading side.
        let _ = writer.write_all(&frame);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Tries what `what` names, for tests of the sandbox.
fn probe(what: Probe) -> (bool, String) {
    let outcome = match what {
        Probe::OpenForWriting => std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(format!("/tmp/codemode-probe-{}", std::process::id()))
            .map(|_| ()),
        Probe::Socket => std::net::UdpSocket::bind("127.0.0.1:0").map(|_| ()),
        Probe::Exec => std::process::Command::new("/bin/true").status().map(|_| ()),
    };
    match outcome {
        Ok(()) => (true, "allowed".to_owned()),
        Err(error) => (false, error.to_string()),
    }
}
