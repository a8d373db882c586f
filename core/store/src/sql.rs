//! The one handle SQL runs through, over either engine: SQLite (embedded, the default) or
//! PostgreSQL (several replicas on one database).
//!
//! Values travel in rusqlite's types on both engines: parameters are [`ToSql`], columns are
//! read with [`FromSql`], and dynamic argument lists are [`Value`]s. So a module's row
//! readers and the domain types' conversions are written once, whatever the engine. On
//! PostgreSQL a parameter is converted to the type the server inferred for it (an integer
//! bound where a `bigint`, `integer` or `boolean` is expected; text where `text` is) and a
//! column is read into a [`Value`] by its type; statements keep SQLite's `?N` placeholders,
//! rewritten to `$N` once, when the statement is first prepared on a connection.
//!
//! What the engines spell differently (an upsert that replaces, a JSON array as a set) is
//! chosen with [`Tx::dialect`] at the few places that need it; everything else is SQL both
//! accept, and the store's tests run on both.

use std::cell::RefCell;
use std::collections::HashMap;

use rusqlite::types::{FromSql, FromSqlError, ToSql, ToSqlOutput, Value, ValueRef};

use crate::{StoreError, StoreResult};

/// Which engine a [`Tx`] talks to, for the statements they spell differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// The database as one [`crate::Store::read`] or [`crate::Store::write`] closure sees it (for
/// a write, inside the writer's transaction, under the job's own savepoint).
///
/// Outside this crate a `Tx` can only be handed on to the store's named functions
/// (`repos::get(tx, id)`, …): every method that runs SQL is private to the store, so no SQL
/// can be written anywhere else, and the crate graph keeps it so.
pub struct Tx<'c> {
    engine: Engine<'c>,
    /// For [`crate::Store::read_one`]: how many statements may still run (none = any).
    statements_left: std::cell::Cell<Option<u8>>,
}

/// The database as one [`crate::Store::write`] closure sees it: the writer's transaction.
///
/// Every store function that changes rows takes a `&WriteTx`, and only the writer (and a
/// test's own database) makes one, so a write inside a read closure, which gets a plain
/// [`Tx`], does not compile. It dereferences to [`Tx`], so every read function works inside a
/// write too. The statements that change rows (`execute`, `cached_exec`) are methods of this
/// type only, so a store function that writes must say so in its signature.
pub struct WriteTx<'c>(Tx<'c>);

impl<'c> std::ops::Deref for WriteTx<'c> {
    type Target = Tx<'c>;

    fn deref(&self) -> &Tx<'c> {
        &self.0
    }
}

enum Engine<'c> {
    Sqlite(&'c rusqlite::Connection),
    /// A connection a test opened and handed over.
    #[cfg(any(test, feature = "test-support"))]
    SqliteOwned(rusqlite::Connection),
    Postgres(&'c PgConn),
    /// PostgreSQL through the asynchronous client: a read's statements, kept to be run
    /// there, then their rows ([`Deferred`]).
    Deferred(&'c Deferred),
    /// A session a test opened and handed over.
    #[cfg(test)]
    PostgresOwned(Box<PgConn>),
}

/// A connection the store keeps (its writer's, or one of its readers'), on either engine.
pub(crate) enum Session {
    Sqlite(rusqlite::Connection),
    /// Boxed: a session with its statement cache is much larger than SQLite's handle.
    Postgres(Box<PgConn>),
}

impl Session {
    pub(crate) fn postgres(client: postgres::Client) -> Session {
        Session::Postgres(Box::new(PgConn {
            client: std::mem::ManuallyDrop::new(RefCell::new(client)),
            statements: RefCell::default(),
            outbox_locked: std::cell::Cell::new(false),
            deferred_events: RefCell::new(None),
            checked: std::cell::Cell::new(0),
        }))
    }

    /// Whether this is a PostgreSQL session whose connection has ended (the server
    /// restarted, a proxy or an idle timeout cut it): it can only be replaced. The client
    /// finds out when it next talks to the server.
    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Session::Postgres(pg) => pg.client.borrow().is_closed(),
            Session::Sqlite(_) => false,
        }
    }

    /// PostgreSQL: whether the session still answers, checked now (a round trip), as of
    /// the store's count of lost sessions `losses`; true without a check when that count
    /// has not moved since the last one.
    pub(crate) fn answers(&self, losses: u64) -> bool {
        let Session::Postgres(pg) = self else {
            return true;
        };
        if pg.checked.get() == losses {
            return !self.is_lost();
        }
        pg.checked.set(losses);
        !self.is_lost() && pg.client.borrow_mut().batch_execute("SELECT 1").is_ok()
    }

    /// Marks a new session as checked as of `losses`.
    pub(crate) fn checked_as_of(self, losses: u64) -> Session {
        if let Session::Postgres(pg) = &self {
            pg.checked.set(losses);
        }
        self
    }

    /// The session as the writer's [`WriteTx`] (or a start-up check's, before the writer
    /// runs).
    pub(crate) fn write_tx(&self) -> WriteTx<'_> {
        WriteTx(self.tx())
    }

    /// The session as a [`Tx`] for one closure or store call.
    pub(crate) fn tx(&self) -> Tx<'_> {
        Tx {
            statements_left: std::cell::Cell::new(None),
            engine: match self {
                Session::Sqlite(conn) => Engine::Sqlite(conn),
                Session::Postgres(pg) => Engine::Postgres(pg),
            },
        }
    }
}

