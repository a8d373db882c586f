//! Moving a SQLite data dir into PostgreSQL (`woodlark migrate --to postgres://…`).
//!
//! Every table of the SQLite databases (the main one and the logs') is copied as stored:
//! ids, event ids, sealed secrets and log bytes alike, so the server answers the same on the
//! new store. The copy is one transaction on the target and is checked before it commits:
//! for each table the row count and a checksum of every row, computed from the SQLite rows as
//! they were read and again from the PostgreSQL rows as they were stored. A mismatch rolls
//! the whole copy back, leaving the target empty.
//!
//! The checksum is a sum (mod 2^128) of each row's SHA-256, so it does not depend on the
//! order in which either engine returns rows (their text orderings differ).
//!
//! Rules the copy keeps:
//! - **Empty target only.** A target with any row in any of the store's tables is refused
//!   before anything is written; nothing is merged or overwritten.
//! - **Same schema.** Both sides are brought to their latest schema first; a table or
//!   column one side has and the other lacks stops the copy with their names.
//! - **Ids are never reused.** Each identity sequence is moved past the highest id ever
//!   handed out: the copied rows' maximum, or SQLite's `sqlite_sequence` where it is higher
//!   (events deleted by retention keep their ids spent).
//! - **Parents before children**, following the foreign keys, so every constraint is
//!   checked as rows arrive.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use rusqlite::types::Value;
use sha2::{Digest, Sha256};

use super::PgError;
use crate::sql::{PgBind, pg_row_values};
use crate::{StoreError, StoreResult};

/// Tables one engine keeps for itself, never copied.
const ENGINE_TABLES: &[&str] = &["sqlite_sequence", "woodlark_schema"];

/// Rows per `INSERT` (fewer for wide tables: PostgreSQL takes at most 65535 parameters).
const ROWS_PER_INSERT: usize = 200;

/// One SQLite database to copy and the migrations that bring it up to date.
pub struct Source {
    pub path: PathBuf,
    pub migrate: fn(&mut rusqlite::Connection) -> StoreResult<()>,
}

/// What was copied of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub table: String,
    pub rows: u64,
    /// 32 hex digits, the same on both engines (checked).
    pub checksum: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error("{path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "the target database is not empty (table {table} has rows); migrate copies into an \
         empty database only: create a new one, or drop this one's tables first"
    )]
    TargetNotEmpty { table: String },
    #[error("table {table} of {path} has no counterpart in the PostgreSQL schema")]
    NoCounterpart { table: String, path: PathBuf },
    #[error(
        "table {table} differs between the engines: columns only in SQLite {sqlite_only:?}, \
         only in PostgreSQL {postgres_only:?}"
    )]
    Columns {
        table: String,
        sqlite_only: Vec<String>,
        postgres_only: Vec<String>,
    },
    #[error(
        "table {table} did not arrive intact ({sqlite_rows} rows read, checksum \
         {sqlite_sum}; {postgres_rows} stored, checksum {postgres_sum}); nothing was committed"
    )]
    Mismatch {
        table: String,
        sqlite_rows: u64,
        sqlite_sum: String,
        postgres_rows: u64,
        postgres_sum: String,
    },
}

type Result<T> = std::result::Result<T, TransferError>;

/// Count and order-independent checksum of a table's rows.
/// (`backup` checks its copies with the same tally.)
#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) rows: u64,
    sum: u128,
}

impl Tally {
    pub(crate) fn add(&mut self, row: &[Value]) {
        let mut hash = Sha256::new();
        for value in row {
            match value {
                Value::Null => hash.update([0]),
                Value::Integer(i) => {
                    hash.update([1]);
                    hash.update(i.to_be_bytes());
                }
                Value::Real(f) => {
                    hash.update([2]);
                    hash.update(f.to_bits().to_be_bytes());
                }
                Value::Text(s) => {
                    hash.update([3]);
                    hash.update((s.len() as u64).to_be_bytes());
                    hash.update(s.as_bytes());
                }
                Value::Blob(b) => {
                    hash.update([4]);
                    hash.update((b.len() as u64).to_be_bytes());
                    hash.update(b);
                }
            }
        }
        let digest = hash.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        self.rows += 1;
        self.sum = self.sum.wrapping_add(u128::from_be_bytes(first));
    }

