//! The queue service: hands workflows to agents and turns their reports into state.
//!
//! The queue itself is the `tasks` table (it survives restarts); this service adds what
//! must be live: agents long-polling for work (woken by a `Notify` when a task becomes
//! pending), the pause switch, cancellation waiters, lease expiry, and agents' contact
//! times (kept in memory and written every 15 s, not on every log batch).
//!
//! Every report from an agent is checked against the lease: only the agent holding a
//! workflow's task may change it. Status roll-up follows upstream: a workflow ends with the
//! state its runner reports; when no workflow of a pipeline is left to run, the pipeline
//! gets the merge of its workflows' states.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use woodlark_stdx::{Classify, Fault};

use super::bus::LogBus;
use super::forge::acting::Tokens;
use super::forge::drivers::Drivers;
use super::lifecycle::{
    cancel_in, end_workflow, release_dependents, requeue_in, requeue_task, roll_up,
};
use crate::auth::sealing::SealKey;
use crate::pipeline::labels;
use crate::pipeline::status::Status;
use crate::pipeline::types::CompiledWorkflow;
use crate::runner::protocol::{AgentInfo, LogLine, StepRef, StepUpdate, Work, WorkflowDone};
use crate::store::agents::{self, AgentRow};
use crate::store::logs;
use crate::store::pipelines::{self, PipelineRow};
use crate::store::tasks::{self, Task, TaskState};
use crate::store::{Domain, Store, StoreError, StoreResult, Tx, WriteTx, meta, now_unix, repos};

/// How long a lease lasts without `extend`.
pub const LEASE_SECS: i64 = 60;
/// How long `next` and `canceled` long polls wait before answering "nothing".
pub const LONG_POLL: Duration = Duration::from_secs(25);
/// Purpose under which compiled workflows are sealed.
pub const SEAL_PAYLOAD: &str = "workflow-payload";

