//! The runner: takes workflows from the server and runs their steps on this machine.
//!
//! One runner serves both the embedded local agent (inside `woodlark serve`) and remote
//! agents (`woodlark agent`): it only talks to the server through [`AgentApi`], which the
//! server implements in memory and [`http::HttpAgent`] implements over the agent protocol.
//!
//! A workflow runs in a fresh directory (`workspace/` + `home/`): the clone step checks out
//! the pipeline's commit with `git`, then steps run in dependency order — independent steps
//! in parallel — each as a process group ([`process`]). A step runs when the workflow so far
//! matches its `when.status` (success unless a non-ignored step failed); otherwise it is
//! skipped. Cancellation (the server says so through `wait_canceled`) and the repository's
//! timeout kill the running process groups.
//!
//! Steps run as host processes, so this backend is for trusted code only. By default each
//! step runs inside bubblewrap ([`sandbox`]): it cannot see the server's data dir, secrets
//! key or configuration, nor other workflows' directories; `runner.sandbox = "none"` (or
//! `woodlark agent --sandbox none`) runs it with everything the runner's user can read.

pub mod docker;
pub mod http;
pub mod process;
pub mod protocol;
pub mod sandbox;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use process::Exit;
use protocol::{AgentInfo, LogLine, StepUpdate, Work, WorkflowDone};
use woodlark_pipeline::status::{self, Status};
use woodlark_pipeline::types::{CompiledStep, OnFailure, StepKind};

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("server unreachable: {0}")]
    Transport(String),
    #[error("server refused: {0}")]
    Refused(String),
}

/// What a runner needs from the server. Every call may fail; the runner retries where it
/// makes sense (a lost log batch is re-sent; the server stores each line once).
pub trait AgentApi: Clone + Send + Sync + 'static {
    /// Waits (bounded) for a workflow to run; `None` when there was none in time.
    fn next(
        &self,
        info: &AgentInfo,
    ) -> impl Future<Output = Result<Option<Work>, RunnerError>> + Send;
    fn init(&self, workflow_id: i64) -> impl Future<Output = Result<(), RunnerError>> + Send;
    fn step(
        &self,
        workflow_id: i64,
        update: StepUpdate,
    ) -> impl Future<Output = Result<(), RunnerError>> + Send;
    fn logs(
        &self,
        workflow_id: i64,
        lines: Vec<LogLine>,
    ) -> impl Future<Output = Result<(), RunnerError>> + Send;
    fn extend(&self, workflow_id: i64) -> impl Future<Output = Result<(), RunnerError>> + Send;
    /// Waits (bounded) until the workflow is canceled: `true` if it was.
    fn wait_canceled(
        &self,
        workflow_id: i64,
    ) -> impl Future<Output = Result<bool, RunnerError>> + Send;
    fn done(
        &self,
        workflow_id: i64,
        done: WorkflowDone,
    ) -> impl Future<Output = Result<(), RunnerError>> + Send;
}

/// Settings of a runner.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub capacity: usize,
    /// Parent of per-workflow directories ("" = the system temp dir).
    pub workdir: PathBuf,
    pub info: AgentInfo,
    /// Run every step inside this bubblewrap sandbox; `None` runs steps directly on the host
    /// (`runner.sandbox = "none"`), able to read whatever the runner's user can.
    pub sandbox: Option<sandbox::Sandbox>,
    /// Run steps, the clone included, in containers on this engine (the docker backend);
    /// `None`: the local backend (host processes).
    pub docker: Option<docker::Docker>,
}