    pub(crate) fn hex(self) -> String {
        format!("{:032x}", self.sum)
    }
}

/// A table of a source database, as it is to be copied.
struct Table {
    name: String,
    columns: Vec<String>,
    /// Tables it references (copied first).
    parents: BTreeSet<String>,
    /// The highest id SQLite ever handed out for it (`sqlite_sequence`), if it keeps one.
    spent: Option<i64>,
}

/// Copies every table of `sources` into the empty PostgreSQL database at `url` and checks
/// it; returns what was copied, table by table, in copy order. The server must be stopped
/// (nothing may write to the sources meanwhile).
pub fn sqlite_to_postgres(sources: &[Source], url: &str) -> Result<Vec<Copied>> {
    let mut connections = Vec::new();
    for source in sources {
        let open = |source_err| TransferError::Open {
            path: source.path.clone(),
            source: source_err,
        };
        let mut conn = rusqlite::Connection::open(&source.path).map_err(open)?;
        (source.migrate)(&mut conn)?;
        // One snapshot per source for the whole copy.
        conn.execute_batch("BEGIN").map_err(open)?;
        connections.push(conn);
    }
    let mut client = super::connect(url)?;
    super::schema::migrate(&mut client)?;
    let target = target_columns(&mut client)?;

    let mut tables = Vec::new();
    for (source, conn) in sources.iter().zip(&connections) {
        for table in source_tables(conn)? {
            let Some(pg_columns) = target.get(&table.name) else {
                return Err(TransferError::NoCounterpart {
                    table: table.name,
                    path: source.path.clone(),
                });
            };
            check_columns(&table, pg_columns)?;
            tables.push((table, conn));
        }
    }
    for table in target.keys() {
        refuse_rows(&mut client, table)?;
    }
    let order = parents_first(tables.iter().map(|(t, _)| t).collect());

    let mut tx = client
        .transaction()
        .map_err(PgError::query("begin the copy"))?;
    let mut copied = Vec::new();
    for name in order {
        let (table, conn) = tables
            .iter()
            .find(|(t, _)| t.name == name)
            .unwrap_or_else(|| unreachable!("ordered from the same list"));
        let read = copy_table(conn, &mut tx, table)?;
        let stored = tally_target(&mut tx, table)?;
        if read != stored {
            return Err(TransferError::Mismatch {
                table: table.name.clone(),
                sqlite_rows: read.rows,
                sqlite_sum: read.hex(),
                postgres_rows: stored.rows,
                postgres_sum: stored.hex(),
            });
        }
        advance_identity(&mut tx, table)?;
        tracing::info!(table = %table.name, rows = read.rows, "copied");
        copied.push(Copied {
            table: table.name.clone(),
            rows: read.rows,
            checksum: read.hex(),
        });
    }
    tx.commit().map_err(PgError::query("commit the copy"))?;
    Ok(copied)
}

/// The store's tables on the target and their columns.
fn target_columns(client: &mut postgres::Client) -> Result<BTreeMap<String, Vec<String>>> {
    let rows = client
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
            &[],
        )
        .map_err(PgError::query("read the target's tables"))?;
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in rows {
        let table: String = row.get(0);
        if !ENGINE_TABLES.contains(&table.as_str()) {
            tables.entry(table).or_default().push(row.get(1));
        }
    }
    Ok(tables)
}

fn source_tables(conn: &rusqlite::Connection) -> StoreResult<Vec<Table>> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let has_sequences = names.iter().any(|n| n == "sqlite_sequence");
    let mut tables = Vec::new();
    for name in names {
        if ENGINE_TABLES.contains(&name.as_str()) {
            continue;
        }
        let columns = conn
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")?
            .query_map([&name], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let parents = conn
            .prepare("SELECT DISTINCT \"table\" FROM pragma_foreign_key_list(?1)")?
            .query_map([&name], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<BTreeSet<_>>>()?;
        let spent = if has_sequences {
            conn.query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                [&name],
                |r| r.get(0),
            )
            .ok()
        } else {
            None
        };
        tables.push(Table {
            name,
            columns,
            parents,
            spent,
        });
    }
    Ok(tables)
}

