//! The `woodlark` command line: `serve`, `agent`, `lint`, `exec`, `migrate`, `backup`,
//! `restore`, `plugin run-hook` and the `user` tools.

mod backup;
mod exec;
mod lint;
mod migrate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use crate::app::{App, open_store, open_store_read_only};
use crate::auth::sealing::SealKey;
use crate::auth::{random_secret, token, user_token_key};
use crate::config::Config;
use crate::logging::{LogControl, LogLevel};
use crate::runner::BackendKind;
use crate::runner::sandbox::SandboxMode;
use crate::runner::setting::Named;
use crate::store::StoreError;
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
    /// Plugin tools.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Run workflows for a server (a remote agent).
    Agent(AgentArgs),
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Check pipeline configs as a push would (`file:line: error: message`); exits 1 on errors.
    Lint {
        /// Config files, or folders of them (default: `.woodpecker/`, else `.woodpecker.yaml`).
        paths: Vec<PathBuf>,
        /// `text` or `json`.
        #[arg(long, value_enum, default_value = "text")]
        format: lint::Format,
    },
    /// Run a pipeline here, in this checkout, before pushing it; exits 1 unless it succeeds.
    Exec(exec::ExecArgs),
    /// Copy a stopped server's SQLite data dir into an empty PostgreSQL database, checking
    /// every table's row count and checksum.
    Migrate(migrate::MigrateArgs),
    /// Back up the SQLite data dir, running or stopped, into a new directory: an online copy
    /// of each database and a manifest of every table's row count and checksum.
    Backup(backup::BackupArgs),
    /// Fill an empty data dir from a backup, after checking it against its manifest and key.
    Restore(backup::RestoreArgs),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Runs a forge adapter on a captured webhook and prints the parsed outcome as JSON.
    RunHook {
        /// The component (`.wasm`) to run.
        #[arg(long)]
        plugin: PathBuf,
        /// A request header, `Name: value`, repeatable.
        #[arg(long = "header")]
        headers: Vec<String>,
        /// File holding the request body.
        #[arg(long)]
        body: PathBuf,
        /// A secret the plugin may use for `signing`, `name=value`, repeatable.
        #[arg(long = "secret")]
        secrets: Vec<String>,
        /// A config value the plugin reads, `key=value`, repeatable (e.g. `hook-secret=NAME`).
        #[arg(long = "set")]
        config: Vec<String>,
        /// Path and query of the request.
        #[arg(long, default_value = "/api/hook")]
        path: String,
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
    /// Print the user's current personal access token (alone on stdout).
    Token {
        login: String,
        /// Configuration file (its data dir and secret key are used).
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
    },
    /// Print a one-time URL that signs the user in to the web UI (valid for 10 minutes).
    LoginLink {
        login: String,
        /// Configuration file (its data dir, public URL and web root path are used).
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
    },
}

/// Parses the command line and runs it; errors are one line on stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => serve(config),
        Command::Plugin {
            command:
                PluginCommand::RunHook {
                    plugin,
                    headers,
                    body,
                    secrets,
                    config,
                    path,
                },
        } => run_hook(&plugin, &headers, &body, &secrets, &config, &path),
        Command::Agent(args) => agent(args),
        Command::User {
            command:
                UserCommand::Add {
                    login,
                    admin,
                    email,
                    config,
                },
        } => user_add(config, login, admin, email),
        Command::User {
            command: UserCommand::Token { login, config },
        } => user_token(config, login),
        Command::User {
            command: UserCommand::LoginLink { login, config },
        } => user_login_link(config, login),
        Command::Lint { paths, format } => lint::run(&paths, format),
        Command::Exec(args) => exec::run(args),
        Command::Migrate(args) => migrate::run(args),
        Command::Backup(args) => backup::run_backup(args),
        Command::Restore(args) => backup::run_restore(args),
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

