//! The stdio transport of `codemode mcp`: newline-delimited JSON-RPC on stdin and stdout, where
//! every request gets an answer.
//!
//! The SDK's own stdio transport drops a line it cannot use with only a log line, and the client
//! waits forever. This one answers such a line with a JSON-RPC error that says what was wrong (the
//! request's `id` when it can be read): a line longer than [`MAX_LINE_BYTES`], text that is not
//! JSON (naming a lone surrogate escape such as `"\ud800"`, which JSON text cannot carry), or JSON
//! that is not a JSON-RPC message.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ErrorCode, ErrorData, JsonRpcError, JsonRpcVersion2_0, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Stdin, Stdout};
use tokio::sync::Mutex;

/// The longest line (one JSON-RPC message) the server reads: 16 MiB, as the MCP SDK's.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC's parse error.
const PARSE_ERROR: i32 = -32700;
/// JSON-RPC's invalid request.
const INVALID_REQUEST: i32 = -32600;

/// The server's end of stdin and stdout.
///
/// `receive` must be cancel-safe: the service drops its future whenever something else is ready
/// (a response to send), so the line being read lives here, not in the future, and each error
/// answer is written by a task of its own, whole.
pub struct StdioTransport {
    input: BufReader<Stdin>,
    output: Arc<Mutex<Stdout>>,
    /// The start of the line being read (at most [`MAX_LINE_BYTES`] + 1 bytes are kept).
    partial: Vec<u8>,
    /// How many bytes of that line have been read.
    partial_length: usize,
}

/// The transport over this process's stdin and stdout.
pub fn transport() -> StdioTransport {
    StdioTransport {
        input: BufReader::new(tokio::io::stdin()),
        output: Arc::new(Mutex::new(tokio::io::stdout())),
        partial: Vec::new(),
        partial_length: 0,
    }
}

/// One line read from the input.
enum Line {
    Text(Vec<u8>),
    /// Longer than the limit: its first bytes (to find an `id`) and its length.
    TooLong {
        start: Vec<u8>,
        length: usize,
    },
    End,
}

impl StdioTransport {
    /// Reads one line. Cancel-safe: between two awaits, whatever was read is both consumed from
    /// the input and kept in `self`.
    async fn read_line(&mut self) -> std::io::Result<Line> {
        loop {
            let buffer = self.input.fill_buf().await?;
            if buffer.is_empty() {
                let length = std::mem::take(&mut self.partial_length);
                let line = std::mem::take(&mut self.partial);
                return Ok(if length == 0 {
                    Line::End
                } else if length > MAX_LINE_BYTES {
                    Line::TooLong {
                        start: truncated(line),
                        length,
                    }
                } else {
                    Line::Text(line)
                });
            }
            let (chunk, found_end) = match buffer.iter().position(|byte| *byte == b'\n') {
                Some(end) => (&buffer[..end], true),
                None => (buffer, false),
            };
            let room = (MAX_LINE_BYTES + 1).saturating_sub(self.partial.len());
            self.partial
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.partial_length += chunk.len();
            let consumed = chunk.len() + usize::from(found_end);
            self.input.consume(consumed);
            if found_end {
                let length = std::mem::take(&mut self.partial_length);
                let line = std::mem::take(&mut self.partial);
                return Ok(if length > MAX_LINE_BYTES {
                    Line::TooLong {
                        start: truncated(line),
                        length,
                    }
                } else {
                    Line::Text(line)
                });
            }
        }
    }

    /// Answers a line that could not be used. Written by a task of its own, so that the line
    /// goes out whole even if `receive` is cancelled.
    fn answer_error(&self, id: Option<RequestId>, code: i32, message: String) {
        let error = JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id,
            error: ErrorData::new(ErrorCode(code), message, None),
        };
        let Ok(mut text) = serde_json::to_vec(&error) else {
            return;
        };
        text.push(b'\n');
        let output = Arc::clone(&self.output);
        tokio::spawn(async move {
            let mut output = output.lock().await;
            let _ = output.write_all(&text).await;
            let _ = output.flush().await;
        });
    }
}