/// A PostgreSQL session with its prepared statements (a statement is parsed and planned
/// once per connection, as SQLite's statement cache does).
pub(crate) struct PgConn {
    client: std::mem::ManuallyDrop<RefCell<postgres::Client>>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    /// Whether the open transaction holds the outbox lock ([`Tx::lock_outbox`]).
    outbox_locked: std::cell::Cell<bool>,
    /// The writer's events of the running job, recorded in one statement when the job ends
    /// ([`Tx::defer_events`]); `None` on every other session, which records at once.
    deferred_events: RefCell<Option<Vec<crate::events::HeldEvent>>>,
    /// The store's count of lost sessions when this one was last known to answer
    /// ([`Session::answers`]).
    checked: std::cell::Cell<u64>,
}

impl Drop for PgConn {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never touched again.
        let client = unsafe { std::mem::ManuallyDrop::take(&mut self.client) };
        // Closing the session blocks on the client's own runtime, which cannot happen on a
        // runtime's thread (the last `Store` handle may go away on one).
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::Builder::new()
                .name("store-close".into())
                .spawn(move || drop(client));
        }
    }
}

/// A read on the asynchronous client (`pg::reads`), its closure run in passes so that the
/// statements go over the wire there while their rows are still read by the closure's own
/// code, through [`Row`] as on every other path.
///
/// A pass runs the closure against the answers kept so far: each statement it runs gets the
/// rows of the statement run in that place before (the same SQL, or the pass fails), and
/// the first statement without an answer is kept with its parameters and fails (the pass's
/// result is then thrown away, whatever the closure made of that failure). The caller runs
/// that statement, adds its rows, and runs the next pass. A pass that runs no unanswered
/// statement is the read's result. So a closure of `n` statements runs `n + 1` times, each
/// statement is sent once, and a statement that depends on an earlier one's rows gets its
/// parameters from those rows. Statements the closure names ahead ([`Tx::ahead`]) are
/// answered together: one round trip and one more pass for all of them.
#[derive(Default)]
pub(crate) struct Deferred {
    /// This pass's first statement without an answer, with its parameters.
    statement: RefCell<Option<Statement>>,
    /// The statements this pass named ahead ([`Tx::ahead`]) that have no answer yet, in the
    /// order it will run them.
    ahead: RefCell<Vec<Statement>>,
    /// The statements answered so far, in the order the closure runs them, with their rows
    /// (shared: every later pass reads them again).
    answers: RefCell<Vec<(String, Answer)>>,
    /// How many of `answers` this pass has used.
    used: std::cell::Cell<usize>,
    /// The closure asked for what only a synchronous session does (a batch of statements).
    needs_session: std::cell::Cell<bool>,
}

/// A statement's rows as PostgreSQL sent them, shared by the passes that read them. Kept as
/// the client decoded them (each row one buffer): a column is read from it where the
/// closure asks for it ([`pg_value_ref`]), text and blobs borrowed, not copied.
type Answer = std::sync::Arc<Vec<postgres::Row>>;

/// A statement to run, with its parameters, as the asynchronous client gets it.
pub(crate) type Statement = (String, Vec<PgBind>);

/// A pass's error for a statement it has no answer for: never seen outside the store (a later
/// pass replaces it).
const DEFERRED: &str = "the statement runs on the asynchronous client (a first pass)";

impl Deferred {
    /// A new pass as a [`Tx`] for the read's closure.
    pub(crate) fn tx(&self) -> Tx<'_> {
        self.used.set(0);
        self.statement.borrow_mut().take();
        self.ahead.borrow_mut().clear();
        Tx {
            engine: Engine::Deferred(self),
            statements_left: std::cell::Cell::new(None),
        }
    }

    /// The pass's first statement without an answer, with its parameters, taken, and the
    /// statements named ahead to run after it (none if the pass named none, or if that
    /// statement is not the first it named: then they go out one by one, as unnamed ones).
    pub(crate) fn take_statements(&self) -> Vec<Statement> {
        let Some(first) = self.statement.borrow_mut().take() else {
            return Vec::new();
        };
        let ahead = std::mem::take(&mut *self.ahead.borrow_mut());
        match ahead.first() {
            Some(named) if *named == first => ahead,
            _ => vec![first],
        }
    }

    /// Keeps `statements`, named by the pass before it runs them, for those without an
    /// answer yet (a pass after the one that named them finds them answered).
    fn name_ahead(&self, statements: &[(&str, &[&dyn ToSql])]) -> StoreResult<()> {
        let answered = self.answers.borrow().len();
        let from = answered.saturating_sub(self.used.get());
        let mut ahead = self.ahead.borrow_mut();
        ahead.clear();
        for (sql, values) in statements.iter().skip(from) {
            ahead.push((sql.to_string(), pg_binds(values)?));
        }
        Ok(())
    }

    /// The rows of `sql`, the statement taken last, for the passes after this.
    pub(crate) fn answer(&self, sql: String, rows: Vec<postgres::Row>) {
        self.answers
            .borrow_mut()
            .push((sql, std::sync::Arc::new(rows)));
    }

    /// How many statements have been answered.
    pub(crate) fn answered(&self) -> usize {
        self.answers.borrow().len()
    }

    /// Whether the closure asked for what only a synchronous session does.
    pub(crate) fn needs_session(&self) -> bool {
        self.needs_session.get()
    }

    /// The rows of `sql` when a pass before ran it in this place; else keeps `sql` and
    /// `values` (unless a statement is kept already) and fails the statement.
    fn fetch(&self, sql: &str, values: &[&dyn ToSql]) -> StoreResult<Answer> {
        let used = self.used.get();
        if let Some((answered, rows)) = self.answers.borrow().get(used) {
            if answered != sql {
                return Err(StoreError::Unavailable(
                    "a read ran other statements when it ran again".into(),
                ));
            }
            self.used.set(used + 1);
            return Ok(rows.clone());
        }
        let mut statement = self.statement.borrow_mut();
        if statement.is_none() {
            *statement = Some((sql.to_owned(), pg_binds(values)?));
        }
        Err(StoreError::Unavailable(DEFERRED.into()))
    }
}

