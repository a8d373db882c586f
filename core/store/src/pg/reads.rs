//! Reads on the asynchronous PostgreSQL client, on the caller's runtime.
//!
//! The synchronous client runs each call on a runtime of its own, so a read through it is a
//! hop to the blocking pool, a `block_on` there, the socket, and the way back: measured, that
//! was about a third of the CPU a PostgreSQL cache miss costs (`docs/benchmarks.md`, issue 50's
//! second round). [`AsyncReaders`] keeps a few `tokio-postgres` sessions instead, their I/O a
//! task on the runtime that opened them, each with its prepared statements, in two kinds:
//! - `Store::read`'s several statements take a session of their own
//!   ([`AsyncReaders::begin`]) and run on it in turn ([`Lease::query`]) inside one
//!   `BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY` … `COMMIT` (the `BEGIN` sent with the
//!   first statement, in one round trip), so they see one snapshot as on the synchronous path;
//! - `Store::read_one`'s single statement, which sees a snapshot by itself, goes out on one
//!   of a few sessions that such reads share ([`AsyncReaders::one`]): many reads in flight
//!   on one session are pipelined, sent and answered in batches, where a session per read
//!   would pay the wake-ups and socket calls of each one alone.
//!
//! The store hands each statement here and maps its rows with the read's own closure
//! ([`crate::sql::Deferred`]), so each read's row mapping stays the one every path uses.
//!
//! Sessions are opened on first use, not with the store (which may be opened off any
//! runtime). A session the server closed (a restart, a proxy's idle timeout, a runtime that
//! ended and took its I/O task along) is found closed or fails the read's first statement:
//! the statement then runs once more on a new session, as the synchronous readers do, and the
//! loss is counted so the store's other sessions check theirs before their next use. A
//! session lost after the read's first statement fails the read with the store's error (its
//! snapshot is gone with it); the next read opens a new one.
//!
//! A session cut without a word (a peer gone from the network, no reset) would leave its read
//! waiting for ever, holding one of the pool's sessions. So a read, all its statements
//! together, waits at most [`READ_TIMEOUT`]; past it, the read fails with the store's
//! `Unavailable`, the session is dropped (and counted lost), and the next read opens a new one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::sql::{PgBind, Statement, dollar_placeholders};
use crate::{StoreError, StoreResult};

/// How long a read waits for the database's answers, all its statements together: far past
/// any read a request makes (indexed look-ups and bounded pages, answered in milliseconds),
/// short enough that a dead session does not hold a request for minutes.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How a snapshot read begins: the same as the synchronous readers'.
const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";

/// A small pool of asynchronous sessions for reads.
pub(crate) struct AsyncReaders {
    url: String,
    /// One permit per session snapshot reads may hold ([`own_sessions`]).
    slots: Semaphore,
    /// Sessions not in use (fewer than the permits until every one has been needed).
    idle: Mutex<Vec<AsyncSession>>,
    /// The sessions one-statement reads share ([`AsyncReaders::one`]).
    shared: Vec<SharedSlot>,
    /// Which of `shared` the next one-statement read goes to (in turn).
    next_shared: AtomicUsize,
    /// The store's count of lost sessions (`Revive`), moved when a read here finds one, so
    /// the synchronous sessions are checked too; `None` for a store that revives nothing.
    losses: Option<Arc<AtomicU64>>,
    /// Sessions opened so far (for tests and logs: a reconnect opens one more).
    opened: AtomicU64,
    /// [`READ_TIMEOUT`], shorter in tests.
    answer_within: Duration,
}

/// One asynchronous session and the statements prepared on it. The statements belong to
/// the session: a replaced session starts with none.
struct AsyncSession {
    client: tokio_postgres::Client,
    statements: Mutex<HashMap<String, tokio_postgres::Statement>>,
}

/// One of the sessions one-statement reads share: the current session (`None` until the
/// first read needs it, and after it was found lost), and a lock that lets one read at a
/// time open its replacement while the others wait for it.
#[derive(Default)]
struct SharedSlot {
    current: Mutex<Option<Arc<AsyncSession>>>,
    opening: tokio::sync::Mutex<()>,
}

