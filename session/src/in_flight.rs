//! The tool calls a session's cells have running now ([`CallsInFlight`]), with their tools and
//! ages: what a quiet `wait` says its cell waits on.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use codemode_protocol::CellId;
use parking_lot::Mutex;

/// One running call, as a quiet observation shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallInFlight {
    /// The call's id within its cell.
    pub call_id: String,
    /// The tool's name as cells see it.
    pub tool: String,
    /// How long it has run.
    pub running: Duration,
}

/// The running calls of a session's cells.
#[derive(Default)]
pub(crate) struct CallsInFlight {
    calls: Mutex<HashMap<(CellId, String), (String, Instant)>>,
}

/// Takes a call off the list however it ends.
pub(crate) struct InFlightGuard<'a> {
    calls: &'a CallsInFlight,
    key: Option<(CellId, String)>,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.calls.calls.lock().remove(&key);
        }
    }
}

impl CallsInFlight {
    /// Puts a call on the list until the guard drops.
    pub(crate) fn start(&self, cell_id: &CellId, call_id: &str, tool: &str) -> InFlightGuard<'_> {
        let key = (cell_id.clone(), call_id.to_owned());
        self.calls
            .lock()
            .insert(key.clone(), (tool.to_owned(), Instant::now()));
        InFlightGuard {
            calls: self,
            key: Some(key),
        }
    }

    /// The running calls of `cell_id`, the oldest first.
    pub(crate) fn of(&self, cell_id: &CellId) -> Vec<CallInFlight> {
        let mut calls: Vec<CallInFlight> = self
            .calls
            .lock()
            .iter()
            .filter(|((cell, _), _)| cell == cell_id)
            .map(|((_, call_id), (tool, since))| CallInFlight {
                call_id: call_id.clone(),
                tool: tool.clone(),
                running: since.elapsed(),
            })
            .collect();
        calls.sort_by_key(|call| std::cmp::Reverse(call.running));
        calls
    }
}
