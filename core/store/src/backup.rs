//! Backups of the embedded (SQLite) store: `woodlark backup`, `woodlark restore` and the
//! scheduled backups (`[storage] backup_dir`). The data dir's files and the temporary
//! directory are the server's business; this module copies and checks databases.
//!
//! - **An online copy, never a file copy.** [`copy_online`] uses SQLite's online backup API
//!   a few pages per step, inside one read transaction on the source: in WAL mode a reader
//!   never blocks the writer, and the pinned read transaction keeps the snapshot fixed, so
//!   commits made meanwhile by the running server neither restart the copy nor appear in it
//!   (the WAL grows until the copy ends: checkpoints cannot pass a reader's snapshot).
//! - **Two databases, two snapshots.** The main database is copied first, the logs second;
//!   then [`trim_logs`] drops from the logs' copy every line of a step the main copy does not
//!   have. So every step in the main snapshot has every line stored before that snapshot was
//!   taken (a step's end is reported after its lines), and the logs hold no line of a step
//!   created after it, whose id the restored server would hand out again.
//! - **A manifest checks the copy.** Each table's row count and an order-independent
//!   checksum of its rows (the tally `woodlark migrate` checks with), each database's schema
//!   version, and the sealing key's fingerprint — never the key. [`verify`] recomputes them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};

use crate::pg::transfer::{Tally, quoted};

/// The manifest's format; a restore refuses any other.
pub const FORMAT: u32 = 1;

/// The manifest's file name inside a backup.
pub const MANIFEST_FILE: &str = "manifest.json";

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a backup manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error(
        "the backup's manifest has format {found}, this woodlark reads format {FORMAT}: \
         restore it with the version that took it"
    )]
    Format { found: u32 },
    #[error("{path}: stayed busy for {secs} s while it was copied")]
    Busy { path: PathBuf, secs: u64 },
    #[error("{path}: the copy was stopped (the server is stopping)")]
    Stopped { path: PathBuf },
    /// A copy that does not match its manifest (or SQLite's own check).
    #[error("the backup is damaged: {file}: {problem}")]
    Damaged { file: String, problem: String },
}

type Result<T> = std::result::Result<T, BackupError>;

/// What a backup holds and how to check it (`manifest.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub created_unix_ms: i64,
    /// The version of woodlark that took it.
    pub woodlark_version: String,
    /// The sealing key's public fingerprint (the one the database records), never the key.
    pub key_fingerprint: String,
    /// The key file's name in the backup, when it was taken `--with-key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    pub databases: Vec<Database>,
}

/// One database file of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Database {
    /// Its name, in the backup and in the data dir.
    pub file: String,
    /// `PRAGMA user_version`: the migrations applied.
    pub schema_version: i64,
    pub tables: Vec<TableSum>,
}

/// One table's row count and checksum (a sum of its rows' SHA-256, 32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSum {
    pub name: String,
    pub rows: u64,
    pub checksum: String,
}

/// How the online copy steps: pages per step, a pause between steps, and a flag that stops
/// it between two steps (a server that stops while a scheduled backup runs).
#[derive(Debug, Clone)]
pub struct Pace {
    pub pages_per_step: i32,
    pub pause: Duration,
    pub stop: Option<Arc<AtomicBool>>,
}

impl Default for Pace {
    /// 64 pages (256 KiB of 4 KiB pages) per step, a millisecond apart.
    fn default() -> Self {
        Pace {
            pages_per_step: 64,
            pause: Duration::from_millis(1),
            stop: None,
        }
    }
}

/// How an online copy went.
#[derive(Debug, Clone, Copy)]
pub struct Copied {
    pub pages: i64,
    pub steps: u64,
    /// The longest single step: the most the copy held anything at once.
    pub longest_step: Duration,
    pub elapsed: Duration,
}

/// Gives up on a source that stays busy (locked by a migration, say) this long.
const BUSY_LIMIT: Duration = Duration::from_secs(30);

