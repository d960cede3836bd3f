//! Why an engine could not start a cell ([`EngineError`]).

/// Why an engine could not start a cell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The OS refused to create the runtime thread.
    #[error("failed to start the runtime thread for the cell: {0}")]
    Thread(std::io::Error),
    /// A limit is outside what the engine accepts.
    #[error("invalid cell limit: {0}")]
    InvalidLimit(String),
    /// The engine itself cannot run (its library failed to initialise).
    #[error("the JavaScript engine is unavailable: {0}")]
    Unavailable(String),
    /// A runtime could not be created or prepared for a cell (its bootstrap failed, its CPU
    /// limit cannot be enforced): the text says what, and is the cell's error as it is.
    #[error("{0}")]
    Runtime(String),
}