/// One read's hold on a session of the pool, from [`AsyncReaders::begin`] to
/// [`Lease::end`]. Dropped without `end` (the read's future was dropped), its session is
/// closed rather than kept: a statement or the snapshot may still be open on it.
pub(crate) struct Lease<'p> {
    pool: &'p AsyncReaders,
    _permit: SemaphorePermit<'p>,
    /// `None` once the session is known lost or was given up on.
    session: Option<AsyncSession>,
    /// When the read's time is up ([`READ_TIMEOUT`] from its start).
    deadline: Instant,
    /// Whether the snapshot's transaction is open on the session.
    in_transaction: bool,
    /// Statements answered so far.
    answered: usize,
}

impl AsyncReaders {
    /// A pool of at most `size` sessions to `url` (two if `size` is one), opened when first
    /// needed: [`shared_sessions`] for one-statement reads, the rest for snapshots.
    pub(crate) fn new(url: &str, size: usize, losses: Option<Arc<AtomicU64>>) -> AsyncReaders {
        AsyncReaders {
            url: url.to_string(),
            slots: Semaphore::new(own_sessions(size)),
            idle: Mutex::default(),
            shared: (0..shared_sessions(size))
                .map(|_| SharedSlot::default())
                .collect(),
            next_shared: AtomicUsize::new(0),
            losses,
            opened: AtomicU64::new(0),
            answer_within: READ_TIMEOUT,
        }
    }

    /// How many sessions this pool has opened.
    #[cfg(test)]
    pub(crate) fn sessions_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Runs `sql` (SQLite's `?N` placeholders, as the store writes it) with `binds` by
    /// itself, as `Store::read_one` does, and returns its rows as values.
    #[cfg(test)]
    pub(crate) async fn query(
        &self,
        sql: &str,
        binds: &[PgBind],
    ) -> StoreResult<Vec<Vec<rusqlite::types::Value>>> {
        let rows = self.one(sql, binds).await?;
        rows.iter().map(crate::sql::pg_row_values).collect()
    }

    /// Runs `sql` (SQLite's `?N` placeholders) with `binds` by itself, as `Store::read_one`
    /// does, on one of the shared sessions, and returns its rows.
    ///
    /// Reads in flight together go out on the same few sessions one behind the other
    /// (`tokio-postgres` pipelines the requests of a client used from several tasks), so a
    /// busy server's reads cost fewer wake-ups and socket calls, on both sides, than one
    /// session per read would. A statement sees one snapshot by itself, so nothing is lost
    /// by sharing; what is shared is time (a slow statement holds up the ones behind it on
    /// its session, which is why `read_one` is for a request's short, indexed reads). A
    /// session found lost (closed, or cut by the server) is replaced, and the statement
    /// runs once more on the new one; a read with no answer in time fails with the store's
    /// `Unavailable` and retires its session, which the next read replaces.
    pub(crate) async fn one(
        &self,
        sql: &str,
        binds: &[PgBind],
    ) -> StoreResult<Vec<tokio_postgres::Row>> {
        let deadline = Instant::now() + self.answer_within;
        let params = as_params(binds);
        let slot =
            &self.shared[self.next_shared.fetch_add(1, Ordering::Relaxed) % self.shared.len()];
        let first = self.shared_session(slot, deadline).await?;
        match self.run_shared(slot, &first, sql, &params, deadline).await {
            Err(e) if first.client.is_closed() || e.ends_session() => {
                self.retire(slot, &first);
                tracing::info!(error = %e, "a lost shared PostgreSQL reader session is replaced");
                let second = self.shared_session(slot, deadline).await?;
                self.run_shared(slot, &second, sql, &params, deadline).await
            }
            result => result,
        }
    }

    /// One statement on `slot`'s `session` by `deadline`; out of time, the session is
    /// retired.
    async fn run_shared(
        &self,
        slot: &SharedSlot,
        session: &Arc<AsyncSession>,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        deadline: Instant,
    ) -> StoreResult<Vec<tokio_postgres::Row>> {
        match tokio::time::timeout_at(deadline, session.query(sql, params, false)).await {
            Ok((_, rows)) => rows,
            Err(_) => {
                self.retire(slot, session);
                Err(self.late())
            }
        }
    }

    /// `slot`'s session, opened (by this read or one waiting beside it) if it has none or
    /// the one it has is closed.
    async fn shared_session(
        &self,
        slot: &SharedSlot,
        deadline: Instant,
    ) -> StoreResult<Arc<AsyncSession>> {
        if let Some(session) = self.open_session_of(slot) {
            return Ok(session);
        }
        let Ok(_opening) = tokio::time::timeout_at(deadline, slot.opening.lock()).await else {
            return Err(self.late());
        };
        // Another read may have opened it while this one waited.
        if let Some(session) = self.open_session_of(slot) {
            return Ok(session);
        }
        let session = match tokio::time::timeout_at(deadline, self.open()).await {
            Ok(session) => Arc::new(session?),
            Err(_) => return Err(self.late()),
        };
        *slot.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.clone());
        Ok(session)
    }

