//! Why a session operation failed ([`SessionError`]).

use codemode_cell_actor::CellError;
use codemode_engine::EngineError;
use codemode_protocol::CellId;

use crate::ports::{StoreError, ToolListError};

/// Why a session operation failed. Each message carries its cause; none has a separate source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("the session is shut down and starts no more cells")]
    /// `shutdown` was called.
    ShutDown,
    #[error(
        "too many active cells: this session already has {limit} cells running or waiting to be \
         observed (the max_active_cells limit); wait for or terminate one before starting another"
    )]
    /// The active-cell limit is reached.
    TooManyCells {
        /// The limit.
        limit: usize,
    },
    #[error("this session has used every cell id and can start no more cells; open a new session")]
    /// Every cell id was used.
    CellIdsExhausted,
    /// The source is larger than a cell accepts.
    #[error(
        "the source is {size} bytes, more than the {limit} bytes a cell accepts; send smaller \
         code, and pass large data through tools or stored values"
    )]
    SourceTooLarge {
        /// The source's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// An observation or termination of a cell got no event.
    #[error("cell {cell_id}: {error}")]
    Cell {
        /// The cell's id.
        cell_id: CellId,
        /// What went wrong with it.
        error: CellError,
    },
    /// The `exec` that started the cell was cancelled by its caller: the cell was terminated, and
    /// `wait` with its id returns what it produced.
    #[error(
        "the exec was cancelled: cell {cell_id} was terminated; wait with its id returns what it \
         produced"
    )]
    Cancelled {
        /// The cell's id.
        cell_id: CellId,
    },
    #[error(transparent)]
    /// The engine could not start the cell.
    Engine(#[from] EngineError),
    #[error("failed to load the session's stored values: {0}")]
    /// The store could not load the values.
    Store(StoreError),
    #[error("failed to list the session's tools: {0}")]
    /// The provider could not list its tools.
    Tools(ToolListError),
}
