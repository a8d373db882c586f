//! Storage: SQLite through rusqlite (embedded, the default) or PostgreSQL (replicas on one
//! database, [`Store::open_postgres`]), one writer thread and a pool of readers on either;
//! every statement runs through [`Tx`] (`sql.rs`).
//!
//! - **One writer.** SQLite allows one writer at a time; instead of letting requests fight for
//!   the lock (upstream's "database is locked" under concurrent webhooks), every write is a job
//!   sent to a dedicated thread that owns the write connection. Jobs waiting in the queue are
//!   committed together in one transaction (group commit), each inside its own savepoint so a
//!   failing job rolls back alone. A job's caller is answered only **after** the commit, so a
//!   success reply is durable (`synchronous=FULL` by default).
//! - **Reads and writes are different types.** A write job gets a [`WriteTx`], a read a
//!   [`Tx`]; every function here that changes rows takes a `WriteTx` (which derefs to `Tx`, so
//!   reads work inside a write), so a write inside a read does not compile.
//!   [`Store::open_read_only`] opens readers alone, for commands that only read.
//! - **N readers.** Read-only connections in WAL mode see the last commit and never block the
//!   writer. A short read runs on the calling worker when a connection is free (the hand-off
//!   to the blocking pool costs more than an indexed lookup); long reads use the pool.
//! - **Generations.** One counter per [`Domain`] (a group of tables), bumped after every
//!   commit that changed a row of one of its tables (seen by SQLite's update hook on the
//!   writer, so no code path can forget it). [`cache::GenerationCache`] entries tagged with
//!   an older value are misses: who a token names, what a caller may do on a repository and
//!   the rendered pipeline and event pages are cached without ever being stale. (SQLite's
//!   update hook misses `DELETE FROM t` without a `WHERE`, its truncate shortcut: the store
//!   never issues one on these tables.)
//! - **Outbox.** Write jobs record their events ([`events::append`]) through the same
//!   transaction handle as the change itself, so the feed can neither miss nor invent a change.
//! - **Migrations** are numbered SQL scripts applied by `PRAGMA user_version` (PostgreSQL:
//!   `pg::schema`, under an advisory lock).

pub mod agents;
pub mod backup;
pub mod cache;
pub mod crons;
pub mod deliveries;
pub mod events;
pub mod forge_tokens;
pub mod forges;
pub mod integrity;
pub mod logs;
pub mod meta;
pub mod migrations;
pub mod orgs;
pub mod partfile;
pub mod partkeys;
pub mod pg;
pub mod pipelines;
pub mod plugin_kv;
mod read_only;
pub mod registries;
pub mod repos;
pub mod secrets;
mod sql;
pub mod tasks;
pub mod used_tokens;
pub mod users;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use sql::Session;
#[cfg(any(test, feature = "test-support"))]
pub use sql::inspect_for_tests;
pub use sql::{Dialect, Params, Row, Tx, WriteTx};
pub(crate) use sql::{OptionalExtension, params_from_iter};
use tokio::sync::{Semaphore, oneshot};

/// Errors from the store. `NotFound` and `Conflict` are expected outcomes callers map to 404
/// and 409; the rest are failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {}", pg::describe(.0))]
    Postgres(#[from] postgres::Error),
    #[error("cannot serialise record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("database migration failed: {0}")]
    Migration(String),
    #[error("cannot open database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("cannot make database {path} private: {source}")]
    Private {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "storage.secret_key_file holds another key than the one this database's secrets \
         are sealed with (its fingerprint is {found}, the database's {expected}): give every \
         server on this database the same key file"
    )]
    SealingKeyMismatch { expected: String, found: String },
    #[error("the storage thread has stopped")]
    Closed,
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

impl woodlark_stdx::Classify for StoreError {
    fn fault(&self) -> woodlark_stdx::Fault {
        match self {
            StoreError::NotFound => woodlark_stdx::Fault::NotFound("Not Found".into()),
            StoreError::Conflict(message) => woodlark_stdx::Fault::Conflict(message.clone()),
            _ => woodlark_stdx::Fault::Internal,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// Whether PostgreSQL ended the session with this error: it is shutting down (a fast
    /// or smart stop says goodbye to every session with `57P01`), crashed, or refused the
    /// session as it starts up. The client may only learn that the socket closed a moment
    /// later, so a session that got one of these is treated as lost at once.
    pub fn ends_session(&self) -> bool {
        let StoreError::Postgres(e) = self else {
            return false;
        };
        e.as_db_error().is_some_and(|db| {
            matches!(db.code().code(), "57P01" | "57P02" | "57P03")
                || matches!(db.severity(), "FATAL" | "PANIC")
        })
    }

    /// A row broke a `UNIQUE`, `CHECK`, `NOT NULL` or foreign-key rule (on either engine).
    pub fn is_constraint_violation(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::ConstraintViolation
            }
            StoreError::Postgres(e) => e.code().is_some_and(|code| code.code().starts_with("23")),
            _ => false,
        }
    }
}

/// Deletes row `id` of `table` and records `{record_type}.deleted` with the row's last API
/// rendering, for `owner` (the delete of one scoped secret or registry, or of each in a scope).
fn delete_recorded<T: serde::Serialize>(
    conn: &WriteTx,
    table: &str,
    record_type: events::RecordType,
    id: i64,
    rendering: &T,
    owner: events::Owner,
) -> StoreResult<()> {
    conn.cached_exec(&format!("DELETE FROM {table} WHERE id = ?1"), [id])?;
    events::append(
        conn,
        record_type,
        events::Action::Deleted,
        id,
        rendering,
        owner,
    )?;
    Ok(())
}

/// Deletes every row of `table` in `scope` (an organisation or repository being deleted),
/// recording one `{record_type}.deleted` each with the rendering `record` picks out of the
/// row. Returns how many were deleted. (`columns` and `from_row` read the table's rows.)
fn delete_scope_recorded<R, T: serde::Serialize>(
    conn: &WriteTx,
    table: &str,
    record_type: events::RecordType,
    scope: secrets::ResourceScope,
    columns: &str,
    from_row: fn(&crate::Row<'_>) -> rusqlite::Result<R>,
    record: fn(&R) -> (i64, &T),
) -> StoreResult<usize> {
    let owner = scope.owner(conn)?;
    let all = {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {columns} FROM {table} WHERE org_id = ?1 AND repo_id = ?2 ORDER BY id"
        ))?;
        let rows = stmt.query_map(rusqlite::params![scope.org_id, scope.repo_id], from_row)?;
        rows.collect::<Result<Vec<_>, _>>()?
    };
    for row in &all {
        let (id, rendering) = record(row);
        delete_recorded(conn, table, record_type, id, rendering, owner)?;
    }
    Ok(all.len())
}

/// Column `index` of a row, a JSON text, parsed; a parse failure is rusqlite's
/// `FromSqlConversionFailure` for that column (as for any other unreadable column).
pub(crate) fn json_column<T: serde::de::DeserializeOwned>(
    row: &crate::Row<'_>,
    index: usize,
) -> rusqlite::Result<T> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// A write job: runs inside a savepoint; reports whether it succeeded and what to do once the
/// enclosing transaction has committed (or failed to).
type WriteJob = Box<dyn FnOnce(&WriteTx) -> (bool, Finish) + Send>;
type Finish = Box<dyn FnOnce(StoreResult<()>) + Send>;

/// What the writer thread receives.
enum Job {
    Write(WriteJob),
    /// "Are you there?" (`/healthz`): answered as soon as the writer dequeues it, with no
    /// transaction, so a health check neither takes the write lock nor wakes the outbox
    /// readers that watch commits.
    Probe(oneshot::Sender<()>),
}

/// Jobs grouped into one transaction at most (bounds the latency of the first one).
const MAX_BATCH: usize = 64;

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    jobs: Mutex<Option<std_mpsc::Sender<Job>>>,
    readers: Mutex<Vec<Session>>,
    /// One permit per reader connection. A permit travels with its closure to the blocking
    /// thread, so a caller that gives up waiting (a dropped future) cannot free a slot whose
    /// connection is still in use.
    reader_slots: Arc<Semaphore>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Threads beside the writer, joined after it: SQLite's checkpoint thread (it stops once
    /// the writer has: the writer holds its wake-up channel's other end), PostgreSQL's
    /// listener for other replicas' changes (it stops on `stopping`).
    helper_threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    stopping: Arc<AtomicBool>,
    /// Bumped after every commit, so readers of the outbox know when to look.
    commits: tokio::sync::watch::Receiver<u64>,
    /// One counter per [`Domain`], bumped after every commit that changed one of its tables.
    generations: Arc<[AtomicU64; Domain::COUNT]>,
    /// Checkpoints the writer has had to finish itself (see `Checkpoint`).
    catch_ups: Arc<CheckpointStats>,
    dialect: Dialect,
    /// Whether this server leads its database's replicas ([`Store::leadership`]).
    leader: Arc<tokio::sync::watch::Sender<bool>>,
    /// Per [`Domain`], the commits of other replicas this server has heard of
    /// ([`Store::generation_elsewhere`]).
    elsewhere: Arc<[AtomicU64; Domain::COUNT]>,
    /// PostgreSQL: how lost sessions are replaced.
    revive: Option<Arc<Revive>>,
    /// PostgreSQL: the asynchronous sessions one-statement reads run on ([`Store::read_one`]).
    async_reads: Option<Arc<pg::reads::AsyncReaders>>,
}