/// The parser of a [`Named`] setting's flag: clap lists the setting's words in help and in
/// the error for any other, and the word becomes the value by the setting's own parser.
fn named<T: Named>() -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser;
    let words = T::all().iter().map(|value| value.name());
    clap::builder::PossibleValuesParser::new(words).try_map(|word| T::from_name(&word))
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
    runtime()?.block_on(async move {
        // Before anything is announced: a SIGTERM from here on (a rolling restart right after
        // start) is kept and ends the serve loop cleanly instead of killing the process.
        let stop = ShutdownSignals::install()?.watch();
        let waits = !config.storage.url.is_empty() && config.storage.wait_for_database_secs > 0;
        let (app, listener) = if waits {
            // PostgreSQL may not be up yet: the port is held, answering 503, while it waits.
            let listener = bind(addr).await?;
            tracing::info!(
                address = %listener.local_addr()?,
                "woodlark holds its port while it starts (503 until it serves)"
            );
            let stopped = signalled(stop.clone());
            match crate::startup::build_when_database_is_up(config, log, listener, stopped).await? {
                Some(ready) => ready,
                None => return Ok(()),
            }
        } else {
            let app = App::build(config, log)?;
            (app, bind(addr).await?)
        };
        // Said once the app serves: scripts and tests wait for this line.
        tracing::info!(address = %listener.local_addr()?, "woodlark listening");
        app.serve(listener, signalled(stop)).await;
        Ok(())
    })
}

async fn bind(addr: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))
}