/// The engine a runner should use for `backend` (`auto`, `docker` or `local`): `docker`
/// fails when no engine answers; `auto` falls back to the local backend with a warning. The
/// engine is swept of this runner's leftovers (`owner`) before any work starts.
pub async fn choose_backend(
    backend: &str,
    owner: &str,
    settings: docker::Settings,
) -> Result<Option<docker::Docker>, String> {
    if backend == "local" {
        return Ok(None);
    }
    let engine = match docker::Docker::connect(owner, settings).await {
        Ok(engine) => engine,
        Err(e) if backend == "auto" => {
            tracing::warn!(
                error = %e,
                "no Docker engine answers: steps run as HOST PROCESSES with the local backend \
                 (trusted code only); install and start Docker, or set runner.backend = \"local\" \
                 to silence this"
            );
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    match engine.sweep().await {
        Ok(swept) if swept != docker::Swept::default() => tracing::info!(
            containers = swept.containers,
            networks = swept.networks,
            volumes = swept.volumes,
            "removed containers, networks and volumes left by an earlier run"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not sweep the engine"),
    }
    engine.check_clone_image().await;
    Ok(Some(engine))
}

/// Runs `capacity` workers until `shutdown` fires.
pub async fn run<A: AgentApi>(api: A, config: RunnerConfig, mut shutdown: watch::Receiver<bool>) {
    let config = Arc::new(config);
    let mut workers = JoinSet::new();
    for n in 0..config.capacity.max(1) {
        let api = api.clone();
        let config = config.clone();
        let mut stop = shutdown.clone();
        workers.spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                let next = tokio::select! {
                    next = api.next(&config.info) => next,
                    _ = stop.changed() => break,
                };
                match next {
                    Ok(Some(work)) => {
                        backoff = Duration::from_millis(200);
                        let id = work.workflow_id;
                        tracing::info!(
                            worker = n,
                            workflow = id,
                            repo = work.repo,
                            "workflow started"
                        );
                        run_workflow(&api, work, &config).await;
                        tracing::info!(worker = n, workflow = id, "workflow finished");
                    }
                    Ok(None) => backoff = Duration::from_millis(200),
                    Err(err) => {
                        tracing::warn!(%err, "cannot get work; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {},
                            _ = stop.changed() => break,
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        });
    }
    let _ = shutdown.changed().await;
    workers.shutdown().await;
    // The workflows ended with the workers: remove their containers and the idle networks.
    if let Some(engine) = &config.docker
        && let Err(e) = engine.sweep().await
    {
        tracing::warn!(error = %e, "could not clean the Docker engine up; the next start sweeps");
    }
}

/// Retries an API call a few times (transport errors only).
async fn retry<T, F, Fut>(mut f: F) -> Result<T, RunnerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RunnerError>>,
{
    let mut delay = Duration::from_millis(100);
    let mut last = None;
    for _ in 0..6 {
        match f().await {
            Ok(v) => return Ok(v),
            Err(RunnerError::Refused(e)) => return Err(RunnerError::Refused(e)),
            Err(e) => {
                last = Some(e);
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    Err(last.unwrap_or(RunnerError::Transport("no attempt".into())))
}

fn now() -> i64 {
    woodlark_stdx::now_unix()
}

/// Longest a captured line waits before it is sent.
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// A batch is sent once it has this many lines (or after [`FLUSH_EVERY`])...
const BATCH_LINES: usize = 200;
/// ...first taking in output that is already waiting, up to these bounds: under a burst the
/// batch grows instead of paying one durable commit per [`BATCH_LINES`]. The byte bound keeps
/// a batch far below the 8 MiB upload limit even if every byte needs JSON escaping.
const MAX_BATCH_LINES: usize = 10_000;
const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// The outcome of one step, for scheduling the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Success,
    Failure { ignored: bool },
    Killed,
    Skipped,
}

/// Runs one workflow to the end and reports it. Never panics on bad work.
pub async fn run_workflow<A: AgentApi>(api: &A, work: Work, config: &RunnerConfig) {
    let id = work.workflow_id;
    if let Err(err) = retry(|| api.init(id)).await {
        tracing::warn!(workflow = id, %err, "init refused; dropping the workflow");
        return;
    }
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let watcher = {
        let api = api.clone();
        tokio::spawn(async move {
            loop {
                match api.wait_canceled(id).await {
                    Ok(true) => {
                        let _ = cancel_tx.send(true);
                        break;
                    }
                    Ok(false) => {}
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        })
    };
    let extender = {
        let api = api.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(20)).await;
                let _ = api.extend(id).await;
            }
        })
    };

    let result = match &config.docker {
        Some(engine) => match engine.create_workflow(work.workflow_id).await {
            Ok(resources) => {
                let containers = Containers {
                    engine: engine.clone(),
                    resources,
                };
                let result = execute(api, &work, config, Some(&containers), cancel_rx).await;
                engine.remove_workflow(&containers.resources).await;
                result
            }
            Err(e) => Err(e),
        },
        None => execute(api, &work, config, None, cancel_rx).await,
    };
    watcher.abort();
    extender.abort();
    let done = match result {
        Ok(state) => WorkflowDone {
            state,
            error: String::new(),
        },
        Err(error) => WorkflowDone {
            state: status::ERROR,
            error,
        },
    };
    if let Err(err) = retry(|| api.done(id, done.clone())).await {
        tracing::warn!(workflow = id, %err, "could not report the end of the workflow");
    }
}

/// A workflow's directory; removed when dropped.
struct Workspace {
    root: PathBuf,
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Workspace {
    fn create(parent: &Path, workflow_id: i64) -> Result<Workspace, String> {
        let parent = if parent.as_os_str().is_empty() {
            std::env::temp_dir()
        } else {
            parent.to_path_buf()
        };
        let suffix: String = woodlark_stdx::random_secret()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(8)
            .collect();
        let root = parent.join(format!("woodlark-{workflow_id}-{suffix}"));
        for sub in ["workspace", "home"] {
            std::fs::create_dir_all(root.join(sub))
                .map_err(|e| format!("cannot create {}: {e}", root.join(sub).display()))?;
        }
        Ok(Workspace { root })
    }

    fn dir(&self) -> PathBuf {
        self.root.join("workspace")
    }

    /// The workflow's directory: the workspace and its home (what a sandboxed step may write).
    fn root(&self) -> &Path {
        &self.root
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }
}

/// Runs the steps; returns the workflow's final state, or an error that prevented running.
/// A workflow's place on the docker backend.
#[derive(Clone)]
struct Containers {
    engine: docker::Docker,
    resources: docker::WorkflowResources,
}

async fn execute<A: AgentApi>(
    api: &A,
    work: &Work,
    config: &RunnerConfig,
    containers: Option<&Containers>,
    cancel: watch::Receiver<bool>,
) -> Result<Status, String> {
    let ws = Workspace::create(&config.workdir, work.workflow_id)?;
    let sandbox = config.sandbox.as_ref().map(|s| Arc::new(s.clone()));
    let containers = containers.map(|c| Arc::new(c.clone()));
    if let Some(netrc) = &work.netrc {
        let text = format!(
            "machine {}\nlogin {}\npassword {}\n",
            netrc.machine, netrc.login, netrc.password
        );
        woodlark_stdx::write_private(&ws.home().join(".netrc"), &text)
            .map_err(|e| format!("cannot write .netrc: {e}"))?;
    }
    let steps = &work.workflow.steps;
    if steps.len() != work.steps.len() {
        return Err("the workflow's steps and their ids do not match".into());
    }
    let deadline = Instant::now() + Duration::from_secs(60 * work.timeout_minutes.max(1) as u64);
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut outcomes: Vec<Option<Outcome>> = vec![None; steps.len()];
    let mut started = vec![false; steps.len()];
    let mut running: JoinSet<(usize, Outcome)> = JoinSet::new();
    let mut detached: Vec<Handle> = Vec::new();
    let (detached_tx, mut detached_rx) = mpsc::unbounded_channel::<Handle>();

    loop {
        let canceled = *cancel.borrow();
        let failed = outcomes.iter().any(|o| {
            matches!(
                o,
                Some(Outcome::Failure { ignored: false }) | Some(Outcome::Killed)
            )
        });
        // Start every step whose dependencies are done.
        for (i, step) in steps.iter().enumerate() {
            if started[i] {
                continue;
            }
            let deps_done = step
                .depends_on
                .iter()
                .all(|d| index.get(d.as_str()).is_none_or(|j| outcomes[*j].is_some()));
            if !deps_done {
                continue;
            }
            started[i] = true;
            let wanted = if step.when_status.is_empty() {
                vec!["success".to_string()]
            } else {
                step.when_status.clone()
            };
            let so_far = if failed { "failure" } else { "success" };
            if canceled || !wanted.iter().any(|w| w == so_far) {
                let state = if canceled {
                    status::CANCELED
                } else {
                    status::SKIPPED
                };
                report(
                    api,
                    work.workflow_id,
                    StepUpdate {
                        step_id: work.steps[i].id,
                        state,
                        exit_code: 0,
                        error: String::new(),
                        started: 0,
                        finished: 0,
                        cancel_pipeline: false,
                    },
                )
                .await;
                outcomes[i] = Some(Outcome::Skipped);
                continue;
            }
            let ctx = StepContext {
                api: api.clone(),
                workflow_id: work.workflow_id,
                step_id: work.steps[i].id,
                first_line: work
                    .log_offsets
                    .get(&work.steps[i].id)
                    .copied()
                    .unwrap_or(0),
                step: step.clone(),
                dir: ws.dir(),
                home: ws.home(),
                root: ws.root().to_path_buf(),
                sandbox: sandbox.clone(),
                containers: containers.clone(),
                clone: docker::CloneSource {
                    url: work.clone_url.clone(),
                    commit: work.commit.clone(),
                    git_ref: work.git_ref.clone(),
                    netrc: work.netrc.clone(),
                },
                cancel: cancel.clone(),
                deadline,
                detached: detached_tx.clone(),
            };
            running.spawn(async move { (i, run_step(ctx).await) });
        }
        while let Ok(p) = detached_rx.try_recv() {
            detached.push(p);
        }
        if outcomes.iter().all(Option::is_some) {
            break;
        }
        match running.join_next().await {
            Some(Ok((i, outcome))) => outcomes[i] = Some(outcome),
            Some(Err(e)) => return Err(format!("a step task failed: {e}")),
            None => {
                // Nothing runs and nothing can start: dependencies on unknown steps.
                for (i, o) in outcomes.iter_mut().enumerate() {
                    if o.is_none() {
                        report(
                            api,
                            work.workflow_id,
                            StepUpdate {
                                step_id: work.steps[i].id,
                                state: status::SKIPPED,
                                exit_code: 0,
                                error: "dependencies cannot be met".into(),
                                started: 0,
                                finished: 0,
                                cancel_pipeline: false,
                            },
                        )
                        .await;
                        *o = Some(Outcome::Skipped);
                    }
                }
            }
        }
    }
    while let Ok(p) = detached_rx.try_recv() {
        detached.push(p);
    }
    for p in &detached {
        p.stop().await;
    }
    let canceled = *cancel.borrow();
    let any_killed = outcomes.iter().any(|o| matches!(o, Some(Outcome::Killed)));
    let failed = outcomes
        .iter()
        .any(|o| matches!(o, Some(Outcome::Failure { ignored: false })));
    Ok(if canceled || any_killed {
        status::KILLED
    } else if failed {
        status::FAILURE
    } else {
        status::SUCCESS
    })
}

async fn report<A: AgentApi>(api: &A, workflow_id: i64, update: StepUpdate) {
    if let Err(err) = retry(|| api.step(workflow_id, update.clone())).await {
        tracing::warn!(workflow = workflow_id, step = update.step_id, %err, "could not report a step state");
    }
}

struct StepContext<A> {
    api: A,
    workflow_id: i64,
    step_id: i64,
    first_line: i64,
    step: CompiledStep,
    dir: PathBuf,
    home: PathBuf,
    /// The workflow's directory (parent of `dir` and `home`).
    root: PathBuf,
    sandbox: Option<Arc<sandbox::Sandbox>>,
    /// What the clone step checks out.
    clone: docker::CloneSource,
    cancel: watch::Receiver<bool>,
    deadline: Instant,
    detached: mpsc::UnboundedSender<Handle>,
    /// Set on the docker backend: every step runs in a container there.
    containers: Option<Arc<Containers>>,
}

/// A running step on either backend.
enum Handle {
    Process(process::Running),
    Container(docker::Container),
}

impl Handle {
    fn kill(&self) {
        match self {
            Handle::Process(p) => p.kill(),
            Handle::Container(c) => c.kill(),
        }
    }

    async fn wait(&mut self) -> Exit {
        match self {
            Handle::Process(p) => p.wait().await,
            Handle::Container(c) => c.wait().await,
        }
    }

    /// Kills and, for containers, waits until the engine removed it (detached steps at the
    /// end of the workflow, before its network and volume go).
    async fn stop(&self) {
        match self {
            Handle::Process(p) => p.kill(),
            Handle::Container(c) => c.stop().await,
        }
    }
}

/// Sends a step's lines in batches (at most every 20 ms, or at 200 lines), numbering them:
/// live log readers see a line a few milliseconds after it was written.
struct LogShipper<A> {
    api: A,
    workflow_id: i64,
    step_id: i64,
    next_line: i64,
    batch: Vec<LogLine>,
    batch_bytes: usize,
    last_flush: Instant,
}

impl<A: AgentApi> LogShipper<A> {
    fn push(&mut self, time: i64, kind: i64, data: String) {
        self.batch_bytes += data.len();
        self.batch.push(LogLine {
            step_id: self.step_id,
            line: self.next_line,
            time,
            kind,
            data,
        });
        self.next_line += 1;
    }

    fn due(&self) -> bool {
        self.batch.len() >= BATCH_LINES
            || self.batch_bytes >= MAX_BATCH_BYTES
            || (!self.batch.is_empty() && self.last_flush.elapsed() >= FLUSH_EVERY)
    }

    fn full(&self) -> bool {
        self.batch.len() >= MAX_BATCH_LINES || self.batch_bytes >= MAX_BATCH_BYTES
    }

    /// Moves output that is already waiting into the batch, until it is full.
    fn take_waiting(&mut self, rx: &mut mpsc::UnboundedReceiver<(i64, String)>) {
        while !self.full() {
            match rx.try_recv() {
                Ok((time, text)) => self.push(time, 0, text),
                Err(_) => break,
            }
        }
    }

    async fn flush(&mut self) {
        self.last_flush = Instant::now();
        if self.batch.is_empty() {
            return;
        }
        self.batch_bytes = 0;
        let lines = std::mem::take(&mut self.batch);
        let id = self.workflow_id;
        if let Err(err) = retry(|| self.api.logs(id, lines.clone())).await {
            tracing::warn!(workflow = id, %err, lines = lines.len(), "log lines could not be delivered");
        }
    }
}

async fn run_step<A: AgentApi>(ctx: StepContext<A>) -> Outcome {
    let started = now();
    report(
        &ctx.api,
        ctx.workflow_id,
        StepUpdate {
            step_id: ctx.step_id,
            state: status::RUNNING,
            exit_code: 0,
            error: String::new(),
            started,
            finished: 0,
            cancel_pipeline: false,
        },
    )
    .await;
    let mut shipper = LogShipper {
        api: ctx.api.clone(),
        workflow_id: ctx.workflow_id,
        step_id: ctx.step_id,
        next_line: ctx.first_line,
        batch: Vec::new(),
        batch_bytes: 0,
        last_flush: Instant::now(),
    };

    let (tx, mut rx) = mpsc::unbounded_channel();
    let started_step = match &ctx.containers {
        Some(c) if ctx.step.kind == StepKind::Clone => match checked_commit(&ctx.clone.commit) {
            Ok(_) => c
                .engine
                .start_clone(&c.resources, &ctx.step, &ctx.clone, tx)
                .await
                .map(Handle::Container),
            Err(e) => Err(e),
        },
        // The compiler's environment plus the workspace path; image, network and the
        // trusted options are the backend's.
        Some(c) => c
            .engine
            .start(&c.resources, &ctx.step, &ctx.step.environment, tx)
            .await
            .map(Handle::Container),
        None => start_process(&ctx, tx).map(Handle::Process),
    };
    let mut proc = match started_step {
        Ok(p) => p,
        Err(error) => {
            shipper.push(0, 0, error.clone());
            shipper.flush().await;
            return finish(&ctx, started, status::FAILURE, 1, error).await;
        }
    };

    if ctx.step.detach {
        // Detached steps run beside the others until the workflow ends.
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let _ = ctx.detached.send(proc);
        return finish(&ctx, started, status::SUCCESS, 0, String::new()).await;
    }

    let mut cancel = ctx.cancel.clone();
    let mut ticker = tokio::time::interval(FLUSH_EVERY);
    let mut killed_reason: Option<&str> = None;
    let exit = loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some((time, text)) => {
                    shipper.push(time, 0, text);
                    if shipper.due() {
                        shipper.take_waiting(&mut rx);
                        shipper.flush().await;
                    }
                }
                None => break proc.wait().await,
            },
            _ = ticker.tick() => {
                if shipper.due() {
                    shipper.flush().await;
                }
            }
            changed = cancel.changed(), if killed_reason.is_none() => {
                if changed.is_ok() && *cancel.borrow() {
                    killed_reason = Some("canceled");
                    proc.kill();
                }
            }
            _ = tokio::time::sleep_until(ctx.deadline.into()), if killed_reason.is_none() => {
                killed_reason = Some("timeout");
                shipper.push(0, 0, "woodlark: the repository's timeout was reached; killing the step".into());
                proc.kill();
            }
        }
    };
    // Output may still be buffered after the process ended (sent in bounded batches).
    loop {
        shipper.take_waiting(&mut rx);
        if !shipper.full() {
            break;
        }
        shipper.flush().await;
    }
    let (state, code, error) = match (exit, killed_reason) {
        (_, Some("canceled")) => (status::KILLED, 137, String::new()),
        (_, Some(_)) => (status::FAILURE, 137, "timeout exceeded".to_string()),
        (Exit::Code(0), None) => (status::SUCCESS, 0, String::new()),
        (Exit::Code(c), None) => (status::FAILURE, i64::from(c), String::new()),
        (Exit::Killed, None) => (status::KILLED, 137, "killed by a signal".to_string()),
        (Exit::StartFailed(e), None) => (status::FAILURE, 1, e),
    };
    shipper.flush().await;
    finish(&ctx, started, state, code, error).await
}

/// The environment of the host clone (local backend): fixed, whatever the step's payload
/// says. Git reads configuration and commands from its environment (`GIT_CONFIG_*`,
/// `GIT_SSH_COMMAND`, `core.fsmonitor` through `GIT_CONFIG_PARAMETERS`), so nothing of a
/// pipeline's or a person's choosing may reach this process.
fn host_clone_env(home: &Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("HOME".to_string(), home.display().to_string()),
        ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
        ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
        // No `ext::` or `fd::` transports, whatever a clone URL says.
        (
            "GIT_ALLOW_PROTOCOL".to_string(),
            "file:git:http:https:ssh".to_string(),
        ),
    ])
}

