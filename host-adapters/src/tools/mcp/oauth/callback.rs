//! The user's side of the authorization-code flow: the authorization URL opened in the user's
//! browser ([`Browser`]: `$BROWSER` when it is set, otherwise printed for the user to open), and
//! the redirect received on a loopback port ([`Receiver`], RFC 8252's native-app redirect).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the user has to authorize before the login gives up.
const AUTHORIZATION_TIMEOUT: Duration = Duration::from_secs(300);
/// The most bytes of the redirect request read.
const MAX_REQUEST: usize = 16 * 1024;

/// How the authorization URL reaches the user.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Browser {
    /// A program run with the URL as its argument (`$BROWSER`).
    Command(String),
    /// Printed on standard error for the user to open.
    Print,
}

impl Browser {
    /// `$BROWSER` (its first entry, as a colon-separated list), or printing.
    pub fn from_environment() -> Self {
        match std::env::var("BROWSER") {
            Ok(browser) => match browser.split(':').find(|entry| !entry.trim().is_empty()) {
                Some(command) => Browser::Command(command.trim().to_owned()),
                None => Browser::Print,
            },
            Err(_) => Browser::Print,
        }
    }

    /// Shows the user `url`, to authorize codemode with server `server`.
    pub(super) fn open(&self, server: &str, url: &str) -> std::io::Result<()> {
        eprintln!("To authorize codemode with the server \"{server}\", open:\n  {url}");
        if let Browser::Command(command) = self {
            // As `$BROWSER` is used: a command line, `%s` standing for the URL if it has one.
            let mut words = shlex::split(command).unwrap_or_else(|| vec![command.clone()]);
            let has_placeholder = words.iter().any(|word| word.contains("%s"));
            for word in &mut words {
                *word = word.replace("%s", url);
            }
            if !has_placeholder {
                words.push(url.to_owned());
            }
            let (program, arguments) = words
                .split_first()
                .ok_or_else(|| std::io::Error::other("BROWSER is empty"))?;
            std::process::Command::new(program)
                .args(arguments)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|error| {
                    std::io::Error::other(format!("cannot run BROWSER ({program}): {error}"))
                })?;
        }
        Ok(())
    }
}

/// A loopback listener for the authorization server's redirect.
pub(super) struct Receiver {
    listener: tokio::net::TcpListener,
    port: u16,
}

impl Receiver {
    /// Listens on 127.0.0.1, on `port` or any free one.
    pub(super) async fn bind(port: Option<u16>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.unwrap_or(0))).await?;
        let port = listener.local_addr()?.port();
        Ok(Receiver { listener, port })
    }

    /// Where the authorization server sends the user back.
    pub(super) fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}/callback", self.port)
    }

    /// Waits for the redirect and returns its whole URL (with `code`, `state` and `iss`). Other
    /// requests (a browser's favicon) are answered 404 and waited past.
    pub(super) async fn receive(self) -> std::io::Result<String> {
        tokio::time::timeout(AUTHORIZATION_TIMEOUT, async {
            loop {
                let (mut stream, _) = self.listener.accept().await?;
                let mut request = Vec::new();
                let mut buffer = [0u8; 2048];
                while !request.windows(4).any(|window| window == b"\r\n\r\n")
                    && request.len() < MAX_REQUEST
                {
                    let read = stream.read(&mut buffer).await?;
                    if read == 0 {
                        break;
                    }
                    request.extend_from_slice(&buffer[..read]);
                }
                let text = String::from_utf8_lossy(&request);
                let target = text
                    .lines()
                    .next()
                    .and_then(|line| line.split_whitespace().nth(1))
                    .unwrap_or_default()
                    .to_owned();
                if !target.starts_with("/callback") {
                    let _ = stream
                        .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .await;
                    continue;
                }
                let page = "<!doctype html><title>codemode</title><p>codemode is authorized. You can close this window.</p>";
                let _ = stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                            page.len()
                        )
                        .as_bytes(),
                    )
                    .await;
                return Ok(format!("http://127.0.0.1:{}{target}", self.port));
            }
        })
        .await
        .map_err(|_| {
            std::io::Error::other(format!(
                "no redirect came back within {} s",
                AUTHORIZATION_TIMEOUT.as_secs()
            ))
        })?
    }
}
