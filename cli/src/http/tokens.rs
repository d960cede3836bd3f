//! The tokens of `codemode mcp --http`: read once at start-up from `--auth-token-file` (lines of
//! `TENANT TOKEN`, a file private to its owner) or `CODEMODE_AUTH_TOKEN`, or switched off with
//! `--no-auth` (loopback only); weak tokens and shared files are refused, naming the fix.

use std::path::Path;

use super::tenant::{DEFAULT_TENANT, check_name};

/// The shortest token accepted: a guessable token is no protection.
pub(super) const MIN_TOKEN_LENGTH: usize = 16;

/// How the server authenticates, from the flags and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// `(tenant, token)` pairs.
    Tokens(Vec<(String, String)>),
    /// `--no-auth`.
    Off,
}

/// Reads `--auth-token-file` (lines of `TENANT TOKEN`; blank lines and `#` comments skipped) or
/// `CODEMODE_AUTH_TOKEN` (one token, tenant `default`), or `--no-auth`.
pub fn authentication(
    token_file: Option<&Path>,
    environment_token: Option<String>,
    no_auth: bool,
) -> Result<Option<Authentication>, String> {
    if no_auth {
        if token_file.is_some() || environment_token.is_some() {
            return Err("--no-auth was given together with a token; give one or the other".into());
        }
        return Ok(Some(Authentication::Off));
    }
    let mut tokens = Vec::new();
    if let Some(path) = token_file {
        check_private(path)?;
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the token file {}: {error}", path.display()))?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(tenant), Some(token), None) = (words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "{} line {}: expected `TENANT TOKEN`",
                    path.display(),
                    index + 1
                ));
            };
            check_name("tenant", tenant)
                .map_err(|error| format!("{} line {}: {error}", path.display(), index + 1))?;
            check_token(token)
                .map_err(|error| format!("{} line {}: {error}", path.display(), index + 1))?;
            if let Some((other, _)) = tokens.iter().find(|(_, known)| known == token) {
                return Err(format!(
                    "{} line {}: the tenant {tenant} has the same token as {other}; each tenant \
                     needs its own token, or either could read the other's values",
                    path.display(),
                    index + 1
                ));
            }
            tokens.push((tenant.to_owned(), token.to_owned()));
        }
        if tokens.is_empty() {
            return Err(format!("the token file {} has no tokens", path.display()));
        }
    } else if let Some(token) = environment_token {
        check_token(&token).map_err(|error| format!("CODEMODE_AUTH_TOKEN: {error}"))?;
        tokens.push((DEFAULT_TENANT.to_owned(), token));
    }
    Ok((!tokens.is_empty()).then_some(Authentication::Tokens(tokens)))
}

/// Refuses a token file that users other than its owner may read or write: anyone who can
/// read it can act as every tenant in it.
fn check_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(path)
        .map_err(|error| format!("cannot read the token file {}: {error}", path.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "the token file {} may be read or written by other users (mode {mode:03o}), who \
             could then act as its tenants; make it private with: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// The secret in `path` (its first line, trimmed), from a file only its owner may read or write.
pub fn read_secret(path: &Path) -> Result<String, String> {
    check_private(path)?;
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let secret = text.lines().next().unwrap_or_default().trim().to_owned();
    if secret.is_empty() {
        return Err(format!("{} holds no secret", path.display()));
    }
    Ok(secret)
}

fn check_token(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_LENGTH {
        return Err(format!(
            "a token must be at least {MIN_TOKEN_LENGTH} characters (make one with: openssl rand \
             -hex 32)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_name_tenants_and_refuse_weak_tokens() {
        let folder = std::env::temp_dir().join(format!("codemode-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join("tokens");
        let write = |text: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        write(&format!(
            "# tenants\nalpha {}\n\nbeta {}\n",
            "x".repeat(16),
            "y".repeat(32)
        ));
        let Some(Authentication::Tokens(tokens)) =
            authentication(Some(&path), None, false).unwrap()
        else {
            panic!("tokens expected");
        };
        assert_eq!(tokens.len(), 2);
        write("alpha short\n");
        assert!(
            authentication(Some(&path), None, false)
                .unwrap_err()
                .contains("at least 16")
        );
        write("bad/name xxxxxxxxxxxxxxxxxxxx\n");
        assert!(
            authentication(Some(&path), None, false)
                .unwrap_err()
                .contains("not valid")
        );
        write(&format!(
            "alpha {}\nbeta {}\n",
            "z".repeat(20),
            "z".repeat(20)
        ));
        let shared = authentication(Some(&path), None, false).unwrap_err();
        assert!(shared.contains("same token as alpha"), "{shared}");
        write(&format!("alpha {}\n", "z".repeat(20)));
        for mode in [0o640, 0o604, 0o620] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let open = authentication(Some(&path), None, false).unwrap_err();
            assert!(open.contains("chmod 600"), "{mode:o}: {open}");
        }
        assert_eq!(authentication(None, None, false).unwrap(), None);
        assert_eq!(
            authentication(None, None, true).unwrap(),
            Some(Authentication::Off)
        );
    }
}