impl<'c> Tx<'c> {
    /// Lends a SQLite connection as a `Tx`.
    pub(crate) fn new(conn: &'c rusqlite::Connection) -> Tx<'c> {
        Tx {
            engine: Engine::Sqlite(conn),
            statements_left: std::cell::Cell::new(None),
        }
    }
}

impl<'c> WriteTx<'c> {
    /// Lends a SQLite connection, in a write transaction or opened for one, as a `WriteTx`.
    pub(crate) fn new(conn: &'c rusqlite::Connection) -> WriteTx<'c> {
        WriteTx(Tx::new(conn))
    }
}

impl WriteTx<'_> {
    pub(crate) fn execute<P: Params>(&self, sql: &str, params: P) -> StoreResult<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// `execute` through the statement cache.
    pub(crate) fn cached_exec<P: Params>(&self, sql: &str, params: P) -> StoreResult<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The id the last `INSERT` on this connection gave its row.
    pub(crate) fn last_insert_rowid(&self) -> StoreResult<i64> {
        match self.sqlite_conn() {
            Some(conn) => Ok(conn.last_insert_rowid()),
            // The identity column's sequence, as drawn by this session.
            None => self.cached_row("SELECT lastval()", [], |r| r.get(0)),
        }
    }

    /// A `Tx` over a SQLite connection a test opened itself (a copy of a data dir's database).
    #[cfg(any(test, feature = "test-support"))]
    pub fn for_tests(conn: &rusqlite::Connection) -> WriteTx<'_> {
        WriteTx::new(conn)
    }

    /// PostgreSQL: takes the outbox lock for the rest of the open transaction (see
    /// `pg::outbox`), once per transaction: the lock stacks, so asking again would only
    /// cost a round trip. The writer takes it as it begins each transaction; an event
    /// recorded on any other session (tests) takes it here. The writer says when the
    /// transaction ends ([`Tx::set_outbox_lock_held`]).
    pub(crate) fn lock_outbox(&self) -> StoreResult<()> {
        let Some(pg) = self.pg() else {
            return Ok(());
        };
        if !pg.outbox_locked.get() {
            self.cached_exec(
                "SELECT pg_advisory_xact_lock(?1)",
                [crate::pg::outbox::OUTBOX_LOCK],
            )?;
            pg.outbox_locked.set(true);
        }
        Ok(())
    }

    /// Owns a connection a unit test opened (`&tx` is then what store functions take).
    #[cfg(any(test, feature = "test-support"))]
    pub fn owned(conn: rusqlite::Connection) -> WriteTx<'static> {
        WriteTx(Tx {
            engine: Engine::SqliteOwned(conn),
            statements_left: std::cell::Cell::new(None),
        })
    }

    /// A fresh in-memory SQLite database at the current schema, for other crates' unit tests
    /// of logic that runs inside a transaction (the CI lifecycle).
    #[cfg(any(test, feature = "test-support"))]
    pub fn in_memory_for_tests() -> WriteTx<'static> {
        let mut conn = rusqlite::Connection::open_in_memory().expect("in-memory database");
        crate::migrations::migrate(&mut conn).expect("migrations");
        WriteTx::owned(conn)
    }
}

