//! What operators point their tools at, beside the MCP surface: `/healthz` (the process serves),
//! `/readyz` (an engine can start a cell now and the store answers; 503 otherwise, and while the
//! server drains) and `/metrics` (the server's metrics in Prometheus' text format).
//!
//! The probes need no token and say nothing but their verdict and, for 503, which part is not
//! ready (`draining`, `store`, `engine`): the reasons, which may name a database's host or an
//! engine's error, go to the log. `/metrics` sits behind the server's token on the MCP listener,
//! or without one on `--ops-listen`, which serves these three routes alone.
//!
//! Readiness runs a trivial cell (in a session of its own, no tenant's) and asks the store a
//! trivial question at most every [`READY_FOR`], however often it is probed: probes that arrive
//! while a check runs wait for it and share its verdict.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::sessions::Shared;

/// How long a readiness verdict is reused before the next probe checks again.
const READY_FOR: Duration = Duration::from_secs(5);

/// How long one readiness check may take before it counts as not ready.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Which part of the server is not ready: all that an unauthenticated probe is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotReady {
    /// SIGTERM came: the server lets running cells finish and takes nothing new.
    Draining,
    /// The store did not answer.
    Store,
    /// A trivial cell could not run.
    Engine,
}

impl NotReady {
    fn as_str(self) -> &'static str {
        match self {
            NotReady::Draining => "draining",
            NotReady::Store => "store",
            NotReady::Engine => "engine",
        }
    }
}

/// The server's operator endpoints, and the readiness verdict they cache.
pub(super) struct Ops {
    shared: Arc<Shared>,
    /// The last verdict, and when it was reached.
    verdict: parking_lot::Mutex<Option<(Instant, Result<(), NotReady>)>>,
    /// Held while a check runs, so that probes arriving meanwhile share its verdict.
    checking: tokio::sync::Mutex<()>,
}

impl Ops {
    pub(super) fn new(shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(Ops {
            shared,
            verdict: parking_lot::Mutex::new(None),
            checking: tokio::sync::Mutex::new(()),
        })
    }

    /// `/healthz` and `/readyz`, which need no token.
    pub(super) fn probes(self: &Arc<Self>) -> axum::Router {
        let ready = Arc::clone(self);
        axum::Router::new()
            .route("/healthz", get(|| async { plain(StatusCode::OK, "ok") }))
            .route(
                "/readyz",
                get(move || {
                    let ops = Arc::clone(&ready);
                    async move {
                        match ops.ready().await {
                            Ok(()) => plain(StatusCode::OK, "ready"),
                            Err(part) => plain(
                                StatusCode::SERVICE_UNAVAILABLE,
                                &format!("not ready: {}", part.as_str()),
                            ),
                        }
                    }
                }),
            )
    }

    /// `/metrics`, in Prometheus' text format: behind the token on the MCP listener.
    pub(super) fn metrics(self: &Arc<Self>) -> axum::Router {
        axum::Router::new().route(
            "/metrics",
            get(move || async move {
                let mut response = crate::telemetry::prometheus_text().into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }),
        )
    }

    /// Whether the server is ready: not while it drains; otherwise the last verdict while it is
    /// fresh, or a new check.
    async fn ready(&self) -> Result<(), NotReady> {
        if self.shared.draining.is_cancelled() {
            return Err(NotReady::Draining);
        }
        if let Some(verdict) = self.fresh_verdict() {
            return verdict;
        }
        let _checking = self.checking.lock().await;
        // Another probe's check may have finished while this one waited.
        if let Some(verdict) = self.fresh_verdict() {
            return verdict;
        }
        let verdict = match tokio::time::timeout(CHECK_TIMEOUT, self.check()).await {
            Ok(verdict) => verdict,
            Err(_) => {
                tracing::warn!(
                    "not ready: the readiness check took more than {} s",
                    CHECK_TIMEOUT.as_secs()
                );
                Err(NotReady::Engine)
            }
        };
        *self.verdict.lock() = Some((Instant::now(), verdict));
        if self.shared.draining.is_cancelled() {
            return Err(NotReady::Draining);
        }
        verdict
    }

    fn fresh_verdict(&self) -> Option<Result<(), NotReady>> {
        let verdict = self.verdict.lock();
        verdict
            .filter(|(reached, _)| reached.elapsed() < READY_FOR)
            .map(|(_, verdict)| verdict)
    }

    /// Asks the store, then runs a trivial cell; the reason goes to the log.
    async fn check(&self) -> Result<(), NotReady> {
        if let Err(error) = self.shared.store.check().await {
            tracing::warn!("not ready: the store does not answer: {error}");
            return Err(NotReady::Store);
        }
        if let Err(error) = self.shared.args.probe_engine().await {
            tracing::warn!("not ready: an engine cannot run a cell: {}", error.message);
            return Err(NotReady::Engine);
        }
        Ok(())
    }
}

/// A plain-text response.
fn plain(status: StatusCode, text: &str) -> Response {
    let mut response = (status, format!("{text}\n")).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
