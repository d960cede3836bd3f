//! A server that cannot be started as configured ([`RefusedServer`]: a variable its entry uses
//! is not set, its `envFile` cannot be read): it offers no tools and reports itself down with
//! why, so that the rest of the configuration runs and the model and the operator see the reason.

use async_trait::async_trait;
use codemode_protocol::{JsonText, ToolDefinition};
use codemode_session::{
    ToolCallContext, ToolError, ToolInvocation, ToolListError, ToolProvider, Unavailable,
};

/// A configured server that is not started, and why.
#[derive(Debug, Clone)]
pub struct RefusedServer {
    down: Unavailable,
}

impl RefusedServer {
    /// Server `name` (the namespace its tools would have) is not started, for `reason`.
    pub fn new(name: impl Into<String>, reason: impl Into<String>) -> Self {
        RefusedServer {
            down: Unavailable::new(name, reason),
        }
    }
}

#[async_trait]
impl ToolProvider for RefusedServer {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        Ok(Vec::new())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        _context: ToolCallContext,
    ) -> Result<JsonText, ToolError> {
        Err(ToolError::unavailable(format!(
            "tools.{} is not available: the server \"{}\" is not started ({})",
            call.name.global_name(),
            self.down.name,
            self.down.reason
        )))
    }

    fn unavailable(&self) -> Vec<Unavailable> {
        vec![self.down.clone()]
    }
}
