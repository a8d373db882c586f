//! The embedded agent: the same runner as `woodlark agent`, fed in memory.
//!
//! It is a system agent (owner and org -1) named `local`, created on first start; on every
//! start, the tasks it held before a restart go straight back to the queue (the processes
//! that ran them died with the old server), so nothing waits for a lease to expire.

use std::sync::Arc;

use woodlark_stdx::{Classify, Fault};

use super::queue::{AgentIdent, Queue, QueueError};
use crate::auth::random_secret;
use crate::auth::sealing::SealKey;
use crate::runner::protocol::{AgentInfo, LogLine, StepUpdate, Work, WorkflowDone};
use crate::runner::{AgentApi, RunnerError};
use crate::store::agents::{self, AgentRow, NewAgent};
use crate::store::{Store, StoreResult, WriteTx, now_unix};

pub const LOCAL_AGENT: &str = "local";

/// Where a replica keeps the id that names its embedded agent (see [`agent_name`]).
pub const REPLICA_ID_FILE: &str = "replica-id";

/// Whether `agent` is an embedded runner's record: it cannot be renamed, nor deleted while
/// its server runs (the runner inside would go on under a stale id), only paused with
/// `no_schedule` (see [`super::agents::EMBEDDED_GONE_SECS`]).
pub fn is_embedded(agent: &agents::Agent) -> bool {
    let local = agent.name == LOCAL_AGENT
        || agent
            .name
            .strip_prefix(LOCAL_AGENT)
            .is_some_and(|rest| rest.starts_with('@'));
    local && agent.owner_id == -1 && agent.org_id == -1
}

/// The embedded agent's name. A server alone on its database is `local`. Replicas on a
/// shared database each need their own record, `local@<replica id>` (the id kept in the
/// data dir): a replica that restarts re-queues what *it* held at once, and must never take
/// back the workflows its siblings are running; a replica that is gone for good leaves its
/// leases to run out, and the others re-queue them.
pub fn agent_name(store: &Store, data_dir: &std::path::Path) -> std::io::Result<String> {
    if !store.is_shared() {
        return Ok(LOCAL_AGENT.to_string());
    }
    let path = data_dir.join(REPLICA_ID_FILE);
    let id = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id: String = crate::auth::random_bytes(6)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            woodlark_stdx::write_private(&path, &format!("{id}\n"))?;
            id
        }
        Err(e) => return Err(e),
    };
    Ok(format!("{LOCAL_AGENT}@{id}"))
}

#[derive(Clone)]
pub struct LocalAgent {
    queue: Arc<Queue>,
    ident: AgentIdent,
}

/// The system agent row `name` of the embedded runner, created if missing.
pub async fn ensure_agent(store: &Store, seal: &SealKey, name: String) -> StoreResult<AgentRow> {
    // The embedded agent never presents its token; it only needs to be unguessable.
    let token = random_secret();
    let sealed = seal.seal(agents::SEAL_PURPOSE, token.as_bytes());
    let hash = agents::token_hash(&token);
    store
        .write(move |c| {
            let mut row = find_or_create(c, name, hash, sealed)?;
            // Heard from now, not at the queue's first flush of contact times: a record
            // silent for a while is deletable (`agents::remove`) and this one is in use.
            let now = now_unix();
            agents::record_contact(c, row.agent.id, now, 0)?;
            row.agent.last_contact = row.agent.last_contact.max(now);
            Ok(row)
        })
        .await
}

/// The system agent row `name`, created if missing (or taken over from `local`).
fn find_or_create(
    c: &WriteTx,
    name: String,
    hash: String,
    sealed: String,
) -> StoreResult<AgentRow> {
    match agents::system_agent_id(c, &name)? {
        Some(id) => agents::by_id(c, id),
        // The database of a single server moved to a shared one (`woodlark migrate`):
        // the first replica takes over its `local` record, with its history.
        None if name != LOCAL_AGENT
            && let Some(id) = agents::system_agent_id(c, LOCAL_AGENT)? =>
        {
            let rename = agents::AgentChange {
                name: Some(name),
                no_schedule: None,
            };
            agents::update(c, id, &rename)
        }
        None => agents::create(
            c,
            &NewAgent {
                name,
                no_schedule: false,
                owner_id: -1,
                org_id: -1,
                token_hash: hash,
                sealed_token: sealed,
            },
        ),
    }
}

impl LocalAgent {
    pub fn new(queue: Arc<Queue>, row: &AgentRow, info: &AgentInfo) -> LocalAgent {
        LocalAgent {
            ident: AgentIdent::new(row, info),
            queue,
        }
    }

    pub fn id(&self) -> i64 {
        self.ident.id
    }
}

/// The queue's answer as the runner reads it: a server-side failure may pass (try again),
/// a refusal will not.
fn err(e: QueueError) -> RunnerError {
    if let QueueError::NotHeld = e {
        return RunnerError::NotHeld(e.to_string());
    }
    match e.fault() {
        Fault::Internal => RunnerError::Transport(e.to_string()),
        _ => RunnerError::Refused(e.to_string()),
    }
}

impl AgentApi for LocalAgent {
    async fn next(&self, _info: &AgentInfo) -> Result<Option<Work>, RunnerError> {
        self.queue.next(&self.ident).await.map_err(err)
    }

    async fn init(&self, workflow_id: i64) -> Result<(), RunnerError> {
        self.queue
            .init(self.ident.id, workflow_id)
            .await
            .map_err(err)
    }

    async fn step(&self, workflow_id: i64, update: StepUpdate) -> Result<(), RunnerError> {
        self.queue
            .step(self.ident.id, workflow_id, update)
            .await
            .map_err(err)
    }

    async fn logs(&self, workflow_id: i64, lines: Vec<LogLine>) -> Result<(), RunnerError> {
        self.queue
            .logs(self.ident.id, workflow_id, lines)
            .await
            .map_err(err)
    }

    async fn extend(&self, workflow_id: i64) -> Result<(), RunnerError> {
        self.queue
            .extend(self.ident.id, workflow_id)
            .await
            .map_err(err)
    }

    async fn wait_canceled(&self, workflow_id: i64) -> Result<bool, RunnerError> {
        self.queue
            .wait_canceled(self.ident.id, workflow_id)
            .await
            .map_err(err)
    }

    async fn done(&self, workflow_id: i64, done: WorkflowDone) -> Result<(), RunnerError> {
        self.queue
            .done(self.ident.id, workflow_id, done)
            .await
            .map_err(err)
    }

    async fn hand_over(&self, workflow_id: i64) -> Result<(), RunnerError> {
        self.queue
            .hand_over(self.ident.id, workflow_id)
            .await
            .map_err(err)
    }
}
