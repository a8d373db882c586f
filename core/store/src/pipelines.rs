//! Pipelines, their workflows and steps, the config files they were made from, and the
//! persisted queue of workflow tasks.
//!
//! A pipeline row keeps its API rendering (minus workflows) as JSON in `data`, with the
//! columns used by filters beside it. Workflows and steps are plain rows: they change state
//! often. Each workflow keeps its compiled form **sealed** (it holds resolved secret values),
//! so the database never contains a secret in clear. Every create, update and delete records
//! an event (`pipelines.*`, `workflows.*`, `steps.*`) in the same transaction.

use crate::{Tx, WriteTx};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::{OptionalExtension, Row, json_array_items};
use rusqlite::params;
use rusqlite::types::ToSql;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult, now_unix};
use woodlark_pipeline::event::WebhookEvent;
use woodlark_pipeline::status::Status;
use woodlark_pipeline::types::{Commit, ConfigFile, PipelineError};

pub const PIPELINES: events::RecordType = events::RecordType::Pipelines;
pub const WORKFLOWS: events::RecordType = events::RecordType::Workflows;
pub const STEPS: events::RecordType = events::RecordType::Steps;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CancelInfo {
    pub canceled_by_user: String,
    pub superseded_by: i64,
    pub canceled_by_step: String,
}

/// Woodpecker's `Pipeline`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Pipeline {
    pub id: i64,
    pub number: i64,
    pub parent: i64,
    pub event: WebhookEvent,
    pub event_reason: Vec<String>,
    pub status: Status,
    pub errors: Vec<PipelineError>,
    pub created: i64,
    pub updated: i64,
    pub started: i64,
    pub finished: i64,
    pub deploy_to: String,
    pub deploy_task: String,
    /// `commit`, `branch`, `ref`, `refspec`, `message`, the author, `sender`, `forge_url`,
    /// `timestamp` and `changed_files`, at the top level of the JSON as upstream has them.
    #[serde(flatten)]
    pub commit: Commit,
    pub rerun_count: i64,
    pub reviewed_by: String,
    pub reviewed: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_info: Option<CancelInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflows: Option<Vec<Workflow>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pr_labels: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pr_milestone: String,
    #[serde(skip_serializing_if = "is_false")]
    pub pr_draft: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cron: String,
    #[serde(skip_serializing_if = "is_false")]
    pub from_fork: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tag_title: String,
    pub version: String,
    pub title: String,
    #[serde(skip_serializing_if = "is_false")]
    pub is_prerelease: bool,
}

/// Woodpecker's `Workflow`. Empty and zero fields are left out of the JSON as upstream's
/// `omitempty` does: the web UI tests for the keys (a `finished` key means "ended").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Workflow {
    pub id: i64,
    pub pipeline_id: i64,
    pub pid: i64,
    pub name: String,
    pub state: Status,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub started: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub finished: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub agent_id: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub platform: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environ: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Step>,
}

/// For `skip_serializing_if`: upstream omits zero times and ids.
fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Woodpecker's `Step`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    pub id: i64,
    pub uuid: String,
    pub pipeline_id: i64,
    pub pid: i64,
    pub ppid: i64,
    pub name: String,
    pub state: Status,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    pub exit_code: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub started: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub finished: i64,
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

/// A workflow to create with a new pipeline.
#[derive(Debug, Clone)]
pub struct NewWorkflow {
    pub name: String,
    pub state: Status,
    pub environ: BTreeMap<String, String>,
    /// The compiled workflow, sealed (it holds secret values).
    pub sealed_payload: String,
    /// (name, type) of each step, in order.
    pub steps: Vec<(String, String)>,
}

/// What the schema of this module needs (appended to the main migrations).
pub const SCHEMA: &str = r#"
    CREATE TABLE pipelines (
        id        INTEGER PRIMARY KEY,
        repo_id   INTEGER NOT NULL,
        number    INTEGER NOT NULL,
        status    TEXT    NOT NULL,
        event     TEXT    NOT NULL,
        branch    TEXT    NOT NULL,
        ref       TEXT    NOT NULL,
        created   INTEGER NOT NULL,
        data      TEXT    NOT NULL,
        UNIQUE (repo_id, number)
    );
    CREATE INDEX pipelines_status ON pipelines (status);
    CREATE TABLE workflows (
        id           INTEGER PRIMARY KEY,
        pipeline_id  INTEGER NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
        pid          INTEGER NOT NULL,
        name         TEXT    NOT NULL,
        state        TEXT    NOT NULL,
        error        TEXT    NOT NULL DEFAULT '',
        started      INTEGER NOT NULL DEFAULT 0,
        finished     INTEGER NOT NULL DEFAULT 0,
        agent_id     INTEGER NOT NULL DEFAULT 0,
        platform     TEXT    NOT NULL DEFAULT '',
        environ      TEXT    NOT NULL DEFAULT '{}',
        payload      TEXT    NOT NULL  -- sealed CompiledWorkflow
    );
    CREATE INDEX workflows_pipeline ON workflows (pipeline_id);
    CREATE TABLE steps (
        id           INTEGER PRIMARY KEY,
        uuid         TEXT    NOT NULL UNIQUE,
        pipeline_id  INTEGER NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
        workflow_id  INTEGER NOT NULL,
        pid          INTEGER NOT NULL,
        ppid         INTEGER NOT NULL,
        name         TEXT    NOT NULL,
        state        TEXT    NOT NULL,
        error        TEXT    NOT NULL DEFAULT '',
        exit_code    INTEGER NOT NULL DEFAULT 0,
        started      INTEGER NOT NULL DEFAULT 0,
        finished     INTEGER NOT NULL DEFAULT 0,
        type         TEXT    NOT NULL
    );
    CREATE INDEX steps_workflow ON steps (workflow_id);
    CREATE INDEX steps_pipeline ON steps (pipeline_id);
    CREATE TABLE configs (
        id       INTEGER PRIMARY KEY,
        repo_id  INTEGER NOT NULL,
        hash     TEXT    NOT NULL,
        name     TEXT    NOT NULL,
        data     BLOB    NOT NULL,
        UNIQUE (repo_id, hash, name)
    );
    CREATE TABLE pipeline_configs (
        pipeline_id  INTEGER NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
        config_id    INTEGER NOT NULL,
        PRIMARY KEY (pipeline_id, config_id)
    );
    -- The queue: one row per workflow that still has to run.
    CREATE TABLE tasks (
        id            INTEGER PRIMARY KEY,  -- the workflow id
        pipeline_id   INTEGER NOT NULL,
        repo_id       INTEGER NOT NULL,
        state         TEXT    NOT NULL CHECK (state IN ('waiting', 'pending', 'running')),
        labels        TEXT    NOT NULL DEFAULT '{}',
        dependencies  TEXT    NOT NULL DEFAULT '[]',
        run_on        TEXT    NOT NULL DEFAULT '["success"]',
        agent_id      INTEGER NOT NULL DEFAULT 0,
        lease_until   INTEGER NOT NULL DEFAULT 0,
        created       INTEGER NOT NULL
    );
    CREATE INDEX tasks_state ON tasks (state, id);
