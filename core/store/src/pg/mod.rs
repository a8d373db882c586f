//! PostgreSQL, the store several server replicas share (issue 36), built in slices.
//!
//! This slice holds what the rest stands on, each tested against a real server:
//! - [`connect`]: a `postgres://user:pass@host:port/db?sslmode=…` URL to a client, over TLS
//!   as libpq's `sslmode` asks ([`tls`]);
//! - [`schema`]: numbered migrations run once when several replicas start together (a
//!   session advisory lock, a version table);
//! - [`outbox`]: the event outbox with ids that increase in **commit order**, so that a
//!   reader paging with `starting_after` on any replica never skips an event committed later
//!   with a smaller id (the trap of an outbox keyed by a plain sequence: a sequence hands out
//!   numbers in the order transactions ask, and they commit in another).
//!
//! The blocking client runs a small runtime of its own for each connection, so it is used
//! from the store's own threads (its writer, `spawn_blocking`), never on a runtime worker.
//! One-statement reads (`Store::read_one`) use the asynchronous client instead, on the
//! caller's runtime ([`reads`]).

#[cfg(test)]
mod outages;
pub mod outbox;
pub(crate) mod reads;
pub mod schema;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod tls;
pub mod transfer;

use std::str::FromStr;

/// Errors from PostgreSQL, with what was being done. The client's error is part of the
/// message (with its causes), not a separate `source`: printed as a chain, it would be said
/// twice.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("storage.url: {0}")]
    Url(String),
    #[error("cannot connect to PostgreSQL at {target}: {}", with_causes(cause))]
    Connect {
        target: String,
        cause: postgres::Error,
    },
    #[error("PostgreSQL: {what}: {}", describe(cause))]
    Query {
        what: &'static str,
        cause: postgres::Error,
    },
    #[error("PostgreSQL migration {version} failed: {}", describe(cause))]
    Migration {
        version: i64,
        cause: postgres::Error,
    },
    #[error(
        "the database is at schema version {found}, newer than this build knows ({known}): \
         upgrade this replica"
    )]
    NewerSchema { found: i64, known: i64 },
}

impl PgError {
    /// A closure mapping a client error to [`PgError::Query`] naming `what`.
    pub fn query(what: &'static str) -> impl FnOnce(postgres::Error) -> PgError {
        move |cause| PgError::Query { what, cause }
    }
}

/// The `application_name` of a store's change listener, the session that holds the leader
/// lock on the leading replica: how an operator (or a test) tells it in `pg_stat_activity`.
pub const LISTENER_NAME: &str = "woodlark-listener";

/// Connects to the database `url` names (`postgres://` or `postgresql://`), over TLS as its
/// `sslmode` asks ([`tls`]: libpq's modes and certificate parameters).
pub fn connect(url: &str) -> Result<postgres::Client, PgError> {
    connect_with(url, None)
}

/// [`connect`], the session named `application_name` unless `url` names it.
pub fn connect_named(url: &str, application_name: &str) -> Result<postgres::Client, PgError> {
    connect_with(url, Some(application_name))
}

fn connect_with(url: &str, name: Option<&str>) -> Result<postgres::Client, PgError> {
    let (config, tls) = config_of(url, name)?;
    let config = postgres::Config::from(config);
    config
        .connect(tls.connector()?)
        .map_err(|cause| PgError::Connect {
            target: target_of(&config),
            cause,
        })
}

/// [`connect`] for the asynchronous client, on the calling runtime: the session's I/O runs
/// as a task spawned there, which ends when the returned client is dropped (or the server
/// closes the session, which the client then reports as closed).
pub async fn connect_async(url: &str) -> Result<tokio_postgres::Client, PgError> {
    let (config, tls) = config_of(url, None)?;
    let (client, connection) =
        config
            .connect(tls.connector()?)
            .await
            .map_err(|cause| PgError::Connect {
                target: target_of(&postgres::Config::from(config.clone())),
                cause,
            })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            // The client sees the session closed and says so to its next caller.
            tracing::debug!(error = %describe(&e), "an asynchronous PostgreSQL session ended");
        }
    });
    Ok(client)
}

/// The client settings and the TLS options of `url` (the part of the URL the client reads,
/// and the `sslmode` and certificate parameters [`tls`] reads), with `application_name`
/// set to `name` unless the URL names one: one reading of a URL for both clients.
fn config_of(
    url: &str,
    name: Option<&str>,
) -> Result<(tokio_postgres::Config, tls::TlsOptions), PgError> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(PgError::Url(
            "expected postgres://user:password@host:port/database".into(),
        ));
    }
    let (rest, tls) = tls::TlsOptions::split(url)?;
    let mut config =
        tokio_postgres::Config::from_str(&rest).map_err(|e| PgError::Url(e.to_string()))?;
    if let Some(name) = name
        && config.get_application_name().is_none()
    {
        config.application_name(name);
    }
    Ok((config, tls))
}

