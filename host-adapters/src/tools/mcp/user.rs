//! What a downstream server asks of the user while a cell calls it (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`, and its log messages): passed on to the user of the
//! cell whose call is in flight ([`UserRoutes`]), through the session's `UserChannel`.
//!
//! A connection is shared by every session that uses the server, and MCP does not say which of
//! a client's requests a server's request belongs to. So a request is passed on only when it is
//! unambiguous: the calls in flight on the connection all belong to one user. With none, or
//! with several users (two tenants' cells calling at once), it is refused (roots: an empty list)
//! and nothing of one user's reaches another.

use std::sync::Arc;

use codemode_session::{RelayError, RelayedRequest, UserChannel};
use parking_lot::Mutex;

/// One call in flight and the user of its cell.
type CallUser = (u64, Arc<dyn UserChannel>);

/// The users of the calls in flight on one connection, by call.
#[derive(Clone, Default)]
pub(super) struct UserRoutes {
    calls: Arc<Mutex<Vec<CallUser>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for UserRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserRoutes")
            .field("calls", &self.calls.lock().len())
            .finish()
    }
}

/// A call's place in the routes, given up when the call ends.
pub(super) struct UserRoute {
    routes: UserRoutes,
    id: u64,
}

impl Drop for UserRoute {
    fn drop(&mut self) {
        self.routes.calls.lock().retain(|(id, _)| *id != self.id);
    }
}

impl UserRoutes {
    /// Routes the server's requests to `user` while the returned route lives.
    pub(super) fn register(&self, user: Arc<dyn UserChannel>) -> UserRoute {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.calls.lock().push((id, user));
        UserRoute {
            routes: self.clone(),
            id,
        }
    }

    /// The one user of the calls in flight, or why there is none to pass a request on to.
    pub(super) fn sole_user(&self) -> Result<Arc<dyn UserChannel>, RelayError> {
        let calls = self.calls.lock();
        let Some((_, first)) = calls.first() else {
            return Err(RelayError::new(
                "codemode passes a server's requests to a user only while one of that user's \
                 scripts calls the server, and none does now",
            ));
        };
        let same =
            |user: &Arc<dyn UserChannel>| std::ptr::addr_eq(Arc::as_ptr(user), Arc::as_ptr(first));
        if calls.iter().all(|(_, user)| same(user)) {
            Ok(Arc::clone(first))
        } else {
            Err(RelayError::new(
                "calls of several scripts are in flight on this server, and MCP does not say \
                 which one this request belongs to: codemode does not guess",
            ))
        }
    }

    /// Passes `request` on to the sole user.
    pub(super) async fn relay(
        &self,
        request: RelayedRequest,
    ) -> Result<serde_json::Value, RelayError> {
        let user = self.sole_user()?;
        user.relay(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_session::NobodyToAsk;

    #[test]
    fn only_a_single_user_in_flight_gets_a_servers_requests() {
        let routes = UserRoutes::default();
        assert!(routes.sole_user().is_err());
        let alice: Arc<dyn UserChannel> = Arc::new(NobodyToAsk("alice".into()));
        let bob: Arc<dyn UserChannel> = Arc::new(NobodyToAsk("bob".into()));
        let first = routes.register(Arc::clone(&alice));
        let second = routes.register(Arc::clone(&alice));
        assert!(std::ptr::addr_eq(
            Arc::as_ptr(&routes.sole_user().unwrap()),
            Arc::as_ptr(&alice)
        ));
        let other = routes.register(bob);
        let ambiguous = routes.sole_user().err().unwrap();
        assert!(ambiguous.message.contains("does not guess"), "{ambiguous}");
        drop(other);
        drop(first);
        assert!(routes.sole_user().is_ok());
        drop(second);
        assert!(routes.sole_user().is_err());
    }
}