    /// `slot`'s session if it has one that is open; one found closed is retired.
    fn open_session_of(&self, slot: &SharedSlot) -> Option<Arc<AsyncSession>> {
        let session = slot
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        if !session.client.is_closed() {
            return Some(session);
        }
        self.retire(slot, &session);
        None
    }

    /// Takes `session` out of `slot` (if it is still there) and counts it lost, so the next
    /// read opens a new one. Reads still waiting on it keep it until they are answered.
    fn retire(&self, slot: &SharedSlot, session: &Arc<AsyncSession>) {
        let mut current = slot.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, session)) {
            *current = None;
            self.lost();
        }
    }

    /// A session of its own for one read of several statements in one snapshot. Waits for a
    /// free session within the read's time.
    pub(crate) async fn begin(&self) -> StoreResult<Lease<'_>> {
        let deadline = Instant::now() + self.answer_within;
        let permit = match tokio::time::timeout_at(deadline, self.slots.acquire()).await {
            Ok(permit) => permit.map_err(|_| StoreError::Closed)?,
            Err(_) => return Err(self.late()),
        };
        let session = match self.take_idle() {
            Some(session) => session,
            None => match tokio::time::timeout_at(deadline, self.open()).await {
                Ok(session) => session?,
                Err(_) => return Err(self.late()),
            },
        };
        Ok(Lease {
            pool: self,
            _permit: permit,
            session: Some(session),
            deadline,
            in_transaction: false,
            answered: 0,
        })
    }

    /// An idle session that is still open (closed ones are dropped on the way).
    fn take_idle(&self) -> Option<AsyncSession> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(session) = idle.pop() {
            if !session.client.is_closed() {
                return Some(session);
            }
            // Found closed before use: counted, so the other sessions are checked.
            self.lost();
        }
        None
    }

    async fn open(&self) -> StoreResult<AsyncSession> {
        let client = super::connect_async(&self.url)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(AsyncSession {
            client,
            statements: Mutex::default(),
        })
    }

    fn lost(&self) {
        if let Some(losses) = &self.losses {
            losses.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The error of a read out of time (its session, if it had one, dropped by the caller).
    fn late(&self) -> StoreError {
        tracing::warn!(
            timeout_ms = self.answer_within.as_millis() as u64,
            "a PostgreSQL read got no answer in time"
        );
        StoreError::Unavailable(format!(
            "the database did not answer a read within {} ms",
            self.answer_within.as_millis()
        ))
    }
}

impl Lease<'_> {
    /// Runs `statements` on the read's session, all sent at once, and returns each one's
    /// rows, in their order (the snapshot's first statements begin it). The read's first
    /// statements, finding their session lost, run once more on a new one; any other error
    /// is the read's.
    pub(crate) async fn query(
        &mut self,
        statements: &[Statement],
    ) -> StoreResult<Vec<Vec<tokio_postgres::Row>>> {
        let result = self.run(statements).await;
        let Err(e) = &result else {
            return result;
        };
        let lost = self.session.as_ref().is_none_or(|s| s.client.is_closed()) || e.ends_session();
        if self.answered > 0 || !lost || self.session.is_none() {
            // (No session: it timed out, and the time is the read's whole bound.)
            return result;
        }
        self.pool.lost();
        tracing::info!(error = %e, "a lost asynchronous PostgreSQL reader session is replaced");
        self.in_transaction = false;
        self.session = None;
        let session = match tokio::time::timeout_at(self.deadline, self.pool.open()).await {
            Ok(session) => session?,
            Err(_) => return Err(self.pool.late()),
        };
        self.session = Some(session);
        self.run(statements).await
    }

    /// `statements` on the session, within the read's time; out of time, the session is
    /// dropped and counted lost.
    async fn run(
        &mut self,
        statements: &[Statement],
    ) -> StoreResult<Vec<Vec<tokio_postgres::Row>>> {
        let session = self
            .session
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable("the read's session was lost".into()))?;
        let begin = !self.in_transaction;
        match tokio::time::timeout_at(self.deadline, session.query_all(statements, begin)).await {
            Ok((began, rows)) => {
                self.in_transaction |= began;
                let rows = rows?;
                self.answered += rows.len();
                Ok(rows)
            }
            Err(_) => {
                self.session = None;
                self.pool.lost();
                Err(self.pool.late())
            }
        }
    }

    /// Ends the read: the snapshot's transaction ended, the session back in the pool if it
    /// is still open.
    ///
    /// The `COMMIT` is sent, not waited for: the session's next request goes out after it
    /// (the client keeps their order), and a read-only transaction has nothing a `COMMIT`
    /// could refuse. A session that dies with it fails the next read's first statement,
    /// which then runs once more on a new session. (Waiting was one round trip in four of
    /// a three-statement read.)
    pub(crate) fn end(mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if self.in_transaction {
            let commit = std::pin::pin!(session.client.batch_execute("COMMIT"));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            // Its first poll sends it; the answer is read and dropped by the session's task.
            if let std::task::Poll::Ready(Err(e)) = commit.poll(&mut cx) {
                tracing::debug!(error = %e, "a PostgreSQL reader session could not end its snapshot");
            }
        }
        if session.client.is_closed() {
            self.pool.lost();
            return;
        }
        self.pool
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(session);
    }
}