/// A group of tables whose changes are counted together, for caches of what is read from
/// them ([`Store::generation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Who a caller is and what they may do on a repository: accounts, repositories,
    /// per-user permissions, organisations, forges, and users' forge tokens (a browser
    /// session made by signing in through a forge lasts only while they do).
    Identity,
    /// Pipelines with their workflows and steps (not their logs).
    Pipelines,
    /// The outbox behind the events feed.
    Events,
    /// Step log lines (the logs' store): how a replica hears of lines another one stored.
    Logs,
    /// Facts and settings of the database itself (`meta`: the queue's pause).
    Settings,
    /// Workflows waiting for a runner (`tasks`). Nothing caches them; on PostgreSQL another
    /// replica's commit counts here only when a task became pending (its trigger's
    /// condition), which is what wakes this replica's runners.
    Queue,
}

impl Domain {
    const COUNT: usize = 6;
    const ALL: [Domain; Domain::COUNT] = [
        Domain::Identity,
        Domain::Pipelines,
        Domain::Events,
        Domain::Logs,
        Domain::Settings,
        Domain::Queue,
    ];

    /// The tables of this domain.
    pub const fn tables(self) -> &'static [&'static str] {
        match self {
            Domain::Identity => &["users", "repos", "perms", "orgs", "forges", "forge_tokens"],
            Domain::Pipelines => &["pipelines", "workflows", "steps"],
            Domain::Events => &["events"],
            Domain::Logs => &["log_entries"],
            Domain::Settings => &["meta"],
            Domain::Queue => &["tasks"],
        }
    }

    /// The domain `table` belongs to, if any.
    fn of_table(table: &str) -> Option<Domain> {
        Domain::ALL
            .into_iter()
            .find(|d| d.tables().contains(&table))
    }
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub readers: usize,
    /// `synchronous=FULL` (true) or `NORMAL`.
    pub full_sync: bool,
    /// The fingerprint of the server's sealing key: recorded by the first server to open
    /// the database, and refused ([`StoreError::SealingKeyMismatch`]) if it differs later.
    /// `None` checks nothing (the CLI, which seals nothing; the logs' store).
    pub sealing_key: Option<String>,
    /// PostgreSQL: whether this store's listener competes for the replicas' leader lock
    /// ([`Store::leadership`]). Only a server's main store does: a second store on the same
    /// database (the logs') that won the lock would leave no replica leading.
    pub competes_for_lead: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            readers: 4,
            full_sync: true,
            sealing_key: None,
            competes_for_lead: true,
        }
    }
}

/// Creates the database file readable by its owner only, and narrows an existing one (and its
/// WAL and shared-memory files) to that. SQLite gives the WAL and `-shm` files it creates
/// later the database file's mode, so this covers them too. The file holds token-signing
/// seeds and sealed secrets: nobody else on the machine has any business reading it.
fn make_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            match std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

impl Store {
    /// Opens (creating if needed) the main database at `path` and migrates it.
    pub fn open(path: &Path, options: &StoreOptions) -> StoreResult<Store> {
        Store::open_with(path, options, migrations::migrate)
    }

    /// Opens a database whose schema `migrate` maintains (the main one, or the logs).
    pub fn open_with(
        path: &Path,
        options: &StoreOptions,
        migrate: fn(&mut Connection) -> StoreResult<()>,
    ) -> StoreResult<Store> {
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        make_private(path).map_err(|source| StoreError::Private {
            path: path.to_path_buf(),
            source,
        })?;
        let mut writer = Connection::open(path).map_err(open_err)?;
        configure(&writer, true, options.full_sync).map_err(open_err)?;
        migrate(&mut writer)?;
        check_sealing_key(&WriteTx::new(&writer), options)?;

        let mut readers = Vec::with_capacity(options.readers);
        for _ in 0..options.readers {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(open_err)?;
            configure(&conn, false, options.full_sync).map_err(open_err)?;
            readers.push(Session::Sqlite(conn));
        }

        let touched: Arc<[AtomicBool; Domain::COUNT]> = Arc::default();
        let hook_touched = touched.clone();
        writer.update_hook(Some(
            move |_: rusqlite::hooks::Action, _: &str, table: &str, _| {
                if let Some(domain) = Domain::of_table(table) {
                    hook_touched[domain as usize].store(true, Ordering::Relaxed);
                }
            },
        ));
        let generation = Generation {
            touched,
            counters: Arc::default(),
        };

        // The writer never checkpoints inside a commit (this hook replaces SQLite's automatic
        // checkpoint); see `Checkpoint`.
        writer.wal_hook(Some(note_log_length));
        let checkpointer = Connection::open(path).map_err(open_err)?;
        configure(&checkpointer, true, options.full_sync).map_err(open_err)?;
        let (wake_tx, wake_rx) = std_mpsc::sync_channel::<()>(1);
        let catch_ups = Arc::new(CheckpointStats::default());
        let checkpoint = Checkpoint {
            wake: wake_tx,
            caught_up_at: 0,
            catch_ups: catch_ups.clone(),
        };
        // Thread names fit Linux's 15 characters, so `top -H`, `perf` and `/proc` tell
        // the two apart.
        let checkpoint_handle = std::thread::Builder::new()
            .name("store-checkpt".into())
            .spawn(move || checkpoint_loop(checkpointer, wake_rx))
            .map_err(|e| {
                StoreError::Migration(format!("cannot start the checkpoint thread: {e}"))
            })?;
        let (commit_tx, commit_rx) = tokio::sync::watch::channel(0u64);
        Store::start(Started {
            path: path.to_path_buf(),
            writer: Session::Sqlite(writer),
            readers,
            generation,
            commits: (Arc::new(commit_tx), commit_rx),
            checkpoint: Some(checkpoint),
            helper_threads: vec![checkpoint_handle],
            stopping: Arc::default(),
            catch_ups,
            // Alone on its file: always the leader.
            leader: Arc::new(tokio::sync::watch::Sender::new(true)),
            elsewhere: Arc::default(),
            revive: None,
            async_reads: None,
        })
    }

