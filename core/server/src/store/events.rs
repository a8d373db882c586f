//! The event outbox: the durable record of every state change.
//!
//! Write functions in the store call [`append`] with the same connection (and so the same
//! transaction) as the change they record. `object` is the record exactly as its own API
//! renders it; for updates `previous` holds the old values of the changed top-level fields only.
//! Event ids are the outbox sequence rendered as a fixed-width hex string, so they sort as
//! strings in the same order as numbers.

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::{Map, Value};

use super::{StoreResult, now_unix_ms};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Updated,
    Deleted,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Updated => "updated",
            Action::Deleted => "deleted",
        }
    }
}

/// Who owns a record, for the feed's `school` filter and its read permissions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Owner {
    pub org_id: Option<i64>,
    pub repo_id: Option<i64>,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub created_ms: i64,
    pub record_type: String,
    pub action: String,
    pub record_id: String,
    pub object: Value,
    pub previous: Option<Value>,
    pub org_id: Option<i64>,
    pub repo_id: Option<i64>,
}

impl StoredEvent {
    /// The public id: 24 hex digits, zero-padded (same width as Clever's ObjectIDs).
    pub fn id(&self) -> String {
        format_id(self.seq)
    }

    /// `<record_type>.<action>`, e.g. `users.created`.
    pub fn event_type(&self) -> String {
        format!("{}.{}", self.record_type, self.action)
    }
}

pub fn format_id(seq: i64) -> String {
    format!("{seq:024x}")
}

/// Records a created or deleted record.
pub fn append<T: Serialize>(
    conn: &Connection,
    record_type: &str,
    action: Action,
    record_id: impl ToString,
    object: &T,
    owner: Owner,
) -> StoreResult<i64> {
    let object = serde_json::to_value(object)?;
    insert(
        conn,
        record_type,
        action,
        &record_id.to_string(),
        &object,
        None,
        owner,
    )
}

/// Records an update from the record's old and new API renderings; writes nothing (and returns
/// `None`) when no field changed.
pub fn append_update<T: Serialize>(
    conn: &Connection,
    record_type: &str,
    record_id: impl ToString,
    before: &T,
    after: &T,
    owner: Owner,
) -> StoreResult<Option<i64>> {
    let before = serde_json::to_value(before)?;
    let after = serde_json::to_value(after)?;
    let Some(previous) = previous_attributes(&before, &after) else {
        return Ok(None);
    };
    insert(
        conn,
        record_type,
        Action::Updated,
        &record_id.to_string(),
        &after,
        Some(&previous),
        owner,
    )
    .map(Some)
}

fn insert(
    conn: &Connection,
    record_type: &str,
    action: Action,
    record_id: &str,
    object: &Value,
    previous: Option<&Value>,
    owner: Owner,
) -> StoreResult<i64> {
    conn.execute(
        "INSERT INTO events (created_ms, record_type, action, record_id, object, previous, org_id, repo_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            now_unix_ms(),
            record_type,
            action.as_str(),
            record_id,
            object.to_string(),
            previous.map(Value::to_string),
            owner.org_id,
            owner.repo_id,
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

/// The old values of the top-level fields that differ between two JSON objects.
pub fn previous_attributes(before: &Value, after: &Value) -> Option<Value> {
    let (Value::Object(old), Value::Object(new)) = (before, after) else {
        return (before != after).then(|| before.clone());
    };
    let mut changed = Map::new();
    for (key, old_value) in old {
        if new.get(key) != Some(old_value) {
            changed.insert(key.clone(), old_value.clone());
        }
    }
    for key in new.keys() {
        if !old.contains_key(key) {
            changed.insert(key.clone(), Value::Null);
        }
    }
    (!changed.is_empty()).then_some(Value::Object(changed))
}

/// Events with `seq > after`, oldest first.
pub fn list_after(conn: &Connection, after: i64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, created_ms, record_type, action, record_id, object, previous, org_id, repo_id
         FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit as i64], |r| {
        let object: String = r.get(5)?;
        let previous: Option<String> = r.get(6)?;
        Ok(StoredEvent {
            seq: r.get(0)?,
            created_ms: r.get(1)?,
            record_type: r.get(2)?,
            action: r.get(3)?,
            record_id: r.get(4)?,
            object: serde_json::from_str(&object).unwrap_or(Value::Null),
            previous: previous.and_then(|p| serde_json::from_str(&p).ok()),
            org_id: r.get(7)?,
            repo_id: r.get(8)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn previous_holds_only_changed_fields() {
        let before = json!({"a": 1, "b": "x", "c": true});
        let after = json!({"a": 1, "b": "y", "c": false});
        assert_eq!(
            previous_attributes(&before, &after),
            Some(json!({"b": "x", "c": true}))
        );
        assert_eq!(previous_attributes(&before, &before), None);
    }

    #[test]
    fn ids_sort_like_numbers() {
        assert!(format_id(9) < format_id(10));
        assert!(format_id(255) < format_id(4096));
        assert_eq!(format_id(1).len(), 24);
    }

    #[test]
    fn update_without_change_writes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        let v = json!({"login": "a"});
        assert_eq!(
            append_update(&conn, "users", 1, &v, &v, Owner::default()).unwrap(),
            None
        );
        let changed = json!({"login": "b"});
        append_update(&conn, "users", 1, &v, &changed, Owner::default()).unwrap();
        let events = list_after(&conn, 0, 10).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type(), "users.updated");
        assert_eq!(events[0].previous, Some(json!({"login": "a"})));
        assert_eq!(events[0].object, changed);
    }
}
