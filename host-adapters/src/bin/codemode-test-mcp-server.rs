//! The demo MCP server of `codemode_host_adapters::demo_server` as a program, for tests: over
//! stdio by default, or over streamable HTTP with `--http ADDR` (and with `--bearer TOKEN`, only
//! for requests that carry `Authorization: Bearer TOKEN`; others get 401).

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => codemode_host_adapters::demo_server::serve_stdio().await,
        [flag, address] if flag == "--http" => {
            codemode_host_adapters::demo_server::serve_http(address, None).await
        }
        [flag, address, bearer, token] if flag == "--http" && bearer == "--bearer" => {
            codemode_host_adapters::demo_server::serve_http(address, Some(token.clone())).await
        }
        _ => {
            eprintln!("usage: codemode-test-mcp-server [--http ADDR [--bearer TOKEN]]");
            std::process::exit(2);
        }
    }
}