    /// Opens the store on the PostgreSQL database at `url` (`postgres://…`), which several
    /// replicas may share, and brings its schema up to date (once, when replicas start
    /// together). The logs live in the same database.
    pub fn open_postgres(url: &str, options: &StoreOptions) -> StoreResult<Store> {
        // The blocking client runs a runtime of its own for each call, which cannot be
        // started on a runtime's thread: sessions are opened on a plain thread.
        let opened = std::thread::scope(|s| {
            s.spawn(|| open_postgres_sessions(url, options))
                .join()
                .unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(
                        "opening PostgreSQL panicked".into(),
                    ))
                })
        })?;
        let (writer, (listen_session, writer_pid), readers) = opened;
        let generation = Generation {
            touched: Arc::default(),
            counters: Arc::default(),
        };
        let (commit_tx, commit_rx) = tokio::sync::watch::channel(0u64);
        let commit_tx = Arc::new(commit_tx);
        let stopping: Arc<AtomicBool> = Arc::default();
        let leader = Arc::new(tokio::sync::watch::Sender::new(false));
        let elsewhere: Arc<[AtomicU64; Domain::COUNT]> = Arc::default();
        let revive = Arc::new(Revive {
            url: url.to_string(),
            losses: Arc::default(),
            writer_pid: Arc::new(std::sync::atomic::AtomicI32::new(writer_pid)),
        });
        let async_reads = Arc::new(pg::reads::AsyncReaders::new(
            url,
            options.readers,
            Some(revive.losses.clone()),
        ));
        let listening = {
            let listener = Listener {
                url: url.to_string(),
                writer_pid: revive.writer_pid.clone(),
                losses: revive.losses.clone(),
                take_lead: std::cell::RefCell::default(),
                lead_asked: std::cell::Cell::default(),
                counters: generation.counters.clone(),
                elsewhere: elsewhere.clone(),
                commits: commit_tx.clone(),
                stopping: stopping.clone(),
                leader: leader.clone(),
                competes: options.competes_for_lead,
            };
            std::thread::Builder::new()
                .name("store-listen".into())
                .spawn(move || listener.run(listen_session))
                .map_err(|e| StoreError::Unavailable(format!("cannot start the listener: {e}")))?
        };
        Store::start(Started {
            path: PathBuf::new(),
            writer,
            readers,
            generation,
            commits: (commit_tx, commit_rx),
            checkpoint: None,
            helper_threads: vec![listening],
            stopping,
            catch_ups: Arc::default(),
            leader,
            elsewhere,
            revive: Some(revive),
            async_reads: Some(async_reads),
        })
    }

    /// Starts the writer thread over opened sessions.
    fn start(started: Started) -> StoreResult<Store> {
        let Started {
            path,
            writer,
            readers,
            generation,
            commits: (commit_tx, commit_rx),
            checkpoint,
            helper_threads,
            stopping,
            catch_ups,
            leader,
            elsewhere,
            revive,
            async_reads,
        } = started;
        let generations = generation.counters.clone();
        let reader_count = readers.len();
        let dialect = match writer {
            Session::Sqlite(_) => Dialect::Sqlite,
            Session::Postgres(_) => Dialect::Postgres,
        };
        let (tx, rx) = std_mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn({
                let revive = revive.clone();
                move || writer_loop(writer, rx, commit_tx, generation, checkpoint, revive)
            })
            .map_err(|e| StoreError::Migration(format!("cannot start the writer thread: {e}")))?;
        Ok(Store {
            inner: Arc::new(Inner {
                path,
                jobs: Mutex::new(Some(tx)),
                readers: Mutex::new(readers),
                reader_slots: Arc::new(Semaphore::new(reader_count)),
                writer_thread: Mutex::new(Some(handle)),
                helper_threads: Mutex::new(helper_threads),
                stopping,
                commits: commit_rx,
                generations,
                catch_ups,
                dialect,
                leader,
                elsewhere,
                revive,
                async_reads,
            }),
        })
    }

    /// Which engine the store runs on.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// Whether other servers may write to this database (PostgreSQL replicas): their
    /// changes reach this one only through [`Store::commits`] and [`Store::generation`].
    pub fn is_shared(&self) -> bool {
        self.dialect() == Dialect::Postgres
    }

    /// Whether this server is the one of its database's replicas that does what must be
    /// done once and in order for all of them (posting commit statuses). Always true on
    /// SQLite. On PostgreSQL it is the replica whose change listener holds the leader lock;
    /// when that session ends (the replica stopped or died, or lost its connection) another
    /// replica's listener takes the lock at its next try (once a second, `LEAD_POLL`). The
    /// leader checks its session as often and stops leading as soon as it finds it lost, so
    /// two replicas lead at once for at most `LEAD_POLL` and the check's timeout
    /// (`LEAD_CHECK`), and only when the session was cut without a word.
    pub fn leadership(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.leader.subscribe()
    }

    /// How often the writer has had to finish a checkpoint itself because the checkpoint
    /// thread could not (writes that never pause); each time, the jobs queued behind it
    /// waited for a sync of the database file.
    pub fn writer_catch_ups(&self) -> u64 {
        self.inner.catch_ups.writer.load(Ordering::Relaxed)
    }

    /// Leaves every checkpoint to the writer's catch-up, as if writes never paused for a
    /// pass: the one way to test the fallback without depending on the machine's load.
    #[cfg(test)]
    fn hold_checkpoint_thread(&self) {
        self.inner
            .catch_ups
            .thread_held
            .store(true, Ordering::Relaxed);
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The generation of `domain`: read it **before** a read whose result is cached, and tag
    /// the entry with it (a commit during the read then leaves the entry already stale).
    pub fn generation(&self, domain: Domain) -> u64 {
        self.inner.generations[domain as usize].load(Ordering::Acquire)
    }

    /// How many commits of other replicas changing `domain` this server has heard of (moved
    /// by the change listener, also when it reconnects; always 0 on SQLite). A number taken
    /// while it stood still is still this server's own to reason about.
    pub fn generation_elsewhere(&self, domain: Domain) -> u64 {
        self.inner.elsewhere[domain as usize].load(Ordering::Acquire)
    }

    /// The [`Domain::Identity`] generation (what auth and access caches are tagged with).
    pub fn identity_generation(&self) -> u64 {
        self.generation(Domain::Identity)
    }

    /// A receiver that changes after every committed write batch.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.commits.clone()
    }

    /// Runs `f` on the writer thread inside a transaction; resolves after the commit.
    ///
    /// If `f` returns an error its changes (and its events) are rolled back; other jobs in the
    /// same batch are unaffected.
    pub async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx) -> StoreResult<T> + Send + 'static,
    {
        self.submit(f).await
    }

    /// [`Store::write`], but the job joins the writer's queue now, before the returned future
    /// is first polled: jobs submitted one after another run in that order, whatever order
    /// their callers then await them in.
    pub fn submit<T, F>(&self, f: F) -> impl Future<Output = StoreResult<T>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let queued = self.send(Job::Write(write_job(f, move |outcome| {
            let _ = tx.send(outcome);
        })));
        async move {
            queued?;
            rx.await
                .map_err(|_| StoreError::Unavailable("the write job was dropped".into()))?
        }
    }

    /// [`Store::write`] for start-up code outside async code: blocks the calling thread
    /// until the job has committed (or failed). Not for request paths.
    pub fn write_now<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTx) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(Job::Write(write_job(f, move |outcome| {
            let _ = tx.send(outcome);
        })))?;
        rx.recv()
            .map_err(|_| StoreError::Unavailable("the write job was dropped".into()))?
    }

    fn send(&self, job: Job) -> StoreResult<()> {
        let jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        match jobs.as_ref() {
            Some(sender) => sender.send(job).map_err(|_| StoreError::Closed),
            None => Err(StoreError::Closed),
        }
    }

    /// Runs `f` on a read-only connection, on the calling thread when a reader is free.
    ///
    /// For the short, indexed reads of a request (a row by key, one bounded page): a hop to
    /// the blocking pool costs more than the query itself. Reads that may take milliseconds
    /// (a whole log, sweeps over a table) go through [`Store::read_blocking`] instead. A
    /// panicking `f` becomes an error and its connection goes back to the pool.
    ///
    /// On PostgreSQL the statements see one snapshot (a `REPEATABLE READ, READ ONLY`
    /// transaction). Called on a multi-threaded runtime (the server's), they run on the
    /// asynchronous client without leaving the runtime (`pg::reads`): `f` runs once per
    /// statement and once more, each time over the rows its earlier statements got (see
    /// `sql::Deferred`), so it must run the same statements given the same rows, and should
    /// not run many (past a few it moves to the blocking client, as it does for a batch).
    pub async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        self.read_as(ReadKind::Snapshot, f).await
    }

    /// [`Store::read`] for a closure that runs exactly one statement. On PostgreSQL it runs
    /// outside a transaction (a statement sees one snapshot by itself), which saves the
    /// `BEGIN` and `ROLLBACK` round trips of a read. A second statement fails, on either
    /// engine, so a test finds a closure that outgrew it.
    ///
    /// Its statement is the first thing the session hears, so it is the one that finds a
    /// session the database cut (a restart): then it runs once more on a new session.
    ///
    /// On PostgreSQL, called on a multi-threaded runtime (the server's), the statement runs
    /// on the asynchronous client without leaving the runtime (`pg::reads`): `f` runs once
    /// to name its statement, which fails there, and once more to read the rows it got
    /// (see `sql::Deferred`). So `f` may be called twice, and must run the same statement
    /// each time. Elsewhere (a single-threaded runtime, which would have to be driven for
    /// the client's I/O to move) it runs as [`Store::read`] does.
    pub async fn read_one<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        self.read_as(ReadKind::OneStatement, f).await
    }

    async fn read_as<T, F>(&self, kind: ReadKind, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        if self.dialect() == Dialect::Postgres {
            // Boxed: the asynchronous client's future is kilobytes, and held inline it would
            // make every read's future (and every handler's that awaits one) that big, to
            // be copied on each move even on SQLite or when a cache answers.
            return Box::pin(self.read_postgres(kind, f)).await;
        }
        let permit = match self.inner.reader_slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(StoreError::Closed),
            // Every reader is busy: wait on the blocking pool rather than here (boxed, as
            // PostgreSQL's read is above).
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                return Box::pin(self.read_blocking_as(kind, f)).await;
            }
        };
        run_read(&self.inner, permit, kind, f)
    }

    /// [`Store::read_as`] on PostgreSQL.
    async fn read_postgres<T, F>(&self, kind: ReadKind, mut f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        if let Some(reads) = &self.inner.async_reads
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            && let Some(result) = read_async(reads, kind, &mut f).await
        {
            return result;
        }
        // The blocking client blocks on a runtime of its own: never on a runtime worker.
        self.read_blocking_as(kind, f).await
    }

    /// Runs `f` on a read-only connection on the blocking pool (long reads).
    pub async fn read_blocking<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> StoreResult<T> + Send + 'static,
    {
        self.read_blocking_as(ReadKind::Snapshot, once(f)).await
    }

    async fn read_blocking_as<T, F>(&self, kind: ReadKind, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        let permit = self
            .inner
            .reader_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || run_read(&inner, permit, kind, f))
            .await
            .map_err(|_| StoreError::Unavailable("a read panicked".into()))?
    }

    /// A cheap query that proves the database is usable (for `/healthz`).
    pub async fn ping(&self) -> StoreResult<()> {
        self.read(|conn| {
            conn.cached_row("SELECT 1", [], |r| r.get::<_, i64>(0))?;
            Ok(())
        })
        .await?;
        // The writer must be alive and taking jobs too.
        let (tx, rx) = oneshot::channel();
        self.send(Job::Probe(tx))?;
        rx.await.map_err(|_| StoreError::Closed)
    }

    /// Stops the writer after it has committed everything queued so far.
    pub fn close(&self) {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // The writer first: the checkpoint thread stops when the writer has.
        let writer = self
            .inner
            .writer_thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(handle) = writer {
            let _ = handle.join();
        }
        self.inner.stopping.store(true, Ordering::Release);
        let helpers = std::mem::take(
            &mut *self
                .inner
                .helper_threads
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for handle in helpers {
            let _ = handle.join();
        }
    }
}