/// Copies the live SQLite database at `source` into a new file `dest` with the online
/// backup API, `pace.pages_per_step` pages at a time, all from one snapshot of the source.
/// `dest` is left a self-contained file (rollback journal mode, no `-wal`), mode 0600.
pub fn copy_online(source: &Path, dest: &Path, pace: &Pace) -> Result<Copied> {
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Sqlite { path, source }
    };
    // Read-write, as the server's own readers are not: a read-only connection cannot open a
    // WAL database whose `-shm` is missing (a stopped server). It writes nothing.
    let src = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(at(source))?;
    src.busy_timeout(Duration::from_secs(10))
        .map_err(at(source))?;
    src.pragma_update(None, "query_only", true)
        .map_err(at(source))?;
    // The snapshot: a read transaction held for the whole copy, which each step then uses
    // (SQLite opens and closes one per step only when none is open).
    src.execute_batch("BEGIN").map_err(at(source))?;
    src.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(at(source))?;
    create_private(dest)?;
    let mut dst = Connection::open(dest).map_err(at(dest))?;
    let started = Instant::now();
    let (mut steps, mut longest) = (0u64, Duration::ZERO);
    let pages = {
        let backup = Backup::new(&src, &mut dst).map_err(at(dest))?;
        let mut busy_since: Option<Instant> = None;
        loop {
            if pace
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return Err(BackupError::Stopped {
                    path: source.to_path_buf(),
                });
            }
            let step = Instant::now();
            let result = backup.step(pace.pages_per_step).map_err(at(source))?;
            longest = longest.max(step.elapsed());
            steps += 1;
            match result {
                StepResult::Done => break,
                StepResult::More => busy_since = None,
                _ => {
                    let since = *busy_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > BUSY_LIMIT {
                        return Err(BackupError::Busy {
                            path: source.to_path_buf(),
                            secs: BUSY_LIMIT.as_secs(),
                        });
                    }
                }
            }
            std::thread::sleep(pace.pause);
        }
        i64::from(backup.progress().pagecount)
    };
    src.execute_batch("COMMIT").map_err(at(source))?;
    drop(src);
    // The copy carries the source's WAL mode in its header; a backup is one file.
    dst.pragma_update(None, "journal_mode", "DELETE")
        .map_err(at(dest))?;
    dst.close().map_err(|(_, e)| at(dest)(e))?;
    Ok(Copied {
        pages,
        steps,
        longest_step: longest,
        elapsed: started.elapsed(),
    })
}

