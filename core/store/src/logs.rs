//! Step logs, in their own SQLite file (`<data_dir>/logs.db`).
//!
//! Logs grow without bound and are written far more often than anything else, so they live
//! in a separate database with its own writer thread: a busy log stream never delays a
//! pipeline status update, and the main database stays small (upstream's most common
//! complaint). Lines are keyed by `(step_id, line)`, so a batch an agent re-sends after a
//! lost reply is stored once. Retention removes old lines by age.

use crate::{Tx, WriteTx};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::{StoreResult, migrations, now_unix_ms};
use woodlark_pipeline::types::{LineKind, LogLine};

/// The logs database file inside the data dir.
pub const LOGS_FILE: &str = "logs.db";

const MIGRATIONS: &[migrations::Step] = &[
    migrations::Step::Sql(
        r#"
    CREATE TABLE log_entries (
        id          INTEGER PRIMARY KEY,
        step_id     INTEGER NOT NULL,
        line        INTEGER NOT NULL,
        time        INTEGER NOT NULL,
        type        INTEGER NOT NULL,
        data        BLOB    NOT NULL,
        created_ms  INTEGER NOT NULL,
        UNIQUE (step_id, line)
    );
    CREATE INDEX log_entries_created ON log_entries (created_ms);
    "#,
    ),
    // Upstream numbers lines from 0 and sends no exit-code entries: drop those and renumber
    // (through negatives, so no two rows share a number mid-update).
    migrations::Step::Sql(
        r#"
    DELETE FROM log_entries WHERE type = 2;
    UPDATE log_entries SET line = -line;
    UPDATE log_entries SET line = -line - 1;
    "#,
    ),
];

pub fn migrate(conn: &mut Connection) -> StoreResult<()> {
    incremental_vacuum_on(conn)?;
    migrations::migrate_with(conn, MIGRATIONS)
}

/// Makes the file give deleted lines' pages back ([`reclaim`]): SQLite keeps freed pages for
/// reuse and never shrinks the file unless `auto_vacuum` is on, and the mode of a file that
/// already has tables only changes with a `VACUUM` (a rewrite of the file, once: instant for
/// a new file, minutes for a big one).
fn incremental_vacuum_on(conn: &Connection) -> StoreResult<()> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if mode != 2 {
        tracing::info!("turning on incremental vacuum in the logs database (rewrites it once)");
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
    }
    Ok(())
}

/// Gives the pages of deleted lines back to the file system (SQLite; PostgreSQL's autovacuum
/// does the same for its tables). A deleted pipeline's 100 MB of log otherwise stayed on disk.
fn reclaim(conn: &Tx) -> StoreResult<()> {
    if let Some(sqlite) = conn.sqlite_conn() {
        // The pragma frees one page per row it returns: every row must be stepped through.
        let mut stmt = sqlite.prepare_cached("PRAGMA incremental_vacuum")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}

/// One log line as the API renders it; `data` is base64 text, as upstream sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub id: i64,
    pub step_id: i64,
    /// Seconds since the step started.
    pub time: i64,
    pub line: i64,
    pub data: String,
    #[serde(rename = "type")]
    pub kind: LineKind,
}

impl LogEntry {
    /// Line `line` as stored under row id `id`.
    pub fn of(id: i64, line: &LogLine) -> LogEntry {
        LogEntry::new(
            id,
            line.step_id,
            line.time,
            line.line,
            line.kind,
            line.data.as_bytes(),
        )
    }

    /// The one rendering of a stored line, for reads and for live readers alike.
    pub fn new(
        id: i64,
        step_id: i64,
        time: i64,
        line: i64,
        kind: LineKind,
        data: &[u8],
    ) -> LogEntry {
        LogEntry {
            id,
            step_id,
            time,
            line,
            data: STANDARD.encode(data),
            kind,
        }
    }
}

/// Stores lines; lines already stored (same step and number) are skipped. Returns, for each
/// line that was new, its index in `lines` and its row id (rendering them, `LogEntry::of`,
/// is left to whoever needs it, off the writer thread).
pub fn append(conn: &WriteTx, lines: &[LogLine]) -> StoreResult<Vec<(usize, i64)>> {
    let now = now_unix_ms();
    let mut stmt = conn.prepare_cached(
        "INSERT INTO log_entries (step_id, line, time, type, data, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
    )?;
    let mut added = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        let data = l.data.as_bytes();
        if stmt.execute(params![l.step_id, l.line, l.time, l.kind.code(), data, now])? == 1 {
            added.push((i, conn.last_insert_rowid()?));
        }
    }
    Ok(added)
}

