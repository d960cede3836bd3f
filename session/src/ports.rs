//! The two ports an embedder (or `host-adapters`) implements behind a session: where stored
//! values live ([`Store`]) and where tools come from ([`ToolProvider`]).
//!
//! Both are `#[async_trait]` traits, so that a session holds them as `Arc<dyn Store>` and
//! `Arc<dyn ToolProvider>` and an embedder can pick, wrap and combine implementations at run time.

use codemode_protocol::StoredValues;

use async_trait::async_trait;
use codemode_cell_actor::{ToolError, ToolInvocation};
use codemode_protocol::{JsonText, Tenant, ToolDefinition};
use tokio_util::sync::CancellationToken;

/// Which session's stored values: whose (its tenant, when the embedder has several) and its
/// name. Stores key their data by it (the text form is `tenant/name`, or the name alone), and
/// count a tenant's bytes by its tenant, never by parsing the text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct SessionKey {
    /// Whose session it is; `None` for an embedder with one user.
    pub tenant: Option<Tenant>,
    /// The session's name, unique within its tenant.
    pub name: String,
}

impl SessionKey {
    /// Session `name` of no tenant.
    pub fn new(name: impl Into<String>) -> Self {
        SessionKey {
            tenant: None,
            name: name.into(),
        }
    }

    /// Session `name` of `tenant`.
    pub fn of_tenant(tenant: impl Into<Tenant>, name: impl Into<String>) -> Self {
        SessionKey {
            tenant: Some(tenant.into()),
            name: name.into(),
        }
    }

    /// Whose bytes the session's values count towards: its tenant, or (with none) itself.
    pub fn owner(&self) -> &str {
        self.tenant.as_ref().map_or(&self.name, Tenant::as_str)
    }
}

/// `tenant/name`, or the name alone: the text form stores and logs use.
impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tenant {
            Some(tenant) => write!(f, "{tenant}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl From<&str> for SessionKey {
    fn from(name: &str) -> Self {
        SessionKey::new(name)
    }
}

impl From<String> for SessionKey {
    fn from(name: String) -> Self {
        SessionKey::new(name)
    }
}

/// A store failed: which kind of failure ([`StoreErrorKind`], so a caller can retry or report
/// the right thing), a message that says what and where (the cause included), and the failure
/// underneath, if any, for callers that look closer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    /// What kind of failure it is.
    pub kind: StoreErrorKind,
    /// What failed, and where (a path, a key, a database), with its cause: shown to the model and
    /// in logs as it is.
    pub message: String,
    /// What failed underneath (an I/O or database error), for a caller that inspects it (a
    /// downcast). The message says it already, so it is not the error's `source()`: an error
    /// chain printed whole names each cause once.
    pub cause: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

/// The kinds of store failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store cannot be reached now (a connection lost, a database restarting, a disk that
    /// refuses a write): the same call may succeed later.
    Unavailable,
    /// Another writer got in the way (a serialisation failure): the call may be retried at once.
    Conflict,
    /// What the store holds cannot be read as stored values: retrying will not help, someone must
    /// look at it.
    Corrupt,
    /// The values are larger than the store takes.
    TooLarge,
    /// Anything else (a store that is misconfigured, a worker that failed).
    Other,
}

impl StoreError {
    /// A store error of kind [`StoreErrorKind::Other`] with this message.
    pub fn new(message: impl Into<String>) -> Self {
        StoreError::of(StoreErrorKind::Other, message)
    }

    /// A store error of `kind` with this message.
    pub fn of(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            message: message.into(),
            cause: None,
        }
    }

    /// The same error, with `cause` as the failure underneath (its message says it already).
    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(std::sync::Arc::new(cause));
        self
    }
}

/// Equal when kind and message are: the cause is detail.
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for StoreError {}

/// Where a session's stored values live.
///
/// A store may be slow or remote: the session calls it with no lock held, so a slow `commit`
/// delays only the completion of the cell being committed (and later commits of the same
/// session, which are applied in order), never the start, observation or termination of other
/// cells, nor other sessions.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The stored values of `session`; a session never seen has none.
    async fn load(&self, session: &SessionKey) -> Result<StoredValues, StoreError>;

    /// Whether other processes may commit to this store's sessions (a database several servers
    /// share): a session then loads its values again before each cell starts, so that the cell
    /// starts from the latest committed values whichever process committed them. The default
    /// (`false`) lets a session keep the values it loaded and committed.
    fn shared_between_processes(&self) -> bool {
        false
    }

    /// Merges one completed cell's writes into `session`'s values by key, all or none.
    ///
    /// Called once per completed cell, after the cell has claimed its outcome (a terminated cell
    /// never gets here), and never concurrently for one session. On `Err`, the cell still
    /// completes, and its error text says that its stored values were not saved.
    async fn commit(&self, session: &SessionKey, writes: &StoredValues) -> Result<(), StoreError>;

    /// Whether the store answers now, for a readiness probe: a database is asked a trivial
    /// query, a directory is looked at. The default (a store in memory) always answers.
    async fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Listing the tools failed: what kind of failure, and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ToolListError {
    /// What kind of failure it is.
    pub kind: ToolListErrorKind,
    /// What failed and what to do about it.
    pub message: String,
}

