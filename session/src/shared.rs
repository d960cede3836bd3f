//! What a session and its cells' hosts share ([`Shared`]): the session's key, engine, store and
//! tool provider, its tools as last listed, its stored values, the registry of its cells, its
//! event channel and its cells' actor tasks. Each part behind its own small lock, never held
//! across an await.

use parking_lot::Mutex;
use std::sync::Arc;

use codemode_engine::Engine;
use codemode_protocol::ToolDefinition;
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

use crate::config::SessionConfig;
use crate::gate::Gate;
use crate::in_flight::CallsInFlight;
use crate::ports::{SessionKey, Store, ToolProvider};
use crate::registry::Registry;
use crate::report::SessionEvent;
use crate::stored::HeldValues;

/// Everything a session and its cells' hosts share.
pub(crate) struct Shared {
    pub(crate) key: SessionKey,
    /// The key's text form, for logs and events.
    pub(crate) id: String,
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) provider: Arc<dyn ToolProvider>,
    /// The tools as last listed; listed again before a cell starts when the provider's
    /// `tools_version` moved.
    pub(crate) tools: Mutex<ListedTools>,
    pub(crate) config: SessionConfig,
    /// The stored values as of the last commit, and what they cost; each cell starts with a
    /// reference to them.
    pub(crate) values: Mutex<HeldValues>,
    /// Held (asynchronously) across one cell's store commit and its merge into `values`, so that
    /// commits reach the store and `values` in the same order. Nothing else waits for it: starts,
    /// observations and terminations never touch it.
    pub(crate) commit_order: tokio::sync::Mutex<()>,
    pub(crate) registry: Mutex<Registry>,
    pub(crate) events: broadcast::Sender<SessionEvent>,
    /// The cells' actor tasks; `shutdown` waits for them.
    pub(crate) tasks: TaskTracker,
    /// The gate every tool call of the session's cells passes.
    pub(crate) gate: Gate,
    /// The tool calls the cells have running now.
    pub(crate) calls: CallsInFlight,
}

/// The provider's tools as of one listing.
pub(crate) struct ListedTools {
    pub(crate) version: u64,
    pub(crate) tools: Arc<[ToolDefinition]>,
    pub(crate) names: Arc<[String]>,
}

impl ListedTools {
    pub(crate) fn new(version: u64, tools: Vec<ToolDefinition>) -> Self {
        let names = tools.iter().map(ToolDefinition::global_name).collect();
        ListedTools {
            version,
            tools: tools.into(),
            names,
        }
    }
}
