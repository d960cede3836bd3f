//! In-process tools: async Rust functions registered with their definitions. What an embedder uses
//! to add custom tools in a few lines:
//!
//! ```
//! use codemode_host_adapters::InProcessTools;
//! use serde_json::{json, Value};
//!
//! let tools = InProcessTools::new()
//!     .function("greet", "Greets someone by name.", json!({
//!         "type": "object",
//!         "properties": {"name": {"type": "string"}},
//!         "required": ["name"]
//!     }), |input: Option<Value>| async move {
//!         let name = input.as_ref().and_then(|input| input["name"].as_str()).unwrap_or("world");
//!         Ok(json!(format!("hello, {name}")))
//!     });
//! ```

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use codemode_protocol::{JsonText, ToolDefinition, ToolName};
use codemode_session::{ToolCallContext, ToolError, ToolInvocation, ToolListError, ToolProvider};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A registered tool's handler, with its future boxed so tools of different types fit in one list.
type Handler = Arc<
    dyn Fn(
            Option<Value>,
            CancellationToken,
        ) -> Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>
        + Send
        + Sync,
>;

/// A registry of tools implemented as async Rust functions.
#[derive(Default, Clone)]
pub struct InProcessTools {
    tools: Vec<(ToolDefinition, Handler)>,
}

impl std::fmt::Debug for InProcessTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.tools
                    .iter()
                    .map(|(definition, _)| definition.global_name()),
            )
            .finish()
    }
}

impl InProcessTools {
    /// A registry with no tools yet.
    pub fn new() -> Self {
        InProcessTools::default()
    }

    /// Adds a tool with its full definition. The handler gets the JSON argument (`None` when
    /// called without one) and a token cancelled when the cell no longer needs the answer; `Err`
    /// rejects the cell's promise with the error's message (`Err("what failed".into())` for a
    /// tool's own failure).
    pub fn add<F, Fut>(mut self, definition: ToolDefinition, handler: F) -> Self
    where
        F: Fn(Option<Value>, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let handler: Handler =
            Arc::new(move |input, cancellation| Box::pin(handler(input, cancellation)));
        self.tools.push((definition, handler));
        self
    }

    /// Adds a function tool without a namespace, from its name, description, input schema and a
    /// handler of the argument alone.
    pub fn function<F, Fut>(
        self,
        name: &str,
        description: &str,
        input_schema: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Option<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let mut definition = ToolDefinition::function(ToolName::plain(name), description);
        definition.input_schema = Some(input_schema);
        self.add(definition, move |input, _cancellation| handler(input))
    }
}

#[async_trait]
impl ToolProvider for InProcessTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        let mut seen = HashSet::new();
        for (definition, _) in &self.tools {
            let global_name = definition.global_name();
            if !seen.insert(global_name.clone()) {
                return Err(ToolListError::conflict(format!(
                    "two in-process tools are both named tools.{global_name}; rename one of them"
                )));
            }
        }
        Ok(self
            .tools
            .iter()
            .map(|(definition, _)| definition.clone())
            .collect())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        let global_name = call.name.global_name();
        let handler = self
            .tools
            .iter()
            .find(|(definition, _)| definition.name == call.name)
            .map(|(_, handler)| Arc::clone(handler))
            .ok_or_else(|| {
                ToolError::not_found(format!("no in-process tool is named tools.{global_name}"))
            })?;
        // The handler reads a tree: the text becomes one here, and its answer text again.
        let input = call.input_value()?;
        let result = handler(input, context.cancellation).await?;
        Ok(JsonText::from(&result))
    }
}
