//! `codemode run [FILE|-]`: run one cell in a fresh session, observe it until it ends, and print
//! its whole output: the model-facing rendering by default, or one JSON object with `--json`.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use codemode_protocol::{ExecuteRequest, OutputItem, WaitRequest, parse_exec_input};
use codemode_session::{
    CellEvent, CellReport, CollectedOutput, SessionEvent, WaitOutcome, render_report, render_text,
};
use serde_json::json;

use crate::approve::{ApprovePolicy, TerminalApprover};
use crate::exit;
use crate::setup::{DemoTools, SessionArgs, SetupError};

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The JavaScript file to run; - (the default) reads standard input.
    #[arg(value_name = "FILE|-", default_value = "-")]
    pub file: PathBuf,
    /// Print one JSON object: {"status", "cell_id", "error_text", "error_hints", "items", "wall_time_ms"}.
    #[arg(long)]
    pub json: bool,
    /// How long each observation of the running cell lasts.
    #[arg(long, value_name = "N")]
    pub yield_time_ms: Option<u64>,
    /// The output budget of the rendering (tokens ≈ bytes / 4).
    #[arg(long, value_name = "N")]
    pub max_output_tokens: Option<u64>,
    /// Terminate the cell after this much wall time; its status is then "terminated".
    #[arg(long, value_name = "N")]
    pub timeout_ms: Option<u64>,
    /// Leave out the demo tools echo and sleep (offered by default, for the examples).
    #[arg(long)]
    pub no_demo_tools: bool,
    /// What a call that needs approval gets when there is no terminal to ask on: never approved,
    /// approved when the tool is read-only, or always approved. At a terminal, the user is asked.
    #[arg(long, value_enum, value_name = "WHICH", default_value_t = ApprovePolicy::Reads)]
    pub approve: ApprovePolicy,
    #[command(flatten)]
    pub session: SessionArgs,
}

/// A usage error: the message, and exit status 2.
fn usage(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(exit::USAGE)
}

fn failure(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(exit::FAILED)
}

fn read_source(file: &PathBuf) -> Result<String, String> {
    if file.as_os_str() == "-" {
        let mut source = String::new();
        std::io::stdin()
            .read_to_string(&mut source)
            .map_err(|error| format!("cannot read the source from standard input: {error}"))?;
        return Ok(source);
    }
    std::fs::read_to_string(file)
        .map_err(|error| format!("cannot read {}: {error}", file.display()))
}