"#;

fn owner(repo_id: i64, org_id: i64) -> Owner {
    Owner {
        org_id: Some(org_id),
        repo_id: Some(repo_id),
    }
}

fn org_of(conn: &Tx, repo_id: i64) -> StoreResult<i64> {
    Ok(conn
        .cached_row("SELECT org_id FROM repos WHERE id = ?1", [repo_id], |r| {
            r.get(0)
        })
        .optional()?
        .unwrap_or(0))
}

fn from_sql_err(idx: usize, e: rusqlite::types::FromSqlError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
}

fn json_err(idx: usize, e: serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
}

/// A status column; text that is not a status is a conversion error for that column.
fn status_column(r: &Row<'_>, index: usize) -> rusqlite::Result<Status> {
    let text: &str = r
        .get_ref(index)?
        .as_str()
        .map_err(|e| from_sql_err(index, e))?;
    Status::parse(text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unknown status {text:?}").into(),
        )
    })
}

const PIPELINE_COLUMNS: &str = "id, repo_id, number, status, data";

/// A pipeline row: the API rendering plus the repository it belongs to.
#[derive(Debug, Clone)]
pub struct PipelineRow {
    pub repo_id: i64,
    pub pipeline: Pipeline,
}

fn pipeline_from_row(r: &Row<'_>) -> rusqlite::Result<PipelineRow> {
    let data: String = r.get(4)?;
    let mut pipeline: Pipeline = serde_json::from_str(&data).map_err(|e| json_err(4, e))?;
    pipeline.id = r.get(0)?;
    pipeline.number = r.get(2)?;
    pipeline.status = status_column(r, 3)?;
    pipeline.workflows = None;
    Ok(PipelineRow {
        repo_id: r.get(1)?,
        pipeline,
    })
}

