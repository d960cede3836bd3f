//! `codemode`: run a JavaScript cell from the shell (`codemode run`), or serve the `exec` and
//! `wait` tools to any MCP-capable agent (`codemode mcp`).
//!
//! Exit status of `run`: 0 completed, 1 failed, 3 terminated, 2 for usage errors.

#![forbid(unsafe_code)]

mod approve;
mod config;
mod engine_host;
mod exit;
mod http;
mod node_engine;
mod run;
mod serve;
mod servers;
mod setup;
mod stdio;
mod telemetry;
mod toolset;
mod wrap;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Run model-written JavaScript that orchestrates tools, in V8 or QuickJS cells.
#[derive(Debug, Parser)]
#[command(name = "codemode", bin_name = "codemode", version, about)]
struct Cli {
    /// How log lines are written to stderr: text, or one JSON object a line (with the trace and
    /// span ids of the span each was logged in, when traces are exported). Levels come from
    /// CODEMODE_LOG (such as `info`, or `codemode_session=debug`); warnings and errors by default.
    #[arg(long, value_enum, global = true, default_value_t = telemetry::LogFormat::Text)]
    log_format: telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one cell in a fresh session and print its output when it ends.
    Run(Box<run::RunArgs>),
    /// Serve the exec and wait tools over MCP (stdio by default).
    Mcp(Box<serve::McpArgs>),
    /// Check an MCP configuration file without starting anything.
    #[command(subcommand)]
    Config(servers::ConfigCommand),
    /// Start the configured servers, say which are up (with their tools) and which are down
    /// (and why), and stop them.
    Servers(servers::ServersArgs),
    /// Authorize with a remote server over OAuth, once: opens the authorization URL with
    /// $BROWSER (or prints it), receives the redirect on a loopback port, and keeps the tokens
    /// for you (0600, under $XDG_STATE_HOME/codemode/oauth); they are refreshed as they expire.
    Login(servers::LoginArgs),
    /// Remove the OAuth tokens `codemode login` kept for a server.
    Logout(servers::LoginArgs),
    /// Put codemode in front of the servers of an agent's MCP configuration (Claude Code's
    /// .mcp.json, Claude Desktop, Cursor, VS Code's mcp.json, codex's config.toml): they move into
    /// codemode's own configuration beside it, and the file keeps one codemode entry. Shows the
    /// change first, asks unless --yes, keeps a backup; --undo puts the file back.
    Wrap(wrap::WrapArgs),
    /// Run cells for a parent codemode in an engine process (the parent starts it; not for
    /// people).
    #[command(hide = true)]
    EngineHost {
        /// The JavaScript engine of the cells.
        #[arg(long, value_enum, default_value_t = setup::JsEngine::DEFAULT)]
        engine: setup::JsEngine,
        /// Run V8 cells on the V8 of this `node` binary (the pinned Node 24), loading the engine
        /// library `--library` into it (V8 cells need both).
        #[arg(long, value_name = "PATH", requires = "library")]
        node: Option<std::path::PathBuf>,
        /// The engine library (`libcodemode_v8_engine.so`) that `--node` loads.
        #[arg(long, value_name = "PATH", requires = "node")]
        library: Option<std::path::PathBuf>,
    },
    /// Serve a small demo MCP server (add, image, fail, sleep, note, forget, log, traceparent, pid), to try --mcp with.
    DemoMcpServer {
        /// Serve over streamable HTTP at this address instead of stdio, such as 127.0.0.1:8081.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Over HTTP, answer 401 to requests without `Authorization: Bearer TOKEN`.
        #[arg(long, value_name = "TOKEN", requires = "http")]
        bearer: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Traces and metrics leave the process only from the commands that run cells for someone;
    // an engine process (sandboxed, no network) and the demo server only log.
    let (exports, trace_content) = match &cli.command {
        Command::Mcp(args) => (true, args.trace_content),
        Command::Run(_) => (true, false),
        _ => (false, false),
    };
    let telemetry = telemetry::init(cli.log_format, exports, trace_content);
    if let Command::EngineHost {
        engine,
        node,
        library,
    } = cli.command
    {
        // A plain thread loop: no async runtime in an engine process.
        return match node.zip(library) {
            Some((node, library)) => engine_host::exec_node(&node, &library),
            None => engine_host::serve(engine),
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let status = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(*args).await,
            Command::Mcp(args) => serve::serve(*args).await,
            Command::Config(command) => servers::config(command),
            Command::Servers(args) => servers::servers(args).await,
            Command::Login(args) => servers::login(args).await,
            Command::Logout(args) => servers::logout(args),
            Command::Wrap(args) => wrap::wrap(args),
            Command::EngineHost { .. } => {
                unreachable!("handled before the async runtime starts")
            }
            Command::DemoMcpServer { http, bearer } => {
                let served = match http {
                    Some(address) => {
                        codemode_host_adapters::demo_server::serve_http(&address, bearer).await
                    }
                    None => codemode_host_adapters::demo_server::serve_stdio().await,
                };
                match served {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(error) => {
                        eprintln!("error: {error}");
                        ExitCode::from(exit::FAILED)
                    }
                }
            }
        }
    });
    // The runtime first (its tasks may still log), then what is left of spans and metrics.
    drop(runtime);
    telemetry.shutdown();
    status
}