/// A stored line as it is in the database (its text unencoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLine {
    pub id: i64,
    pub line: i64,
    pub time: i64,
    pub kind: LineKind,
    pub data: Vec<u8>,
}

/// Lines of step `step_id` numbered `from` and up, in order, at most `limit` lines and no
/// more than about `max_bytes` of text (at least one line): a page of a log read in bounded
/// memory, however long the log.
pub fn page(
    conn: &Tx,
    step_id: i64,
    from: i64,
    limit: usize,
    max_bytes: usize,
) -> StoreResult<Vec<StoredLine>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, line, time, type, data FROM log_entries
         WHERE step_id = ?1 AND line >= ?2 ORDER BY line LIMIT ?3 + 0",
    )?;
    let mut rows = stmt.query(params![step_id, from, limit as i64])?;
    let (mut out, mut bytes) = (Vec::new(), 0);
    while bytes < max_bytes {
        let Some(r) = rows.next()? else { break };
        let code: i64 = r.get(3)?;
        let kind = LineKind::from_code(code).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                3,
                rusqlite::types::Type::Integer,
                format!("unknown log line type {code}").into(),
            )
        })?;
        let data: Vec<u8> = r.get(4)?;
        bytes += data.len();
        out.push(StoredLine {
            id: r.get(0)?,
            line: r.get(1)?,
            time: r.get(2)?,
            kind,
            data,
        });
    }
    Ok(out)
}