impl Drop for Inner {
    /// The last handle is gone without [`Store::close`]: the writer stops as its queue
    /// closes; the listener must be told.
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
    }
}

/// How a read runs: see [`Store::read`] and [`Store::read_one`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadKind {
    Snapshot,
    OneStatement,
}

/// A read closure as [`run_read`] takes it; it is called once (a snapshot read never runs
/// again: [`Store::read_one`]'s may).
fn once<T, F>(f: F) -> impl FnMut(&Tx) -> StoreResult<T> + Send + 'static
where
    F: FnOnce(&Tx) -> StoreResult<T> + Send + 'static,
{
    let mut f = Some(f);
    move |tx| match f.take() {
        Some(f) => f(tx),
        None => Err(StoreError::Unavailable("a read ran twice".into())),
    }
}

/// Runs a read on a pooled connection under `permit`; a panic in `f` is an error.
fn run_read<T, F>(
    inner: &Inner,
    permit: tokio::sync::OwnedSemaphorePermit,
    kind: ReadKind,
    mut f: F,
) -> StoreResult<T>
where
    F: FnMut(&Tx) -> StoreResult<T>,
{
    let _permit = permit;
    let mut guard = ReaderGuard {
        inner,
        conn: Some(
            inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop()
                .ok_or_else(|| StoreError::Unavailable("no reader connection free".into()))?,
        ),
    };
    let session = guard
        .conn
        .as_mut()
        .unwrap_or_else(|| unreachable!("set above"));
    if let Some(revive) = &inner.revive {
        revive.ensure_reader(session)?;
    }
    // PostgreSQL: the whole read sees one snapshot (outside a transaction each statement
    // takes its own, and a pipeline read with its workflows could straddle a commit).
    let snapshot = matches!(session, Session::Postgres(_)) && kind == ReadKind::Snapshot;
    const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
    if snapshot && let Err(err) = session.tx().execute_batch(BEGIN) {
        // Cut since it last answered: nothing of `f` ran yet, so once more on a new session.
        match &inner.revive {
            Some(revive) if session.is_lost() || err.ends_session() => {
                // (Counted as a loss first, so the session is checked before it is kept.)
                revive.lost();
                revive.ensure_reader(session)?;
                session.tx().execute_batch(BEGIN)?;
            }
            _ => return Err(err),
        }
    }
    let run = |session: &Session, f: &mut F| {
        let tx = session.tx();
        if kind == ReadKind::OneStatement {
            tx.limit_statements(1);
        }
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&tx)))
            .map_err(|_| StoreError::Unavailable("a read panicked".into()))
    };
    let mut result = run(session, &mut f);
    let ended = matches!(&result, Ok(Err(e)) if e.ends_session());
    if let Some(revive) = &inner.revive
        && (session.is_lost() || ended)
    {
        if kind == ReadKind::OneStatement && matches!(result, Ok(Err(_))) {
            revive.lost();
            // A one-statement read sent nothing before `f`'s statement, which found the
            // cut: once more on a new session (the loss counted there). A snapshot read
            // found it at its BEGIN, above.
            revive.ensure_reader(session)?;
            result = run(session, &mut f);
        } else {
            // The other sessions are checked before their next use.
            revive.lost();
        }
    }
    let session = &*session;
    let tx = session.tx();
    if snapshot {
        // Ends the snapshot whatever happened, before the session goes back to the pool.
        tx.execute_batch("ROLLBACK")?;
    }
    result?
}

/// Statements a read runs on the asynchronous client before it moves to a synchronous session:
/// each statement there runs the closure once more over the rows read so far
/// ([`sql::Deferred`]), which for a read of many statements (a loop of look-ups) would cost
/// more than the thread hop it saves. Every read a request makes runs far fewer.
const ASYNC_STATEMENTS: usize = 16;

/// A read on PostgreSQL's asynchronous client (`pg::reads`): `f` runs in passes
/// ([`sql::Deferred`]), each statement it names is run on one session of `reads` (all in one
/// snapshot for a [`ReadKind::Snapshot`]), and the pass that names no new statement is the
/// answer, so the rows are mapped by the same code as on every other path. `None` when the
/// read must run on a synchronous session instead (a batch, or over [`ASYNC_STATEMENTS`]
/// statements), its snapshot let go. A panic in `f` is an error, as in [`run_read`].
async fn read_async<T, F>(
    reads: &pg::reads::AsyncReaders,
    kind: ReadKind,
    f: &mut F,
) -> Option<StoreResult<T>>
where
    F: FnMut(&Tx) -> StoreResult<T>,
{
    fn pass<T>(
        deferred: &sql::Deferred,
        kind: ReadKind,
        f: &mut impl FnMut(&Tx) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let tx = deferred.tx();
        if kind == ReadKind::OneStatement {
            tx.limit_statements(1);
        }
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&tx)))
            .map_err(|_| StoreError::Unavailable("a read panicked".into()))?
    }
    let deferred = sql::Deferred::default();
    let mut result = pass(&deferred, kind, f);
    let mut read: Option<pg::reads::Lease<'_>> = None;
    loop {
        let mut statements = deferred.take_statements();
        if statements.is_empty() {
            if let Some(read) = read {
                read.end();
            }
            return (!deferred.needs_session()).then_some(result);
        }
        if deferred.answered() >= ASYNC_STATEMENTS {
            tracing::debug!(
                statements = deferred.answered(),
                "a long read moves to a synchronous PostgreSQL session"
            );
            if let Some(read) = read {
                read.end();
            }
            return None;
        }
        drop(result);
        if kind == ReadKind::OneStatement {
            // One statement by itself: on a session shared with the reads beside it.
            let (statement, binds) = statements.swap_remove(0);
            let rows = match reads.one(&statement, &binds).await {
                Ok(rows) => rows,
                Err(e) => return Some(Err(e)),
            };
            deferred.answer(statement, rows);
            result = pass(&deferred, kind, f);
            continue;
        }
        let lease = match &mut read {
            Some(lease) => lease,
            None => match reads.begin().await {
                Ok(lease) => read.insert(lease),
                Err(e) => return Some(Err(e)),
            },
        };
        let answers = match lease.query(&statements).await {
            Ok(answers) => answers,
            Err(e) => {
                if let Some(read) = read {
                    read.end();
                }
                return Some(Err(e));
            }
        };
        for ((statement, _), rows) in statements.into_iter().zip(answers) {
            deferred.answer(statement, rows);
        }
        result = pass(&deferred, kind, f);
    }
}

/// Returns a reader connection to the pool when the read ends, even by panic.
struct ReaderGuard<'a> {
    inner: &'a Inner,
    conn: Option<Session>,
}

impl Drop for ReaderGuard<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
        }
    }
}

/// Statements each connection keeps prepared: every query of the store fits, so a hot
/// request never parses SQL (rusqlite's default keeps 16).
///
/// A cached statement is only worth keeping if SQLite does not throw its plan away: a bound
/// parameter written directly as `LIMIT ?N` (and a bound `LIKE` pattern) becomes part of the
/// plan, so every new binding re-prepares the statement — it cost more than the rest of a
/// pipeline-list request. The store writes `LIMIT ?N + 0`, which SQLite evaluates at run
/// time (`limits_never_force_a_reprepare` keeps it so).
const STATEMENT_CACHE: usize = 256;

