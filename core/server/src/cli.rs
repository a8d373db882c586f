//! The `woodlark` command line: `serve` and `user add`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use crate::app::{App, open_store};
use crate::auth::{random_secret, token};
use crate::config::Config;
use crate::logging::{LogControl, LogLevel};
use crate::store::users::{self, EnvAdmins, NewUser, validate_login};

#[derive(Parser)]
#[command(
    name = "woodlark",
    version,
    about = "Self-hosted pipeline-automation server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve {
        /// Configuration file.
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
    },
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a user and print its personal access token (alone on stdout).
    Add {
        login: String,
        /// Make the user an instance admin.
        #[arg(long)]
        admin: bool,
        #[arg(long, default_value = "")]
        email: String,
        /// Configuration file (its data dir is used).
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
    },
}

/// Parses the command line and runs it; errors are one line on stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => serve(config),
        Command::User {
            command:
                UserCommand::Add {
                    login,
                    admin,
                    email,
                    config,
                },
        } => user_add(config, login, admin, email),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("woodlark: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    Ok(Config::load(path)?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("woodlark")
        .build()?)
}

fn serve(config_path: PathBuf) -> anyhow::Result<()> {
    let config = load(&config_path)?;
    let level = LogLevel::parse(&config.server.log_level).unwrap_or(LogLevel::Info);
    let log = LogControl::install(level);
    let addr = config.listen_addr().map_err(anyhow::Error::msg)?;
    let app = App::build(config, log)?;
    runtime()?.block_on(async move {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
        let local = listener.local_addr()?;
        tracing::info!(address = %local, "woodlark listening");
        app.serve(listener, shutdown_signal()).await;
        Ok(())
    })
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}

fn user_add(config_path: PathBuf, login: String, admin: bool, email: String) -> anyhow::Result<()> {
    let config = load(&config_path)?;
    LogControl::install(LogLevel::Warn);
    validate_login(&login).map_err(anyhow::Error::msg)?;
    let store = open_store(&config)?;
    let env = EnvAdmins(config.auth.admins.clone());
    let new = NewUser {
        login,
        email,
        admin,
        hash: random_secret(),
        ..NewUser::default()
    };
    let account = runtime()?.block_on(store.write(move |c| users::create(c, &env, &new)));
    store.close();
    let account = account?;
    println!("{}", token::user_token(account.user.id, &account.hash));
    Ok(())
}
