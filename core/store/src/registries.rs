//! Container registry credentials at the same three scopes as secrets
//! ([`ResourceScope`]), unique by `address` within a scope.
//!
//! The password is stored **sealed** (purpose [`SEAL_PURPOSE`]) and never rendered: the API
//! shape ([`Registry`]) always carries `"password": ""`, as upstream's `Copy()` does. A
//! password-only change is still recorded as `registries.updated` (without
//! `previous_attributes`). `readonly` marks registries that come from outside the database
//! (upstream: extensions and docker config files); registries made through the API are never
//! read-only.

use crate::{OptionalExtension, Row};
use crate::{Tx, WriteTx};
use rusqlite::params;
use serde::Serialize;

use super::events::{self, Action};
use super::secrets::ResourceScope;
use super::{PIPELINE_SCOPES, StoreError, StoreResult};

pub const RECORD_TYPE: events::RecordType = events::RecordType::Registries;

/// Sealing purpose of registry passwords.
pub const SEAL_PURPOSE: &str = "ci-registry-password";

/// Longest address / username accepted.
pub const MAX_FIELD: usize = 2000;

/// Woodpecker's `Registry` as the API renders it (`password` always empty).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Registry {
    pub id: i64,
    pub org_id: i64,
    pub repo_id: i64,
    pub address: String,
    pub username: String,
    pub password: String,
    pub readonly: bool,
}

/// A registry with its sealed password, for the server's own use (image pulls).
#[derive(Debug, Clone)]
pub struct RegistryRow {
    pub registry: Registry,
    pub sealed_password: String,
}

#[derive(Debug, Clone, Default)]
pub struct NewRegistry {
    pub address: String,
    pub username: String,
    pub sealed_password: String,
}

/// A partial update: `None` leaves a field as it is; a new `address` renames the registry.
#[derive(Debug, Clone, Default)]
pub struct RegistryChange {
    pub address: Option<String>,
    pub username: Option<String>,
    pub sealed_password: Option<String>,
}

/// A registry address: non-empty, no whitespace or control characters (upstream only checks
/// that it parses as a URL, which accepts almost anything).
pub fn validate_address(address: &str) -> Result<(), String> {
    if address.is_empty() {
        return Err("invalid registry address: empty address".into());
    }
    if address.len() > MAX_FIELD {
        return Err(format!(
            "invalid registry address: longer than {MAX_FIELD} characters"
        ));
    }
    if address.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "invalid registry address {address:?}: whitespace and control characters are not allowed"
        ));
    }
    Ok(())
}

const COLUMNS: &str = "id, org_id, repo_id, address, username, password, readonly";

fn from_row(r: &Row<'_>) -> rusqlite::Result<RegistryRow> {
    Ok(RegistryRow {
        registry: Registry {
            id: r.get(0)?,
            org_id: r.get(1)?,
            repo_id: r.get(2)?,
            address: r.get(3)?,
            username: r.get(4)?,
            password: String::new(),
            readonly: r.get(6)?,
        },
        sealed_password: r.get(5)?,
    })
}

/// A registry of a scope by address, with its sealed password.
pub fn find(conn: &Tx, scope: ResourceScope, address: &str) -> StoreResult<RegistryRow> {
    conn.cached_row(
        &format!(
            "SELECT {COLUMNS} FROM registries WHERE org_id = ?1 AND repo_id = ?2 AND address = ?3"
        ),
        params![scope.org_id, scope.repo_id, address],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

fn by_id(conn: &Tx, id: i64) -> StoreResult<RegistryRow> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM registries WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// One page of a scope's registries, by address.
pub fn list(
    conn: &Tx,
    scope: ResourceScope,
    page: u32,
    per_page: u32,
) -> StoreResult<Vec<Registry>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM registries WHERE org_id = ?1 AND repo_id = ?2
         ORDER BY address LIMIT ?3 + 0 OFFSET ?4"
    ))?;
    let rows = stmt.query_map(
        params![scope.org_id, scope.repo_id, per_page, offset],
        from_row,
    )?;
    Ok(rows
        .map(|r| r.map(|row| row.registry))
        .collect::<Result<_, _>>()?)
}

/// The registries a pipeline of `repo_id` (in `org_id`) may use: repository, organisation,
/// then global ones, merged by address in that order of precedence.
pub fn for_pipeline(conn: &Tx, org_id: i64, repo_id: i64) -> StoreResult<Vec<RegistryRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM registries
         WHERE {PIPELINE_SCOPES}
         ORDER BY address, repo_id DESC, org_id DESC"
    ))?;
    let rows = stmt.query_map(params![org_id, repo_id], from_row)?;
    let mut out = rows.collect::<Result<Vec<RegistryRow>, _>>()?;
    // Sorted by key with the most specific scope first: keep the first of each key.
    out.dedup_by(|later, first| later.registry.address == first.registry.address);
    Ok(out)
}

fn duplicate(address: &str) -> StoreError {
    StoreError::Conflict(format!(
        "a registry with address {address:?} already exists in this scope"
    ))
}