fn configure(conn: &Connection, writer: bool, full_sync: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    if writer {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(
            None,
            "synchronous",
            if full_sync { "FULL" } else { "NORMAL" },
        )?;
        // Each job runs in a savepoint, whose statement journal SQLite spills to a new
        // temporary file once it passes 64 KiB (16 pages: creating one pipeline touches more,
        // with its rows and indexes in six tables), opening, writing and unlinking a file
        // inside every such job. In memory it stays: a job's journal is as big as what the
        // job itself writes.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
    }
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// The writer's side of the generations: the update hook marks a domain `touched`; its
/// counter moves once the batch has committed (or rolled back: a harmless extra miss) and
/// before the batch's callers are answered.
struct Generation {
    touched: Arc<[AtomicBool; Domain::COUNT]>,
    counters: Arc<[AtomicU64; Domain::COUNT]>,
}

/// Refuses a database whose secrets were sealed with another key than `options`'.
fn check_sealing_key(conn: &WriteTx, options: &StoreOptions) -> StoreResult<()> {
    let Some(found) = &options.sealing_key else {
        return Ok(());
    };
    let expected = meta::claim(conn, meta::SEALING_KEY, found)?;
    same_sealing_key(expected, found)
}

/// The key fingerprint claimed in the database (`expected`) against the one given (`found`).
fn same_sealing_key(expected: String, found: &str) -> StoreResult<()> {
    if expected != found {
        return Err(StoreError::SealingKeyMismatch {
            expected,
            found: found.to_owned(),
        });
    }
    Ok(())
}

/// Connects the writer (migrating the schema and checking the sealing key first), the
/// listener and the readers.
fn open_postgres_sessions(
    url: &str,
    options: &StoreOptions,
) -> StoreResult<(Session, (postgres::Client, i32), Vec<Session>)> {
    let connect = || pg::connect(url).map_err(|e| StoreError::Unavailable(e.to_string()));
    let mut client = connect()?;
    pg::schema::migrate(&mut client).map_err(|e| StoreError::Migration(e.to_string()))?;
    // The writer hears its own commits' changes (see `run_batch`), the listener the others'.
    let listen = format!("LISTEN {}", pg::schema::NOTIFY_CHANNEL);
    client.batch_execute(&listen)?;
    let writer_pid: i32 = client.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    let writer = Session::postgres(client);
    check_sealing_key(&writer.write_tx(), options)?;
    let mut listener = pg::connect_named(url, pg::LISTENER_NAME)
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    listener.batch_execute(&listen)?;
    let readers = (0..options.readers.max(1))
        .map(|_| connect().map(Session::postgres))
        .collect::<StoreResult<Vec<_>>>()?;
    Ok((writer, (listener, writer_pid), readers))
}

/// What [`Store::start`] takes: the opened sessions and the threads beside the writer.
struct Started {
    path: PathBuf,
    writer: Session,
    readers: Vec<Session>,
    generation: Generation,
    commits: (
        Arc<tokio::sync::watch::Sender<u64>>,
        tokio::sync::watch::Receiver<u64>,
    ),
    checkpoint: Option<Checkpoint>,
    helper_threads: Vec<std::thread::JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
    catch_ups: Arc<CheckpointStats>,
    leader: Arc<tokio::sync::watch::Sender<bool>>,
    elsewhere: Arc<[AtomicU64; Domain::COUNT]>,
    revive: Option<Arc<Revive>>,
    async_reads: Option<Arc<pg::reads::AsyncReaders>>,
}

/// How a PostgreSQL store replaces the sessions the database closed (a restart, a failover,
/// a proxy's timeout), so that the server carries on without a restart of its own.
///
/// A session finds out it was cut only when it next talks to the server. As a restart
/// cuts every session at once, whoever finds one lost (a read, the writer, or usually
/// first the listener, which is always waiting on its socket) moves `losses`; every other
/// session is then checked with one round trip before its next use, and replaced if it
/// does not answer.
struct Revive {
    url: String,
    losses: Arc<AtomicU64>,
    /// The writer's backend, whose notifications the listener skips (a new writer session
    /// is a new backend).
    writer_pid: Arc<std::sync::atomic::AtomicI32>,
}

impl Revive {
    fn losses(&self) -> u64 {
        self.losses.load(Ordering::Acquire)
    }

    /// Counts a session found lost.
    fn lost(&self) {
        self.losses.fetch_add(1, Ordering::AcqRel);
    }

    /// `session` if it answers, else a new session in its place (the old one is kept if
    /// no new one can be opened, and the error returned).
    fn ensure_reader(&self, session: &mut Session) -> StoreResult<()> {
        let losses = self.losses();
        if session.answers(losses) {
            return Ok(());
        }
        self.lost();
        let client = pg::connect(&self.url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        *session = Session::postgres(client).checked_as_of(self.losses());
        tracing::info!("a lost PostgreSQL reader session was replaced");
        Ok(())
    }

    /// [`Revive::ensure_reader`] for the writer: a new session also listens for its own
    /// commits' notifications and is made known to the listener.
    fn ensure_writer(&self, session: &mut Session) -> StoreResult<()> {
        let losses = self.losses();
        if session.answers(losses) {
            return Ok(());
        }
        self.lost();
        let mut client =
            pg::connect(&self.url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        client.batch_execute(&format!("LISTEN {}", pg::schema::NOTIFY_CHANNEL))?;
        let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[])?.get(0);
        self.writer_pid.store(pid, Ordering::Release);
        *session = Session::postgres(client).checked_as_of(self.losses());
        tracing::info!("the lost PostgreSQL writer session was replaced");
        Ok(())
    }
}

/// How long the listener waits for a notification before it looks at `stopping` again.
const LISTEN_POLL: Duration = Duration::from_millis(200);

/// The session-level advisory lock held by the replicas' leader's listener
/// ([`Store::leadership`]).
const LEADER_LOCK: i64 = 0x776c_2d6c_6561_6472;

/// The wait before the first attempt to reconnect a lost listener, doubled after each
/// failed attempt up to [`LISTEN_RECONNECT_MAX`].
const LISTEN_RECONNECT_FIRST: Duration = Duration::from_millis(250);

/// The longest wait between two attempts to reconnect a lost listener: after a database
/// restart, a leader is back at most this long (plus a connection's set-up) after the
/// database is. A refused attempt costs the database nothing.
const LISTEN_RECONNECT_MAX: Duration = Duration::from_secs(2);

/// How often a follower's listener asks for the leader lock, and how often the leader's
/// checks that its session still answers: once a second costs an idle database one round
/// trip per replica per second (at every [`LISTEN_POLL`] it was five), and bounds how long
/// a freed lock waits for its next holder.
const LEAD_POLL: Duration = Duration::from_secs(1);

/// How long the leader's listener waits for the database to answer its check at each
/// [`LEAD_POLL`] before it takes its session for lost and stops leading. With it, the most a
/// leader cut off without a word (no reset, no goodbye) goes on leading after the database
/// freed its lock, so the most two replicas ever lead at once.
const LEAD_CHECK: Duration = Duration::from_secs(1);

/// PostgreSQL: moves this replica's generations (and wakes its outbox readers) for changes
/// other replicas commit (any session but `writer_pid`, this replica's writer), and holds
/// the leader lock while it can. The triggers of `pg::schema` name each changed table on
/// commit.
struct Listener {
    url: String,
    writer_pid: Arc<std::sync::atomic::AtomicI32>,
    /// The store's count of lost sessions ([`Revive`]): a cut listener says so at once.
    losses: Arc<AtomicU64>,
    /// The leader-lock query, prepared on the current session.
    take_lead: std::cell::RefCell<Option<postgres::Statement>>,
    /// When the lock was last asked for (a follower) or the session last checked (the
    /// leader); `None` on a new session, which asks at once.
    lead_asked: std::cell::Cell<Option<std::time::Instant>>,
    counters: Arc<[AtomicU64; Domain::COUNT]>,
    /// Other replicas' commits only (`counters` also counts this replica's writer's).
    elsewhere: Arc<[AtomicU64; Domain::COUNT]>,
    commits: Arc<tokio::sync::watch::Sender<u64>>,
    stopping: Arc<AtomicBool>,
    leader: Arc<tokio::sync::watch::Sender<bool>>,
    /// Whether to try for the leader lock at all (`StoreOptions::competes_for_lead`).
    competes: bool,
}

impl Listener {
    /// Listens until the store stops. A lost session is reconnected with backoff; as
    /// notifications may have been missed meanwhile, every generation then moves (caches
    /// re-read), and leadership is given up until the lock is taken again.
    fn run(self, first: postgres::Client) {
        let mut session = Some(first);
        let mut backoff = LISTEN_RECONNECT_FIRST;
        while !self.stopping.load(Ordering::Acquire) {
            let Some(client) = session.as_mut() else {
                self.pause(backoff);
                match self.connect() {
                    Ok(client) => {
                        tracing::info!("the store's change listener reconnected");
                        // Prepared statements belong to the session they were prepared on.
                        self.take_lead.take();
                        self.lead_asked.take();
                        session = Some(client);
                        backoff = LISTEN_RECONNECT_FIRST;
                        for counter in self.counters.iter().chain(self.elsewhere.iter()) {
                            counter.fetch_add(1, Ordering::AcqRel);
                        }
                        self.commits.send_modify(|n| *n += 1);
                    }
                    Err(err) => {
                        tracing::warn!(%err, retry_in = ?backoff, "the store's change listener cannot reconnect");
                        backoff = (backoff * 2).min(LISTEN_RECONNECT_MAX);
                    }
                }
                continue;
            };
            if let Err(err) = self.listen_once(client) {
                // First of all: the lock may be someone else's already.
                let led = self.leader.send_replace(false);
                tracing::error!(%err, led, "the store's change listener lost its connection");
                self.losses.fetch_add(1, Ordering::AcqRel);
                if let Some(lost) = session.take() {
                    close_aside(lost);
                }
            }
        }
    }

    /// Takes the leader lock if it is free (a follower) or checks the session (the leader),
    /// once a [`LEAD_POLL`]; then hears notifications for one poll.
    fn listen_once(&self, client: &mut postgres::Client) -> Result<(), postgres::Error> {
        let due = self
            .lead_asked
            .get()
            .is_none_or(|at| at.elapsed() >= LEAD_POLL);
        if due {
            self.lead_asked.set(Some(std::time::Instant::now()));
        }
        if due && *self.leader.borrow() {
            // A leader sends nothing otherwise, and a session cut without a word (its
            // packets dropped, the database's host gone) never errs: it would go on leading
            // beside the replica that took the freed lock.
            client.is_valid(LEAD_CHECK)?;
        } else if due && self.competes {
            // Prepared once per session: a follower asks at every `LEAD_POLL`.
            let statement = match self.take_lead.borrow().clone() {
                Some(statement) => statement,
                None => client.prepare("SELECT pg_try_advisory_lock($1)")?,
            };
            self.take_lead.replace(Some(statement.clone()));
            let taken: bool = client.query_one(&statement, &[&LEADER_LOCK])?.get(0);
            if taken {
                tracing::info!("this replica leads (it posts commit statuses)");
                self.leader.send_replace(true);
            }
        }
        let started = std::time::Instant::now();
        let mut notifications = client.notifications();
        let mut iter = notifications.timeout_iter(LISTEN_POLL);
        use postgres::fallible_iterator::FallibleIterator;
        while let Some(note) = iter.next()? {
            // This replica's own writer has counted its commits already.
            if note.process_id() != self.writer_pid.load(Ordering::Acquire) {
                if let Some(domain) = Domain::of_table(note.payload()) {
                    self.elsewhere[domain as usize].fetch_add(1, Ordering::AcqRel);
                    self.counters[domain as usize].fetch_add(1, Ordering::AcqRel);
                }
                // At once, not when the channel falls quiet: a replica that commits without
                // a pause would hold back every live view here.
                self.commits.send_modify(|n| *n += 1);
            }
            // Back to `stopping` and the leader lock at least every poll, however busy.
            if started.elapsed() >= LISTEN_POLL {
                break;
            }
        }
        Ok(())
    }

    fn connect(&self) -> StoreResult<postgres::Client> {
        let mut client = pg::connect_named(&self.url, pg::LISTENER_NAME)
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        client.batch_execute(&format!("LISTEN {}", pg::schema::NOTIFY_CHANNEL))?;
        Ok(client)
    }

    /// Sleeps `how_long`, or less if the store stops meanwhile.
    fn pause(&self, how_long: Duration) {
        let until = std::time::Instant::now() + how_long;
        while !self.stopping.load(Ordering::Acquire) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(LISTEN_POLL));
        }
    }
}