/// A commit id as forges give it (hex): anything else could read as an option to git.
fn checked_commit(commit: &str) -> Result<&str, String> {
    let ok = (4..=64).contains(&commit.len()) && commit.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(commit)
    } else {
        Err(format!(
            "the commit to clone, {commit:?}, is not a commit id"
        ))
    }
}

/// Starts a step as a host process (the local backend), inside the sandbox when there is one.
fn start_process<A>(
    ctx: &StepContext<A>,
    tx: mpsc::UnboundedSender<(i64, String)>,
) -> Result<process::Running, String> {
    let (program, args) = match ctx.step.kind {
        StepKind::Clone => (
            "sh".to_string(),
            vec![
                "-e".into(),
                "-c".into(),
                format!(
                    "echo '+ git clone'\ngit clone --quiet --no-checkout -- {url} .\necho '+ git checkout {commit}'\ngit -c advice.detachedHead=false checkout --quiet {commit}\n",
                    url = shell_quote(&ctx.clone.url),
                    commit = shell_quote(checked_commit(&ctx.clone.commit)?)
                ),
            ],
        ),
        _ => process::command_for(&ctx.step)?,
    };
    let workdir = if ctx.step.directory.is_empty() {
        ctx.dir.clone()
    } else {
        ctx.dir.join(&ctx.step.directory)
    };
    if ctx.step.kind == StepKind::Clone {
        let mut env = host_clone_env(&ctx.home);
        let (program, args) = match &ctx.sandbox {
            // The clone alone sees the local repository it clones from (which may lie in a
            // covered directory, such as a `git` forge inside the data dir), and only if it is
            // one: a clone URL cannot uncover any other directory.
            Some(sandbox) => {
                let readonly: Vec<PathBuf> = local_repository(&ctx.clone.url)
                    .map(PathBuf::from)
                    .into_iter()
                    .collect();
                sandbox.wrap(&ctx.root, &readonly, &workdir, &program, &args, &mut env)
            }
            None => (program, args),
        };
        return process::spawn(&program, &args, &workdir, &env, Vec::new(), tx);
    }
    let mut env: BTreeMap<String, String> = ctx.step.environment.clone();
    env.insert("HOME".into(), ctx.home.display().to_string());
    if !ctx.step.registries.is_empty() {
        // A Docker config dir per step, so image-building steps can log in.
        let dir = ctx.home.join(".docker-steps").join(ctx.step_id.to_string());
        std::fs::create_dir_all(&dir)
            .and_then(|()| {
                woodlark_stdx::write_private(
                    &dir.join("config.json"),
                    &woodlark_pipeline::registry::docker_config(&ctx.step.registries),
                )
            })
            .map_err(|e| format!("cannot write the registry logins: {e}"))?;
        env.insert("DOCKER_CONFIG".into(), dir.display().to_string());
    }
    env.insert("CI_WORKSPACE".into(), ctx.dir.display().to_string());
    let (program, args) = match &ctx.sandbox {
        Some(sandbox) => sandbox.wrap(&ctx.root, &[], &workdir, &program, &args, &mut env),
        None => (program, args),
    };
    process::spawn(
        &program,
        &args,
        &workdir,
        &env,
        ctx.step.secrets.clone(),
        tx,
    )
}

