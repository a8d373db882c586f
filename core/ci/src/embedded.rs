//! The embedded agent: the server's own runner, fed from the queue in memory.
//!
//! It registers (or finds) its agent record (`local`, or `local@<replica id>` on a shared
//! database: [`local::agent_name`]), re-queues what it held before a restart,
//! chooses its backend (`runner.backend`) and runs workflows until the server stops. Its steps
//! run sandboxed from the server's own files (`runner.sandbox`).

use super::Services;
use super::local::{self, LocalAgent};
use std::path::PathBuf;
use std::time::Duration;

use crate::runner::protocol::AgentInfo;
use crate::runner::{self, BackendOptions, RunnerConfig};

/// What the embedded runner is started with; the server builds it from its configuration
/// (`[runner]`, its data dir and the files its steps must not see).
pub struct EmbeddedRunner {
    /// The server's data dir: the replica's id is kept there, and its containers' owner key
    /// is derived from it.
    pub data_dir: PathBuf,
    /// The backend's options (their `owner` is set here), or why the sandbox they ask for
    /// cannot be built (the runner is off then).
    pub options: Result<BackendOptions, String>,
    pub capacity: usize,
    /// How long running workflows may go on after a stop.
    pub shutdown_grace: Duration,
    /// `runner.sandbox`, for the start-up line.
    pub sandbox: &'static str,
}

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
pub async fn run(
    ci: Services,
    config: EmbeddedRunner,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let name = match local::agent_name(&ci.store, &config.data_dir) {
        Ok(name) => name,
        Err(err) => {
            tracing::error!(%err, file = local::REPLICA_ID_FILE, "cannot read or create the replica's id; the local runner is off");
            return;
        }
    };
    // Containers of this server carry an owner key derived from its data dir (and, among
    // replicas, its agent name: two replicas may use one path on one Docker engine), so a
    // restart after a crash sweeps exactly what this server left behind.
    let mut owner_seed = config.data_dir.display().to_string();
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
    let mut options = match config.options {
        Ok(options) => options,
        Err(err) => {
            tracing::error!(%err, "the local runner is off");
            return;
        }
    };
    let spool = runner::spool_dir(&options.workdir, &owner);
    options.owner = owner;
    let backend = match runner::choose_backend(options).await {
        Ok(backend) => backend,
        Err(err) => {
            tracing::error!(%err, "runner.backend = \"docker\" but no Docker engine answers; the local runner is off");
            return;
        }
    };
    let mut info = local_info(config.capacity);
    info.describe_backend(&*backend);
    if let Err(err) = ci.queue.record_info(&row, &info).await {
        tracing::warn!(%err, "could not record the local agent's details");
    }
    let api = LocalAgent::new(ci.queue.clone(), &row, &info);
    let runner_config = RunnerConfig {
        capacity: config.capacity,
        info,
        backend,
        host_workspace: None,
        spool,
        shutdown_grace: config.shutdown_grace,
    };
    tracing::info!(
        agent = api.id(),
        capacity = runner_config.capacity,
        sandbox = config.sandbox,
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
