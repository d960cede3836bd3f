//! The model-facing tools (the model-facing tools): `exec` runs JavaScript source (with its optional pragma) in a new
//! cell, `wait` observes or terminates a running cell. Each returns content items ready to hand to
//! the model, rendered as the output contract says, and whether they describe an error. Their descriptions list the
//! globals and every enabled tool as a TypeScript declaration.

use codemode_protocol::{CellId, ExecuteRequest, OutputItem, WaitRequest, parse_exec_input};
use serde_json::{Value, json};

use crate::discovery::tools_section;
use crate::registry::CellTicket;
use crate::render::render_report;
use crate::report::{CellReport, WaitOutcome};
use crate::session::Session;
use crate::user::UserChannel;
use codemode_cell_actor::CellEvent;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a model-facing tool call returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolResult {
    /// The content items for the model.
    pub items: Vec<OutputItem>,
    /// The call itself failed (bad input, unknown cell, a limit): the model should change what it
    /// sends. A script that failed is not an error of the call.
    pub is_error: bool,
    /// The cell observed, when it is still running (it yielded, or waits at its pending
    /// frontier): `wait` with this id picks it up. `None` when it ended, or no cell was observed.
    pub running_cell_id: Option<CellId>,
}

impl ToolResult {
    /// A result of these items, which end no running cell.
    pub fn new(items: Vec<OutputItem>, is_error: bool) -> Self {
        ToolResult {
            items,
            is_error,
            running_cell_id: None,
        }
    }

    fn error(message: impl Into<String>) -> Self {
        ToolResult {
            items: vec![OutputItem::text(message)],
            is_error: true,
            running_cell_id: None,
        }
    }

    /// The result of an observation: its rendering, and the cell if it goes on.
    fn observed(report: &CellReport, max_output_tokens: u64) -> Self {
        let running = matches!(
            report.event,
            CellEvent::Yielded { .. } | CellEvent::Pending { .. }
        );
        ToolResult {
            items: render_report(report, max_output_tokens),
            is_error: false,
            running_cell_id: running.then(|| report.cell_id.clone()),
        }
    }
}

/// What an `exec` call may set beside its source: each wins over the source's pragma line.
#[derive(Default)]
#[non_exhaustive]
pub struct ExecOptions {
    /// How long to observe the new cell.
    pub yield_time_ms: Option<u64>,
    /// The output budget of the rendering.
    pub max_output_tokens: Option<u64>,
    /// Held by the new cell while it is registered (see [`CellTicket`]).
    pub ticket: Option<CellTicket>,
    /// Who is asked about the cell's calls that need approval: the client that ran it. `None`:
    /// the session's user channel ([`SessionConfig::user`](crate::SessionConfig::user)).
    pub user: Option<Arc<dyn UserChannel>>,
    /// Cancelled when the caller of `exec` gives up on it (an MCP `notifications/cancelled`):
    /// while `exec` observes the cell, the cell is terminated, and what it produced is kept for
    /// a later `wait`.
    pub cancellation: Option<CancellationToken>,
    /// End the first observation as soon as one of the cell's calls waits for approval (for a
    /// client that is asked in the result, not by a request of its own).
    pub yield_on_approval: bool,
}

impl std::fmt::Debug for ExecOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecOptions")
            .field("yield_time_ms", &self.yield_time_ms)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("ticket", &self.ticket)
            .field("user", &self.user.is_some())
            .field("cancellation", &self.cancellation)
            .field("yield_on_approval", &self.yield_on_approval)
            .finish()
    }
}

impl ExecOptions {
    /// These options with a yield time.
    pub fn with_yield_time_ms(mut self, yield_time_ms: Option<u64>) -> Self {
        self.yield_time_ms = yield_time_ms;
        self
    }

    /// These options with an output budget.
    pub fn with_max_output_tokens(mut self, max_output_tokens: Option<u64>) -> Self {
        self.max_output_tokens = max_output_tokens;
        self
    }

    /// These options with a ticket the new cell holds while it is registered.
    pub fn with_ticket(mut self, ticket: CellTicket) -> Self {
        self.ticket = Some(ticket);
        self
    }

    /// These options asking `user` about the cell's calls that need approval.
    pub fn with_user(mut self, user: Arc<dyn UserChannel>) -> Self {
        self.user = Some(user);
        self
    }

    /// These options ending the first observation as soon as a call of the cell waits for
    /// approval.
    pub fn with_yield_on_approval(mut self, yield_on_approval: bool) -> Self {
        self.yield_on_approval = yield_on_approval;
        self
    }

    /// These options stopping the cell when `cancellation` fires while `exec` observes it.
    pub fn with_cancellation(mut self, cancellation: CancellationToken) -> Self {
        self.cancellation = Some(cancellation);
        self
    }
}