pub fn by_id(conn: &Tx, id: i64) -> StoreResult<PipelineRow> {
    conn.cached_row(
        &format!("SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE id = ?1"),
        [id],
        pipeline_from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

pub fn by_number(conn: &Tx, repo_id: i64, number: i64) -> StoreResult<PipelineRow> {
    conn.cached_row(
        &FULL_STATEMENTS.pipeline,
        params![repo_id, number],
        pipeline_from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// The number the repository's next pipeline gets (one past the highest; 1 for the first),
/// inside the write transaction that creates it: from here to the commit no other replica
/// can take a number of this repository, so the number cannot race.
///
/// On PostgreSQL the statement also holds the repository's row until the transaction ends,
/// so that replicas creating pipelines of one repository at once take numbers one after the
/// other (the second reads the highest number once the first has committed). One statement:
/// the lock is a sub-select in a condition on no column of `pipelines`, which PostgreSQL
/// runs once before the scan. SQLite's one writer needs no lock.
pub fn take_next_number(conn: &Tx, repo_id: i64) -> StoreResult<i64> {
    match conn.dialect() {
        crate::Dialect::Sqlite => next_number(conn, repo_id),
        crate::Dialect::Postgres => conn.cached_row(
            "SELECT coalesce(max(number), 0) + 1 FROM pipelines
             WHERE repo_id = ?1
               AND (SELECT count(*) FROM (SELECT id FROM repos WHERE id = ?1 FOR UPDATE) l) >= 0",
            [repo_id],
            |r| r.get(0),
        ),
    }
}

/// The number the repository's next pipeline would get now (a read: by the time a write
/// creates it, another may have taken it; see [`take_next_number`]).
pub fn next_number(conn: &Tx, repo_id: i64) -> StoreResult<i64> {
    conn.cached_row(
        "SELECT coalesce(max(number), 0) + 1 FROM pipelines WHERE repo_id = ?1",
        [repo_id],
        |r| r.get(0),
    )
}

/// The newest pipeline of a repository, optionally of one branch and one event.
pub fn latest(
    conn: &Tx,
    repo_id: i64,
    branch: Option<&str>,
    event: Option<&str>,
) -> StoreResult<PipelineRow> {
    conn.cached_row(
        &format!(
            "SELECT {PIPELINE_COLUMNS} FROM pipelines
             WHERE repo_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR branch = ?2)
               AND (CAST(?3 AS TEXT) IS NULL OR event = ?3)
             ORDER BY number DESC LIMIT 1"
        ),
        params![repo_id, branch, event],
        pipeline_from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// Filters of `GET /repos/{id}/pipelines`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub branch: Option<String>,
    pub events: Vec<String>,
    pub status: Option<String>,
    /// SQL LIKE pattern on `ref`.
    pub git_ref: Option<String>,
    /// Created strictly before / after these unix seconds.
    pub before: Option<i64>,
    pub after: Option<i64>,
}

/// Pipelines of a repository, newest first, without workflows.
pub fn list(
    conn: &Tx,
    repo_id: i64,
    filter: &ListFilter,
    page: u32,
    per_page: u32,
) -> StoreResult<Vec<Pipeline>> {
    let (sql, args) = list_query(
        conn.dialect(),
        PIPELINE_COLUMNS,
        repo_id,
        filter,
        page,
        per_page,
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(crate::params_from_iter(args), pipeline_from_row)?;
    Ok(rows
        .map(|r| r.map(|row| row.pipeline))
        .collect::<Result<_, _>>()?)
}

/// The newest pipeline of `branch` among `events` that is not waiting for approval: what
/// a status badge shows (upstream's `GetPipelineBadge`; a declined one counts, and shows as
/// "none"). `None` when there is none.
pub fn newest_for_badge(
    conn: &Tx,
    repo_id: i64,
    branch: &str,
    events: &[String],
) -> StoreResult<Option<Pipeline>> {
    let sql = format!(
        "SELECT {PIPELINE_COLUMNS} FROM pipelines
         WHERE repo_id = ?1 AND branch = ?2 AND event IN ({}) AND status <> 'blocked'
         ORDER BY number DESC LIMIT 1",
        json_array_items(conn.dialect(), "?3")
    );
    let events = serde_json::to_string(events)?;
    Ok(conn
        .cached_row(&sql, params![repo_id, branch, events], pipeline_from_row)
        .optional()?
        .map(|row| row.pipeline))
}

/// The newest pipeline of `branch` so far: the one before a pipeline about to be created
/// there, whose run the `CI_PREV_*` variables describe (upstream's `GetPipelineLastBefore`).
pub fn newest_of_branch(conn: &Tx, repo_id: i64, branch: &str) -> StoreResult<Option<Pipeline>> {
    Ok(conn
        .cached_row(
            &format!(
                "SELECT {PIPELINE_COLUMNS} FROM pipelines
                 WHERE repo_id = ?1 AND branch = ?2 ORDER BY number DESC LIMIT 1"
            ),
            params![repo_id, branch],
            pipeline_from_row,
        )
        .optional()?
        .map(|row| row.pipeline))
}

/// [`list`] as the API renders it: a JSON array built from the stored records and the rows'
/// own `id`, `number` and `status`, without decoding each record into a [`Pipeline`] and
/// encoding it again (which was most of a list request's time). A record is a whole
/// `Pipeline` of this version minus those columns and the workflows (`record_of`;
/// [`normalise_records`] rewrote older rows), so splicing the columns in front of it gives
/// exactly what encoding the decoded row would, up to field order.
pub fn list_json(
    conn: &Tx,
    repo_id: i64,
    filter: &ListFilter,
    page: u32,
    per_page: u32,
) -> StoreResult<String> {
    let (sql, args) = list_query(
        conn.dialect(),
        PIPELINE_COLUMNS,
        repo_id,
        filter,
        page,
        per_page,
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(crate::params_from_iter(args))?;
    let mut out = String::from("[");
    while let Some(r) = rows.next()? {
        let first = out.len() == 1;
        if !first {
            out.push(',');
        }
        push_pipeline_json(&mut out, &r, None)?;
        if first {
            // A page is 20 KB and more at 25 pipelines: grown by doubling, its buffer was
            // copied a dozen times per render. The first row's size stands in for the others'.
            let rest = rows
                .remaining()
                .unwrap_or(per_page.saturating_sub(1) as usize);
            out.reserve(page_size_estimate(out.len(), rest));
        }
    }
    out.push(']');
    if out.capacity() - out.len() > out.len() / 4 {
        // Fewer rows than the page had room for: the body is kept in the rendered-body
        // cache, which counts its length, so it must not hold the unused room.
        out.shrink_to_fit();
    }
    Ok(out)
}

/// The statement [`list_json`] runs for the first `per_page` pipelines of `repo_id` with no
/// filter, in SQLite's `?N` placeholders, and its parameters: for a bench that runs the same
/// statement with PostgreSQL's own client.
#[cfg(feature = "test-support")]
pub fn first_page_statement(repo_id: i64, per_page: u32) -> (String, Vec<rusqlite::types::Value>) {
    let filter = ListFilter::default();
    list_query(
        crate::Dialect::Postgres,
        PIPELINE_COLUMNS,
        repo_id,
        &filter,
        1,
        per_page,
    )
}

/// Room for `rest` more rows like one of `first_len` bytes, an eighth more for records of
/// different sizes, and the closing bracket.
fn page_size_estimate(first_len: usize, rest: usize) -> usize {
    let rows = first_len.saturating_mul(rest);
    rows.saturating_add(rows / 8).saturating_add(1)
}

/// Appends the API rendering of a [`PIPELINE_COLUMNS`] row: the column fields, then the
/// stored record's fields as stored (see [`record_of`]), then `"workflows":` and
/// `workflows` when given.
fn push_pipeline_json(out: &mut String, r: &Row<'_>, workflows: Option<&str>) -> StoreResult<()> {
    let status: &str = r.get_ref(3)?.as_str().map_err(|e| from_sql_err(3, e))?;
    let record: &str = r.get_ref(4)?.as_str().map_err(|e| from_sql_err(4, e))?;
    let fields = record.trim().strip_prefix('{').unwrap_or("}");
    let fields = fields.strip_suffix('}').unwrap_or(fields).trim();
    let (id, number) = (r.get::<_, i64>(0)?, r.get::<_, i64>(2)?);
    // Written in place: `fmt::Write` for `String` cannot fail.
    let _ = write!(out, "{{\"id\":{id},\"number\":{number},\"status\":");
    if status
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        // Every status the server writes: nothing in it to escape.
        out.push('"');
        out.push_str(status);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(status)?);
    }
    if !fields.is_empty() {
        out.push(',');
        out.push_str(fields);
    }
    if let Some(workflows) = workflows {
        out.push_str(",\"workflows\":");
        out.push_str(workflows);
    }
    out.push('}');
    Ok(())
}

/// [`full`]'s rendering, spliced from the stored record like [`list_json`]: the pipeline
/// and its workflows and steps in three indexed queries, with no decode of the record.
pub fn full_json(conn: &Tx, repo_id: i64, number: i64) -> StoreResult<String> {
    let sql = &*FULL_STATEMENTS;
    sql.name_ahead(conn, repo_id, number)?;
    let mut stmt = conn.prepare_cached(&sql.pipeline)?;
    let mut rows = stmt.query(params![repo_id, number])?;
    let row = rows.next()?.ok_or(StoreError::NotFound)?;
    let wfs = sql.workflows(conn, repo_id, number)?;
    let workflows = if wfs.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&wfs)?)
    };
    let mut out = String::new();
    push_pipeline_json(&mut out, &row, workflows.as_deref())?;
    Ok(out)
}

/// The query behind [`list`]: its `WHERE` clause names only the filters in use (a
/// `(?N IS NULL OR ref LIKE ?N)` term made SQLite re-prepare the statement on every call).
fn list_query(
    dialect: crate::Dialect,
    columns: &str,
    repo_id: i64,
    filter: &ListFilter,
    page: u32,
    per_page: u32,
) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut sql = format!("SELECT {columns} FROM pipelines WHERE repo_id = ?1");
    let mut args: Vec<V> = vec![V::Integer(repo_id)];
    let mut push = |clause: &str, value: V, args: &mut Vec<V>| {
        args.push(value);
        sql.push_str(&clause.replace('#', &format!("?{}", args.len())));
    };
    if let Some(branch) = &filter.branch {
        push(" AND branch = #", V::Text(branch.clone()), &mut args);
    }
    if !filter.events.is_empty() {
        let json = serde_json::json!(filter.events).to_string();
        push(
            &format!(" AND event IN ({})", json_array_items(dialect, "#")),
            V::Text(json),
            &mut args,
        );
    }
    if let Some(status) = &filter.status {
        push(" AND status = #", V::Text(status.clone()), &mut args);
    }
    if let Some(pattern) = &filter.git_ref {
        push(" AND ref LIKE #", V::Text(pattern.clone()), &mut args);
    }
    if let Some(before) = filter.before {
        push(" AND created < #", V::Integer(before), &mut args);
    }
    if let Some(after) = filter.after {
        push(" AND created > #", V::Integer(after), &mut args);
    }
    push(
        " ORDER BY number DESC LIMIT # + 0",
        V::Integer(per_page.into()),
        &mut args,
    );
    push(
        " OFFSET #",
        V::Integer(super::page_offset(page, per_page)),
        &mut args,
    );
    (sql, args)
}

