//! The tools a run or a server offers ([`ToolSet`]): the demo tools, the `--mcp` servers and the
//! configuration file's, merged into one provider, with the user's permissions; and the same
//! set made again from a changed configuration file while it serves ([`ToolSet::reload`]).
//!
//! A reload starts the servers that were added, stops those removed, restarts those whose entry
//! changed, and leaves the others (their connections, their calls in flight) as they are. A file
//! that does not parse is refused with its error, and the running set is kept.

use std::path::PathBuf;
use std::sync::Arc;

use codemode_host_adapters::{CompositeTools, McpServerConfig, McpTools, RefusedServer};
use codemode_protocol::normalize_identifier;
use codemode_session::{Permissions, ToolProvider};
use parking_lot::Mutex;

use crate::setup::{DemoTools, SessionArgs, SetupError, demo_tools, mcp_server, user_environment};

/// What the configuration asks for, before anything starts.
struct Layout {
    servers: Vec<McpServerConfig>,
    refused: Vec<(String, String)>,
    permissions: Permissions,
    warnings: Vec<String>,
}

/// What a reload changed, by server name.
#[derive(Debug, Default)]
pub struct Reloaded {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub restarted: Vec<String>,
    pub kept: Vec<String>,
}

/// The tools offered, and where they came from.
pub struct ToolSet {
    /// Every tool, merged.
    pub provider: Arc<CompositeTools>,
    permissions: Mutex<Arc<Permissions>>,
    mcp: Vec<String>,
    config: Option<PathBuf>,
    demo: Option<Arc<dyn ToolProvider>>,
    /// Whether a call a server refuses for want of OAuth scope authorizes again (a user is at
    /// hand: `codemode run`).
    step_up: bool,
    /// The servers running now, with the configuration each was started with.
    servers: tokio::sync::Mutex<Vec<(McpServerConfig, Arc<McpTools>)>>,
}

impl ToolSet {
    /// The demo tools (if offered), the `mcp` servers (`'NAME=COMMAND ARGS'`) and those of the
    /// configuration file, with its permissions (without one: read-only tools run, other calls
    /// ask). Warnings about the file go to stderr.
    pub fn build(
        mcp: Vec<String>,
        config: Option<PathBuf>,
        demo: DemoTools,
        step_up: bool,
    ) -> Result<ToolSet, SetupError> {
        let demo: Option<Arc<dyn ToolProvider>> =
            (demo == DemoTools::Offered).then(|| Arc::new(demo_tools()) as Arc<dyn ToolProvider>);
        let mut set = ToolSet {
            provider: Arc::new(CompositeTools::new()),
            permissions: Mutex::new(Arc::new(Permissions::ask_by_default())),
            mcp,
            config,
            demo,
            step_up,
            servers: tokio::sync::Mutex::new(Vec::new()),
        };
        let layout = set.layout()?;
        for warning in &layout.warnings {
            eprintln!("warning: {warning}");
        }
        for (_, why) in &layout.refused {
            eprintln!("warning: {why}; the other servers start without it");
        }
        let servers: Vec<_> = layout
            .servers
            .into_iter()
            .map(|server| {
                let tools = Arc::new(McpTools::new(server.clone()));
                (server, tools)
            })
            .collect();
        set.provider
            .reconfigure(set.members(&layout.refused, &servers));
        *set.servers.get_mut() = servers;
        *set.permissions.lock() = Arc::new(layout.permissions);
        Ok(set)
    }

    /// The tools the flags of `args` name (`--mcp`, `--config`); with `step_up`, a call a server
    /// refuses for want of OAuth scope authorizes again (for a user at hand).
    pub fn for_args(
        args: &SessionArgs,
        demo: DemoTools,
        step_up: bool,
    ) -> Result<ToolSet, SetupError> {
        ToolSet::build(args.mcp.clone(), args.config.clone(), demo, step_up)
    }

