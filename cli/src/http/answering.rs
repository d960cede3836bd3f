//! The MCP requests being answered now ([`Answering`]). A drain ends only once each has sent its
//! whole response: the `wait` that observes a cell's end returns from its handler before its
//! answer has crossed the server's MCP session and the HTTP connection, and closing the sessions
//! in between (they close when the drain ends) cut that answer off. A request that arrives once
//! the server shuts down is answered 503 at once, instead of entering a session that is closing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

/// Counts the `POST` requests (MCP messages) whose responses have not been sent whole yet; a
/// `GET` stream of server messages lasts as long as its client and is not counted.
#[derive(Clone)]
pub struct Answering {
    open: Arc<AtomicUsize>,
    shutting_down: CancellationToken,
}

impl Answering {
    /// Counts nothing yet; refuses requests once `shutting_down` is cancelled.
    pub fn new(shutting_down: CancellationToken) -> Self {
        Answering {
            open: Arc::default(),
            shutting_down,
        }
    }

    /// How many responses are being made or sent now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// Counts the request while its response is made and sent (its body dropped, whole or not).
pub async fn track(State(answering): State<Answering>, request: Request, next: Next) -> Response {
    if answering.shutting_down.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "the server is shutting down; send the request to another server of the cluster, or \
             again once this one is back\n",
        )
            .into_response();
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let counted = Counted::new(&answering.open);
    let (parts, body) = next.run(request).await.into_parts();
    Response::from_parts(
        parts,
        Body::new(CountedBody {
            inner: body,
            _counted: counted,
        }),
    )
}

/// One count in [`Answering::open`], taken back when dropped.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::AcqRel);
        Counted(Arc::clone(open))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's count until the connection has taken all of it
/// (or given up on it).
struct CountedBody {
    inner: Body,
    _counted: Counted,
}

impl http_body::Body for CountedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
