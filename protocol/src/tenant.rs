//! Whose a session, a cell and its stored values are ([`Tenant`]): the one type every layer
//! carries a tenant as, from the token a server checked to the engine process a cell may share
//! only with its own tenant's cells.

use std::fmt;
use std::sync::Arc;

/// A tenant: the name a server's token file gives the holder of a token (or the one tenant of a
/// server over stdio). Cheap to clone. Sessions of different tenants never see each other's
/// stored values, and their cells never share an engine process.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// The tenant named `name`.
    pub fn new(name: impl AsRef<str>) -> Self {
        Tenant(Arc::from(name.as_ref()))
    }

    /// Its name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Tenant {
    fn from(name: &str) -> Self {
        Tenant::new(name)
    }
}

impl From<String> for Tenant {
    fn from(name: String) -> Self {
        Tenant(Arc::from(name))
    }
}

impl std::borrow::Borrow<str> for Tenant {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for Tenant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Tenant {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Tenant::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_its_name_in_text_and_json_and_looks_up_by_it() {
        let tenant = Tenant::new("acme");
        assert_eq!(tenant.to_string(), "acme");
        assert_eq!(serde_json::to_string(&tenant).unwrap(), "\"acme\"");
        assert_eq!(serde_json::from_str::<Tenant>("\"acme\"").unwrap(), tenant);
        let mut held = std::collections::HashMap::new();
        held.insert(tenant.clone(), 2);
        assert_eq!(held.get("acme"), Some(&2));
    }
}