/// Drops a lost session on a thread of its own: closing says goodbye and waits until the
/// socket is shut, which a peer that vanished may never let happen.
fn close_aside(lost: postgres::Client) {
    let closing = std::thread::Builder::new()
        .name("store-close".into())
        .spawn(move || drop(lost));
    if let Err(err) = closing {
        tracing::warn!(%err, "a lost listener session is left open");
    }
}

fn writer_loop(
    mut conn: Session,
    jobs: std_mpsc::Receiver<Job>,
    commits: Arc<tokio::sync::watch::Sender<u64>>,
    generation: Generation,
    mut checkpoint: Option<Checkpoint>,
    revive: Option<Arc<Revive>>,
) {
    let mut batch: Vec<WriteJob> = Vec::with_capacity(MAX_BATCH);
    while let Ok(first) = jobs.recv() {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Write(job) => batch.push(job),
                Job::Probe(reply) => {
                    let _ = reply.send(());
                }
            }
            if batch.len() < MAX_BATCH {
                next = jobs.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let jobs = std::mem::take(&mut batch);
            match &revive {
                Some(revive) => run_batch_revived(&mut conn, jobs, &generation, revive),
                // Jobs given back are dropped: their callers hear `Unavailable`.
                None => drop(run_batch(&conn.write_tx(), jobs, &generation)),
            }
            commits.send_modify(|n| *n += 1);
            if let (Session::Sqlite(conn), Some(checkpoint)) = (&conn, checkpoint.as_mut()) {
                checkpoint.after_commit(conn);
            }
        }
    }
}

/// How often at most the checkpoint thread copies the log into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Log length (frames, one per page written) from which the checkpoint thread copies it
/// (SQLite's own default for its automatic checkpoint).
const CHECKPOINT_FRAMES: i64 = 1000;

/// Log length from which the checkpoint thread copies until nothing is left, so that the
/// next write transaction starts the log over from its beginning.
const RESTART_FRAMES: i64 = 4000;

/// Passes the checkpoint thread makes, [`PASS_PAUSE`] apart, to finish a long log before
/// it sleeps.
const FINISH_PASSES: u32 = 16;

/// Pause between two of those passes, so that the thread does not spin: a pass with nothing
/// new to copy costs next to nothing, one with new frames syncs twice.
const PASS_PAUSE: Duration = Duration::from_millis(2);

/// Log length past which the writer finishes the copy itself (the checkpoint thread has not
/// managed to: a writer that never pauses for a pass's length).
const CATCH_UP_FRAMES: i64 = 3 * RESTART_FRAMES;