/// Resolves once a shutdown signal came (never when the signal task is gone without one).
async fn signalled(mut stop: tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// SIGINT and SIGTERM handlers, installed when this is made: a signal delivered between
/// [`install`](Self::install) and [`recv`](Self::recv) is kept, not lost or fatal.
struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Must be called inside the runtime.
    fn install() -> anyhow::Result<ShutdownSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let handler = |kind: SignalKind, name: &str| {
                signal(kind).map_err(|e| anyhow::anyhow!("cannot handle {name}: {e}"))
            };
            Ok(ShutdownSignals {
                interrupt: handler(SignalKind::interrupt(), "SIGINT")?,
                terminate: handler(SignalKind::terminate(), "SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    /// A flag set by the first SIGINT or SIGTERM, for the several phases that stop on it.
    fn watch(self) -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            self.recv().await;
            let _ = tx.send(true);
            // Kept open: a receiver that asks later still sees the flag.
            tx.closed().await;
        });
        rx
    }

    /// Resolves on SIGINT or SIGTERM (at once if one came since `install`).
    async fn recv(self) {
        #[cfg(unix)]
        {
            let ShutdownSignals {
                mut interrupt,
                mut terminate,
            } = self;
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
        }
        #[cfg(not(unix))]
        {
            // A handler that cannot be installed must not read as a signal (and stop at once).
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        tracing::info!("shutdown signal received");
    }
}

/// `key=value` → (key, value), or an error naming the flag.
fn pair(flag: &str, s: &str, sep: char) -> anyhow::Result<(String, String)> {
    let (k, v) = s
        .split_once(sep)
        .ok_or_else(|| anyhow::anyhow!("{flag} {s:?}: expected name{sep}value"))?;
    Ok((k.trim().to_string(), v.trim_start().to_string()))
}

fn run_hook(
    plugin: &std::path::Path,
    headers: &[String],
    body: &std::path::Path,
    secrets: &[String],
    config: &[String],
    path: &str,
) -> anyhow::Result<()> {
    use woodlark_plugin_host::{
        HookRequest, HostServices, MapSecrets, MemoryKv, PluginHost, PluginsConfig, ReloadAction,
    };
    LogControl::install(LogLevel::Warn);
    let body = std::fs::read(body).map_err(|e| anyhow::anyhow!("{}: {e}", body.display()))?;
    let headers = headers
        .iter()
        .map(|h| pair("--header", h, ':').map(|(k, v)| (k, v.into_bytes())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut map = MapSecrets::default();
    let mut names = Vec::new();
    for s in secrets {
        let (k, v) = pair("--secret", s, '=')?;
        map = map.with(&k, &v);
        names.push(k);
    }
    let name = instance_name(plugin);
    let mut cfg = PluginsConfig::single_file(plugin, &name);
    if let Some(instance) = cfg.instances.get_mut(&name) {
        instance.secrets = names;
        for c in config {
            let (k, v) = pair("--set", c, '=')?;
            instance.config.insert(k, v);
        }
    }
    runtime()?.block_on(async move {
        let host = PluginHost::new(
            cfg,
            HostServices {
                kv: std::sync::Arc::new(MemoryKv::default()),
                secrets: std::sync::Arc::new(map),
            },
        )?;
        let h = host.clone();
        let report = tokio::task::spawn_blocking(move || h.reload()).await?;
        if let Some((_, action)) = report
            .iter()
            .find(|(_, a)| !matches!(a, ReloadAction::Loaded { .. }))
        {
            anyhow::bail!("{}: cannot load: {action:?}", plugin.display());
        }
        // The server asks `recognize` of a forge-wide webhook whose URL names no forge.
        let recognized = host.recognize(&headers).await.is_some();
        eprintln!(
            "recognize: {}",
            if recognized {
                "yes (a webhook URL without ?forge= reaches this adapter)"
            } else {
                "no (only webhook URLs naming its forge, /api/hook?forge=<id>, reach this adapter)"
            }
        );
        let request = HookRequest {
            method: "POST".into(),
            path_and_query: path.to_string(),
            headers,
            body,
        };
        let outcome = match host.parse_hook(&name, request).await {
            Ok(outcome) => outcome,
            Err(err) => {
                if let Some(secret) = denied_secret(&err.to_string()) {
                    eprintln!(
                        "hint: the adapter asked for secret {secret:?}: pass --secret {secret}=VALUE"
                    );
                }
                return Err(err.into());
            }
        };
        if let woodlark_plugin_host::HookOutcome::Build(build) = &outcome
            && !build.signature_verified
        {
            eprintln!(
                "signature: not verified; the server refuses such a delivery unless a hook token names the repository. To check a signature: --set hook-secret=NAME --secret NAME=VALUE (the forge's webhook secret)"
            );
        }
        print_out(&serde_json::to_string_pretty(&outcome)?)
    })
}

/// The secret a failed call was refused (`secret "x" is not granted to this plugin`).
fn denied_secret(error: &str) -> Option<&str> {
    let rest = &error[error.find("secret \"")? + "secret \"".len()..];
    let (name, after) = rest.split_once('"')?;
    after.starts_with(" is not granted").then_some(name)
}

/// The instance name `run-hook` loads a file as: its stem in the characters instance names
/// allow (`forge-github-0.1.0.wasm` → `forge-github-0-1-0`).
fn instance_name(plugin: &std::path::Path) -> String {
    let stem = plugin
        .file_stem()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "plugin".into()
    } else {
        name
    }
}

/// Prints `text` and a newline on stdout; a reader that went away (`| head`) is not an error.
fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// What `woodlark agent` was asked to do.
#[derive(clap::Args)]
struct AgentArgs {
    /// The server's root URL, e.g. http://ci.example.com:8000.
    #[arg(long, env = "WOODLARK_SERVER")]
    server: String,
    /// An agent token (from POST /api/agents).
    #[arg(long, env = "WOODLARK_AGENT_TOKEN", hide_env_values = true)]
    token: String,
    /// Path of the server's CI API (its `[ci] mount`).
    #[arg(long, default_value = "/api")]
    api_prefix: String,
    /// Extra labels, `key=value`, repeatable.
    #[arg(long = "label")]
    labels: Vec<String>,
    #[command(flatten)]
    runner: RunnerFlags,
}

/// The agent's flags that repeat `[runner]`'s keys, read into a `config::RunnerConfig` by
/// [`RunnerFlags::into_config`] so that the agent builds its backend the way `serve` does.
#[derive(clap::Args)]
struct RunnerFlags {
    /// Workflows to run at once.
    #[arg(long, default_value_t = 1)]
    capacity: usize,
    /// Parent directory of workspaces (default: the system temp dir).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Run each step in a bubblewrap sandbox (`bwrap`), or directly on the host (`none`:
    /// trusted code only).
    #[arg(long, default_value = "bwrap", value_parser = named::<SandboxMode>())]
    sandbox: SandboxMode,
    /// Where steps run: `docker` (containers on the engine at DOCKER_HOST or the local
    /// socket), `local` (host processes) or `auto` (docker when an engine answers).
    #[arg(long, default_value = "auto", value_parser = named::<BackendKind>())]
    backend: BackendKind,
    /// The clone step's image (docker backend).
    #[arg(long, default_value = crate::runner::docker::DEFAULT_CLONE_IMAGE)]
    clone_image: String,
    /// Memory limit of each container in MiB (docker backend; 0 = none).
    #[arg(long, default_value_t = 4096)]
    memory_mb: u64,
    /// Most processes and threads in each container (0 = none).
    #[arg(long, default_value_t = 4096)]
    pids: u64,
    /// CPUs each container may use (0 = the engine's CPUs but one).
    #[arg(long, default_value_t = 0.0)]
    cpus: f64,
    /// On SIGTERM or ctrl-c, seconds running workflows may go on to their end; those
    /// still running then are stopped and handed back to the server to run again.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_secs: u64,
}

impl RunnerFlags {
    /// The flags as `[runner]` has them; the keys with no flag keep their defaults.
    fn into_config(self) -> crate::config::RunnerConfig {
        crate::config::RunnerConfig {
            capacity: self.capacity,
            workdir: self.workdir.unwrap_or_default(),
            sandbox: self.sandbox,
            backend: self.backend,
            clone_image: self.clone_image,
            memory_mb: self.memory_mb,
            pids: self.pids,
            cpus: self.cpus,
            shutdown_grace_secs: self.shutdown_grace_secs,
            ..Default::default()
        }
    }
}

fn agent(args: AgentArgs) -> anyhow::Result<()> {
    use crate::runner::{self, RunnerConfig, http::HttpAgent};
    let AgentArgs {
        server,
        token,
        api_prefix,
        labels,
        runner,
    } = args;
    let (server, token, api_prefix) = (server.as_str(), token.as_str(), api_prefix.as_str());
    let settings = runner.into_config();
    if !(settings.cpus.is_finite() && settings.cpus >= 0.0) {
        anyhow::bail!("--cpus must be 0 or more");
    }
    let capacity = settings.capacity;
    LogControl::install(LogLevel::Info);
    if !(server.starts_with("http://") || server.starts_with("https://")) {
        anyhow::bail!("--server {server:?} must be an http:// URL");
    }
    if capacity == 0 {
        anyhow::bail!("--capacity must be at least 1");
    }
    let mut info = crate::ci::embedded::local_info(capacity);
    for label in labels {
        let (k, v) = label
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--label {label:?} must be key=value"))?;
        info.labels.insert(k.to_string(), v.to_string());
    }
    // An agent has no files of its own to hide (its token is in its arguments and
    // environment, which steps see neither of); the sandbox still keeps steps out of the
    // host's /tmp, other workflows' directories and the agent's process.
    let sandbox = if settings.sandbox == SandboxMode::None {
        tracing::warn!("--sandbox none: {}", runner::sandbox::UNSANDBOXED_WARNING);
        None
    } else {
        let opt_out = "pass --sandbox none (trusted pipelines only)";
        Some(runner::sandbox::checked(Vec::new(), opt_out).map_err(anyhow::Error::msg)?)
    };
    let api = HttpAgent::new(server, api_prefix, token).map_err(anyhow::Error::msg)?;
    runtime()?.block_on(async move {
        let signals = ShutdownSignals::install()?;
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            signals.recv().await;
            let _ = stop.send(true);
        });
        // The owner key labels this agent's containers: the same server and token after a
        // restart sweep what the crashed run left behind.
        let owner = format!(
            "agent-{}",
            &crate::store::agents::token_hash(&format!("{server}\n{token}"))[..16]
        );
        let spool = runner::spool_dir(&settings.workdir, &owner);
        let backend = runner::choose_backend(settings.backend_options(owner, sandbox)).await?;
        let mut info = info;
        info.describe_backend(&*backend);
        tracing::info!(server, capacity, backend = info.backend, "agent started");
        runner::run(
            api,
            RunnerConfig {
                capacity,
                info,
                backend,
                host_workspace: None,
                spool,
                shutdown_grace: std::time::Duration::from_secs(settings.shutdown_grace_secs),
            },
            shutdown,
        )
        .await;
        Ok(())
    })
}

