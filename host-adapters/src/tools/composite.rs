//! A provider that merges several providers into one tool set, each of which may fail alone.
//!
//! Of two tools with the same global name (they would be the same `tools.<name>` inside a cell,
//! as `foo-bar` and `foo_bar` of one server are), the first listed keeps it and the other is left
//! out, with a warning in the log.
//!
//! The members are listed in parallel. A member whose listing fails (a downstream server that
//! does not start, times out, answers 401, or died) is left out of the tool set and recorded as
//! down with its reason ([`ToolProvider::unavailable`]), and a background task lists it again
//! with backoff (1 s, doubling up to a minute) until it answers; then the composite's tools
//! version moves, so that sessions list again and its tools come back. While it is down, a listing
//! does not wait for it. Only a conflict (two tools that cannot both be offered) fails the whole
//! listing: the configuration must change.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use codemode_protocol::{JsonText, ToolDefinition};
use codemode_session::{
    ToolCallContext, ToolError, ToolInvocation, ToolListError, ToolListErrorKind, ToolProvider,
    Unavailable,
};
use tokio_util::sync::CancellationToken;

/// The first wait before a member that is down is listed again.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
const LONGEST_RETRY: Duration = Duration::from_secs(60);

/// One provider of the composite, and the name its failures go by.
struct Member {
    name: String,
    provider: Arc<dyn ToolProvider>,
}

/// Which members are down, and the version that moves when one comes back.
#[derive(Default)]
struct Health {
    /// By member index: why it is down. A member here has a retry task running.
    down: Mutex<HashMap<usize, String>>,
    /// Grows each time a member that was down answers again.
    recovered: AtomicU64,
    /// Stops the retry tasks (on shutdown).
    stopped: CancellationToken,
}

/// Several providers as one. Calls are routed by the tool's global name.
#[derive(Default)]
pub struct CompositeTools {
    members: Vec<Member>,
    /// Global name to member index, as of the last listing.
    routes: Mutex<HashMap<String, usize>>,
    health: Arc<Health>,
}

impl std::fmt::Debug for CompositeTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeTools")
            .field("providers", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl CompositeTools {
    /// A composite of no providers yet.
    pub fn new() -> Self {
        CompositeTools::default()
    }

    /// Adds a provider; its tools come after those of the providers added before it. Its
    /// failures are reported as those of "provider N".
    pub fn with(self, provider: impl ToolProvider) -> Self {
        let name = format!("provider {}", self.members.len() + 1);
        self.with_named(name, provider)
    }

    /// Adds a provider whose failures go by `name` (a downstream server's: the namespace of its
    /// tools).
    pub fn with_named(self, name: impl Into<String>, provider: impl ToolProvider) -> Self {
        self.with_shared_named(name, Arc::new(provider))
    }

    /// Adds a provider already shared elsewhere.
    pub fn with_shared(self, provider: Arc<dyn ToolProvider>) -> Self {
        let name = format!("provider {}", self.members.len() + 1);
        self.with_shared_named(name, provider)
    }

    /// Adds a provider already shared elsewhere, whose failures go by `name`.
    pub fn with_shared_named(
        mut self,
        name: impl Into<String>,
        provider: Arc<dyn ToolProvider>,
    ) -> Self {
        self.members.push(Member {
            name: name.into(),
            provider,
        });
        self
    }

    /// The names of the providers, in the order they were added.
    pub fn names(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|member| member.name.clone())
            .collect()
    }

    /// Records member `index` as down for `reason`, and starts its retries unless they run.
    fn mark_down(&self, index: usize, reason: String) {
        let member = &self.members[index];
        tracing::warn!(server = %member.name, %reason, "left out of the tools until it answers; retrying in the background");
        let retrying = self.health.down.lock().insert(index, reason).is_some();
        if !retrying {
            tokio::spawn(retry(
                index,
                Arc::clone(&member.provider),
                member.name.clone(),
                Arc::clone(&self.health),
            ));
        }
    }
}

