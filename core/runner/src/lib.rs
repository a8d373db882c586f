//! The runner: takes workflows from the server and runs their steps on this machine.
//!
//! One runner serves both the embedded local agent (inside `woodlark serve`) and remote
//! agents (`woodlark agent`): it only talks to the server through [`AgentApi`], which the
//! server implements in memory and [`http::HttpAgent`] implements over the agent protocol.
//!
//! Steps run on one [`Backend`], chosen once ([`choose_backend`]): host processes
//! ([`local`], under bubblewrap by default: trusted code only) or containers ([`docker`]).
//! A workflow gets its resources from the backend (a directory, or a network and a volume):
//! the clone step checks out the pipeline's commit, then steps run in dependency order —
//! independent steps in parallel. A step runs when the workflow so far matches its
//! `when.status` (success unless a non-ignored step failed); otherwise it is skipped.
//! Cancellation (the server says so through `wait_canceled`) and the repository's timeout
//! kill the running steps. Services and `detach` steps run beside the others: running until
//! they end by themselves (their state then as any step's, without failing the workflow) or
//! the workflow is over (stopped, then success), as upstream reports them. Every step's
//! output, theirs too, goes through the same line splitting and
//! masking ([`lines`]) and is shipped in batches; the workflow's resources are removed when
//! it ends, and the runner sweeps its backend when it starts and when it stops.

pub mod backend;
pub mod cgroup;
pub mod docker;
pub mod http;
pub mod lines;
pub mod local;
pub mod outbox;
pub mod process;
pub mod protocol;
pub mod sandbox;
pub mod setting;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub use backend::{
    Backend, BackendError, BackendKind, CloneSource, Exit, Limits, Started, StepHandle, Swept,
    Workflow, WorkflowSetup,
};
use protocol::{AgentInfo, LineKind, LogLine, Netrc, StepUpdate, Work, WorkflowDone};
use woodlark_pipeline::status::Status;
use woodlark_pipeline::types::{CompiledStep, OnFailure, RunOn, StepKind};

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("server unreachable: {0}")]
    Transport(String),
    #[error("server refused: {0}")]
    Refused(String),
    /// The workflow is not this agent's (any more): its lease ran out and it went back to
    /// the queue, or it ended.
    #[error("not this agent's workflow: {0}")]
    NotHeld(String),
}

/// What a runner needs from the server. Every call may fail; reports about a workflow go
/// through its [`outbox::Outbox`], which re-sends each until the server takes it (the
/// server applies each once).
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
    /// The runner stopped the workflow before its end (its grace after a stop ran out): the
    /// server notes it in the running steps' logs and queues the workflow again at once.
    /// By default nothing is said, and the workflow waits for its lease to run out.
    fn hand_over(&self, workflow_id: i64) -> impl Future<Output = Result<(), RunnerError>> + Send {
        let _ = workflow_id;
        async { Ok(()) }
    }
}

/// Settings of a runner.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub capacity: usize,
    pub info: AgentInfo,
    /// Where steps run ([`choose_backend`]).
    pub backend: Arc<dyn Backend>,
    /// Run every workflow in this directory of the host instead of a fresh workspace
    /// (`woodlark exec`); `None` for agents.
    pub host_workspace: Option<PathBuf>,
    /// Where reports the server did not take yet go past their memory bound, and what a
    /// stopped runner could not deliver waits for its next start ([`spool_dir`]).
    pub spool: PathBuf,
    /// After a stop, how long running workflows may go on to their end; then they are
    /// stopped and handed over ([`AgentApi::hand_over`]).
    pub shutdown_grace: Duration,
}

/// The spool directory of the runner `owner` under `workdir` ("" = the system temp dir):
/// beside the workflows' directories, outside every step's sandbox.
pub fn spool_dir(workdir: &std::path::Path, owner: &str) -> PathBuf {
    let parent = if workdir.as_os_str().is_empty() {
        std::env::temp_dir()
    } else {
        workdir.to_path_buf()
    };
    parent.join(format!("woodlark-spool-{owner}"))
}