    /// The user's rules for the calls cells make, as last read.
    pub fn permissions(&self) -> Arc<Permissions> {
        Arc::clone(&self.permissions.lock())
    }

    /// The configuration file, if there is one.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    /// Reads the configuration again and applies what changed (see the module's doc). The
    /// error says why the file was refused; nothing changed then.
    pub async fn reload(&self) -> Result<Reloaded, String> {
        let layout = self.layout().map_err(|error| error.message)?;
        for warning in &layout.warnings {
            tracing::warn!("{warning}");
        }
        let mut servers = self.servers.lock().await;
        let mut reloaded = Reloaded::default();
        let mut next = Vec::with_capacity(layout.servers.len());
        for server in layout.servers {
            let previous = servers
                .iter()
                .find(|(running, _)| running.namespace == server.namespace);
            match previous {
                Some((running, tools)) if *running == server => {
                    reloaded.kept.push(server.namespace.clone());
                    next.push((server, Arc::clone(tools)));
                }
                previous => {
                    let name = server.namespace.clone();
                    if previous.is_some() {
                        reloaded.restarted.push(name);
                    } else {
                        reloaded.added.push(name);
                    }
                    let tools = Arc::new(McpTools::new(server.clone()));
                    next.push((server, tools));
                }
            }
        }
        for (running, _) in servers.iter() {
            if !next
                .iter()
                .any(|(server, _)| server.namespace == running.namespace)
            {
                reloaded.removed.push(running.namespace.clone());
            }
        }
        let left = self
            .provider
            .reconfigure(self.members(&layout.refused, &next));
        *servers = next;
        drop(servers);
        *self.permissions.lock() = Arc::new(layout.permissions);
        // Route calls to the new members now (and start them), then close what left.
        if let Err(error) = self.provider.list_tools().await {
            tracing::warn!(%error, "the tools could not be listed after the reload");
        }
        for provider in left {
            provider.shutdown().await;
        }
        Ok(reloaded)
    }

    /// The composite's members, in order: the demo tools, servers that cannot start, servers.
    fn members(
        &self,
        refused: &[(String, String)],
        servers: &[(McpServerConfig, Arc<McpTools>)],
    ) -> Vec<(String, Arc<dyn ToolProvider>)> {
        let mut members: Vec<(String, Arc<dyn ToolProvider>)> = Vec::new();
        if let Some(demo) = &self.demo {
            members.push(("demo tools".to_owned(), Arc::clone(demo)));
        }
        for (name, why) in refused {
            let name = normalize_identifier(name);
            members.push((
                name.clone(),
                Arc::new(RefusedServer::new(name, why.clone())),
            ));
        }
        for (server, tools) in servers {
            members.push((
                server.namespace.clone(),
                Arc::clone(tools) as Arc<dyn ToolProvider>,
            ));
        }
        members
    }

    /// The servers and permissions the flags and the file ask for now.
    fn layout(&self) -> Result<Layout, SetupError> {
        let environment = user_environment();
        let mut layout = Layout {
            servers: Vec::new(),
            refused: Vec::new(),
            permissions: Permissions::ask_by_default(),
            warnings: Vec::new(),
        };
        for spec in &self.mcp {
            layout
                .servers
                .push(mcp_server(spec)?.with_environment(environment.clone()));
        }
        if let Some(path) = &self.config {
            let configured = read_config(path)?;
            layout.servers.extend(configured.servers);
            layout.refused = configured.refused;
            layout.permissions = configured.permissions;
            layout.warnings = configured.warnings;
        }
        for server in &mut layout.servers {
            server.oauth = server.oauth.clone().with_step_up(self.step_up);
        }
        Ok(layout)
    }
}

/// The configuration file at `path`, its variables expanded from the user's environment.
pub fn read_config(path: &std::path::Path) -> Result<crate::config::ConfigServers, SetupError> {
    let environment = user_environment()
        .into_iter()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect();
    crate::config::read(path, environment).map_err(|message| SetupError {
        message,
        usage: true,
    })
}
