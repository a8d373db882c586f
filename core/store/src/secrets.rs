//! CI secrets at three scopes: global (`org_id = 0, repo_id = 0`), organisation (`org_id`,
//! `repo_id = 0`) and repository (`org_id = 0`, `repo_id`), unique by name within a scope.
//!
//! The value is stored **sealed** (`auth::sealing`, purpose [`SEAL_PURPOSE`]); the caller seals
//! before writing and this module never sees plaintext. The API rendering ([`Secret`]) has no
//! value at all (upstream's `value,omitempty` after `Copy()`), so neither responses nor events
//! can carry it. A change of the value alone does not change the rendering; it is still
//! recorded as `secrets.updated` (without `previous_attributes`), so the feed sees every write.

use crate::{OptionalExtension, Row};
use crate::{Tx, WriteTx};
use rusqlite::params;
use serde::Serialize;

use super::events::{self, Action, Owner};
use super::{PIPELINE_SCOPES, StoreError, StoreResult};
use woodlark_pipeline::event::WebhookEvent;

pub const RECORD_TYPE: events::RecordType = events::RecordType::Secrets;

/// Sealing purpose of secret values (bound into the ciphertext).
pub const SEAL_PURPOSE: &str = "ci-secret-value";

/// Longest secret name accepted.
pub const MAX_NAME: usize = 255;
/// Longest note accepted.
pub const MAX_NOTE: usize = 4096;

/// Where a secret or registry lives. Global: both 0; org: `org_id`; repo: `repo_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceScope {
    pub org_id: i64,
    pub repo_id: i64,
}

impl ResourceScope {
    pub const GLOBAL: ResourceScope = ResourceScope {
        org_id: 0,
        repo_id: 0,
    };

    pub fn org(org_id: i64) -> ResourceScope {
        ResourceScope { org_id, repo_id: 0 }
    }

    pub fn repo(repo_id: i64) -> ResourceScope {
        ResourceScope { org_id: 0, repo_id }
    }

    /// The event owner: a repository record belongs to the repository's organisation too.
    pub fn owner(&self, conn: &Tx) -> StoreResult<Owner> {
        if self.repo_id != 0 {
            let org: Option<i64> = conn
                .cached_row(
                    "SELECT org_id FROM repos WHERE id = ?1",
                    [self.repo_id],
                    |r| r.get(0),
                )
                .optional()?;
            return Ok(Owner {
                org_id: org,
                repo_id: Some(self.repo_id),
            });
        }
        Ok(Owner {
            org_id: (self.org_id != 0).then_some(self.org_id),
            repo_id: None,
        })
    }
}

/// A secret as the API renders it (Woodpecker's `Secret` without `value`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Secret {
    pub id: i64,
    pub org_id: i64,
    pub repo_id: i64,
    pub name: String,
    pub images: Vec<String>,
    pub events: Vec<String>,
    pub note: String,
}

/// A secret with its sealed value, for the server's own use (pipeline compilation).
#[derive(Debug, Clone)]
pub struct SecretRow {
    pub secret: Secret,
    pub sealed_value: String,
}

/// What creating a secret takes. `events` and `images` are validated by the caller.
#[derive(Debug, Clone, Default)]
pub struct NewSecret {
    pub name: String,
    pub sealed_value: String,
    pub images: Vec<String>,
    pub events: Vec<String>,
    pub note: String,
}

/// A partial update: `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SecretChange {
    pub sealed_value: Option<String>,
    pub images: Option<Vec<String>>,
    pub events: Option<Vec<String>>,
    pub note: Option<String>,
}

/// Woodpecker's name rule: letters, digits and `_` only.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("invalid secret name: empty name".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "invalid secret name: longer than {MAX_NAME} characters"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(format!(
            "invalid secret name: {name:?} contains {bad:?}; only letters, digits and '_' are allowed"
        ));
    }
    Ok(())
}

/// At least one event, each a [`WebhookEvent`]. Returns them sorted and deduplicated
/// (upstream sorts them too).
pub fn validate_events(events: &[String]) -> Result<Vec<String>, String> {
    if let Some(bad) = events.iter().find(|e| !WebhookEvent::is_known(e)) {
        return Err(format!(
            "invalid secret event: {bad:?} is not one of {}",
            WebhookEvent::names()
        ));
    }
    if events.is_empty() {
        return Err("invalid secret event: no event specified".into());
    }
    let mut sorted = events.to_vec();
    sorted.sort();
    sorted.dedup();
    Ok(sorted)
}

