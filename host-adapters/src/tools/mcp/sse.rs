//! The legacy HTTP+SSE transport (MCP 2024-11-05), which rmcp no longer speaks: a `GET` of the
//! server's SSE URL opens an event stream whose first event (`endpoint`) names where to `POST`
//! messages; the server's messages arrive as `message` events on the stream. Servers written
//! before streamable HTTP, and configurations copied from clients that still list them with
//! `"type": "sse"`, reach codemode this way.

use std::borrow::Cow;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::{Sse, SseStream};

/// Why the SSE transport failed; displays as its message.
#[derive(Debug, thiserror::Error)]
pub(super) enum SseError {
    /// The request could not be made or its answer not read.
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    /// The server answered with another status than success.
    #[error("the server answered HTTP {status} to the {what}{}", detail(.body))]
    Status {
        status: reqwest::StatusCode,
        what: &'static str,
        body: String,
    },
    /// The stream broke or ended before the server named its message endpoint.
    #[error("the event stream {0} before the server named its message endpoint")]
    NoEndpoint(&'static str),
    /// The endpoint the server named is not a URL.
    #[error("the server named a message endpoint that is not a URL: {0}")]
    BadEndpoint(String),
}

/// ": <the body's first line>", when the server said something.
fn detail(body: &str) -> String {
    match body.lines().next().map(str::trim) {
        Some(line) if !line.is_empty() => {
            format!(": {}", line.chars().take(200).collect::<String>())
        }
        _ => String::new(),
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// A connection over HTTP+SSE.
pub(super) struct SseTransport {
    client: reqwest::Client,
    /// Where messages are posted.
    endpoint: reqwest::Url,
    headers: http::HeaderMap,
    events: Events,
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for the server's message endpoint.
    pub(super) async fn connect(url: &str, headers: http::HeaderMap) -> Result<Self, SseError> {
        let client = reqwest::Client::new();
        let response = client
            .get(url)
            .headers(headers.clone())
            .header(http::header::ACCEPT, "text/event-stream")
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(SseError::Status {
                status,
                what: "request for its event stream",
                body,
            });
        }
        let base = response.url().clone();
        let mut events: Events = Box::pin(SseStream::from_bytes_stream(response.bytes_stream()));
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    let data = event.data.unwrap_or_default();
                    break base
                        .join(data.trim())
                        .map_err(|_| SseError::BadEndpoint(data))?;
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) => return Err(SseError::NoEndpoint("broke")),
                None => return Err(SseError::NoEndpoint("ended")),
            }
        };
        Ok(SseTransport {
            client,
            endpoint,
            headers,
            events,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn name() -> Cow<'static, str> {
        "SSE (2024-11-05)".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .json(&item);
        async move {
            let response = request.send().await?;
            let status = response.status();
            if status.is_success() {
                return Ok(());
            }
            let body = response.text().await.unwrap_or_default();
            Err(SseError::Status {
                status,
                what: "message posted",
                body,
            })
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        {
            loop {
                match self.events.next().await? {
                    Ok(event) if matches!(event.event.as_deref(), None | Some("message")) => {
                        let Some(data) = event.data else { continue };
                        match serde_json::from_str(&data) {
                            Ok(message) => return Some(message),
                            Err(error) => {
                                tracing::warn!(%error, "the SSE server sent a message that is not JSON-RPC; skipped");
                            }
                        }
                    }
                    Ok(_) => continue,
                    Err(error) => {
                        tracing::warn!(%error, "the SSE event stream broke");
                        return None;
                    }
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        // The stream closes when the transport is dropped.
        std::future::ready(Ok(()))
    }
}