impl Tx<'_> {
    pub fn dialect(&self) -> Dialect {
        match self.engine {
            Engine::Deferred(_) => Dialect::Postgres,
            _ if self.pg().is_some() => Dialect::Postgres,
            _ => Dialect::Sqlite,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, its schema table).
    pub(crate) fn sqlite_conn(&self) -> Option<&rusqlite::Connection> {
        match &self.engine {
            Engine::Sqlite(conn) => Some(conn),
            #[cfg(any(test, feature = "test-support"))]
            Engine::SqliteOwned(conn) => Some(conn),
            _ => None,
        }
    }

    /// The payloads of the notifications this PostgreSQL session has received so far
    /// (none on SQLite).
    pub(crate) fn take_notifications(&self) -> Vec<String> {
        match self.pg() {
            Some(pg) => {
                let mut client = pg.client.borrow_mut();
                let mut notifications = client.notifications();
                let mut iter = notifications.iter();
                use postgres::fallible_iterator::FallibleIterator;
                let mut out = Vec::new();
                while let Ok(Some(note)) = iter.next() {
                    out.push(note.payload().to_owned());
                }
                out
            }
            None => Vec::new(),
        }
    }

    /// PostgreSQL: from now on the events this session records wait in memory until
    /// [`crate::events::record_deferred`] writes them in one multi-row statement (each is
    /// otherwise a round trip of its own). The writer turns this on for its session; it
    /// records a job's events before the job's savepoint is released, so they commit with
    /// the job, in order, under the outbox lock.
    pub(crate) fn defer_events(&self) {
        if let Some(pg) = self.pg() {
            pg.deferred_events.borrow_mut().get_or_insert_with(Vec::new);
        }
    }

    /// Holds `event` back if this session defers events; gives it back if it does not.
    pub(crate) fn hold_event(
        &self,
        event: crate::events::HeldEvent,
    ) -> Option<crate::events::HeldEvent> {
        match self.pg().map(|pg| pg.deferred_events.borrow_mut()) {
            Some(mut held) => match held.as_mut() {
                Some(list) => {
                    list.push(event);
                    None
                }
                None => Some(event),
            },
            None => Some(event),
        }
    }

    /// The events held back so far, taken (empty on a session that records at once).
    pub(crate) fn take_held_events(&self) -> Vec<crate::events::HeldEvent> {
        self.pg()
            .and_then(|pg| {
                let mut held = pg.deferred_events.borrow_mut();
                held.as_mut().map(std::mem::take)
            })
            .unwrap_or_default()
    }

    /// Records that the lock is held, or no longer is (false after a commit or rollback).
    pub(crate) fn set_outbox_lock_held(&self, held: bool) {
        if let Some(pg) = self.pg() {
            pg.outbox_locked.set(held);
        }
    }

    fn pg(&self) -> Option<&PgConn> {
        match &self.engine {
            Engine::Postgres(pg) => Some(pg),
            #[cfg(test)]
            Engine::PostgresOwned(pg) => Some(pg),
            _ => None,
        }
    }

    /// Names the statements this read runs next, in the order it runs them, with their
    /// parameters. On the asynchronous PostgreSQL client they then go out together, in one
    /// round trip, where each would otherwise wait for the one before it; so none of them
    /// may take its parameters from another's rows. Elsewhere it changes nothing (SQLite has
    /// no round trips; a synchronous session runs each as it comes). Naming statements the
    /// read then does not run costs only their answers.
    pub(crate) fn ahead(&self, statements: &[(&str, &[&dyn ToSql])]) -> StoreResult<()> {
        match self.engine {
            Engine::Deferred(deferred) => deferred.name_ahead(statements),
            _ => Ok(()),
        }
    }

    /// Allows only `n` more statements on this `Tx` ([`crate::Store::read_one`]).
    pub(crate) fn limit_statements(&self, n: u8) {
        self.statements_left.set(Some(n));
    }

    /// Counts a statement against the limit, if there is one.
    fn spend_statement(&self) -> StoreResult<()> {
        match self.statements_left.get() {
            None => Ok(()),
            Some(0) => Err(StoreError::Unavailable(
                "a one-statement read ran a second statement (use Store::read)".into(),
            )),
            Some(n) => {
                self.statements_left.set(Some(n - 1));
                Ok(())
            }
        }
    }

    /// A statement from the connection's cache (prepared on first use).
    pub(crate) fn prepare_cached(&self, sql: &str) -> StoreResult<Stmt<'_>> {
        self.spend_statement()?;
        if let Engine::Deferred(deferred) = self.engine {
            return Ok(Stmt::Deferred(deferred, sql.to_owned()));
        }
        Ok(match (self.pg(), self.sqlite_conn()) {
            (Some(pg), _) => Stmt::Postgres(pg, pg.statement(sql)?),
            (_, Some(conn)) => Stmt::SqliteCached(conn.prepare_cached(sql)?),
            (_, None) => unreachable!("every other engine is SQLite"),
        })
    }

    /// A statement prepared for this call only (SQL built at run time that would crowd the
    /// cache). PostgreSQL keeps it anyway: preparing costs a round trip there.
    pub(crate) fn prepare(&self, sql: &str) -> StoreResult<Stmt<'_>> {
        self.spend_statement()?;
        if let Engine::Deferred(deferred) = self.engine {
            return Ok(Stmt::Deferred(deferred, sql.to_owned()));
        }
        Ok(match (self.pg(), self.sqlite_conn()) {
            (Some(pg), _) => Stmt::Postgres(pg, pg.statement(sql)?),
            (_, Some(conn)) => Stmt::Sqlite(conn.prepare(sql)?),
            (_, None) => unreachable!("every other engine is SQLite"),
        })
    }

    /// Runs statements without parameters, separated by `;`.
    pub(crate) fn execute_batch(&self, sql: &str) -> StoreResult<()> {
        self.spend_statement()?;
        if let Engine::Deferred(deferred) = self.engine {
            // Run on a synchronous session instead (`Store::read`).
            deferred.needs_session.set(true);
            return Err(StoreError::Unavailable(
                "a batch runs on a synchronous session".into(),
            ));
        }
        match (self.pg(), self.sqlite_conn()) {
            (Some(pg), _) => Ok(pg.client.borrow_mut().batch_execute(sql)?),
            (_, Some(conn)) => Ok(conn.execute_batch(sql)?),
            (_, None) => unreachable!("every other engine is SQLite"),
        }
    }

    pub(crate) fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> StoreResult<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare(sql)?.query_row(params, f)
    }

    /// `query_row` through the statement cache.
    pub(crate) fn cached_row<T, P, F>(&self, sql: &str, params: P, f: F) -> StoreResult<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// The SQLite connection, for tests and benches that seed or inspect rows the API cannot.
    #[cfg(any(test, feature = "test-support"))]
    pub fn raw_for_tests(&self) -> &rusqlite::Connection {
        self.sqlite_conn()
            .expect("raw_for_tests is for SQLite stores")
    }
}