impl AsyncSession {
    fn statements(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio_postgres::Statement>> {
        self.statements.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `sql` prepared on this session (once: kept for the session's next reads).
    async fn statement(&self, sql: &str) -> StoreResult<tokio_postgres::Statement> {
        if let Some(statement) = self.statements().get(sql).cloned() {
            return Ok(statement);
        }
        // (Reads sharing the session may prepare the same statement side by side; the last
        // one kept serves the rest.)
        let statement = self.client.prepare(&dollar_placeholders(sql)).await?;
        self.statements().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// `sql`'s rows; with `begin`, the snapshot's `BEGIN` is sent ahead of it in the same
    /// round trip. Returns whether the snapshot began.
    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        begin: bool,
    ) -> (bool, StoreResult<Vec<tokio_postgres::Row>>) {
        let statement = match self.statement(sql).await {
            Ok(statement) => statement,
            Err(e) => return (false, Err(e)),
        };
        if !begin {
            return (
                false,
                self.client
                    .query(&statement, params)
                    .await
                    .map_err(Into::into),
            );
        }
        // Both requests go out before either answer is awaited (the client pipelines them).
        let (began, rows) = tokio::join!(
            self.client.batch_execute(BEGIN),
            self.client.query(&statement, params)
        );
        match began {
            Ok(()) => (true, rows.map_err(Into::into)),
            Err(e) => (false, Err(e.into())),
        }
    }

    /// [`AsyncSession::query`] for several statements, all sent (after `BEGIN`, with
    /// `begin`) before any answer is awaited: one round trip for all of them. Each is
    /// prepared first (once per session), so that they go out in one write, in their order.
    async fn query_all(
        &self,
        statements: &[Statement],
        begin: bool,
    ) -> (bool, StoreResult<Vec<Vec<tokio_postgres::Row>>>) {
        if let [(sql, binds)] = statements {
            let (began, rows) = self.query(sql, &as_params(binds), begin).await;
            return (began, rows.map(|rows| vec![rows]));
        }
        let mut prepared = Vec::with_capacity(statements.len());
        for (sql, _) in statements {
            match self.statement(sql).await {
                Ok(statement) => prepared.push(statement),
                Err(e) => return (false, Err(e)),
            }
        }
        let params: Vec<_> = statements.iter().map(|(_, b)| as_params(b)).collect();
        // `join!` and `join_all` poll in order, and a request is sent on its first poll:
        // the `BEGIN`, then the statements as the read named them.
        let (began, answers) = tokio::join!(
            async {
                match begin {
                    true => self.client.batch_execute(BEGIN).await.map(|()| true),
                    false => Ok(false),
                }
            },
            futures_util::future::join_all(
                prepared
                    .iter()
                    .zip(&params)
                    .map(|(statement, params)| self.client.query(statement, params))
            )
        );
        let began = match began {
            Ok(began) => began,
            Err(e) => return (false, Err(e.into())),
        };
        let rows = answers
            .into_iter()
            .map(|rows| rows.map_err(Into::into))
            .collect();
        (began, rows)
    }
}

/// How many sessions one-statement reads share, in a pool of `size`: half of it, at least
/// one. A few suffice (each carries many reads at once); more than one lets the database
/// answer on more than one core.
fn shared_sessions(size: usize) -> usize {
    (size / 2).max(1)
}

/// How many sessions snapshot reads may hold, one each, in a pool of `size`: the rest, at
/// least one. So the pool opens at most `size` sessions (two when `size` is one).
fn own_sessions(size: usize) -> usize {
    size.saturating_sub(shared_sessions(size)).max(1)
}

/// `binds` as `tokio-postgres` takes parameters.
fn as_params(binds: &[PgBind]) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    binds
        .iter()
        .map(|b| b as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::testing::Cluster;
    use rusqlite::types::Value;

    fn pid(rows: &[Vec<Value>]) -> i64 {
        match rows.first().and_then(|r| r.first()) {
            Some(Value::Integer(pid)) => *pid,
            other => panic!("expected a pid, got {other:?}"),
        }
    }

    /// Ends the backend `pid` from a session of its own, as a restart or an administrator
    /// would.
    async fn terminate(url: &str, pid: i64) {
        let admin = crate::pg::connect_async(url).await.unwrap();
        let ended: bool = admin
            .query_one(
                "SELECT pg_terminate_backend($1::int4, 10000)",
                &[&(pid as i32)],
            )
            .await
            .unwrap()
            .get(0);
        assert!(ended, "backend {pid} was not there to end");
    }

    const PID: &str = "SELECT CAST(pg_backend_pid() AS BIGINT)";

    #[tokio::test]
    async fn a_pool_that_loses_its_session_reconnects_and_counts_the_loss() {
        let url = Cluster::shared().fresh_database();
        let losses = Arc::new(AtomicU64::new(0));
        let pool = AsyncReaders::new(&url, 1, Some(losses.clone()));
        let binds: [PgBind; 0] = [];
        let first = pid(&pool.query(PID, &binds).await.unwrap());
        assert_eq!(pid(&pool.query(PID, &binds).await.unwrap()), first);
        assert_eq!(
            pool.sessions_opened(),
            1,
            "one session serves reads in turn"
        );

        terminate(&url, first).await;
        // The read after the cut answers, from a new backend: it ran once more there.
        let second = pid(&pool.query(PID, &binds).await.unwrap());
        assert_ne!(second, first);
        assert_eq!(pool.sessions_opened(), 2);
        assert!(losses.load(Ordering::Acquire) >= 1, "the loss is counted");
        // And the new session stays.
        assert_eq!(pid(&pool.query(PID, &binds).await.unwrap()), second);
        assert_eq!(pool.sessions_opened(), 2);
    }

    /// Many one-statement reads at once go out on the few shared sessions, side by side,
    /// and each gets its own statement's rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_in_flight_together_share_a_few_sessions_and_get_their_own_rows() {
        let url = Cluster::shared().fresh_database();
        let pool = Arc::new(AsyncReaders::new(&url, 4, None));
        let sql = "SELECT CAST(?1 AS BIGINT) * 2, CAST(pg_backend_pid() AS BIGINT) \
                   FROM pg_sleep(0.01)";
        let reads: Vec<_> = (0..48i64)
            .map(|n| {
                let pool = pool.clone();
                tokio::spawn(
                    async move { (n, pool.query(sql, &[PgBind(Value::Integer(n))]).await) },
                )
            })
            .collect();
        let mut backends = Vec::new();
        for read in reads {
            let (n, rows) = read.await.unwrap();
            let rows = rows.unwrap();
            assert_eq!(
                rows[0][0],
                Value::Integer(n * 2),
                "read {n} got another's rows"
            );
            if !backends.contains(&rows[0][1]) {
                backends.push(rows[0][1].clone());
            }
        }
        assert_eq!(shared_sessions(4), 2);
        assert_eq!(pool.sessions_opened(), 2, "48 reads on two sessions");
        assert_eq!(backends.len(), 2, "both sessions answered");
        assert_eq!(
            pool.slots.available_permits(),
            own_sessions(4),
            "no own session held"
        );
    }

    #[tokio::test]
    async fn prepared_statements_are_prepared_again_on_a_new_session() {
        let url = Cluster::shared().fresh_database();
        let pool = AsyncReaders::new(&url, 1, None);
        let binds = [PgBind(Value::Integer(7))];
        let sql = "SELECT CAST(?1 AS BIGINT) + 1, CAST(pg_backend_pid() AS BIGINT)";
        let rows = pool.query(sql, &binds).await.unwrap();
        assert_eq!(rows[0][0], Value::Integer(8));
        let first = match rows[0][1] {
            Value::Integer(pid) => pid,
            ref other => panic!("{other:?}"),
        };
        terminate(&url, first).await;
        // The cached statement belonged to the ended session; the same SQL works on the new
        // one, prepared there, and stays cached there.
        for n in [1, 2, 3] {
            let rows = pool.query(sql, &[PgBind(Value::Integer(n))]).await.unwrap();
            assert_eq!(rows[0][0], Value::Integer(n + 1));
            assert_ne!(rows[0][1], Value::Integer(first));
        }
        let session = pool.shared[0].current.lock().unwrap().clone().unwrap();
        assert_eq!(session.statements().len(), 1);
        assert_eq!(pool.sessions_opened(), 2);
    }

    #[tokio::test]
    async fn no_database_is_the_stores_error_and_a_later_read_connects() {
        let cluster = Cluster::shared();
        let url = cluster.fresh_database();
        // A port nothing listens on: the read fails with the store's error, no panic.
        let nowhere = url.replace(&format!(":{}/", cluster.port()), ":1/");
        assert_ne!(nowhere, url);
        let pool = AsyncReaders::new(&nowhere, 2, None);
        let err = pool.query("SELECT 1", &[]).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(ref m) if m.contains("cannot connect")),
            "{err}"
        );
        // Each read tries again: the failed one held no session.
        assert!(pool.query("SELECT 1", &[]).await.is_err());
        assert_eq!(pool.sessions_opened(), 0);
        assert_eq!(pool.slots.available_permits(), own_sessions(2));
    }

