//! Approvals for a 2026-07-28 client, which takes no requests from the server (SEP-2322): when
//! the cell an `exec` or `wait` observed has calls waiting for approval, the result is
//! `input_required`, one approval form per call, with the output it would have carried held
//! back; the client's retry of the same call brings the answers and the sealed request state,
//! and is answered as a `wait` on the cell (its state now first, then the held output). The state is sealed with a
//! key only this server holds (HMAC, with an expiry and the session it belongs to), so a client
//! can neither forge it nor use another session's.

use std::collections::BTreeMap;
use std::time::Duration;

use codemode_protocol::CellId;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, InputRequest, InputRequiredResult, ProtocolVersion,
};
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};

use super::live::LiveSession;
use super::user::{approval_of, form};

/// How long a client may take to answer before its retry is refused.
const STATE_TTL: Duration = Duration::from_secs(30 * 60);

/// What the sealed state names: the cell and the questions asked.
#[derive(Serialize, Deserialize)]
struct State {
    cell_id: String,
    keys: Vec<String>,
}

/// Whether the request speaks a revision that takes no requests from the server.
pub(super) fn answers_by_retry(meta: &rmcp::model::RequestMetaObject) -> bool {
    meta.protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
}

/// A fresh key for sealing request state, held by this server only.
pub(super) fn state_codec() -> Result<RequestStateCodec, Box<dyn std::error::Error>> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)?;
    Ok(RequestStateCodec::try_new(key.to_vec())?)
}

/// What a 2026-07-28 client gets for an observation of `cell_id` (an `exec` that left it
/// running, a `wait`, a retry): the one step that puts a result together for a client that
/// answers by retrying. The cell's state now comes first (the new result's header: a header held
/// from an interrupted result is stale and is never shown), then the output an earlier question
/// held back, then the new output; and when calls of the cell wait for approval, `input_required`
/// with a form for each instead, that output held for the retry.
pub(super) fn answer(
    live: &LiveSession,
    codec: &RequestStateCodec,
    result: CallToolResult,
    cell_id: Option<&CellId>,
) -> CallToolResponse {
    let Some(cell_id) = cell_id else {
        return result.into();
    };
    let result = with_held(live, cell_id, result);
    ask_or_answer(live, codec, result, cell_id)
}

/// `result` as it is, or (when calls of `cell_id` wait for approval) `input_required` with a
/// form for each, `result`'s output (all but its header) held for the retry.
fn ask_or_answer(
    live: &LiveSession,
    codec: &RequestStateCodec,
    result: CallToolResult,
    cell_id: &CellId,
) -> CallToolResponse {
    // The gate shows a call as waiting only once its question is up here.
    let questions = live.questions.of_cell(cell_id);
    if questions.is_empty() {
        return result.into();
    }
    let state = State {
        cell_id: cell_id.to_string(),
        keys: questions.iter().map(|(key, _)| key.clone()).collect(),
    };
    let associated = live.session.id().as_bytes().to_vec();
    let sealed = codec.seal_json_with(
        &state,
        &SealOptions::new()
            .associated_data(&associated)
            .ttl(STATE_TTL),
    );
    let Ok(sealed) = sealed else {
        return result.into();
    };
    // The header says what the cell was doing when the question was put: the retry's own
    // result says what it does then.
    live.questions.hold(
        cell_id,
        result.content.into_iter().skip(HEADER_BLOCKS).collect(),
    );
    let requests: BTreeMap<String, InputRequest> = questions
        .into_iter()
        .map(|(key, request)| {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: request.message(),
                requested_schema: form(),
            };
            (key, InputRequest::Elicitation(ElicitRequest::new(params)))
        })
        .collect();
    CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), Some(sealed)))
}

/// How many blocks an observation's rendering starts with that say the cell's state (status,
/// waits, wall time): one text block (`codemode_session::render_report`).
const HEADER_BLOCKS: usize = 1;

/// Applies a retry's answers (from `client`, as [`super::user::client_named`] names it) to the
/// questions its sealed state names, and lets the cell take
/// them up (so that the questions answered are not news to the wait that follows); returns the
/// cell to observe. A state that is not this server's, has expired, or names another session is
/// refused.
pub(super) async fn apply_answers(
    live: &LiveSession,
    codec: &RequestStateCodec,
    params: &CallToolRequestParams,
    client: &str,
) -> Result<CellId, ErrorData> {
    let refused = |why: &str| {
        ErrorData::invalid_params(
            format!("the retry's requestState is refused: {why}; call again without it"),
            None,
        )
    };
    let sealed = params
        .request_state
        .as_deref()
        .ok_or_else(|| refused("it is missing"))?;
    let associated = live.session.id().as_bytes().to_vec();
    let state: State = codec
        .open_json_with(sealed, &associated)
        .map_err(|_| refused("it is not this server's, is not for this session, or has expired"))?;
    let cell_id = CellId::parse(&state.cell_id).ok_or_else(|| refused("it names no cell"))?;
    let responses = params.input_responses.clone().unwrap_or_default();
    for key in &state.keys {
        let Some(response) = responses.get(key) else {
            continue;
        };
        let approval = serde_json::from_value::<ElicitResult>(response.clone())
            .map(|answer| approval_of(&answer, client))
            .unwrap_or(codemode_session::Approval::Deny {
                by: "the user (an answer that is not an elicitation result)".to_owned(),
            });
        live.questions.answer(key, approval);
    }
    // The gate takes an answer up as soon as the cell's call runs again: at once, unless the
    // machine is busy. Bounded, so a wedged cell cannot hold the retry.
    let answered = |call: &codemode_session::AwaitingApproval| {
        state
            .keys
            .iter()
            .any(|key| *key == format!("approve-{cell_id}-{}", call.call_id))
    };
    for _ in 0..200 {
        if !live
            .session
            .awaiting_approval(&cell_id)
            .iter()
            .any(answered)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(cell_id)
}

/// The result's header, then the output held from an interrupted result, then the new output.
fn with_held(live: &LiveSession, cell_id: &CellId, mut result: CallToolResult) -> CallToolResult {
    let held: Vec<ContentBlock> = live.questions.take_held(cell_id);
    if held.is_empty() {
        return result;
    }
    let new_output = result
        .content
        .split_off(HEADER_BLOCKS.min(result.content.len()));
    result.content.extend(held);
    result.content.extend(new_output);
    result
}
