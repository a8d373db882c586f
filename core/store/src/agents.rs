//! Agents: the workers that run pipelines. Global agents have `org_id = -1`; organisation
//! agents run only that organisation's work. A system agent (registered with the shared agent
//! secret, later) has both `owner_id` and `org_id` at -1.
//!
//! Each agent has a random token: `token_hash` (hex SHA-256) finds an agent by the token it
//! presents ([`by_token`]); `token` keeps the token **sealed** (purpose [`SEAL_PURPOSE`]) so the
//! API can show it again to those who manage the agent. The store never sees plaintext tokens
//! except in [`by_token`], and the rendering it returns (also what events record) has an empty
//! `token`; handlers fill it in after opening the sealed value.

use crate::{Tx, WriteTx};
use std::collections::BTreeMap;

use crate::{OptionalExtension, Row};
use rusqlite::params;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult, now_unix};

pub const RECORD_TYPE: events::RecordType = events::RecordType::Agents;

/// Sealing purpose of agent tokens.
pub const SEAL_PURPOSE: &str = "ci-agent-token";

/// "Not set" for `owner_id` and `org_id` (upstream's `IDNotSet`).
pub const ID_NOT_SET: i64 = -1;

/// Longest agent name accepted.
pub const MAX_NAME: usize = 255;

/// Migration: the `limits` column.
pub const ADD_LIMITS: &str = "ALTER TABLE agents ADD COLUMN limits TEXT NOT NULL DEFAULT '';";

/// Woodpecker's `Agent`, and how it bounds its steps (`limits`, Woodlark's own field).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agent {
    pub id: i64,
    pub created: i64,
    pub updated: i64,
    pub name: String,
    pub owner_id: i64,
    pub token: String,
    pub last_contact: i64,
    pub last_work: i64,
    pub platform: String,
    pub backend: String,
    pub capacity: i64,
    pub version: String,
    pub no_schedule: bool,
    pub custom_labels: BTreeMap<String, String>,
    pub org_id: i64,
    /// How each step's memory, processes and CPUs are bounded, or `none: <why>` (a local
    /// backend on a host without usable cgroups). Woodlark's own field, so it is named as
    /// such on the wire and left out until the agent reports it (upstream's record as is).
    #[serde(rename = "woodlark_limits", skip_serializing_if = "String::is_empty")]
    pub limits: String,
}

/// An agent with its sealed token.
#[derive(Debug, Clone)]
pub struct AgentRow {
    /// `token` is empty here.
    pub agent: Agent,
    pub sealed_token: String,
}

#[derive(Debug, Clone, Default)]
pub struct NewAgent {
    pub name: String,
    pub no_schedule: bool,
    pub owner_id: i64,
    /// [`ID_NOT_SET`] for a global agent.
    pub org_id: i64,
    /// SHA-256 of the token ([`token_hash`]).
    pub token_hash: String,
    pub sealed_token: String,
}

/// What an agent's manager may change.
#[derive(Debug, Clone, Default)]
pub struct AgentChange {
    pub name: Option<String>,
    pub no_schedule: Option<bool>,
}

/// The id of the system agent (owner and org -1) named `name`, the oldest if several.
pub fn system_agent_id(conn: &Tx, name: &str) -> StoreResult<Option<i64>> {
    conn
        .cached_row(
            "SELECT id FROM agents WHERE name = ?1 AND owner_id = -1 AND org_id = -1 ORDER BY id LIMIT 1",
            [name],
            |r| r.get(0),
        )
        .optional()
}

/// Whether agent `id` may be given work now: `None` when it no longer exists, else the
/// opposite of its `no_schedule` flag.
pub fn schedulable(conn: &Tx, id: i64) -> StoreResult<Option<bool>> {
    Ok(conn
        .cached_row("SELECT no_schedule FROM agents WHERE id = ?1", [id], |r| {
            r.get::<_, bool>(0)
        })
        .optional()?
        .map(|paused| !paused))
}

/// Moves the agent's last contact and last work times forward (never back).
pub fn record_contact(conn: &WriteTx, id: i64, contact: i64, work: i64) -> StoreResult<()> {
    conn.cached_exec(
        "UPDATE agents
         SET last_contact = CASE WHEN last_contact > ?2 THEN last_contact ELSE ?2 END,
             last_work = CASE WHEN last_work > ?3 THEN last_work ELSE ?3 END
         WHERE id = ?1",
        params![id, contact, work],
    )?;
    Ok(())
}

/// The look-up key of a token: lowercase hex SHA-256.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A non-empty name of printable characters.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("agent name is required".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!("agent name must be at most {MAX_NAME} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("agent name must not contain control characters".into());
    }
    Ok(())
}

