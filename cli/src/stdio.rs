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
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Stdin, Stdout};
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
///
/// Generic over its two ends so that tests can drive it in-process; the server uses
/// [`transport`], over this process's stdin and stdout.
pub struct StdioTransport<R = Stdin, W = Stdout> {
    input: BufReader<R>,
    output: Arc<Mutex<W>>,
    /// The start of the line being read (at most [`MAX_LINE_BYTES`] + 1 bytes are kept).
    partial: Vec<u8>,
    /// How many bytes of that line have been read.
    partial_length: usize,
}

/// The transport over this process's stdin and stdout.
pub fn transport() -> StdioTransport {
    StdioTransport::new(tokio::io::stdin(), tokio::io::stdout())
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

impl<R, W> StdioTransport<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// The transport that reads lines from `input` and writes messages to `output`.
    pub fn new(input: R, output: W) -> Self {
        StdioTransport {
            input: BufReader::new(input),
            output: Arc::new(Mutex::new(output)),
            partial: Vec::new(),
            partial_length: 0,
        }
    }

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

/// `text` with each `\uD800`-`\uDFFF` escape (a backslash, `u`, then four hex digits naming a
/// surrogate) replaced by `\uFFFD`.
///
/// Works on characters, never on byte offsets into `text`, so no input can make it cut a
/// character in two (an earlier version checked four bytes of an escape but skipped six, and a
/// line holding `\ud8a` followed by a multi-byte character ended the server).
fn replace_surrogate_escapes(text: &str) -> String {
    let characters: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    while index < characters.len() {
        if is_surrogate_escape(&characters[index..]) {
            out.push_str("\\ufffd");
            index += 6;
        } else {
            out.push(characters[index]);
            index += 1;
        }
    }
    out
}

/// Whether `characters` starts with `\uDXXX` naming a surrogate (D800 to DFFF).
fn is_surrogate_escape(characters: &[char]) -> bool {
    let [backslash, u, d, high, low_1, low_2, ..] = characters else {
        return false;
    };
    *backslash == '\\'
        && *u == 'u'
        && matches!(d, 'd' | 'D')
        && matches!(high, '8'..='9' | 'a'..='f' | 'A'..='F')
        && low_1.is_ascii_hexdigit()
        && low_2.is_ascii_hexdigit()
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
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
    use std::time::Duration;

    use proptest::prelude::*;
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
    use serde_json::Value;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

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

    #[test]
    fn a_short_surrogate_escape_before_a_multi_byte_character_is_left_as_it_is() {
        // Four characters of an escape, then a two-byte and a four-byte character: the old scan
        // skipped six bytes and cut the `é` in two.
        assert_eq!(replace_surrogate_escapes(r"\ud8aé"), r"\ud8aé");
        assert_eq!(replace_surrogate_escapes(r"\uD8a😀x"), r"\uD8a😀x");
        assert_eq!(replace_surrogate_escapes(r"\ud8"), r"\ud8");
        assert_eq!(
            replace_surrogate_escapes(r"a\ud800é\uDFFF\ud7ff"),
            r"a\ufffdé\ufffd\ud7ff"
        );
    }

    /// What one line does to a transport: the messages `receive` returned before the `ping`
    /// sent after it, and the lines the transport wrote.
    struct Served {
        messages_before: usize,
        written: Vec<Value>,
    }

    /// Sends `line` then a `ping` with id `"after"` to a transport over in-memory pipes, and
    /// reads until the ping arrives (each wait hang-guarded).
    fn serve_line(line: &[u8]) -> Served {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (mut client_writes, server_reads) = tokio::io::duplex(64 * 1024);
            let (server_writes, client_reads) = tokio::io::duplex(64 * 1024);
            let mut transport = StdioTransport::new(server_reads, server_writes);
            let mut input = line.to_vec();
            input.extend_from_slice(
                b"\n{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"ping\"}\n",
            );
            let writer = tokio::spawn(async move {
                client_writes.write_all(&input).await.unwrap();
                client_writes
            });
            let mut messages_before = 0;
            loop {
                let message = tokio::time::timeout(Duration::from_secs(10), transport.receive())
                    .await
                    .expect("hung: the transport never returned the ping")
                    .expect("the transport ended: a line ended the server");
                let is_the_ping = matches!(
                    &message,
                    ClientJsonRpcMessage::Request(request)
                        if request.id == RequestId::String("after".into())
                            && matches!(request.request, ClientRequest::PingRequest(_))
                );
                if is_the_ping {
                    break;
                }
                messages_before += 1;
            }
            let _client_writes = writer.await.unwrap();
            drop(transport);
            // Error answers are written by tasks of their own: give them their turn, then read
            // what was written.
            let mut written = Vec::new();
            let mut lines = tokio::io::BufReader::new(client_reads).lines();
            while let Ok(Ok(Some(line))) =
                tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await
            {
                written.push(serde_json::from_str(&line).expect("the transport writes JSON"));
            }
            Served {
                messages_before,
                written,
            }
        })
    }

    #[test]
    fn a_line_that_cut_a_character_in_two_is_answered_and_the_next_line_served() {
        let served =
            serve_line(r#"{"jsonrpc":"2.0","id":3,"method":"x","params":"\ud8aé"}"#.as_bytes());
        assert_eq!(served.messages_before, 0);
        assert_eq!(served.written.len(), 1, "{:?}", served.written);
        assert_eq!(served.written[0]["id"], 3);
    }

    /// Pieces that make lines hard to read: escapes whole and cut short, multi-byte characters,
    /// JSON punctuation, an `id`, bytes that are not UTF-8.
    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                r"\ud800",
                r"\uDFFF",
                r"\ud8",
                r"\ud8a",
                r"\uD83D",
                r"\u",
                r"\",
                "é",
                "😀",
                "\"",
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                r#""id":"#,
                r#""jsonrpc":"2.0""#,
                r#""method":"#,
                "7",
                "null",
                " ",
                "\t",
                "\r",
            ])
            .prop_map(|piece| piece.as_bytes().to_vec()),
            prop::collection::vec(
                any::<u8>().prop_filter("one line", |byte| *byte != b'\n'),
                0..8
            ),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_line_ends_the_server_and_each_unusable_line_is_answered(
            pieces in prop::collection::vec(piece(), 0..24)
        ) {
            let line = pieces.concat();
            let served = serve_line(&line);
            let blank = line.iter().all(u8::is_ascii_whitespace);
            let a_message = serde_json::from_slice::<ClientJsonRpcMessage>(&line).is_ok();
            if blank || a_message {
                prop_assert!(served.written.is_empty(), "{:?}", served.written);
                prop_assert_eq!(served.messages_before, usize::from(a_message));
            } else {
                prop_assert_eq!(served.messages_before, 0);
                prop_assert_eq!(served.written.len(), 1, "{:?}", served.written);
                let answer = &served.written[0];
                let code = answer["error"]["code"].as_i64();
                prop_assert!(
                    code == Some(i64::from(PARSE_ERROR)) || code == Some(i64::from(INVALID_REQUEST)),
                    "{}", answer
                );
            }
        }
    }
}