/// Where a runner's steps are to run, as the operator set it: the same shape for every
/// backend, each taking what applies to it.
#[derive(Debug, Clone)]
pub struct BackendOptions {
    pub kind: BackendKind,
    /// The runner's owner key: stable across restarts of the same server or agent, it marks
    /// what the backend creates, so a restart sweeps what a crashed run left.
    pub owner: String,
    /// Parent of per-workflow directories of the local backend ("" = the system temp dir).
    pub workdir: PathBuf,
    /// Run every step of the local backend inside this bubblewrap sandbox; `None` runs steps
    /// directly on the host (`runner.sandbox = "none"`), able to read whatever the runner's
    /// user can.
    pub sandbox: Option<sandbox::Sandbox>,
    /// Each step's resource limits: the local backend's cgroups, the docker backend's
    /// containers.
    pub limits: Limits,
    /// The image of the clone step on backends that run steps from images (docker).
    pub clone_image: String,
}

/// The backend for `options.kind`, the one place a kind becomes an implementation: `docker`
/// fails when no engine answers; `auto` falls back to the local backend with a warning. The
/// backend is swept of this owner's leftovers before it is returned, so before any work
/// starts.
pub async fn choose_backend(options: BackendOptions) -> Result<Arc<dyn Backend>, BackendError> {
    let local = || {
        local::Local::new(&options.workdir, &options.owner, options.sandbox.clone())
            .with_limits(&options.owner, options.limits)
    };
    let backend: Arc<dyn Backend> = match options.kind {
        BackendKind::Local => Arc::new(local()),
        BackendKind::Docker | BackendKind::Auto => match docker::Docker::connect(&options).await {
            Ok(engine) => Arc::new(engine),
            Err(e) if options.kind == BackendKind::Auto => {
                tracing::warn!(
                    error = %e,
                    "no Docker engine answers: steps run as HOST PROCESSES with the local backend \
                     (trusted code only); install and start Docker, or set runner.backend = \"local\" \
                     to silence this"
                );
                Arc::new(local())
            }
            Err(e) => return Err(e),
        },
    };
    match backend.step_limits() {
        Ok(limits) => tracing::info!(backend = %backend.kind(), limits, "step limits"),
        Err(why) => tracing::warn!(
            backend = %backend.kind(),
            why,
            "steps run WITHOUT memory, process or CPU limits: one step can exhaust this machine for every other workflow"
        ),
    }
    sweep(&*backend, "removed what an earlier run left behind").await;
    Ok(backend)
}

/// Sweeps `backend`, logging what went (with `done`) or why it could not.
async fn sweep(backend: &dyn Backend, done: &str) {
    match backend.sweep().await {
        Ok(swept) if !swept.is_empty() => tracing::info!(
            backend = %backend.kind(),
            removed = %swept,
            "{done}"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            backend = %backend.kind(),
            error = %e,
            "could not clean the backend up; the next start sweeps"
        ),
    }
}

/// Tells runners to stop, and waits until they have: a graceful stop of the process that
/// hosts them waits for their running workflows (within their grace) and their sweep.
#[derive(Debug)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            tx: watch::channel(false).0,
        }
    }
}

impl Shutdown {
    /// What to pass to [`run`]; the runner holds it (and its copies) until it has swept.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    /// Tells every subscribed runner to stop taking work, without waiting: their running
    /// workflows go on for the grace meanwhile.
    pub fn begin(&self) {
        self.tx.send_replace(true);
    }

    /// Tells every subscribed runner to stop and waits until all have returned from [`run`]
    /// (a subscriber that never ran returns at once when it drops its receiver).
    pub async fn stop(&self) {
        self.begin();
        self.tx.closed().await;
    }
}

/// The workflows a runner's workers are running, by id.
#[derive(Clone, Default)]
struct InFlight(Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>);