fn check_columns(table: &Table, pg_columns: &[String]) -> Result<()> {
    let sqlite: BTreeSet<&String> = table.columns.iter().collect();
    let postgres: BTreeSet<&String> = pg_columns.iter().collect();
    if sqlite == postgres {
        return Ok(());
    }
    Err(TransferError::Columns {
        table: table.name.clone(),
        sqlite_only: sqlite
            .difference(&postgres)
            .map(|c| c.to_string())
            .collect(),
        postgres_only: postgres
            .difference(&sqlite)
            .map(|c| c.to_string())
            .collect(),
    })
}

fn refuse_rows(client: &mut postgres::Client, table: &str) -> Result<()> {
    let row = client
        .query_one(
            &format!("SELECT EXISTS (SELECT 1 FROM {})", quoted(table)),
            &[],
        )
        .map_err(PgError::query("look for rows in the target"))?;
    if row.get::<_, bool>(0) {
        return Err(TransferError::TargetNotEmpty {
            table: table.to_string(),
        });
    }
    Ok(())
}

/// Table names with every table after the ones it references.
fn parents_first(tables: Vec<&Table>) -> Vec<String> {
    let all: BTreeSet<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    let mut done: Vec<String> = Vec::new();
    let mut left = tables;
    while !left.is_empty() {
        let before = left.len();
        left.retain(|t| {
            // A reference to itself, or to a table no source has, holds nothing back.
            let ready = t
                .parents
                .iter()
                .all(|p| *p == t.name || done.contains(p) || !all.contains(p.as_str()));
            if ready {
                done.push(t.name.clone());
            }
            !ready
        });
        if left.len() == before {
            // A cycle (none in the schema today): the rest in name order; PostgreSQL then
            // reports the constraint a row breaks.
            done.extend(left.drain(..).map(|t| t.name.clone()));
        }
    }
    done
}

