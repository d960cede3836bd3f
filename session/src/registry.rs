//! The registry of a session's cells: each cell from its start until its terminal outcome has
//! been delivered (or its actor closed), the cells being started, the ids, whether the session
//! still accepts cells, and what the embedder gave each cell to hold ([`CellTicket`]).

use std::collections::HashMap;
use std::sync::Arc;

use codemode_cell_actor::{CellEvent, CellHandle};
use codemode_protocol::CellId;

use crate::ids::CellIds;

/// Something an embedder hands a new cell to hold for as long as the cell is registered in its
/// session (running, or ended but not yet observed), dropped when it leaves the registry, or at
/// once when the cell does not start. A server's slot in a limit that several sessions share is
/// one: it is reserved before the `exec` call awaits anything, so that concurrent calls cannot
/// all pass one check, and it is given back exactly when the session stops counting the cell.
pub struct CellTicket(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>);

impl CellTicket {
    /// A ticket holding `held` (its `Drop` runs when the cell leaves the registry).
    pub fn new(held: impl std::any::Any + Send + Sync) -> Self {
        CellTicket(Box::new(held))
    }
}

impl std::fmt::Debug for CellTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CellTicket")
    }
}

/// The cells of one session.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) cells: HashMap<CellId, CellEntry>,
    /// Cells whose engine start is under way (no lock is held while an engine starts a cell):
    /// counted against the active-cell limit.
    pub(crate) starting: usize,
    pub(crate) ids: CellIds,
    pub(crate) shut_down: bool,
    /// Cells stopped because the `exec` that started them was cancelled: their last event (what
    /// they produced, and how they ended), kept for the `wait` that asks for it.
    pub(crate) kept: HashMap<CellId, (CellEvent, Arc<str>)>,
}

pub(crate) struct CellEntry {
    pub(crate) handle: CellHandle,
    /// The source as the engine ran it, for error hints.
    pub(crate) source: Arc<str>,
    /// What the embedder gave the cell to hold while it is registered.
    pub(crate) _ticket: Option<CellTicket>,
    /// The cell's span, which the requests that observe it link to.
    pub(crate) span: tracing::Span,
}
