//! The CI module's background work: the embedded runner, lease expiry, agents' contact
//! times, the cron scheduler and log retention.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::app::Ctx;
use crate::ci::create;
use crate::ci::local::{self, LocalAgent};
use crate::config::Config;
use crate::runner::protocol::AgentInfo;
use crate::runner::sandbox::Sandbox;
use crate::runner::{self, RunnerConfig};
use crate::store::{crons, logs, now_unix, now_unix_ms, pipelines};

/// Starts every background task of the CI module.
pub fn spawn(ctx: &Ctx) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![
        tokio::spawn(every(
            ctx.clone(),
            Duration::from_secs(2),
            |ctx| async move {
                if let Err(err) = ctx.ci.queue.requeue(None).await {
                    tracing::warn!(%err, "lease expiry failed");
                }
            },
        )),
        tokio::spawn(every(
            ctx.clone(),
            Duration::from_secs(15),
            |ctx| async move {
                if let Err(err) = ctx.ci.queue.flush_contact().await {
                    tracing::warn!(%err, "could not store agent contact times");
                }
            },
        )),
        tokio::spawn(every(
            ctx.clone(),
            Duration::from_secs(10),
            |ctx| async move {
                run_due_crons(&ctx).await;
            },
        )),
    ];
    tasks.push(tokio::spawn(every(
        ctx.clone(),
        Duration::from_secs(600),
        |ctx| async move {
            match sweep_orphan_logs(&ctx).await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "removed log lines of deleted steps"),
                Err(err) => tracing::warn!(%err, "log sweep failed"),
            }
        },
    )));
    let days = ctx.config.storage.log_retention_days;
    if days > 0 {
        tasks.push(tokio::spawn(every(
            ctx.clone(),
            Duration::from_secs(300),
            move |ctx| async move {
                let cutoff = now_unix_ms() - (days as i64) * 86_400_000;
                loop {
                    match ctx.logs.write(move |c| logs::prune(c, cutoff, 5_000)).await {
                        Ok(5_000) => continue,
                        Ok(_) => break,
                        Err(err) => {
                            tracing::warn!(%err, "log retention failed");
                            break;
                        }
                    }
                }
            },
        )));
    }
    if ctx.config.runner.enabled {
        // Subscribed now, so a stop that comes before the runner runs still waits for it.
        let shutdown = ctx.runner_shutdown.subscribe();
        tasks.push(tokio::spawn(run_local(ctx.clone(), shutdown)));
    }
    tasks
}

/// Removes the log lines of steps that no longer exist (at start and every ten minutes).
///
/// Deleting a pipeline or repository removes its steps in the main database and then their
/// lines in the logs database; the two cannot share a transaction, so a crash between them
/// leaves lines nobody can reach (step ids are never reused). Step ids are read from the
/// logs first and checked afterwards, so a step created meanwhile is never mistaken for a
/// deleted one. Returns the number of lines removed.
pub async fn sweep_orphan_logs(ctx: &Ctx) -> Result<usize, crate::store::StoreError> {
    let mut after = 0;
    let mut removed = 0;
    loop {
        let ids = ctx
            .logs
            .read_blocking(move |c| logs::step_ids_after(c, after, 500))
            .await?;
        let Some(&last) = ids.last() else {
            return Ok(removed);
        };
        let probe = ids.clone();
        let existing = ctx
            .store
            .read_blocking(move |c| pipelines::existing_step_ids(c, &probe))
            .await?;
        let gone: Vec<i64> = ids
            .into_iter()
            .filter(|id| !existing.contains(id))
            .collect();
        if !gone.is_empty() {
            removed += ctx
                .logs
                .write(move |c| logs::delete_steps(c, &gone))
                .await?;
        }
        after = last;
    }
}

/// Runs `f` every `period`, forever.
async fn every<F, Fut>(ctx: Ctx, period: Duration, f: F)
where
    F: Fn(Ctx) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        f(ctx.clone()).await;
    }
}

/// What the embedded agent says about itself.
pub fn local_info(capacity: usize) -> AgentInfo {
    let mut labels = std::collections::BTreeMap::new();
    if let Ok(host) = std::fs::read_to_string("/etc/hostname") {
        labels.insert("hostname".to_string(), host.trim().to_string());
    }
    AgentInfo {
        platform: create::platform(),
        backend: "local".into(),
        capacity: capacity as i64,
        version: crate::ci::version_string(),
        labels,
    }
}

