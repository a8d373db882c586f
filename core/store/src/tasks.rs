//! The persisted queue: one task per workflow that still has to run.
//!
//! States ([`TaskState`]): `waiting` (its workflow depends on others that have not
//! finished), `pending` (ready for an agent), `running` (leased to an agent until
//! `lease_until`). A finished task is deleted. Because the queue is a table, it survives restarts; leases that run out put
//! tasks back to `pending`.

use crate::{Tx, WriteTx};
use std::collections::BTreeMap;

use crate::{OptionalExtension, Row};
use rusqlite::params;
use serde::Serialize;

use super::StoreResult;

/// Where a task is in the queue (the `state` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Its workflow depends on others that have not finished.
    Waiting,
    /// Ready for an agent.
    Pending,
    /// Leased to an agent until `lease_until`.
    Running,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Pending => "pending",
            TaskState::Running => "running",
        }
    }

    fn parse(text: &str) -> Option<TaskState> {
        [TaskState::Waiting, TaskState::Pending, TaskState::Running]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

impl rusqlite::types::ToSql for TaskState {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for TaskState {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        TaskState::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("unknown task state {text:?}").into())
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Task {
    pub id: i64,
    pub pipeline_id: i64,
    pub repo_id: i64,
    pub state: TaskState,
    pub labels: BTreeMap<String, String>,
    /// Workflow (task) ids this one waits for.
    pub dependencies: Vec<i64>,
    pub run_on: Vec<String>,
    pub agent_id: i64,
    pub lease_until: i64,
    pub created: i64,
    /// At most this many tasks of `concurrency_group` run at once (0: no limit).
    pub concurrency_limit: i64,
    /// Tasks limited against each other (upstream's form: `<repo>/<workflow>/` by default,
    /// `<repo>//<group>` for a named group).
    pub concurrency_group: String,
}

/// Migration: the last report sequence number applied for the task's current lease.
pub const ADD_REPORT_SEQ: &str =
    "ALTER TABLE tasks ADD COLUMN report_seq BIGINT NOT NULL DEFAULT 0;";

const COLUMNS: &str = "id, pipeline_id, repo_id, state, labels, dependencies, run_on, agent_id, lease_until, created, concurrency_limit, concurrency_group";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    let labels: serde_json::Value = super::json_column(r, 4)?;
    let deps: serde_json::Value = super::json_column(r, 5)?;
    let run_on: serde_json::Value = super::json_column(r, 6)?;
    Ok(Task {
        id: r.get(0)?,
        pipeline_id: r.get(1)?,
        repo_id: r.get(2)?,
        state: r.get(3)?,
        labels: serde_json::from_value(labels).unwrap_or_default(),
        dependencies: serde_json::from_value(deps).unwrap_or_default(),
        run_on: serde_json::from_value(run_on).unwrap_or_default(),
        agent_id: r.get(7)?,
        lease_until: r.get(8)?,
        created: r.get(9)?,
        concurrency_limit: r.get(10)?,
        concurrency_group: r.get(11)?,
    })
}

pub fn insert(conn: &WriteTx, task: &Task) -> StoreResult<()> {
    conn.cached_exec(
        "INSERT INTO tasks (id, pipeline_id, repo_id, state, labels, dependencies, run_on, created,
                            concurrency_limit, concurrency_group)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            task.id,
            task.pipeline_id,
            task.repo_id,
            task.state,
            serde_json::to_string(&task.labels)?,
            serde_json::to_string(&task.dependencies)?,
            serde_json::to_string(&task.run_on)?,
            task.created,
            task.concurrency_limit,
            task.concurrency_group
        ],
    )?;
    Ok(())
}

pub fn get(conn: &Tx, id: i64) -> StoreResult<Option<Task>> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()
}

/// Tasks in `state` (all states when `None`), oldest first.
pub fn list(conn: &Tx, state: Option<TaskState>) -> StoreResult<Vec<Task>> {
    let rows = match state {
        Some(state) => conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE state = ?1 ORDER BY id"
            ))?
            .query_map([state], from_row)?
            .collect::<Result<_, _>>()?,
        None => conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM tasks ORDER BY id"))?
            .query_map([], from_row)?
            .collect::<Result<_, _>>()?,
    };
    Ok(rows)
}

