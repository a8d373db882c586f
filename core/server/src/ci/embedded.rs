//! The embedded agent: the server's own runner, fed from the queue in memory.
//!
//! It registers (or finds) its agent record (`local`, or `local@<replica id>` on a shared
//! database: [`local::agent_name`]), re-queues what it held before a restart,
//! chooses its backend (`runner.backend`) and runs workflows until the server stops. Its steps
//! run sandboxed from the server's own files (`runner.sandbox`).

use super::Services;
use super::local::{self, LocalAgent};
use crate::config::Config;
use crate::runner::protocol::AgentInfo;
use crate::runner::sandbox::{Sandbox, SandboxMode};
use crate::runner::{self, RunnerConfig};

/// What the embedded agent says about itself.
pub fn local_info(capacity: usize) -> AgentInfo {
    let mut labels = std::collections::BTreeMap::new();
    if let Ok(host) = std::fs::read_to_string("/etc/hostname") {
        labels.insert("hostname".to_string(), host.trim().to_string());
    }
    AgentInfo {
        platform: super::create::platform(),
        backend: "local".into(),
        capacity: capacity as i64,
        version: super::version_string(),
        labels,
        limits: String::new(),
    }
}

/// The embedded agent: re-queues what it held before a restart, then runs the runner.
/// Runs until `shutdown` (the server's graceful stop, which waits for the runner's sweep).
pub async fn run(ci: Services, config: Config, shutdown: tokio::sync::watch::Receiver<bool>) {
    let name = match local::agent_name(&ci.store, &config.server.data_dir) {
        Ok(name) => name,
        Err(err) => {
            tracing::error!(%err, file = local::REPLICA_ID_FILE, "cannot read or create the replica's id; the local runner is off");
            return;
        }
    };
    // Containers of this server carry an owner key derived from its data dir (and, among
    // replicas, its agent name: two replicas may use one path on one Docker engine), so a
    // restart after a crash sweeps exactly what this server left behind.
    let mut owner_seed = config.server.data_dir.display().to_string();
    if name != local::LOCAL_AGENT {
        owner_seed.push_str(&name);
    }
    let owner = format!(
        "server-{}",
        &crate::store::agents::token_hash(&owner_seed)[..16]
    );
    let row = match local::ensure_agent(&ci.store, &ci.seal, name).await {
        Ok(row) => row,
        Err(err) => {
            tracing::error!(%err, "cannot register the local agent; the local runner is off");
            return;
        }
    };
    match ci.queue.requeue(Some(row.agent.id)).await {
        Ok(n) if n > 0 => tracing::info!(
            workflows = n,
            "re-queued workflows the local agent held before the restart"
        ),
        Ok(_) => {}
        Err(err) => tracing::warn!(%err, "could not re-queue the local agent's workflows"),
    }
    let sandbox = match local_sandbox(&config) {
        Ok(sandbox) => sandbox,
        Err(err) => {
            tracing::error!(%err, "the local runner is off");
            return;
        }
    };
    let spool = runner::spool_dir(&config.runner.workdir, &owner);
    let options = config.runner.backend_options(owner, sandbox);
    let backend = match runner::choose_backend(options).await {
        Ok(backend) => backend,
        Err(err) => {
            tracing::error!(%err, "runner.backend = \"docker\" but no Docker engine answers; the local runner is off");
            return;
        }
    };
    let mut info = local_info(config.runner.capacity);
    info.describe_backend(&*backend);
    if let Err(err) = ci.queue.record_info(&row, &info).await {
        tracing::warn!(%err, "could not record the local agent's details");
    }
    let api = LocalAgent::new(ci.queue.clone(), &row, &info);
    let runner_config = RunnerConfig {
        capacity: config.runner.capacity,
        info,
        backend,
        host_workspace: None,
        spool,
        shutdown_grace: std::time::Duration::from_secs(config.runner.shutdown_grace_secs),
    };
    tracing::info!(
        agent = api.id(),
        capacity = runner_config.capacity,
        sandbox = config.runner.sandbox.as_str(),
        backend = runner_config.info.backend,
        "local runner started"
    );
    runner::run(api, runner_config, shutdown).await;
    // A workflow leased by a poll that the stop cut short never started here: back to the
    // queue with it too (those stopped after the grace were handed over already).
    match ci.queue.requeue(Some(row.agent.id)).await {
        Ok(n) if n > 0 => tracing::info!(workflows = n, "re-queued what the local agent held"),
        Ok(_) => {}
        Err(err) => tracing::warn!(%err, "could not re-queue the local agent's workflows"),
    }
}