thread_local! {
    /// The log's length in frames after the last commit on this thread (the writer's).
    static LOG_FRAMES: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// The writer's WAL hook: SQLite calls it after each commit with the log's length.
fn note_log_length(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    LOG_FRAMES.with(|f| f.set(i64::from(frames)));
    Ok(())
}

/// The writer's side of checkpointing.
///
/// SQLite's automatic checkpoint runs inside the commit that takes the log past 1,000
/// pages: that commit copies every page into the database file and syncs it twice, a
/// multi-millisecond stall every few dozen commits under load that every job queued behind
/// it waits out. So the writer never checkpoints inside a commit; once the log is 1,000
/// frames long, a thread of its own with its own connection copies it (`PASSIVE`: it never
/// waits for, or blocks, the writer or a reader).
///
/// The log can only start over from its beginning when a write transaction begins with
/// every frame already copied. A pass beside a busy writer copies what was committed when
/// it began and leaves the commits made meanwhile, and a pass that copies everything while
/// a write transaction is open is undone by that transaction's commit. So once the log is
/// [`RESTART_FRAMES`] long, the checkpoint thread makes passes [`PASS_PAUSE`] apart, each
/// copying only the frames since the one before, until the log has started over (no commit
/// landed while a pass ran, so the writer's next transaction began with every frame
/// copied) or [`FINISH_PASSES`] have run. Only if the log still reaches
/// [`CATCH_UP_FRAMES`] does the writer copy the last frames itself, between two batches:
/// that stalls every job queued behind it for a sync of the database file (2–9 ms under
/// load), which is why it is the fallback (as the rule, every ~0.3 s at 500 hooks/s, it
/// held up ~3 % of the hooks).
struct Checkpoint {
    wake: std_mpsc::SyncSender<()>,
    /// The log's length at the writer's last catch-up (0 once the log has started over): a
    /// reader still on an old snapshot keeps the log from starting over, and catching up
    /// after every commit meanwhile would sync the database file every time.
    caught_up_at: i64,
    catch_ups: Arc<CheckpointStats>,
}

/// What the store's tests read of checkpointing (and one switch they flip).
#[derive(Default)]
struct CheckpointStats {
    /// Checkpoints the writer has had to finish itself.
    writer: AtomicU64,
    /// Tests only: the checkpoint thread is never woken.
    #[cfg(test)]
    thread_held: AtomicBool,
}

impl CheckpointStats {
    fn thread_held(&self) -> bool {
        #[cfg(test)]
        return self.thread_held.load(Ordering::Relaxed);
        #[cfg(not(test))]
        false
    }
}

impl Checkpoint {
    fn after_commit(&mut self, conn: &Connection) {
        let frames = LOG_FRAMES.with(std::cell::Cell::get);
        if frames < self.caught_up_at {
            self.caught_up_at = 0;
        }
        if frames >= CATCH_UP_FRAMES.max(self.caught_up_at + CHECKPOINT_FRAMES) {
            self.caught_up_at = frames;
            self.catch_ups.writer.fetch_add(1, Ordering::Relaxed);
            if let Err(err) = wal_checkpoint(conn) {
                tracing::debug!(%err, "catch-up checkpoint skipped");
            }
        } else if frames >= CHECKPOINT_FRAMES && !self.catch_ups.thread_held() {
            // Full: a wake-up is already pending, which covers this commit too.
            let _ = self.wake.try_send(());
        }
    }
}

/// Runs a `PASSIVE` checkpoint pass; returns the log's length in frames.
fn wal_checkpoint(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
}

fn checkpoint_loop(conn: Connection, wake: std_mpsc::Receiver<()>) {
    while wake.recv().is_ok() {
        for _ in 0..FINISH_PASSES {
            match wal_checkpoint(&conn) {
                // Still long: not all copied yet, or copied while the writer was in a
                // transaction that has since added frames.
                Ok(frames) if frames >= RESTART_FRAMES => std::thread::sleep(PASS_PAUSE),
                Ok(_) => break,
                Err(err) => {
                    // Busy (the writer is catching up): the next wake-up tries again.
                    tracing::debug!(%err, "checkpoint skipped");
                    break;
                }
            }
        }
        std::thread::sleep(CHECKPOINT_EVERY);
    }
}

/// `f` as the writer runs it: its result, or the commit's failure, goes to `deliver` once
/// the batch it ran in has committed.
fn write_job<T, F>(f: F, deliver: impl FnOnce(StoreResult<T>) + Send + 'static) -> WriteJob
where
    T: Send + 'static,
    F: FnOnce(&WriteTx) -> StoreResult<T> + Send + 'static,
{
    Box::new(move |conn| {
        let result = f(conn);
        let ok = result.is_ok();
        let finish: Finish = Box::new(move |commit| deliver(commit.and(result)));
        (ok, finish)
    })
}

/// [`run_batch`] on PostgreSQL: a writer session found lost is replaced first, and a batch
/// whose transaction could not begin because the session had just been cut runs once more
/// on a new one (none of its jobs ran). Jobs that cannot run are dropped, which answers
/// their callers with `Unavailable`.
fn run_batch_revived(
    conn: &mut Session,
    batch: Vec<WriteJob>,
    generation: &Generation,
    revive: &Revive,
) {
    if let Err(err) = revive.ensure_writer(conn) {
        tracing::error!(%err, jobs = batch.len(), "the store's writer has no session");
        return;
    }
    if let Some((batch, err)) = run_batch(&conn.write_tx(), batch, generation)
        && (conn.is_lost() || err.ends_session())
    {
        // (Counted as a loss first, so the session is checked before it is kept.)
        revive.lost();
        if revive.ensure_writer(conn).is_ok() {
            drop(run_batch(&conn.write_tx(), batch, generation));
        }
    }
    if conn.is_lost() {
        // The other sessions are checked before their next use.
        revive.lost();
    }
}

/// Runs `batch` in one transaction; gives the jobs back, none of them run, if the
/// transaction cannot begin.
fn run_batch(
    conn: &WriteTx,
    batch: Vec<WriteJob>,
    generation: &Generation,
) -> Option<(Vec<WriteJob>, StoreError)> {
    let begin = match conn.dialect() {
        // Takes the write lock now, not at the first write (no deadlock upgrading it later).
        Dialect::Sqlite => "BEGIN IMMEDIATE",
        Dialect::Postgres => "BEGIN",
    };
    // On PostgreSQL every write transaction takes the outbox lock first (see `pg::outbox`),
    // so replicas' write transactions run one at a time, as SQLite's one writer does: no
    // two of them ever wait on each other's row locks in opposite orders (a creation locks
    // its repository's row and then records events; a batch that recorded an event before
    // a creation would take them the other way round, and deadlock with another replica).
    let begun = match conn.dialect() {
        Dialect::Sqlite => conn.execute_batch(begin),
        // One round trip: the transaction, the lock, the first job's savepoint.
        Dialect::Postgres => conn
            .execute_batch(&format!(
                "{begin}; SELECT pg_advisory_xact_lock({}); SAVEPOINT job",
                pg::outbox::OUTBOX_LOCK
            ))
            .map(|()| conn.set_outbox_lock_held(true)),
    };
    if let Err(err) = begun {
        // Dropping the jobs answers their callers with `Unavailable`; nothing ran.
        tracing::error!(%err, jobs = batch.len(), "cannot begin a write transaction");
        let _ = conn.execute_batch("ROLLBACK");
        conn.set_outbox_lock_held(false);
        return Some((batch, err));
    }
    let mut finishes = Vec::with_capacity(batch.len());
    // Each job runs under a savepoint of its own. Releasing one and opening the next is one
    // round trip (on PostgreSQL every statement is one), and so is the last release with
    // the commit.
    // A job's events wait until it ends, and then go in one statement (see `defer_events`).
    conn.defer_events();
    // On PostgreSQL the first savepoint was opened with the transaction.
    let mut open_savepoint = match conn.dialect() {
        Dialect::Sqlite => Some("SAVEPOINT job"),
        Dialect::Postgres => None,
    };
    for job in batch {
        if let Some(sql) = open_savepoint
            && let Err(err) = conn.execute_batch(sql)
        {
            tracing::error!(%err, "cannot open a savepoint; job dropped");
            // The transaction is unusable: what follows fails and the batch rolls back.
            open_savepoint = Some("SAVEPOINT job");
            continue;
        }
        open_savepoint = Some("RELEASE job; SAVEPOINT job");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(conn)));
        let mut ok = matches!(outcome, Ok((true, _)));
        let mut events_failed = None;
        if ok && let Err(err) = events::record_held(conn) {
            // Changes without the events that describe them: neither stays. The error goes
            // to the caller only: a database error's detail can quote the event's row.
            tracing::error!("cannot record a job's events; its changes are rolled back");
            events_failed = Some(err.to_string());
            ok = false;
        }
        if !ok {
            // The outbox lock was taken before the savepoint: it stays.
            conn.take_held_events();
            let _ = conn.execute_batch("ROLLBACK TO job");
        }
        match outcome {
            Ok((_, finish)) => finishes.push(match events_failed {
                None => finish,
                Some(err) => Box::new(move |_commit| {
                    finish(Err(StoreError::Unavailable(format!(
                        "cannot record the change's events: {err}"
                    ))))
                }),
            }),
            Err(_) => tracing::error!("a store job panicked; its changes were rolled back"),
        }
    }
    let commit = if open_savepoint != Some("RELEASE job; SAVEPOINT job") {
        conn.execute_batch("COMMIT")
    } else {
        conn.execute_batch("RELEASE job; COMMIT")
    };
    if let Err(err) = &commit {
        tracing::error!(%err, "commit failed; the batch is rolled back");
        let _ = conn.execute_batch("ROLLBACK");
    }
    conn.set_outbox_lock_held(false);
    // PostgreSQL has no update hook: the tables' triggers name what changed, and this
    // session hears its own notifications as its commit returns.
    for table in conn.take_notifications() {
        if let Some(domain) = Domain::of_table(&table) {
            generation.touched[domain as usize].store(true, Ordering::Relaxed);
        }
    }
    // Before any caller hears of its commit: a request sent after a reply must not find an
    // entry cached before the change.
    for (touched, counter) in generation.touched.iter().zip(generation.counters.iter()) {
        if touched.swap(false, Ordering::AcqRel) {
            counter.fetch_add(1, Ordering::AcqRel);
        }
    }
    for finish in finishes {
        finish(match &commit {
            Ok(()) => Ok(()),
            Err(err) => Err(StoreError::Unavailable(format!("commit failed: {err}"))),
        });
    }
    None
}

/// A subquery of the text items of the JSON array bound at `param` (`?1`, `#`), for `x IN
/// (…)` with a list of any length in one statement.
pub(crate) fn json_array_items(dialect: Dialect, param: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!("SELECT value FROM json_each({param})"),
        Dialect::Postgres => format!("SELECT json_array_elements_text(CAST({param} AS json))"),
    }
}

/// The end of a `SELECT` whose rows the transaction goes on to change on the strength of
/// what it read: on PostgreSQL they are locked, and rows another replica's transaction
/// holds are skipped (it is handling them), so two replicas never act on the same row;
/// SQLite's one writer needs nothing.
pub(crate) fn claim_rows(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "",
        Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
    }
}

/// Rows to skip for a 1-based `page` of `per_page` rows.
pub fn page_offset(page: u32, per_page: u32) -> i64 {
    i64::from(page.saturating_sub(1)) * i64::from(per_page)
}

/// `WHERE` clause of the rows a pipeline of repository `?2` in organisation `?1` may use:
/// repository, organisation and global scope. Order by key, then `repo_id DESC, org_id DESC`
/// and keep the first row per key for upstream's precedence (repo > org > global).
pub const PIPELINE_SCOPES: &str =
    "(org_id = 0 AND repo_id = ?2) OR (org_id = ?1 AND repo_id = 0 AND ?1 != 0)
            OR (org_id = 0 AND repo_id = 0)";

pub use woodlark_stdx::{now_unix, now_unix_ms};

/// The main database's file inside a data dir (SQLite); the logs' is [`logs::LOGS_FILE`].
pub const DB_FILE: &str = "woodlark.db";

