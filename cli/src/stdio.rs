//! The stdio transport of `codemode mcp`.

/// The transport over this process's stdin and stdout.
pub fn transport() -> (tokio::io::Stdin, tokio::io::Stdout) {
    rmcp::transport::stdio()
}
