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
//!
//! With a startup window ([`CompositeTools::set_startup_window`], what a server that answers a
//! client's first `tools/list` sets), a member's first listing is waited for only that long: a
//! server still starting past it is left out (reported as starting) while its start goes on in
//! the background, and when it answers the tools version moves, so that its tools arrive
//! without holding up the others.
//!
//! The members can be replaced while sessions use them ([`CompositeTools::reconfigure`], a
//! reloaded configuration): a member kept (the same provider) keeps its connection, its health
//! and the calls in flight on it; the tools version moves so that sessions list again.

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
#[derive(Clone)]
struct Member {
    /// Unique within the composite, for as long as it lives: routes and health name it.
    id: u64,
    name: String,
    provider: Arc<dyn ToolProvider>,
    /// Stops its retries when it leaves the composite.
    removed: CancellationToken,
    /// Where its first listing stands (see the module's doc on the startup window).
    start: Arc<Mutex<Start>>,
}

/// Where a member's first listing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// It has not answered a listing yet.
    NotYet,
    /// Its first listing outlasted the startup window and goes on in the background.
    Starting,
    /// It has answered a listing: later listings wait for it.
    Answered,
}

/// Which members are down, and the version that moves when one comes back.
#[derive(Default)]
struct Health {
    /// By member id: why it is down. A member here has a retry task running.
    down: Mutex<HashMap<u64, String>>,
    /// Grows each time a member that was down answers again, and at each reconfiguration.
    recovered: AtomicU64,
    /// Stops the retry tasks (on shutdown).
    stopped: CancellationToken,
    /// Woken each time a member's start past the startup window ends, well or not.
    started: tokio::sync::Notify,
}

/// Several providers as one. Calls are routed by the tool's global name.
#[derive(Default)]
pub struct CompositeTools {
    /// The members now; replaced whole, so that a listing in progress keeps the set it began with.
    members: Mutex<Arc<Vec<Member>>>,
    next_id: AtomicU64,
    /// Global name to member id, as of the last listing.
    routes: Mutex<HashMap<String, u64>>,
    health: Arc<Health>,
    /// How long a listing waits for a member's first answer; `None`: as long as it takes.
    startup_window: Mutex<Option<Duration>>,
}

