//! A seeded randomised test of the actor: random interleavings of engine events, observers
//! arriving and being dropped, tool results and terminations, checked against the invariants:
//! exactly one terminal outcome, no output item lost or delivered twice, no stored values committed
//! after termination, and no hang.
//!
//! Time is paused, so yield budgets and waits cost nothing and every case is deterministic given
//! its operations. `PROPTEST_CASES` overrides the number of cases (1,000 by default) and
//! `PROPTEST_RNG_SEED` the seed.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use codemode_cell_actor::{
    CellConfig, CellError, CellEvent, CellHandle, Observation, ObservationFuture, OutputEntry,
    OutputMode,
};
use codemode_engine::{EventSender, RuntimeEvent};
use codemode_protocol::{OutputItem, ToolKind, ToolName};
use common::{TestHost, scripted_cell};
use proptest::prelude::*;
use serde_json::json;

/// One step of a case.
#[derive(Debug, Clone)]
enum Op {
    /// The engine emits a text item.
    Text,
    /// The engine calls a tool: `echo` answers at once, `gate` when gates open, `hang` never.
    ToolCall(&'static str),
    Notify,
    YieldRequested,
    Pending,
    /// The engine finishes (with or without an error) and closes.
    Result {
        failed: bool,
    },
    /// The engine thread ends without a result.
    Vanish,
    /// An observer arrives; `drop` gives it up at once.
    ObserveYield {
        budget_ms: u64,
        drop: bool,
    },
    ObserveFrontier {
        drop: bool,
    },
    /// Await every outstanding time-budget observation.
    AwaitYields,
    Terminate,
    OpenGates,
    Sleep {
        ms: u64,
    },
    /// Let the actor run a little (it may, for instance, take an observer or start a commit).
    YieldNow,
    /// Give up every outstanding observation (answers already given are collected first).
    DropObservations,
    /// Let a completion commit that the host holds go through.
    ReleaseCommit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Text),
        2 => prop_oneof![Just("echo"), Just("gate"), Just("hang")].prop_map(Op::ToolCall),
        1 => Just(Op::Notify),
        1 => Just(Op::YieldRequested),
        1 => Just(Op::Pending),
        1 => any::<bool>().prop_map(|failed| Op::Result { failed }),
        1 => Just(Op::Vanish),
        2 => (0u64..20, any::<bool>()).prop_map(|(budget_ms, drop)| Op::ObserveYield { budget_ms, drop }),
        1 => any::<bool>().prop_map(|drop| Op::ObserveFrontier { drop }),
        1 => Just(Op::AwaitYields),
        1 => Just(Op::Terminate),
        1 => Just(Op::OpenGates),
        1 => (0u64..30).prop_map(|ms| Op::Sleep { ms }),
        3 => Just(Op::YieldNow),
        1 => Just(Op::DropObservations),
        1 => Just(Op::ReleaseCommit),
    ]
}

/// What the case saw delivered.
#[derive(Default)]
struct Delivered {
    events: Vec<CellEvent>,
}

struct Pending {
    future: ObservationFuture,
    /// Time-budget observations always answer within their budget; the others may wait for the end.
    time_bounded: bool,
    /// Terminations are never given up: their answer may be the only copy of the outcome.
    termination: bool,
}

/// The answer of `future` if it is ready now.
fn answer_now(future: &mut ObservationFuture) -> Option<Result<CellEvent, CellError>> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(answer) => Some(answer),
        std::task::Poll::Pending => None,
    }
}

/// The engine's side: sends while it runs, and stops once terminated or finished.
struct Engine {
    events: Option<EventSender>,
    terminated: tokio_util::sync::CancellationToken,
    next_item: usize,
    next_call: usize,
    /// Texts the actor accepted, in order.
    sent: Vec<String>,
}

impl Engine {
    /// A real engine stops once terminated: it closes its channel.
    fn running(&mut self) -> Option<&EventSender> {
        if self.terminated.is_cancelled() {
            self.events = None;
        }
        self.events.as_ref()
    }

    async fn send(&mut self, event: RuntimeEvent) {
        let text = match &event {
            RuntimeEvent::ContentItem(OutputItem::Text { text }) => Some(text.clone()),
            _ => None,
        };
        let Some(events) = self.running() else { return };
        if events.send(event).await.is_ok()
            && let Some(text) = text
        {
            self.sent.push(text);
        }
    }

