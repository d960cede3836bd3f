//! Who a request is: its tenant ([`Tenant`], the names of the anonymous and default tenants, and
//! the header a cluster server forwards it in), and the check every name that reaches a file
//! path passes ([`check_name`]).

/// The tenant a request was authenticated as (carried in its extensions): stored values are
/// scoped to it.
pub use codemode_session::Tenant;

/// The tenant of a server that runs without authentication (`--no-auth`, loopback only).
pub const ANONYMOUS_TENANT: &str = "anonymous";

/// The tenant of the token in `CODEMODE_AUTH_TOKEN`.
pub const DEFAULT_TENANT: &str = "default";

/// The header a server of the cluster names the tenant it forwards for.
pub const TENANT_HEADER: &str = "x-codemode-tenant";

/// A tenant or session name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot, so that
/// it is safe in a file name.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "the {what} name {name:?} is not valid: use 1 to 64 letters, digits, '.', '_' or '-', \
             not starting with '.'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_they_reach_a_file_path() {
        assert!(check_name("session", "work-1.a_b").is_ok());
        for bad in ["", "../x", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name("session", bad).is_err(), "{bad:?}");
        }
    }
}