impl std::fmt::Debug for CompositeTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeTools")
            .field("providers", &self.members.lock().len())
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
        let name = format!("provider {}", self.members.lock().len() + 1);
        self.with_named(name, provider)
    }

    /// Adds a provider whose failures go by `name` (a downstream server's: the namespace of its
    /// tools).
    pub fn with_named(self, name: impl Into<String>, provider: impl ToolProvider) -> Self {
        self.with_shared_named(name, Arc::new(provider))
    }

    /// Adds a provider already shared elsewhere.
    pub fn with_shared(self, provider: Arc<dyn ToolProvider>) -> Self {
        let name = format!("provider {}", self.members.lock().len() + 1);
        self.with_shared_named(name, provider)
    }

    /// Adds a provider already shared elsewhere, whose failures go by `name`.
    pub fn with_shared_named(
        self,
        name: impl Into<String>,
        provider: Arc<dyn ToolProvider>,
    ) -> Self {
        let member = self.member(name.into(), provider);
        let mut members = self.members.lock();
        let mut grown = Vec::clone(&members);
        grown.push(member);
        *members = Arc::new(grown);
        drop(members);
        self
    }

    fn member(&self, name: String, provider: Arc<dyn ToolProvider>) -> Member {
        Member {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            name,
            provider,
            removed: CancellationToken::new(),
            start: Arc::new(Mutex::new(Start::NotYet)),
        }
    }

    /// A listing waits at most `window` for a member that has not answered yet (`None`: as long
    /// as it takes, the default); see the module's doc.
    pub fn set_startup_window(&self, window: Option<Duration>) {
        *self.startup_window.lock() = window;
    }

    /// Waits until no member is still starting past the startup window (each start ends, well
    /// or not, within its server's own startup timeout). What a cell's start awaits: the window
    /// spares a client's listing the wait, and a cell that will call the server should not.
    pub async fn until_started(&self) {
        loop {
            let started = self.health.started.notified();
            let starting = self
                .members
                .lock()
                .iter()
                .any(|member| *member.start.lock() == Start::Starting);
            if !starting {
                return;
            }
            started.await;
        }
    }

    /// The names of the providers, in order.
    pub fn names(&self) -> Vec<String> {
        self.members
            .lock()
            .iter()
            .map(|member| member.name.clone())
            .collect()
    }

    /// Replaces the members by `members`, in that order. A provider that was already a member
    /// (the same `Arc`) stays one as it was: its connection, its health, its calls in flight.
    /// Returns the providers that left, for the caller to shut down. The tools version moves;
    /// list again (as sessions do) to route calls to the new members.
    pub fn reconfigure(
        &self,
        members: Vec<(String, Arc<dyn ToolProvider>)>,
    ) -> Vec<Arc<dyn ToolProvider>> {
        let mut current = self.members.lock();
        let mut next = Vec::with_capacity(members.len());
        for (name, provider) in members {
            let kept = current
                .iter()
                .find(|member| Arc::ptr_eq(&member.provider, &provider))
                .cloned();
            next.push(match kept {
                Some(member) => Member { name, ..member },
                None => self.member(name, provider),
            });
        }
        let mut left = Vec::new();
        // The version must move past every value it had: what the members that leave counted
        // is added, so that the sum never comes back to an earlier one.
        let mut moved = 1u64;
        for member in current.iter() {
            if !next.iter().any(|kept| kept.id == member.id) {
                member.removed.cancel();
                self.health.down.lock().remove(&member.id);
                moved = moved.wrapping_add(member.provider.tools_version());
                left.push(Arc::clone(&member.provider));
            }
        }
        *current = Arc::new(next);
        drop(current);
        self.health.recovered.fetch_add(moved, Ordering::SeqCst);
        left
    }

    /// `member`'s listing, waited for at most `window` when it has never answered; `None` when
    /// it is left out for now (its first listing goes on in the background).
    async fn listing(
        &self,
        member: &Member,
        window: Option<Duration>,
    ) -> Option<Result<Vec<ToolDefinition>, ToolListError>> {
        let start = *member.start.lock();
        let window = match (start, window) {
            (Start::Starting, _) => return None,
            (Start::Answered, _) | (Start::NotYet, None) => {
                return Some(member.provider.list_tools().await);
            }
            (Start::NotYet, Some(window)) => window,
        };
        // Spawned, so that a start past the window is never dropped half-way (a server is not
        // started twice).
        let provider = Arc::clone(&member.provider);
        let mut first = tokio::spawn(async move { provider.list_tools().await });
        match tokio::time::timeout(window, &mut first).await {
            Ok(joined) => Some(joined_listing(joined)),
            Err(_) => {
                let mut state = member.start.lock();
                if *state != Start::NotYet {
                    // Another listing left it starting (or saw it answer) meanwhile.
                    first.abort();
                    return None;
                }
                *state = Start::Starting;
                drop(state);
                tracing::info!(
                    server = %member.name,
                    window_ms = window.as_millis() as u64,
                    "still starting past the startup window; its tools are offered once it answers"
                );
                tokio::spawn(finish_start(
                    member.clone(),
                    Arc::clone(&self.health),
                    first,
                ));
                None
            }
        }
    }
}

/// Records `member` as down for `reason`, and starts its retries unless they run.
fn mark_down(health: &Arc<Health>, member: &Member, reason: String) {
    tracing::warn!(server = %member.name, %reason, "left out of the tools until it answers; retrying in the background");
    let retrying = health.down.lock().insert(member.id, reason).is_some();
    if !retrying {
        tokio::spawn(retry(member.clone(), Arc::clone(health)));
    }
}

/// Waits for the first listing of `member`, which outlasted the startup window: when it
/// answers, the tools version moves (sessions list again, and clients are told); when it fails,
/// the member is down and retried like any other.
async fn finish_start(
    member: Member,
    health: Arc<Health>,
    first: tokio::task::JoinHandle<Result<Vec<ToolDefinition>, ToolListError>>,
) {
    let abort = first.abort_handle();
    let listed = tokio::select! {
        joined = first => Some(joined_listing(joined)),
        () = health.stopped.cancelled() => None,
        () = member.removed.cancelled() => None,
    };
    match listed {
        Some(Ok(tools)) => {
            *member.start.lock() = Start::Answered;
            tracing::info!(server = %member.name, tools = tools.len(), "started; its tools are offered from now on");
            health.recovered.fetch_add(1, Ordering::SeqCst);
        }
        Some(Err(error)) => {
            *member.start.lock() = Start::NotYet;
            mark_down(&health, &member, error.message);
        }
        // Shut down, or no longer a member: its start is of no use.
        None => {
            abort.abort();
            *member.start.lock() = Start::NotYet;
        }
    }
    health.started.notify_waiters();
}