/// Rewrites every stored pipeline record in `record_of`'s form (migration 11): records of
/// earlier versions held the columns too and may lack fields added since, which decoding
/// filled with defaults but [`list_json`] serves as stored.
pub fn normalise_records(conn: &WriteTx) -> StoreResult<()> {
    let rows: Vec<(i64, String)> = {
        let mut stmt = conn.prepare("SELECT id, data FROM pipelines")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let mut update = conn.prepare("UPDATE pipelines SET data = ?2 WHERE id = ?1")?;
    for (id, data) in rows {
        let pipeline: Pipeline = serde_json::from_str(&data).map_err(|e| json_err(1, e))?;
        let normal = record_of(&pipeline).map_err(|e| {
            rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(e.to_string())))
        })?;
        if normal != data {
            update.execute(params![id, normal])?;
        }
    }
    Ok(())
}

/// Pipelines in any of `states`, oldest first (for the admin queue view and recovery).
pub fn with_status(conn: &Tx, states: &[Status]) -> StoreResult<Vec<PipelineRow>> {
    let json = serde_json::json!(states).to_string();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE status IN ({}) ORDER BY id",
        json_array_items(conn.dialect(), "?1")
    ))?;
    let rows = stmt.query_map([json], pipeline_from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The ids of the active (pending, running, blocked) pipelines of `repo_id` that `newer`
/// supersedes (`cancel_previous_pipeline_events`): older ones of the same event on the same
/// branch (pushes) or ref (other events). One indexed query on the repository's rows.
pub fn superseded_by(conn: &Tx, repo_id: i64, newer: &Pipeline) -> StoreResult<Vec<i64>> {
    let (column, value) = if newer.event == WebhookEvent::Push {
        ("branch", &newer.commit.branch)
    } else {
        ("ref", &newer.commit.git_ref)
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id FROM pipelines
         WHERE repo_id = ?1 AND number < ?2 AND event = ?3 AND {column} = ?4
           AND status IN (?5, ?6, ?7)
         ORDER BY number"
    ))?;
    let active = [Status::Pending, Status::Running, Status::Blocked].map(Status::as_str);
    let ids = stmt.query_map(
        params![
            repo_id,
            newer.number,
            newer.event.as_str(),
            value,
            active[0],
            active[1],
            active[2]
        ],
        |r| r.get(0),
    )?;
    Ok(ids.collect::<Result<_, _>>()?)
}

const WORKFLOW_COLUMNS: &str =
    "id, pipeline_id, pid, name, state, error, started, finished, agent_id, platform, environ";

fn workflow_from_row(r: &Row<'_>) -> rusqlite::Result<Workflow> {
    let environ: String = r.get(10)?;
    Ok(Workflow {
        id: r.get(0)?,
        pipeline_id: r.get(1)?,
        pid: r.get(2)?,
        name: r.get(3)?,
        state: status_column(r, 4)?,
        error: r.get(5)?,
        started: r.get(6)?,
        finished: r.get(7)?,
        agent_id: r.get(8)?,
        platform: r.get(9)?,
        environ: serde_json::from_str(&environ).map_err(|e| json_err(10, e))?,
        children: Vec::new(),
    })
}

const STEP_COLUMNS: &str = "id, uuid, pipeline_id, pid, ppid, name, state, error, exit_code, started, finished, type, workflow_id";

fn step_from_row(r: &Row<'_>) -> rusqlite::Result<Step> {
    Ok(Step {
        id: r.get(0)?,
        uuid: r.get(1)?,
        pipeline_id: r.get(2)?,
        pid: r.get(3)?,
        ppid: r.get(4)?,
        name: r.get(5)?,
        state: status_column(r, 6)?,
        error: r.get(7)?,
        exit_code: r.get(8)?,
        started: r.get(9)?,
        finished: r.get(10)?,
        kind: r.get(11)?,
    })
}

pub fn workflow(conn: &Tx, id: i64) -> StoreResult<Workflow> {
    let mut wf = conn
        .cached_row(
            &format!("SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = ?1"),
            [id],
            workflow_from_row,
        )
        .optional()?
        .ok_or(StoreError::NotFound)?;
    wf.children = steps_of_workflow(conn, id)?;
    Ok(wf)
}

/// The sealed compiled form of a workflow.
pub fn workflow_payload(conn: &Tx, id: i64) -> StoreResult<String> {
    conn.cached_row("SELECT payload FROM workflows WHERE id = ?1", [id], |r| {
        r.get(0)
    })
    .optional()?
    .ok_or(StoreError::NotFound)
}