impl InFlight {
    fn set(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<i64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ids(&self) -> Vec<i64> {
        self.set().iter().copied().collect()
    }
}

/// Runs `capacity` workers until `shutdown` fires. Then no worker asks for work any more;
/// running workflows may go on to their end for [`RunnerConfig::shutdown_grace`]; those
/// still running then are stopped (their tasks dropped, their steps killed) and handed over
/// to the server to run again; and the backend is swept.
pub async fn run<A: AgentApi>(api: A, config: RunnerConfig, mut shutdown: watch::Receiver<bool>) {
    // Reports an earlier run could not deliver go first: a workflow it held may come back
    // to this runner, and must not meet its old reports then.
    // (A stop meanwhile keeps them on disk for the next start.)
    tokio::select! {
        _ = outbox::deliver_leftovers(&api, &config.spool) => {}
        _ = shutdown.wait_for(|stop| *stop) => return,
    }
    let config = Arc::new(config);
    let in_flight = InFlight::default();
    let mut workers = JoinSet::new();
    for n in 0..config.capacity.max(1) {
        let api = api.clone();
        let config = config.clone();
        let in_flight = in_flight.clone();
        let mut stop = shutdown.clone();
        workers.spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                // Checked before asking: a poll dropped halfway may still have leased a task.
                if *stop.borrow_and_update() {
                    break;
                }
                let next = tokio::select! {
                    biased;
                    _ = stop.changed() => break,
                    next = api.next(&config.info) => next,
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
                        in_flight.set().insert(id);
                        run_workflow(&api, work, &config).await;
                        in_flight.set().remove(&id);
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
    let _ = shutdown.wait_for(|stop| *stop).await;
    finish_or_hand_over(&api, &config, workers, &in_flight).await;
    sweep(&*config.backend, "removed the runner's leftovers").await;
}

/// A stopping runner's grace: waits for its workers (each ends after its workflow) for at
/// most the grace, then stops the workflows still running and hands each over, so that
/// another agent (or this one, restarted) runs it at once instead of after its lease.
async fn finish_or_hand_over<A: AgentApi>(
    api: &A,
    config: &RunnerConfig,
    mut workers: JoinSet<()>,
    in_flight: &InFlight,
) {
    let running = in_flight.ids();
    if !running.is_empty() {
        tracing::info!(
            workflows = ?running,
            grace_secs = config.shutdown_grace.as_secs(),
            "stopping: running workflows may finish within the grace"
        );
    }
    let all = async { while workers.join_next().await.is_some() {} };
    if tokio::time::timeout(config.shutdown_grace, all)
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        workflows = ?in_flight.ids(),
        "the grace is over: stopping the running workflows and handing them over"
    );
    // Dropping a workflow's task kills its steps; the sweep after removes what they left.
    // What is still in flight now was stopped (a workflow that ended meanwhile is out).
    workers.shutdown().await;
    let left = in_flight.ids();
    for id in left {
        match retry(|| api.hand_over(id)).await {
            Ok(()) => tracing::info!(workflow = id, "workflow handed over to run again"),
            Err(err) => tracing::warn!(
                workflow = id,
                %err,
                "could not hand the workflow over; it runs again when its lease runs out"
            ),
        }
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
            Err(RunnerError::Transport(e)) => {
                last = Some(RunnerError::Transport(e));
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(refused) => return Err(refused),
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
    let outbox = outbox::Outbox::open(api.clone(), id, &config.spool);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let cancel_tx = Arc::new(cancel_tx);
    // The workflow's helpers end with it, also when a stop drops it halfway.
    let mut helpers = AbortOnDrop::default();
    helpers.0.push({
        let api = api.clone();
        let cancel_tx = cancel_tx.clone();
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
    });
    // A workflow the server gave away (its lease ran out while the server did not hear
    // from us) stops here as a canceled one would.
    helpers.0.push({
        let mut given_away = outbox.given_away();
        tokio::spawn(async move {
            if given_away.wait_for(|g| *g).await.is_ok() {
                let _ = cancel_tx.send(true);
            }
        })
    });
    helpers.0.push(tokio::spawn(keep_lease(api.clone(), id)));

    let setup = WorkflowSetup {
        workflow_id: id,
        clone: CloneSource {
            url: work.clone_url.clone(),
            commit: work.commit.clone(),
            git_ref: work.git_ref.clone(),
            netrc: work.netrc.clone(),
        },
        host_workspace: config.host_workspace.clone(),
    };
    let result = match config.backend.create_workflow(&setup).await {
        Ok(workflow) => {
            let workflow: Arc<dyn Workflow> = Arc::from(workflow);
            let result = execute(&outbox.reporter(), &work, workflow.clone(), cancel_rx).await;
            // The one removal path: after the steps (detached ones stopped), whatever ended
            // them; what cannot go now is the next sweep's.
            if let Err(e) = workflow.remove().await {
                tracing::warn!(workflow = id, error = %e, "could not remove the workflow's resources");
            }
            result
        }
        Err(e) => Err(WorkflowError::Backend(e)),
    };
    drop(helpers);
    let done = match result {
        Ok(state) => WorkflowDone {
            state,
            error: String::new(),
        },
        Err(error) => WorkflowDone {
            state: Status::Error,
            error: error.to_string(),
        },
    };
    outbox.finish(done).await;
}

/// Tasks that end when this is dropped.
#[derive(Default)]
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Extends the workflow's lease every 20 s while it runs; after a failed try, every second
/// until the server answers, so the lease runs from the first contact after an outage.
async fn keep_lease<A: AgentApi>(api: A, id: i64) {
    let mut wait = Duration::from_secs(20);
    loop {
        tokio::time::sleep(wait).await;
        wait = match api.extend(id).await {
            Err(RunnerError::Transport(_)) => Duration::from_secs(1),
            _ => Duration::from_secs(20),
        };
    }
}

/// Why a workflow could not run (its steps' failures are states, not errors).
#[derive(Debug, thiserror::Error)]
enum WorkflowError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("the workflow's steps and their ids do not match")]
    StepIds,
    #[error("a step task failed: {0}")]
    StepTask(#[from] tokio::task::JoinError),
}

/// Runs the steps; returns the workflow's final state, or an error that prevented running.
async fn execute(
    reports: &outbox::Reporter,
    work: &Work,
    workflow: Arc<dyn Workflow>,
    cancel: watch::Receiver<bool>,
) -> Result<Status, WorkflowError> {
    let steps = &work.workflow.steps;
    if steps.len() != work.steps.len() {
        return Err(WorkflowError::StepIds);
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
    // Detached steps and services run beside the others until they end or the workflow is
    // over; each is followed by a task of its own, which `over` tells to stop it.
    let detached = Arc::new(std::sync::Mutex::new(JoinSet::new()));
    let (over_tx, over) = watch::channel(false);

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
            let so_far = if failed {
                RunOn::Failure
            } else {
                RunOn::Success
            };
            let runs = if step.when_status.is_empty() {
                so_far == RunOn::Success
            } else {
                step.when_status.contains(&so_far)
            };
            if canceled || !runs {
                let state = if canceled {
                    Status::Canceled
                } else {
                    Status::Skipped
                };
                reports.step(StepUpdate {
                    step_id: work.steps[i].id,
                    state,
                    exit_code: 0,
                    error: String::new(),
                    started: 0,
                    finished: 0,
                    cancel_pipeline: false,
                    seq: 0,
                });
                outcomes[i] = Some(Outcome::Skipped);
                continue;
            }
            let ctx = StepContext {
                reports: reports.clone(),
                step_id: work.steps[i].id,
                first_line: work
                    .log_offsets
                    .get(&work.steps[i].id)
                    .copied()
                    .unwrap_or(0),
                secrets: masked_values(step, work.netrc.as_ref()),
                max_log_bytes: work.max_log_bytes,
                step: step.clone(),
                workflow: workflow.clone(),
                cancel: cancel.clone(),
                deadline,
                detached: Some(Detached {
                    tasks: detached.clone(),
                    over: over.clone(),
                }),
            };
            running.spawn(async move { (i, run_step(ctx).await) });
        }
        if outcomes.iter().all(Option::is_some) {
            break;
        }
        match running.join_next().await {
            Some(Ok((i, outcome))) => outcomes[i] = Some(outcome),
            Some(Err(e)) => return Err(WorkflowError::StepTask(e)),
            None => {
                // Nothing runs and nothing can start: dependencies on unknown steps.
                for (i, o) in outcomes.iter_mut().enumerate() {
                    if o.is_none() {
                        reports.step(StepUpdate {
                            step_id: work.steps[i].id,
                            state: Status::Skipped,
                            exit_code: 0,
                            error: "dependencies cannot be met".into(),
                            started: 0,
                            finished: 0,
                            cancel_pipeline: false,
                            seq: 0,
                        });
                        *o = Some(Outcome::Skipped);
                    }
                }
            }
        }
    }
    // The workflow is over: detached steps are stopped, and their last lines and states
    // reported before the workflow's end is.
    let _ = over_tx.send(true);
    let mut followers = std::mem::take(&mut *detached.lock().unwrap_or_else(|p| p.into_inner()));
    while followers.join_next().await.is_some() {}
    let canceled = *cancel.borrow();
    let any_killed = outcomes.iter().any(|o| matches!(o, Some(Outcome::Killed)));
    let failed = outcomes
        .iter()
        .any(|o| matches!(o, Some(Outcome::Failure { ignored: false })));
    Ok(if canceled || any_killed {
        Status::Killed
    } else if failed {
        Status::Failure
    } else {
        Status::Success
    })
}

/// The values masked in a step's output: its secrets, and for the clone the password it
/// clones with.
fn masked_values(step: &CompiledStep, netrc: Option<&Netrc>) -> Vec<String> {
    let mut secrets = step.secrets.clone();
    if step.kind == StepKind::Clone {
        secrets.extend(netrc.map(|n| n.password.clone()));
    }
    secrets
}

struct StepContext {
    /// Where the step's states and lines go.
    reports: outbox::Reporter,
    step_id: i64,
    first_line: i64,
    /// Bytes of output kept ([`Work::max_log_bytes`]; 0: no limit).
    max_log_bytes: u64,
    step: CompiledStep,
    /// What to mask in the step's output.
    secrets: Vec<String>,
    /// Where the step runs.
    workflow: Arc<dyn Workflow>,
    cancel: watch::Receiver<bool>,
    deadline: Instant,
    /// Taken by a detached step's follower, so the follower (kept in the set) does not
    /// keep the set alive: a workflow task that is aborted takes its followers with it.
    detached: Option<Detached>,
}

/// Where a detached step's follower goes, and what tells it the workflow is over.
#[derive(Clone)]
struct Detached {
    tasks: Arc<std::sync::Mutex<JoinSet<()>>>,
    over: watch::Receiver<bool>,
}

/// Why the runner killed a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KillReason {
    /// The workflow was canceled.
    Canceled,
    /// The repository's timeout was reached.
    Timeout,
}

/// A step's state, exit code and error from how it ended and why we killed it, if we did.
fn step_end(exit: Exit, killed: Option<KillReason>) -> (Status, i64, String) {
    match (exit, killed) {
        (_, Some(KillReason::Canceled)) => (Status::Killed, 137, String::new()),
        (_, Some(KillReason::Timeout)) => (Status::Failure, 137, "timeout exceeded".to_string()),
        (Exit::Code(0), None) => (Status::Success, 0, String::new()),
        (Exit::Code(c), None) => (Status::Failure, i64::from(c), String::new()),
        (Exit::Killed, None) => (Status::Killed, 137, "killed by a signal".to_string()),
        (Exit::Lost(e), None) => (Status::Failure, 1, e.to_string()),
    }
}

/// Sends a step's lines in batches (at most every 20 ms, or at 200 lines), numbering them:
/// live log readers see a line a few milliseconds after it was written.
struct LogShipper {
    reports: outbox::Reporter,
    step_id: i64,
    next_line: i64,
    batch: Vec<LogLine>,
    batch_bytes: usize,
    last_flush: Instant,
    /// Bytes of output the step may keep (0: no limit), and how many it kept so far (each
    /// line with its newline).
    limit: u64,
    kept: u64,
}

impl LogShipper {
    fn new(ctx: &StepContext) -> LogShipper {
        LogShipper {
            reports: ctx.reports.clone(),
            step_id: ctx.step_id,
            next_line: ctx.first_line,
            batch: Vec::new(),
            batch_bytes: 0,
            last_flush: Instant::now(),
            limit: ctx.max_log_bytes,
            kept: 0,
        }
    }