/// Why the queue refused or failed a request; the agent protocol's handlers and the
/// embedded agent both see this, each rendering it its own way.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The agent does not hold the workflow's lease (it expired, or the workflow ended).
    #[error("this agent does not hold that workflow")]
    NotHeld,
    /// The report itself is wrong (an unknown state, a step of another workflow).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(&'static str),
    /// The stored workflow cannot be opened or decoded.
    #[error("workflow payload: {0}")]
    Payload(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classify for QueueError {
    fn fault(&self) -> Fault {
        match self {
            QueueError::NotHeld => Fault::Conflict(self.to_string()),
            QueueError::Invalid(message) => Fault::Invalid(message.clone()),
            QueueError::NotFound(what) => Fault::NotFound(what.to_string()),
            QueueError::Payload(_) => Fault::Internal,
            QueueError::Store(err) => err.fault(),
        }
    }
}

impl QueueError {
    /// What a user may read about the failure (a workflow's `error`): internal causes stay in
    /// the log.
    fn public_message(&self) -> String {
        match self.fault() {
            Fault::Internal => "internal server error".into(),
            _ => self.to_string(),
        }
    }
}

/// The queue service, built from the parts it uses: the store, the log store, the sealing
/// key (workflow payloads), the forge drivers (clone credentials) and the live log bus.
pub struct Queue {
    store: Store,
    logs: Store,
    seal: SealKey,
    drivers: Arc<Drivers>,
    tokens: Tokens,
    bus: LogBus,
    pause: Pause,
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
    /// `pipeline.max_step_log_bytes`, handed to agents with each workflow.
    max_log_bytes: u64,
}

/// The queue's pause as last read or written here, and the settings generation it was read
/// at.
#[derive(Default)]
struct Pause {
    paused: AtomicBool,
    read_at: Mutex<Option<u64>>,
}

impl Pause {
    fn read_at(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.read_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn learn(&self, paused: bool, generation: u64) {
        self.paused.store(paused, Ordering::SeqCst);
        *self.read_at() = Some(generation);
    }
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

impl Queue {
    pub fn new(
        store: Store,
        logs: Store,
        seal: SealKey,
        drivers: Arc<Drivers>,
        tokens: Tokens,
        max_log_bytes: u64,
    ) -> Queue {
        Queue {
            max_log_bytes,
            store,
            logs,
            seal,
            drivers,
            tokens,
            bus: LogBus::default(),
            pause: Pause::default(),
            work: Notify::new(),
            changes: Notify::new(),
            contact: Mutex::new(HashMap::new()),
            polling: AtomicUsize::new(0),
        }
    }

    /// Live log lines of every step, published after they are stored.
    pub fn log_bus(&self) -> &LogBus {
        &self.bus
    }

    /// Whether the queue is paused: kept in the database, so it holds for every replica
    /// and across restarts. Read again whenever the settings changed (here, or on another
    /// replica: its commit is heard a moment later).
    pub async fn paused(&self) -> bool {
        let generation = self.store.generation(Domain::Settings);
        if *self.pause.read_at() != Some(generation) {
            match self.store.read(|c| meta::get(c, meta::QUEUE_PAUSED)).await {
                Ok(value) => self
                    .pause
                    .learn(value.as_deref() == Some("true"), generation),
                Err(err) => {
                    tracing::warn!(%err, "the queue's pause not read; keeping the last known")
                }
            }
        }
        self.pause.paused.load(Ordering::SeqCst)
    }

    pub async fn pause(&self) -> StoreResult<()> {
        self.set_paused(true).await
    }

    pub async fn resume(&self) -> StoreResult<()> {
        self.set_paused(false).await?;
        self.work.notify_waiters();
        Ok(())
    }

    async fn set_paused(&self, paused: bool) -> StoreResult<()> {
        let value = if paused { "true" } else { "false" };
        self.store
            .write(move |c| meta::set(c, meta::QUEUE_PAUSED, value))
            .await?;
        // Known now; the write moved the generation, so the next look reads it back.
        self.pause.paused.store(paused, Ordering::SeqCst);
        Ok(())
    }

    /// Wakes agents waiting for work.
    pub fn wake(&self) {
        self.work.notify_waiters();
        self.changes.notify_waiters();
    }

    /// Wakes this replica's runners when another replica commits a workflow that became
    /// ready to run (queued, a dependency finished, a lease ran out) or a setting (the
    /// queue's resume); they would otherwise hear of it at their 2 s re-check. (Cancels
    /// still wait for it: any pipeline change would wake every cancel waiter here.) Runs
    /// for the server's life; returns at once on a store no other server shares.
    pub async fn follow_other_replicas(self: Arc<Self>) {
        if !self.store.is_shared() {
            return;
        }
        let heard = |store: &Store| {
            [Domain::Queue, Domain::Settings].map(|d| store.generation_elsewhere(d))
        };
        let mut commits = self.store.commits();
        let mut seen = heard(&self.store);
        while commits.changed().await.is_ok() {
            let now = heard(&self.store);
            if now != seen {
                seen = now;
                self.work.notify_waiters();
            }
        }
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

    /// Keeps an agent record's platform, backend, capacity, version and step limits up to
    /// date (a write only when they change).
    pub async fn record_info(&self, row: &AgentRow, info: &AgentInfo) -> StoreResult<()> {
        let reported = agents::Reported {
            platform: info.platform.clone(),
            backend: info.backend.clone(),
            capacity: info.capacity,
            version: info.version.clone(),
            limits: info.limits.clone(),
        };
        if reported.matches(&row.agent) {
            return Ok(());
        }
        let id = row.agent.id;
        self.store
            .write(move |c| agents::report(c, id, &reported))
            .await
    }

    /// Writes the contact times gathered since the last flush.
    pub async fn flush_contact(&self) -> StoreResult<()> {
        let batch: Vec<(i64, (i64, i64))> = {
            let mut map = self.contact.lock().unwrap_or_else(|p| p.into_inner());
            map.drain().collect()
        };
        if batch.is_empty() {
            return Ok(());
        }
        self.store
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
    pub async fn next(&self, agent: &AgentIdent) -> Result<Option<Work>, QueueError> {
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
            if !self.paused().await
                && !agent.no_schedule
                && let Some(work) = self.try_claim(agent).await?
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

    async fn try_claim(&self, agent: &AgentIdent) -> Result<Option<Work>, QueueError> {
        let ident = agent.clone();
        let claimed = self
            .store
            .write(move |c| {
                // The record decides, not what the agent's poll started with: an agent paused
                // (`no_schedule`) or deleted meanwhile takes nothing.
                if agents::schedulable(c, ident.id)? != Some(true) {
                    return Ok(None);
                }
                let now = now_unix();
                // The whole queue is read only when a candidate has a concurrency limit.
                let mut queued: Option<Vec<Task>> = None;
                for task in tasks::list(c, Some(TaskState::Pending))? {
                    if labels::score(&task.labels, &ident.labels).is_none() {
                        continue;
                    }
                    // Over its group's concurrency limit: it stays pending, in its turn.
                    if task.concurrency_limit > 0 {
                        let all = match &mut queued {
                            Some(all) => all,
                            None => queued.insert(tasks::list(c, None)?),
                        };
                        if !tasks::may_start(&task, all) {
                            continue;
                        }
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
        match self.work_for(&task).await {
            Ok(work) => Ok(Some(work)),
            Err(err) => {
                // The task cannot be run (its repository or payload is gone): end it as an error.
                tracing::warn!(workflow = task.id, error = %err, "cannot hand out a workflow");
                self.finish_workflow(task.id, Status::Error, &err.public_message())
                    .await?;
                Ok(None)
            }
        }
    }

    /// Everything an agent needs to run a leased task.
    async fn work_for(&self, task: &Task) -> Result<Work, QueueError> {
        let (wf_id, pipeline_id, repo_id) = (task.id, task.pipeline_id, task.repo_id);
        let (sealed, wf, row, repo) = self
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
        let payload = self
            .seal
            .open(SEAL_PAYLOAD, &sealed)
            .map_err(|e| QueueError::Payload(e.to_string()))?;
        let workflow: CompiledWorkflow =
            serde_json::from_slice(&payload).map_err(|e| QueueError::Payload(e.to_string()))?;
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
        let offsets = self
            .logs
            .read(move |c| {
                let mut out = BTreeMap::new();
                for &id in &ids {
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
            commit: row.pipeline.commit.sha.clone(),
            git_ref: row.pipeline.commit.git_ref.clone(),
            netrc: self.netrc_for(&repo).await,
            workflow,
            steps,
            log_offsets: offsets,
            max_log_bytes: self.max_log_bytes,
        })
    }

    /// Clone credentials for `repo`, from its forge's driver acting as the repository's
    /// owner; none when the forge cannot be reached (the clone then fails with the forge's
    /// own message).
    async fn netrc_for(
        &self,
        repo: &crate::store::repos::RepoRow,
    ) -> Option<crate::runner::protocol::Netrc> {
        match self.drivers.get(repo.repo.forge_id).await {
            Ok(forge) => {
                let driver = self.tokens.for_repo(&forge, repo).await;
                driver.netrc(&repo.repo).await
            }
            Err(err) => {
                tracing::warn!(repo = repo.repo.full_name, error = %err, "no clone credentials");
                None
            }
        }
    }

    /// Checks that `agent` holds the lease of workflow `id`.
    fn holds(conn: &Tx, id: i64, agent: i64) -> StoreResult<bool> {
        Ok(tasks::get(conn, id)?
            .is_some_and(|t| t.state == TaskState::Running && t.agent_id == agent))
    }

    /// The runner starts the workflow: workflow and pipeline become `running`.
    pub async fn init(&self, agent: i64, id: i64) -> Result<(), QueueError> {
        self.touch(agent, true);
        let ok = self
            .store
            .write(move |c| {
                if !Self::holds(c, id, agent)? {
                    return Ok(false);
                }
                let now = now_unix();
                let wf = pipelines::update_workflow(c, id, |w| {
                    w.state = Status::Running;
                    if w.started == 0 {
                        w.started = now;
                    }
                })?;
                pipelines::update(c, wf.pipeline_id, |p| {
                    if p.status == Status::Pending {
                        p.status = Status::Running;
                    }
                    if p.started == 0 {
                        p.started = now;
                    }
                })?;
                Ok(true)
            })
            .await?;
        self.changes.notify_waiters();
        if ok { Ok(()) } else { Err(QueueError::NotHeld) }
    }

    /// A step changed state. A numbered report (`seq` > 0) is applied once: a repeat of
    /// one already applied (its answer was lost, and the agent sent it again) or one
    /// overtaken by a later report is taken and ignored.
    pub async fn step(&self, agent: i64, id: i64, update: StepUpdate) -> Result<(), QueueError> {
        self.touch(agent, true);
        let cancel = update.cancel_pipeline && update.state == Status::Failure;
        let ok = self
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
                if update.seq > 0 && !tasks::accept_report(c, id, agent, update.seq)? {
                    tracing::debug!(
                        workflow = id,
                        seq = update.seq,
                        "a step report seen before; ignored"
                    );
                    return Ok(Some(None));
                }
                pipelines::update_step(c, step.id, |s| {
                    s.state = update.state;
                    s.exit_code = update.exit_code;
                    s.error = update.error.clone();
                    if update.started > 0 {
                        s.started = update.started;
                    }
                    if update.finished > 0 {
                        s.finished = update.finished;
                    }
                })?;
                Ok(Some(Some((step.pipeline_id, step.name))))
            })
            .await
            .map_err(|e| match e {
                StoreError::NotFound => QueueError::NotFound("no such step"),
                other => other.into(),
            })?;
        self.changes.notify_waiters();
        let Some(applied) = ok else {
            return Err(QueueError::NotHeld);
        };
        let Some((pipeline_id, step_name)) = applied else {
            return Ok(());
        };
        if cancel {
            // `failure: cancel`: the whole pipeline stops, recording which step asked.
            if self.cancel(pipeline_id, "").await.is_ok() {
                self.store
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
    pub async fn logs(&self, agent: i64, id: i64, lines: Vec<LogLine>) -> Result<(), QueueError> {
        self.touch(agent, true);
        let step_ids: Vec<i64> = self
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
            return Err(QueueError::NotHeld);
        }
        if let Some(bad) = lines.iter().find(|l| !step_ids.contains(&l.step_id)) {
            return Err(QueueError::Invalid(format!(
                "step {} is not part of workflow {id}",
                bad.step_id
            )));
        }
        let (lines, added) = self
            .logs
            .write(move |c| {
                let added = logs::append(c, &lines)?;
                Ok((lines, added))
            })
            .await?;
        // A reader that subscribes after this check reads these lines from the store.
        if self.bus.has_readers() {
            let entries = added
                .iter()
                .map(|(i, id)| logs::LogEntry::of(*id, &lines[*i]))
                .collect();
            self.bus.publish(std::sync::Arc::new(entries));
        }
        Ok(())
    }

    pub async fn extend(&self, agent: i64, id: i64) -> Result<(), QueueError> {
        self.touch(agent, false);
        let ok = self
            .store
            .write(move |c| tasks::extend(c, id, agent, now_unix() + LEASE_SECS))
            .await?;
        if ok { Ok(()) } else { Err(QueueError::NotHeld) }
    }

    /// Waits (at most [`LONG_POLL`]) until the workflow's pipeline is canceled. Only for the
    /// agent the workflow is or was leased to (its recorded `agent_id`, which outlives the
    /// lease, so the agent still learns of a cancel that ended its task); for any other
    /// agent the workflow does not exist, as one that does not.
    pub async fn wait_canceled(&self, agent: i64, id: i64) -> Result<bool, QueueError> {
        self.touch(agent, false);
        let deadline = tokio::time::Instant::now() + LONG_POLL;
        loop {
            let notified = self.changes.notified();
            let canceled = self
                .store
                .read(move |c| {
                    let wf = pipelines::workflow(c, id)?;
                    if wf.agent_id != agent {
                        return Err(StoreError::NotFound);
                    }
                    let p = pipelines::by_id(c, wf.pipeline_id)?;
                    Ok(matches!(
                        p.pipeline.status,
                        Status::Killed | Status::Canceled | Status::Declined
                    ))
                })
                .await
                .map_err(|e| match e {
                    StoreError::NotFound => QueueError::NotFound("no such workflow"),
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

    /// The runner finished the workflow. Said again (the first answer was lost) by the agent
    /// whose report ended it, it is taken as already done.
    pub async fn done(&self, agent: i64, id: i64, done: WorkflowDone) -> Result<(), QueueError> {
        if !matches!(
            done.state,
            Status::Success | Status::Failure | Status::Killed | Status::Error
        ) {
            return Err(QueueError::Invalid(format!(
                "a workflow cannot end as {:?}",
                done.state
            )));
        }
        self.touch(agent, true);
        // The lease is checked in the write that ends the workflow, so a lease that expires
        // and goes to another agent in between cannot be ended by the old holder.
        let ended = self
            .store
            .write(move |c| {
                if !Self::holds(c, id, agent)? {
                    return Self::ended_by(c, id, agent, done.state)
                        .map(|again| again.then_some(false));
                }
                Self::finish_in(c, id, done.state, &done.error)?;
                Ok(Some(true))
            })
            .await?;
        let Some(ended) = ended else {
            return Err(QueueError::NotHeld);
        };
        if !ended {
            return Ok(());
        }
        self.wake();
        Ok(())
    }

    /// Whether workflow `id` already ended in `state`, run by `agent`, and is no longer
    /// queued: the end `agent` reports again.
    fn ended_by(c: &Tx, id: i64, agent: i64, state: Status) -> StoreResult<bool> {
        if tasks::get(c, id)?.is_some() {
            return Ok(false);
        }
        match pipelines::workflow(c, id) {
            Ok(wf) => Ok(wf.agent_id == agent && wf.state == state && wf.finished > 0),
            Err(StoreError::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Ends a workflow (steps left unfinished end with it), releases dependents, and rolls
    /// the pipeline up when nothing is left.
    pub async fn finish_workflow(
        &self,
        id: i64,
        state: Status,
        error: &str,
    ) -> Result<(), QueueError> {
        let error = error.to_string();
        self.store
            .write(move |c| Self::finish_in(c, id, state, &error))
            .await?;
        self.wake();
        Ok(())
    }

    /// [`Queue::finish_workflow`]'s write.
    fn finish_in(c: &WriteTx, id: i64, state: Status, error: &str) -> StoreResult<()> {
        let pipeline_id = end_workflow(c, id, state, error)?;
        release_dependents(c, pipeline_id)?;
        roll_up(c, pipeline_id)
    }

    /// Cancels a pipeline: queued workflows are skipped at once, running ones are killed by
    /// their agents (which see the pipeline's new status).
    pub async fn cancel(&self, pipeline_id: i64, by_user: &str) -> Result<PipelineRow, QueueError> {
        let user = by_user.to_string();
        let row = self
            .store
            .write(move |c| cancel_in(c, pipeline_id, &user))
            .await?;
        self.wake();
        Ok(row)
    }

    /// The agent stopped workflow `id` before its end (its grace after a stop ran out): each
    /// step that was running gets a line saying so, and the workflow goes straight back to
    /// the queue, so that another agent, or this one restarted, runs it at once rather than
    /// when the lease runs out.
    pub async fn hand_over(&self, agent: i64, id: i64) -> Result<(), QueueError> {
        let held = self
            .store
            .read(move |c| {
                if !Self::holds(c, id, agent)? {
                    return Ok(None);
                }
                // Each running step with when it started (a line's time counts from then).
                let running: Vec<(i64, i64)> = pipelines::workflow(c, id)?
                    .children
                    .iter()
                    .filter(|s| s.state == Status::Running)
                    .map(|s| (s.id, s.started))
                    .collect();
                Ok(Some((running, agents::by_id(c, agent)?.agent)))
            })
            .await?;
        let Some((running, holder)) = held else {
            return Err(QueueError::NotHeld);
        };
        let who = if super::local::is_embedded(&holder) {
            "the server stopped".to_string()
        } else {
            format!("agent {:?} stopped", holder.name)
        };
        let note = format!(
            "[woodlark] {who} before this step ended: the step was stopped, and its workflow is handed over to run again"
        );
        let (lines, added) = self
            .logs
            .write(move |c| {
                let mut lines = Vec::new();
                for (step_id, started) in running {
                    let time = if started > 0 { now_unix() - started } else { 0 };
                    lines.push(LogLine {
                        step_id,
                        line: logs::next_line(c, step_id)?,
                        time: time.max(0),
                        kind: crate::runner::protocol::LineKind::Stdout,
                        data: note.clone(),
                    });
                }
                let added = logs::append(c, &lines)?;
                Ok((lines, added))
            })
            .await?;
        if self.bus.has_readers() && !added.is_empty() {
            let entries = added
                .iter()
                .map(|(i, id)| logs::LogEntry::of(*id, &lines[*i]))
                .collect();
            self.bus.publish(std::sync::Arc::new(entries));
        }
        // Queued again only while still held: a lease that ran out meanwhile went its way.
        let requeued = self
            .store
            .write(move |c| match tasks::get(c, id)? {
                Some(task) if task.state == TaskState::Running && task.agent_id == agent => {
                    requeue_task(c, &task)
                }
                _ => Ok(false),
            })
            .await?;
        self.changes.notify_waiters();
        if requeued {
            tracing::warn!(
                workflow = id,
                agent,
                steps_stopped = lines.len(),
                "workflow handed over by its stopping agent; re-queued"
            );
            self.wake();
        }
        Ok(())
    }

    /// Puts tasks whose lease ran out (or that the restarted local agent held) back in the
    /// queue; their steps start again, their logs continue where they were.
    pub async fn requeue(&self, only_agent: Option<i64>) -> StoreResult<usize> {
        let n = self
            .store
            .write(move |c| {
                let stale = requeue_in(c, only_agent)?;
                Ok(stale.len())
            })
            .await?;
        if n > 0 {
            self.wake();
        }
        Ok(n)
    }

    /// Resolves when no task is running (upstream's `norunningpipelines`).
    pub async fn wait_idle(&self) -> StoreResult<()> {
        loop {
            let notified = self.changes.notified();
            let running = self
                .store
                .read(|c| {
                    Ok(tasks::count_running(c)?
                        + pipelines::with_status(c, &[Status::Running])?.len() as i64)
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
