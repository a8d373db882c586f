//! The queue service: hands workflows to agents and turns their reports into state.
//!
//! The queue itself is the `tasks` table (it survives restarts); this service adds what
//! must be live: agents long-polling for work (woken by a `Notify` when a task becomes
//! pending), the pause switch, cancellation waiters, lease expiry, and agents' contact
//! times (kept in memory and written every 30 s, not on every log batch).
//!
//! Every report from an agent is checked against the lease: only the agent holding a
//! workflow's task may change it. Status roll-up follows upstream: a workflow ends with the
//! state its runner reports; when no workflow of a pipeline is left to run, the pipeline
//! gets the merge of its workflows' states.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::store::Tx;
use tokio::sync::Notify;

use crate::app::Ctx;
use crate::http::ApiError;
use crate::pipeline::labels;
use crate::pipeline::status::{self, *};
use crate::pipeline::types::CompiledWorkflow;
use crate::runner::protocol::{AgentInfo, LogLine, StepRef, StepUpdate, Work, WorkflowDone};
use crate::store::agents::{self, AgentRow};
use crate::store::logs::{self, NewLine};
use crate::store::pipelines::{self, CancelInfo, PipelineRow};
use crate::store::tasks::{self, Task};
use crate::store::{StoreError, StoreResult, now_unix, repos};

/// How long a lease lasts without `extend`.
pub const LEASE_SECS: i64 = 60;
/// How long `next` and `canceled` long polls wait before answering "nothing".
pub const LONG_POLL: Duration = Duration::from_secs(25);
/// Purpose under which compiled workflows are sealed.
pub const SEAL_PAYLOAD: &str = "workflow-payload";

#[derive(Default)]
pub struct Queue {
    paused: AtomicBool,
    /// Signalled when a task may have become pending (new pipeline, finished dependency,
    /// expired lease, resume).
    work: Notify,
    /// Signalled on every workflow or pipeline state change (cancel waiters, idle waiters).
    changes: Notify,
    /// agent id → (last contact, last work), flushed periodically.
    contact: Mutex<HashMap<i64, (i64, i64)>>,
    /// Agent workers waiting in [`Queue::next`] right now: upstream's `worker_count`, the
    /// "free" slots of `/queue/info`.
    polling: AtomicUsize,
}

/// Who is asking: the agent record and the labels it runs with.
#[derive(Debug, Clone)]
pub struct AgentIdent {
    pub id: i64,
    pub org_id: i64,
    pub no_schedule: bool,
    pub labels: BTreeMap<String, String>,
}

impl AgentIdent {
    /// The labels an agent matches with: what it reports plus the server-forced `org-id`.
    pub fn new(row: &AgentRow, info: &AgentInfo) -> AgentIdent {
        let mut labels = info.labels.clone();
        labels.extend(row.agent.custom_labels.clone());
        labels.insert("platform".into(), info.platform.clone());
        labels.insert("backend".into(), info.backend.clone());
        labels.entry("repo".into()).or_insert_with(|| "*".into());
        let org = row.agent.org_id;
        labels.insert(
            "org-id".into(),
            if org > 0 { org.to_string() } else { "*".into() },
        );
        AgentIdent {
            id: row.agent.id,
            org_id: org,
            no_schedule: row.agent.no_schedule,
            labels,
        }
    }
}

fn refused(message: impl Into<String>) -> ApiError {
    ApiError::new(crate::http::StatusCode::CONFLICT, message)
}

