//! The event outbox: the durable record of every state change.
//!
//! Write functions in the store call [`append`] with the same connection (and so the same
//! transaction) as the change they record. `object` is the record exactly as its own API
//! renders it; for updates `previous` holds the old values of the changed top-level fields only.
//! Event ids are the outbox sequence rendered as a fixed-width hex string, so they sort as
//! strings in the same order as numbers.

use crate::OptionalExtension;
use crate::{Tx, WriteTx};
use rusqlite::params;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{StoreResult, now_unix_ms};

/// What happened to a record: the second half of an event's type (`users.created`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Updated,
    Deleted,
}

impl Action {
    pub const ALL: [Action; 3] = [Action::Created, Action::Updated, Action::Deleted];

    /// The stored name, as the feed shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Updated => "updated",
            Action::Deleted => "deleted",
        }
    }

    /// The action named `text`, if it is one.
    pub fn parse(text: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

/// Which kind of record an event is about: the first half of an event's type. Each is
/// recorded by the store module of its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordType {
    Users,
    Orgs,
    Repos,
    Forges,
    Pipelines,
    Workflows,
    Steps,
    Secrets,
    Registries,
    Agents,
    Crons,
    ParticipationKeys,
}

impl RecordType {
    pub const ALL: [RecordType; 12] = [
        RecordType::Users,
        RecordType::Orgs,
        RecordType::Repos,
        RecordType::Forges,
        RecordType::Pipelines,
        RecordType::Workflows,
        RecordType::Steps,
        RecordType::Secrets,
        RecordType::Registries,
        RecordType::Agents,
        RecordType::Crons,
        RecordType::ParticipationKeys,
    ];

