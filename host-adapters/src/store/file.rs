//! The file store: one JSON document per session under a directory, so stored values survive a
//! process restart (durable sessions).
//!
//! A document is `{"format_version": 1, "session": "<id>", "values": {...}}` in
//! `session-<id>.json` (the id percent-encoded where it is not a plain file-name character). A
//! commit takes an exclusive lock on `session-<id>.lock` (so two processes never interleave
//! commits to one session), re-reads the document, merges the writes by key, writes a temporary
//! file, fsyncs it, renames it over the document and fsyncs the directory: a crash at any point
//! leaves either the old document or the new one. A document that cannot be read as this format is
//! reported with its path, and is never treated as empty or overwritten unless the caller asks
//! ([`FileStore::discard_corrupt`]).

use codemode_protocol::StoredValues;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use codemode_session::{SessionKey, Store, StoreError, StoreErrorKind};
use serde::{Deserialize, Serialize};

/// The format this store writes and reads.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Document {
    format_version: u32,
    session: String,
    values: StoredValues,
}

/// Stored values in files under one directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    directory: PathBuf,
}

impl FileStore {
    /// A store in `directory`, created if missing.
    pub fn open(directory: impl Into<PathBuf>) -> Result<Self, StoreError> {
        use std::os::unix::fs::DirBuilderExt;
        let directory = directory.into();
        // Only the server's user may list or read the documents: they hold every session's
        // values.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&directory)
            .map_err(|error| {
                StoreError::new(format!(
                    "cannot create the store directory {}: {error}",
                    directory.display()
                ))
            })?;
        Ok(FileStore { directory })
    }

    /// The directory the documents are in.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The document of `session`.
    pub fn document_path(&self, session: &str) -> PathBuf {
        self.directory
            .join(format!("session-{}.json", file_name_part(session)))
    }

    fn lock_path(&self, session: &str) -> PathBuf {
        self.directory
            .join(format!("session-{}.lock", file_name_part(session)))
    }

    /// Moves a document that cannot be read aside (to `<name>.corrupt-<unix seconds>`), so the
    /// session starts empty. Only on the caller's request: the store never does this by itself.
    pub fn discard_corrupt(&self, session: &str) -> Result<Option<PathBuf>, StoreError> {
        let _lock = self.lock(session)?;
        let path = self.document_path(session);
        if read_document(&path, session).is_ok() {
            return Ok(None);
        }
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or_default();
        let aside = path.with_extension(format!("json.corrupt-{seconds}"));
        std::fs::rename(&path, &aside).map_err(|error| io_error("move aside", &path, error))?;
        Ok(Some(aside))
    }

    /// The name of a commit's temporary file, without the writer's process id.
    fn temporary_prefix(&self, session: &str) -> String {
        format!(".session-{}.json.tmp-", file_name_part(session))
    }

    /// Removes temporary files that writers killed mid-commit left behind. Called with the
    /// session's lock held, so no live writer of this session has one open.
    fn remove_abandoned_temporaries(&self, session: &str) {
        let prefix = self.temporary_prefix(session);
        let Ok(entries) = std::fs::read_dir(&self.directory) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn lock(&self, session: &str) -> Result<File, StoreError> {
        let path = self.lock_path(session);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|error| io_error("open the lock file", &path, error))?;
        // Released by the kernel if the process dies, and when `file` is dropped.
        file.lock()
            .map_err(|error| io_error("lock", &path, error))?;
        Ok(file)
    }
}

/// File I/O (and the wait for another process's lock) runs on tokio's blocking pool, so a slow
/// disk never holds up a worker thread.
#[async_trait]
impl Store for FileStore {
    async fn load(&self, session: &SessionKey) -> Result<StoredValues, StoreError> {
        let store = self.clone();
        let session = session.to_string();
        blocking(move || store.load_blocking(&session)).await
    }

    async fn commit(&self, session: &SessionKey, writes: &StoredValues) -> Result<(), StoreError> {
        let store = self.clone();
        let session = session.to_string();
        let writes = writes.clone();
        blocking(move || store.commit_blocking(&session, &writes)).await
    }

    async fn check(&self) -> Result<(), StoreError> {
        let directory = self.directory.clone();
        blocking(move || {
            std::fs::read_dir(&directory).map(drop).map_err(|error| {
                StoreError::of(
                    StoreErrorKind::Unavailable,
                    format!(
                        "cannot read the store's directory {}: {error}",
                        directory.display()
                    ),
                )
            })
        })
        .await
    }
}

/// Runs `work` on the blocking pool; a panic there is an error of the store, not of the caller.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| {
            Err(StoreError::new(format!(
                "the file store's worker failed: {error}"
            )))
        })
}

impl FileStore {
    /// [`Store::load`], on the calling thread.
    pub fn load_blocking(&self, session: &str) -> Result<StoredValues, StoreError> {
        read_document(&self.document_path(session), session)
    }

