//! A control group of its own for each engine process, where the server may make one: the
//! kernel's own bound on the threads and the memory of a process that native code may have taken
//! over (a V8 exploit), whatever system calls it makes. `RLIMIT_DATA` and the seccomp filter
//! bound the memory it maps; only a control group bounds the threads of a process run by root
//! (`RLIMIT_NPROC` does not bind root) and the memory it really touches.
//!
//! Both layouts are read from `/proc/self/mountinfo` and `/proc/self/cgroup`:
//! - **cgroup v2**: a child of the server's own group, where that group delegates the `pids` and
//!   `memory` controllers to its children (`cgroup.subtree_control` lists them, as a
//!   `Delegate=yes` systemd unit arranges); `pids.max` and `memory.max`, swap off
//!   (`memory.swap.max`).
//! - **cgroup v1**: a child of the server's group in the `pids` hierarchy and one in the `memory`
//!   hierarchy; `pids.max` and `memory.limit_in_bytes`.
//!
//! Where neither can be made (no permission, no controller), engine processes run without one,
//! and SECURITY.md says what still holds. The parent makes the group before the child is given
//! its settings and moves the child in at once: the child runs no cell before it is in it. A group
//! is removed when its process has been reaped.

use std::path::{Path, PathBuf};

/// How the groups of engine processes are named: `codemode-engine-SERVER-POOL-PROCESS`, with the
/// server's process id first.
pub(crate) const PREFIX: &str = "codemode-engine-";

/// The controllers an engine process is bounded by, where they were found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cgroups {
    /// The groups under which each engine process gets one of its own, with the files of its
    /// limits: one for cgroup v2, one per controller for v1. Empty: none can be made here.
    parents: Vec<Parent>,
}

#[derive(Debug, Clone)]
struct Parent {
    /// The folder of the server's group in this hierarchy.
    folder: PathBuf,
    /// What this hierarchy bounds.
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// cgroup v2, with both controllers delegated.
    Unified,
    /// A cgroup v1 hierarchy of `pids`.
    Pids,
    /// A cgroup v1 hierarchy of `memory`.
    Memory,
}

/// What an engine process may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Threads (every thread is a task the `pids` controller counts).
    pub(crate) threads: u64,
    /// Memory it touches, in bytes.
    pub(crate) memory_bytes: u64,
}

/// One engine process's groups; removed when dropped (once the process has been reaped).
#[derive(Debug)]
pub(crate) struct ProcessCgroup {
    folders: Vec<PathBuf>,
}

impl Cgroups {
    /// The hierarchies of this system where groups can be made, from this process's mounts and
    /// groups; empty where none can (and on systems without cgroups).
    pub(crate) fn discover() -> Cgroups {
        let (Ok(mounts), Ok(memberships)) = (
            std::fs::read_to_string("/proc/self/mountinfo"),
            std::fs::read_to_string("/proc/self/cgroup"),
        ) else {
            return Cgroups::default();
        };
        let mut parents = Vec::new();
        for mount in mounts.lines().filter_map(Mount::parse) {
            let kind = match mount.filesystem.as_str() {
                "cgroup2" => Kind::Unified,
                "cgroup" if mount.options.split(',').any(|option| option == "pids") => Kind::Pids,
                "cgroup" if mount.options.split(',').any(|option| option == "memory") => {
                    Kind::Memory
                }
                _ => continue,
            };
            let membership = memberships.lines().find_map(|line| {
                let mut fields = line.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                let matches = match kind {
                    Kind::Unified => controllers.is_empty(),
                    Kind::Pids => controllers.split(',').any(|name| name == "pids"),
                    Kind::Memory => controllers.split(',').any(|name| name == "memory"),
                };
                matches.then(|| path.to_owned())
            });
            let Some(membership) = membership else {
                continue;
            };
            // The group's path is relative to the hierarchy's root; the mount shows the part of
            // it below the mount's own root.
            let Ok(below) = Path::new(&membership).strip_prefix(&mount.root) else {
                continue;
            };
            let folder = mount.point.join(below);
            if kind == Kind::Unified && !delegates_pids_and_memory(&folder) {
                continue;
            }
            if !parents.iter().any(|parent: &Parent| parent.kind == kind) {
                parents.push(Parent { folder, kind });
            }
        }
        // v2 with both controllers wins; v1 needs both hierarchies.
        let unified: Vec<Parent> = parents
            .iter()
            .filter(|parent| parent.kind == Kind::Unified)
            .cloned()
            .collect();
        let parents = if !unified.is_empty() {
            unified
        } else if parents.iter().any(|parent| parent.kind == Kind::Pids)
            && parents.iter().any(|parent| parent.kind == Kind::Memory)
        {
            parents
        } else {
            Vec::new()
        };
        let cgroups = Cgroups { parents };
        cgroups.remove_stale();
        cgroups
    }

