//! `codemode mcp --http`'s door, in parts: [`tenant`] (who a request is, and the names that
//! reach file paths), [`tokens`] (the token file, read at start-up), [`gate`] (Host, Origin and
//! token checks on every request), [`owners`] (MCP session ids bound to their tenant), and
//! [`listener`] (connections, header deadlines, drain) and [`answering`] (the responses a drain
//! lets finish).

mod answering;
mod gate;
mod listener;
mod owners;
mod tenant;
mod tokens;

pub use answering::{Answering, track};
pub use gate::{Gate, guard};
pub use listener::{ConnectionLimits, DEFAULT_HEADER_READ_TIMEOUT, serve};
pub use owners::{SessionOwners, bind_sessions};
pub use tenant::{ANONYMOUS_TENANT, TENANT_HEADER, Tenant, check_name};
pub use tokens::{Authentication, authentication, read_secret};