    /// [`Store::commit`], on the calling thread: for a process that has no async runtime.
    pub fn commit_blocking(&self, session: &str, writes: &StoredValues) -> Result<(), StoreError> {
        let _lock = self.lock(session)?;
        let path = self.document_path(session);
        // Another process may have committed since this one loaded: merge into what is on disk.
        let mut values = read_document(&path, session)?;
        values.extend(
            writes
                .iter()
                .map(|(key, value)| (key.clone(), value.clone())),
        );
        let document = Document {
            format_version: FORMAT_VERSION,
            session: session.to_owned(),
            values,
        };
        self.remove_abandoned_temporaries(session);
        let bytes = serde_json::to_vec(&document).map_err(|error| {
            StoreError::new(format!("cannot encode the stored values: {error}"))
        })?;
        let temporary = self.directory.join(format!(
            "{}{}",
            self.temporary_prefix(session),
            std::process::id()
        ));
        let written = (|| {
            let mut file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()
        })();
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(io_error("write", &temporary, error));
        }
        std::fs::rename(&temporary, &path).map_err(|error| {
            let _ = std::fs::remove_file(&temporary);
            io_error("replace", &path, error)
        })?;
        File::open(&self.directory)
            .and_then(|directory| directory.sync_all())
            .map_err(|error| io_error("sync the directory of", &path, error))?;
        Ok(())
    }
}

/// The values in the document at `path`: none if it does not exist, an error naming the file if
/// it cannot be read as a document of `session` in this format.
fn read_document(path: &Path, session: &str) -> Result<StoredValues, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(StoredValues::new()),
        Err(error) => return Err(io_error("read", path, error)),
    };
    let corrupt = |why: String| {
        StoreError::of(
            StoreErrorKind::Corrupt,
            format!(
                "the stored values of session {session:?} in {} cannot be read: {why}. The file was left \
             as it is; restore it from a backup, or move it aside to start the session empty",
                path.display()
            ),
        )
    };
    let document: Document = serde_json::from_slice(&bytes).map_err(|error| {
        if error.is_eof() {
            corrupt(format!("it is truncated ({error})"))
        } else {
            corrupt(format!("it is not a valid document ({error})"))
        }
    })?;
    if document.format_version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "it has format version {}, and this program reads version {FORMAT_VERSION}",
            document.format_version
        )));
    }
    if document.session != session {
        return Err(corrupt(format!(
            "it belongs to session {:?}",
            document.session
        )));
    }
    Ok(document.values)
}

/// An I/O error: the disk refused (full, read-only, gone), which may pass.
fn io_error(action: &str, path: &Path, error: std::io::Error) -> StoreError {
    StoreError::of(
        StoreErrorKind::Unavailable,
        format!("cannot {action} {}: {error}", path.display()),
    )
    .with_cause(error)
}

/// `session` as part of a file name: letters, digits, `-` and `_` as they are, every other byte
/// as `%XX`, so distinct ids never share a file and no id can leave the directory.
fn file_name_part(session: &str) -> String {
    let mut part = String::with_capacity(session.len());
    for byte in session.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            part.push(byte as char);
        } else {
            part.push_str(&format!("%{byte:02X}"));
        }
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn temporary_directory(name: &str) -> PathBuf {
        let directory =
            std::env::temp_dir().join(format!("codemode-file-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        directory
    }

    #[test]
    fn commits_merge_by_key_and_load_reads_them_back() {
        let store = FileStore::open(temporary_directory("merge")).unwrap();
        assert!(store.load_blocking("s").unwrap().is_empty());
        store
            .commit_blocking(
                "s",
                &codemode_protocol::stored_values_from([
                    ("a".to_owned(), json!(1)),
                    ("b".to_owned(), json!([2])),
                ]),
            )
            .unwrap();
        store
            .commit_blocking(
                "s",
                &codemode_protocol::stored_values_from([("a".to_owned(), json!({"x": 3}))]),
            )
            .unwrap();
        assert_eq!(
            store.load_blocking("s").unwrap(),
            codemode_protocol::stored_values_from([
                ("a".to_owned(), json!({"x": 3})),
                ("b".to_owned(), json!([2]))
            ])
        );
        assert!(store.load_blocking("other").unwrap().is_empty());
        let _ = std::fs::remove_dir_all(store.directory());
    }

    #[test]
    fn session_ids_become_safe_distinct_file_names() {
        assert_eq!(file_name_part("plain-id_1"), "plain-id_1");
        assert_eq!(file_name_part("../etc/passwd"), "%2E%2E%2Fetc%2Fpasswd");
        assert_ne!(file_name_part("a b"), file_name_part("a_b"));
    }

    #[test]
    fn a_corrupt_document_is_reported_with_its_path_and_never_overwritten() {
        let store = FileStore::open(temporary_directory("corrupt")).unwrap();
        let path = store.document_path("s");
        for (contents, why) in [
            (
                &b"{\"format_version\": 1, \"session\": \"s\", \"val"[..],
                "it is truncated",
            ),
            (&b"not json at all"[..], "it is not a valid document"),
            (
                &b"{\"format_version\": 9, \"session\": \"s\", \"values\": {}}"[..],
                "format version 9",
            ),
        ] {
            std::fs::write(&path, contents).unwrap();
            let error = store.load_blocking("s").unwrap_err().to_string();
            assert!(error.contains(&path.display().to_string()), "{error}");
            assert!(error.contains(why), "{error}");
            let refused = store
                .commit_blocking(
                    "s",
                    &codemode_protocol::stored_values_from([("k".to_owned(), json!(1))]),
                )
                .unwrap_err();
            assert_eq!(refused.to_string(), error);
            assert_eq!(
                std::fs::read(&path).unwrap(),
                contents,
                "the corrupt file was overwritten"
            );
        }
        let aside = store.discard_corrupt("s").unwrap().expect("moved aside");
        assert!(aside.exists());
        assert!(store.load_blocking("s").unwrap().is_empty());
        let _ = std::fs::remove_dir_all(store.directory());
    }
}