/// What steps of the embedded runner must not see: the data dir (databases, signing keys,
/// `secrets.key`, `algod.admin.token`, the default plugin cache), and the files the
/// configuration may place outside it: the secrets key, the plugin cache, the configuration
/// file itself (tokens, plugin secrets) and the TLS key.
fn sandbox_hidden(config: &Config) -> Vec<std::path::PathBuf> {
    let mut hidden = vec![
        config.server.data_dir.clone(),
        config.secret_key_path(),
        config.plugins.cache_dir.clone(),
        config.server.tls_key.clone(),
    ];
    let file = std::path::Path::new(&config.source);
    if file.is_file() {
        hidden.push(file.to_path_buf());
    }
    hidden
}

/// The sandbox of the embedded runner's steps (`runner.sandbox`); `None` for `"none"`.
pub fn local_sandbox(config: &Config) -> Result<Option<Sandbox>, String> {
    if config.runner.sandbox == SandboxMode::None {
        return Ok(None);
    }
    Sandbox::new(sandbox_hidden(config)).map(Some)
}

/// The start-up check of `runner.sandbox` (with the local runner on): `"bwrap"` must be
/// installed and work here, else the server does not start; `"none"` is said loudly.
pub fn check_sandbox(config: &Config) -> Result<(), String> {
    if config.runner.sandbox == SandboxMode::None {
        tracing::warn!(
            "runner.sandbox = \"none\": {}",
            runner::sandbox::UNSANDBOXED_WARNING
        );
        return Ok(());
    }
    let opt_out = format!(
        "set runner.sandbox = \"none\" in {} (trusted pipelines only)",
        config.source
    );
    runner::sandbox::checked(sandbox_hidden(config), &opt_out)
        .map(drop)
        .map_err(|err| format!("{}: runner.sandbox: {err}", config.source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_do_not_see_the_servers_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text = r#"
[server]
data_dir = "/srv/woodlark/data"
tls_cert = "/etc/woodlark/cert.pem"
tls_key = "/etc/woodlark/key.pem"
[storage]
secret_key_file = "/etc/woodlark/secrets.key"
[plugins]
cache_dir = "/var/cache/woodlark"
"#;
        std::fs::write(&path, text).unwrap();
        let config = Config::load(&path).unwrap();
        let hidden = sandbox_hidden(&config);
        for p in [
            "/srv/woodlark/data",
            "/etc/woodlark/secrets.key",
            "/var/cache/woodlark",
            "/etc/woodlark/key.pem",
        ] {
            assert!(hidden.contains(&p.into()), "{p} not in {hidden:?}");
        }
        assert!(hidden.contains(&path), "the configuration file itself");
        // The defaults: the key and the plugin cache live in the data dir; no file, no TLS.
        let hidden = sandbox_hidden(&Config::default());
        assert_eq!(
            hidden,
            [
                std::path::PathBuf::from("data"),
                std::path::PathBuf::from("data/secrets.key"),
                std::path::PathBuf::new(),
                std::path::PathBuf::new(),
            ]
        );
        let none = Config::from_toml("[runner]\nsandbox = \"none\"\n", "t", &[]).unwrap();
        assert!(local_sandbox(&none).unwrap().is_none());
    }
}
