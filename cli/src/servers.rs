//! `codemode config check FILE` (what a configuration says, without starting anything) and
//! `codemode servers` (each configured server started and listed, as a session would: which are
//! up with how many tools, which are down and why).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
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
    let tools = match ToolSet::build(args.mcp, args.config, DemoTools::LeftOut) {
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
