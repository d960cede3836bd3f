//! Cell ids as the model sees them: a number per session, `"1"`, `"2"`, …, and in a cluster the
//! id of the server that runs the cell before it, `"<server>-<number>"`. The one place the form
//! is written and read: a server allocates ids with [`CellId::to_string`] and finds the server of
//! an id the model sends back with [`CellId::parse`], never by cutting strings of its own.

use std::fmt;

/// A cell's id: its number within its session, and the server that runs it when it has one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CellId {
    server: Option<String>,
    number: u64,
}

impl CellId {
    /// Cell `number` of a server that is not in a cluster.
    pub fn new(number: u64) -> Self {
        CellId {
            server: None,
            number,
        }
    }

    /// Cell `number` run by `server` (letters and digits).
    pub fn on_server(server: impl Into<String>, number: u64) -> Self {
        CellId {
            server: Some(server.into()),
            number,
        }
    }

    /// The server that runs the cell, if the id names one.
    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    /// Its number within its session.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The cell id `text` names, or `None` when it is not one this runtime hands out (the model
    /// may send anything): only the exact text an id displays as (so `"01"` names
    /// no cell, as no cell is called that).
    pub fn parse(text: &str) -> Option<Self> {
        // Digits as a number writes them: no sign, no leading zero.
        let digits = |part: &str| {
            (!part.is_empty()
                && part.bytes().all(|byte| byte.is_ascii_digit())
                && (part == "0" || !part.starts_with('0')))
            .then(|| part.parse().ok())
            .flatten()
        };
        match text.split_once('-') {
            None => digits(text).map(CellId::new),
            Some((server, number)) => {
                let server_ok =
                    !server.is_empty() && server.bytes().all(|byte| byte.is_ascii_alphanumeric());
                server_ok
                    .then(|| digits(number))
                    .flatten()
                    .map(|number| CellId::on_server(server, number))
            }
        }
    }
}

/// `"<number>"`, or `"<server>-<number>"`.
impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.server {
            Some(server) => write!(f, "{server}-{}", self.number),
            None => write!(f, "{}", self.number),
        }
    }
}

/// As its text (`"7"`, `"a1b2-7"`), as the model sees it.
impl serde::Serialize for CellId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// From its text, refused unless it is one [`CellId::parse`] reads.
impl<'de> serde::Deserialize<'de> for CellId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        CellId::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a cell id")))
    }
}

impl PartialEq<str> for CellId {
    fn eq(&self, text: &str) -> bool {
        CellId::parse(text).is_some_and(|id| id == *self)
    }
}

impl PartialEq<&str> for CellId {
    fn eq(&self, text: &&str) -> bool {
        *self == **text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_back_as_it_was_written() {
        for id in [CellId::new(1), CellId::on_server("a1b2c3d4e5f6", 42)] {
            assert_eq!(CellId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(CellId::on_server("a1b2", 7).to_string(), "a1b2-7");
        assert_eq!(CellId::parse("a1b2-7").unwrap().server(), Some("a1b2"));
    }

    #[test]
    fn text_that_is_no_cell_id_is_none() {
        for text in [
            "",
            "-",
            "-1",
            "a-",
            "a-b",
            "1.5",
            "../1",
            "a/b-1",
            "1-2-3",
            " 1",
            "+1",
            "99999999999999999999999",
        ] {
            assert_eq!(CellId::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn only_the_text_an_id_is_written_as_names_it() {
        for text in ["01", "a1-007", "+1", "1 ", ""] {
            assert_eq!(CellId::parse(text), None, "{text:?}");
        }
        assert_eq!(CellId::new(7), "7");
        assert!(CellId::new(7) != "07");
        assert_eq!(CellId::on_server("a1", 2), "a1-2");
    }
}