impl PgConn {
    fn statement(&self, sql: &str) -> StoreResult<postgres::Statement> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self
            .client
            .borrow_mut()
            .prepare(&dollar_placeholders(sql))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn run(&self, statement: &postgres::Statement, values: &[&dyn ToSql]) -> StoreResult<u64> {
        let binds = pg_binds(values)?;
        let refs = bind_refs(&binds);
        Ok(self.client.borrow_mut().execute(statement, &refs)?)
    }

    fn rows(
        &self,
        statement: &postgres::Statement,
        values: &[&dyn ToSql],
    ) -> StoreResult<Vec<postgres::Row>> {
        let binds = pg_binds(values)?;
        let refs = bind_refs(&binds);
        Ok(self.client.borrow_mut().query(statement, &refs)?)
    }
}

/// A prepared statement on either engine.
pub(crate) enum Stmt<'c> {
    SqliteCached(rusqlite::CachedStatement<'c>),
    Sqlite(rusqlite::Statement<'c>),
    Postgres(&'c PgConn, postgres::Statement),
    /// A statement of a read on the asynchronous client ([`Deferred`]): its SQL as the
    /// store wrote it.
    Deferred(&'c Deferred, String),
}

impl<'c> Stmt<'c> {
    fn sqlite(&mut self) -> Option<&mut rusqlite::Statement<'c>> {
        match self {
            Stmt::SqliteCached(stmt) => Some(stmt),
            Stmt::Sqlite(stmt) => Some(stmt),
            Stmt::Postgres(..) | Stmt::Deferred(..) => None,
        }
    }

    /// PostgreSQL: every row of the statement, from one round trip (or, deferred, from the
    /// asynchronous client's); `None` on SQLite, which steps through them.
    fn pg_rows(&mut self, values: &[&dyn ToSql]) -> Option<StoreResult<Answer>> {
        match self {
            Stmt::Postgres(pg, statement) => {
                Some(pg.rows(statement, values).map(std::sync::Arc::new))
            }
            Stmt::Deferred(deferred, sql) => Some(deferred.fetch(sql, values)),
            _ => None,
        }
    }

    pub(crate) fn execute<P: Params>(&mut self, params: P) -> StoreResult<usize> {
        let values = params.values();
        if let Some(stmt) = self.sqlite() {
            return Ok(stmt.execute(&values[..])?);
        }
        match self {
            Stmt::Postgres(pg, statement) => Ok(pg.run(statement, &values)? as usize),
            _ => Err(StoreError::Unavailable(
                "a one-statement read cannot change rows".into(),
            )),
        }
    }

    /// Every row, each read by `f` (SQLite steps through them as `f` reads them; PostgreSQL
    /// has them all from one round trip).
    pub(crate) fn query_map<T, P, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> StoreResult<std::vec::IntoIter<rusqlite::Result<T>>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> rusqlite::Result<T>,
    {
        let values = params.values();
        let all: Vec<rusqlite::Result<T>> = match self.pg_rows(&values) {
            Some(rows) => rows?.iter().map(|row| f(&Row::Postgres(row))).collect(),
            None => {
                let stmt = self
                    .sqlite()
                    .unwrap_or_else(|| unreachable!("matched above"));
                stmt.query_map(&values[..], |row| f(&Row::Sqlite(row)))?
                    .collect()
            }
        };
        Ok(all.into_iter())
    }

    /// The first row, read by `f`; no row is rusqlite's `QueryReturnedNoRows` on both engines
    /// (which [`OptionalExtension::optional`] turns into `None`).
    pub(crate) fn query_row<T, P, F>(&mut self, params: P, f: F) -> StoreResult<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        let values = params.values();
        match self.pg_rows(&values) {
            Some(rows) => {
                let rows = rows?;
                let row = rows.first().ok_or(rusqlite::Error::QueryReturnedNoRows)?;
                Ok(f(&Row::Postgres(row))?)
            }
            None => {
                let stmt = self
                    .sqlite()
                    .unwrap_or_else(|| unreachable!("matched above"));
                Ok(stmt.query_row(&values[..], |row| f(&Row::Sqlite(row)))?)
            }
        }
    }

    /// The rows, one at a time.
    pub(crate) fn query<P: Params>(&mut self, params: P) -> StoreResult<Rows<'_>> {
        let values = params.values();
        match self.pg_rows(&values) {
            Some(rows) => Ok(Rows::Postgres {
                rows: rows?,
                next: 0,
            }),
            None => {
                let stmt = self
                    .sqlite()
                    .unwrap_or_else(|| unreachable!("matched above"));
                Ok(Rows::Sqlite(stmt.query(&values[..])?))
            }
        }
    }

    pub(crate) fn exists<P: Params>(&mut self, params: P) -> StoreResult<bool> {
        Ok(self.query(params)?.next()?.is_some())
    }
}

