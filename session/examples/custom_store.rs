//! Recipe: a custom [`Store`] behind a session.
//!
//! A store keeps each session's stored values. This one keeps them in a map and prints every
//! commit; a real one might write to a database or a remote service. `commit` is async and is
//! called with no lock held, so it may be slow; it must apply all of a cell's writes or none.
//!
//! ```text
//! cargo run -p codemode-session --example custom_store
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use codemode_protocol::ToolDefinition;
use codemode_runtime_quickjs::QuickJsEngine;
use codemode_session::{
    Session, SessionConfig, SessionKey, Store, StoreError, ToolCallContext, ToolError,
    ToolInvocation, ToolListError, ToolProvider, render_text,
};

/// Stored values per session, in a map; every commit is printed.
#[derive(Default)]
struct AuditedStore {
    sessions: Mutex<HashMap<String, codemode_protocol::StoredValues>>,
}

#[async_trait]
impl Store for AuditedStore {
    async fn load(
        &self,
        session: &SessionKey,
    ) -> Result<codemode_protocol::StoredValues, StoreError> {
        let sessions = self.sessions.lock().expect("not poisoned");
        Ok(sessions
            .get(&session.to_string())
            .cloned()
            .unwrap_or_default())
    }

    async fn commit(
        &self,
        session: &SessionKey,
        writes: &codemode_protocol::StoredValues,
    ) -> Result<(), StoreError> {
        let mut keys: Vec<&String> = writes.keys().collect();
        keys.sort();
        eprintln!("[store] session {session} commits {keys:?}");
        let mut sessions = self.sessions.lock().expect("not poisoned");
        let values = sessions.entry(session.to_string()).or_default();
        values.extend(
            writes
                .iter()
                .map(|(key, value)| (key.clone(), value.clone())),
        );
        Ok(())
    }
}

/// No tools: this recipe is about the store.
struct NoTools;

#[async_trait]
impl ToolProvider for NoTools {
    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolListError> {
        Ok(Vec::new())
    }

    async fn call_tool(
        &self,
        call: ToolInvocation,
        _context: ToolCallContext,
    ) -> Result<codemode_session::JsonText, ToolError> {
        Err(ToolError::not_found(format!(
            "no tool is named {}",
            call.name.global_name()
        )))
    }
}

#[tokio::main]
async fn main() {
    let store = Arc::new(AuditedStore::default());
    for run in 1..=2 {
        // A new session with the same id sees what the earlier one stored.
        let session = Session::open(
            "example",
            Arc::new(QuickJsEngine::new()),
            store.clone(),
            Arc::new(NoTools),
            SessionConfig::default(),
        )
        .await
        .expect("the session opens");
        let source = r#"
            const count = (load("count") ?? 0) + 1;
            store("count", count);
            text(`this is run ${count}`);
        "#;
        let result = session.exec_tool(&format!("call-{run}"), source).await;
        println!("{}", render_text(&result.items));
        session.shutdown().await;
    }
}