    #[tokio::test]
    async fn a_read_without_an_answer_in_time_fails_and_frees_its_session() {
        let url = Cluster::shared().fresh_database();
        let losses = Arc::new(AtomicU64::new(0));
        let mut pool = AsyncReaders::new(&url, 1, Some(losses.clone()));
        pool.answer_within = Duration::from_millis(200);
        let started = std::time::Instant::now();
        let err = pool
            .query("SELECT CAST(1 AS BIGINT) FROM pg_sleep(2)", &[])
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable(ref m) if m.contains("did not answer")),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(1), "it waited");
        assert!(losses.load(Ordering::Acquire) >= 1, "the loss is counted");
        // The one session's slot is free again, and the next read gets a new session.
        let rows = pool.query("SELECT CAST(2 AS BIGINT)", &[]).await.unwrap();
        assert_eq!(rows, vec![vec![Value::Integer(2)]]);
        assert_eq!(pool.sessions_opened(), 2);
    }

    #[tokio::test]
    async fn a_bad_statement_is_an_error_and_the_session_stays() {
        let url = Cluster::shared().fresh_database();
        let pool = AsyncReaders::new(&url, 1, None);
        let err = pool
            .query("SELECT nothing FROM nowhere", &[])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Postgres(_)), "{err}");
        let rows = pool.query("SELECT CAST(2 AS BIGINT)", &[]).await.unwrap();
        assert_eq!(rows, vec![vec![Value::Integer(2)]]);
        assert_eq!(pool.sessions_opened(), 1);
    }

    /// A PostgreSQL store of one reader session, with a table `t` of one row.
    async fn store_with_one_row() -> (String, crate::Store) {
        let url = Cluster::shared().fresh_database();
        let options = crate::StoreOptions {
            readers: 1,
            ..crate::StoreOptions::default()
        };
        let store = crate::Store::open_postgres(&url, &options).unwrap();
        store
            .write(|c| {
                c.execute_batch("CREATE TABLE t (id BIGINT PRIMARY KEY); INSERT INTO t VALUES (1)")
            })
            .await
            .unwrap();
        (url, store)
    }

    /// Runs `sql` on a session of its own, from a plain thread (the blocking client cannot
    /// run on a runtime's), as another replica or an administrator would.
    fn elsewhere(url: &str, sql: String) {
        let url = url.to_string();
        std::thread::spawn(move || {
            crate::pg::connect(&url)
                .unwrap()
                .batch_execute(&sql)
                .unwrap()
        })
        .join()
        .unwrap();
    }

    fn count(c: &crate::Tx) -> StoreResult<i64> {
        c.cached_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
    }

    /// The statements of one `Store::read` see one state: a row committed elsewhere after
    /// the read's first statement and before its second is not seen by the second (each in
    /// a snapshot of its own would see it), and the next read sees it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_does_not_see_a_commit_made_between_its_statements() {
        let (url, store) = store_with_one_row().await;
        let pool = store.inner.async_reads.clone().unwrap();
        let writer_url = url.clone();
        let mut committed = false;
        let (before, after) = store
            .read(move |c| {
                let before = count(c)?;
                if !committed {
                    committed = true;
                    elsewhere(&writer_url, "INSERT INTO t VALUES (2)".into());
                }
                let after: i64 =
                    c.cached_row("SELECT COUNT(*) FROM t WHERE id > 0", [], |r| r.get(0))?;
                Ok((before, after))
            })
            .await
            .unwrap();
        assert_eq!((before, after), (1, 1), "one snapshot for both statements");
        assert_eq!(store.read(count).await.unwrap(), 2, "the next read sees it");
        assert_eq!(
            pool.sessions_opened(),
            1,
            "both on the asynchronous session"
        );
        store.close();
    }

    /// A snapshot whose session is ended between two of its statements fails with the
    /// store's error (running the rest on a new session would mix two snapshots), the loss
    /// is counted, and the next read opens a new session and answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_whose_session_ends_mid_read_fails_and_the_next_read_reconnects() {
        let (url, store) = store_with_one_row().await;
        let pool = store.inner.async_reads.clone().unwrap();
        let losses = store.inner.revive.as_ref().unwrap().losses.clone();
        let admin_url = url.clone();
        let mut ended = false;
        let err = store
            .read(move |c| {
                let pid: i32 = c.cached_row("SELECT pg_backend_pid()", [], |r| r.get(0))?;
                if !ended {
                    ended = true;
                    elsewhere(
                        &admin_url,
                        format!("SELECT pg_terminate_backend({pid}, 10000)"),
                    );
                }
                count(c)
            })
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Postgres(_) | StoreError::Unavailable(_)),
            "{err}"
        );
        assert!(!err.to_string().contains("first pass"), "{err}");
        assert!(losses.load(Ordering::Acquire) >= 1, "the loss is counted");
        assert_eq!(pool.sessions_opened(), 1);
        assert_eq!(store.read(count).await.unwrap(), 1);
        assert_eq!(pool.sessions_opened(), 2, "a new session");
        assert_eq!(pool.slots.available_permits(), 1, "no session held");
        store.close();
    }

    /// A column of a type the store does not read fails the read that reads it, with a
    /// message that says to cast it; the row's other columns read as ever (text beyond
    /// ASCII whole).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_column_of_another_type_is_an_error_only_when_read() {
        let (_url, store) = store_with_one_row().await;
        let sql = "SELECT CAST(id AS BIGINT), now(), 'tëxt ☃' FROM t";
        let (id, text) = store
            .read_one(move |c| {
                c.cached_row(sql, [], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(2)?))
                })
            })
            .await
            .unwrap();
        assert_eq!((id, text.as_str()), (1, "tëxt ☃"));
        let err = store
            .read_one(move |c| c.cached_row(sql, [], |r| r.get::<_, String>(1)))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cast it in the query"), "{err}");
        assert!(!err.to_string().contains("type Null"), "{err}");
        store.close();
    }

    /// A read of many statements, or one that runs a batch, moves to the blocking client
    /// and answers as it would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_read_or_a_batch_moves_to_a_synchronous_session() {
        let (_url, store) = store_with_one_row().await;
        let sum = store
            .read(|c| {
                let mut sum = 0;
                for i in 0..40i64 {
                    sum +=
                        c.cached_row("SELECT CAST(?1 AS BIGINT)", [i], |r| r.get::<_, i64>(0))?;
                }
                Ok(sum)
            })
            .await
            .unwrap();
        assert_eq!(sum, (0..40).sum::<i64>());
        let batch = store
            .read(|c| {
                let before = count(c)?;
                c.execute_batch("SELECT 1")?;
                Ok(before + count(c)?)
            })
            .await
            .unwrap();
        assert_eq!(batch, 2);
        store.close();
    }

    /// Statements a read names ahead (`Tx::ahead`) go out together, after the snapshot's
    /// `BEGIN` and in their order, even when the session has yet to prepare them: each sees
    /// the snapshot, each gets its own rows, and the closure runs once to name them and once
    /// to read them. Named after a statement already answered, they go out together next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_named_ahead_go_out_together_in_the_snapshot() {
        let (_url, store) = store_with_one_row().await;
        let sql = ["a", "b", "c"].map(|name| {
            format!(
                "SELECT current_setting('transaction_isolation') || ' {name}' || CAST(?1 AS TEXT)"
            )
        });
        let passes = Arc::new(AtomicUsize::new(0));
        for first_alone in [false, true] {
            let (sql, counted) = (sql.clone(), passes.clone());
            counted.store(0, Ordering::Relaxed);
            let got = store
                .read(move |c| {
                    counted.fetch_add(1, Ordering::Relaxed);
                    let before = if first_alone { count(c)? } else { 1 };
                    let args: [[i64; 1]; 3] = [[1], [2], [3]];
                    let refs = args
                        .each_ref()
                        .map(|[a]| [a as &dyn rusqlite::types::ToSql]);
                    let named: Vec<(&str, &[&dyn rusqlite::types::ToSql])> = sql
                        .iter()
                        .zip(&refs)
                        .map(|(sql, refs)| (sql.as_str(), &refs[..]))
                        .collect();
                    c.ahead(&named)?;
                    let mut got = vec![before.to_string()];
                    for (sql, arg) in sql.iter().zip(args) {
                        got.push(c.cached_row(sql, arg, |r| r.get::<_, String>(0))?);
                    }
                    Ok(got)
                })
                .await
                .unwrap();
            assert_eq!(
                got,
                [
                    "1",
                    "repeatable read a1",
                    "repeatable read b2",
                    "repeatable read c3"
                ]
            );
            let expected = if first_alone { 3 } else { 2 };
            assert_eq!(
                passes.load(Ordering::Relaxed),
                expected,
                "first alone: {first_alone}"
            );
        }
        store.close();
    }

    /// A pipeline with its workflows and steps is read in one round trip on the asynchronous
    /// client, rendered as the typed read renders it; a pipeline that is not there is still
    /// not found.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pipeline_with_its_steps_is_one_round_trip() {
        use crate::pipelines::{self, NewWorkflow, Pipeline};
        let (_url, store) = store_with_one_row().await;
        let workflow = |name: &str, steps: &[&str]| NewWorkflow {
            name: name.into(),
            state: woodlark_pipeline::status::Status::Pending,
            environ: Default::default(),
            sealed_payload: String::new(),
            steps: steps
                .iter()
                .map(|s| (s.to_string(), "commands".into()))
                .collect(),
        };
        let workflows = [
            workflow("build", &["clone", "test"]),
            workflow("lint", &["clone", "run", "x"]),
        ];
        let number = store
            .write(move |c| {
                let number = pipelines::take_next_number(c, 7)?;
                pipelines::create(c, 7, number, &Pipeline::default(), &workflows, &[])?;
                Ok(number)
            })
            .await
            .unwrap();
        let passes = Arc::new(AtomicUsize::new(0));
        let counted = passes.clone();
        let json = store
            .read(move |c| {
                counted.fetch_add(1, Ordering::Relaxed);
                pipelines::full_json(c, 7, number)
            })
            .await
            .unwrap();
        assert_eq!(passes.load(Ordering::Relaxed), 2, "one round trip");
        let typed = store
            .read(move |c| pipelines::full(c, 7, number))
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json, serde_json::to_value(typed.pipeline).unwrap());
        assert_eq!(json["workflows"][1]["children"][2]["name"], "x");
        let missing = store.read(|c| pipelines::full_json(c, 7, 99)).await;
        assert!(matches!(missing, Err(StoreError::NotFound)), "{missing:?}");
        store.close();
    }

    /// A closure that runs other statements given the same rows is refused, not answered
    /// with another statement's rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_that_changes_its_statements_when_run_again_is_an_error() {
        let (_url, store) = store_with_one_row().await;
        let mut runs = 0;
        let err = store
            .read(move |c| {
                runs += 1;
                let sql = if runs == 1 { "SELECT 1" } else { "SELECT 2" };
                c.cached_row(sql, [], |r| r.get::<_, i32>(0))
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("other statements"), "{err}");
        // The session went back to the pool, usable.
        assert_eq!(store.read(count).await.unwrap(), 1);
        store.close();
    }
}