pub(crate) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn column_list(table: &Table) -> String {
    table
        .columns
        .iter()
        .map(|c| quoted(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Inserts every row of `table` and returns the tally of what was read.
fn copy_table(
    conn: &rusqlite::Connection,
    tx: &mut postgres::Transaction<'_>,
    table: &Table,
) -> Result<Tally> {
    let width = table.columns.len();
    let per_insert = ROWS_PER_INSERT.min(65535 / width.max(1)).max(1);
    let mut statement = conn
        .prepare(&format!(
            "SELECT {} FROM {}",
            column_list(table),
            quoted(&table.name)
        ))
        .map_err(StoreError::from)?;
    let mut rows = statement.query([]).map_err(StoreError::from)?;
    let mut tally = Tally::default();
    let mut pending: Vec<PgBind> = Vec::with_capacity(per_insert * width);
    let mut full_insert = None;
    while let Some(row) = rows.next().map_err(StoreError::from)? {
        let values = (0..width)
            .map(|i| row.get::<_, Value>(i))
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(StoreError::from)?;
        tally.add(&values);
        pending.extend(values.into_iter().map(PgBind));
        if pending.len() == per_insert * width {
            if full_insert.is_none() {
                full_insert = Some(prepare_insert(tx, table, per_insert)?);
            }
            let insert = full_insert.as_ref().unwrap_or_else(|| unreachable!());
            run_insert(tx, insert, &pending, &table.name)?;
            pending.clear();
        }
    }
    if !pending.is_empty() {
        let insert = prepare_insert(tx, table, pending.len() / width)?;
        run_insert(tx, &insert, &pending, &table.name)?;
    }
    Ok(tally)
}

fn prepare_insert(
    tx: &mut postgres::Transaction<'_>,
    table: &Table,
    rows: usize,
) -> Result<postgres::Statement> {
    let width = table.columns.len();
    let groups: Vec<String> = (0..rows)
        .map(|r| {
            let params: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
            format!("({})", params.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        quoted(&table.name),
        column_list(table),
        groups.join(", ")
    );
    Ok(tx
        .prepare(&sql)
        .map_err(PgError::query("prepare a copy insert"))?)
}

fn run_insert(
    tx: &mut postgres::Transaction<'_>,
    insert: &postgres::Statement,
    values: &[PgBind],
    table: &str,
) -> Result<()> {
    let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = values
        .iter()
        .map(|b| b as &(dyn postgres::types::ToSql + Sync))
        .collect();
    tx.execute(insert, &refs).map_err(|cause| {
        // The error itself is returned (and shown once, by the command).
        tracing::error!(table, "a copy insert failed");
        PgError::Query {
            what: "insert copied rows",
            cause,
        }
    })?;
    Ok(())
}

/// The tally of `table` as PostgreSQL stored it (read back in the copy's transaction).
fn tally_target(tx: &mut postgres::Transaction<'_>, table: &Table) -> Result<Tally> {
    let statement = tx
        .prepare(&format!(
            "SELECT {} FROM {}",
            column_list(table),
            quoted(&table.name)
        ))
        .map_err(PgError::query("read the copied rows back"))?;
    let params: [&(dyn postgres::types::ToSql + Sync); 0] = [];
    let mut rows = tx
        .query_raw(&statement, params)
        .map_err(PgError::query("read the copied rows back"))?;
    let mut tally = Tally::default();
    use postgres::fallible_iterator::FallibleIterator;
    while let Some(row) = rows
        .next()
        .map_err(PgError::query("read the copied rows back"))?
    {
        tally.add(&pg_row_values(&row)?);
    }
    Ok(tally)
}

/// Moves the table's identity sequence, if it has one, past every id SQLite handed out.
fn advance_identity(tx: &mut postgres::Transaction<'_>, table: &Table) -> Result<()> {
    let identity = tx
        .query_opt(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 AND is_identity = 'YES'",
            &[&table.name],
        )
        .map_err(PgError::query("find the table's identity column"))?;
    let Some(identity) = identity else {
        return Ok(());
    };
    let column: String = identity.get(0);
    let highest: Option<i64> = tx
        .query_one(
            &format!(
                "SELECT max({}) FROM {}",
                quoted(&column),
                quoted(&table.name)
            ),
            &[],
        )
        .map_err(PgError::query("read the highest copied id"))?
        .get(0);
    let Some(last) = highest
        .into_iter()
        .chain(table.spent)
        .max()
        .filter(|id| *id > 0)
    else {
        return Ok(()); // nothing ever handed out: the sequence starts at 1
    };
    tx.execute(
        "SELECT setval(pg_get_serial_sequence($1, $2), $3)",
        &[&quoted(&table.name), &column, &last],
    )
    .map_err(PgError::query("move the table's id sequence"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WriteTx;
    use crate::pg::testing::Cluster;
    use crate::users::{self, EnvAdmins, NewUser};
    use std::path::Path;
    use woodlark_pipeline::types::LogLine;

    /// A main and a logs database in `dir` with users (and their events, the last ones
    /// deleted as retention would), a meta row and log lines with arbitrary bytes.
    fn sources(dir: &Path) -> Vec<Source> {
        let main = dir.join("main.db");
        let mut conn = rusqlite::Connection::open(&main).unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        let tx = WriteTx::new(&conn);
        for login in ["ann", "bo", "cy"] {
            let new = NewUser {
                login: login.into(),
                token_seed: format!("seed-{login}"),
                ..NewUser::default()
            };
            users::create(&tx, &EnvAdmins::default(), &new).unwrap();
        }
        crate::meta::claim(&tx, crate::meta::SEALING_KEY, "00ff").unwrap();
        conn.execute(
            "DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)",
            [],
        )
        .unwrap();
        let logs = dir.join("logs.db");
        let mut conn = rusqlite::Connection::open(&logs).unwrap();
        crate::logs::migrate(&mut conn).unwrap();
        let lines: Vec<LogLine> = (0..450)
            .map(|n| LogLine {
                step_id: 1 + n % 3,
                line: n / 3,
                time: n,
                data: format!("line {n} \u{1b}[31mred\u{1b}[0m"),
                kind: Default::default(),
            })
            .collect();
        crate::logs::append(&WriteTx::new(&conn), &lines).unwrap();
        vec![
            Source {
                path: main,
                migrate: crate::migrations::migrate,
            },
            Source {
                path: logs,
                migrate: crate::logs::migrate,
            },
        ]
    }

    #[test]
    fn a_data_dir_arrives_whole_ids_stay_spent_and_a_full_target_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sources = sources(dir.path());
        let url = Cluster::shared().fresh_database();
        let copied = sqlite_to_postgres(&sources, &url).unwrap();
        let rows = |table: &str| copied.iter().find(|c| c.table == table).unwrap().rows;
        assert_eq!(rows("users"), 3);
        assert_eq!(rows("log_entries"), 450);
        assert_eq!(rows("meta"), 1);
        let events = rows("events");
        assert!(events >= 2, "{copied:?}");
        assert!(copied.iter().all(|c| c.checksum.len() == 32));

        let mut client = crate::pg::connect(&url).unwrap();
        // The deleted event's id stays spent: the next one comes after it.
        let spent: i64 = rusqlite::Connection::open(&sources[0].path)
            .unwrap()
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let next: i64 = client
            .query_one(
                "INSERT INTO events (created_ms, record_type, action, record_id, object) \
                 VALUES (1, 'user', 'created', 'x', '{}') RETURNING seq",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(next, spent + 1);
        let log_bytes: Vec<u8> = client
            .query_one(
                "SELECT data FROM log_entries WHERE step_id = 2 AND line = 0",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(log_bytes, "line 1 \u{1b}[31mred\u{1b}[0m".as_bytes());

        // Again into the same database: refused, and nothing changes.
        let err = sqlite_to_postgres(&sources, &url).unwrap_err();
        assert!(matches!(err, TransferError::TargetNotEmpty { .. }), "{err}");
        assert!(err.to_string().contains("empty database only"), "{err}");
        let users: i64 = client
            .query_one("SELECT count(*) FROM users", &[])
            .unwrap()
            .get(0);
        assert_eq!(users, 3);
    }

    #[test]
    fn tables_come_after_the_tables_they_reference() {
        let table = |name: &str, parents: &[&str]| Table {
            name: name.into(),
            columns: vec!["id".into()],
            parents: parents.iter().map(|p| p.to_string()).collect(),
            spent: None,
        };
        let (steps, pipelines, repos, users, selfref) = (
            table("steps", &["pipelines"]),
            table("pipelines", &["repos"]),
            table("repos", &["forges"]),
            table("users", &[]),
            table("tree", &["tree"]),
        );
        let order = parents_first(vec![&steps, &pipelines, &repos, &users, &selfref]);
        let at = |n: &str| order.iter().position(|o| o == n).unwrap();
        assert!(at("repos") < at("pipelines") && at("pipelines") < at("steps"));
        assert_eq!(order.len(), 5);
    }

    #[test]
    fn the_checksum_ignores_row_order_and_sees_every_value() {
        let a = vec![Value::Integer(1), Value::Text("x".into())];
        let b = vec![Value::Integer(2), Value::Blob(vec![0, 1])];
        let (mut one, mut two) = (Tally::default(), Tally::default());
        one.add(&a);
        one.add(&b);
        two.add(&b);
        two.add(&a);
        assert!(one == two);
        let mut changed = Tally::default();
        changed.add(&a);
        changed.add(&[Value::Integer(2), Value::Blob(vec![0, 2])]);
        assert!(one != changed);
        // A text and a blob with the same bytes are different values.
        let (mut text, mut blob) = (Tally::default(), Tally::default());
        text.add(&[Value::Text("ab".into())]);
        blob.add(&[Value::Blob(b"ab".to_vec())]);
        assert!(text != blob);
    }
}
