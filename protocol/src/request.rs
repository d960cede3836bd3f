//! The requests behind the model-facing `exec` and `wait` tools (the model-facing tools).
//!
//! JSON shapes:
//! - execute: `{"call_id": "call-1", "source": "text(1)", "yield_time_ms": 10000,
//!   "max_output_tokens": 1000}`; the last two are omitted when unset.
//! - wait: `{"cell_id": "1", "yield_time_ms": 10000, "max_tokens": 1000, "terminate": false,
//!   "cell_ids": ["2", "3"]}`; every field but `cell_id` is optional (`cell_ids`, more cells to
//!   watch, is omitted when empty).

use serde::{Deserialize, Serialize};

/// Start a cell and observe it until its yield time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// The id of the model's tool call that asked for this cell; notifications carry it.
    pub call_id: String,
    /// The JavaScript source, after any pragma line has been taken off.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// How long to observe the new cell; the default when `None`.
    pub yield_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The output budget of the rendering; the default when `None`.
    pub max_output_tokens: Option<u64>,
}

/// Observe a running cell again, or terminate it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRequest {
    /// The cell to observe or terminate.
    pub cell_id: String,
    /// How long to observe it; the default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_time_ms: Option<u64>,
    /// The output budget of the rendering; the default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Terminate the cell instead of observing it.
    #[serde(default)]
    pub terminate: bool,
    /// More cells to watch beside `cell_id`: the wait returns when any of them has news.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cell_ids: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_stable_json_shapes() {
        let execute = ExecuteRequest {
            call_id: "call-1".into(),
            source: "text(1)".into(),
            yield_time_ms: Some(2_000),
            max_output_tokens: None,
        };
        let wait = WaitRequest {
            cell_id: "3".into(),
            yield_time_ms: None,
            max_tokens: Some(500),
            terminate: true,
            cell_ids: Vec::new(),
        };
        insta::assert_json_snapshot!("execute_request", execute);
        insta::assert_json_snapshot!("wait_request", wait);
    }

    #[test]
    fn a_wait_request_needs_only_a_cell_id() {
        let wait: WaitRequest = serde_json::from_str(r#"{"cell_id": "7"}"#).unwrap();
        assert_eq!(
            wait,
            WaitRequest {
                cell_id: "7".into(),
                yield_time_ms: None,
                max_tokens: None,
                terminate: false,
                cell_ids: Vec::new(),
            }
        );
    }
}