fn user_add(config_path: PathBuf, login: String, admin: bool, email: String) -> anyhow::Result<()> {
    let config = load(&config_path)?;
    LogControl::install(LogLevel::Warn);
    validate_login(&login).map_err(anyhow::Error::msg)?;
    let (store, seal) = open_store(&config)?;
    let env = EnvAdmins(config.auth.admins.clone());
    let new = NewUser {
        login,
        email,
        admin,
        token_seed: random_secret(),
        ..NewUser::default()
    };
    let account = runtime()?.block_on(crate::ci::users::create_in(&store, env, new));
    store.close();
    let account = account?;
    let key = user_token_key(&seal, &account);
    println!("{}", token::user_token(account.user.id, &key));
    Ok(())
}

fn user_token(config_path: PathBuf, login: String) -> anyhow::Result<()> {
    let config = load(&config_path)?;
    LogControl::install(LogLevel::Warn);
    let (account, seal) = existing_account(&config, login)?;
    let key = user_token_key(&seal, &account);
    println!("{}", token::user_token(account.user.id, &key));
    Ok(())
}

/// The account `login` of the config's data dir (and the sealing key), or a clear error; the
/// store is opened read-only.
fn existing_account(config: &Config, login: String) -> anyhow::Result<(users::Account, SealKey)> {
    let (store, seal) = open_store_read_only(config)?;
    let env = EnvAdmins(config.auth.admins.clone());
    let name = login.clone();
    let found = runtime()?.block_on(store.read(move |c| users::by_login(c, &env, &name)));
    store.close();
    match found {
        Err(StoreError::NotFound) => anyhow::bail!("no user {login:?}"),
        other => Ok((other?, seal)),
    }
}

