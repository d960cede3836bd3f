//! Stores: where a session's stored values live.

mod file;
mod memory;

pub use file::{FORMAT_VERSION, FileStore};
pub use memory::MemoryStore;
