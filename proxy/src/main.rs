//! The `mcp-oauth-proxy` binary: parse the command line, load and validate all configuration
//! before binding anything (exit 64 on a bad config), set up logging, run.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mcp_oauth_proxy::config::{Config, ProcessEnv};
use mcp_oauth_proxy::run;

/// Exit code of a bad command line or configuration: sysexits' `EX_USAGE` (64; `EX_CONFIG`
/// would be 78, but 64 is the documented code operators' units and scripts rely on).
const EXIT_USAGE: u8 = 64;

#[derive(Parser)]
#[command(
    name = "mcp-oauth-proxy",
    // The commit too: an operator reporting a problem can say exactly what runs (build.rs).
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MCP_OAUTH_PROXY_COMMIT"), ")"),
    about = "OAuth 2.1 authorization server for MCP clients, in front of GitHub"
)]
struct Cli {
    /// Log as JSON lines.
    #[arg(long, global = true, env = "MCP_OAUTH_PROXY_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve with a configuration file.
    Serve {
        /// Path to the TOML configuration.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a configuration file and exit.
    CheckConfig {
        /// Path to the TOML configuration.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Apply the PostgreSQL schema migrations and exit (they also run at every start).
    StoreMigrate {
        /// Path to the TOML configuration.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Run the offline demo: fake GitHub, proxy, temporary store, all on loopback.
    #[cfg(feature = "demo")]
    Demo {
        /// Where the proxy listens [default: 127.0.0.1:8080, or a free port when it is taken].
        /// An address given here is used exactly: the start fails if it is taken.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Where the admin listener (metrics, health) listens [default: 127.0.0.1:9090, or a
        /// free port when it is taken]. Used exactly when given.
        #[arg(long)]
        admin_listen: Option<std::net::SocketAddr>,
    },
    /// Talk to a running proxy's admin API (clients, consents, grants, audit).
    Admin(mcp_oauth_proxy::cli::admin::AdminArgs),
}

/// Logging, and trace export when `[telemetry]` configures it (telemetry/mod.rs).
fn init_logging(
    json: bool,
    config: Option<&Config>,
) -> Result<mcp_oauth_proxy::telemetry::Telemetry, mcp_oauth_proxy::telemetry::TelemetryError> {
    mcp_oauth_proxy::telemetry::init(json, config.and_then(|c| c.telemetry.as_ref()))
}

fn main() -> ExitCode {
    // Usage errors exit 64 (EX_USAGE) like configuration errors; --help and --version exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Command::Admin(args) = cli.command {
        return mcp_oauth_proxy::cli::admin::main(args);
    }
    // Configuration first: every error is reported before anything starts.
    let config = match &cli.command {
        Command::Serve { config }
        | Command::CheckConfig { config }
        | Command::StoreMigrate { config } => match Config::load(config, &ProcessEnv) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
        #[cfg(feature = "demo")]
        Command::Demo { .. } => None,
        Command::Admin(_) => None,
    };
    if let Command::CheckConfig { .. } = cli.command {
        for w in config.iter().flat_map(Config::warnings) {
            eprintln!("warning: {w}");
        }
        println!("configuration is valid");
        return ExitCode::SUCCESS;
    }
    // JSON when asked on the command line or by `[log] format = "json"`.
    let json = cli.log_json
        || config
            .as_ref()
            .is_some_and(|c| c.log.format == mcp_oauth_proxy::config::LogFormat::Json);
    let telemetry = match init_logging(json, config.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match (cli.command, config) {
            (Command::Serve { config: path }, Some(config)) => run::serve(config, &path).await,
            (Command::StoreMigrate { .. }, Some(config)) => {
                let clock: mcp_oauth_proxy::clock::SharedClock =
                    std::sync::Arc::new(mcp_oauth_proxy::clock::SystemClock);
                run::connect_postgres(&config.store, clock)
                    .await
                    .map(|_| println!("schema is up to date"))
            }
            #[cfg(feature = "demo")]
            (
                Command::Demo {
                    listen,
                    admin_listen,
                },
                _,
            ) => {
                mcp_oauth_proxy::demo::run(mcp_oauth_proxy::demo::DemoOptions {
                    listen,
                    admin_listen,
                })
                .await
            }
            _ => Ok(()),
        }
    });
    // Served and drained: export the spans still queued.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(
            e @ (run::StartError::Config(_)
            | run::StartError::Keys(_)
            | run::StartError::Store { .. }),
        ) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
