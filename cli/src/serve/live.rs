//! One open codemode session as the server holds it (`LiveSession`): its tenant, its slot under
//! the limits, when it was last used, its `exec` tasks, and the `wait` calls observing its cells.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_session::{Session, Tenant};
use rmcp::task_manager::TaskManager;
use tokio_util::sync::CancellationToken;

use super::cluster::Cluster;
use super::limits::Slot;
use super::questions::Questions;

/// One open codemode session, whose tenant it is, when it was last used, and its `exec` tasks
/// (another session's task ids find nothing here).
pub(super) struct LiveSession {
    /// Its place under the session limits, given back when it closes.
    _slot: Slot,
    pub(super) session: Session,
    pub(super) tenant: Tenant,
    last_used: parking_lot::Mutex<Instant>,
    pub(super) tasks: TaskManager,
    /// The cluster this server is in, told when the session closes.
    cluster: Option<Arc<Cluster>>,
    /// The `wait` calls observing a cell now, by cell id.
    waits: parking_lot::Mutex<HashMap<String, WaitInFlight>>,
    /// Approvals waiting for a 2026-07-28 client's retry.
    pub(super) questions: Arc<Questions>,
}

/// A `wait` call observing a cell: whether its client cancelled it, and when it let go.
#[derive(Clone)]
pub(super) struct WaitInFlight {
    /// The request's token, cancelled by the client's `notifications/cancelled`.
    cancelled: CancellationToken,
    /// Cancelled once the call stopped observing.
    released: CancellationToken,
}

/// Holds a cell's [`WaitInFlight`] entry while a `wait` observes it; dropping it lets go.
pub(super) struct WaitRegistration {
    live: Arc<LiveSession>,
    cell_id: String,
    released: CancellationToken,
}

impl Drop for WaitRegistration {
    fn drop(&mut self) {
        self.released.cancel();
        let mut waits = self.live.waits.lock();
        if waits
            .get(&self.cell_id)
            .is_some_and(|wait| wait.released.is_cancelled())
        {
            waits.remove(&self.cell_id);
        }
    }
}

/// The longest a `wait` waits for a cancelled one to let go of its cell (it lets go as soon as
/// its task runs again).
const CANCELLED_WAIT_RELEASE: Duration = Duration::from_secs(2);

impl Drop for LiveSession {
    fn drop(&mut self) {
        if let Some(cluster) = &self.cluster {
            cluster.session_closed(self.session.id());
        }
    }
}

impl LiveSession {
    /// A session just opened, holding `slot` under the session limits until it is dropped; the
    /// `cluster`, if any, is told when it closes.
    pub(super) fn new(
        slot: Slot,
        session: Session,
        tenant: Tenant,
        tasks: TaskManager,
        cluster: Option<Arc<Cluster>>,
    ) -> Self {
        LiveSession {
            _slot: slot,
            session,
            tenant,
            last_used: parking_lot::Mutex::new(Instant::now()),
            tasks,
            cluster,
            waits: parking_lot::Mutex::new(HashMap::new()),
            questions: Arc::default(),
        }
    }

    /// Registers a `wait` on `cell_id` whose request is cancelled by `cancelled`. A `wait` the
    /// client cancelled that has not let go of the cell yet is given the moment it needs first,
    /// so that the new one observes the cell instead of being told it is busy.
    pub(super) async fn start_wait(
        self: &Arc<Self>,
        cell_id: &str,
        cancelled: CancellationToken,
    ) -> WaitRegistration {
        let previous = self.waits.lock().get(cell_id).cloned();
        if let Some(previous) = previous
            && previous.cancelled.is_cancelled()
        {
            let _ =
                tokio::time::timeout(CANCELLED_WAIT_RELEASE, previous.released.cancelled()).await;
        }
        let released = CancellationToken::new();
        let mut waits = self.waits.lock();
        // A wait still holding the cell keeps its entry (this one will be told the cell is busy).
        if waits
            .get(cell_id)
            .is_none_or(|holding| holding.released.is_cancelled())
        {
            waits.insert(
                cell_id.to_owned(),
                WaitInFlight {
                    cancelled,
                    released: released.clone(),
                },
            );
        }
        drop(waits);
        WaitRegistration {
            live: Arc::clone(self),
            cell_id: cell_id.to_owned(),
            released,
        }
    }

    pub(super) fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_used.lock().elapsed()
    }
}