/// Rows being read ([`Stmt::query`]).
pub(crate) enum Rows<'s> {
    Sqlite(rusqlite::Rows<'s>),
    Postgres { rows: Answer, next: usize },
}

impl Rows<'_> {
    /// How many rows are still to come, where that is known before reading them: all of a
    /// PostgreSQL answer has arrived, SQLite finds its rows one step at a time. Lets a
    /// renderer size its buffer once instead of growing it row by row.
    pub(crate) fn remaining(&self) -> Option<usize> {
        match self {
            Rows::Sqlite(_) => None,
            Rows::Postgres { rows, next } => Some(rows.len().saturating_sub(*next)),
        }
    }

    pub(crate) fn next(&mut self) -> StoreResult<Option<Row<'_>>> {
        match self {
            Rows::Sqlite(rows) => Ok(rows.next()?.map(Row::Sqlite)),
            Rows::Postgres { rows, next } => {
                let row = rows.get(*next);
                *next += 1;
                Ok(row.map(Row::Postgres))
            }
        }
    }
}

/// One row, its columns read by index.
pub enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r postgres::Row),
}

/// What a column is picked by: its index (as with rusqlite, `row.get::<_, T>(i)`).
pub trait ColumnIndex {
    fn index(self) -> usize;
}

impl ColumnIndex for usize {
    fn index(self) -> usize {
        self
    }
}

impl Row<'_> {
    pub fn get<I: ColumnIndex, T: FromSql>(&self, index: I) -> rusqlite::Result<T> {
        let index = index.index();
        match self {
            Row::Sqlite(row) => row.get(index),
            Row::Postgres(_) => {
                let value = self.get_ref(index)?;
                T::column_result(value).map_err(|e| conversion_error(index, value, e))
            }
        }
    }

    pub fn get_ref<I: ColumnIndex>(&self, index: I) -> rusqlite::Result<ValueRef<'_>> {
        let index = index.index();
        match self {
            Row::Sqlite(row) => row.get_ref(index),
            Row::Postgres(row) => pg_value_ref(row, index),
        }
    }
}

/// rusqlite's error for a column that does not convert, as it reports one from SQLite.
fn conversion_error(index: usize, value: ValueRef<'_>, e: FromSqlError) -> rusqlite::Error {
    match e {
        FromSqlError::InvalidType => {
            rusqlite::Error::InvalidColumnType(index, format!("column {index}"), value.data_type())
        }
        other => {
            rusqlite::Error::FromSqlConversionFailure(index, value.data_type(), Box::new(other))
        }
    }
}

/// Statement parameters: `[a, b]`, `params![a, b]`, `[]`, or [`params_from_iter`].
pub trait Params {
    fn values(&self) -> Vec<&dyn ToSql>;
}

impl Params for &[&dyn ToSql] {
    fn values(&self) -> Vec<&dyn ToSql> {
        self.to_vec()
    }
}

impl Params for [&(dyn ToSql + Send + Sync); 0] {
    fn values(&self) -> Vec<&dyn ToSql> {
        Vec::new()
    }
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn values(&self) -> Vec<&dyn ToSql> {
                self.iter().map(|v| v as &dyn ToSql).collect()
            }
        }
    )*};
}
array_params!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);

/// Parameters from a list built at run time.
pub(crate) struct ParamsFromIter<T>(Vec<T>);

pub(crate) fn params_from_iter<I>(iter: I) -> ParamsFromIter<I::Item>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    ParamsFromIter(iter.into_iter().collect())
}

impl<T: ToSql> Params for ParamsFromIter<T> {
    fn values(&self) -> Vec<&dyn ToSql> {
        self.0.iter().map(|v| v as &dyn ToSql).collect()
    }
}

/// `Ok(None)` for a query that found no row, on either engine.
pub(crate) trait OptionalExtension<T> {
    fn optional(self) -> StoreResult<Option<T>>;
}