/// A spawned listing's outcome: a task that panicked or was aborted is a listing that failed.
fn joined_listing(
    joined: Result<Result<Vec<ToolDefinition>, ToolListError>, tokio::task::JoinError>,
) -> Result<Vec<ToolDefinition>, ToolListError> {
    joined.unwrap_or_else(|_| {
        Err(ToolListError::unavailable(
            "listing its tools failed unexpectedly",
        ))
    })
}

/// Lists `member` again with backoff until it answers; then it is up, and the composite's
/// version moves so that sessions list it again.
async fn retry(member: Member, health: Arc<Health>) {
    let mut wait = FIRST_RETRY;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = health.stopped.cancelled() => return,
            () = member.removed.cancelled() => return,
        }
        match member.provider.list_tools().await {
            Ok(tools) => {
                tracing::info!(server = %member.name, tools = tools.len(), "back up; its tools return at the next cell");
                health.down.lock().remove(&member.id);
                health.recovered.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(error) => {
                tracing::debug!(server = %member.name, %error, retry_in = ?wait, "still down");
                if let Some(reason) = health.down.lock().get_mut(&member.id) {
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
        let members = Arc::clone(&self.members.lock());
        // Every member that is not being retried, at once: a slow server's startup costs its own
        // timeout, not the sum of all of them.
        let down: Vec<u64> = self.health.down.lock().keys().copied().collect();
        let window = *self.startup_window.lock();
        let listings = futures::future::join_all(members.iter().map(|member| {
            let skip = down.contains(&member.id);
            async move {
                if skip {
                    None
                } else {
                    self.listing(member, window).await
                }
            }
        }))
        .await;
        let mut tools = Vec::new();
        let mut routes: HashMap<String, u64> = HashMap::new();
        let mut owners: HashMap<String, (ToolDefinition, &str)> = HashMap::new();
        for (member, listing) in members.iter().zip(listings) {
            let listed = match listing {
                None => continue,
                Some(Ok(listed)) => {
                    *member.start.lock() = Start::Answered;
                    listed
                }
                Some(Err(error)) if error.kind == ToolListErrorKind::Conflict => return Err(error),
                Some(Err(error)) => {
                    mark_down(&self.health, member, error.message);
                    continue;
                }
            };
            for tool in listed {
                let global_name = tool.global_name();
                // As upstream code mode does: the first tool keeps the name, the other is left
                // out (a cell could not tell them apart), and the log says so.
                if let Some((first, owner)) = owners.get(&global_name) {
                    tracing::warn!(
                        "two tools would both be tools.{global_name}: {} from {owner} keeps the \
                         name and {} from {} is left out; give one of their servers another \
                         namespace, or rename one of the tools",
                        describe(first),
                        describe(&tool),
                        member.name,
                    );
                    continue;
                }
                routes.insert(global_name.clone(), member.id);
                owners.insert(global_name, (tool.clone(), member.name.as_str()));
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
            .and_then(|id| {
                let members = self.members.lock();
                members
                    .iter()
                    .find(|member| member.id == id)
                    .map(|member| Arc::clone(&member.provider))
            })
            .ok_or_else(|| ToolError::not_found(format!("no tool is named tools.{global_name}")))?;
        provider.call_tool(call, context).await
    }

    fn tools_version(&self) -> u64 {
        // Each number only grows, so the sum changes whenever one of them does.
        self.members.lock().iter().fold(
            self.health.recovered.load(Ordering::SeqCst),
            |sum, member| sum.wrapping_add(member.provider.tools_version()),
        )
    }

    fn unavailable(&self) -> Vec<Unavailable> {
        let down = self.health.down.lock().clone();
        let members = Arc::clone(&self.members.lock());
        members
            .iter()
            .flat_map(|member| match down.get(&member.id) {
                Some(reason) => vec![Unavailable::new(member.name.clone(), reason.clone())],
                None if *member.start.lock() == Start::Starting => vec![Unavailable::new(
                    member.name.clone(),
                    "still starting; its tools are offered once it answers".to_owned(),
                )],
                None => member.provider.unavailable(),
            })
            .collect()
    }

    async fn shutdown(&self) {
        self.health.stopped.cancel();
        let members = Arc::clone(&self.members.lock());
        // All at once: each may wait seconds for its server to exit.
        let mut shutting_down = tokio::task::JoinSet::new();
        for member in members.iter() {
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