/// Lists member `index` again with backoff until it answers; then it is up, and the composite's
/// version moves so that sessions list it again.
async fn retry(index: usize, provider: Arc<dyn ToolProvider>, name: String, health: Arc<Health>) {
    let mut wait = FIRST_RETRY;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = health.stopped.cancelled() => {
                health.down.lock().remove(&index);
                return;
            }
        }
        match provider.list_tools().await {
            Ok(tools) => {
                tracing::info!(server = %name, tools = tools.len(), "back up; its tools return at the next cell");
                health.down.lock().remove(&index);
                health.recovered.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(error) => {
                tracing::debug!(server = %name, %error, retry_in = ?wait, "still down");
                if let Some(reason) = health.down.lock().get_mut(&index) {
                    *reason = error.message;
                }
                wait = (wait * 2).min(LONGEST_RETRY);
            }
        }
    }
}

#[async_trait]
impl ToolProvider for CompositeTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        // Every member that is not being retried, at once: a slow server's startup costs its own
        // timeout, not the sum of all of them.
        let down: Vec<usize> = self.health.down.lock().keys().copied().collect();
        let listings =
            futures::future::join_all(self.members.iter().enumerate().map(|(index, member)| {
                let skip = down.contains(&index);
                async move {
                    if skip {
                        None
                    } else {
                        Some(member.provider.list_tools().await)
                    }
                }
            }))
            .await;
        let mut tools = Vec::new();
        let mut routes: HashMap<String, usize> = HashMap::new();
        let mut owners: HashMap<String, ToolDefinition> = HashMap::new();
        for (index, listing) in listings.into_iter().enumerate() {
            let listed = match listing {
                None => continue,
                Some(Ok(listed)) => listed,
                Some(Err(error)) if error.kind == ToolListErrorKind::Conflict => return Err(error),
                Some(Err(error)) => {
                    self.mark_down(index, error.message);
                    continue;
                }
            };
            for tool in listed {
                let global_name = tool.global_name();
                // As upstream code mode does: the first tool keeps the name, the other is left
                // out (a cell could not tell them apart), and the log says so.
                if let Some(first) = owners.get(&global_name) {
                    tracing::warn!(
                        "two tools would both be tools.{global_name}: {} from {} keeps the name \
                         and {} from {} is left out; give one of their servers another \
                         namespace, or rename one of the tools",
                        describe(first),
                        self.members[routes[&global_name]].name,
                        describe(&tool),
                        self.members[index].name,
                    );
                    continue;
                }
                routes.insert(global_name.clone(), index);
                owners.insert(global_name, tool.clone());
                tools.push(tool);
            }
        }
        *self.routes.lock() = routes;
        Ok(tools)
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        let global_name = call.name.global_name();
        let route = self.routes.lock().get(&global_name).copied();
        let provider = route
            .and_then(|index| self.members.get(index))
            .ok_or_else(|| ToolError::not_found(format!("no tool is named tools.{global_name}")))?;
        provider.provider.call_tool(call, context).await
    }

    fn tools_version(&self) -> u64 {
        // Each number only grows, so the sum changes whenever one of them does.
        self.members.iter().fold(
            self.health.recovered.load(Ordering::SeqCst),
            |sum, member| sum.wrapping_add(member.provider.tools_version()),
        )
    }

    fn unavailable(&self) -> Vec<Unavailable> {
        let down = self.health.down.lock().clone();
        self.members
            .iter()
            .enumerate()
            .flat_map(|(index, member)| match down.get(&index) {
                Some(reason) => vec![Unavailable::new(member.name.clone(), reason.clone())],
                None => member.provider.unavailable(),
            })
            .collect()
    }

    async fn shutdown(&self) {
        self.health.stopped.cancel();
        // All at once: each may wait seconds for its server to exit.
        let mut shutting_down = tokio::task::JoinSet::new();
        for member in &self.members {
            let provider = Arc::clone(&member.provider);
            shutting_down.spawn(async move { provider.shutdown().await });
        }
        while shutting_down.join_next().await.is_some() {}
    }
}

fn describe(tool: &ToolDefinition) -> String {
    match &tool.name.namespace {
        Some(namespace) => format!("\"{}\" of \"{namespace}\"", tool.name.name),
        None => format!("\"{}\"", tool.name.name),
    }
}