    /// The stored name, as the feed shows it and its `record_type` filter takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::Users => "users",
            RecordType::Orgs => "orgs",
            RecordType::Repos => "repos",
            RecordType::Forges => "forges",
            RecordType::Pipelines => "pipelines",
            RecordType::Workflows => "workflows",
            RecordType::Steps => "steps",
            RecordType::Secrets => "secrets",
            RecordType::Registries => "registries",
            RecordType::Agents => "agents",
            RecordType::Crons => "crons",
            RecordType::ParticipationKeys => "participation_keys",
        }
    }

    /// The record type named `text`, if it is one.
    pub fn parse(text: &str) -> Option<RecordType> {
        RecordType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

impl std::fmt::Display for RecordType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
pub struct StoredEvent<B = Value> {
    pub seq: i64,
    pub created_ms: i64,
    pub record_type: String,
    pub action: String,
    pub record_id: String,
    pub object: B,
    pub previous: Option<B>,
    pub org_id: Option<i64>,
    pub repo_id: Option<i64>,
}

/// How a stored JSON snapshot is read: decoded ([`Value`]) or kept as the stored text
/// (`String`, for the feed, which serves it as it is).
pub trait EventBody: Sized {
    fn from_stored(text: String) -> Self;
}

impl EventBody for Value {
    fn from_stored(text: String) -> Value {
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// The stored text as it is: the store wrote it with serde, so it is valid JSON (the feed
/// copies it into responses unchecked).
impl EventBody for String {
    fn from_stored(text: String) -> String {
        text
    }
}

impl<B> StoredEvent<B> {
    /// The public id: 24 hex digits, zero-padded (same width as Clever's ObjectIDs).
    pub fn id(&self) -> String {
        format_id(self.seq)
    }

    /// `<record_type>.<action>`, e.g. `users.created`.
    pub fn event_type(&self) -> String {
        format!("{}.{}", self.record_type, self.action)
    }

    /// The record type and action, parsed; `None` for names this version does not know
    /// (the stored names are kept as text so the feed serves any event as it was recorded).
    pub fn kind(&self) -> Option<(RecordType, Action)> {
        Some((
            RecordType::parse(&self.record_type)?,
            Action::parse(&self.action)?,
        ))
    }
}

/// The newest event's sequence number (0 when there is none).
pub fn newest_seq(conn: &Tx) -> StoreResult<i64> {
    conn.cached_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
}

pub fn format_id(seq: i64) -> String {
    let mut out = String::with_capacity(24);
    push_id(&mut out, seq);
    out
}

/// [`format_id`] appended to `out` (`{:024x}` by hand: the feed writes two per event).
pub fn push_id(out: &mut String, seq: i64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = seq as u64;
    out.push_str("00000000");
    for shift in (0..16).rev() {
        out.push(char::from(HEX[((bits >> (shift * 4)) & 0xf) as usize]));
    }
}

/// Records a created or deleted record. (No id comes back: on PostgreSQL the writer draws
/// it when the job ends.)
pub fn append<T: Serialize>(
    conn: &WriteTx,
    record_type: RecordType,
    action: Action,
    record_id: impl ToString,
    object: &T,
    owner: Owner,
) -> StoreResult<()> {
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
/// false) when no field changed.
pub fn append_update<T: Serialize>(
    conn: &WriteTx,
    record_type: RecordType,
    record_id: impl ToString,
    before: &T,
    after: &T,
    owner: Owner,
) -> StoreResult<bool> {
    let before = serde_json::to_value(before)?;
    let after = serde_json::to_value(after)?;
    let Some(previous) = previous_attributes(&before, &after) else {
        return Ok(false);
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
    .map(|()| true)
}

fn insert(
    conn: &WriteTx,
    record_type: RecordType,
    action: Action,
    record_id: &str,
    object: &Value,
    previous: Option<&Value>,
    owner: Owner,
) -> StoreResult<()> {
    // Ids in commit order across replicas: see `pg::outbox`.
    conn.lock_outbox()?;
    let event = HeldEvent {
        created_ms: now_unix_ms(),
        record_type: record_type.as_str(),
        action: action.as_str(),
        record_id: record_id.to_string(),
        object: object.to_string(),
        previous: previous.map(Value::to_string),
        owner,
    };
    match conn.hold_event(event) {
        None => Ok(()),
        Some(event) => insert_rows(conn, std::slice::from_ref(&event)),
    }
}

/// An event on its way to the table: held back by the writer's PostgreSQL session until its
/// job ends ([`Tx::defer_events`]), so that a job's events cost one statement.
pub(crate) struct HeldEvent {
    created_ms: i64,
    record_type: &'static str,
    action: &'static str,
    record_id: String,
    object: String,
    previous: Option<String>,
    owner: Owner,
}

/// Rows per statement when held events are recorded (8 parameters each).
const ROWS_PER_INSERT: usize = 32;

/// Records the events this session held back (see [`Tx::defer_events`]), in the order they
/// were recorded; nothing to do on a session that records at once.
pub(crate) fn record_held(conn: &WriteTx) -> StoreResult<()> {
    let held = conn.take_held_events();
    for chunk in held.chunks(ROWS_PER_INSERT) {
        insert_rows(conn, chunk)?;
    }
    Ok(())
}

/// One `INSERT` of `rows`; ids are drawn in row order.
fn insert_rows(conn: &WriteTx, rows: &[HeldEvent]) -> StoreResult<()> {
    let mut sql = String::from(
        "INSERT INTO events (created_ms, record_type, action, record_id, object, previous, org_id, repo_id) VALUES ",
    );
    let mut params: Vec<&dyn rusqlite::types::ToSql> = Vec::with_capacity(rows.len() * 8);
    for (i, row) in rows.iter().enumerate() {
        let n = i * 8;
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{})",
            n + 1,
            n + 2,
            n + 3,
            n + 4,
            n + 5,
            n + 6,
            n + 7,
            n + 8
        ));
        params.extend([
            &row.created_ms as &dyn rusqlite::types::ToSql,
            &row.record_type,
            &row.action,
            &row.record_id,
            &row.object,
            &row.previous,
            &row.owner.org_id,
            &row.owner.repo_id,
        ]);
    }
    conn.cached_exec(&sql, &params[..])?;
    Ok(())
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
pub fn list_after(conn: &Tx, after: i64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
    page(
        conn,
        after,
        i64::MAX,
        &Filter::default(),
        Direction::Forward,
        limit,
    )
}

/// What a feed query selects besides the cursor range.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Keep only these record types (empty = all).
    pub record_types: Vec<String>,
    /// Keep only events owned by this organisation.
    pub org_id: Option<i64>,
    /// `None`: everything (admins). `Some`: only events of these repositories, or of these
    /// organisations when the event has no repository.
    pub visible: Option<Visible>,
}

/// One repository or organisation of a [`Visible`] set. A page for a non-admin is the merge of
/// one index range per key (`events_repo`, `events_org_only`): an `OR` over the whole set
/// makes SQLite walk the table by `seq` and test every row, which at a million events costs
/// hundreds of milliseconds for a user who can see little.
#[derive(Debug, Clone, Copy)]
enum VisibleKey {
    Repo(i64),
    Org(i64),
}

impl Filter {
    /// The queries to run: one per visibility key, or one unrestricted (`None`) for admins.
    fn keys(&self) -> Vec<Option<VisibleKey>> {
        let Some(v) = &self.visible else {
            return vec![None];
        };
        let repos = v.repo_ids.iter().map(|&id| Some(VisibleKey::Repo(id)));
        repos
            .chain(v.org_ids.iter().map(|&id| Some(VisibleKey::Org(id))))
            .collect()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Visible {
    pub repo_ids: Vec<i64>,
    pub org_ids: Vec<i64>,
}

impl Visible {
    /// Whether one event is visible: it belongs to a visible repository, or has no repository
    /// and belongs to a visible organisation (the rule `filter_sql` applies key by key).
    fn allows<B>(&self, e: &StoredEvent<B>) -> bool {
        match e.repo_id {
            Some(repo) => self.repo_ids.contains(&repo),
            None => e.org_id.is_some_and(|org| self.org_ids.contains(&org)),
        }
    }
}

/// Direction of a page relative to its cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `seq > after` (and `< before` when both are given), oldest first.
    Forward,
    /// The last `limit` events with `seq < before`, returned oldest first.
    Backward,
}

/// The `WHERE` conditions of `filter` after the `seq` range (`?1`, `?2`), with their
/// parameters, narrowed to one visibility `key` when given. Only the filters in use appear, so
/// SQLite can pick the matching index (`events_record_type`, `events_org`, `events_repo`,
/// `events_org_only`) instead of scanning by `seq`.
fn filter_sql(f: &Filter, key: Option<VisibleKey>) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut sql = String::new();
    let mut args: Vec<V> = Vec::new();
    let next = |v: V, args: &mut Vec<V>| {
        args.push(v);
        format!("?{}", args.len() + 2)
    };
    if !f.record_types.is_empty() {
        let list: Vec<String> = f
            .record_types
            .iter()
            .map(|t| next(V::Text(t.clone()), &mut args))
            .collect();
        sql.push_str(&format!(" AND record_type IN ({})", list.join(", ")));
    }
    if let Some(org) = f.org_id {
        let p = next(V::Integer(org), &mut args);
        sql.push_str(&format!(" AND org_id = {p}"));
    }
    if let Some(key) = key {
        match key {
            VisibleKey::Repo(id) => {
                let p = next(V::Integer(id), &mut args);
                sql.push_str(&format!(" AND repo_id = {p}"));
            }
            VisibleKey::Org(id) => {
                let p = next(V::Integer(id), &mut args);
                sql.push_str(&format!(" AND repo_id IS NULL AND org_id = {p}"));
            }
        }
    }
    (sql, args)
}

fn with_range(
    after: i64,
    before: i64,
    args: Vec<rusqlite::types::Value>,
) -> Vec<rusqlite::types::Value> {
    let mut all = vec![
        rusqlite::types::Value::Integer(after),
        rusqlite::types::Value::Integer(before),
    ];
    all.extend(args);
    all
}

fn read_row<B: EventBody>(r: &crate::Row<'_>) -> rusqlite::Result<StoredEvent<B>> {
    let object: String = r.get(5)?;
    let previous: Option<String> = r.get(6)?;
    Ok(StoredEvent {
        seq: r.get(0)?,
        created_ms: r.get(1)?,
        record_type: r.get(2)?,
        action: r.get(3)?,
        record_id: r.get(4)?,
        object: B::from_stored(object),
        previous: previous.map(B::from_stored),
        org_id: r.get(7)?,
        repo_id: r.get(8)?,
    })
}

const SELECT: &str = "SELECT seq, created_ms, record_type, action, record_id, object, previous, org_id, repo_id FROM events";

/// One page of events strictly between `after` and `before` (exclusive bounds), matching
/// `filter`, at most `limit`, always returned oldest first. Index-backed on `seq`: cost does
/// not grow with the number of older events (no OFFSET).
pub fn page<B: EventBody>(
    conn: &Tx,
    after: i64,
    before: i64,
    filter: &Filter,
    direction: Direction,
    limit: usize,
) -> StoreResult<Vec<StoredEvent<B>>> {
    let order = match direction {
        Direction::Forward => "ASC",
        Direction::Backward => "DESC",
    };
    let mut out: Vec<StoredEvent<B>> = Vec::new();
    for key in filter.keys() {
        let (cond, args) = filter_sql(filter, key);
        let sql = format!(
            "{SELECT} WHERE seq > ?1 AND seq < ?2{cond} ORDER BY seq {order} LIMIT {limit}"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            crate::params_from_iter(with_range(after, before, args)),
            read_row,
        )?;
        for row in rows {
            out.push(row?);
        }
    }
    // Each key gave its first `limit` in `direction`; the page is the first `limit` of all.
    out.sort_by_key(|e| e.seq);
    out.dedup_by_key(|e| e.seq);
    match direction {
        Direction::Forward => out.truncate(limit),
        Direction::Backward => {
            let excess = out.len().saturating_sub(limit);
            out.drain(..excess);
        }
    }
    Ok(out)
}

/// Whether any event matching `filter` lies strictly between the bounds.
pub fn any_between(conn: &Tx, after: i64, before: i64, filter: &Filter) -> StoreResult<bool> {
    for key in filter.keys() {
        let (cond, args) = filter_sql(filter, key);
        let sql = format!("SELECT EXISTS ({SELECT} WHERE seq > ?1 AND seq < ?2{cond})");
        let found: bool = conn.cached_row(
            &sql,
            crate::params_from_iter(with_range(after, before, args)),
            |r| r.get(0),
        )?;
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One event by sequence number, if it still exists and matches `filter`.
pub fn get<B: EventBody>(
    conn: &Tx,
    seq: i64,
    filter: &Filter,
) -> StoreResult<Option<StoredEvent<B>>> {
    // The range `seq - 1 < seq < seq + 1` keeps the filter's parameter numbers as in `page`.
    let (cond, args) = filter_sql(filter, None);
    let sql = format!("{SELECT} WHERE seq > ?1 AND seq < ?2{cond}");
    let event = conn
        .cached_row(
            &sql,
            crate::params_from_iter(with_range(seq - 1, seq + 1, args)),
            read_row,
        )
        .optional()?;
    Ok(event.filter(|e| filter.visible.as_ref().is_none_or(|v| v.allows(e))))
}

/// Where a cursor stands: an existing event, one removed by retention, or one never issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cursor {
    Exists,
    Pruned,
    Unknown,
}

pub fn cursor(conn: &Tx, seq: i64) -> StoreResult<Cursor> {
    let exists: bool = conn.cached_row(
        "SELECT EXISTS (SELECT 1 FROM events WHERE seq = ?1)",
        [seq],
        |r| r.get(0),
    )?;
    if exists {
        return Ok(Cursor::Exists);
    }
    // The highest sequence ever issued: AUTOINCREMENT keeps it in sqlite_sequence, an
    // identity column in its sequence.
    let issued_sql = match conn.dialect() {
        crate::Dialect::Sqlite => "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
        crate::Dialect::Postgres => {
            "SELECT coalesce(last_value, 0) FROM pg_sequences
             WHERE schemaname = current_schema() AND sequencename = 'events_seq_seq'"
        }
    };
    let issued: i64 = conn
        .cached_row(issued_sql, [], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    Ok(if seq >= 1 && seq <= issued {
        Cursor::Pruned
    } else {
        Cursor::Unknown
    })
}

/// Removes events older than `older_than_ms` (if set) and beyond the newest `keep` (if set),
/// at most `batch` rows per call (so the writer is never held long). Returns rows removed.
pub fn prune(
    conn: &WriteTx,
    older_than_ms: Option<i64>,
    keep: Option<u64>,
    batch: usize,
) -> StoreResult<usize> {
    let mut removed = 0;
    if let Some(cutoff) = older_than_ms {
        removed += conn.cached_exec(
            "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE created_ms < ?1 ORDER BY seq LIMIT ?2 + 0)",
            params![cutoff, batch as i64],
        )?;
    }
    if let Some(keep) = keep {
        removed += conn.cached_exec(
            "DELETE FROM events WHERE seq IN (
                SELECT seq FROM events
                WHERE seq <= (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?1)
                ORDER BY seq LIMIT ?2 + 0)",
            params![keep as i64, batch as i64],
        )?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;
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
        for seq in [0, 1, 255, 4096, 0x1234_5678_9abc, i64::MAX] {
            assert_eq!(format_id(seq), format!("{seq:024x}"));
        }
    }

    fn seeded(n: i64) -> WriteTx<'static> {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        for i in 1..=n {
            let kind = if i % 2 == 0 {
                RecordType::Repos
            } else {
                RecordType::Users
            };
            let owner = Owner {
                org_id: Some(i % 3),
                repo_id: (kind == RecordType::Repos).then_some(i),
            };
            append(
                &WriteTx::new(&conn),
                kind,
                Action::Created,
                i,
                &json!({"i": i}),
                owner,
            )
            .unwrap();
        }
        WriteTx::owned(conn)
    }

    #[test]
    fn pages_forward_backward_and_filtered() {
        let c = seeded(10);
        let all = Filter::default();
        let p = page::<Value>(&c, 0, i64::MAX, &all, Direction::Forward, 3).unwrap();
        assert_eq!(p.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        let p = page::<Value>(&c, 0, 8, &all, Direction::Backward, 3).unwrap();
        assert_eq!(p.iter().map(|e| e.seq).collect::<Vec<_>>(), [5, 6, 7]);
        let users = Filter {
            record_types: vec!["users".into()],
            ..Filter::default()
        };
        let p = page::<Value>(&c, 2, i64::MAX, &users, Direction::Forward, 10).unwrap();
        assert_eq!(p.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 5, 7, 9]);
        let org = Filter {
            org_id: Some(0),
            ..Filter::default()
        };
        let p = page::<Value>(&c, 0, i64::MAX, &org, Direction::Forward, 10).unwrap();
        assert_eq!(p.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 6, 9]);
        let visible = Filter {
            visible: Some(Visible {
                repo_ids: vec![4],
                org_ids: vec![1],
            }),
            ..Filter::default()
        };
        let p = page::<Value>(&c, 0, i64::MAX, &visible, Direction::Forward, 10).unwrap();
        // seq 4 by repo; users (no repo) in org 1: 1 and 7.
        assert_eq!(p.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 4, 7]);
        assert!(any_between(&c, 9, i64::MAX, &all).unwrap());
        assert!(!any_between(&c, 10, i64::MAX, &all).unwrap());
        assert!(get::<Value>(&c, 4, &visible).unwrap().is_some());
        assert!(get::<Value>(&c, 2, &visible).unwrap().is_none());
    }

    #[test]
    fn visible_pages_merge_keys_in_order() {
        let c = seeded(30);
        // Repos 4, 10, 22 (even seqs are repo events) and org 1's repo-less events: 1, 7, 13,
        // 19, 25 (odd seqs with seq % 3 == 1).
        let visible = Filter {
            visible: Some(Visible {
                repo_ids: vec![22, 4, 10],
                org_ids: vec![1],
            }),
            ..Filter::default()
        };
        let seqs = |p: Vec<StoredEvent>| p.iter().map(|e| e.seq).collect::<Vec<_>>();
        let fwd = page(&c, 0, i64::MAX, &visible, Direction::Forward, 4).unwrap();
        assert_eq!(seqs(fwd), [1, 4, 7, 10]);
        let fwd = page(&c, 10, i64::MAX, &visible, Direction::Forward, 3).unwrap();
        assert_eq!(seqs(fwd), [13, 19, 22]);
        let back = page(&c, 0, 22, &visible, Direction::Backward, 3).unwrap();
        assert_eq!(seqs(back), [10, 13, 19]);
        let window = page(&c, 4, 19, &visible, Direction::Forward, 10).unwrap();
        assert_eq!(seqs(window), [7, 10, 13]);
        assert!(any_between(&c, 22, i64::MAX, &visible).unwrap());
        assert!(!any_between(&c, 25, i64::MAX, &visible).unwrap());
        // With another filter on top, and for someone who can see nothing.
        let repos_only = Filter {
            record_types: vec!["repos".into()],
            ..visible.clone()
        };
        let p = page(&c, 0, i64::MAX, &repos_only, Direction::Forward, 10).unwrap();
        assert_eq!(seqs(p), [4, 10, 22]);
        let nobody = Filter {
            visible: Some(Visible::default()),
            ..Filter::default()
        };
        assert!(
            page::<Value>(&c, 0, i64::MAX, &nobody, Direction::Forward, 10)
                .unwrap()
                .is_empty()
        );
        assert!(!any_between(&c, 0, i64::MAX, &nobody).unwrap());
        assert!(get::<Value>(&c, 1, &nobody).unwrap().is_none());
    }

    #[test]
    fn per_key_queries_use_their_indexes() {
        let c = seeded(10);
        let plan = |key| {
            let (cond, args) = filter_sql(&Filter::default(), Some(key));
            let sql = format!(
                "EXPLAIN QUERY PLAN {SELECT} WHERE seq > ?1 AND seq < ?2{cond} ORDER BY seq LIMIT 10"
            );
            let mut stmt = c.prepare(&sql).unwrap();
            let rows = stmt
                .query_map(crate::params_from_iter(with_range(0, 99, args)), |r| {
                    r.get::<_, String>(3)
                })
                .unwrap();
            rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
        };
        let repo = plan(VisibleKey::Repo(4));
        assert!(repo.contains("events_repo"), "{repo}");
        let org = plan(VisibleKey::Org(1));
        assert!(org.contains("events_org_only"), "{org}");
        assert!(!repo.contains("TEMP B-TREE") && !org.contains("TEMP B-TREE"));
    }

    #[test]
    fn prune_by_count_and_cursor_states() {
        let c = seeded(10);
        assert_eq!(prune(&c, None, Some(4), 1000).unwrap(), 6);
        let left =
            page::<Value>(&c, 0, i64::MAX, &Filter::default(), Direction::Forward, 100).unwrap();
        assert_eq!(
            left.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [7, 8, 9, 10]
        );
        assert_eq!(cursor(&c, 8).unwrap(), Cursor::Exists);
        assert_eq!(cursor(&c, 3).unwrap(), Cursor::Pruned);
        assert_eq!(cursor(&c, 11).unwrap(), Cursor::Unknown);
        assert_eq!(cursor(&c, 0).unwrap(), Cursor::Unknown);
        // Sequence numbers are never reused after pruning.
        append(
            &c,
            RecordType::Users,
            Action::Created,
            1,
            &json!({}),
            Owner::default(),
        )
        .unwrap();
        assert_eq!(list_after(&c, 10, 10).unwrap()[0].seq, 11);
        assert_eq!(
            prune(&c, Some(i64::MAX), None, 2).unwrap(),
            2,
            "batches are bounded"
        );
    }

    #[test]
    fn record_types_and_actions_parse_back_from_their_names() {
        for t in RecordType::ALL {
            assert_eq!(RecordType::parse(t.as_str()), Some(t));
        }
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(RecordType::ParticipationKeys.as_str(), "participation_keys");
        assert_eq!(RecordType::parse("things"), None);
        assert_eq!(Action::parse("Created"), None);
    }

    #[test]
    fn update_without_change_writes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        let v = json!({"login": "a"});
        assert!(
            !append_update(
                &WriteTx::new(&conn),
                RecordType::Users,
                1,
                &v,
                &v,
                Owner::default()
            )
            .unwrap()
        );
        let changed = json!({"login": "b"});
        append_update(
            &WriteTx::new(&conn),
            RecordType::Users,
            1,
            &v,
            &changed,
            Owner::default(),
        )
        .unwrap();
        let events = list_after(&WriteTx::new(&conn), 0, 10).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type(), "users.updated");
        assert_eq!(events[0].previous, Some(json!({"login": "a"})));
        assert_eq!(events[0].object, changed);
    }
}