fn steps_of_workflow(conn: &Tx, workflow_id: i64) -> StoreResult<Vec<Step>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {STEP_COLUMNS} FROM steps WHERE workflow_id = ?1 ORDER BY pid"
    ))?;
    let rows = stmt.query_map([workflow_id], step_from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The workflows of a pipeline with their steps, by pid.
pub fn workflows(conn: &Tx, pipeline_id: i64) -> StoreResult<Vec<Workflow>> {
    workflows_where(
        conn,
        &workflows_sql("pipeline_id = ?1"),
        &steps_sql("pipeline_id = ?1"),
        &[&pipeline_id],
    )
}

/// The workflows `workflows_sql` finds, each with its steps from `steps_sql` (both with
/// `args`).
fn workflows_where(
    conn: &Tx,
    workflows_sql: &str,
    steps_sql: &str,
    args: &[&dyn ToSql],
) -> StoreResult<Vec<Workflow>> {
    let mut stmt = conn.prepare_cached(workflows_sql)?;
    let mut list: Vec<Workflow> = stmt
        .query_map(args, workflow_from_row)?
        .collect::<Result<_, _>>()?;
    // Every step of the pipeline in one query, handed to its workflow.
    let mut steps = conn.prepare_cached(steps_sql)?;
    let mut rows = steps.query(args)?;
    while let Some(r) = rows.next()? {
        let workflow_id: i64 = r.get(12)?;
        if let Some(wf) = list.iter_mut().find(|w| w.id == workflow_id) {
            wf.children.push(step_from_row(&r)?);
        }
    }
    Ok(list)
}

/// A pipeline with its workflows and steps (the `GET` rendering). A pipeline without any
/// (its config failed to parse) has no `workflows` field at all, as upstream renders it.
pub fn full(conn: &Tx, repo_id: i64, number: i64) -> StoreResult<PipelineRow> {
    let sql = &*FULL_STATEMENTS;
    sql.name_ahead(conn, repo_id, number)?;
    let mut row = by_number(conn, repo_id, number)?;
    let wfs = sql.workflows(conn, repo_id, number)?;
    row.pipeline.workflows = (!wfs.is_empty()).then_some(wfs);
    Ok(row)
}

/// The statement of the workflows `filter` (a condition on `workflows`) picks, in order.
fn workflows_sql(filter: &str) -> String {
    format!("SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE {filter} ORDER BY pid")
}

/// The statement of the steps `filter` (a condition on `steps`) picks, by workflow.
fn steps_sql(filter: &str) -> String {
    format!("SELECT {STEP_COLUMNS} FROM steps WHERE {filter} ORDER BY workflow_id, pid")
}

/// The three statements of a pipeline with its workflows and steps ([`full`], [`full_json`]).
/// The workflows and steps are found by the pipeline's repository and number, as the
/// pipeline is, not by the id its row gives: so none of the three waits for another's rows,
/// and the asynchronous PostgreSQL client sends them in one round trip (`Tx::ahead`).
struct FullStatements {
    /// Also [`by_number`]'s.
    pipeline: String,
    workflows: String,
    steps: String,
}

/// Built once: the pipeline page reads them on every cache miss.
static FULL_STATEMENTS: std::sync::LazyLock<FullStatements> =
    std::sync::LazyLock::new(FullStatements::new);

impl FullStatements {
    /// The pipeline of `?1` (its repository) and `?2` (its number), as a condition.
    const OF_NUMBER: &str =
        "pipeline_id = (SELECT id FROM pipelines WHERE repo_id = ?1 AND number = ?2)";

    fn new() -> FullStatements {
        FullStatements {
            pipeline: format!(
                "SELECT {PIPELINE_COLUMNS} FROM pipelines WHERE repo_id = ?1 AND number = ?2"
            ),
            workflows: workflows_sql(Self::OF_NUMBER),
            steps: steps_sql(Self::OF_NUMBER),
        }
    }

    /// Names the three statements to `conn`, in the order the read runs them.
    fn name_ahead(&self, conn: &Tx, repo_id: i64, number: i64) -> StoreResult<()> {
        let args: &[&dyn ToSql] = &[&repo_id, &number];
        conn.ahead(&[
            (&self.pipeline, args),
            (&self.workflows, args),
            (&self.steps, args),
        ])
    }

    /// The workflows of pipeline `number` of `repo_id`, each with its steps.
    fn workflows(&self, conn: &Tx, repo_id: i64, number: i64) -> StoreResult<Vec<Workflow>> {
        workflows_where(conn, &self.workflows, &self.steps, &[&repo_id, &number])
    }
}

pub fn step(conn: &Tx, id: i64) -> StoreResult<Step> {
    conn.cached_row(
        &format!("SELECT {STEP_COLUMNS} FROM steps WHERE id = ?1"),
        [id],
        step_from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// A step with the workflow it belongs to.
pub fn step_by_uuid(conn: &Tx, uuid: &str) -> StoreResult<(Step, i64)> {
    conn.cached_row(
        &format!("SELECT {STEP_COLUMNS} FROM steps WHERE uuid = ?1"),
        [uuid],
        |r| Ok((step_from_row(r)?, r.get::<_, i64>(12)?)),
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// The stored record of a pipeline: its rendering without the fields that are columns of
/// their own (`id`, `number`, `status`) or rows of their own (workflows).
fn record_of(p: &Pipeline) -> StoreResult<String> {
    let mut value = serde_json::to_value(p)?;
    if let Some(object) = value.as_object_mut() {
        for column in ["id", "number", "status", "workflows"] {
            object.remove(column);
        }
    }
    Ok(value.to_string())
}

/// Stores config files (content-addressed per repository) and links them to a pipeline.
fn link_configs(
    conn: &WriteTx,
    repo_id: i64,
    pipeline_id: i64,
    files: &[ConfigFile],
) -> StoreResult<()> {
    for f in files {
        let hash = format!("{:x}", Sha256::digest(f.data.as_bytes()));
        conn.cached_exec(
            "INSERT INTO configs (repo_id, hash, name, data) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            params![repo_id, hash, f.name, f.data.as_bytes()],
        )?;
        // The config's id found and linked in one statement (new or stored before).
        conn.cached_exec(
            "INSERT INTO pipeline_configs (pipeline_id, config_id)
             SELECT ?1, id FROM configs WHERE repo_id = ?2 AND hash = ?3 AND name = ?4
             ON CONFLICT DO NOTHING",
            params![pipeline_id, repo_id, hash, f.name],
        )?;
    }
    Ok(())
}

/// The config files a pipeline was made from: (hash, name, data).
pub fn configs(conn: &Tx, pipeline_id: i64) -> StoreResult<Vec<(String, ConfigFile)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.hash, c.name, c.data FROM configs c
         JOIN pipeline_configs pc ON pc.config_id = c.id
         WHERE pc.pipeline_id = ?1 ORDER BY c.name",
    )?;
    let rows = stmt.query_map([pipeline_id], |r| {
        let data: Vec<u8> = r.get(2)?;
        Ok((
            r.get::<_, String>(0)?,
            ConfigFile {
                name: r.get(1)?,
                data: String::from_utf8_lossy(&data).into_owned(),
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Creates pipeline `number` (what [`take_next_number`] gave in this transaction) with its
/// workflows and steps, records the events, and returns the full rendering.
pub fn create(
    conn: &WriteTx,
    repo_id: i64,
    number: i64,
    pipeline: &Pipeline,
    workflows: &[NewWorkflow],
    files: &[ConfigFile],
) -> StoreResult<PipelineRow> {
    let now = now_unix();
    let mut p = pipeline.clone();
    p.number = number;
    p.created = now;
    p.updated = now;
    // The new id and the repository's organisation come back from the insert: on
    // PostgreSQL every statement is a round trip.
    let org_id;
    (p.id, org_id) = conn.cached_row(
        "INSERT INTO pipelines (repo_id, number, status, event, branch, ref, created, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         RETURNING id, (SELECT org_id FROM repos WHERE id = ?1)",
        params![
            repo_id,
            number,
            p.status.as_str(),
            p.event.as_str(),
            p.commit.branch,
            p.commit.git_ref,
            now,
            record_of(&p)?
        ],
        |r| Ok((r.get(0)?, r.get::<_, Option<i64>>(1)?.unwrap_or(0))),
    )?;
    link_configs(conn, repo_id, p.id, files)?;
    events::append(
        conn,
        PIPELINES,
        Action::Created,
        p.id,
        &p,
        owner(repo_id, org_id),
    )?;

    // The rows are returned as inserted, with the schema's defaults for the columns not
    // written (a test checks them against a read), rather than read back inside the write.
    let mut created = Vec::with_capacity(workflows.len());
    let mut next_pid = 1;
    for wf in workflows {
        let wf_pid = next_pid;
        next_pid += 1;
        let workflow_id = conn.cached_row(
            "INSERT INTO workflows (pipeline_id, pid, name, state, environ, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
            params![
                p.id,
                wf_pid,
                wf.name,
                wf.state.as_str(),
                serde_json::to_string(&wf.environ)?,
                wf.sealed_payload
            ],
            |r| r.get(0),
        )?;
        let mut workflow = Workflow {
            id: workflow_id,
            pipeline_id: p.id,
            pid: wf_pid,
            name: wf.name.clone(),
            state: wf.state,
            environ: wf.environ.clone(),
            ..Workflow::default()
        };
        events::append(
            conn,
            WORKFLOWS,
            Action::Created,
            workflow.id,
            &workflow,
            owner(repo_id, org_id),
        )?;
        for (name, kind) in &wf.steps {
            let uuid = woodlark_stdx::uuid_v7();
            let step_id = conn.cached_row(
                "INSERT INTO steps (uuid, pipeline_id, workflow_id, pid, ppid, name, state, type)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id",
                params![
                    uuid,
                    p.id,
                    workflow.id,
                    next_pid,
                    wf_pid,
                    name,
                    wf.state.as_str(),
                    kind
                ],
                |r| r.get(0),
            )?;
            let step = Step {
                id: step_id,
                uuid,
                pipeline_id: p.id,
                pid: next_pid,
                ppid: wf_pid,
                name: name.clone(),
                state: wf.state,
                kind: kind.clone(),
                ..Step::default()
            };
            events::append(
                conn,
                STEPS,
                Action::Created,
                step.id,
                &step,
                owner(repo_id, org_id),
            )?;
            workflow.children.push(step);
            next_pid += 1;
        }
        created.push(workflow);
    }
    p.workflows = (!created.is_empty()).then_some(created);
    Ok(PipelineRow {
        repo_id,
        pipeline: p,
    })
}

/// Loads a pipeline, applies `change`, stores it and records `pipelines.updated` (if the
/// rendering changed). `updated` is set to now.
pub fn update<F: FnOnce(&mut Pipeline)>(
    conn: &WriteTx,
    id: i64,
    change: F,
) -> StoreResult<PipelineRow> {
    let before = by_id(conn, id)?;
    let mut p = before.pipeline.clone();
    change(&mut p);
    if p == before.pipeline {
        return Ok(before);
    }
    p.updated = now_unix();
    conn.cached_exec(
        "UPDATE pipelines SET status = ?2, data = ?3 WHERE id = ?1",
        params![id, p.status.as_str(), record_of(&p)?],
    )?;
    let org_id = org_of(conn, before.repo_id)?;
    events::append_update(
        conn,
        PIPELINES,
        id,
        &before.pipeline,
        &p,
        owner(before.repo_id, org_id),
    )?;
    Ok(PipelineRow {
        repo_id: before.repo_id,
        pipeline: p,
    })
}

/// Loads a workflow, applies `change` to its own fields (not its steps), stores it and
/// records `workflows.updated`.
pub fn update_workflow<F: FnOnce(&mut Workflow)>(
    conn: &WriteTx,
    id: i64,
    change: F,
) -> StoreResult<Workflow> {
    let mut before = workflow(conn, id)?;
    let children = std::mem::take(&mut before.children);
    let mut w = before.clone();
    change(&mut w);
    if w != before {
        conn.cached_exec(
            "UPDATE workflows SET state = ?2, error = ?3, started = ?4, finished = ?5, agent_id = ?6, platform = ?7
             WHERE id = ?1",
            params![id, w.state.as_str(), w.error, w.started, w.finished, w.agent_id, w.platform],
        )?;
        let repo_id = by_id(conn, w.pipeline_id)?.repo_id;
        let org_id = org_of(conn, repo_id)?;
        events::append_update(conn, WORKFLOWS, id, &before, &w, owner(repo_id, org_id))?;
    }
    w.children = children;
    Ok(w)
}

/// Loads a step, applies `change`, stores it and records `steps.updated`.
pub fn update_step<F: FnOnce(&mut Step)>(conn: &WriteTx, id: i64, change: F) -> StoreResult<Step> {
    let before = step(conn, id)?;
    let mut s = before.clone();
    change(&mut s);
    if s != before {
        conn.cached_exec(
            "UPDATE steps SET state = ?2, error = ?3, exit_code = ?4, started = ?5, finished = ?6 WHERE id = ?1",
            params![id, s.state.as_str(), s.error, s.exit_code, s.started, s.finished],
        )?;
        let repo_id = by_id(conn, s.pipeline_id)?.repo_id;
        let org_id = org_of(conn, repo_id)?;
        events::append_update(conn, STEPS, id, &before, &s, owner(repo_id, org_id))?;
    }
    Ok(s)
}

/// Deletes a pipeline with its workflows, steps and queue entries; returns the step ids
/// (whose logs live in the logs database).
pub fn delete(conn: &WriteTx, id: i64) -> StoreResult<Vec<i64>> {
    let row = by_id(conn, id)?;
    let org_id = org_of(conn, row.repo_id)?;
    let wfs = workflows(conn, id)?;
    let mut step_ids = Vec::new();
    for wf in &wfs {
        for s in &wf.children {
            events::append(
                conn,
                STEPS,
                Action::Deleted,
                s.id,
                s,
                owner(row.repo_id, org_id),
            )?;
            step_ids.push(s.id);
        }
        let mut bare = wf.clone();
        bare.children.clear();
        events::append(
            conn,
            WORKFLOWS,
            Action::Deleted,
            wf.id,
            &bare,
            owner(row.repo_id, org_id),
        )?;
    }
    conn.cached_exec("DELETE FROM tasks WHERE pipeline_id = ?1", [id])?;
    conn.cached_exec("DELETE FROM steps WHERE pipeline_id = ?1", [id])?;
    conn.cached_exec("DELETE FROM workflows WHERE pipeline_id = ?1", [id])?;
    conn.cached_exec("DELETE FROM pipeline_configs WHERE pipeline_id = ?1", [id])?;
    conn.cached_exec("DELETE FROM pipelines WHERE id = ?1", [id])?;
    events::append(
        conn,
        PIPELINES,
        Action::Deleted,
        id,
        &row.pipeline,
        owner(row.repo_id, org_id),
    )?;
    Ok(step_ids)
}

/// Which of `ids` are steps that exist.
pub fn existing_step_ids(conn: &Tx, ids: &[i64]) -> StoreResult<Vec<i64>> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM steps WHERE id = ?1")?;
    let mut out = Vec::new();
    for id in ids {
        if stmt.exists([id])? {
            out.push(*id);
        }
    }
    Ok(out)
}

/// Step ids of every pipeline of a repository (for log clean-up when it is removed).
pub fn step_ids_of_repo(conn: &Tx, repo_id: i64) -> StoreResult<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT s.id FROM steps s JOIN pipelines p ON p.id = s.pipeline_id WHERE p.repo_id = ?1",
    )?;
    let rows = stmt.query_map([repo_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Ids of the pipelines of a repository, oldest first.
pub fn ids_of_repo(conn: &Tx, repo_id: i64) -> StoreResult<Vec<i64>> {
    let mut stmt =
        conn.prepare_cached("SELECT id FROM pipelines WHERE repo_id = ?1 ORDER BY id")?;
    let rows = stmt.query_map([repo_id], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> WriteTx<'static> {
        crate::sql::fresh_tx()
    }

    /// `create` returns its rows as inserted instead of reading them back: they must be what
    /// a read returns, column defaults and JSON round trip included.
    #[test]
    fn a_created_pipeline_is_what_a_read_returns() {
        let conn = db();
        let pipeline = Pipeline {
            parent: 3,
            event: WebhookEvent::parse("tag").unwrap(),
            event_reason: vec!["because".into()],
            status: Status::Pending,
            errors: vec![PipelineError {
                kind: "linter".into(),
                message: "a warning".into(),
                is_warning: true,
                data: serde_json::json!({"field": "steps"}),
            }],
            deploy_to: "prod".into(),
            commit: Commit {
                sha: "a".repeat(40),
                branch: "main".into(),
                git_ref: "refs/tags/v1".into(),
                message: "release\n\nbody".into(),
                changed_files: vec!["a.txt".into(), "b/c.txt".into()],
                ..Commit::default()
            },
            rerun_count: 1,
            variables: [("K".to_string(), "v".to_string())].into(),
            cron: "nightly".into(),
            version: "3.17.0+woodlark".into(),
            title: "release".into(),
            ..Pipeline::default()
        };
        let workflows = [
            NewWorkflow {
                name: "build".into(),
                state: Status::Pending,
                environ: [("GOOS".to_string(), "linux".to_string())].into(),
                sealed_payload: "sealed".into(),
                steps: vec![
                    ("clone".into(), "clone".into()),
                    ("test".into(), "commands".into()),
                ],
            },
            NewWorkflow {
                name: "deploy".into(),
                state: Status::Blocked,
                environ: BTreeMap::new(),
                sealed_payload: "sealed".into(),
                steps: vec![("push".into(), "plugin".into())],
            },
        ];
        let created = create(
            &conn,
            7,
            take_next_number(&conn, 7).unwrap(),
            &pipeline,
            &workflows,
            &[],
        )
        .unwrap();
        let read = full(&conn, 7, created.pipeline.number).unwrap();
        assert_eq!(created.repo_id, read.repo_id);
        assert_eq!(created.pipeline, read.pipeline);
        let steps: Vec<i64> = read
            .pipeline
            .workflows
            .iter()
            .flatten()
            .map(|w| w.children.len() as i64)
            .collect();
        assert_eq!(steps, [2, 1]);
        // Without workflows (an error pipeline), `workflows` is absent either way.
        let bare = create(
            &conn,
            7,
            take_next_number(&conn, 7).unwrap(),
            &pipeline,
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(
            bare.pipeline,
            full(&conn, 7, bare.pipeline.number).unwrap().pipeline
        );
    }

    /// Only older active pipelines of the same repository, event and branch (pushes) or ref
    /// (other events) are superseded.
    #[test]
    fn superseded_pipelines_are_older_active_ones_of_the_same_branch_or_ref() {
        let conn = db();
        let make = |repo: i64, event: &str, branch: &str, git_ref: &str, status: Status| {
            let p = Pipeline {
                status,
                event: WebhookEvent::parse(event).unwrap(),
                commit: Commit {
                    branch: branch.into(),
                    git_ref: git_ref.into(),
                    ..Commit::default()
                },
                ..Pipeline::default()
            };
            create(
                &conn,
                repo,
                take_next_number(&conn, repo).unwrap(),
                &p,
                &[],
                &[],
            )
            .unwrap()
            .pipeline
        };
        let old_push = make(7, "push", "main", "refs/heads/main", Status::Running);
        let _done = make(7, "push", "main", "refs/heads/main", Status::Success);
        let _other_branch = make(7, "push", "dev", "refs/heads/dev", Status::Pending);
        let _other_event = make(7, "manual", "main", "refs/heads/main", Status::Pending);
        let old_tag = make(7, "tag", "main", "refs/tags/v1", Status::Blocked);
        let _other_repo = make(8, "push", "main", "refs/heads/main", Status::Pending);
        let newer = make(7, "push", "main", "refs/heads/main", Status::Pending);
        assert_eq!(superseded_by(&conn, 7, &newer).unwrap(), [old_push.id]);
        let newer_tag = make(7, "tag", "other", "refs/tags/v1", Status::Pending);
        assert_eq!(superseded_by(&conn, 7, &newer_tag).unwrap(), [old_tag.id]);
        assert!(superseded_by(&conn, 7, &old_push).unwrap().is_empty());
    }

    /// A badge shows the newest pipeline of its branch among its events, past any number
    /// waiting for approval (not only past those on the newest page).
    #[test]
    fn a_badge_shows_the_newest_pipeline_not_waiting_for_approval() {
        let conn = db();
        let make = |event: &str, branch: &str, status: Status| {
            let p = Pipeline {
                status,
                event: WebhookEvent::parse(event).unwrap(),
                commit: Commit {
                    branch: branch.into(),
                    ..Commit::default()
                },
                ..Pipeline::default()
            };
            let number = take_next_number(&conn, 7).unwrap();
            create(&conn, 7, number, &p, &[], &[]).unwrap().pipeline
        };
        let push =
            |events: &[&str]| -> Vec<String> { events.iter().map(|e| e.to_string()).collect() };
        let newest = |branch: &str, events: &[&str]| {
            newest_for_badge(&conn, 7, branch, &push(events))
                .unwrap()
                .map(|p| p.number)
        };
        assert_eq!(newest("main", &["push"]), None);
        let failed = make("push", "main", Status::Failure);
        let tag = make("tag", "main", Status::Success);
        let _dev = make("push", "dev", Status::Success);
        for _ in 0..60 {
            make("push", "main", Status::Blocked);
        }
        assert_eq!(newest("main", &["push"]), Some(failed.number));
        assert_eq!(newest("main", &["push", "tag"]), Some(tag.number));
        assert_eq!(newest("main", &["manual"]), None);
        let declined = make("push", "main", Status::Declined);
        assert_eq!(newest("main", &["push"]), Some(declined.number));
        assert_eq!(newest("dev", &["push"]), Some(3));
        let of_branch = |branch: &str| {
            newest_of_branch(&conn, 7, branch)
                .unwrap()
                .map(|p| p.number)
        };
        assert_eq!(of_branch("main"), Some(declined.number));
        assert_eq!(of_branch("dev"), Some(3));
        assert_eq!(of_branch("nope"), None);
    }

    /// The list served from stored records is the list decoded and encoded again, field for
    /// field, text escapes included.
    #[test]
    fn stored_json_list_renders_what_the_typed_list_does() {
        let conn = db();
        for message in ["plain", "quotes \" and \\ and\nnewline, ünïcødé 🚀 \u{1}"] {
            let pipeline = Pipeline {
                status: Status::Pending,
                event: WebhookEvent::Push,
                commit: Commit {
                    branch: "main".into(),
                    message: message.into(),
                    changed_files: vec!["a b/c.rs".into()],
                    ..Commit::default()
                },
                variables: [("K".to_string(), "v \"x\"".to_string())].into(),
                ..Pipeline::default()
            };
            create(
                &conn,
                7,
                take_next_number(&conn, 7).unwrap(),
                &pipeline,
                &[],
                &[],
            )
            .unwrap();
        }
        let filter = ListFilter::default();
        let typed = serde_json::to_value(list(&conn, 7, &filter, 1, 50).unwrap()).unwrap();
        let raw = list_json(&conn, 7, &filter, 1, 50).unwrap();
        let raw: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(raw, typed);
        assert_eq!(raw[0]["number"], 2);
        assert!(raw[0].get("workflows").is_none());
        // Paging and filters apply to both alike.
        let one: serde_json::Value =
            serde_json::from_str(&list_json(&conn, 7, &filter, 2, 1).unwrap()).unwrap();
        assert_eq!(one.as_array().map(Vec::len), Some(1));
        assert_eq!(one[0]["number"], 1);
        let none = ListFilter {
            branch: Some("dev".into()),
            ..ListFilter::default()
        };
        assert_eq!(list_json(&conn, 7, &none, 1, 50).unwrap(), "[]");
    }

    /// A pipeline with its workflows and steps, spliced, is the typed rendering.
    #[test]
    fn stored_json_pipeline_with_steps_renders_what_the_typed_one_does() {
        let conn = db();
        let pipeline = Pipeline {
            status: Status::Running,
            commit: Commit {
                message: "quotes \" and \\ ünï".into(),
                ..Commit::default()
            },
            ..Pipeline::default()
        };
        let workflow = |name: &str, steps: &[&str]| NewWorkflow {
            name: name.into(),
            state: Status::Pending,
            environ: [("K".to_string(), "v".to_string())].into(),
            sealed_payload: String::new(),
            steps: steps
                .iter()
                .map(|s| (s.to_string(), "commands".into()))
                .collect(),
        };
        let with = create(
            &conn,
            7,
            take_next_number(&conn, 7).unwrap(),
            &pipeline,
            &[
                workflow("build", &["clone", "test"]),
                workflow("lint", &["clone", "run", "x"]),
            ],
            &[],
        )
        .unwrap();
        let without = create(
            &conn,
            7,
            take_next_number(&conn, 7).unwrap(),
            &pipeline,
            &[],
            &[],
        )
        .unwrap();
        for number in [with.pipeline.number, without.pipeline.number] {
            let typed = serde_json::to_value(full(&conn, 7, number).unwrap().pipeline).unwrap();
            let raw: serde_json::Value =
                serde_json::from_str(&full_json(&conn, 7, number).unwrap()).unwrap();
            assert_eq!(raw, typed);
        }
        let raw: serde_json::Value =
            serde_json::from_str(&full_json(&conn, 7, with.pipeline.number).unwrap()).unwrap();
        assert_eq!(raw["workflows"][1]["children"][2]["name"], "x");
        assert!(matches!(full_json(&conn, 7, 99), Err(StoreError::NotFound)));
    }

    /// A page is rendered into a buffer sized once from its first row. One shorter than
    /// asked for does not keep the room it was given (the rendered-body cache counts
    /// lengths), and a status the server never writes is still escaped.
    #[test]
    fn a_rendered_page_keeps_no_unused_room_and_escapes_any_status() {
        let conn = db();
        for (number, status) in [(1, "success"), (2, "we\"ird\\")] {
            conn.execute(
                "INSERT INTO pipelines (repo_id, number, status, event, branch, ref, created, data)
                 VALUES (1, ?1, ?2, 'push', 'main', 'refs/heads/main', 0, '{\"message\":\"m\"}')",
                params![number, status],
            )
            .unwrap();
        }
        let raw = list_json(&conn, 1, &ListFilter::default(), 1, 50).unwrap();
        assert!(
            raw.capacity() <= raw.len() + raw.len() / 4,
            "{} bytes kept for {}",
            raw.capacity(),
            raw.len()
        );
        let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v[0]["status"], "we\"ird\\");
        assert_eq!(v[1]["status"], "success");
        assert_eq!(v[1]["message"], "m");
    }

    #[test]
    fn older_records_are_completed_by_the_migration() {
        let conn = db();
        conn.execute(
            "INSERT INTO pipelines (repo_id, number, status, event, branch, ref, created, data)
             VALUES (1, 1, 'success', 'push', 'main', 'refs/heads/main', 0, '{\"message\":\"old\"}')",
            [],
        )
        .unwrap();
        normalise_records(&conn).unwrap();
        let raw = list_json(&conn, 1, &ListFilter::default(), 1, 50).unwrap();
        let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let v = &v[0];
        assert_eq!(v["message"], "old");
        assert_eq!(v["status"], "success");
        assert_eq!(
            v["errors"],
            serde_json::json!([]),
            "a field the record lacked"
        );
        assert!(
            v.get("pr_labels").is_none(),
            "empty fields are left out: {v}"
        );
    }
}
