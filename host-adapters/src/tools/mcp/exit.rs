//! How a stdio server's process ended ([`ExitWatch`]), so that a server that dies at start can be
//! reported "exited with status 3". Two witnesses fill one slot, whichever comes first: a thread
//! that waits for the exit with `waitid` and `WNOWAIT` (which reads the status without reaping
//! the process), and a wrapper around the spawned child ([`ExitWatch::recorder`]) that keeps the
//! status the runtime reads when it reaps the process. The wrapper closes the race the thread
//! alone loses on a loaded machine: a transport dropped after a failed handshake reaps its child
//! at once, and a reaped process has no status left for `waitid` to read.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use parking_lot::Mutex;
use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};

/// How one child process ended, once it has.
#[derive(Debug, Clone, Default)]
pub(super) struct ExitWatch(Arc<Mutex<Option<String>>>);

impl ExitWatch {
    /// Watches child process `pid` until it ends.
    #[cfg(test)]
    fn start(pid: u32) -> Self {
        let watch = ExitWatch::default();
        watch.watch(pid);
        watch
    }

    /// A wrapper for the command that spawns the process: it keeps the status whoever reaps
    /// the process reads.
    pub(super) fn recorder(&self) -> impl CommandWrapper + 'static {
        RecordExit(self.clone())
    }

    /// Watches child process `pid` from a thread until it ends.
    pub(super) fn watch(&self, pid: u32) {
        let Ok(pid) = i32::try_from(pid) else {
            return;
        };
        let slot = Arc::clone(&self.0);
        let watching = std::thread::Builder::new()
            .name("codemode-exit-watch".to_owned())
            .spawn(move || {
                loop {
                    let ended = match waitid(
                        Id::Pid(Pid::from_raw(pid)),
                        WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
                    ) {
                        Ok(WaitStatus::Exited(_, code)) => format!("with status {code}"),
                        Ok(WaitStatus::Signaled(_, signal, _)) => format!("on signal {signal}"),
                        Err(Errno::EINTR) | Ok(_) => continue,
                        // Reaped before it could be read, or not a child: nothing to say.
                        Err(_) => return,
                    };
                    slot.lock().get_or_insert(ended);
                    return;
                }
            });
        if let Err(error) = watching {
            tracing::debug!(%error, "cannot watch a server's exit; its status will not be reported");
        }
    }

    /// Keeps `status`, read when the process was reaped, unless a witness already did.
    fn record(&self, status: ExitStatus) {
        let ended = match (status.code(), status.signal()) {
            (Some(code), _) => format!("with status {code}"),
            (None, Some(signal)) => match Signal::try_from(signal) {
                Ok(signal) => format!("on signal {signal}"),
                Err(_) => format!("on signal {signal}"),
            },
            (None, None) => return,
        };
        self.0.lock().get_or_insert(ended);
    }

    /// "with status N" or "on signal SIGKILL", once the process has ended.
    pub(super) fn ended(&self) -> Option<String> {
        self.0.lock().clone()
    }
}

/// The command wrapper [`ExitWatch::recorder`] returns.
#[derive(Debug)]
struct RecordExit(ExitWatch);

impl CommandWrapper for RecordExit {
    fn wrap_child(
        &mut self,
        child: Box<dyn ChildWrapper>,
        _core: &CommandWrap,
    ) -> std::io::Result<Box<dyn ChildWrapper>> {
        Ok(Box::new(RecordedChild {
            child,
            watch: self.0.clone(),
        }))
    }
}

/// A spawned child whose exit status, once read, is kept in its [`ExitWatch`].
#[derive(Debug)]
struct RecordedChild {
    child: Box<dyn ChildWrapper>,
    watch: ExitWatch,
}

impl ChildWrapper for RecordedChild {
    fn inner(&self) -> &dyn ChildWrapper {
        self.child.as_ref()
    }

    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self.child.as_mut()
    }

    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self.child
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let status = self.child.try_wait()?;
        if let Some(status) = status {
            self.watch.record(status);
        }
        Ok(status)
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = std::io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(async move {
            let status = self.child.wait().await?;
            self.watch.record(status);
            Ok(status)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_status_and_a_signal_are_read() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let watch = ExitWatch::start(child.id());
        let started = std::time::Instant::now();
        while watch.ended().is_none() && started.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(watch.ended().as_deref(), Some("with status 3"));
        // Not reaped by the watch: its parent still can.
        assert_eq!(child.wait().unwrap().code(), Some(3));
        let mut killed = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let watch = ExitWatch::start(killed.id());
        killed.kill().unwrap();
        // Reaped only once the watch has read it (as the runtime reaps a server later): a
        // child reaped first has no status left to read.
        let started = std::time::Instant::now();
        while watch.ended().is_none() && started.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(watch.ended().as_deref(), Some("on signal SIGKILL"));
        killed.wait().unwrap();
    }

    #[tokio::test]
    async fn the_status_is_kept_when_the_runtime_reaps_the_child_first() {
        // As a transport dropped after a failed handshake does: kill and reap at once, with no
        // thread watching. A reaped process has no status left for `waitid`; the wrapper kept it.
        let watch = ExitWatch::default();
        let mut command = CommandWrap::from(tokio::process::Command::new("sh"));
        command.command_mut().args(["-c", "exit 4"]);
        command.wrap(watch.recorder());
        let mut child = command.spawn().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        Box::into_pin(child.kill()).await.unwrap();
        assert_eq!(watch.ended().as_deref(), Some("with status 4"));
    }
}