/// Every image must be a plausible image reference: `[host[:port]/][path/]name[:tag]`.
pub fn validate_images(images: &[String]) -> Result<(), String> {
    for image in images {
        if image.is_empty() {
            return Err("invalid secret image: empty image in images".into());
        }
        if !valid_image(image) {
            return Err(format!(
                "invalid secret image: {image:?} is not an image reference ([host[:port]/][path/]name[:tag])"
            ));
        }
    }
    Ok(())
}

/// Upstream's image pattern
/// `^(([\w.-]+)(:\d+)?/)?([\w.-][\w./-]*/)?([\w-]+)(:[\w-]+)?$`, except that tags may also
/// contain `.` (as Docker allows: `alpine:3.20`).
fn valid_image(image: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let (path, last) = match image.rfind('/') {
        Some(i) => (Some(&image[..i]), &image[i + 1..]),
        None => (None, image),
    };
    let (name, tag) = match last.split_once(':') {
        Some((n, t)) => (n, Some(t)),
        None => (last, None),
    };
    if name.is_empty() || !name.chars().all(word) {
        return false;
    }
    if let Some(tag) = tag
        && (tag.is_empty() || !tag.chars().all(|c| word(c) || c == '.'))
    {
        return false;
    }
    let Some(path) = path else {
        return true;
    };
    let path_char = |c: char| word(c) || c == '.' || c == '/';
    // An optional `host:port` first segment.
    let (first, rest) = match path.split_once('/') {
        Some((f, r)) => (f, Some(r)),
        None => (path, None),
    };
    let host_char = |c: char| word(c) || c == '.';
    match first.split_once(':') {
        // `host:port/…`: what follows must be a path prefix, which cannot start with `/`.
        Some((host, port)) => {
            !host.is_empty()
                && host.chars().all(host_char)
                && !port.is_empty()
                && port.chars().all(|c| c.is_ascii_digit())
                && rest.is_none_or(|r| {
                    !r.is_empty() && !r.starts_with('/') && r.chars().all(path_char)
                })
        }
        // Without a port the whole path is one prefix: `[\w.-][\w./-]*`.
        None => {
            !first.is_empty()
                && first.chars().all(host_char)
                && rest.is_none_or(|r| r.chars().all(path_char))
        }
    }
}

const COLUMNS: &str = "id, org_id, repo_id, name, value, images, events, note";

fn json_list(r: &Row<'_>, index: usize) -> rusqlite::Result<Vec<String>> {
    super::json_column(r, index)
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<SecretRow> {
    Ok(SecretRow {
        secret: Secret {
            id: r.get(0)?,
            org_id: r.get(1)?,
            repo_id: r.get(2)?,
            name: r.get(3)?,
            images: json_list(r, 5)?,
            events: json_list(r, 6)?,
            note: r.get(7)?,
        },
        sealed_value: r.get(4)?,
    })
}

/// A secret of a scope by name, with its sealed value.
pub fn find(conn: &Tx, scope: ResourceScope, name: &str) -> StoreResult<SecretRow> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM secrets WHERE org_id = ?1 AND repo_id = ?2 AND name = ?3"),
        params![scope.org_id, scope.repo_id, name],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// One page of a scope's secrets, by name (`page` starts at 1).
pub fn list(conn: &Tx, scope: ResourceScope, page: u32, per_page: u32) -> StoreResult<Vec<Secret>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM secrets WHERE org_id = ?1 AND repo_id = ?2
         ORDER BY name LIMIT ?3 + 0 OFFSET ?4"
    ))?;
    let rows = stmt.query_map(
        params![scope.org_id, scope.repo_id, per_page, offset],
        from_row,
    )?;
    Ok(rows
        .map(|r| r.map(|row| row.secret))
        .collect::<Result<_, _>>()?)
}

