//! One-statement reads on the asynchronous PostgreSQL client, on the caller's runtime.
//!
//! The synchronous client runs each call on a runtime of its own, so a read through it is a
//! hop to the blocking pool, a `block_on` there, the socket, and the way back: measured, that
//! was about a third of the CPU a PostgreSQL cache miss costs (`docs/benchmarks.md`, issue 50's
//! second round). [`AsyncReaders`] keeps a few `tokio-postgres` sessions instead, their I/O a
//! task on the runtime that opened them, each with its prepared statements, and runs one
//! statement on a free one. `Store::read_one` sends its closure's statement here and maps the
//! rows it gets back with the closure itself ([`crate::sql::Deferred`]), so each read's row
//! mapping stays the one the synchronous path uses.
//!
//! Sessions are opened on first use, not with the store (which may be opened off any
//! runtime). A session the server closed (a restart, a proxy's idle timeout, a runtime that
//! ended and took its I/O task along) is found closed or fails its statement: the read then
//! runs once more on a new session, as the synchronous readers do, and the loss is counted
//! so the store's other sessions check theirs before their next use.
//!
//! A session cut without a word (a peer gone from the network, no reset) would leave its read
//! waiting for ever, holding one of the pool's sessions. So a read waits at most
//! [`READ_TIMEOUT`] for its answer; past it, the read fails with the store's `Unavailable`,
//! the session is dropped (and counted lost), and the next read opens a new one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::types::Value;
use tokio::sync::Semaphore;

use crate::sql::{PgBind, dollar_placeholders, pg_row_values};
use crate::{StoreError, StoreResult};

/// How long a one-statement read waits for the database's answer: far past any such read
/// (indexed look-ups and bounded pages, answered in milliseconds), short enough that a dead
/// session does not hold a request for minutes.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A small pool of asynchronous sessions for one-statement reads.
pub(crate) struct AsyncReaders {
    url: String,
    /// One permit per session the pool may hold open.
    slots: Semaphore,
    /// Sessions not in use (fewer than the permits until every one has been needed).
    idle: Mutex<Vec<AsyncSession>>,
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
    statements: HashMap<String, tokio_postgres::Statement>,
}

impl AsyncReaders {
    /// A pool of at most `size` sessions to `url` (opened when first needed).
    pub(crate) fn new(url: &str, size: usize, losses: Option<Arc<AtomicU64>>) -> AsyncReaders {
        AsyncReaders {
            url: url.to_string(),
            slots: Semaphore::new(size.max(1)),
            idle: Mutex::default(),
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

    /// Runs `sql` (SQLite's `?N` placeholders, as the store writes it) with `binds` and
    /// returns its rows as values. A statement that finds its session lost runs once more on
    /// a new one; any other error is the read's.
    pub(crate) async fn query(&self, sql: &str, binds: &[PgBind]) -> StoreResult<Vec<Vec<Value>>> {
        let _permit = self.slots.acquire().await.map_err(|_| StoreError::Closed)?;
        let mut session = match self.take_idle() {
            Some(session) => session,
            None => self.open().await?,
        };
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = binds
            .iter()
            .map(|b| b as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        let mut result = self.answered(&mut session, sql, &refs).await?;
        if let Err(e) = &result
            && (session.client.is_closed() || e.ends_session())
        {
            self.lost();
            tracing::info!(error = %e, "a lost asynchronous PostgreSQL reader session is replaced");
            session = self.open().await?;
            result = self.answered(&mut session, sql, &refs).await?;
        }
        if !session.client.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(session);
        }
        result
    }

    /// `session`'s answer to `sql`; `Err` (the session then dropped and counted lost) when
    /// none came within [`READ_TIMEOUT`].
    async fn answered(
        &self,
        session: &mut AsyncSession,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<StoreResult<Vec<Vec<Value>>>> {
        match tokio::time::timeout(self.answer_within, session.query(sql, params)).await {
            Ok(result) => Ok(result),
            Err(_) => {
                self.lost();
                tracing::warn!(
                    timeout_ms = self.answer_within.as_millis() as u64,
                    "a PostgreSQL read got no answer in time; its session is dropped"
                );
                Err(StoreError::Unavailable(format!(
                    "the database did not answer a read within {} ms",
                    self.answer_within.as_millis()
                )))
            }
        }
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
            statements: HashMap::new(),
        })
    }

    fn lost(&self) {
        if let Some(losses) = &self.losses {
            losses.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl AsyncSession {
    /// `sql`'s rows, the statement prepared once per session.
    async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> StoreResult<Vec<Vec<Value>>> {
        let statement = match self.statements.get(sql) {
            Some(statement) => statement.clone(),
            None => {
                let statement = self.client.prepare(&dollar_placeholders(sql)).await?;
                self.statements.insert(sql.to_owned(), statement.clone());
                statement
            }
        };
        let rows = self.client.query(&statement, params).await?;
        rows.iter().map(pg_row_values).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::testing::Cluster;

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
        let idle = pool.idle.lock().unwrap();
        assert_eq!(idle.len(), 1);
        assert_eq!(idle[0].statements.len(), 1);
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
        assert_eq!(pool.slots.available_permits(), 2);
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
}