/// Creates a registry (409 if the address is taken in the scope). Records
/// `registries.created`.
pub fn create(conn: &WriteTx, scope: ResourceScope, new: &NewRegistry) -> StoreResult<Registry> {
    if find(conn, scope, &new.address).is_ok() {
        return Err(duplicate(&new.address));
    }
    conn.cached_exec(
        "INSERT INTO registries (org_id, repo_id, address, username, password, readonly)
         VALUES (?1, ?2, ?3, ?4, ?5, 0)",
        params![
            scope.org_id,
            scope.repo_id,
            new.address,
            new.username,
            new.sealed_password
        ],
    )?;
    let registry = by_id(conn, conn.last_insert_rowid()?)?.registry;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        registry.id,
        &registry,
        scope.owner(conn)?,
    )?;
    Ok(registry)
}

/// Applies `change` to the registry at `address` (409 if renamed onto another one). Records
/// `registries.updated`.
pub fn update(
    conn: &WriteTx,
    scope: ResourceScope,
    address: &str,
    change: &RegistryChange,
) -> StoreResult<Registry> {
    let before = find(conn, scope, address)?.registry;
    if let Some(new_address) = &change.address
        && new_address != address
        && find(conn, scope, new_address).is_ok()
    {
        return Err(duplicate(new_address));
    }
    conn.cached_exec(
        "UPDATE registries SET
            address = coalesce(?2, address),
            username = coalesce(?3, username),
            password = coalesce(?4, password)
         WHERE id = ?1",
        params![
            before.id,
            change.address,
            change.username,
            change.sealed_password
        ],
    )?;
    let after = by_id(conn, before.id)?.registry;
    let owner = scope.owner(conn)?;
    let recorded = events::append_update(conn, RECORD_TYPE, after.id, &before, &after, owner)?;
    if !recorded && change.sealed_password.is_some() {
        events::append(conn, RECORD_TYPE, Action::Updated, after.id, &after, owner)?;
    }
    Ok(after)
}

/// Deletes the registry at `address`. Records `registries.deleted`.
pub fn delete(conn: &WriteTx, scope: ResourceScope, address: &str) -> StoreResult<Registry> {
    let registry = find(conn, scope, address)?.registry;
    let owner = scope.owner(conn)?;
    super::delete_recorded(
        conn,
        "registries",
        RECORD_TYPE,
        registry.id,
        &registry,
        owner,
    )?;
    Ok(registry)
}

/// Deletes every registry of a scope (an organisation or repository being deleted),
/// recording one `registries.deleted` each. Returns how many were deleted.
pub fn delete_scope(conn: &WriteTx, org_id: i64, repo_id: i64) -> StoreResult<usize> {
    super::delete_scope_recorded(
        conn,
        "registries",
        RECORD_TYPE,
        ResourceScope { org_id, repo_id },
        COLUMNS,
        from_row,
        |row| (row.registry.id, &row.registry),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    fn conn() -> WriteTx<'static> {
        crate::sql::fresh_tx()
    }

    fn new(address: &str) -> NewRegistry {
        NewRegistry {
            address: address.into(),
            username: "u".into(),
            sealed_password: "v1:sealed".into(),
        }
    }

    #[test]
    fn addresses() {
        assert!(validate_address("docker.io").is_ok());
        assert!(validate_address("localhost:5000").is_ok());
        assert!(validate_address("https://ghcr.io/org").is_ok());
        assert!(validate_address("").is_err());
        assert!(validate_address("a b").is_err());
        assert!(validate_address("a\nb").is_err());
    }

    #[test]
    fn create_rename_conflict_and_events() {
        let c = conn();
        let scope = ResourceScope::repo(9);
        let r = create(&c, scope, &new("docker.io")).unwrap();
        assert_eq!(r.password, "");
        assert!(!r.readonly);
        create(&c, scope, &new("ghcr.io")).unwrap();
        assert!(matches!(
            create(&c, scope, &new("docker.io")),
            Err(StoreError::Conflict(_))
        ));
        let rename = RegistryChange {
            address: Some("ghcr.io".into()),
            ..RegistryChange::default()
        };
        assert!(matches!(
            update(&c, scope, "docker.io", &rename),
            Err(StoreError::Conflict(_))
        ));
        let rename = RegistryChange {
            address: Some("quay.io".into()),
            username: Some("bot".into()),
            ..RegistryChange::default()
        };
        let after = update(&c, scope, "docker.io", &rename).unwrap();
        assert_eq!(
            (after.address.as_str(), after.username.as_str()),
            ("quay.io", "bot")
        );
        let pw = RegistryChange {
            sealed_password: Some("v1:new".into()),
            ..RegistryChange::default()
        };
        update(&c, scope, "quay.io", &pw).unwrap();
        assert_eq!(
            find(&c, scope, "quay.io").unwrap().sealed_password,
            "v1:new"
        );
        assert_eq!(delete_scope(&c, 0, 9).unwrap(), 2);
        let evs = events::list_after(&c, 0, 20).unwrap();
        let types: Vec<_> = evs.iter().map(|e| e.event_type()).collect();
        assert_eq!(
            types,
            [
                "registries.created",
                "registries.created",
                "registries.updated",
                "registries.updated",
                "registries.deleted",
                "registries.deleted"
            ]
        );
        assert_eq!(
            evs[2].previous,
            Some(serde_json::json!({"address": "docker.io", "username": "u"}))
        );
        assert!(evs.iter().all(|e| e.object["password"] == ""));
        assert!(evs.iter().all(|e| !e.object.to_string().contains("sealed")));
    }
}