const COLUMNS: &str = "id, created, updated, name, owner_id, org_id, token, last_contact, \
     last_work, platform, backend, capacity, version, no_schedule, custom_labels, limits";

fn from_row(r: &Row<'_>) -> rusqlite::Result<AgentRow> {
    let custom_labels = super::json_column(r, 14)?;
    Ok(AgentRow {
        agent: Agent {
            id: r.get(0)?,
            created: r.get(1)?,
            updated: r.get(2)?,
            name: r.get(3)?,
            owner_id: r.get(4)?,
            org_id: r.get(5)?,
            token: String::new(),
            last_contact: r.get(7)?,
            last_work: r.get(8)?,
            platform: r.get(9)?,
            backend: r.get(10)?,
            capacity: r.get(11)?,
            version: r.get(12)?,
            no_schedule: r.get(13)?,
            custom_labels,
            limits: r.get(15)?,
        },
        sealed_token: r.get(6)?,
    })
}

fn owner(agent: &Agent) -> Owner {
    Owner {
        org_id: (agent.org_id > 0).then_some(agent.org_id),
        repo_id: None,
    }
}

pub fn by_id(conn: &Tx, id: i64) -> StoreResult<AgentRow> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM agents WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// The agent a token belongs to, if any (for the agent protocol).
pub fn by_token(conn: &Tx, token: &str) -> StoreResult<Option<AgentRow>> {
    if token.is_empty() {
        return Ok(None);
    }
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM agents WHERE token_hash = ?1"),
        [token_hash(token)],
        from_row,
    )
    .optional()
}

/// One page of every agent (global and organisation ones), by id.
pub fn list(conn: &Tx, page: u32, per_page: u32) -> StoreResult<Vec<AgentRow>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM agents ORDER BY id LIMIT ?1 + 0 OFFSET ?2"
    ))?;
    let rows = stmt.query_map(params![per_page, offset], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One page of an organisation's agents, by id.
pub fn list_for_org(
    conn: &Tx,
    org_id: i64,
    page: u32,
    per_page: u32,
) -> StoreResult<Vec<AgentRow>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM agents WHERE org_id = ?1 ORDER BY id LIMIT ?2 + 0 OFFSET ?3"
    ))?;
    let rows = stmt.query_map(params![org_id, per_page, offset], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Creates an agent. Records `agents.created` (without the token).
pub fn create(conn: &WriteTx, new: &NewAgent) -> StoreResult<AgentRow> {
    let now = now_unix();
    conn.cached_exec(
        "INSERT INTO agents (created, updated, name, owner_id, org_id, token_hash, token, no_schedule)
         VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            now,
            new.name,
            new.owner_id,
            new.org_id,
            new.token_hash,
            new.sealed_token,
            new.no_schedule
        ],
    )?;
    let row = by_id(conn, conn.last_insert_rowid()?)?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        row.agent.id,
        &row.agent,
        owner(&row.agent),
    )?;
    Ok(row)
}

/// Applies `change`; bumps `updated` when something changed. Records `agents.updated`.
pub fn update(conn: &WriteTx, id: i64, change: &AgentChange) -> StoreResult<AgentRow> {
    let before = by_id(conn, id)?;
    let name = change.name.as_ref().unwrap_or(&before.agent.name);
    let no_schedule = change.no_schedule.unwrap_or(before.agent.no_schedule);
    if *name == before.agent.name && no_schedule == before.agent.no_schedule {
        return Ok(before);
    }
    conn.cached_exec(
        "UPDATE agents SET name = ?2, no_schedule = ?3, updated = ?4 WHERE id = ?1",
        params![id, name, no_schedule, now_unix()],
    )?;
    recorded_update(conn, &before)
}

/// Reads the agent back after an update and records `agents.updated` from `before` to it.
fn recorded_update(conn: &WriteTx, before: &AgentRow) -> StoreResult<AgentRow> {
    let id = before.agent.id;
    let after = by_id(conn, id)?;
    events::append_update(
        conn,
        RECORD_TYPE,
        id,
        &before.agent,
        &after.agent,
        owner(&after.agent),
    )?;
    Ok(after)
}

/// Stores what an agent reports about itself. Writes (and records `agents.updated`) only when
/// something changed, so polling agents cost no writes.
pub fn report(conn: &WriteTx, id: i64, reported: &Reported) -> StoreResult<()> {
    let before = by_id(conn, id)?;
    if reported.matches(&before.agent) {
        return Ok(());
    }
    conn.cached_exec(
        "UPDATE agents SET platform = ?2, backend = ?3, capacity = ?4, version = ?5, limits = ?6,
                           updated = ?7 WHERE id = ?1",
        params![
            id,
            reported.platform,
            reported.backend,
            reported.capacity,
            reported.version,
            reported.limits,
            now_unix()
        ],
    )?;
    recorded_update(conn, &before).map(drop)
}