/// Creates `path` empty with mode 0600 (the copy holds token seeds and sealed secrets).
fn create_private(path: &Path) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path).map_err(|source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// Deletes from the logs' copy every line of a step the main copy does not have (deleted
/// before its snapshot, or created after it); returns how many went.
pub fn trim_logs(logs_copy: &Path, main_copy: &Path) -> Result<u64> {
    let at = |source| BackupError::Sqlite {
        path: logs_copy.to_path_buf(),
        source,
    };
    let conn = Connection::open(logs_copy).map_err(at)?;
    let main = main_copy.to_string_lossy();
    conn.execute("ATTACH DATABASE ?1 AS snapshot", [main.as_ref()])
        .map_err(at)?;
    let removed = conn
        .execute(
            "DELETE FROM log_entries WHERE step_id NOT IN (SELECT id FROM snapshot.steps)",
            [],
        )
        .map_err(at)?;
    conn.execute_batch("DETACH DATABASE snapshot").map_err(at)?;
    // The logs' file has incremental vacuum on: give the freed pages back.
    let mut vacuum = conn.prepare("PRAGMA incremental_vacuum").map_err(at)?;
    let mut rows = vacuum.query([]).map_err(at)?;
    while rows.next().map_err(at)?.is_some() {}
    Ok(removed as u64)
}

/// The schema version and every table's tally of the database at `path` (named `file` in
/// the backup), after SQLite's own `quick_check` of the file.
pub fn describe(path: &Path, file: &str) -> Result<Database> {
    let at = |source| BackupError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_file() {
        return Err(BackupError::Damaged {
            file: file.into(),
            problem: "missing".into(),
        });
    }
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(at)?;
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(at)?;
    if check != "ok" {
        return Err(BackupError::Damaged {
            file: file.into(),
            problem: format!("SQLite's quick_check fails: {check}"),
        });
    }
    let schema_version = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(at)?;
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(at)?;
    let mut tables = Vec::with_capacity(names.len());
    for name in names {
        let tally = tally(&conn, &name).map_err(at)?;
        tables.push(TableSum {
            name,
            rows: tally.rows,
            checksum: tally.hex(),
        });
    }
    Ok(Database {
        file: file.into(),
        schema_version,
        tables,
    })
}

fn tally(conn: &Connection, table: &str) -> rusqlite::Result<Tally> {
    let mut statement = conn.prepare(&format!("SELECT * FROM {}", quoted(table)))?;
    let width = statement.column_count();
    let mut rows = statement.query([])?;
    let mut tally = Tally::default();
    let mut values = Vec::with_capacity(width);
    while let Some(row) = rows.next()? {
        values.clear();
        for i in 0..width {
            values.push(row.get::<_, Value>(i)?);
        }
        tally.add(&values);
    }
    Ok(tally)
}

/// The sealing key fingerprint the main database at `path` records, if any.
pub fn recorded_key_fingerprint(path: &Path) -> Result<Option<String>> {
    let at = |source| BackupError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(at)?;
    let value = conn.query_row(
        "SELECT value FROM meta WHERE key = ?1",
        [crate::meta::SEALING_KEY],
        |r| r.get(0),
    );
    match value {
        Ok(value) => Ok(Some(value)),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(at(e)),
    }
}

/// Recomputes every database of `manifest` from the files in `dir` and compares; the first
/// difference is the error.
pub fn verify(dir: &Path, manifest: &Manifest) -> Result<()> {
    if manifest.format != FORMAT {
        return Err(BackupError::Format {
            found: manifest.format,
        });
    }
    for expected in &manifest.databases {
        let found = describe(&dir.join(&expected.file), &expected.file)?;
        compare(expected, &found)?;
    }
    Ok(())
}

/// The first way `found` differs from `expected`, as an error.
fn compare(expected: &Database, found: &Database) -> Result<()> {
    let damaged = |problem: String| {
        Err(BackupError::Damaged {
            file: expected.file.clone(),
            problem,
        })
    };
    if expected.schema_version != found.schema_version {
        return damaged(format!(
            "schema version {} where the manifest says {}",
            found.schema_version, expected.schema_version
        ));
    }
    for want in &expected.tables {
        let Some(have) = found.tables.iter().find(|t| t.name == want.name) else {
            return damaged(format!("table {} is missing", want.name));
        };
        if have != want {
            return damaged(format!(
                "table {} has {} rows with checksum {} where the manifest says {} rows with \
                 checksum {}",
                want.name, have.rows, have.checksum, want.rows, want.checksum
            ));
        }
    }
    if let Some(extra) = found
        .tables
        .iter()
        .find(|t| !expected.tables.iter().any(|w| w.name == t.name))
    {
        return damaged(format!("table {} is not in the manifest", extra.name));
    }
    Ok(())
}

impl Manifest {
    /// Reads `dir`'s manifest.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| BackupError::Io {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| BackupError::Manifest {
            path,
            message: e.to_string(),
        })
    }

    /// Writes the manifest into `dir` (mode 0600).
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| BackupError::Manifest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        woodlark_stdx::write_private(&path, &(text + "\n"))
            .map_err(|source| BackupError::Io { path, source })
    }

    /// Rows in all tables of all databases.
    pub fn rows(&self) -> u64 {
        self.databases
            .iter()
            .flat_map(|d| &d.tables)
            .map(|t| t.rows)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WriteTx;
    use crate::users::{self, EnvAdmins, NewUser};
    use woodlark_pipeline::types::LogLine;

    /// A WAL-mode main database with users (and their events) and a logs database with
    /// lines of steps 1-3 (the main one has no steps), as a server leaves them.
    fn data_dir(dir: &Path, users: usize) -> (PathBuf, PathBuf) {
        let main = dir.join("main.db");
        let mut conn = Connection::open(&main).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        crate::migrations::migrate(&mut conn).unwrap();
        conn.execute_batch("BEGIN").unwrap();
        let tx = WriteTx::new(&conn);
        for n in 0..users {
            let new = NewUser {
                login: format!("user{n}"),
                token_seed: format!("seed-{n}"),
                ..NewUser::default()
            };
            users::create(&tx, &EnvAdmins::default(), &new).unwrap();
        }
        crate::meta::claim(&tx, crate::meta::SEALING_KEY, "00ff00ff00ff00ff").unwrap();
        conn.execute_batch("COMMIT").unwrap();
        let logs = dir.join("logs.db");
        let mut conn = Connection::open(&logs).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        crate::logs::migrate(&mut conn).unwrap();
        let lines: Vec<LogLine> = (0..30)
            .map(|n| LogLine {
                step_id: 1 + n % 3,
                line: n / 3,
                time: n,
                data: format!("line {n}"),
                kind: Default::default(),
            })
            .collect();
        crate::logs::append(&WriteTx::new(&conn), &lines).unwrap();
        (main, logs)
    }

    /// The first column of every row `sql` returns.
    fn column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> Vec<T> {
        let mut statement = conn.prepare(sql).unwrap();
        let rows = statement.query_map([], |r| r.get(0)).unwrap();
        rows.collect::<rusqlite::Result<_>>().unwrap()
    }

    fn manifest_of(dir: &Path) -> Manifest {
        Manifest {
            format: FORMAT,
            created_unix_ms: 1,
            woodlark_version: "test".into(),
            key_fingerprint: "00ff00ff00ff00ff".into(),
            key_file: None,
            databases: vec![
                describe(&dir.join("main.db"), "main.db").unwrap(),
                describe(&dir.join("logs.db"), "logs.db").unwrap(),
            ],
        }
    }

    /// A backup of two databases: copied, trimmed, described; the manifest round-trips and
    /// verifies; a changed row, a missing file or another format is named.
    #[test]
    fn a_manifest_describes_its_copies_and_verification_finds_any_change() {
        let (source, backup) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (main, logs) = data_dir(source.path(), 5);
        let pace = Pace {
            pages_per_step: 2,
            pause: Duration::ZERO,
            stop: None,
        };
        let copied = copy_online(&main, &backup.path().join("main.db"), &pace).unwrap();
        assert!(copied.steps > 1 && copied.pages > 2, "{copied:?}");
        copy_online(&logs, &backup.path().join("logs.db"), &pace).unwrap();
        // The main copy has no steps: every line is of a step it does not know.
        let removed = trim_logs(
            &backup.path().join("logs.db"),
            &backup.path().join("main.db"),
        );
        assert_eq!(removed.unwrap(), 30);

        let manifest = manifest_of(backup.path());
        let users = &manifest.databases[0].tables;
        let count = |name: &str| users.iter().find(|t| t.name == name).unwrap().rows;
        assert_eq!(count("users"), 5);
        assert!(count("events") >= 5);
        assert_eq!(count("meta"), 1);
        assert_eq!(
            manifest.databases[0].schema_version,
            crate::migrations::CURRENT_VERSION
        );
        let log_entries = &manifest.databases[1].tables;
        assert_eq!(log_entries[0].name, "log_entries");
        assert_eq!(log_entries[0].rows, 0);
        assert_eq!(
            recorded_key_fingerprint(&backup.path().join("main.db")).unwrap(),
            Some("00ff00ff00ff00ff".into())
        );
        // A copy is a file alone: no WAL beside it, none needed.
        assert!(!backup.path().join("main.db-wal").exists());

        manifest.write(backup.path()).unwrap();
        let read = Manifest::read(backup.path()).unwrap();
        assert_eq!(read, manifest);
        verify(backup.path(), &read).unwrap();

        // One value changed in one row.
        Connection::open(backup.path().join("main.db"))
            .unwrap()
            .execute("UPDATE users SET email = 'x@y' WHERE login = 'user3'", [])
            .unwrap();
        let err = verify(backup.path(), &read).unwrap_err().to_string();
        assert!(
            err.starts_with("the backup is damaged: main.db: table users has 5 rows with checksum"),
            "{err}"
        );
        // Another format.
        let newer = Manifest {
            format: FORMAT + 1,
            ..read.clone()
        };
        let err = verify(backup.path(), &newer).unwrap_err().to_string();
        assert!(err.contains("format 2"), "{err}");
        // A file gone.
        std::fs::remove_file(backup.path().join("logs.db")).unwrap();
        let mut only_logs = read.clone();
        only_logs.databases.remove(0);
        let err = verify(backup.path(), &only_logs).unwrap_err().to_string();
        assert_eq!(err, "the backup is damaged: logs.db: missing");
        // Not a manifest.
        std::fs::write(backup.path().join(MANIFEST_FILE), "{").unwrap();
        let err = Manifest::read(backup.path()).unwrap_err().to_string();
        assert!(err.contains("not a backup manifest"), "{err}");
    }

    #[test]
    fn a_stopped_copy_ends_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (main, _) = data_dir(dir.path(), 1);
        let pace = Pace {
            stop: Some(Arc::new(AtomicBool::new(true))),
            ..Pace::default()
        };
        let err = copy_online(&main, &dir.path().join("copy.db"), &pace).unwrap_err();
        assert!(matches!(err, BackupError::Stopped { .. }), "{err}");
    }

    #[test]
    fn the_comparison_names_a_missing_an_extra_table_and_another_schema() {
        let table = |name: &str, rows| TableSum {
            name: name.into(),
            rows,
            checksum: format!("{rows:032x}"),
        };
        let want = Database {
            file: "f.db".into(),
            schema_version: 3,
            tables: vec![table("a", 1), table("b", 2)],
        };
        let with = |version, tables| Database {
            file: "f.db".into(),
            schema_version: version,
            tables,
        };
        assert!(compare(&want, &want.clone()).is_ok());
        let err = |found| {
            let err = compare(&want, &found).unwrap_err().to_string();
            err.trim_start_matches("the backup is damaged: ")
                .to_string()
        };
        assert_eq!(
            err(with(3, vec![table("a", 1)])),
            "f.db: table b is missing"
        );
        assert_eq!(
            err(with(3, vec![table("a", 1), table("b", 2), table("c", 0)])),
            "f.db: table c is not in the manifest"
        );
        assert_eq!(
            err(with(4, want.tables.clone())),
            "f.db: schema version 4 where the manifest says 3"
        );
    }

    /// Lines of steps the main copy has stay; the others go.
    #[test]
    fn the_logs_copy_keeps_the_lines_of_the_main_copys_steps_only() {
        let dir = tempfile::tempdir().unwrap();
        let (main, logs) = data_dir(dir.path(), 1);
        let main_copy = dir.path().join("main-copy.db");
        let conn = Connection::open(&main).unwrap();
        // Steps 1 and 2 exist (foreign keys off: just the ids matter here).
        conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
        let columns: Vec<String> = column(
            &conn,
            "SELECT name FROM pragma_table_info('steps') WHERE \"notnull\" = 1 \
             AND dflt_value IS NULL",
        );
        for id in [1, 2] {
            // Every required column gets the id (some are unique).
            let values = vec![id.to_string(); columns.len()];
            conn.execute(
                &format!(
                    "INSERT INTO steps ({}) VALUES ({})",
                    columns.join(", "),
                    values.join(", ")
                ),
                [],
            )
            .unwrap();
        }
        drop(conn);
        copy_online(&main, &main_copy, &Pace::default()).unwrap();
        let logs_copy = dir.path().join("logs-copy.db");
        copy_online(&logs, &logs_copy, &Pace::default()).unwrap();
        assert_eq!(trim_logs(&logs_copy, &main_copy).unwrap(), 10);
        let left: Vec<i64> = column(
            &Connection::open(&logs_copy).unwrap(),
            "SELECT DISTINCT step_id FROM log_entries ORDER BY step_id",
        );
        assert_eq!(left, [1, 2]);
        // The source is untouched.
        let all: i64 = Connection::open(&logs)
            .unwrap()
            .query_row("SELECT count(*) FROM log_entries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(all, 30);
    }

    /// A writer committing all along on another connection (as the server does) neither
    /// waits for the copy nor gets into it: the copy is the snapshot of its start, and it
    /// ends. Prints how long the longest step took and the longest commit with and without
    /// a copy running (the numbers in docs/deployment.md).
    #[test]
    fn a_busy_writer_is_not_held_back_and_the_copy_is_one_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (main, _) = data_dir(dir.path(), 5_000);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = std::thread::spawn({
            let (main, stop) = (main.clone(), stop.clone());
            move || {
                let mut conn = Connection::open(&main).unwrap();
                conn.busy_timeout(Duration::from_secs(10)).unwrap();
                let mut latencies = Vec::new();
                let mut n = 0;
                // At least a few commits after the copy, however slow the machine.
                let mut after = 0;
                while after < 5 {
                    if stop.load(Ordering::Relaxed) {
                        after += 1;
                    }
                    let at = Instant::now();
                    let tx = conn.transaction().unwrap();
                    let new = NewUser {
                        login: format!("late{n}"),
                        token_seed: "s".into(),
                        ..NewUser::default()
                    };
                    users::create(&WriteTx::new(&tx), &EnvAdmins::default(), &new).unwrap();
                    tx.commit().unwrap();
                    latencies.push((at, at.elapsed()));
                    n += 1;
                }
                latencies
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        let pace = Pace {
            pages_per_step: 16,
            pause: Duration::from_millis(1),
            stop: None,
        };
        let copy = dir.path().join("copy.db");
        let began = Instant::now();
        let copied = copy_online(&main, &copy, &pace).unwrap();
        let ended = Instant::now();
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let latencies = writer.join().unwrap();
        let longest = |during: bool| {
            latencies
                .iter()
                .filter(|(at, _)| (*at >= began && *at <= ended) == during)
                .map(|(_, took)| *took)
                .max()
                .unwrap_or_default()
        };
        let users = describe(&copy, "copy.db").unwrap();
        let rows = |name: &str| users.tables.iter().find(|t| t.name == name).unwrap().rows;
        eprintln!(
            "online copy of {} pages ({} users): {} steps of {} pages in {:?}, longest step \
             {:?}; {} commits meanwhile, longest {:?} during the copy, {:?} outside it",
            copied.pages,
            rows("users"),
            copied.steps,
            pace.pages_per_step,
            copied.elapsed,
            copied.longest_step,
            latencies
                .iter()
                .filter(|(at, _)| *at >= began && *at <= ended)
                .count(),
            longest(true),
            longest(false),
        );
        assert!(copied.steps > 10, "{copied:?}");
        assert!(
            copied.longest_step < Duration::from_millis(200),
            "{copied:?}"
        );
        // Some commits happened during the copy, and none of them is in it; the copy holds
        // whole transactions only: each user with its event.
        let late = Connection::open(&copy)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM users WHERE login LIKE 'late%'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap();
        let before = latencies.iter().filter(|(at, _)| *at < began).count() as i64;
        let after = latencies.iter().filter(|(at, _)| *at > ended).count() as i64;
        assert!(after > 0, "the writer went on after the copy");
        assert!(
            late >= before - 1 && late <= latencies.len() as i64 - after,
            "{late} late users in the copy; {before} were committed before it began"
        );
        // The snapshot is taken before the first step: commits made while the steps ran
        // (all but the first few of those during the copy) are not in it.
        let during = latencies.len() as i64 - before - after;
        if during >= 3 {
            assert!(
                late < before + during,
                "{late} late users: {before} + {during}"
            );
        }
        let without_event: i64 = Connection::open(&copy)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM users u WHERE NOT EXISTS (SELECT 1 FROM events e \
                 WHERE e.record_type = 'users' AND e.action = 'created' \
                 AND e.record_id = CAST(u.id AS TEXT))",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(without_event, 0);
        assert!(rows("users") >= 5_000);
    }
}
