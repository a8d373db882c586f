//! Organisations: namespaces that own repositories. Every user has one of its own (`is_user`).

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult};

pub const RECORD_TYPE: &str = "orgs";

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

pub fn by_id(conn: &Connection, id: i64) -> StoreResult<Org> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM orgs WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

pub fn by_name(conn: &Connection, forge_id: i64, name: &str) -> StoreResult<Option<Org>> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM orgs WHERE forge_id = ?1 AND name = ?2"),
            params![forge_id, name],
            from_row,
        )
        .optional()?)
}

/// Creates the personal organisation of a new user, recording `orgs.created`.
pub fn create_for_user(conn: &Connection, forge_id: i64, login: &str) -> StoreResult<Org> {
    if let Some(existing) = by_name(conn, forge_id, login)? {
        return Err(StoreError::Conflict(format!(
            "an organization named {:?} already exists (id {})",
            existing.name, existing.id
        )));
    }
    conn.execute(
        "INSERT INTO orgs (forge_id, name, is_user) VALUES (?1, ?2, 1)",
        params![forge_id, login],
    )?;
    let org = by_id(conn, conn.last_insert_rowid())?;
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

/// Deletes an organisation, recording `orgs.deleted`.
pub fn delete(conn: &Connection, id: i64) -> StoreResult<()> {
    let org = by_id(conn, id)?;
    conn.execute("DELETE FROM orgs WHERE id = ?1", [id])?;
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