/// A fresh store for a unit test, on the engine `WOODLARK_TEST_STORE` names (see
/// `sql::fresh_tx`); the directory holds SQLite's files.
#[cfg(test)]
pub(crate) fn test_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = if std::env::var("WOODLARK_TEST_STORE").as_deref() == Ok("postgres") {
        let url = pg::testing::Cluster::shared().fresh_database();
        Store::open_postgres(&url, &StoreOptions::default()).unwrap()
    } else {
        Store::open(&dir.path().join("t.db"), &StoreOptions::default()).unwrap()
    };
    (dir, store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store() -> (tempfile::TempDir, Store) {
        test_store()
    }

    /// `read_one` runs one statement (on PostgreSQL outside a snapshot transaction, which
    /// `read` opens) and refuses a second on either engine.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_one_statement_read_runs_one_statement() {
        let (_dir, store) = store_with_table().await;
        let one: i64 = store
            .read_one(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(one, 0);
        let second = store
            .read_one(|c| {
                c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))?;
                c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
            })
            .await
            .unwrap_err()
            .to_string();
        assert!(second.contains("second statement"), "{second}");
        // The reader it used is fine for the next read, which has no limit.
        let two: (i64, i64) = store
            .read(|c| {
                let a = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
                Ok((a, c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            })
            .await
            .unwrap();
        assert_eq!(two, (0, 0));
        if store.dialect() == Dialect::Postgres {
            let isolation = |c: &Tx| {
                c.query_row("SELECT current_setting('transaction_isolation')", [], |r| {
                    r.get::<_, String>(0)
                })
            };
            assert_eq!(store.read_one(isolation).await.unwrap(), "read committed");
            assert_eq!(store.read(isolation).await.unwrap(), "repeatable read");
        }
        store.close();
    }

    /// A store with an empty table `t (v INTEGER)`.
    async fn store_with_table() -> (tempfile::TempDir, Store) {
        let (dir, store) = temp_store();
        store
            .write(|c| {
                c.execute_batch("CREATE TABLE t (v INTEGER)")?;
                Ok(())
            })
            .await
            .unwrap();
        (dir, store)
    }

    async fn sum_of_t(store: &Store) -> i64 {
        store
            .read(|c| c.query_row("SELECT sum(v) FROM t", [], |r| r.get(0)))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_failing_or_panicking_job_leaves_nothing_and_the_writer_goes_on() {
        let (_dir, store) = store_with_table().await;
        let failed = store
            .write(|c| {
                c.execute("INSERT INTO t VALUES (1)", [])?;
                Err::<(), _>(StoreError::Conflict("no".into()))
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Conflict(_))), "{failed:?}");
        let panicked = store
            .write(|c| -> StoreResult<()> {
                c.execute("INSERT INTO t VALUES (2)", [])?;
                panic!("a bug in a job");
            })
            .await;
        assert!(panicked.is_err());
        // The writer goes on, and the next job's transaction starts clean.
        store
            .write(|c| {
                c.execute("INSERT INTO t VALUES (4)", [])?;
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(sum_of_t(&store).await, 4);
    }

    #[tokio::test]
    async fn failing_job_rolls_back_alone() {
        let (_dir, store) = store_with_table().await;
        let a = store.write(|c| {
            c.execute("INSERT INTO t VALUES (1)", [])?;
            Ok(())
        });
        let b = store.write(|c| {
            c.execute("INSERT INTO t VALUES (2)", [])?;
            Err::<(), _>(StoreError::Conflict("no".into()))
        });
        let c = store.write(|c| {
            c.execute("INSERT INTO t VALUES (3)", [])?;
            Ok(())
        });
        let (a, b, c) = tokio::join!(a, b, c);
        assert!(a.is_ok() && b.is_err() && c.is_ok());
        assert_eq!(sum_of_t(&store).await, 4);
    }

    #[tokio::test]
    async fn submitted_jobs_run_in_submission_order_whatever_order_they_are_awaited_in() {
        let (_dir, store) = store_with_table().await;
        store
            .write(|c| c.execute("INSERT INTO t VALUES (0)", []).map(drop))
            .await
            .unwrap();
        // v = v * times + plus: submission order gives (0 * 0 + 2) * 10 + 3 = 23; the
        // order of the awaits below (last first) would give 2.
        let jobs: Vec<_> = [(0, 2), (10, 3)]
            .into_iter()
            .map(|(times, plus)| {
                store.submit(move |c| {
                    c.execute("UPDATE t SET v = v * ?1 + ?2", [times, plus])?;
                    Ok(())
                })
            })
            .collect();
        for job in jobs.into_iter().rev() {
            job.await.unwrap();
        }
        assert_eq!(sum_of_t(&store).await, 23);
    }

    /// A store without per-commit syncs (the log tests write a lot) and an empty table
    /// `t (v BLOB)`.
    async fn store_for_the_log() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            readers: 2,
            full_sync: false,
            sealing_key: None,
            competes_for_lead: true,
        };
        let store = Store::open(&dir.path().join("t.db"), &options).unwrap();
        store
            .write(|c| c.execute_batch("CREATE TABLE t (v BLOB)"))
            .await
            .unwrap();
        (dir, store)
    }

    /// The log file's length in bytes: as long as the longest log so far.
    fn log_file_len(dir: &tempfile::TempDir) -> u64 {
        std::fs::metadata(dir.path().join("t.db-wal"))
            .unwrap()
            .len()
    }

    /// Unless a checkpoint finishes the log between two transactions, the log never starts
    /// over while writes keep coming, and grows by every page written. Writes that never
    /// pause for a checkpoint pass's length leave it to the writer's catch-up. Whether this
    /// loop pauses long enough depends on the machine's load (on a busy CI machine the thread
    /// often managed), so the thread is held and the writer has to.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_starts_over_under_continuous_writes() {
        let (dir, store) = store_for_the_log().await;
        store.hold_checkpoint_thread();
        // One page each: three times the length at which the log should start over.
        let rows = 3 * RESTART_FRAMES;
        for _ in 0..rows {
            store
                .write(|c| {
                    c.execute("INSERT INTO t VALUES (zeroblob(3000))", [])?;
                    Ok(())
                })
                .await
                .unwrap();
            // A reader now and then, as requests do.
            store
                .read(|c| c.query_row("SELECT max(rowid) FROM t", [], |r| r.get::<_, i64>(0)))
                .await
                .unwrap();
        }
        let wal = log_file_len(&dir);
        // A log that never started over holds ~3× `written` (measured: a commit writes the
        // row's page, the header page and more); one that started over once the writer's
        // catch-up length was reached, ~1.1×.
        let written = rows as u64 * 4096;
        assert!(
            wal < 2 * written,
            "the log holds {wal} bytes after {written} bytes were written: it never started over"
        );

        let count: i64 = store
            .read(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(count, rows);
        assert!(store.writer_catch_ups() > 0);
        store.close();
    }

    /// Writes with pauses between them, as hooks arrive: the checkpoint thread finishes the
    /// log in one of those pauses, long before the writer would have to (stalling the jobs
    /// queued behind it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_checkpoint_thread_starts_the_log_over_when_the_writer_pauses() {
        let (dir, store) = store_for_the_log().await;
        // Ten pages a write: the writer's catch-up length and more, written in ~6 s.
        const PAGES: i64 = 10;
        let writes = (CATCH_UP_FRAMES + RESTART_FRAMES) / PAGES;
        for _ in 0..writes {
            store
                .write(|c| {
                    for _ in 0..PAGES {
                        c.execute("INSERT INTO t VALUES (zeroblob(3000))", [])?;
                    }
                    Ok(())
                })
                .await
                .unwrap();
            // Pauses of a few milliseconds, as between hooks: long enough for a pass to end
            // in one even while the disk is slow and the cores busy (1 ms missed every pause
            // once in a CI run whose docker tests had just ended; 3 ms, one run in four
            // beside two compilers).
            tokio::time::sleep(Duration::from_millis(6)).await;
        }
        // A frame is a page and a 24-byte header; the file is as long as the longest log.
        let longest = log_file_len(&dir) / (4096 + 24);
        assert!(
            longest < CATCH_UP_FRAMES as u64 * 3 / 4,
            "the log reached {longest} frames: the checkpoint thread did not start it over"
        );
        assert_eq!(store.writer_catch_ups(), 0, "the writer had to catch up");
        store.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn abandoned_and_panicking_reads_never_lose_a_connection() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            readers: 1,
            full_sync: false,
            sealing_key: None,
            competes_for_lead: true,
        };
        let store = Store::open(&dir.path().join("t.db"), &options).unwrap();
        // A read whose caller gives up while it runs.
        let slow = store.read(|_| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            Ok(())
        });
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), slow).await;
        // A read that panics.
        let panicked = store.read(|_| -> StoreResult<()> { panic!("boom") }).await;
        assert!(panicked.is_err());
        // The single connection is still there for everyone after.
        for _ in 0..5 {
            store
                .read(|c| c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)))
                .await
                .unwrap();
        }
    }

    #[test]
    fn limits_never_force_a_reprepare() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (2), (3);")
            .unwrap();
        let reprepares = |sql: &str| {
            for limit in [1, 2, 3] {
                let mut stmt = conn.prepare_cached(sql).unwrap();
                let n = stmt
                    .query_map([limit], |r| r.get::<_, i64>(0))
                    .unwrap()
                    .count();
                assert_eq!(n, limit as usize);
            }
            conn.prepare_cached(sql)
                .unwrap()
                .get_status(rusqlite::StatementStatus::RePrepare)
        };
        assert!(
            reprepares("SELECT v FROM t ORDER BY v LIMIT ?1") > 0,
            "SQLite's behaviour"
        );
        assert_eq!(reprepares("SELECT v FROM t ORDER BY v LIMIT ?1 + 0"), 0);

        // And the store's own SQLite queries use the second form (`pg/` is PostgreSQL's).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Tests (like this one) may write what they like.
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (i, form) in text
                .match_indices("LIMIT ?")
                .chain(text.match_indices("LIMIT #"))
            {
                let rest = &text[i + 7..];
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                if form.ends_with('?') && digits == 0 {
                    continue; // prose, not SQL
                }
                assert!(
                    rest[digits..].starts_with(" + 0"),
                    "{}: a bound LIMIT without `+ 0` re-prepares on every call",
                    path.display()
                );
            }
        }
    }

    #[tokio::test]
    async fn ping_works_and_close_stops_writes() {
        let (_dir, store) = temp_store();
        store.ping().await.unwrap();
        store.close();
        assert!(matches!(
            store.write(|_| Ok(())).await,
            Err(StoreError::Closed)
        ));
    }
}
