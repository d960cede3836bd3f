//! The listener of `codemode mcp --http`: accepts connections up to `--max-connections`, gives a
//! client that does not finish its request's headers in time nothing more, and drains on
//! shutdown.

use std::sync::Arc;

/// How long a client may take to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What bounds the connections of the server.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: std::time::Duration,
}

/// Serves `router` on `listener` until `shutdown`, with at most `limits.max_connections`
/// connections open (the next waits to be accepted until one closes) and a deadline for each
/// request's headers, so that clients that connect and send nothing, or send slowly, cannot hold the
/// server. On shutdown, open connections finish their requests (for at most 10 s).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, or a connection reset before it was accepted: wait a
                    // little rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that sends nothing, or breaks the protocol, ends its own connection.
            let _ = watched.await;
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {
            tracing::warn!("connections still open 10 s after shutdown began; closing them");
        }
    }
    Ok(())
}
