//! Stores: where a session's stored values live. In memory (gone with the process), in files
//! (one server, durable), or in PostgreSQL (several servers sharing their sessions).

mod file;
mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;

pub use file::{FORMAT_VERSION, FileStore};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, SCHEMA_VERSION, is_database_url};
