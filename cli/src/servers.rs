//! `codemode config check FILE` (what a configuration says, without starting anything) and
//! `codemode servers` (each configured server started and listed, as a session would: which are
//! up with how many tools, which are down and why), `codemode login` and `codemode logout`
//! (OAuth tokens for a remote server).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use codemode_host_adapters::{McpServerConfig, McpTransport, oauth};
use codemode_session::ToolProvider;

use crate::exit;
use crate::setup::DemoTools;
use crate::toolset::{ToolSet, read_config};

/// `codemode config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Show what codemode reads from an MCP configuration (JSON `mcpServers`, VS Code `servers`,
    /// codex TOML): each server, its transport, the variables it uses and whether they are set
    /// (values never shown), and what is ignored. Exits 1 when a server cannot start as
    /// configured, 2 when the file cannot be read.
    Check {
        /// The configuration file.
        file: PathBuf,
    },
}

/// `codemode servers`.
#[derive(Debug, Clone, Args)]
pub struct ServersArgs {
    /// The MCP configuration whose servers to start.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A server as 'COMMAND ARGS' or 'NAME=COMMAND ARGS', as `run --mcp` takes it. Repeatable.
    #[arg(long = "mcp", value_name = "COMMAND")]
    pub mcp: Vec<String>,
}

/// `codemode login` and `codemode logout`.
#[derive(Debug, Clone, Args)]
pub struct LoginArgs {
    /// The server's name in the configuration.
    pub name: String,
    /// The MCP configuration that names it.
    #[arg(long = "config", value_name = "FILE")]
    pub config: PathBuf,
}

/// The HTTP server `name` of the configuration, or the error to print.
fn server_named(args: &LoginArgs) -> Result<McpServerConfig, String> {
    let config = read_config(&args.config).map_err(|error| error.message)?;
    let wanted = codemode_protocol::normalize_identifier(&args.name);
    if let Some((_, why)) = config
        .refused
        .iter()
        .find(|(name, _)| codemode_protocol::normalize_identifier(name) == wanted)
    {
        return Err(why.clone());
    }
    let server = config
        .servers
        .into_iter()
        .find(|server| server.namespace == wanted)
        .ok_or_else(|| {
            format!(
                "{} names no server \"{}\"",
                args.config.display(),
                args.name
            )
        })?;
    match server.transport {
        McpTransport::Http { .. } => Ok(server),
        _ => Err(format!(
            "the server \"{}\" is not reached over streamable HTTP: only remote servers log in",
            args.name
        )),
    }
}

/// Runs `codemode login NAME --config FILE`: the OAuth flow, once; the tokens are saved for the
/// user.
pub async fn login(args: LoginArgs) -> ExitCode {
    let server = match server_named(&args) {
        Ok(server) => server,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let browser = oauth::Browser::from_environment();
    match oauth::login(&server, &browser, None).await {
        Ok(tokens) => {
            eprintln!(
                "logged in to \"{}\"; the tokens are in {} (removed by `codemode logout {}`)",
                args.name,
                tokens
                    .path()
                    .map_or_else(String::new, |path| path.display().to_string()),
                args.name
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Runs `codemode logout NAME --config FILE`: removes the saved tokens.
pub fn logout(args: LoginArgs) -> ExitCode {
    let server = match server_named(&args) {
        Ok(server) => server,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let McpTransport::Http { url, .. } = &server.transport else {
        unreachable!("server_named returns HTTP servers")
    };
    match oauth::TokenFile::for_url(url).remove() {
        Ok(true) => {
            eprintln!("logged out of \"{}\": its tokens are removed", args.name);
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("there were no tokens for \"{}\"", args.name);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "error: cannot remove the tokens of \"{}\": {error}",
                args.name
            );
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Runs `codemode config check`.
pub fn config(command: ConfigCommand) -> ExitCode {
    let ConfigCommand::Check { file } = command;
    match read_config(&file) {
        Ok(config) => {
            print!("{}", crate::config::check::render(&file, &config));
            if config.refused.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(exit::FAILED)
            }
        }
        Err(error) => {
            eprintln!("error: {}", error.message);
            ExitCode::from(exit::USAGE)
        }
    }
}

/// Runs `codemode servers`: starts every server at once (each within its startup timeout),
/// prints one line each, and stops them. Exits 1 when one is down.
pub async fn servers(args: ServersArgs) -> ExitCode {
    let tools = match ToolSet::build(args.mcp, args.config, DemoTools::LeftOut, false) {
        Ok(tools) => tools.provider,
        Err(error) => {
            eprintln!("error: {}", error.message);
            return ExitCode::from(if error.usage {
                exit::USAGE
            } else {
                exit::FAILED
            });
        }
    };
    let listed = match tools.list_tools().await {
        Ok(listed) => listed,
        Err(error) => {
            eprintln!("error: {error}");
            tools.shutdown().await;
            return ExitCode::from(exit::FAILED);
        }
    };
    let down = tools.unavailable();
    for name in tools.names() {
        match down.iter().find(|down| down.name == name) {
            Some(down) => println!("{name}: down: {}", down.reason),
            None => {
                let count = listed
                    .iter()
                    .filter(|tool| tool.name.namespace.as_deref() == Some(name.as_str()))
                    .count();
                println!("{name}: up, {count} tools");
            }
        }
    }
    tools.shutdown().await;
    if down.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILED)
    }
}