    /// Adds a line of the step's output; past the limit, one last line says the rest is not
    /// kept, and later lines are dropped (the step goes on: its output is still read).
    fn push(&mut self, time: i64, kind: LineKind, data: String) {
        if self.limit > 0 {
            if self.kept > self.limit {
                return;
            }
            self.kept += data.len() as u64 + 1;
            if self.kept > self.limit {
                let note = format!(
                    "[woodlark] this step's log reached its limit of {} bytes (pipeline.max_step_log_bytes); later output is not kept",
                    self.limit
                );
                self.add(time, kind, note);
                return;
            }
        }
        self.add(time, kind, data);
    }

    fn add(&mut self, time: i64, kind: LineKind, data: String) {
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
                Ok((time, text)) => self.push(time, LineKind::Stdout, text),
                Err(_) => break,
            }
        }
    }

    /// Hands the batch to the outbox (which sends consecutive batches together while the
    /// server is busy or away).
    fn flush(&mut self) {
        self.last_flush = Instant::now();
        if self.batch.is_empty() {
            return;
        }
        self.batch_bytes = 0;
        self.reports.logs(std::mem::take(&mut self.batch));
    }
}

async fn run_step(ctx: StepContext) -> Outcome {
    let started = now();
    ctx.reports.step(StepUpdate {
        step_id: ctx.step_id,
        state: Status::Running,
        exit_code: 0,
        error: String::new(),
        started,
        finished: 0,
        cancel_pipeline: false,
        seq: 0,
    });
    let mut shipper = LogShipper::new(&ctx);

    let Started {
        handle: proc,
        output,
    } = match ctx.workflow.start(ctx.step_id, &ctx.step).await {
        Ok(started) => started,
        Err(error) => {
            let error = error.to_string();
            shipper.push(0, LineKind::Stdout, error.clone());
            shipper.flush();
            return finish(&ctx, started, Status::Failure, 1, error);
        }
    };

    if ctx.step.detach {
        // As upstream: a detached step or service is running while the workflow goes on; its
        // log is kept like any step's, and its end (by itself, or stopped when the workflow
        // is over) is reported then. It never holds up the steps after it, and its failure
        // does not fail the workflow.
        let mut ctx = ctx;
        let Some(Detached { tasks, over }) = ctx.detached.take() else {
            return finish(&ctx, started, Status::Failure, 1, "no detached set".into());
        };
        // The set owns the follower: it is awaited when the workflow is over.
        tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move {
                let (state, code, error) =
                    follow(&ctx, proc, output, &mut shipper, Some(over)).await;
                finish(&ctx, started, state, code, error);
            });
        return Outcome::Success;
    }
    let (state, code, error) = follow(&ctx, proc, output, &mut shipper, None).await;
    finish(&ctx, started, state, code, error)
}