pub async fn run(args: RunArgs) -> ExitCode {
    let source = match read_source(&args.file) {
        Ok(source) => source,
        Err(message) => return usage(message),
    };
    let parsed = match parse_exec_input(&source) {
        Ok(parsed) => parsed,
        Err(error) => return usage(error),
    };
    let mut config = args.session.config();
    // `run` is not a model polling: let every observation be as short as asked.
    config.min_wait_yield_time = Duration::ZERO;
    let yield_time_ms = args.yield_time_ms.or(parsed.yield_time_ms);
    let max_output_tokens = args
        .max_output_tokens
        .or(parsed.max_output_tokens)
        .unwrap_or(config.default_max_output_tokens);
    let setup = async {
        let store = args.session.store(None).await?;
        let demo = if args.no_demo_tools {
            DemoTools::LeftOut
        } else {
            DemoTools::Offered
        };
        let toolset = crate::toolset::ToolSet::for_args(&args.session, demo, true)?;
        let tools = Arc::clone(&toolset.provider);
        config.permissions = toolset.permissions();
        config.user = Some(Arc::new(TerminalApprover::new(args.approve)));
        let session = args
            .session
            .open(
                args.session.session.as_str().into(),
                store,
                Arc::clone(&tools),
                config,
            )
            .await?;
        Ok((session, tools))
    };
    let (session, tools) = match setup.await {
        Ok(opened) => opened,
        Err(SetupError {
            message,
            usage: true,
        }) => return usage(message),
        Err(SetupError { message, .. }) => return failure(message),
    };

    // notify(...) messages are progress for whoever runs the script: show them on stderr.
    let mut events = session.subscribe();
    let printer = tokio::spawn(async move {
        // Ends when the session is gone, after every notification sent before has been printed.
        while let Ok(event) = events.recv().await {
            if let SessionEvent::Notification { text, .. } = event {
                eprintln!("[notify] {text}");
            }
        }
    });
    let began = Instant::now();
    let deadline = args.timeout_ms.map(|ms| began + Duration::from_millis(ms));
    // Each observation lasts the yield time, but never past the deadline.
    let observation_ms = |yield_ms: Option<u64>| -> Option<u64> {
        let remaining = deadline.map(|deadline| {
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64
        });
        match (yield_ms, remaining) {
            (Some(yield_ms), Some(remaining)) => Some(yield_ms.min(remaining)),
            (None, Some(remaining)) => Some(remaining.min(10_000)),
            (yield_ms, None) => yield_ms,
        }
    };
    let request = ExecuteRequest {
        call_id: "run".into(),
        source: parsed.source,
        yield_time_ms: observation_ms(yield_time_ms),
        max_output_tokens: Some(max_output_tokens),
    };
    let mut report = match session.execute(request).await {
        Ok(report) => report,
        Err(error) => return failure(error),
    };
    let cell_id = report.cell_id.clone();
    let mut items: Vec<OutputItem> = Vec::new();
    let finished = loop {
        items.extend(report.event.output().clone().into_items());
        if report.event.is_terminal() {
            break report;
        }
        let past_deadline = deadline.is_some_and(|deadline| Instant::now() >= deadline);
        let wait = WaitRequest {
            cell_id: cell_id.to_string(),
            yield_time_ms: observation_ms(yield_time_ms),
            max_tokens: None,
            terminate: past_deadline,
            cell_ids: Vec::new(),
        };
        report = match session.wait(wait).await {
            Ok(WaitOutcome::Observed(report)) => report,
            Ok(WaitOutcome::NotFound { cell_id }) => {
                return failure(format!("cell {cell_id} disappeared"));
            }
            Err(error) => return failure(error),
        };
    };
    let wall_time = began.elapsed();
    session.shutdown().await;
    drop(session);
    let _ = printer.await;
    // Downstream servers get their standard input closed and time to exit, not a kill.
    codemode_session::ToolProvider::shutdown(tools.as_ref()).await;
    finish(&args, finished, items, wall_time, max_output_tokens)
}

/// Prints the whole run and returns its exit status.
fn finish(
    args: &RunArgs,
    finished: CellReport,
    items: Vec<OutputItem>,
    wall_time: Duration,
    max_output_tokens: u64,
) -> ExitCode {
    let (status, error_text, code) = match &finished.event {
        CellEvent::Completed {
            error_text: None, ..
        } => ("completed", None, exit::COMPLETED),
        CellEvent::Completed {
            error_text: Some(error),
            ..
        } => ("failed", Some(error.clone()), exit::FAILED),
        CellEvent::Terminated { .. } => ("terminated", None, exit::TERMINATED),
        // The loop ends only on a terminal event; anything else is reported as a failure
        // rather than a panic.
        other => (
            "failed",
            Some(format!("the cell ended without a result: {other:?}")),
            exit::FAILED,
        ),
    };
    if args.json {
        let object = json!({
            "status": status,
            "cell_id": finished.cell_id,
            "error_text": error_text,
            "error_hints": finished.error_hints,
            "items": items,
            "wall_time_ms": wall_time.as_millis() as u64,
        });
        println!("{object}");
    } else {
        // The rendering of the whole run: every item, the final status and the total time.
        let all = CollectedOutput::from_items(items);
        let event = match finished.event {
            CellEvent::Completed {
                error_text,
                result_buffered_for,
                ..
            } => CellEvent::Completed {
                output: all,
                error_text,
                result_buffered_for,
            },
            CellEvent::Terminated { tool_calls, .. } => CellEvent::Terminated {
                output: all,
                tool_calls,
            },
            other => other,
        };
        let report = CellReport {
            event,
            wall_time,
            ..finished
        };
        println!(
            "{}",
            render_text(&render_report(&report, max_output_tokens))
        );
    }
    ExitCode::from(code)
}
