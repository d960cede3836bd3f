//! The in-memory store: the embedded default. Values live as long as the store; sessions with
//! the same id share them, others never do.

use codemode_protocol::StoredValues;
use parking_lot::Mutex;
use std::collections::HashMap;

use async_trait::async_trait;
use codemode_session::{SessionKey, Store, StoreError};

/// Stored values per session, in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<SessionKey, StoredValues>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn load(&self, session: &SessionKey) -> Result<StoredValues, StoreError> {
        let sessions = self.sessions.lock();
        Ok(sessions.get(session).cloned().unwrap_or_default())
    }

    async fn commit(&self, session: &SessionKey, writes: &StoredValues) -> Result<(), StoreError> {
        let mut sessions = self.sessions.lock();
        sessions.entry(session.clone()).or_default().extend(
            writes
                .iter()
                .map(|(key, value)| (key.clone(), value.clone())),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn sessions_keep_their_own_values_merged_by_key() {
        let store = MemoryStore::new();
        store
            .commit(
                &"a".into(),
                &codemode_protocol::stored_values_from([
                    ("k".to_owned(), json!(1)),
                    ("j".to_owned(), json!(2)),
                ]),
            )
            .await
            .unwrap();
        store
            .commit(
                &"a".into(),
                &codemode_protocol::stored_values_from([("k".to_owned(), json!(3))]),
            )
            .await
            .unwrap();
        assert_eq!(
            store.load(&"a".into()).await.unwrap(),
            codemode_protocol::stored_values_from([
                ("k".to_owned(), json!(3)),
                ("j".to_owned(), json!(2))
            ])
        );
        assert!(store.load(&"b".into()).await.unwrap().is_empty());
        // The same name of another tenant is another session.
        assert!(
            store
                .load(&SessionKey::of_tenant("t", "a"))
                .await
                .unwrap()
                .is_empty()
        );
    }
}