/// The embedded agent: re-queues what it held before a restart, then runs the runner until
/// `shutdown` (the server's graceful stop, which waits for the runner's sweep).
async fn run_local(ctx: Ctx, shutdown: tokio::sync::watch::Receiver<bool>) {
    let row = match local::ensure_agent(&ctx.store, &ctx.seal).await {
        Ok(row) => row,
        Err(err) => {
            tracing::error!(%err, "cannot register the local agent; the local runner is off");
            return;
        }
    };
    match ctx.ci.queue.requeue(Some(row.agent.id)).await {
        Ok(n) if n > 0 => tracing::info!(
            workflows = n,
            "re-queued workflows the local agent held before the restart"
        ),
        Ok(_) => {}
        Err(err) => tracing::warn!(%err, "could not re-queue the local agent's workflows"),
    }
    // Containers of this server carry an owner key derived from its data dir, so a restart
    // after a crash sweeps exactly what this server left behind.
    let owner = format!(
        "server-{}",
        &crate::store::agents::token_hash(&ctx.config.server.data_dir.display().to_string())[..16]
    );
    let sandbox = match local_sandbox(&ctx.config) {
        Ok(sandbox) => sandbox,
        Err(err) => {
            tracing::error!(%err, "the local runner is off");
            return;
        }
    };
    let kind = match ctx.config.runner.backend.parse() {
        Ok(kind) => kind,
        Err(err) => {
            tracing::error!(%err, "runner.backend: the local runner is off");
            return;
        }
    };
    let options = runner::BackendOptions {
        kind,
        owner,
        workdir: ctx.config.runner.workdir.clone(),
        sandbox,
        docker: ctx.config.runner.docker_settings(),
    };
    let backend = match runner::choose_backend(options).await {
        Ok(backend) => backend,
        Err(err) => {
            tracing::error!(%err, "runner.backend = \"docker\" but no Docker engine answers; the local runner is off");
            return;
        }
    };
    let mut info = local_info(ctx.config.runner.capacity);
    info.backend = backend.kind().to_string();
    if let Err(err) = super::agent_rpc::record_info(&ctx, &row, &info).await {
        tracing::warn!(error = %err.message, "could not record the local agent's details");
    }
    let api = LocalAgent::new(ctx.ci.queue.clone(), &row, &info);
    let config = RunnerConfig {
        capacity: ctx.config.runner.capacity,
        info,
        backend,
    };
    tracing::info!(
        agent = api.id(),
        capacity = config.capacity,
        sandbox = ctx.config.runner.sandbox,
        backend = config.info.backend,
        "local runner started"
    );
    runner::run(api, config, shutdown).await;
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
    if config.runner.sandbox == "none" {
        return Ok(None);
    }
    Sandbox::new(sandbox_hidden(config)).map(Some)
}

/// The start-up check of `runner.sandbox` (with the local runner on): `"bwrap"` must be
/// installed and work here, else the server does not start; `"none"` is said loudly.
pub fn check_sandbox(config: &Config) -> Result<(), String> {
    if config.runner.sandbox == "none" {
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

/// Starts a pipeline for every cron job that is due (each job once per due time, even with
/// several servers on one database: the next time is claimed first). The next time is never
/// sooner than `pipeline.cron_min_interval_secs` after this one, whatever the stored schedule
/// says; a schedule that no longer parses runs at that minimum.
pub async fn run_due_crons(ctx: &Ctx) {
    let due = match ctx.store.read(|c| crons::due(c, now_unix(), 20)).await {
        Ok(due) => due,
        Err(err) => {
            tracing::warn!(%err, "cannot read due cron jobs");
            return;
        }
    };
    let min_interval = ctx.ci.settings.pipeline.cron_min_interval();
    for cron in due {
        let now = now_unix();
        let next = crons::next_exec_spaced(
            &cron.schedule,
            &cron.timezone,
            cron.next_exec,
            now,
            min_interval,
        )
        .unwrap_or_else(|err| {
            tracing::warn!(cron = cron.name, repo = cron.repo_id, %err, "unusable cron schedule");
            now.max(cron.next_exec).saturating_add(min_interval)
        });
        let (id, expected) = (cron.id, cron.next_exec);
        let claimed = ctx
            .store
            .write(move |c| crons::claim(c, id, expected, next))
            .await;
        if !matches!(claimed, Ok(true)) {
            continue;
        }
        match create::from_cron(&ctx.ci, &cron).await {
            Ok(outcome) => tracing::info!(
                cron = cron.name,
                repo = cron.repo_id,
                ?outcome,
                "cron job ran"
            ),
            Err(err) => {
                tracing::warn!(cron = cron.name, repo = cron.repo_id, error = %err, "cron job failed")
            }
        }
    }
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