/// What an agent says about itself.
#[derive(Debug, Clone, Default)]
pub struct Reported {
    pub platform: String,
    pub backend: String,
    pub capacity: i64,
    pub version: String,
    pub limits: String,
}

impl Reported {
    /// Whether `agent` already records all of it.
    pub fn matches(&self, agent: &Agent) -> bool {
        agent.platform == self.platform
            && agent.backend == self.backend
            && agent.capacity == self.capacity
            && agent.version == self.version
            && agent.limits == self.limits
    }
}

/// Deletes an agent. Records `agents.deleted`.
pub fn delete(conn: &WriteTx, id: i64) -> StoreResult<Agent> {
    let row = by_id(conn, id)?;
    conn.cached_exec("DELETE FROM agents WHERE id = ?1", [id])?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Deleted,
        id,
        &row.agent,
        owner(&row.agent),
    )?;
    Ok(row.agent)
}

/// Deletes every agent of an organisation being deleted, recording `agents.deleted` each.
pub fn delete_scope(conn: &WriteTx, org_id: i64) -> StoreResult<usize> {
    if org_id == ID_NOT_SET {
        return Ok(0);
    }
    let ids: Vec<i64> = {
        let mut stmt =
            conn.prepare_cached("SELECT id FROM agents WHERE org_id = ?1 ORDER BY id")?;
        let rows = stmt.query_map([org_id], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for id in &ids {
        delete(conn, *id)?;
    }
    Ok(ids.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    fn conn() -> WriteTx<'static> {
        crate::sql::fresh_tx()
    }

    fn new(name: &str, org_id: i64, token: &str) -> NewAgent {
        NewAgent {
            name: name.into(),
            no_schedule: false,
            owner_id: 1,
            org_id,
            token_hash: token_hash(token),
            sealed_token: format!("v1:sealed-{token}"),
        }
    }

    #[test]
    fn token_lookup() {
        let c = conn();
        let a = create(&c, &new("a", ID_NOT_SET, "tok-a")).unwrap();
        create(&c, &new("b", 4, "tok-b")).unwrap();
        let found = by_token(&c, "tok-a").unwrap().unwrap();
        assert_eq!(found.agent.id, a.agent.id);
        assert_eq!(found.sealed_token, "v1:sealed-tok-a");
        assert!(by_token(&c, "nope").unwrap().is_none());
        assert!(by_token(&c, "").unwrap().is_none());
        assert_eq!(token_hash("x").len(), 64);
    }

    #[test]
    fn update_list_and_delete_scope() {
        let c = conn();
        let a = create(&c, &new("a", ID_NOT_SET, "1")).unwrap();
        assert_eq!(a.agent.org_id, -1);
        assert!(a.agent.created > 0 && a.agent.created == a.agent.updated);
        create(&c, &new("b", 4, "2")).unwrap();
        create(&c, &new("c", 4, "3")).unwrap();
        assert_eq!(list(&c, 1, 50).unwrap().len(), 3);
        assert_eq!(list(&c, 2, 2).unwrap().len(), 1);
        assert_eq!(list_for_org(&c, 4, 1, 50).unwrap().len(), 2);
        let same = update(&c, a.agent.id, &AgentChange::default()).unwrap();
        assert_eq!(same.agent, a.agent);
        let change = AgentChange {
            name: Some("renamed".into()),
            no_schedule: Some(true),
        };
        let after = update(&c, a.agent.id, &change).unwrap();
        assert!(after.agent.no_schedule);
        assert_eq!(delete_scope(&c, 4).unwrap(), 2);
        assert_eq!(delete_scope(&c, ID_NOT_SET).unwrap(), 0);
        assert_eq!(list(&c, 1, 50).unwrap().len(), 1);
        let evs = events::list_after(&c, 0, 20).unwrap();
        let types: Vec<_> = evs.iter().map(|e| e.event_type()).collect();
        assert_eq!(
            types,
            [
                "agents.created",
                "agents.created",
                "agents.created",
                "agents.updated",
                "agents.deleted",
                "agents.deleted"
            ]
        );
        assert_eq!(
            evs[3].previous.as_ref().unwrap()["name"],
            serde_json::json!("a")
        );
        assert_eq!(evs[4].org_id, Some(4));
        assert!(evs.iter().all(|e| e.object["token"] == ""));
    }
}