pub fn of_pipeline(conn: &Tx, pipeline_id: i64) -> StoreResult<Vec<Task>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM tasks WHERE pipeline_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([pipeline_id], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn of_agent(conn: &Tx, agent_id: i64) -> StoreResult<Vec<Task>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM tasks WHERE state = 'running' AND agent_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([agent_id], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Leases a pending task to an agent; false if someone else took it first.
pub fn lease(conn: &WriteTx, id: i64, agent_id: i64, until: i64) -> StoreResult<bool> {
    Ok(conn.cached_exec(
        "UPDATE tasks SET state = 'running', agent_id = ?2, lease_until = ?3, report_seq = 0
         WHERE id = ?1 AND state = 'pending'",
        params![id, agent_id, until],
    )? == 1)
}

/// Extends a lease the agent holds; false if it does not hold it (any more).
pub fn extend(conn: &WriteTx, id: i64, agent_id: i64, until: i64) -> StoreResult<bool> {
    Ok(conn.cached_exec(
        "UPDATE tasks SET lease_until = ?3 WHERE id = ?1 AND agent_id = ?2 AND state = 'running'",
        params![id, agent_id, until],
    )? == 1)
}

/// Whether report `seq` of the agent holding task `id` is new: true (and recorded) when it
/// is past the last one applied; false for a repeat, or when the agent does not hold the
/// task. An agent numbers its reports of one lease 1, 2, 3, … and re-sends one until it is
/// acknowledged, so a repeat (its first delivery was applied, the answer lost) or a stale
/// copy overtaken by a later report must not be applied again.
pub fn accept_report(conn: &WriteTx, id: i64, agent_id: i64, seq: i64) -> StoreResult<bool> {
    Ok(conn.cached_exec(
        "UPDATE tasks SET report_seq = ?3
         WHERE id = ?1 AND agent_id = ?2 AND state = 'running' AND report_seq < ?3",
        params![id, agent_id, seq],
    )? == 1)
}

pub fn set_state(conn: &WriteTx, id: i64, state: TaskState) -> StoreResult<()> {
    conn.cached_exec(
        "UPDATE tasks SET state = ?2, agent_id = 0, lease_until = 0 WHERE id = ?1",
        params![id, state],
    )?;
    Ok(())
}

pub fn remove(conn: &WriteTx, id: i64) -> StoreResult<()> {
    conn.cached_exec("DELETE FROM tasks WHERE id = ?1", [id])?;
    Ok(())
}

/// Running tasks whose lease ended before `now`.
pub fn expired(conn: &Tx, now: i64) -> StoreResult<Vec<Task>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM tasks WHERE state = 'running' AND lease_until < ?1 ORDER BY id{}",
        crate::claim_rows(conn.dialect())
    ))?;
    let rows = stmt.query_map([now], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn count_running(conn: &Tx) -> StoreResult<i64> {
    conn.cached_row(
        "SELECT count(*) FROM tasks WHERE state = 'running'",
        [],
        |r| r.get(0),
    )
}

/// Whether `task` may start now without breaking its group's concurrency limit, among
/// `all` (every task in the queue), as upstream's queue decides: fewer than `limit` tasks
/// of the group are running, counting as running the not-yet-running tasks of the group
/// from *earlier* pipelines (they keep their turn even while waiting for dependencies).
/// Within one pipeline order is left to `depends_on`, so it cannot deadlock.
pub fn may_start(task: &Task, all: &[Task]) -> bool {
    if task.concurrency_limit <= 0 || task.concurrency_group.is_empty() {
        return true;
    }
    let same_group = |t: &&Task| t.concurrency_group == task.concurrency_group && t.id != task.id;
    let running = all
        .iter()
        .filter(same_group)
        .filter(|t| t.state == TaskState::Running)
        .count() as i64;
    let ahead = all
        .iter()
        .filter(same_group)
        .filter(|t| t.state != TaskState::Running && t.pipeline_id != task.pipeline_id)
        .filter(|t| (t.created, t.id) < (task.created, task.id))
        .count() as i64;
    running + ahead < task.concurrency_limit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: i64, pipeline_id: i64, state: TaskState, group: &str, limit: i64) -> Task {
        Task {
            id,
            pipeline_id,
            repo_id: 1,
            state,
            labels: BTreeMap::new(),
            dependencies: Vec::new(),
            run_on: Vec::new(),
            agent_id: 0,
            lease_until: 0,
            created: id,
            concurrency_limit: limit,
            concurrency_group: group.into(),
        }
    }

    #[test]
    fn a_group_runs_at_most_its_limit_in_pipeline_order() {
        let running = task(1, 10, TaskState::Running, "1/deploy/", 1);
        let next = task(2, 11, TaskState::Pending, "1/deploy/", 1);
        let other_group = task(3, 12, TaskState::Pending, "1/test/", 1);
        let unlimited = task(4, 13, TaskState::Pending, "", 0);
        let all = [
            running.clone(),
            next.clone(),
            other_group.clone(),
            unlimited.clone(),
        ];
        assert!(!may_start(&next, &all), "the slot is taken");
        assert!(
            may_start(&other_group, &all),
            "another group has its own slot"
        );
        assert!(may_start(&unlimited, &all));
        // The slot frees: the earlier pipeline's task goes first, even while it waits for
        // its dependencies; a later one waits its turn.
        let mut waiting_earlier = task(5, 9, TaskState::Waiting, "1/deploy/", 1);
        waiting_earlier.created = 0;
        let all = [next.clone(), waiting_earlier.clone()];
        assert!(!may_start(&next, &all));
        // Within one pipeline, order is depends_on's: no reservation.
        let same_pipeline = task(6, 11, TaskState::Waiting, "1/deploy/", 1);
        assert!(may_start(&next, &[next.clone(), same_pipeline]));
        // A limit of 2 lets two run.
        let two = task(7, 20, TaskState::Running, "1//shared", 2);
        let second = task(8, 21, TaskState::Pending, "1//shared", 2);
        assert!(may_start(&second, &[two.clone(), second.clone()]));
    }
}
