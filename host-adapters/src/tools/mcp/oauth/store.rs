//! Where a user's OAuth tokens for one server live ([`TokenFile`]): a JSON file, readable by the
//! user alone (0600, in a 0700 folder), under the XDG state folder
//! (`$XDG_STATE_HOME/codemode/oauth/`, by default `~/.local/state/codemode/oauth/`), named by a
//! digest of the server's URL so that one server keeps its tokens across configuration files.
//! Written whole to a temporary file and renamed over the old one: a crash never leaves half a
//! token behind.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The folder of every token file: `$XDG_STATE_HOME/codemode/oauth`, or
/// `$HOME/.local/state/codemode/oauth`; `None` when neither variable is set.
pub fn token_folder() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|folder| !folder.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".local/state")))?;
    Some(state.join("codemode").join("oauth"))
}

/// What a token file holds: the server it is for (for a person reading the folder) and the
/// credentials.
#[derive(Serialize, Deserialize)]
struct Saved {
    server_url: String,
    credentials: StoredCredentials,
}

/// The token file of one server URL.
#[derive(Debug, Clone)]
pub struct TokenFile {
    url: String,
    path: Option<PathBuf>,
}

impl TokenFile {
    /// The file for the server at `url`.
    pub fn for_url(url: &str) -> Self {
        let digest = Sha256::digest(url.as_bytes());
        let name: String = digest[..12]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        TokenFile {
            url: url.to_owned(),
            path: token_folder().map(|folder| folder.join(format!("{name}.json"))),
        }
    }

    /// The file for the server at `url` in `folder` instead of the user's state folder.
    pub fn in_folder(folder: &Path, url: &str) -> Self {
        let mut file = TokenFile::for_url(url);
        let name = file
            .path
            .as_ref()
            .and_then(|path| path.file_name().map(ToOwned::to_owned))
            .unwrap_or_else(|| "tokens.json".into());
        file.path = Some(folder.join(name));
        file
    }

    /// Where it is.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether tokens were saved for the server.
    pub fn exists(&self) -> bool {
        self.path.as_ref().is_some_and(|path| path.is_file())
    }

    /// Removes the file; `Ok(false)` when there was none.
    pub fn remove(&self) -> std::io::Result<bool> {
        match &self.path {
            None => Ok(false),
            Some(path) => match std::fs::remove_file(path) {
                Ok(()) => Ok(true),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(error) => Err(error),
            },
        }
    }

    fn path_or_error(&self) -> Result<&Path, AuthError> {
        self.path.as_deref().ok_or_else(|| {
            AuthError::CredentialStoreError(
                "neither XDG_STATE_HOME nor HOME is set: there is nowhere to keep OAuth tokens"
                    .to_owned(),
            )
        })
    }

    fn write(&self, credentials: StoredCredentials) -> std::io::Result<()> {
        let path = self
            .path
            .as_ref()
            .ok_or_else(|| std::io::Error::other("no folder for OAuth tokens"))?;
        let folder = path.parent().expect("a token file is in a folder");
        std::fs::create_dir_all(folder)?;
        std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700))?;
        let text = serde_json::to_vec_pretty(&Saved {
            server_url: self.url.clone(),
            credentials,
        })
        .map_err(std::io::Error::other)?;
        let temporary = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    }
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let path = self.path_or_error()?;
        match std::fs::read(path) {
            Ok(text) => serde_json::from_slice::<Saved>(&text)
                .map(|saved| Some(saved.credentials))
                .map_err(|error| {
                    AuthError::CredentialStoreError(format!(
                        "{} is not a token file codemode wrote ({error}); remove it with \
                         `codemode logout`",
                        path.display()
                    ))
                }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(AuthError::CredentialStoreError(format!(
                "cannot read {}: {error}",
                path.display()
            ))),
        }
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let path = self.path_or_error()?.to_path_buf();
        self.write(credentials).map_err(|error| {
            AuthError::CredentialStoreError(format!("cannot write {}: {error}", path.display()))
        })
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remove()
            .map(|_| ())
            .map_err(|error| AuthError::CredentialStoreError(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_are_written_whole_for_the_user_alone_and_removed() {
        let folder = std::env::temp_dir().join(format!("codemode-tokens-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        let file = TokenFile::in_folder(&folder.join("oauth"), "https://example.com/mcp");
        assert!(!file.exists());
        assert!(file.load().await.unwrap().is_none());
        let credentials =
            StoredCredentials::new("client-1".into(), None, vec!["read".into()], Some(1));
        file.save(credentials).await.unwrap();
        assert!(file.exists());
        let path = file.path().unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let loaded = file.load().await.unwrap().unwrap();
        assert_eq!(
            (loaded.client_id.as_str(), loaded.granted_scopes.as_slice()),
            ("client-1", ["read".to_owned()].as_slice())
        );
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            text.contains("\"server_url\": \"https://example.com/mcp\""),
            "{text}"
        );
        // No temporary file is left beside it.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
        // Another server's file is another file.
        assert_ne!(
            TokenFile::in_folder(&folder, "https://other.example.com/mcp")
                .path()
                .unwrap()
                .file_name(),
            path.file_name()
        );
        std::fs::write(path, "not json").unwrap();
        let error = file.load().await.unwrap_err().to_string();
        assert!(error.contains("codemode logout"), "{error}");
        assert!(file.remove().unwrap());
        assert!(!file.remove().unwrap());
        std::fs::remove_dir_all(folder).unwrap();
    }
}