/// What kind of failure a [`ToolListError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolListErrorKind {
    /// A tool server could not be reached or started, or its listing failed: trying again
    /// later may work.
    Unavailable,
    /// The tools as configured cannot be offered (two with one name): the configuration must
    /// change.
    Conflict,
}

impl ToolListError {
    /// A listing error of `kind` with this message.
    pub fn new(kind: ToolListErrorKind, message: impl Into<String>) -> Self {
        ToolListError {
            kind,
            message: message.into(),
        }
    }

    /// A tool server could not be reached, or its listing failed.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ToolListError::new(ToolListErrorKind::Unavailable, message)
    }

    /// The tools as configured cannot be offered.
    pub fn conflict(message: impl Into<String>) -> Self {
        ToolListError::new(ToolListErrorKind::Conflict, message)
    }
}

/// Where a session's tools come from.
#[async_trait]
pub trait ToolProvider: Send + Sync + 'static {
    /// The tools cells may call; listed when the session opens, and again before a cell starts
    /// when [`ToolProvider::tools_version`] has moved.
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError>;

    /// Calls a tool. Its argument (`call.input`) is the JSON text the cell made, checked to be
    /// readable and never expanded on its way: parse it where the tool reads it. `Ok` resolves
    /// the cell's promise with the result's JSON text (handed to the cell as it is; build it from
    /// a tree with `JsonText::from`), `Err` rejects it with the error's message. Stop when `context.cancellation` fires (the cell completed or was
    /// terminated); report the tool's progress while it runs (a downstream MCP server's progress
    /// notifications) to `context.progress`. A provider that wraps others hands the context on.
    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError>;

    /// A number that changes whenever the provider's tool list may have changed (a downstream
    /// server said so, or was started again): a session lists the tools again before its next
    /// cell starts. The default never changes.
    fn tools_version(&self) -> u64 {
        0
    }

    /// The parts behind the provider that are down now (downstream servers that failed to
    /// start or to list their tools, or that died), each with why; their tools are left out of
    /// the listing until they are back. The default: nothing is ever down.
    fn unavailable(&self) -> Vec<crate::Unavailable> {
        Vec::new()
    }

    /// Ends what the provider started (downstream servers) cleanly; its owner calls it once,
    /// when it stops serving. A later call may start them again. The default does nothing.
    async fn shutdown(&self) {}
}

/// What a tool call gets beside its invocation: when to stop, where its progress goes, and who
/// its server may ask.
#[derive(Clone)]
#[non_exhaustive]
pub struct ToolCallContext {
    /// Cancelled when the cell completed or was terminated: the call's answer is not needed.
    pub cancellation: CancellationToken,
    /// Where the tool's progress messages go.
    pub progress: ToolProgress,
    /// The user of the cell that made the call, for what the tool's server asks of the user
    /// while the call runs (elicitation, sampling, roots, log messages); `None`: nobody.
    pub user: Option<std::sync::Arc<dyn crate::UserChannel>>,
    /// The trace the call belongs to, as W3C Trace Context fields (`traceparent`, and
    /// `tracestate` when there is one), for the provider to pass to the tool's server (in an MCP
    /// request's `_meta`); empty when nothing is traced.
    pub trace_context: Vec<(String, String)>,
}

impl ToolCallContext {
    /// A call stopped by `cancellation`, whose progress nobody hears.
    pub fn new(cancellation: CancellationToken) -> Self {
        ToolCallContext {
            cancellation,
            progress: ToolProgress::ignored(),
            user: None,
            trace_context: Vec::new(),
        }
    }

    /// This context, with the trace it belongs to (W3C Trace Context fields).
    pub fn with_trace_context(mut self, fields: Vec<(String, String)>) -> Self {
        self.trace_context = fields;
        self
    }

    /// This context, with what the tool's server asks of the user going to `user`.
    pub fn with_user(mut self, user: Option<std::sync::Arc<dyn crate::UserChannel>>) -> Self {
        self.user = user;
        self
    }

    /// This context, with progress going to `progress`.
    pub fn with_progress(mut self, progress: ToolProgress) -> Self {
        self.progress = progress;
        self
    }
}

/// Where a running tool's progress messages go: to whoever watches its cell, as the cell's own
/// `notify(...)` messages do (`codemode mcp` sends them on as progress notifications of the call
/// that waits on the cell). They are not part of the cell's output. Cheap to clone.
#[derive(Clone)]
pub struct ToolProgress {
    report: std::sync::Arc<dyn Fn(String) + Send + Sync>,
}

impl ToolProgress {
    /// Progress handed to `report`.
    pub fn new(report: impl Fn(String) + Send + Sync + 'static) -> Self {
        ToolProgress {
            report: std::sync::Arc::new(report),
        }
    }

    /// Progress nobody hears.
    pub fn ignored() -> Self {
        ToolProgress::new(|_| {})
    }

    /// Reports one progress message.
    pub fn report(&self, message: impl Into<String>) {
        (self.report)(message.into());
    }
}

impl std::fmt::Debug for ToolProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolProgress").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ToolCallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCallContext")
            .field("cancellation", &self.cancellation)
            .field("progress", &self.progress)
            .field("user", &self.user.is_some())
            .finish()
    }
}
