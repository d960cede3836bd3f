//! Cell ids: `"1"`, `"2"`, … per session (or `"<prefix>-1"`, … with a prefix), allocated without
//! ever wrapping (sessions).

use codemode_protocol::CellId;

/// The next cell id of a session.
#[derive(Debug)]
pub(crate) struct CellIds {
    next: Option<u64>,
    prefix: Option<String>,
}

impl Default for CellIds {
    fn default() -> Self {
        CellIds::starting_at(1)
    }
}

impl CellIds {
    pub(crate) fn starting_at(first: u64) -> Self {
        CellIds {
            next: Some(first),
            prefix: None,
        }
    }

    /// Ids `"<prefix>-1"`, `"<prefix>-2"`, … (plain numbers with `None`).
    pub(crate) fn with_prefix(mut self, prefix: Option<String>) -> Self {
        self.prefix = prefix;
        self
    }

    /// The next id, or `None` once every id has been used.
    pub(crate) fn allocate(&mut self) -> Option<CellId> {
        let id = self.next?;
        self.next = id.checked_add(1);
        let id = match &self.prefix {
            Some(server) => CellId::on_server(server.clone(), id),
            None => CellId::new(id),
        };
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_count_from_one() {
        let mut ids = CellIds::default();
        assert_eq!(ids.allocate(), Some(CellId::new(1)));
        assert_eq!(ids.allocate(), Some(CellId::new(2)));
    }

    #[test]
    fn a_prefix_names_the_server() {
        let mut ids = CellIds::default().with_prefix(Some("a1b2".into()));
        assert_eq!(ids.allocate(), Some(CellId::on_server("a1b2", 1)));
        assert_eq!(ids.allocate(), Some(CellId::on_server("a1b2", 2)));
    }

    #[test]
    fn allocation_fails_cleanly_instead_of_wrapping() {
        let mut ids = CellIds::starting_at(u64::MAX);
        assert_eq!(ids.allocate(), Some(CellId::new(u64::MAX)));
        assert_eq!(ids.allocate(), None);
        assert_eq!(ids.allocate(), None);
    }
}