    /// Removes the empty groups that servers which have ended left behind (a server that exits
    /// without reaping its engine processes cannot remove their groups): those named for a
    /// server process that no longer exists. A group that still holds a process is kept (the
    /// kernel refuses to remove it).
    fn remove_stale(&self) {
        for parent in &self.parents {
            let Ok(entries) = std::fs::read_dir(&parent.folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(server) = name
                    .to_str()
                    .and_then(|name| name.strip_prefix(PREFIX))
                    .and_then(|rest| rest.split('-').next())
                    .and_then(|pid| pid.parse::<u32>().ok())
                else {
                    continue;
                };
                if !Path::new(&format!("/proc/{server}")).exists() {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
    }

    /// Makes the groups of one engine process, named `name`, with `bounds`; `None` where they
    /// cannot be made (what was made is removed again).
    pub(crate) fn create(&self, name: &str, bounds: Bounds) -> Option<ProcessCgroup> {
        if self.parents.is_empty() {
            return None;
        }
        let mut made = ProcessCgroup {
            folders: Vec::new(),
        };
        for parent in &self.parents {
            let folder = parent.folder.join(name);
            if let Err(error) = std::fs::create_dir(&folder) {
                tracing::debug!(folder = %folder.display(), %error, "cannot make a control group for an engine process");
                return None;
            }
            made.folders.push(folder.clone());
            let limits: &[(&str, String)] = match parent.kind {
                Kind::Unified => &[
                    ("pids.max", bounds.threads.to_string()),
                    ("memory.max", bounds.memory_bytes.to_string()),
                    ("memory.swap.max", "0".to_owned()),
                ],
                Kind::Pids => &[("pids.max", bounds.threads.to_string())],
                Kind::Memory => &[("memory.limit_in_bytes", bounds.memory_bytes.to_string())],
            };
            for (file, value) in limits {
                let written = std::fs::write(folder.join(file), value);
                // Swap may be off in the kernel, and then has no file to set.
                if let Err(error) = written
                    && *file != "memory.swap.max"
                {
                    tracing::debug!(folder = %folder.display(), file, %error, "cannot bound an engine process's control group");
                    return None;
                }
            }
        }
        Some(made)
    }
}

impl ProcessCgroup {
    /// Moves process `pid`, every thread of it, into the groups.
    pub(crate) fn admit(&self, pid: u32) -> std::io::Result<()> {
        for folder in &self.folders {
            std::fs::write(folder.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// The folders of the groups, for tests that read their limits.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn folders(&self) -> &[PathBuf] {
        &self.folders
    }
}

impl Drop for ProcessCgroup {
    fn drop(&mut self) {
        // A group can go once it holds no process; it is dropped after its process was reaped.
        for folder in self.folders.iter().rev() {
            if let Err(error) = std::fs::remove_dir(folder) {
                tracing::debug!(folder = %folder.display(), %error, "cannot remove an engine process's control group");
            }
        }
    }
}

/// Whether the v2 group at `folder` hands the `pids` and `memory` controllers to its children.
fn delegates_pids_and_memory(folder: &Path) -> bool {
    std::fs::read_to_string(folder.join("cgroup.subtree_control")).is_ok_and(|controllers| {
        let enabled: Vec<&str> = controllers.split_whitespace().collect();
        enabled.contains(&"pids") && enabled.contains(&"memory")
    })
}

/// The fields of a `/proc/self/mountinfo` line this module reads.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// The folder of the file system the mount shows (field 4).
    root: PathBuf,
    /// Where it is mounted (field 5).
    point: PathBuf,
    /// The file-system type, after the ` - ` separator.
    filesystem: String,
    /// Its super-block options (the controllers of a cgroup v1 hierarchy).
    options: String,
}

impl Mount {
    fn parse(line: &str) -> Option<Mount> {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let mut after = after.split(' ');
        let filesystem = after.next()?.to_owned();
        let _source = after.next()?;
        let options = after.next().unwrap_or_default().to_owned();
        Some(Mount {
            root: PathBuf::from(unescape(fields.get(3)?)),
            point: PathBuf::from(unescape(fields.get(4)?)),
            filesystem,
            options,
        })
    }
}

/// A mountinfo path with its octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escape = bytes.get(index + 1..index + 4).and_then(|digits| {
            std::str::from_utf8(digits)
                .ok()
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        });
        match (bytes[index], escape) {
            (b'\\', Some(byte)) => {
                decoded.push(byte);
                index += 4;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read_with_their_escapes() {
        let mount =
            Mount::parse("39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids")
                .unwrap();
        assert_eq!(
            mount,
            Mount {
                root: "/".into(),
                point: "/sys/fs/cgroup/pids".into(),
                filesystem: "cgroup".into(),
                options: "rw,pids".into(),
            }
        );
        let spaced = Mount::parse(
            "41 31 0:38 /a\\040b /sys/fs/cgroup/unified rw shared:9 - cgroup2 cgroup2 rw",
        )
        .unwrap();
        assert_eq!(spaced.root, PathBuf::from("/a b"));
        assert_eq!(spaced.filesystem, "cgroup2");
        assert_eq!(Mount::parse("no separator"), None);
    }
}
