//! Organisations: namespaces that own repositories. Every user has one of its own (`is_user`).

use crate::{OptionalExtension, Row};
use crate::{Tx, WriteTx};
use rusqlite::params;
use serde::Serialize;

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult};

pub const RECORD_TYPE: events::RecordType = events::RecordType::Orgs;

/// An organisation as the API renders it (Woodpecker's `Org`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Org {
    pub id: i64,
    pub forge_id: i64,
    pub name: String,
    pub is_user: bool,
}

const COLUMNS: &str = "id, forge_id, name, is_user";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Org> {
    Ok(Org {
        id: r.get(0)?,
        forge_id: r.get(1)?,
        name: r.get(2)?,
        is_user: r.get(3)?,
    })
}

fn owner(org: &Org) -> Owner {
    Owner {
        org_id: Some(org.id),
        repo_id: None,
    }
}

pub fn by_id(conn: &Tx, id: i64) -> StoreResult<Org> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM orgs WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

pub fn by_name(conn: &Tx, forge_id: i64, name: &str) -> StoreResult<Option<Org>> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM orgs WHERE forge_id = ?1 AND name = ?2"),
        params![forge_id, name],
        from_row,
    )
    .optional()
}

/// Creates the personal organisation of a new user, recording `orgs.created`.
pub fn create_for_user(conn: &WriteTx, forge_id: i64, login: &str) -> StoreResult<Org> {
    if let Some(existing) = by_name(conn, forge_id, login)? {
        return Err(StoreError::Conflict(format!(
            "an organization named {:?} already exists (id {})",
            existing.name, existing.id
        )));
    }
    insert(conn, forge_id, login, true)
}

/// The organisation `name` of a forge, created (recording `orgs.created`) if it is new.
/// A user's personal organisation is found by the user's login.
pub fn find_or_create(conn: &WriteTx, forge_id: i64, name: &str) -> StoreResult<Org> {
    if let Some(org) = by_name(conn, forge_id, name)? {
        return Ok(org);
    }
    // Users created without a forge (forge_id 0) own their namespace on every forge.
    if let Some(org) = by_name(conn, 0, name)?
        && org.is_user
    {
        return Ok(org);
    }
    insert(conn, forge_id, name, false)
}

/// Inserts an organisation (a user's personal one when `is_user`) and records `orgs.created`.
fn insert(conn: &WriteTx, forge_id: i64, name: &str, is_user: bool) -> StoreResult<Org> {
    conn.cached_exec(
        "INSERT INTO orgs (forge_id, name, is_user) VALUES (?1, ?2, ?3)",
        params![forge_id, name, is_user],
    )?;
    let org = by_id(conn, conn.last_insert_rowid()?)?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        org.id,
        &org,
        owner(&org),
    )?;
    Ok(org)
}

/// By name on any forge (lowest id first), for look-ups by full name.
pub fn by_any_name(conn: &Tx, name: &str) -> StoreResult<Org> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM orgs WHERE name = ?1 ORDER BY id LIMIT 1"),
        [name],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

pub fn list(conn: &Tx, page: u32, per_page: u32) -> StoreResult<Vec<Org>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM orgs ORDER BY name, id LIMIT ?1 + 0 OFFSET ?2"
    ))?;
    let rows = stmt.query_map(params![per_page, offset], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Deletes an organisation that owns no repositories (409 otherwise), together with what
/// belongs only to it. Records `orgs.deleted`.
pub fn delete_with_contents(conn: &WriteTx, id: i64) -> StoreResult<()> {
    let repos: i64 =
        conn.cached_row("SELECT count(*) FROM repos WHERE org_id = ?1", [id], |r| {
            r.get(0)
        })?;
    if repos > 0 {
        return Err(StoreError::Conflict(format!(
            "organization {id} still owns {repos} repositories; delete them first"
        )));
    }
    super::secrets::delete_scope(conn, id, 0)?;
    super::registries::delete_scope(conn, id, 0)?;
    super::agents::delete_scope(conn, id)?;
    delete(conn, id)
}

/// Deletes an organisation, recording `orgs.deleted`.
pub fn delete(conn: &WriteTx, id: i64) -> StoreResult<()> {
    let org = by_id(conn, id)?;
    conn.cached_exec("DELETE FROM orgs WHERE id = ?1", [id])?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Deleted,
        org.id,
        &org,
        owner(&org),
    )?;
    Ok(())
}