/// Opens one session to `url`, asks `SELECT 1` and closes it: whether the database accepts
/// work now (`woodlark serve` waits for it at start-up). The connect gives up after
/// `timeout`, unless the URL's own `connect_timeout` says otherwise.
pub fn probe(url: &str, timeout: std::time::Duration) -> Result<(), PgError> {
    let (rest, _) = tls::TlsOptions::split(url)?;
    let config = postgres::Config::from_str(&rest).map_err(|e| PgError::Url(e.to_string()))?;
    let url = if config.get_connect_timeout().is_some() {
        url.to_string()
    } else {
        // A parameter of its own, appended: the rest of the URL is passed on untouched.
        let secs = timeout.as_secs().max(1);
        let joiner = if url.contains('?') { '&' } else { '?' };
        format!("{url}{joiner}connect_timeout={secs}")
    };
    let mut client = connect(&url)?;
    client
        .batch_execute("SELECT 1")
        .map_err(PgError::query("probe the database"))
}

/// Where `url` points, for logs and messages: hosts, ports and database, never the
/// password (`storage.url` when it cannot be read).
pub fn target(url: &str) -> String {
    tls::TlsOptions::split(url)
        .ok()
        .and_then(|(rest, _)| postgres::Config::from_str(&rest).ok())
        .map(|config| target_of(&config))
        .unwrap_or_else(|| "storage.url".into())
}

impl PgError {
    /// Whether waiting may help: the server does not answer yet, is starting up or shutting
    /// down, cut the session, or has no connection slot free. A bad URL, a refused sign-in,
    /// a missing database or a failed TLS handshake stay as they are: no wait mends them.
    pub fn is_transient(&self) -> bool {
        let cause = match self {
            PgError::Connect { cause, .. } | PgError::Query { cause, .. } => cause,
            _ => return false,
        };
        if let Some(db) = cause.as_db_error() {
            let code = db.code().code();
            // 57P01-03: admin shutdown, crash shutdown, cannot connect now (starting up);
            // 53300: too many connections; 08xxx: connection exceptions.
            return matches!(code, "57P01" | "57P02" | "57P03" | "53300") || code.starts_with("08");
        }
        if cause.is_closed() {
            return true;
        }
        // Refused, reset, unreachable, timed out, a name that does not resolve yet: the
        // client's I/O errors, except a TLS handshake's (a certificate problem).
        let io = std::error::Error::source(cause).is_some_and(|s| s.is::<std::io::Error>());
        io && cause.to_string() != "error performing TLS handshake"
    }
}

/// A client error on one line, for messages and logs (its own text is only "db error"): a
/// server error's severity, message and SQLSTATE, but not its DETAIL, which can quote a
/// row's values; any other error with its causes.
pub fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => with_causes(error),
    }
}

/// An error and what caused it, on one line: the client's own message for a failed TLS
/// handshake is only "error performing TLS handshake", the certificate problem is its cause.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        cause = next.source();
    }
    line
}