/// Follows a started step to its end: ships its output as it comes, kills it when the
/// workflow is canceled or the repository's timeout is reached, and for a detached step
/// stops it once `over` says the workflow is over (its state is then success: it ran as
/// long as it was needed). Returns the step's state, exit code and error.
async fn follow(
    ctx: &StepContext,
    mut proc: Box<dyn StepHandle>,
    output: lines::Output,
    shipper: &mut LogShipper,
    mut over: Option<watch::Receiver<bool>>,
) -> (Status, i64, String) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(lines::pump(output, ctx.secrets.clone(), tx));

    let mut cancel = ctx.cancel.clone();
    let mut ticker = tokio::time::interval(FLUSH_EVERY);
    let mut killed_reason: Option<KillReason> = None;
    let mut stopped = false;
    let exit = loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some((time, text)) => {
                    shipper.push(time, LineKind::Stdout, text);
                    if shipper.due() {
                        shipper.take_waiting(&mut rx);
                        shipper.flush();
                    }
                }
                None => break proc.wait().await,
            },
            _ = ticker.tick() => {
                if shipper.due() {
                    shipper.flush();
                }
            }
            ended = wait_over(&mut over), if !stopped && killed_reason.is_none() => {
                if ended {
                    stopped = true;
                    proc.stop().await;
                }
            }
            changed = cancel.changed(), if killed_reason.is_none() && !stopped => {
                if changed.is_ok() && *cancel.borrow() {
                    killed_reason = Some(KillReason::Canceled);
                    proc.kill();
                }
            }
            _ = tokio::time::sleep_until(ctx.deadline.into()), if killed_reason.is_none() && !stopped => {
                killed_reason = Some(KillReason::Timeout);
                shipper.push(0, LineKind::Stdout, "woodlark: the repository's timeout was reached; killing the step".into());
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
        shipper.flush();
    }
    shipper.flush();
    if stopped && killed_reason.is_none() {
        return (Status::Success, 0, String::new());
    }
    step_end(exit, killed_reason)
}