impl Session {
    /// The `exec` tool: `input` is the model's source, optionally starting with a pragma line.
    pub async fn exec_tool(&self, call_id: &str, input: &str) -> ToolResult {
        self.exec_tool_with(call_id, input, ExecOptions::default())
            .await
    }

    /// The `exec` tool with options given beside the source (as arguments of the tool call);
    /// they win over the pragma line.
    pub async fn exec_tool_with(
        &self,
        call_id: &str,
        input: &str,
        options: ExecOptions,
    ) -> ToolResult {
        let parsed = match parse_exec_input(input) {
            Ok(parsed) => parsed,
            Err(error) => return ToolResult::error(error.to_string()),
        };
        let yield_time_ms = options.yield_time_ms.or(parsed.yield_time_ms);
        let requested_tokens = options.max_output_tokens.or(parsed.max_output_tokens);
        let max_output_tokens = requested_tokens.unwrap_or(self.config().default_max_output_tokens);
        let request = ExecuteRequest {
            call_id: call_id.to_owned(),
            source: parsed.source,
            yield_time_ms,
            max_output_tokens: requested_tokens,
        };
        let yield_time = self.config().exec_yield(request.yield_time_ms);
        let observation = codemode_cell_actor::Observation::yield_after(yield_time);
        let extras = crate::session::CellExtras {
            ticket: options.ticket,
            user: options.user,
            cancellation: options.cancellation,
            yield_on_approval: options.yield_on_approval,
        };
        match self.start(request, observation, extras).await {
            Ok(report) => ToolResult::observed(&report, max_output_tokens),
            Err(error) => ToolResult::error(error.to_string()),
        }
    }

    /// The `wait` tool.
    pub async fn wait_tool(&self, request: WaitRequest) -> ToolResult {
        let max_tokens = request
            .max_tokens
            .unwrap_or(self.config().default_max_output_tokens);
        let outcomes = match self.wait_many(request).await {
            Ok(outcomes) => outcomes,
            Err(error) => return ToolResult::error(error.to_string()),
        };
        let mut results = outcomes.iter().map(|outcome| match outcome {
            WaitOutcome::Observed(report) => ToolResult::observed(report, max_tokens),
            WaitOutcome::NotFound { cell_id } => ToolResult::error(format!(
                "No cell with ID {cell_id}: it was never started, or it has ended and its result was \
                 already returned."
            )),
        });
        let Some(mut first) = results.next() else {
            return ToolResult::error("wait names no cell");
        };
        // Several cells with news: each one's rendering, one after another.
        for next in results {
            first.items.extend(next.items);
            first.is_error &= next.is_error;
            first.running_cell_id = first.running_cell_id.or(next.running_cell_id);
        }
        first
    }

    /// The description of the `exec` tool: the globals, then every enabled tool.
    pub fn exec_description(&self) -> String {
        let config = self.config();
        self.exec_description_with(
            &tools_section(&self.tools(), config.tool_description_budget_tokens).0,
        )
    }

    /// The description of the `exec` tool in two parts, for a client that passes only so much
    /// of a tool's description to its model (Claude Code: 4,096 characters): the description
    /// with `tools_are` (where the declarations are instead) in place of the tools, and the
    /// tools section itself.
    pub fn exec_description_split(&self, tools_are: &str) -> (String, String) {
        let config = self.config();
        let tools = tools_section(&self.tools(), config.tool_description_budget_tokens).0;
        (self.exec_description_with(&format!("{tools_are}\n")), tools)
    }