impl<T> OptionalExtension<T> for StoreResult<T> {
    fn optional(self) -> StoreResult<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(StoreError::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl<T> OptionalExtension<T> for rusqlite::Result<T> {
    fn optional(self) -> StoreResult<Option<T>> {
        StoreResult::from(self.map_err(StoreError::from)).optional()
    }
}

/// SQLite's `?N` (and bare `?`) placeholders as PostgreSQL's `$N`, outside quoted text.
pub(crate) fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut bare = 0;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                out.push('$');
                if chars.peek().is_some_and(char::is_ascii_digit) {
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        out.push(d);
                    }
                } else {
                    bare += 1;
                    out.push_str(&bare.to_string());
                }
                // SQLite's `LIMIT ?N + 0` (see `STATEMENT_CACHE`) would make PostgreSQL
                // take the parameter as a 32-bit `integer`; limits are 64-bit.
                if chars.clone().take(4).eq(" + 0".chars()) {
                    out.push_str("::int8");
                }
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// A value bound to a PostgreSQL parameter, converted to the type the server expects there.
#[derive(Debug, PartialEq)]
pub(crate) struct PgBind(pub(crate) Value);

fn pg_binds(values: &[&dyn ToSql]) -> StoreResult<Vec<PgBind>> {
    values
        .iter()
        .map(|v| {
            let value = match v.to_sql()? {
                ToSqlOutput::Borrowed(r) => Value::from(r),
                ToSqlOutput::Owned(v) => v,
                other => {
                    return Err(StoreError::Unavailable(format!(
                        "a parameter PostgreSQL cannot take: {other:?}"
                    )));
                }
            };
            Ok(PgBind(value))
        })
        .collect()
}

fn bind_refs(binds: &[PgBind]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    binds
        .iter()
        .map(|b| b as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// `value` in PostgreSQL's binary format for `ty`.
fn put<T: postgres::types::ToSql>(
    value: &T,
    ty: &postgres::types::Type,
    out: &mut bytes::BytesMut,
) -> Result<postgres::types::IsNull, BoxError> {
    value.to_sql(ty, out)
}

impl postgres::types::ToSql for PgBind {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, BoxError> {
        use postgres::types::Type;
        let mismatch = || -> BoxError {
            format!("cannot bind {:?} to a PostgreSQL {ty}", self.0.data_type()).into()
        };
        match &self.0 {
            Value::Null => Ok(postgres::types::IsNull::Yes),
            Value::Integer(i) => match *ty {
                Type::INT8 => put(&i, ty, out),
                Type::INT4 => put(&i32::try_from(*i)?, ty, out),
                Type::INT2 => put(&i16::try_from(*i)?, ty, out),
                Type::BOOL => put(&(*i != 0), ty, out),
                Type::FLOAT8 => put(&(*i as f64), ty, out),
                Type::TEXT | Type::VARCHAR => put(&i.to_string(), ty, out),
                _ => Err(mismatch()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => put(&f, ty, out),
                Type::FLOAT4 => put(&(*f as f32), ty, out),
                _ => Err(mismatch()),
            },
            Value::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    put(&s.as_str(), ty, out)
                }
                Type::JSON | Type::JSONB => {
                    if *ty == Type::JSONB {
                        out.extend_from_slice(&[1]);
                    }
                    out.extend_from_slice(s.as_bytes());
                    Ok(postgres::types::IsNull::No)
                }
                Type::BYTEA => put(&s.as_bytes(), ty, out),
                _ => Err(mismatch()),
            },
            Value::Blob(b) => match *ty {
                Type::BYTEA => put(&b.as_slice(), ty, out),
                _ => Err(mismatch()),
            },
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// A PostgreSQL row's columns as SQLite's kinds of value, owned (see [`pg_value_ref`]).
pub(crate) fn pg_row_values(row: &postgres::Row) -> StoreResult<Vec<Value>> {
    (0..row.len())
        .map(|i| Ok(pg_value_ref(row, i)?.into()))
        .collect()
}

/// Column `index` of a PostgreSQL row as SQLite's kind of value: integers (and booleans, as
/// 0/1), reals, text and blobs, the last two borrowed from the row. A column of another
/// type is an error that says to cast it.
pub(crate) fn pg_value_ref(row: &postgres::Row, index: usize) -> rusqlite::Result<ValueRef<'_>> {
    use postgres::types::Type;
    let column = row
        .columns()
        .get(index)
        .ok_or(rusqlite::Error::InvalidColumnIndex(index))?;
    // rusqlite's "unknown column" (`usize::MAX`): its message is then the error's alone, with
    // no SQLite type it would have to make up; both messages below name the column.
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| {
        rusqlite::Error::FromSqlConversionFailure(usize::MAX, rusqlite::types::Type::Null, e)
    };
    let value = match *column.type_() {
        Type::INT8 => row
            .try_get::<_, Option<i64>>(index)
            .map(|v| v.map(ValueRef::Integer)),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(index)
            .map(|v| v.map(|v| ValueRef::Integer(v.into()))),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(index)
            .map(|v| v.map(|v| ValueRef::Integer(v.into()))),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(index)
            .map(|v| v.map(|v| ValueRef::Integer(v.into()))),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(index)
            .map(|v| v.map(ValueRef::Real)),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(index)
            .map(|v| v.map(|v| ValueRef::Real(v.into()))),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row
            .try_get::<_, Option<TextBytes<'_>>>(index)
            .map(|v| v.map(|v| ValueRef::Text(v.0))),
        Type::BYTEA => row
            .try_get::<_, Option<&[u8]>>(index)
            .map(|v| v.map(ValueRef::Blob)),
        ref ty => {
            return Err(failed(
                format!(
                    "column {} has PostgreSQL type {ty}, which the store does not read \
                     (cast it in the query)",
                    column.name()
                )
                .into(),
            ));
        }
    };
    Ok(value
        .map_err(|e| failed(e.into()))?
        .unwrap_or(ValueRef::Null))
}

/// A text column's bytes as PostgreSQL sent them, not checked for UTF-8 here: the reader
/// checks them once, when it takes them as text (`ValueRef::as_str`, `String`), as it does
/// SQLite's. (Checked here too, every text column of a page was checked twice: a few
/// microseconds per 22 KB list.) The database sends only valid UTF-8: the client asks for it
/// as its `client_encoding`.
struct TextBytes<'a>(&'a [u8]);

impl<'a> postgres::types::FromSql<'a> for TextBytes<'a> {
    fn from_sql(
        _: &postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(TextBytes(raw))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        <&str as postgres::types::FromSql>::accepts(ty)
    }
}

/// Rows as tests inspect them (after a crash, or at rest), on either engine.
#[cfg(any(test, feature = "test-support"))]
impl Tx<'_> {
    /// The first row of `sql`, read by `f`.
    pub fn query_row_for_tests<T, P, F>(&self, sql: &str, params: P, f: F) -> StoreResult<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        self.query_row(sql, params, f)
    }