impl Queue {
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
        self.work.notify_waiters();
    }

    /// Wakes agents waiting for work.
    pub fn wake(&self) {
        self.work.notify_waiters();
        self.changes.notify_waiters();
    }

    fn touch(&self, agent: i64, worked: bool) {
        let now = now_unix();
        let mut map = self.contact.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(agent).or_insert((now, 0));
        entry.0 = now;
        if worked {
            entry.1 = now;
        }
    }

    /// Writes the contact times gathered since the last flush.
    pub async fn flush_contact(&self, ctx: &Ctx) -> StoreResult<()> {
        let batch: Vec<(i64, (i64, i64))> = {
            let mut map = self.contact.lock().unwrap_or_else(|p| p.into_inner());
            map.drain().collect()
        };
        if batch.is_empty() {
            return Ok(());
        }
        ctx.store
            .write(move |c| {
                for (id, (contact, work)) in &batch {
                    agents::record_contact(c, *id, *contact, *work)?;
                }
                Ok(())
            })
            .await
    }

    /// Workers waiting for work now (idle capacity of the agents in contact).
    pub fn free_workers(&self) -> usize {
        self.polling.load(Ordering::SeqCst)
    }

    /// Waits (at most [`LONG_POLL`]) for a workflow this agent may run and leases it.
    pub async fn next(&self, ctx: &Ctx, agent: &AgentIdent) -> Result<Option<Work>, ApiError> {
        self.touch(agent.id, false);
        /// Counts the caller among the waiting workers until it returns (or is dropped).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.polling.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.polling);
        let deadline = tokio::time::Instant::now() + LONG_POLL;
        loop {
            let notified = self.work.notified();
            if !self.paused()
                && !agent.no_schedule
                && let Some(work) = self.try_claim(ctx, agent).await?
            {
                self.touch(agent.id, true);
                return Ok(Some(work));
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
                // Re-check now and then in case a wake-up was missed.
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
    }

    async fn try_claim(&self, ctx: &Ctx, agent: &AgentIdent) -> Result<Option<Work>, ApiError> {
        let ident = agent.clone();
        let claimed = ctx
            .store
            .write(move |c| {
                // The record decides, not what the agent's poll started with: an agent paused
                // (`no_schedule`) or deleted meanwhile takes nothing.
                if agents::schedulable(c, ident.id)? != Some(true) {
                    return Ok(None);
                }
                let now = now_unix();
                for task in tasks::list(c, Some("pending"))? {
                    if labels::score(&task.labels, &ident.labels).is_none() {
                        continue;
                    }
                    if tasks::lease(c, task.id, ident.id, now + LEASE_SECS)? {
                        pipelines::update_workflow(c, task.id, |w| w.agent_id = ident.id)?;
                        return Ok(Some(task));
                    }
                }
                Ok(None)
            })
            .await?;
        let Some(task) = claimed else {
            return Ok(None);
        };
        match self.work_for(ctx, &task).await {
            Ok(work) => Ok(Some(work)),
            Err(err) => {
                // The task cannot be run (its repository or payload is gone): end it as an error.
                tracing::warn!(workflow = task.id, error = %err.message, "cannot hand out a workflow");
                self.finish_workflow(ctx, task.id, ERROR, &err.message)
                    .await?;
                Ok(None)
            }
        }
    }

    /// Everything an agent needs to run a leased task.
    async fn work_for(&self, ctx: &Ctx, task: &Task) -> Result<Work, ApiError> {
        let (wf_id, pipeline_id, repo_id) = (task.id, task.pipeline_id, task.repo_id);
        let (sealed, wf, row, repo) = ctx
            .store
            .read(move |c| {
                Ok((
                    pipelines::workflow_payload(c, wf_id)?,
                    pipelines::workflow(c, wf_id)?,
                    pipelines::by_id(c, pipeline_id)?,
                    repos::by_id(c, repo_id)?,
                ))
            })
            .await?;
        let payload = ctx
            .seal
            .open(SEAL_PAYLOAD, &sealed)
            .map_err(ApiError::internal)?;
        let workflow: CompiledWorkflow =
            serde_json::from_slice(&payload).map_err(ApiError::internal)?;
        let steps: Vec<StepRef> = wf
            .children
            .iter()
            .map(|s| StepRef {
                id: s.id,
                uuid: s.uuid.clone(),
                name: s.name.clone(),
            })
            .collect();
        let ids: Vec<i64> = steps.iter().map(|s| s.id).collect();
        let offsets = ctx
            .logs
            .read(move |c| {
                let mut out = BTreeMap::new();
                for id in ids {
                    let next = logs::next_line(c, id)?;
                    if next > 0 {
                        out.insert(id, next);
                    }
                }
                Ok(out)
            })
            .await?;
        Ok(Work {
            workflow_id: wf_id,
            pipeline_id,
            pipeline_number: row.pipeline.number,
            repo: repo.repo.full_name.clone(),
            timeout_minutes: repo.repo.timeout,
            clone_url: repo.repo.clone_url.clone(),
            commit: row.pipeline.commit.clone(),
            git_ref: row.pipeline.git_ref.clone(),
            netrc: self.netrc_for(ctx, &repo.repo).await,
            workflow,
            steps,
            log_offsets: offsets,
        })
    }

    /// Clone credentials for a repository of a plugin-served forge: its API token (the
    /// forge's `oauth_client_secret`) for the clone URL's host. The git forge needs none.
    async fn netrc_for(
        &self,
        ctx: &Ctx,
        repo: &crate::store::repos::Repo,
    ) -> Option<crate::runner::protocol::Netrc> {
        let forge_id = repo.forge_id;
        let row = ctx
            .store
            .read(move |c| crate::store::forges::by_id(c, forge_id))
            .await
            .ok()?;
        if row.forge.kind == "git" {
            return None;
        }
        let token = crate::modules::ci::forges::api_token(&ctx.seal, &row)
            .ok()
            .filter(|t| !t.is_empty())?;
        let host = repo
            .clone_url
            .split("://")
            .nth(1)?
            .split(['/', '@'])
            .next()?
            .split(':')
            .next()?
            .to_string();
        Some(crate::runner::protocol::Netrc {
            machine: host,
            login: "oauth2".into(),
            password: token,
        })
    }

    /// Checks that `agent` holds the lease of workflow `id`.
    fn holds(conn: &Tx, id: i64, agent: i64) -> StoreResult<bool> {
        Ok(tasks::get(conn, id)?.is_some_and(|t| t.state == "running" && t.agent_id == agent))
    }

    /// The runner starts the workflow: workflow and pipeline become `running`.
    pub async fn init(&self, ctx: &Ctx, agent: i64, id: i64) -> Result<(), ApiError> {
        self.touch(agent, true);
        let ok = ctx
            .store
            .write(move |c| {
                if !Self::holds(c, id, agent)? {
                    return Ok(false);
                }
                let now = now_unix();
                let wf = pipelines::update_workflow(c, id, |w| {
                    w.state = RUNNING.into();
                    if w.started == 0 {
                        w.started = now;
                    }
                })?;
                pipelines::update(c, wf.pipeline_id, |p| {
                    if p.status == PENDING {
                        p.status = RUNNING.into();
                    }
                    if p.started == 0 {
                        p.started = now;
                    }
                })?;
                Ok(true)
            })
            .await?;
        self.changes.notify_waiters();
        if ok {
            Ok(())
        } else {
            Err(refused("this agent does not hold that workflow"))
        }
    }

    /// A step changed state.
    pub async fn step(
        &self,
        ctx: &Ctx,
        agent: i64,
        id: i64,
        update: StepUpdate,
    ) -> Result<(), ApiError> {
        if !status::ALL.contains(&update.state.as_str()) {
            return Err(ApiError::bad_request(format!(
                "unknown state {:?}",
                update.state
            )));
        }
        self.touch(agent, true);
        let cancel = update.cancel_pipeline && update.state == FAILURE;
        let ok = ctx
            .store
            .write(move |c| {
                if !Self::holds(c, id, agent)? {
                    return Ok(None);
                }
                let step = pipelines::step(c, update.step_id)?;
                let (_, wf) = pipelines::step_by_uuid(c, &step.uuid)?;
                if wf != id {
                    return Ok(None);
                }
                pipelines::update_step(c, step.id, |s| {
                    s.state = update.state.clone();
                    s.exit_code = update.exit_code;
                    s.error = update.error.clone();
                    if update.started > 0 {
                        s.started = update.started;
                    }
                    if update.finished > 0 {
                        s.finished = update.finished;
                    }
                })?;
                Ok(Some((step.pipeline_id, step.name)))
            })
            .await
            .map_err(|e| match e {
                StoreError::NotFound => ApiError::not_found("no such step"),
                other => other.into(),
            })?;
        self.changes.notify_waiters();
        let Some((pipeline_id, step_name)) = ok else {
            return Err(refused("this agent does not hold that workflow"));
        };
        if cancel {
            // `failure: cancel`: the whole pipeline stops, recording which step asked.
            if self.cancel(ctx, pipeline_id, "").await.is_ok() {
                ctx.store
                    .write(move |c| {
                        pipelines::update(c, pipeline_id, |p| {
                            if let Some(info) = &mut p.cancel_info {
                                info.canceled_by_step = step_name.clone();
                            }
                        })
                    })
                    .await?;
            }
        }
        Ok(())
    }

    /// Stores log lines of the workflow's steps (each line once, however often re-sent).
    pub async fn logs(
        &self,
        ctx: &Ctx,
        agent: i64,
        id: i64,
        lines: Vec<LogLine>,
    ) -> Result<(), ApiError> {
        self.touch(agent, true);
        let step_ids: Vec<i64> = ctx
            .store
            .read(move |c| {
                if !Self::holds(c, id, agent)? {
                    return Ok(Vec::new());
                }
                Ok(pipelines::workflow(c, id)?
                    .children
                    .iter()
                    .map(|s| s.id)
                    .collect())
            })
            .await?;
        if step_ids.is_empty() {
            return Err(refused("this agent does not hold that workflow"));
        }
        if let Some(bad) = lines.iter().find(|l| !step_ids.contains(&l.step_id)) {
            return Err(ApiError::bad_request(format!(
                "step {} is not part of workflow {id}",
                bad.step_id
            )));
        }
        let rows: Vec<NewLine> = lines
            .into_iter()
            .map(|l| NewLine {
                step_id: l.step_id,
                line: l.line,
                time: l.time,
                kind: l.kind,
                data: l.data,
            })
            .collect();
        let stored = rows.clone();
        ctx.logs.write(move |c| logs::append(c, &rows)).await?;
        ctx.log_bus.publish(&stored);
        Ok(())
    }

    pub async fn extend(&self, ctx: &Ctx, agent: i64, id: i64) -> Result<(), ApiError> {
        self.touch(agent, false);
        let ok = ctx
            .store
            .write(move |c| tasks::extend(c, id, agent, now_unix() + LEASE_SECS))
            .await?;
        if ok {
            Ok(())
        } else {
            Err(refused("this agent does not hold that workflow"))
        }
    }

    /// Waits (at most [`LONG_POLL`]) until the workflow's pipeline is canceled.
    pub async fn wait_canceled(&self, ctx: &Ctx, agent: i64, id: i64) -> Result<bool, ApiError> {
        self.touch(agent, false);
        let deadline = tokio::time::Instant::now() + LONG_POLL;
        loop {
            let notified = self.changes.notified();
            let canceled = ctx
                .store
                .read(move |c| {
                    let wf = pipelines::workflow(c, id)?;
                    let p = pipelines::by_id(c, wf.pipeline_id)?;
                    Ok(matches!(
                        p.pipeline.status.as_str(),
                        KILLED | CANCELED | DECLINED
                    ))
                })
                .await
                .map_err(|e| match e {
                    StoreError::NotFound => ApiError::not_found("no such workflow"),
                    other => other.into(),
                })?;
            if canceled {
                return Ok(true);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(false),
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
    }

    /// The runner finished the workflow.
    pub async fn done(
        &self,
        ctx: &Ctx,
        agent: i64,
        id: i64,
        done: WorkflowDone,
    ) -> Result<(), ApiError> {
        if !matches!(done.state.as_str(), SUCCESS | FAILURE | KILLED | ERROR) {
            return Err(ApiError::bad_request(format!(
                "a workflow cannot end as {:?}",
                done.state
            )));
        }
        self.touch(agent, true);
        let held = ctx.store.read(move |c| Self::holds(c, id, agent)).await?;
        if !held {
            return Err(refused("this agent does not hold that workflow"));
        }
        self.finish_workflow(ctx, id, &done.state, &done.error)
            .await
    }

    /// Ends a workflow (steps left unfinished end with it), releases dependents, and rolls
    /// the pipeline up when nothing is left.
    pub async fn finish_workflow(
        &self,
        ctx: &Ctx,
        id: i64,
        state: &str,
        error: &str,
    ) -> Result<(), ApiError> {
        let (state, error) = (state.to_string(), error.to_string());
        ctx.store
            .write(move |c| {
                let pipeline_id = end_workflow(c, id, &state, &error)?;
                release_dependents(c, pipeline_id)?;
                roll_up(c, pipeline_id)?;
                Ok(())
            })
            .await?;
        self.wake();
        Ok(())
    }

    /// Cancels a pipeline: queued workflows are skipped at once, running ones are killed by
    /// their agents (which see the pipeline's new status).
    pub async fn cancel(
        &self,
        ctx: &Ctx,
        pipeline_id: i64,
        by_user: &str,
    ) -> Result<PipelineRow, ApiError> {
        let user = by_user.to_string();
        let row = ctx
            .store
            .write(move |c| cancel_in(c, pipeline_id, &user))
            .await?;
        self.wake();
        Ok(row)
    }

    /// Puts tasks whose lease ran out (or that the restarted local agent held) back in the
    /// queue; their steps start again, their logs continue where they were.
    pub async fn requeue(&self, ctx: &Ctx, only_agent: Option<i64>) -> StoreResult<usize> {
        let n = ctx
            .store
            .write(move |c| {
                let stale = match only_agent {
                    Some(agent) => tasks::of_agent(c, agent)?,
                    None => tasks::expired(c, now_unix())?,
                };
                for task in &stale {
                    let pipeline = pipelines::by_id(c, task.pipeline_id)?;
                    if matches!(
                        pipeline.pipeline.status.as_str(),
                        KILLED | CANCELED | DECLINED
                    ) {
                        // Canceled while its agent was gone: end it instead of running it again.
                        end_workflow(c, task.id, KILLED, "")?;
                        roll_up(c, task.pipeline_id)?;
                        continue;
                    }
                    tasks::set_state(c, task.id, "pending")?;
                    let wf = pipelines::workflow(c, task.id)?;
                    for s in &wf.children {
                        if !status::is_done(&s.state) || s.state == RUNNING {
                            pipelines::update_step(c, s.id, |s| {
                                s.state = PENDING.into();
                                s.started = 0;
                                s.finished = 0;
                                s.exit_code = 0;
                            })?;
                        }
                    }
                    pipelines::update_workflow(c, task.id, |w| {
                        w.state = PENDING.into();
                        w.agent_id = 0;
                    })?;
                    tracing::warn!(
                        workflow = task.id,
                        agent = task.agent_id,
                        "lease lost; workflow re-queued"
                    );
                }
                Ok(stale.len())
            })
            .await?;
        if n > 0 {
            self.wake();
        }
        Ok(n)
    }

    /// Resolves when no task is running (upstream's `norunningpipelines`).
    pub async fn wait_idle(&self, ctx: &Ctx) -> StoreResult<()> {
        loop {
            let notified = self.changes.notified();
            let running = ctx
                .store
                .read(|c| {
                    Ok(tasks::count_running(c)?
                        + pipelines::with_status(c, &[RUNNING])?.len() as i64)
                })
                .await?;
            if running == 0 {
                return Ok(());
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

/// Marks a workflow ended with `state`; its unfinished steps end too. Returns its pipeline.
fn end_workflow(c: &Tx, id: i64, state: &str, error: &str) -> StoreResult<i64> {
    let now = now_unix();
    let wf = pipelines::workflow(c, id)?;
    for s in &wf.children {
        if !status::is_done(&s.state) {
            let step_state = match state {
                KILLED | CANCELED => {
                    if s.state == RUNNING {
                        KILLED
                    } else {
                        CANCELED
                    }
                }
                _ => SKIPPED,
            };
            pipelines::update_step(c, s.id, |s| {
                s.state = step_state.into();
                if s.finished == 0 && s.started > 0 {
                    s.finished = now;
                }
            })?;
        }
    }
    pipelines::update_workflow(c, id, |w| {
        w.state = state.into();
        w.error = error.into();
        w.finished = now;
        if w.started == 0 {
            w.started = now;
        }
    })?;
    tasks::remove(c, id)?;
    Ok(wf.pipeline_id)
}

/// Waiting tasks whose dependencies have all ended become pending, or are skipped when the
/// dependencies did not end the way `runs_on` asks.
fn release_dependents(c: &Tx, pipeline_id: i64) -> StoreResult<()> {
    loop {
        let mut changed = false;
        let wfs = pipelines::workflows(c, pipeline_id)?;
        let state_of: HashMap<i64, String> = wfs.iter().map(|w| (w.id, w.state.clone())).collect();
        for task in tasks::of_pipeline(c, pipeline_id)? {
            if task.state != "waiting" {
                continue;
            }
            let deps: Vec<&String> = task
                .dependencies
                .iter()
                .filter_map(|d| state_of.get(d))
                .collect();
            if !deps.iter().all(|s| status::is_done(s)) {
                continue;
            }
            let outcome = if deps
                .iter()
                .all(|s| s.as_str() == SUCCESS || s.as_str() == SKIPPED)
            {
                "success"
            } else {
                "failure"
            };
            if task.run_on.iter().any(|r| r == outcome) {
                tasks::set_state(c, task.id, "pending")?;
            } else {
                end_workflow(c, task.id, SKIPPED, "")?;
            }
            changed = true;
        }
        if !changed {
            return Ok(());
        }
    }
}

/// When no workflow of the pipeline is left to run, the pipeline takes the merged state.
fn roll_up(c: &Tx, pipeline_id: i64) -> StoreResult<()> {
    let wfs = pipelines::workflows(c, pipeline_id)?;
    if wfs.iter().any(|w| !status::is_done(&w.state)) {
        return Ok(());
    }
    let merged = status::merge(wfs.iter().map(|w| w.state.as_str()));
    let now = now_unix();
    pipelines::update(c, pipeline_id, |p| {
        // A canceled pipeline keeps the state the cancel gave it.
        if !matches!(p.status.as_str(), KILLED | CANCELED | DECLINED) {
            p.status = merged.into();
        }
        if p.finished == 0 {
            p.finished = now;
        }
    })?;
    Ok(())
}

fn cancel_in(c: &Tx, pipeline_id: i64, user: &str) -> StoreResult<PipelineRow> {
    let row = pipelines::by_id(c, pipeline_id)?;
    if !matches!(row.pipeline.status.as_str(), PENDING | RUNNING | BLOCKED) {
        return Err(StoreError::Conflict(format!(
            "pipeline {} is {} and cannot be canceled",
            row.pipeline.number, row.pipeline.status
        )));
    }
    let wfs = pipelines::workflows(c, pipeline_id)?;
    let started = wfs.iter().any(|w| w.state == RUNNING || w.started > 0);
    let now = now_unix();
    for task in tasks::of_pipeline(c, pipeline_id)? {
        if task.state != "running" {
            end_workflow(c, task.id, SKIPPED, "")?;
        }
    }
    // Blocked pipelines have workflows but no tasks.
    for wf in &wfs {
        if wf.state == BLOCKED {
            end_workflow(c, wf.id, SKIPPED, "")?;
        }
    }
    let user = user.to_string();
    let row = pipelines::update(c, pipeline_id, |p| {
        p.status = if started { KILLED } else { CANCELED }.into();
        p.cancel_info = Some(CancelInfo {
            canceled_by_user: user,
            ..CancelInfo::default()
        });
        if p.finished == 0 {
            p.finished = now;
        }
    })?;
    Ok(row)
}