/// The directory of a clone URL that names a repository on this machine (`file:///…` or
/// `/…`), if it is one.
pub fn local_repository(url: &str) -> Option<String> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    let dir = std::path::Path::new(path);
    (path.starts_with('/') && (dir.join("HEAD").is_file() || dir.join(".git").exists()))
        .then(|| path.to_string())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

async fn finish<A: AgentApi>(
    ctx: &StepContext<A>,
    started: i64,
    state: Status,
    code: i64,
    error: String,
) -> Outcome {
    report(
        &ctx.api,
        ctx.workflow_id,
        StepUpdate {
            step_id: ctx.step_id,
            state,
            exit_code: code,
            error,
            started,
            finished: now(),
            cancel_pipeline: state == status::FAILURE && ctx.step.failure == OnFailure::Cancel,
        },
    )
    .await;
    match state {
        status::SUCCESS => Outcome::Success,
        status::KILLED => Outcome::Killed,
        _ => Outcome::Failure {
            ignored: ctx.step.failure == OnFailure::Ignore,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records the size of every log batch; everything else is a no-op.
    #[derive(Clone, Default)]
    struct Batches(Arc<Mutex<Vec<(usize, usize)>>>);

    impl AgentApi for Batches {
        async fn next(&self, _: &AgentInfo) -> Result<Option<Work>, RunnerError> {
            Ok(None)
        }
        async fn init(&self, _: i64) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn step(&self, _: i64, _: StepUpdate) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn logs(&self, _: i64, lines: Vec<LogLine>) -> Result<(), RunnerError> {
            let bytes = lines.iter().map(|l| l.data.len()).sum();
            self.0.lock().unwrap().push((lines.len(), bytes));
            Ok(())
        }
        async fn extend(&self, _: i64) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn wait_canceled(&self, _: i64) -> Result<bool, RunnerError> {
            Ok(false)
        }
        async fn done(&self, _: i64, _: WorkflowDone) -> Result<(), RunnerError> {
            Ok(())
        }
    }

    #[test]
    fn only_commit_ids_are_cloned() {
        assert_eq!(checked_commit("0123abcDEF"), Ok("0123abcDEF"));
        assert!(checked_commit(&"a".repeat(64)).is_ok());
        for bad in [
            "",
            "abc",
            "--upload-pack=x",
            "main",
            "a b c d",
            &"a".repeat(65),
        ] {
            assert!(checked_commit(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn local_clone_urls_name_their_directory() {
        let top = tempfile::tempdir().unwrap();
        let bare = top.path().join("app.git");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let bare = bare.display().to_string();
        assert_eq!(
            local_repository(&format!("file://{bare}")),
            Some(bare.clone())
        );
        assert_eq!(local_repository(&bare), Some(bare.clone()));
        let plain = top.path().display().to_string();
        assert_eq!(local_repository(&plain), None, "not a repository");
        assert_eq!(local_repository("https://example.com/a.git"), None);
        assert_eq!(local_repository("git@example.com:a.git"), None);
        assert_eq!(local_repository("file://relative"), None);
    }

    #[tokio::test]
    async fn batches_grow_with_waiting_output_within_bounds() {
        let api = Batches::default();
        let mut shipper = LogShipper {
            api: api.clone(),
            workflow_id: 1,
            step_id: 1,
            next_line: 0,
            batch: Vec::new(),
            batch_bytes: 0,
            last_flush: Instant::now(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        // A burst: 25,000 short lines and 40 lines of 64 KiB already waiting.
        for i in 0..25_000 {
            tx.send((0, format!("line {i}"))).unwrap();
        }
        for _ in 0..40 {
            tx.send((0, "x".repeat(process::MAX_LINE_BYTES))).unwrap();
        }
        drop(tx);
        loop {
            shipper.take_waiting(&mut rx);
            if shipper.batch.is_empty() {
                break;
            }
            shipper.flush().await;
        }
        let batches = api.0.lock().unwrap().clone();
        let lines: usize = batches.iter().map(|b| b.0).sum();
        assert_eq!(lines, 25_040, "no line lost");
        assert_eq!(
            batches[0].0, MAX_BATCH_LINES,
            "the first batch takes the backlog"
        );
        for (n, bytes) in &batches {
            assert!(*n <= MAX_BATCH_LINES);
            assert!(*bytes < MAX_BATCH_BYTES + process::MAX_LINE_BYTES);
        }
        assert!(batches.len() <= 6, "{batches:?}");
    }
}