/// Where a config points, for errors: hosts and database, never the password.
fn target_of(config: &postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            postgres::config::Host::Unix(path) => format!("{}:{port}", path.display()),
        })
        .collect();
    format!(
        "{}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two stores on one database, as two replicas: a change committed through one moves the
    /// other's generation for that domain (its caches miss) and wakes its outbox readers;
    /// the writer's own generation has moved before its caller hears of the commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replicas_hear_each_others_changes() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions::default();
        let a = crate::Store::open_postgres(&url, &options).unwrap();
        let b = crate::Store::open_postgres(&url, &options).unwrap();
        let (a0, b0) = (a.identity_generation(), b.identity_generation());
        let mut b_commits = b.commits();
        b_commits.borrow_and_update();
        a.write(|c| {
            c.execute(
                "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///x', '{}', 's')",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();
        assert!(a.identity_generation() > a0, "the writer's own change");
        tokio::time::timeout(std::time::Duration::from_secs(5), b_commits.changed())
            .await
            .expect("replica b heard of the commit")
            .unwrap();
        assert!(b.identity_generation() > b0, "the other replica's change");
        // Counted apart as another replica's: by b, not by a, whose own change it was.
        assert_eq!(b.generation_elsewhere(crate::Domain::Identity), 1);
        assert_eq!(a.generation_elsewhere(crate::Domain::Identity), 0);
        assert_eq!(b.generation(crate::Domain::Pipelines), 0);
        let forges: i64 = b
            .read(|c| c.query_row("SELECT count(*) FROM forges", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(forges, 1);
        a.close();
        b.close();
    }

    /// Waits until exactly one of `stores` leads; returns its index.
    async fn the_leader(stores: &[&crate::Store]) -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let leading: Vec<usize> = (0..stores.len())
                .filter(|i| *stores[*i].leadership().borrow())
                .collect();
            if leading.len() == 1 {
                return leading[0];
            }
            assert!(leading.len() < 2, "two leaders at once");
            assert!(std::time::Instant::now() < deadline, "no leader");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// One of several replicas leads; when it stops, another takes over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_replica_leads_and_another_takes_over_when_it_stops() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions::default();
        let stores: Vec<crate::Store> = (0..3)
            .map(|_| crate::Store::open_postgres(&url, &options).unwrap())
            .collect();
        let first = the_leader(&stores.iter().collect::<Vec<_>>()).await;
        // Still one a moment later (nobody else took the lock meanwhile).
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        assert_eq!(the_leader(&stores.iter().collect::<Vec<_>>()).await, first);
        stores[first].close();
        let rest: Vec<&crate::Store> = (0..3).filter(|i| *i != first).map(|i| &stores[i]).collect();
        the_leader(&rest).await;
        for store in rest {
            store.close();
        }
    }

    /// A store that does not compete for the lead (a server's logs' store) never takes the
    /// lock, even opened first and alone: the main store opened after it leads at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_that_does_not_compete_never_takes_the_lead() {
        let url = testing::Cluster::shared().fresh_database();
        let logs = crate::StoreOptions {
            competes_for_lead: false,
            ..crate::StoreOptions::default()
        };
        let logs = crate::Store::open_postgres(&url, &logs).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        assert!(!*logs.leadership().borrow(), "the logs' store leads");
        let main = crate::Store::open_postgres(&url, &crate::StoreOptions::default()).unwrap();
        assert_eq!(the_leader(&[&logs, &main]).await, 1);
        main.close();
        logs.close();
    }

    /// A listener whose session is cut reconnects: every generation moves (notifications
    /// may have been missed), other replicas' changes are heard again, and a leader is back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_listener_that_loses_its_session_reconnects() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions::default();
        let a = crate::Store::open_postgres(&url, &options).unwrap();
        let b = crate::Store::open_postgres(&url, &options).unwrap();
        the_leader(&[&a, &b]).await;
        let (a0, b0) = (a.identity_generation(), b.identity_generation());
        // Both listeners' sessions, by their name.
        let cut = url.clone();
        let killed: i64 = std::thread::spawn(move || {
            let mut admin = connect(&cut).unwrap();
            admin
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name = $1 AND datname = current_database()",
                    &[&LISTENER_NAME],
                )
                .unwrap()
                .get(0)
        })
        .join()
        .unwrap();
        assert_eq!(killed, 2);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while a.identity_generation() == a0 || b.identity_generation() == b0 {
            assert!(std::time::Instant::now() < deadline, "no reconnect");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        the_leader(&[&a, &b]).await;
        let mut b_commits = b.commits();
        b_commits.borrow_and_update();
        a.write(|c| {
            c.execute(
                "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///y', '{}', 's')",
                [],
            )?;
            Ok(())
        })
        .await
        .unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), b_commits.changed())
            .await
            .expect("b hears a's change on its new session")
            .unwrap();
        a.close();
        b.close();
    }

    /// Every write transaction holds the outbox lock from its start, events or not, and
    /// keeps it past a job rolled back to its savepoint: replicas' writes run one at a
    /// time, so they never deadlock on row locks taken in opposite orders.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_write_transaction_holds_the_outbox_lock() {
        use crate::events::{self, Action, Owner};
        let url = testing::Cluster::shared().fresh_database();
        let store = crate::Store::open_postgres(&url, &crate::StoreOptions::default()).unwrap();
        let held = |c: &crate::Tx| -> crate::StoreResult<i64> {
            c.query_row(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                 AND pid = pg_backend_pid() AND granted",
                [],
                |r| r.get(0),
            )
        };
        let event = |c: &crate::WriteTx, id: &str| {
            events::append(
                c,
                events::RecordType::Users,
                Action::Created,
                id,
                &serde_json::json!({}),
                Owner::default(),
            )
        };
        // The first job keeps the writer busy, so the next three are one batch.
        let blocker = store.submit(|_| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            Ok(())
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let failed = store.submit(move |c| -> crate::StoreResult<()> {
            event(c, "a")?;
            Err(crate::StoreError::Conflict("rolled back".into()))
        });
        let second = store.submit(move |c| {
            let before = held(c)?;
            event(c, "b")?;
            let after = held(c)?;
            event(c, "c")?;
            Ok((before, after, held(c)?))
        });
        blocker.await.unwrap();
        assert!(failed.await.is_err());
        let (before, after, still) = second.await.unwrap();
        assert_eq!(
            (before, after, still),
            (1, 1, 1),
            "held before an event, and after"
        );
        let ids: Vec<String> = store
            .read(|c| {
                c.query_map_for_tests("SELECT record_id FROM events ORDER BY seq", [], |r| {
                    r.get(0)
                })
            })
            .await
            .unwrap();
        assert_eq!(ids, ["b", "c"]);
        store.close();
    }

    /// The writer holds a job's events back and records them in one statement as the job
    /// ends: ids follow the order of recording across the jobs of one batch, and a job whose
    /// events cannot be recorded is rolled back whole and answered with the error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_jobs_events_are_recorded_as_it_ends_in_order_or_not_at_all() {
        use crate::events::{self, Action, Owner};
        let url = testing::Cluster::shared().fresh_database();
        let store = crate::Store::open_postgres(&url, &crate::StoreOptions::default()).unwrap();
        fn event(c: &crate::WriteTx, id: String) -> crate::StoreResult<()> {
            events::append(
                c,
                events::RecordType::Users,
                Action::Created,
                id,
                &serde_json::json!({}),
                Owner::default(),
            )
        }
        let blocker = store.submit(|_| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            Ok(())
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let jobs: Vec<_> = (0..3)
            .map(|j| {
                store.submit(move |c| {
                    for e in 0..2 {
                        event(c, format!("{j}.{e}"))?;
                    }
                    // Not in the table yet: held for the job's end.
                    c.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
                })
            })
            .collect();
        // Its events cannot be recorded (the table is gone by then): nothing of it stays.
        let broken = store.submit(|c| {
            c.execute_batch(
                "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///x', '{}', 's')",
            )?;
            event(c, "broken".into())?;
            c.execute_batch("ALTER TABLE events RENAME TO events_elsewhere")
        });
        let after = store.submit(move |c| event(c, "after".into()));
        blocker.await.unwrap();
        let seen: Vec<i64> = futures_join_all(jobs.into_iter()).await;
        assert_eq!(
            seen,
            [0, 2, 4],
            "each job saw only the jobs before it recorded"
        );
        let err = broken
            .await
            .expect_err("answered with the error")
            .to_string();
        assert!(err.contains("events"), "{err}");
        after.await.unwrap();
        let (ids, forges): (Vec<String>, i64) = store
            .read(|c| {
                let ids =
                    c.query_map_for_tests("SELECT record_id FROM events ORDER BY seq", [], |r| {
                        r.get(0)
                    })?;
                let forges = c.query_row("SELECT count(*) FROM forges", [], |r| r.get(0))?;
                Ok((ids, forges))
            })
            .await
            .unwrap();
        assert_eq!(ids, ["0.0", "0.1", "1.0", "1.1", "2.0", "2.1", "after"]);
        assert_eq!(forges, 0, "the broken job's forge was rolled back");
        store.close();
    }

    /// Every session of the store cut at once, as a database restart or failover does:
    /// the next reads and writes go through on new sessions, whether or not the listener
    /// has noticed first, and the store hears other replicas' changes again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sessions_the_database_closed_are_replaced() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions {
            readers: 2,
            ..crate::StoreOptions::default()
        };
        let store = crate::Store::open_postgres(&url, &options).unwrap();
        store
            .write(|c| c.execute_batch("CREATE TABLE t (v BIGINT)"))
            .await
            .unwrap();
        let count =
            |c: &crate::Tx| c.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0));
        let cut = || {
            let url = url.clone();
            std::thread::spawn(move || {
                let cut: i64 = connect(&url)
                    .unwrap()
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE datname = current_database() AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .unwrap()
                    .get(0);
                cut
            })
            .join()
            .unwrap()
        };
        for round in 0..3 {
            // The first time the writer, the listener and both readers; later whichever
            // have been replaced by then.
            let sessions = cut();
            assert!(round > 0 || sessions == 4, "{sessions} sessions");
            if round == 1 {
                // The listener notices first and every session is checked before use.
                tokio::time::sleep(std::time::Duration::from_millis(600)).await;
            }
            // Straight after the cut: each finds its own session lost.
            store
                .write(move |c| c.execute("INSERT INTO t (v) VALUES (?1)", [round]))
                .await
                .unwrap_or_else(|e| panic!("round {round}: write: {e}"));
            for _ in 0..3 {
                store
                    .read(count)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: read: {e}"));
            }
            store
                .read_one(count)
                .await
                .unwrap_or_else(|e| panic!("round {round}: read_one: {e}"));
        }
        assert_eq!(store.read(count).await.unwrap(), 3);
        // Another replica's change is heard again (the listener reconnected).
        let other = crate::Store::open_postgres(&url, &options).unwrap();
        let before = store.generation_elsewhere(crate::Domain::Identity);
        other
            .write(|c| {
                c.execute_batch(
                    "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///x', '{}', 's')",
                )
            })
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while store.generation_elsewhere(crate::Domain::Identity) == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the change was not heard"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        other.close();
        store.close();
    }

    /// Another replica that commits without a pause is heard commit by commit, not once it
    /// stops: live views here follow it as it goes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_committing_without_pause_is_heard_while_it_does() {
        let url = testing::Cluster::shared().fresh_database();
        let store = crate::Store::open_postgres(&url, &crate::StoreOptions::default()).unwrap();
        let mut commits = store.commits();
        commits.borrow_and_update();
        let before = store.generation_elsewhere(crate::Domain::Settings);
        let busy = {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut other = connect(&url).unwrap();
                // What a commit to `meta` makes its trigger send, every 20 ms for 3 s.
                let notify = format!("SELECT pg_notify('{}', 'meta')", schema::NOTIFY_CHANNEL);
                for _ in 0..150 {
                    other.batch_execute(&notify).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            })
        };
        let mut wakes = 0;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(2) {
            tokio::time::timeout(std::time::Duration::from_secs(1), commits.changed())
                .await
                .expect("heard within a second while the other replica goes on")
                .unwrap();
            wakes += 1;
        }
        assert!(wakes >= 10, "{wakes} wake-ups in 2 s");
        assert!(store.generation_elsewhere(crate::Domain::Settings) > before);
        busy.join().unwrap();
        store.close();
    }

    /// Another replica's commit counts for the queue only when a task became pending: not
    /// for a task that waits for others, nor for a lease renewed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_task_becoming_pending_is_heard_as_queue_work() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions::default();
        let (here, other) = (
            crate::Store::open_postgres(&url, &options).unwrap(),
            crate::Store::open_postgres(&url, &options).unwrap(),
        );
        let queue = || here.generation_elsewhere(crate::Domain::Queue);
        // Runs `sql` on the other replica, then a settings change, and waits until this one
        // has heard that: notifications arrive in commit order, so the first was heard too.
        async fn commit(here: &crate::Store, other: &crate::Store, sql: &'static str) {
            let before = here.generation_elsewhere(crate::Domain::Settings);
            other.write(move |c| c.execute_batch(sql)).await.unwrap();
            other
                .write(move |c| crate::meta::set(c, "test-mark", sql))
                .await
                .unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while here.generation_elsewhere(crate::Domain::Settings) == before {
                assert!(std::time::Instant::now() < deadline, "not heard");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
        let commit = |sql| commit(&here, &other, sql);
        let start = queue();
        commit("INSERT INTO tasks (id, pipeline_id, repo_id, state, created) VALUES (1, 1, 1, 'waiting', 0)").await;
        assert_eq!(queue(), start, "a waiting task");
        commit("UPDATE tasks SET state = 'pending' WHERE id = 1").await;
        let released = queue();
        assert!(released > start, "a task released");
        commit("UPDATE tasks SET state = 'running', agent_id = 7, lease_until = 100 WHERE id = 1")
            .await;
        commit("UPDATE tasks SET lease_until = 200 WHERE id = 1").await;
        assert_eq!(queue(), released, "a lease taken and renewed");
        commit("UPDATE tasks SET state = 'pending', agent_id = 0 WHERE id = 1").await;
        let requeued = queue();
        assert!(requeued > released, "a lease run out");
        commit("INSERT INTO tasks (id, pipeline_id, repo_id, state, created) VALUES (2, 1, 1, 'pending', 0)").await;
        assert!(queue() > requeued, "a task queued");
        here.close();
        other.close();
    }

    /// A server error reads as what went wrong, not "db error", and without the row values
    /// its DETAIL quotes.
    #[test]
    fn a_server_error_is_described_without_the_values_it_quotes() {
        let url = testing::Cluster::shared().fresh_database();
        let mut client = connect(&url).unwrap();
        client
            .batch_execute(
                "CREATE TABLE u (login TEXT UNIQUE); INSERT INTO u VALUES ('hidden-login')",
            )
            .unwrap();
        let err = client
            .execute("INSERT INTO u VALUES ('hidden-login')", &[])
            .unwrap_err();
        let detail = err.as_db_error().and_then(|db| db.detail()).unwrap();
        assert!(detail.contains("hidden-login"), "{detail}");
        let text = crate::StoreError::from(err).to_string();
        assert!(
            text.contains("ERROR: duplicate key value violates unique constraint \"u_login_key\"")
                && text.contains("SQLSTATE 23505"),
            "{text}"
        );
        assert!(!text.contains("hidden-login"), "{text}");
    }

    /// A one-statement read is the first to hear of a cut (it sends nothing before its
    /// statement): it runs again on a new session rather than failing its caller.
    #[tokio::test]
    async fn a_one_statement_read_on_a_cut_session_runs_again_on_a_new_one() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions {
            readers: 1,
            ..crate::StoreOptions::default()
        };
        let store = crate::Store::open_postgres(&url, &options).unwrap();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let read = || {
            let calls = calls.clone();
            store.read_one(move |c| {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                c.query_row("SELECT 7", [], |r| r.get::<_, i32>(0))
            })
        };
        assert_eq!(read().await.unwrap(), 7);
        let reader_pid = |url: &str| {
            let url = url.to_string();
            std::thread::spawn(move || {
                connect(&url)
                    .unwrap()
                    .execute(
                        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity \
                         WHERE datname = current_database() AND pid <> pg_backend_pid() \
                         AND query = 'SELECT 7'",
                        &[],
                    )
                    .unwrap()
            })
            .join()
            .unwrap()
        };
        for round in 0..3 {
            // Only the reader's session (its last statement names it); nothing else hears of
            // the cut before the read. Waited for: a backend ends some time after it is told
            // to, and a read sent meanwhile gets its FATAL error before its socket closes.
            assert_eq!(reader_pid(&url), 1, "round {round}");
            let before = calls.load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(
                read()
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: {e}")),
                7
            );
            assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst) - before, 2);
        }
        store.close();
    }

    /// Tells PostgreSQL to end the backend of the session `store`'s next one-statement read
    /// runs on, from a session of its own; waits up to `wait_ms` for it to end (0: not at all).
    async fn end_the_reader(store: &crate::Store, url: &str, wait_ms: i64) {
        let pid: i32 = store
            .read_one(|c| c.query_row("SELECT pg_backend_pid()", [], |r| r.get(0)))
            .await
            .unwrap();
        let url = url.to_string();
        std::thread::spawn(move || {
            let mut client = connect(&url).unwrap();
            if wait_ms > 0 {
                client.execute("SELECT pg_terminate_backend($1, $2)", &[&pid, &wait_ms])
            } else {
                client.execute("SELECT pg_terminate_backend($1)", &[&pid])
            }
            .unwrap()
        })
        .join()
        .unwrap();
    }

    /// A session PostgreSQL says goodbye to (`pg_terminate_backend`, or a fast stop: each
    /// session gets `FATAL 57P01` before its socket closes) is lost at once: a read sent
    /// right after the goodbye, which may get the FATAL error before the client sees the
    /// socket close, runs again on a new session, one statement or a snapshot alike.
    #[tokio::test]
    async fn a_read_that_gets_the_servers_goodbye_runs_again_on_a_new_session() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions {
            readers: 1,
            ..crate::StoreOptions::default()
        };
        let store = crate::Store::open_postgres(&url, &options).unwrap();
        // The one reader's backend is told to end, not waited for.
        let say_goodbye = || end_the_reader(&store, &url, 0);
        for round in 0..12 {
            say_goodbye().await;
            let one = store
                .read_one(|c| c.query_row("SELECT 7", [], |r| r.get::<_, i32>(0)))
                .await
                .unwrap_or_else(|e| panic!("round {round}, one statement: {e}"));
            assert_eq!(one, 7);
            say_goodbye().await;
            let snapshot = store
                .read(|c| c.query_row("SELECT 7", [], |r| r.get::<_, i32>(0)))
                .await
                .unwrap_or_else(|e| panic!("round {round}, snapshot: {e}"));
            assert_eq!(snapshot, 7);
        }
        store.close();
    }

    /// On the server's runtime (multi-threaded) a read runs on the asynchronous client:
    /// its rows read exactly as the blocking client's do (the same
    /// mapping code), a read of no row or of no statement answers as before, a second
    /// statement is still refused, and a session the server says goodbye to is replaced,
    /// the read running once more there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_statement_reads_run_on_the_asynchronous_client_and_survive_a_goodbye() {
        use crate::OptionalExtension;
        type Line = (i64, Option<String>, bool, Option<f64>, Option<Vec<u8>>);
        fn lines(c: &crate::Tx) -> crate::StoreResult<Vec<Line>> {
            Ok(c.prepare_cached(
                "SELECT id, name, flag, score, data FROM t WHERE id >= ?1 ORDER BY id",
            )?
            .query_map([1], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<Result<_, _>>()?)
        }
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions {
            readers: 1,
            ..crate::StoreOptions::default()
        };
        let store = crate::Store::open_postgres(&url, &options).unwrap();
        store
            .write(|c| {
                c.execute_batch(
                    "CREATE TABLE t (id BIGINT PRIMARY KEY, name TEXT, flag BOOLEAN, \
                     score DOUBLE PRECISION, data BYTEA); \
                     INSERT INTO t VALUES (1, 'one', true, 1.5, '\\x0102'), \
                     (2, NULL, false, NULL, NULL)",
                )
            })
            .await
            .unwrap();
        let pool = store.inner.async_reads.clone().unwrap();
        let expected: Vec<Line> = vec![
            (1, Some("one".into()), true, Some(1.5), Some(vec![1, 2])),
            (2, None, false, None, None),
        ];
        assert_eq!(store.read(lines).await.unwrap(), expected);
        assert_eq!(pool.sessions_opened(), 1, "a snapshot read runs there too");
        assert_eq!(store.read_one(lines).await.unwrap(), expected);
        assert_eq!(
            pool.sessions_opened(),
            2,
            "one statement on a session the one-statement reads share"
        );
        assert_eq!(store.read_one(lines).await.unwrap(), expected);
        assert_eq!(pool.sessions_opened(), 2, "the same shared session again");
        let none = store
            .read_one(|c| {
                c.cached_row("SELECT name FROM t WHERE id = ?1", [99], |r| {
                    r.get::<_, String>(0)
                })
                .optional()
            })
            .await
            .unwrap();
        assert_eq!(none, None);
        assert_eq!(store.read_one(|_| Ok(5)).await.unwrap(), 5);
        let second = store
            .read_one(|c| {
                lines(c)?;
                lines(c)
            })
            .await
            .unwrap_err();
        assert!(second.to_string().contains("second statement"), "{second}");

        for round in 0..6 {
            end_the_reader(&store, &url, 10_000).await;
            let read = store
                .read_one(lines)
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(read, expected, "round {round}");
            assert_eq!(pool.sessions_opened(), round + 3, "round {round}");
        }
        store.close();
    }

    /// Taking a pipeline number holds the repository's row until the transaction ends
    /// (one statement: the lock is a sub-select), so replicas take numbers one at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn taking_a_number_holds_the_repository_row_until_commit() {
        let url = testing::Cluster::shared().fresh_database();
        let store = crate::Store::open_postgres(&url, &crate::StoreOptions::default()).unwrap();
        store
            .write(|c| {
                c.execute_batch(
                    "INSERT INTO forges (id, type, url, data, webhook_secret) VALUES (1, 'git', 'file:///f', '{}', 's');
                     INSERT INTO repos (id, forge_id, forge_remote_id, org_id, full_name, hash, data, created)
                     VALUES (1, 1, 'a/one', 0, 'a/one', 'h', '{}', 0);",
                )
            })
            .await
            .unwrap();
        let row_free = move || {
            let url = url.clone();
            std::thread::spawn(move || {
                connect(&url)
                    .unwrap()
                    .batch_execute("SELECT id FROM repos WHERE id = 1 FOR UPDATE NOWAIT")
                    .is_ok()
            })
            .join()
            .unwrap()
        };
        let probe = row_free.clone();
        let (number, free_meanwhile) = store
            .write(move |c| Ok((crate::pipelines::take_next_number(c, 1)?, probe())))
            .await
            .unwrap();
        assert_eq!(number, 1);
        assert!(
            !free_meanwhile,
            "the row is held while the transaction runs"
        );
        assert!(row_free(), "and given back at its end");
        store.close();
    }

    /// Three replicas' schedulers claiming the same due cron ticks at once: each tick is
    /// claimed by exactly one of them (a compare-and-set PostgreSQL re-checks after the
    /// competing commit).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cron_tick_is_claimed_once_across_replicas() {
        use crate::crons::{self, NewCron};
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions::default();
        let replicas: Vec<crate::Store> = (0..3)
            .map(|_| crate::Store::open_postgres(&url, &options).unwrap())
            .collect();
        let cron = replicas[0]
            .write(|c| {
                c.execute_batch(
                    "INSERT INTO forges (id, type, url, data, webhook_secret) VALUES (1, 'git', 'file:///f', '{}', 's');
                     INSERT INTO repos (id, forge_id, forge_remote_id, org_id, full_name, hash, data, created)
                     VALUES (1, 1, 'a/one', 7, 'a/one', 'h', '{}', 0);",
                )?;
                crons::create(
                    c,
                    &NewCron {
                        name: "every".into(),
                        repo_id: 1,
                        creator_id: 1,
                        next_exec: 1000,
                        schedule: "@hourly".into(),
                        timezone: "UTC".into(),
                        enabled: true,
                        ..NewCron::default()
                    },
                    u64::MAX,
                )
            })
            .await
            .unwrap();
        // Twenty ticks; for each, every replica tries to move it on at the same moment.
        for tick in 0..20i64 {
            let (at, next) = (1000 + tick * 3600, 1000 + (tick + 1) * 3600);
            let claims = replicas.iter().map(|r| {
                let id = cron.id;
                r.submit(move |c| crons::claim(c, id, at, next))
            });
            let won: Vec<bool> = futures_all(claims.collect()).await;
            assert_eq!(
                won.iter().filter(|w| **w).count(),
                1,
                "tick {tick}: {won:?}"
            );
        }
        for r in &replicas {
            r.close();
        }
    }

    /// Awaits every future, in order.
    async fn futures_all<T>(
        futures: Vec<impl std::future::Future<Output = crate::StoreResult<T>>>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for f in futures {
            out.push(f.await.unwrap());
        }
        out
    }

    /// Three replicas creating pipelines of one repository at once: numbers 1..=30, each
    /// once, and no creation fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replicas_take_pipeline_numbers_one_after_the_other() {
        let url = testing::Cluster::shared().fresh_database();
        let options = crate::StoreOptions::default();
        let replicas: Vec<crate::Store> = (0..3)
            .map(|_| crate::Store::open_postgres(&url, &options).unwrap())
            .collect();
        replicas[0]
            .write(|c| {
                c.execute_batch(
                    "INSERT INTO forges (id, type, url, data, webhook_secret)
                         VALUES (1, 'git', 'file:///f', '{}', 's');
                     INSERT INTO repos (id, forge_id, forge_remote_id, org_id, full_name, hash, data, created)
                         VALUES (1, 1, 'a/one', 0, 'a/one', 'h', '{}', 0);",
                )
            })
            .await
            .unwrap();
        let creations = (0..30).map(|i| {
            replicas[i % 3].submit(|c| {
                let number = crate::pipelines::take_next_number(c, 1)?;
                let row = crate::pipelines::create(
                    c,
                    1,
                    number,
                    &crate::pipelines::Pipeline::default(),
                    &[],
                    &[],
                )?;
                Ok(row.pipeline.number)
            })
        });
        let mut numbers: Vec<i64> = futures_join_all(creations).await;
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=30).collect::<Vec<i64>>());
        for replica in &replicas {
            replica.close();
        }
    }

    /// Awaits every future, all at once; panics on the first error.
    async fn futures_join_all<T, F>(futures: impl Iterator<Item = F>) -> Vec<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = crate::StoreResult<T>> + Send + 'static,
    {
        let handles: Vec<_> = futures.map(tokio::spawn).collect();
        let mut out = Vec::new();
        for handle in handles {
            out.push(handle.await.unwrap().unwrap());
        }
        out
    }

    #[test]
    fn urls_it_cannot_serve_are_refused_with_the_reason() {
        let err = |url: &str| connect(url).err().expect("refused").to_string();
        assert!(err("mysql://x@h/db").contains("expected postgres://"));
        assert!(err("postgres://u@h:notaport/db").starts_with("storage.url:"));
        assert!(err("postgres://u:pw@127.0.0.1:1/db?sslmode=verify-full").contains("sslrootcert"));
        // Nothing listens on port 1: the error names the target, not the password.
        let refused = err("postgres://u:secret-pw@127.0.0.1:1/ci?sslmode=disable");
        assert!(
            refused.contains("127.0.0.1:1/ci") && !refused.contains("secret-pw"),
            "{refused}"
        );
    }

    #[test]
    fn a_target_is_named_without_its_password() {
        let url = "postgres://u:secret-pw@db.example:5433/ci?sslmode=require";
        assert_eq!(target(url), "db.example:5433/ci");
        assert_eq!(target("postgres://u@db/ci"), "db:5432/ci");
        assert_eq!(target("postgres://u@h:notaport/db"), "storage.url");
    }

    #[test]
    fn a_database_that_is_not_up_is_worth_waiting_for_and_a_wrong_one_is_not() {
        let seconds = std::time::Duration::from_secs(2);
        let down = probe(
            "postgres://u:secret-pw@127.0.0.1:1/ci?sslmode=disable",
            seconds,
        )
        .expect_err("nothing listens on port 1");
        assert!(down.is_transient(), "{down}");
        assert!(!down.to_string().contains("secret-pw"), "{down}");
        let url = testing::Cluster::shared().fresh_database();
        let probed = std::thread::scope(|s| s.spawn(|| probe(&url, seconds)).join().unwrap());
        probed.expect("the cluster answers");
        // A database that does not exist, a URL it cannot read: waiting mends neither.
        let (head, query) = url.split_once('?').unwrap();
        let (base, _) = head.rsplit_once('/').unwrap();
        let missing = format!("{base}/no_such_database?{query}");
        let missing = std::thread::scope(|s| s.spawn(|| probe(&missing, seconds)).join().unwrap())
            .expect_err("no such database");
        assert!(!missing.is_transient(), "{missing}");
        let bad = probe("postgres://u@h:notaport/db", seconds).expect_err("bad URL");
        assert!(!bad.is_transient(), "{bad}");
    }
}
