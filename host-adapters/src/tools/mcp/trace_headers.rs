//! The HTTP client of a streamable-HTTP connection: rmcp's own behaviour (no idle pooling, only
//! same-origin 307/308 redirects), plus the W3C trace context of each tool call as the
//! `traceparent`/`tracestate` headers, so that an HTTP server's proxies and middleware join the
//! trace as the server's MCP handler does from `_meta`.
//!
//! The headers are read from the message itself (the `_meta` the provider set), never from the
//! task that sends it: rmcp sends from its own worker task, where no span of the call is current.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestParamsMeta};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

/// The most redirects one request follows (as rmcp's own client).
const MAX_REDIRECTS: usize = 10;

/// A reqwest client as rmcp's default one is built: no idle connection kept (rmcp measured 40 ms
/// stalls from delayed ACKs otherwise), and only same-origin redirects that keep the body, so a
/// session id and the user's headers never go to another host.
pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let preserves_body = matches!(
                attempt.status(),
                reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
            );
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|original| original.origin() == attempt.url().origin());
            if !preserves_body || !same_origin {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("exceeded {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        }))
        .build()
        .unwrap_or_default()
}

/// An HTTP client that adds a tool call's trace context as headers, and otherwise is `C`.
#[derive(Clone, Debug)]
pub(crate) struct TraceHeaders<C>(pub(crate) C);

/// The `traceparent` and `tracestate` a tools/call message carries in `_meta`, as headers (a
/// value that is not a valid header is left out: the `_meta` still carries it).
fn trace_headers(message: &ClientJsonRpcMessage) -> Vec<(HeaderName, HeaderValue)> {
    let JsonRpcMessage::Request(request) = message else {
        return Vec::new();
    };
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return Vec::new();
    };
    [
        (
            HeaderName::from_static("traceparent"),
            call.params.traceparent(),
        ),
        (
            HeaderName::from_static("tracestate"),
            call.params.tracestate(),
        ),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, HeaderValue::from_str(value?).ok()?)))
    .collect()
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for TraceHeaders<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        custom_headers.extend(trace_headers(&message));
        self.0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        custom_headers.extend(trace_headers(&message));
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        custom_headers.extend(trace_headers(&message));
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, RequestId};

    fn call(traceparent: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("add");
        if let Some(traceparent) = traceparent {
            params.set_traceparent(traceparent);
            params.set_tracestate("vendor=1");
        }
        ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            RequestId::Number(1),
        )
    }

    #[test]
    fn a_calls_trace_context_becomes_its_headers() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let headers = trace_headers(&call(Some(traceparent)));
        assert_eq!(
            headers,
            [
                (
                    HeaderName::from_static("traceparent"),
                    HeaderValue::from_static(traceparent)
                ),
                (
                    HeaderName::from_static("tracestate"),
                    HeaderValue::from_static("vendor=1")
                ),
            ]
        );
    }

    #[test]
    fn a_call_without_one_or_with_one_no_header_can_carry_adds_none() {
        assert!(trace_headers(&call(None)).is_empty());
        let headers = trace_headers(&call(Some("00-a\nb")));
        assert!(headers.iter().all(|(name, _)| name != "traceparent"));
    }
}