/// The secrets a pipeline of `repo_id` (in `org_id`) may use: repository, then organisation,
/// then global ones, merged by name in that order of precedence. Sorted by name.
pub fn for_pipeline(conn: &Tx, org_id: i64, repo_id: i64) -> StoreResult<Vec<SecretRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM secrets
         WHERE {PIPELINE_SCOPES}
         ORDER BY name, repo_id DESC, org_id DESC"
    ))?;
    let rows = stmt.query_map(params![org_id, repo_id], from_row)?;
    let mut out = rows.collect::<Result<Vec<SecretRow>, _>>()?;
    // Sorted by key with the most specific scope first: keep the first of each key.
    out.dedup_by(|later, first| later.secret.name == first.secret.name);
    Ok(out)
}

fn to_json(list: &[String]) -> StoreResult<String> {
    Ok(serde_json::to_string(list)?)
}

fn duplicate(name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "a secret named {name:?} already exists in this scope"
    ))
}

/// Creates a secret (409 if the name is taken in the scope). Records `secrets.created`.
pub fn create(conn: &WriteTx, scope: ResourceScope, new: &NewSecret) -> StoreResult<Secret> {
    if find(conn, scope, &new.name).is_ok() {
        return Err(duplicate(&new.name));
    }
    conn.cached_exec(
        "INSERT INTO secrets (org_id, repo_id, name, value, images, events, note)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            scope.org_id,
            scope.repo_id,
            new.name,
            new.sealed_value,
            to_json(&new.images)?,
            to_json(&new.events)?,
            new.note,
        ],
    )?;
    let secret = find(conn, scope, &new.name)?.secret;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        secret.id,
        &secret,
        scope.owner(conn)?,
    )?;
    Ok(secret)
}

/// Applies `change` to the named secret. Records `secrets.updated` (with the previous values
/// of the visible fields; a value-only change is recorded without them).
pub fn update(
    conn: &WriteTx,
    scope: ResourceScope,
    name: &str,
    change: &SecretChange,
) -> StoreResult<Secret> {
    let before = find(conn, scope, name)?.secret;
    let images = change.images.as_deref().map(to_json).transpose()?;
    let events_json = change.events.as_deref().map(to_json).transpose()?;
    conn.cached_exec(
        "UPDATE secrets SET
            value = coalesce(?2, value),
            images = coalesce(?3, images),
            events = coalesce(?4, events),
            note = coalesce(?5, note)
         WHERE id = ?1",
        params![
            before.id,
            change.sealed_value,
            images,
            events_json,
            change.note
        ],
    )?;
    let after = find(conn, scope, name)?.secret;
    let owner = scope.owner(conn)?;
    let recorded = events::append_update(conn, RECORD_TYPE, after.id, &before, &after, owner)?;
    if !recorded && change.sealed_value.is_some() {
        events::append(conn, RECORD_TYPE, Action::Updated, after.id, &after, owner)?;
    }
    Ok(after)
}

/// Deletes the named secret. Records `secrets.deleted`.
pub fn delete(conn: &WriteTx, scope: ResourceScope, name: &str) -> StoreResult<Secret> {
    let secret = find(conn, scope, name)?.secret;
    let owner = scope.owner(conn)?;
    super::delete_recorded(conn, "secrets", RECORD_TYPE, secret.id, &secret, owner)?;
    Ok(secret)
}