    /// Awaits an answer while behaving like a real engine: once terminated, it closes its channel
    /// promptly, whatever the test is waiting for.
    async fn await_answer(
        &mut self,
        what: &str,
        answer: ObservationFuture,
    ) -> Result<CellEvent, CellError> {
        let mut answer = std::pin::pin!(answer);
        common::within(what, async {
            loop {
                tokio::select! {
                    answer = &mut answer => return answer,
                    _ = self.terminated.cancelled(), if self.events.is_some() => self.events = None,
                }
            }
        })
        .await
    }

    async fn finish(&mut self, event: Option<RuntimeEvent>) {
        if let Some(event) = event {
            self.send(event).await;
        }
        self.events = None;
    }
}

async fn run_case(
    ops: Vec<Op>,
    server_mode: bool,
    commit_fails: bool,
) -> Result<(), TestCaseError> {
    // Every commit waits for ReleaseCommit (or the end of the case), so terminations and
    // observers can land while a claimed completion is being committed (a slow store); with
    // `commit_fails`, the store then fails.
    let release_commit = tokio_util::sync::CancellationToken::new();
    let host = Arc::new(TestHost {
        hold_commit: Some(release_commit.clone()),
        fail_commits: commit_fails.then(|| COMMIT_FAILURE.to_owned()),
        ..TestHost::default()
    });
    let config = CellConfig {
        output_mode: if server_mode {
            OutputMode::Server {
                event_queue_capacity: 2,
                image_budget_bytes: 1024,
                output_budget_bytes: usize::MAX,
            }
        } else {
            OutputMode::Client
        },
        failure_handler: None,
    };
    let cell = scripted_cell(
        Arc::clone(&host),
        config,
        Observation::yield_after(Duration::from_millis(5)),
    );
    let handle: CellHandle = cell.handle;
    let mut engine = Engine {
        events: Some(cell.runtime.events),
        terminated: cell.runtime.terminated,
        next_item: 0,
        next_call: 0,
        sent: Vec::new(),
    };
    let mut pending = vec![Pending {
        future: cell.first_observation,
        time_bounded: true,
        termination: false,
    }];
    let mut delivered = Delivered::default();
    engine.send(RuntimeEvent::Started).await;

    for op in ops {
        match op {
            Op::Text => {
                engine.next_item += 1;
                let text = format!("item-{}", engine.next_item);
                engine
                    .send(RuntimeEvent::ContentItem(OutputItem::text(text)))
                    .await;
            }
            Op::ToolCall(name) => {
                engine.next_call += 1;
                let id = format!("tool-{}", engine.next_call);
                engine
                    .send(RuntimeEvent::ToolCall {
                        id,
                        name: ToolName::plain(name),
                        kind: ToolKind::Function,
                        input: Some(json!({}).into()),
                    })
                    .await;
            }
            Op::Notify => {
                engine
                    .send(RuntimeEvent::Notify {
                        call_id: "call-1".into(),
                        text: "note".into(),
                    })
                    .await;
            }
            Op::YieldRequested => engine.send(RuntimeEvent::YieldRequested).await,
            Op::Pending => engine.send(RuntimeEvent::Pending).await,
            Op::Result { failed } => {
                let result = RuntimeEvent::Result {
                    stored_value_writes: codemode_protocol::stored_values_from([(
                        "k".to_owned(),
                        json!(engine.next_item),
                    )]),
                    error_text: failed.then(|| "failed".to_owned()),
                };
                engine.finish(Some(result)).await;
            }
            Op::Vanish => engine.finish(None).await,
            Op::ObserveYield { budget_ms, drop } => {
                let future =
                    handle.observe(Observation::yield_after(Duration::from_millis(budget_ms)));
                if !drop {
                    pending.push(Pending {
                        future: Box::pin(future),
                        time_bounded: true,
                        termination: false,
                    });
                }
            }
            Op::ObserveFrontier { drop } => {
                let future = handle.observe(Observation::pending_frontier());
                if !drop {
                    pending.push(Pending {
                        future: Box::pin(future),
                        time_bounded: false,
                        termination: false,
                    });
                }
            }
            Op::AwaitYields => {
                // A held commit keeps the actor from answering anyone; let it through first.
                release_commit.cancel();
                let (bounded, unbounded): (Vec<_>, Vec<_>) =
                    pending.into_iter().partition(|p| p.time_bounded);
                pending = unbounded;
                for observation in bounded {
                    collect(
                        &mut delivered,
                        engine
                            .await_answer("a time-budget observation", observation.future)
                            .await,
                    );
                }
            }
            Op::Terminate => {
                pending.push(Pending {
                    future: Box::pin(handle.terminate()),
                    time_bounded: false,
                    termination: true,
                });
            }
            Op::OpenGates => host.open_gates(),
            Op::Sleep { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
            Op::YieldNow => tokio::task::yield_now().await,
            Op::DropObservations => {
                let mut kept = Vec::new();
                for mut observation in pending {
                    if let Some(answer) = answer_now(&mut observation.future) {
                        collect(&mut delivered, answer);
                    } else if observation.termination {
                        kept.push(observation);
                    }
                }
                pending = kept;
            }
            Op::ReleaseCommit => release_commit.cancel(),
        }
    }

    // End the case: terminate (a no-op if already ended), let the engine stop, collect everything.
    pending.push(Pending {
        future: Box::pin(handle.terminate()),
        time_bounded: false,
        termination: true,
    });
    release_commit.cancel();
    engine.finish(None).await;
    for observation in pending {
        collect(
            &mut delivered,
            engine
                .await_answer("an observation at the end", observation.future)
                .await,
        );
    }
    drop(handle);
    common::within("the actor to close", cell.actor)
        .await
        .unwrap();
    check(
        &delivered,
        &engine.sent,
        host.commits.load(Ordering::SeqCst),
        commit_fails,
    )
}

/// The note a failing store adds to a completion's error text.
const COMMIT_FAILURE: &str = "the store is down";

fn collect(delivered: &mut Delivered, answer: Result<CellEvent, CellError>) {
    if let Ok(event) = answer {
        delivered.events.push(event);
    }
}

fn texts_of(event: &CellEvent) -> Vec<String> {
    event
        .output()
        .entries()
        .iter()
        .filter_map(|entry| match entry {
            OutputEntry::Item(OutputItem::Text { text }) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn check(
    delivered: &Delivered,
    sent: &[String],
    commits: usize,
    commit_fails: bool,
) -> Result<(), TestCaseError> {
    let terminal: Vec<&CellEvent> = delivered
        .events
        .iter()
        .filter(|event| event.is_terminal())
        .collect();
    // Exactly one terminal outcome: at least one delivery of it, and every delivery is the same
    // but for its output, which only one caller receives (a terminator and an observer waiting
    // at the same time never both get the same items).
    prop_assert!(
        !terminal.is_empty(),
        "no terminal outcome was delivered: {:?}",
        delivered.events
    );
    let without_output = |event: &CellEvent| match event {
        CellEvent::Completed {
            error_text,
            result_buffered_for,
            ..
        } => format!("completed {error_text:?} {result_buffered_for:?}"),
        CellEvent::Terminated { tool_calls, .. } => format!("terminated {tool_calls:?}"),
        other => format!("{other:?}"),
    };
    for other in &terminal[1..] {
        prop_assert_eq!(
            without_output(other),
            without_output(terminal[0]),
            "two different terminal outcomes"
        );
    }
    // Stored values: committed exactly when the cell completed.
    match terminal[0] {
        CellEvent::Completed { error_text, .. } => {
            prop_assert_eq!(commits, 1);
            // A failed commit says so; a successful one adds nothing.
            let noted = error_text
                .as_deref()
                .is_some_and(|text| text.ends_with(COMMIT_FAILURE));
            prop_assert_eq!(noted, commit_fails, "error text: {:?}", error_text);
        }
        CellEvent::Terminated { .. } => prop_assert_eq!(commits, 0, "a terminated cell committed"),
        _ => unreachable!(),
    }
    // Output: every accepted item delivered exactly once, across every delivery (terminal ones
    // included), each delivery in production order.
    let mut seen: Vec<String> = Vec::new();
    for event in &delivered.events {
        let texts = texts_of(event);
        let numbers: Vec<usize> = texts
            .iter()
            .map(|text| text["item-".len()..].parse().unwrap())
            .collect();
        prop_assert!(
            numbers.windows(2).all(|pair| pair[0] < pair[1]),
            "out of order: {texts:?}"
        );
        seen.extend(texts);
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    prop_assert_eq!(
        unique.len(),
        seen.len(),
        "an item was delivered twice: {:?}",
        seen
    );
    let expected: BTreeSet<&String> = sent.iter().collect();
    prop_assert_eq!(unique, expected, "items lost or invented");
    Ok(())
}

/// The seed: fixed, so CI runs the same cases every time, unless `PROPTEST_RNG_SEED` says otherwise.
fn seed() -> proptest::test_runner::RngSeed {
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0xC0DE_CE11);
    proptest::test_runner::RngSeed::Fixed(seed)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(1_000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        // Failures print their (shrunk) ops.
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        rng_seed: seed(),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn random_interleavings_keep_the_actor_invariants(
        ops in proptest::collection::vec(op(), 0..40),
        server_mode in any::<bool>(),
        commit_fails in proptest::bool::weighted(0.2),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(run_case(ops, server_mode, commit_fails))?;
    }
}