    /// The description of the `exec` tool, `tools` standing for the enabled tools.
    fn exec_description_with(&self, tools: &str) -> String {
        let config = self.config();
        format!(
            r#"Run JavaScript to orchestrate tools: call them, loop, branch, and emit output, in one step instead of many tool calls.

The source (at most {max_source_mib} MiB) runs as an ES module in a fresh V8 isolate, so top-level `await` works. There is no `import`, no `console`, no file system, network or Node API: reach the outside world only through `tools`, and report with `text(...)`.

TypeScript is accepted too: types are erased before the script runs (annotations, interfaces, type aliases, generics, `as`, `satisfies`, `!`), and error positions point at what you wrote. `enum`, `namespace` and parameter properties are not supported: use plain objects and fields.

Optionally start the source with a pragma line:
// @exec: {{"yield_time_ms": {yield_ms}, "max_output_tokens": {tokens}}}
- yield_time_ms: how long to wait for the script before returning (default {yield_ms}). A script still running then keeps running in the background; the result says "Script running with cell ID <id>", and `wait` picks it up.
- max_output_tokens: the output budget of the result (default {tokens}); longer text keeps its beginning and end; images cost nothing, audio 10 tokens a second, and items past the budget are left out and counted.

Globals:
- tools.<name>(args): call a tool; returns a Promise of the type its declaration names; an MCP tool declared `Promise<CallToolResult<T>>` resolves with the server's result {{ content: [MCP content blocks], structuredContent?: T, isError? }}, isError: true when the tool reported a failure. A call that cannot be made rejects with an Error whose message says why. Calls run in parallel with Promise.all.
- ALL_TOOLS: [{{ name, description, declaration, annotations? }}] of every tool (annotations: what the tool says of its effects, such as readOnlyHint); ALL_TOOLS.unavailable: [{{ server, reason }}] of the servers that are down now, whose tools are left out; search_tools("words") returns the tools whose name or description has every word.{approvals}
- text(value): add text to the output; objects and arrays are JSON-encoded.
- image(urlOrItem, detail?): add an image from a base64 data: URL, {{ image_url, detail }}, or an MCP image block {{ type: "image", data, mimeType }}. detail: "auto" | "low" | "high" (default) | "original". Remote URLs are not fetched.
- generatedImage(result): add the image of an image-generation result ({{ image_url, detail?, output_hint? }} or an MCP image block), then its output_hint as text.
- audio(urlOrItem): add audio from a base64 data: URL or an MCP audio block.
- store(key, value) / load(key): keep JSON-serialisable values across the cells of this session. load returns a copy, or undefined. Values are saved when the cell finishes (also with an error), not when it is terminated.
- notify(value): send a short progress message right away, outside the output.
- yield_control(): return the output so far now; the script keeps running.
- exit(): end the script successfully, at once.
- setTimeout(callback, ms) / clearTimeout(id): timers; pending timers do not keep a finished script alive.

Modern built-ins are available, including Array.prototype.toSorted/toReversed/with, Object.groupBy, Map.groupBy, Promise.withResolvers, Promise.try, Array.fromAsync, RegExp.escape, the Set methods (union, intersection, difference, isSubsetOf, ...) and iterator helpers (Iterator.from, values().map/filter/take/drop/flatMap/toArray).

Tools:
{tools}{down}"#,
            yield_ms = config.default_exec_yield_time.as_millis(),
            tokens = config.default_max_output_tokens,
            max_source_mib = codemode_protocol::limits::MAX_SOURCE_BYTES / (1024 * 1024),
            down = crate::availability::down_section(&self.unavailable()),
            approvals = if config.permissions.default == crate::Verdict::Allow {
                ""
            } else {
                "\n- Calls of tools that are not read-only (see @effects) may need the user's approval: such a call waits until the user answers, and rejects with an Error saying who refused it if they do not. Do not retry a refused call."
            },
        )
    }

    /// The description of the `wait` tool.
    pub fn wait_description(&self) -> String {
        let config = self.config();
        format!(
            r#"Wait for a script started by `exec` that was still running ("Script running with cell ID <id>"), or terminate it.

Returns the output the script produced since it was last observed, and its status: still running (call `wait` again), completed, failed (with the error), or terminated.{holding}

Arguments:
- cell_id: the ID from "Script running with cell ID <id>".
- cell_ids: more IDs to wait on at once; the result covers each one that has news.
- yield_time_ms: how long to wait before returning if the script is still running (default {yield_ms}, at least {min_ms}).
- max_tokens: the output budget of the result (default {tokens}).
- terminate: true to stop the script now; the result has everything it produced before it stopped."#,
            yield_ms = config.default_wait_yield_time.as_millis(),
            min_ms = config.min_wait_yield_time.as_millis(),
            tokens = config.default_max_output_tokens,
            holding = match config.max_wait {
                Some(max_wait) => format!(
                    " A wait with nothing new to return keeps waiting (up to {} s) until the script has output, ends, or needs the user's approval, so there is no need to call it again and again; new output is returned within yield_time_ms.",
                    max_wait.as_secs()
                ),
                None => String::new(),
            },
        )
    }

    /// The JSON Schema of the `wait` tool's input.
    pub fn wait_input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "cell_id": {"type": "string", "description": "The ID from \"Script running with cell ID <id>\"."},
                "cell_ids": {"type": "array", "items": {"type": "string"}, "description": "More cells to wait on: the wait returns when any of them has news."},
                "yield_time_ms": {"type": "integer", "minimum": 0, "description": "How long to wait before returning if the script is still running."},
                "max_tokens": {"type": "integer", "minimum": 0, "description": "The output budget of the result."},
                "terminate": {"type": "boolean", "description": "Stop the script now."}
            },
            "required": ["cell_id"],
            "additionalProperties": false
        })
    }
}