/// Deletes every secret of a scope (an organisation or repository being deleted), recording
/// one `secrets.deleted` per secret. Returns how many were deleted.
pub fn delete_scope(conn: &WriteTx, org_id: i64, repo_id: i64) -> StoreResult<usize> {
    super::delete_scope_recorded(
        conn,
        "secrets",
        RECORD_TYPE,
        ResourceScope { org_id, repo_id },
        COLUMNS,
        from_row,
        |row| (row.secret.id, &row.secret),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    fn conn() -> WriteTx<'static> {
        crate::sql::fresh_tx()
    }

    fn new(name: &str) -> NewSecret {
        NewSecret {
            name: name.into(),
            sealed_value: "v1:sealed".into(),
            events: vec!["push".into()],
            ..NewSecret::default()
        }
    }

    #[test]
    fn names() {
        assert!(validate_name("DOCKER_password_2").is_ok());
        assert!(validate_name("").is_err());
        assert!(validate_name("a-b").is_err());
        assert!(validate_name("a b").is_err());
        assert!(validate_name("ä").is_err());
        assert!(validate_name(&"a".repeat(256)).is_err());
    }

    #[test]
    fn events_are_checked_sorted_and_deduplicated() {
        let ev = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            validate_events(&ev(&["tag", "push", "tag"])).unwrap(),
            ev(&["push", "tag"])
        );
        assert!(validate_events(&[]).is_err());
        assert!(validate_events(&ev(&["push", "pull"])).is_err());
    }

    #[test]
    fn images() {
        for ok in [
            "alpine",
            "alpine:3",
            "alpine:3.20",
            "library/alpine",
            "woodpeckerci/plugin-docker-buildx",
            "docker.io/library/alpine:latest",
            "localhost:5000/my/image:v1_2",
            "registry.example.com/a/b/c",
            "a//x",
        ] {
            assert!(valid_image(ok), "{ok} should be valid");
        }
        for bad in [
            "",
            "alpine:",
            ":tag",
            "/alpine",
            "a b",
            "alpine@sha256:abc",
            "host:port/x",
            "host:5000//x",
            "a/b:c/d",
            "image:*",
        ] {
            assert!(!valid_image(bad), "{bad} should be invalid");
        }
    }

    #[test]
    fn scopes_are_separate_and_names_unique_within_one() {
        let c = conn();
        create(&c, ResourceScope::GLOBAL, &new("a")).unwrap();
        create(&c, ResourceScope::org(5), &new("a")).unwrap();
        create(&c, ResourceScope::repo(7), &new("a")).unwrap();
        assert!(matches!(
            create(&c, ResourceScope::org(5), &new("a")),
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(list(&c, ResourceScope::GLOBAL, 1, 50).unwrap().len(), 1);
        assert!(matches!(
            find(&c, ResourceScope::org(6), "a"),
            Err(StoreError::NotFound)
        ));
        // Precedence: repo over org over global.
        create(&c, ResourceScope::GLOBAL, &new("g")).unwrap();
        let merged = for_pipeline(&c, 5, 7).unwrap();
        let names: Vec<_> = merged
            .iter()
            .map(|r| (r.secret.name.as_str(), r.secret.repo_id))
            .collect();
        assert_eq!(names, [("a", 7), ("g", 0)]);
    }

    #[test]
    fn update_and_delete_record_events_without_values() {
        let c = conn();
        let s = create(&c, ResourceScope::org(3), &new("tok")).unwrap();
        let change = SecretChange {
            sealed_value: Some("v1:other".into()),
            ..SecretChange::default()
        };
        update(&c, ResourceScope::org(3), "tok", &change).unwrap();
        let change = SecretChange {
            events: Some(vec!["push".into(), "tag".into()]),
            ..SecretChange::default()
        };
        let after = update(&c, ResourceScope::org(3), "tok", &change).unwrap();
        assert_eq!(after.events, ["push", "tag"]);
        assert_eq!(
            find(&c, ResourceScope::org(3), "tok").unwrap().sealed_value,
            "v1:other"
        );
        delete(&c, ResourceScope::org(3), "tok").unwrap();
        let evs = events::list_after(&c, 0, 10).unwrap();
        let types: Vec<_> = evs.iter().map(|e| e.event_type()).collect();
        assert_eq!(
            types,
            [
                "secrets.created",
                "secrets.updated",
                "secrets.updated",
                "secrets.deleted"
            ]
        );
        assert_eq!(evs[1].previous, None);
        assert_eq!(
            evs[2].previous,
            Some(serde_json::json!({"events": ["push"]}))
        );
        for e in &evs {
            assert_eq!(e.record_id, s.id.to_string());
            assert_eq!(e.org_id, Some(3));
            assert!(e.object.get("value").is_none());
            assert!(!e.object.to_string().contains("sealed"));
        }
    }

    #[test]
    fn delete_scope_removes_only_that_scope() {
        let c = conn();
        create(&c, ResourceScope::org(3), &new("a")).unwrap();
        create(&c, ResourceScope::org(3), &new("b")).unwrap();
        create(&c, ResourceScope::org(4), &new("a")).unwrap();
        assert_eq!(delete_scope(&c, 3, 0).unwrap(), 2);
        assert!(list(&c, ResourceScope::org(3), 1, 50).unwrap().is_empty());
        assert_eq!(list(&c, ResourceScope::org(4), 1, 50).unwrap().len(), 1);
        let deleted = events::list_after(&c, 3, 10).unwrap();
        assert_eq!(deleted.len(), 2);
        assert!(deleted.iter().all(|e| e.event_type() == "secrets.deleted"));
    }
}
