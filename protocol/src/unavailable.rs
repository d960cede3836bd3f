//! A part behind a session's tools that is down now ([`Unavailable`]): a downstream server that
//! failed to start, to list its tools, or that died, and why. A cell sees them as
//! `ALL_TOOLS.unavailable` (`[{ server, reason }]`); the model sees them in the `exec`
//! description.

/// A part of a tool provider that is down now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Unavailable {
    /// The part: a downstream server's name, which is the namespace of its tools
    /// (`tools.<name>__<tool>`).
    #[serde(rename = "server")]
    pub name: String,
    /// Why, as the part gave it: an exit status and the last lines it wrote to stderr, an HTTP
    /// status, a timeout, or that the user must log in first.
    pub reason: String,
}

impl Unavailable {
    /// Part `name` is down for `reason`.
    pub fn new(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Unavailable {
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// Whether the tool a cell names (`tools.<global name>`) would be one of this part's.
    pub fn owns(&self, global_name: &str) -> bool {
        global_name
            .strip_prefix(self.name.as_str())
            .is_some_and(|rest| rest.starts_with("__"))
    }
}