    /// Every row of `sql`, each read by `f`.
    pub fn query_map_for_tests<T, P, F>(&self, sql: &str, params: P, f: F) -> StoreResult<Vec<T>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> rusqlite::Result<T>,
    {
        Ok(self
            .prepare(sql)?
            .query_map(params, f)?
            .collect::<Result<_, _>>()?)
    }

    /// Every text and blob value stored in any table, as bytes: what is at rest in the
    /// database, for tests that look for a plaintext secret there.
    pub fn stored_bytes_for_tests(&self) -> StoreResult<Vec<u8>> {
        let tables_sql = match self.dialect() {
            Dialect::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'table'",
            Dialect::Postgres => {
                "SELECT CAST(tablename AS TEXT) FROM pg_tables WHERE schemaname = current_schema()"
            }
        };
        let tables: Vec<String> = self
            .prepare(tables_sql)?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for table in tables {
            let mut stmt = self.prepare(&format!("SELECT * FROM \"{table}\""))?;
            let rows = stmt.query_map([], |r| {
                let mut bytes = Vec::new();
                let mut i = 0;
                while let Ok(value) = r.get_ref(i) {
                    match value {
                        ValueRef::Text(b) | ValueRef::Blob(b) => bytes.extend_from_slice(b),
                        _ => {}
                    }
                    i += 1;
                }
                Ok(bytes)
            })?;
            for row in rows {
                out.extend(row?);
            }
        }
        Ok(out)
    }
}

/// Runs `f` on the database at `target` — a `postgres://` URL, or a SQLite file — on a
/// plain thread (the blocking PostgreSQL client cannot run on a runtime's): how tests
/// inspect a server's rows, running or not.
#[cfg(any(test, feature = "test-support"))]
pub fn inspect_for_tests<T: Send>(target: &str, f: impl FnOnce(&Tx) -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            if target.starts_with("postgres://") {
                let client = crate::pg::connect(target).expect("connect");
                let session = Session::postgres(client);
                f(&session.tx())
            } else {
                let conn = rusqlite::Connection::open(target).expect("open the database");
                f(&Tx::new(&conn))
            }
        })
        .join()
        .expect("the inspection panicked")
    })
}

/// A fresh database at the current schema for a unit test, on the engine the
/// `WOODLARK_TEST_STORE` variable names: SQLite in memory (unset), or a database of its own
/// on the process's throwaway PostgreSQL cluster (`postgres`). `.ci/test` runs the store's
/// tests both ways.
#[cfg(test)]
pub(crate) fn fresh_tx() -> WriteTx<'static> {
    if std::env::var("WOODLARK_TEST_STORE").as_deref() == Ok("postgres") {
        let url = crate::pg::testing::Cluster::shared().fresh_database();
        let mut client = crate::pg::connect(&url).expect("connect");
        crate::pg::schema::migrate(&mut client).expect("migrate");
        let Session::Postgres(pg) = Session::postgres(client) else {
            unreachable!("made as PostgreSQL")
        };
        return WriteTx(Tx {
            engine: Engine::PostgresOwned(pg),
            statements_left: std::cell::Cell::new(None),
        });
    }
    let mut conn = rusqlite::Connection::open_in_memory().expect("in-memory database");
    crate::migrations::migrate(&mut conn).expect("migrations");
    conn.pragma_update(None, "foreign_keys", "ON")
        .expect("foreign keys");
    WriteTx::owned(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            dollar_placeholders("SELECT a FROM t WHERE b = ?1 AND c LIKE '?2' AND d = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c LIKE '?2' AND d = $12"
        );
        assert_eq!(dollar_placeholders("VALUES (?, ?)"), "VALUES ($1, $2)");
        assert_eq!(
            dollar_placeholders("LIMIT ?2 + 0 OFFSET ?3"),
            "LIMIT $2::int8 + 0 OFFSET $3"
        );
        assert_eq!(
            dollar_placeholders(r#"SELECT "?" , ?3"#),
            r#"SELECT "?" , $3"#
        );
    }
}