/// Resolves to true once `over` (when there is one) turns true; never without one.
async fn wait_over(over: &mut Option<watch::Receiver<bool>>) -> bool {
    match over {
        Some(rx) => rx.wait_for(|v| *v).await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The directory of a clone URL that names a repository on this machine (`file:///…` or
/// `/…`), if it is one.
pub fn local_repository(url: &str) -> Option<String> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    let dir = std::path::Path::new(path);
    (path.starts_with('/') && (dir.join("HEAD").is_file() || dir.join(".git").exists()))
        .then(|| path.to_string())
}

fn finish(ctx: &StepContext, started: i64, state: Status, code: i64, error: String) -> Outcome {
    ctx.reports.step(StepUpdate {
        step_id: ctx.step_id,
        state,
        exit_code: code,
        error,
        started,
        finished: now(),
        cancel_pipeline: state == Status::Failure && ctx.step.failure == OnFailure::Cancel,
        seq: 0,
    });
    match state {
        Status::Success => Outcome::Success,
        Status::Killed => Outcome::Killed,
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
            tokio::time::sleep(Duration::from_millis(10)).await;
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

    #[tokio::test]
    async fn a_stopped_runner_sweeps_its_backend_and_the_stop_waits_for_it() {
        // Nobody subscribed: the stop returns at once.
        Shutdown::default().stop().await;

        let top = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = Arc::new(local::Local::new(top.path(), "o", None));
        // What a workflow aborted by a stop would leave.
        backend
            .create_workflow(&WorkflowSetup::default())
            .await
            .unwrap();
        assert_eq!(std::fs::read_dir(top.path()).unwrap().count(), 1);
        let shutdown = Shutdown::default();
        let config = RunnerConfig {
            capacity: 2,
            info: AgentInfo::default(),
            backend,
            host_workspace: None,
            spool: top.path().join("spool"),
            shutdown_grace: Duration::from_secs(5),
        };
        let runner = tokio::spawn(run(Batches::default(), config, shutdown.subscribe()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        shutdown.stop().await;
        assert_eq!(
            std::fs::read_dir(top.path()).unwrap().count(),
            0,
            "swept before the stop returned"
        );
        runner.await.unwrap();
    }

    /// Hands out one workflow (one step, `sleep`), then nothing; records how it ended.
    #[derive(Clone, Default)]
    struct OneWorkflow {
        work: Arc<Mutex<Option<Work>>>,
        ended: Arc<Mutex<Vec<String>>>,
    }

    impl AgentApi for OneWorkflow {
        async fn next(&self, _: &AgentInfo) -> Result<Option<Work>, RunnerError> {
            let work = self.work.lock().unwrap().take();
            if work.is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(work)
        }
        async fn init(&self, _: i64) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn step(&self, _: i64, _: StepUpdate) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn logs(&self, _: i64, _: Vec<LogLine>) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn extend(&self, _: i64) -> Result<(), RunnerError> {
            Ok(())
        }
        async fn wait_canceled(&self, _: i64) -> Result<bool, RunnerError> {
            std::future::pending().await
        }
        async fn done(&self, id: i64, done: WorkflowDone) -> Result<(), RunnerError> {
            let ended = format!("{id} done: {}", done.state.as_str());
            self.ended.lock().unwrap().push(ended);
            Ok(())
        }
        async fn hand_over(&self, id: i64) -> Result<(), RunnerError> {
            self.ended.lock().unwrap().push(format!("{id} handed over"));
            Ok(())
        }
    }

    /// Runs a workflow whose one step sleeps `sleep`, stops the runner once it runs and
    /// returns how the workflow ended and how long the stop took.
    async fn stopped_while_sleeping(sleep: &str, grace: Duration) -> (Vec<String>, Duration) {
        let top = tempfile::tempdir().unwrap();
        let step = CompiledStep {
            name: "nap".into(),
            image: "sh".into(),
            commands: vec![format!("sleep {sleep}")],
            ..CompiledStep::default()
        };
        let work = Work {
            workflow_id: 7,
            pipeline_id: 1,
            pipeline_number: 1,
            repo: "a/b".into(),
            timeout_minutes: 10,
            clone_url: String::new(),
            commit: String::new(),
            git_ref: String::new(),
            netrc: None,
            workflow: woodlark_pipeline::types::CompiledWorkflow {
                name: "w".into(),
                skip_clone: true,
                steps: vec![step],
                ..Default::default()
            },
            steps: vec![protocol::StepRef {
                id: 70,
                uuid: String::new(),
                name: "nap".into(),
            }],
            log_offsets: Default::default(),
            max_log_bytes: 0,
        };
        let api = OneWorkflow::default();
        *api.work.lock().unwrap() = Some(work);
        let config = RunnerConfig {
            capacity: 2,
            info: AgentInfo::default(),
            backend: Arc::new(local::Local::new(top.path(), "o", None)),
            host_workspace: None,
            spool: top.path().join("spool"),
            shutdown_grace: grace,
        };
        let shutdown = Shutdown::default();
        let runner = tokio::spawn(run(api.clone(), config, shutdown.subscribe()));
        while api.work.lock().unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        shutdown.stop().await;
        let took = started.elapsed();
        runner.await.unwrap();
        let ended = api.ended.lock().unwrap().clone();
        (ended, took)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopping_runner_lets_a_workflow_end_within_its_grace() {
        let (ended, took) = stopped_while_sleeping("1", Duration::from_secs(10)).await;
        assert_eq!(ended, ["7 done: success"]);
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopping_runner_hands_over_a_workflow_longer_than_its_grace() {
        let (ended, took) = stopped_while_sleeping("60", Duration::from_millis(500)).await;
        assert_eq!(ended, ["7 handed over"]);
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn how_a_step_ended_becomes_its_state() {
        let end = |exit, killed| {
            let (state, code, error) = step_end(exit, killed);
            (state, code, error)
        };
        assert_eq!(
            end(Exit::Code(0), None),
            (Status::Success, 0, String::new())
        );
        assert_eq!(
            end(Exit::Code(3), None),
            (Status::Failure, 3, String::new())
        );
        assert_eq!(
            end(Exit::Killed, None),
            (Status::Killed, 137, "killed by a signal".to_string())
        );
        assert_eq!(
            end(Exit::Lost(BackendError::LostContainer), None),
            (Status::Failure, 1, "docker: lost the container".to_string())
        );
        // Our own kill decides, whatever the exit says.
        assert_eq!(
            end(Exit::Code(0), Some(KillReason::Canceled)),
            (Status::Killed, 137, String::new())
        );
        assert_eq!(
            end(Exit::Killed, Some(KillReason::Timeout)),
            (Status::Failure, 137, "timeout exceeded".to_string())
        );
    }

    #[test]
    fn the_clone_masks_its_password() {
        let netrc = Netrc {
            machine: "m".into(),
            login: "l".into(),
            password: "pw-123".into(),
        };
        let clone = CompiledStep {
            kind: StepKind::Clone,
            secrets: vec!["s".into()],
            ..CompiledStep::default()
        };
        assert_eq!(masked_values(&clone, Some(&netrc)), ["s", "pw-123"]);
        let step = CompiledStep {
            secrets: vec!["s".into()],
            ..CompiledStep::default()
        };
        assert_eq!(masked_values(&step, Some(&netrc)), ["s"]);
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

    fn shipper_for(outbox: &outbox::Outbox, limit: u64) -> LogShipper {
        LogShipper {
            reports: outbox.reporter(),
            step_id: 1,
            next_line: 0,
            batch: Vec::new(),
            batch_bytes: 0,
            last_flush: Instant::now(),
            limit,
            kept: 0,
        }
    }

    #[tokio::test]
    async fn a_log_past_its_limit_ends_with_a_line_saying_so() {
        let spool = tempfile::tempdir().unwrap();
        let outbox = outbox::Outbox::open(Batches::default(), 1, spool.path());
        let mut shipper = shipper_for(&outbox, 100);
        for i in 0..50 {
            // 10 bytes a line with its newline: ten lines fit.
            shipper.push(0, LineKind::Stdout, format!("line {i:04}"));
        }
        let kept: Vec<&str> = shipper.batch.iter().map(|l| l.data.as_str()).collect();
        assert_eq!(kept.len(), 11, "{kept:?}");
        assert_eq!(kept[9], "line 0009");
        assert!(
            kept[10].contains("reached its limit of 100 bytes"),
            "{kept:?}"
        );
        // Numbered without a gap; nothing comes after the note.
        assert_eq!(shipper.batch[10].line, 10);
        shipper.push(0, LineKind::Stdout, "late".into());
        assert_eq!(shipper.batch.len(), 11);
        // No limit: everything is kept.
        let mut open = shipper_for(&outbox, 0);
        for i in 0..50 {
            open.push(0, LineKind::Stdout, format!("line {i:04}"));
        }
        assert_eq!(open.batch.len(), 50);
    }

    #[tokio::test]
    async fn batches_grow_with_waiting_output_within_bounds() {
        let api = Batches::default();
        let spool = tempfile::tempdir().unwrap();
        let outbox = outbox::Outbox::open(api.clone(), 1, spool.path());
        let mut shipper = shipper_for(&outbox, 0);
        let (tx, mut rx) = mpsc::unbounded_channel();
        // A burst: 25,000 short lines and 40 lines of 64 KiB already waiting.
        for i in 0..25_000 {
            tx.send((0, format!("line {i}"))).unwrap();
        }
        for _ in 0..40 {
            tx.send((0, "x".repeat(lines::MAX_LINE_BYTES))).unwrap();
        }
        drop(tx);
        loop {
            shipper.take_waiting(&mut rx);
            if shipper.batch.is_empty() {
                break;
            }
            shipper.flush();
        }
        // The outbox sends the waiting batches together, within the same bounds.
        outbox.delivered().await;
        let batches = api.0.lock().unwrap().clone();
        let lines: usize = batches.iter().map(|b| b.0).sum();
        assert_eq!(lines, 25_040, "no line lost");
        assert_eq!(
            batches[0].0, MAX_BATCH_LINES,
            "the first batch takes the backlog"
        );
        for (n, bytes) in &batches {
            assert!(*n <= MAX_BATCH_LINES);
            assert!(*bytes < MAX_BATCH_BYTES + lines::MAX_LINE_BYTES);
        }
        assert!(batches.len() <= 6, "{batches:?}");
    }
}
