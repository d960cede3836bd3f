//! How a stdio server's process ended ([`ExitWatch`]): a thread waits for its exit with `waitid`
//! and `WNOWAIT`, which reads the status without reaping the process (the runtime that spawned
//! it still does), so that a server that dies at start can be reported "exited with status 3".

use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use parking_lot::Mutex;

/// How one child process ended, once it has.
#[derive(Debug, Clone, Default)]
pub(super) struct ExitWatch(Arc<Mutex<Option<String>>>);

impl ExitWatch {
    /// Watches child process `pid` until it ends.
    pub(super) fn start(pid: u32) -> Self {
        let watch = ExitWatch::default();
        let Ok(pid) = i32::try_from(pid) else {
            return watch;
        };
        let slot = Arc::clone(&watch.0);
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
                    *slot.lock() = Some(ended);
                    return;
                }
            });
        if let Err(error) = watching {
            tracing::debug!(%error, "cannot watch a server's exit; its status will not be reported");
        }
        watch
    }

    /// "with status N" or "on signal SIGKILL", once the process has ended.
    pub(super) fn ended(&self) -> Option<String> {
        self.0.lock().clone()
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
}