/// Lines of a step numbered `from` and up (lines count from 0), in order, at most `limit`.
pub fn list(conn: &Tx, step_id: i64, from: i64, limit: usize) -> StoreResult<Vec<LogEntry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, step_id, time, line, data, type FROM log_entries
         WHERE step_id = ?1 AND line >= ?2 ORDER BY line LIMIT ?3 + 0",
    )?;
    let rows = stmt.query_map(params![step_id, from, limit as i64], |r| {
        let data: Vec<u8> = r.get(4)?;
        let code: i64 = r.get(5)?;
        let kind = LineKind::from_code(code).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                5,
                rusqlite::types::Type::Integer,
                format!("unknown log line type {code}").into(),
            )
        })?;
        Ok(LogEntry::new(
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            kind,
            &data,
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The number the step's next line gets: one past the highest stored (0 when none), so a
/// restarted agent appends instead of overwriting.
pub fn next_line(conn: &Tx, step_id: i64) -> StoreResult<i64> {
    conn.cached_row(
        "SELECT coalesce(max(line) + 1, 0) FROM log_entries WHERE step_id = ?1",
        [step_id],
        |r| r.get(0),
    )
}

/// Distinct step ids that have lines, above `after`, ascending, at most `limit` (the orphan
/// sweep walks them in pages).
pub fn step_ids_after(conn: &Tx, after: i64, limit: usize) -> StoreResult<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT step_id FROM log_entries WHERE step_id > ?1 ORDER BY step_id LIMIT ?2 + 0",
    )?;
    let rows = stmt.query_map(params![after, limit as i64], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Removes every line of the given steps, and gives their space back.
pub fn delete_steps(conn: &WriteTx, step_ids: &[i64]) -> StoreResult<usize> {
    let mut stmt = conn.prepare_cached("DELETE FROM log_entries WHERE step_id = ?1")?;
    let mut removed = 0;
    for id in step_ids {
        removed += stmt.execute([id])?;
    }
    drop(stmt);
    if removed > 0 {
        reclaim(conn)?;
    }
    Ok(removed)
}

/// Removes lines stored before `cutoff_ms`, at most `batch` per call, and gives their space
/// back.
pub fn prune(conn: &WriteTx, cutoff_ms: i64, batch: usize) -> StoreResult<usize> {
    let removed = conn.cached_exec(
        "DELETE FROM log_entries WHERE id IN
           (SELECT id FROM log_entries WHERE created_ms < ?1 ORDER BY id LIMIT ?2 + 0)",
        params![cutoff_ms, batch as i64],
    )?;
    if removed > 0 {
        reclaim(conn)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: i64, n: i64, text: &str) -> LogLine {
        LogLine {
            step_id: step,
            line: n,
            time: 0,
            kind: LineKind::Stdout,
            data: text.into(),
        }
    }

    #[test]
    fn append_is_idempotent_and_ordered() {
        let mut c = Connection::open_in_memory().unwrap();
        migrate(&mut c).unwrap();
        assert_eq!(next_line(&WriteTx::new(&c), 1).unwrap(), 0);
        let first_lines = [line(1, 1, "b"), line(1, 0, "a")];
        let first = append(&WriteTx::new(&c), &first_lines).unwrap();
        assert_eq!(first.len(), 2);
        let again_lines = [line(1, 1, "b"), line(1, 2, "c")];
        let again = append(&WriteTx::new(&c), &again_lines).unwrap();
        assert_eq!(
            again
                .iter()
                .map(|(i, _)| again_lines[*i].line)
                .collect::<Vec<_>>(),
            [2]
        );
        let all = list(&WriteTx::new(&c), 1, 0, 100).unwrap();
        // What `append` returns, rendered, is what a later read shows: same ids, same text.
        let (i, id) = first[0];
        assert_eq!(all[1], LogEntry::of(id, &first_lines[i]));
        let (i, id) = again[0];
        assert_eq!(all[2], LogEntry::of(id, &again_lines[i]));
        assert_eq!(all.iter().map(|e| e.line).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(all[0].data, STANDARD.encode("a"));
        assert_eq!(list(&WriteTx::new(&c), 1, 2, 100).unwrap().len(), 1);
        // Pages: by lines, by bytes (at least one line), from a line on.
        let data = |p: Vec<StoredLine>| p.into_iter().map(|l| l.data).collect::<Vec<_>>();
        let tx = WriteTx::new(&c);
        assert_eq!(data(page(&tx, 1, 0, 2, 1 << 20).unwrap()), [b"a", b"b"]);
        assert_eq!(data(page(&tx, 1, 0, 10, 1).unwrap()), [b"a"]);
        assert_eq!(data(page(&tx, 1, 1, 10, 1 << 20).unwrap()), [b"b", b"c"]);
        assert!(page(&tx, 1, 3, 10, 1 << 20).unwrap().is_empty());
        assert_eq!(next_line(&WriteTx::new(&c), 1).unwrap(), 3);
        assert_eq!(delete_steps(&WriteTx::new(&c), &[1]).unwrap(), 3);
        assert_eq!(prune(&WriteTx::new(&c), i64::MAX, 10).unwrap(), 0);
    }

    #[test]
    fn deleted_lines_give_their_pages_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Connection::open(dir.path().join("logs.db")).unwrap();
        migrate(&mut c).unwrap();
        let pages =
            |c: &Connection| -> i64 { c.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap() };
        let empty = pages(&c);
        let big = "x".repeat(4000);
        let lines: Vec<LogLine> = (0..500).map(|n| line(1, n, &big)).collect();
        append(&WriteTx::new(&c), &lines).unwrap();
        assert!(pages(&c) > empty + 400, "{}", pages(&c));
        delete_steps(&WriteTx::new(&c), &[1]).unwrap();
        assert!(
            pages(&c) < empty + 10,
            "{} pages after the delete",
            pages(&c)
        );
    }

    #[test]
    fn stored_logs_are_renumbered_from_zero_without_exit_code_entries() {
        let mut c = Connection::open_in_memory().unwrap();
        migrations::migrate_with(&mut c, &MIGRATIONS[..1]).unwrap();
        let mut old = vec![line(7, 1, "a"), line(7, 2, "b"), line(8, 1, "x")];
        old.push(LogLine {
            kind: LineKind::ExitCode,
            ..line(7, 3, "0")
        });
        assert_eq!(append(&WriteTx::new(&c), &old).unwrap().len(), 4);
        migrate(&mut c).unwrap();
        let lines = |step| {
            list(&WriteTx::new(&c), step, 0, 10)
                .unwrap()
                .into_iter()
                .map(|e| (e.line, e.data))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines(7),
            [(0, STANDARD.encode("a")), (1, STANDARD.encode("b"))]
        );
        assert_eq!(lines(8), [(0, STANDARD.encode("x"))]);
    }
}
