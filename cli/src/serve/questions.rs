//! Approvals a 2026-07-28 client answers by retrying its call ([`Questions`]): that revision
//! forbids a server's requests to the client, so a call that needs approval is asked in the
//! `exec` or `wait` result itself (`input_required`), and the answer comes with the client's
//! retry. Each question waits here, under a key, until its answer arrives or its cell stops
//! waiting; the output that the interrupted result carried waits with it, for the retry.

use std::collections::HashMap;

use codemode_protocol::CellId;
use codemode_session::{Approval, ApprovalRequest};
use parking_lot::Mutex;
use rmcp::model::ContentBlock;
use tokio::sync::oneshot;

/// A question waiting for a 2026-07-28 client's retry.
struct Pending {
    cell_id: CellId,
    request: ApprovalRequest,
    answer: oneshot::Sender<Approval>,
}

/// The questions of one codemode session waiting for a retry, and the output held for it.
#[derive(Default)]
pub(super) struct Questions {
    pending: Mutex<HashMap<String, Pending>>,
    held: Mutex<HashMap<CellId, Vec<ContentBlock>>>,
}

/// Takes a question back however its wait ends.
pub(super) struct Asked<'a> {
    questions: &'a Questions,
    key: String,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.questions.pending.lock().remove(&self.key);
    }
}

impl Questions {
    /// Puts `request` up for the client's next retry; the receiver hears the answer.
    pub(super) fn ask(
        &self,
        request: &ApprovalRequest,
    ) -> (Asked<'_>, oneshot::Receiver<Approval>) {
        let key = format!("approve-{}-{}", request.cell_id, request.call_id);
        let (answer, heard) = oneshot::channel();
        self.pending.lock().insert(
            key.clone(),
            Pending {
                cell_id: request.cell_id.clone(),
                request: request.clone(),
                answer,
            },
        );
        (
            Asked {
                questions: self,
                key,
            },
            heard,
        )
    }

    /// The questions of `cell_id` waiting now, by key, in key order.
    pub(super) fn of_cell(&self, cell_id: &CellId) -> Vec<(String, ApprovalRequest)> {
        let mut questions: Vec<(String, ApprovalRequest)> = self
            .pending
            .lock()
            .iter()
            .filter(|(_, pending)| &pending.cell_id == cell_id)
            .map(|(key, pending)| (key.clone(), pending.request.clone()))
            .collect();
        questions.sort_by(|a, b| a.0.cmp(&b.0));
        questions
    }

    /// Answers the question under `key`, if it still waits.
    pub(super) fn answer(&self, key: &str, approval: Approval) -> bool {
        match self.pending.lock().remove(key) {
            Some(pending) => pending.answer.send(approval).is_ok(),
            None => false,
        }
    }

    /// Keeps `items` (a result the client did not get, because a question took its place) for
    /// the retry's result.
    pub(super) fn hold(&self, cell_id: &CellId, items: Vec<ContentBlock>) {
        self.held
            .lock()
            .entry(cell_id.clone())
            .or_default()
            .extend(items);
    }

    /// The items held for `cell_id`, taken.
    pub(super) fn take_held(&self, cell_id: &CellId) -> Vec<ContentBlock> {
        self.held.lock().remove(cell_id).unwrap_or_default()
    }
}
