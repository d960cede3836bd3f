//! A provider that merges several providers into one tool set. Of two tools with the same global
//! name (they would be the same `tools.<name>` inside a cell, as `foo-bar` and `foo_bar` of one
//! server are), the first listed keeps it and the other is left out, with a warning in the log.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use codemode_protocol::{JsonText, ToolDefinition};
use codemode_session::{ToolCallContext, ToolError, ToolInvocation, ToolListError, ToolProvider};

/// Several providers as one. Calls are routed by the tool's global name.
#[derive(Default)]
pub struct CompositeTools {
    providers: Vec<Arc<dyn ToolProvider>>,
    /// Global name to provider index, as of the last listing.
    routes: Mutex<HashMap<String, usize>>,
}

impl std::fmt::Debug for CompositeTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeTools")
            .field("providers", &self.providers.len())
            .finish_non_exhaustive()
    }
}

impl CompositeTools {
    /// A composite of no providers yet.
    pub fn new() -> Self {
        CompositeTools::default()
    }

    /// Adds a provider; its tools come after those of the providers added before it.
    pub fn with(mut self, provider: impl ToolProvider) -> Self {
        self.providers.push(Arc::new(provider));
        self
    }

    /// Adds a provider already shared elsewhere.
    pub fn with_shared(mut self, provider: Arc<dyn ToolProvider>) -> Self {
        self.providers.push(provider);
        self
    }
}

#[async_trait]
impl ToolProvider for CompositeTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let mut tools = Vec::new();
        let mut routes: HashMap<String, usize> = HashMap::new();
        let mut owners: HashMap<String, ToolDefinition> = HashMap::new();
        for (index, provider) in self.providers.iter().enumerate() {
            for tool in provider.list_tools().await? {
                let global_name = tool.global_name();
                // As upstream code mode does: the first tool keeps the name, the other is left
                // out (a cell could not tell them apart), and the log says so.
                if let Some(first) = owners.get(&global_name) {
                    tracing::warn!(
                        "two tools would both be tools.{global_name}: {} from provider {} keeps \
                         the name and {} from provider {} is left out; give one of their servers \
                         another namespace, or rename one of the tools",
                        describe(first),
                        routes[&global_name] + 1,
                        describe(&tool),
                        index + 1,
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
            .and_then(|index| self.providers.get(index))
            .ok_or_else(|| ToolError::not_found(format!("no tool is named tools.{global_name}")))?;
        provider.call_tool(call, context).await
    }

    fn tools_version(&self) -> u64 {
        // Each provider's number only grows, so the sum changes whenever one of them does.
        self.providers.iter().fold(0u64, |sum, provider| {
            sum.wrapping_add(provider.tools_version())
        })
    }

    async fn shutdown(&self) {
        // All at once: each may wait seconds for its server to exit.
        let mut shutting_down = tokio::task::JoinSet::new();
        for provider in &self.providers {
            let provider = Arc::clone(provider);
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