/// The first bytes of an oversized line: enough to find its `id`.
fn truncated(mut line: Vec<u8>) -> Vec<u8> {
    line.truncate(4096);
    line
}

/// The request id in a message's text, if it can be read: the text is parsed again with every
/// lone surrogate escape replaced, or the first `"id":` is read by hand.
fn recover_id(text: &[u8]) -> Option<RequestId> {
    let text = String::from_utf8_lossy(text);
    let repaired = replace_surrogate_escapes(&text);
    if let Ok(serde_json::Value::Object(object)) = serde_json::from_str(&repaired)
        && let Some(id) = object.get("id")
    {
        return serde_json::from_value(id.clone()).ok();
    }
    let after = text
        .split_once("\"id\"")?
        .1
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let mut stream = serde_json::Deserializer::from_str(after).into_iter::<serde_json::Value>();
    let id = stream.next()?.ok()?;
    serde_json::from_value(id).ok()
}

/// `text` with each `\uD800`-`\uDFFF` escape replaced by `\uFFFD`.
fn replace_surrogate_escapes(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    while index < bytes.len() {
        let is_escape = bytes[index] == b'\\'
            && index + 5 < bytes.len()
            && bytes[index + 1] == b'u'
            && matches!(bytes[index + 2], b'd' | b'D')
            && matches!(bytes[index + 3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F');
        if is_escape {
            out.push_str("\\ufffd");
            index += 6;
        } else {
            let character = text[index..]
                .chars()
                .next()
                .expect("a character starts here");
            out.push(character);
            index += character.len_utf8();
        }
    }
    out
}

impl Transport<RoleServer> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let output = Arc::clone(&self.output);
        async move {
            let mut text = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            text.push(b'\n');
            let mut output = output.lock().await;
            output.write_all(&text).await?;
            output.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let text = match self.read_line().await {
                Ok(Line::Text(text)) => text,
                Ok(Line::End) | Err(_) => return None,
                Ok(Line::TooLong { start, length }) => {
                    self.answer_error(
                        recover_id(&start),
                        INVALID_REQUEST,
                        format!(
                            "the request is {length} bytes, more than the {} MiB this server \
                             reads in one message; send less (a cell's source is at most {} MiB)",
                            MAX_LINE_BYTES / (1024 * 1024),
                            codemode_protocol::limits::MAX_SOURCE_BYTES / (1024 * 1024)
                        ),
                    );
                    continue;
                }
            };
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(&text) {
                Ok(message) => return Some(message),
                Err(error) => {
                    let as_text = String::from_utf8_lossy(&text);
                    let (code, message) =
                        if serde_json::from_slice::<serde_json::Value>(&text).is_ok() {
                            (
                                INVALID_REQUEST,
                                format!("not a JSON-RPC message this server understands: {error}"),
                            )
                        } else if replace_surrogate_escapes(&as_text) != as_text {
                            (
                            PARSE_ERROR,
                            "the request's JSON has a lone surrogate escape (such as \"\\ud800\"), \
                             which is not Unicode text: remove it, or send \\ufffd instead"
                                .to_owned(),
                        )
                        } else {
                            (
                                PARSE_ERROR,
                                format!("the request is not valid JSON: {error}"),
                            )
                        };
                    tracing::warn!(code, "answered a message that could not be used");
                    self.answer_error(recover_id(&text), code, message);
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.output.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_recovered_from_a_message_with_a_lone_surrogate_or_cut_short() {
        let id = |text: &str| recover_id(text.as_bytes());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"code":"\ud800"}}"#),
            Some(RequestId::Number(7))
        );
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"code":"xxxxx"#),
            Some(RequestId::String("abc".into()))
        );
        assert_eq!(id("garbage"), None);
    }
}