fn user_login_link(config_path: PathBuf, login: String) -> anyhow::Result<()> {
    let config = load(&config_path)?;
    LogControl::install(LogLevel::Warn);
    if !config.web.module.enabled {
        anyhow::bail!("the web module is disabled ([web] enabled = false)");
    }
    let (account, seal) = existing_account(&config, login)?;
    let now = crate::store::now_unix();
    let key = user_token_key(&seal, &account);
    let url = crate::modules::web::login::login_link(&config, account.user.id, &key, now);
    println!("{url}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_hook_names_any_file_as_a_valid_instance() {
        let name = |f: &str| instance_name(std::path::Path::new(f));
        assert_eq!(name("dist/forge-github.wasm"), "forge-github");
        assert_eq!(name("/x/forge-github-0.1.0.wasm"), "forge-github-0-1-0");
        assert_eq!(name("My Plugin.wasm"), "my-plugin");
        assert_eq!(name(".wasm"), "-wasm");
        assert_eq!(name(&format!("{}.wasm", "a".repeat(100))).len(), 64);
    }

    #[test]
    fn run_hook_names_the_secret_a_call_was_refused() {
        let err = r#"plugin "x": denied: secret "gh-hook" is not granted to this plugin"#;
        assert_eq!(denied_secret(err), Some("gh-hook"));
        assert_eq!(denied_secret(r#"secret "gh-hook" is not set"#), None);
        assert_eq!(denied_secret("something else"), None);
    }

    /// `woodlark agent` and `woodlark exec` parse `--backend`/`--sandbox` into the config's
    /// enums (the agent's through `RunnerFlags::into_config`), and list the accepted words
    /// for any other.
    #[test]
    fn backend_and_sandbox_flags_parse_into_the_settings() {
        let agent = |extra: &[&str]| {
            let args = ["woodlark", "agent", "--server", "http://x", "--token", "t"];
            Cli::try_parse_from(args.iter().chain(extra)).map(|cli| match cli.command {
                Command::Agent(args) => {
                    let settings = args.runner.into_config();
                    (settings.backend, settings.sandbox)
                }
                _ => unreachable!(),
            })
        };
        assert_eq!(agent(&[]).unwrap(), (BackendKind::Auto, SandboxMode::Bwrap));
        for kind in BackendKind::ALL {
            let flags = ["--backend", kind.as_str(), "--sandbox", "none"];
            assert_eq!(agent(&flags).unwrap(), (kind, SandboxMode::None));
        }
        for flags in [["--backend", "kubernetes"], ["--sandbox", "docker"]] {
            let err = agent(&flags).err().unwrap().to_string();
            assert!(
                err.contains(&format!("invalid value '{}'", flags[1])),
                "{err}"
            );
            let listed = match flags[0] {
                "--backend" => "[possible values: auto, docker, local]",
                _ => "[possible values: bwrap, none]",
            };
            assert!(err.contains(listed), "{err}");
        }
        let exec = |extra: &[&str]| {
            let args = ["woodlark", "exec"].iter().chain(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Exec(args) => args.backend,
                _ => unreachable!(),
            }
        };
        assert_eq!(exec(&[]), BackendKind::Docker);
        assert_eq!(exec(&["--backend-engine", "local"]), BackendKind::Local);
    }
}
