//! Plain data shared by every layer of codemode: the output items a cell produces, the definitions
//! of the tools a cell may call, the model-facing `exec`/`wait` requests, and the limits and defaults
//! that govern them.
//!
//! This crate knows nothing about engines, threads, tokio or I/O. Everything here is plain data with a
//! stable, documented JSON shape (each shape is pinned by a snapshot test), so that any layer, and any
//! embedder, can hold and exchange it.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod annotations;
mod cell_id;
mod json_text;
pub mod limits;
mod output;
mod pragma;
mod request;
pub mod schema;
mod stored;
mod tenant;
mod tool;
mod typescript;
mod unavailable;

pub use annotations::ToolAnnotations;
pub use cell_id::CellId;
pub use json_text::{JsonText, JsonTextError, MAX_JSON_TEXT_DEPTH};
pub use output::{
    AudioItem, ImageDetail, ImageItem, MCP_IMAGE_DETAIL_META, OutputItem, ParseImageDetailError,
};
pub use pragma::{ExecInput, ExecInputError, MAX_SAFE_INTEGER, parse_exec_input};
pub use request::{ExecuteRequest, WaitRequest};
pub use stored::{StoredValue, StoredValues, stored_bytes, stored_entry_bytes, stored_values_from};
pub use tenant::Tenant;
pub use tool::{ResultType, ToolDefinition, ToolKind, ToolName, normalize_identifier};
pub use typescript::{
    MCP_TYPES_DECLARATION, namespace_groups, tool_declaration, tools_declaration,
};
pub use unavailable::Unavailable;
