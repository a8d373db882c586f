//! The store as everyone above the services sees it: reads only.
//!
//! Every change is a service call (a function of this crate), so that its audit line, its
//! checks and its follow-ups (dropped drivers, refreshed targets) cannot be skipped. The
//! handlers, the CLI and the web UI get a [`Reads`]: it has no `write`, and the services'
//! own [`Store`] is private to this crate, so a handler that writes does not compile:
//!
//! ```compile_fail,E0599
//! # async fn handler(ci: &woodlark_ci::Services) {
//! ci.reads.write(|_| Ok(())).await; // no such method
//! # }
//! ```
//!
//! ```compile_fail,E0616
//! # async fn handler(ci: &woodlark_ci::Services) {
//! ci.store.write(|_| Ok(())).await; // a private field
//! # }
//! ```
//!
//! while reading does (the same call with `read` compiles, which keeps the two above honest):
//!
//! ```
//! # async fn handler(ci: &woodlark_ci::Services) {
//! let _: Result<(), _> = ci.reads.read(|_| Ok(())).await;
//! # }
//! ```
//!
//! A read closure gets the store's read transaction, `Tx`; every store function that changes
//! rows takes its write transaction, `WriteTx`, which only the services' writes are given. So
//! a store write inside a read does not compile either:
//!
//! ```compile_fail,E0308
//! # async fn handler(ci: &woodlark_ci::Services) {
//! # use woodlark_store::users;
//! let _ = ci.reads.read(|tx| users::delete(tx, &Default::default(), "alice")).await;
//! # }
//! ```
//!
//! while a store read in the same place does:
//!
//! ```
//! # async fn handler(ci: &woodlark_ci::Services) {
//! # use woodlark_store::users;
//! let _ = ci.reads.read(|tx| users::by_login(tx, &Default::default(), "alice")).await;
//! # }
//! ```

use crate::store::{Dialect, Domain, Store, StoreResult, Tx};

/// A read-only handle on a [`Store`]: cheap to clone.
#[derive(Clone)]
pub struct Reads(Store);

impl Reads {
    pub(crate) fn new(store: Store) -> Reads {
        Reads(store)
    }

    /// [`Store::read`]: a short read on a read-only connection (on PostgreSQL `f` may run
    /// more than once: see there).
    pub async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        self.0.read(f).await
    }

    /// [`Store::read_one`]: a read of exactly one statement.
    pub async fn read_one<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&Tx) -> StoreResult<T> + Send + 'static,
    {
        self.0.read_one(f).await
    }

    /// [`Store::read_blocking`]: a long read, on the blocking pool.
    pub async fn read_blocking<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx) -> StoreResult<T> + Send + 'static,
    {
        self.0.read_blocking(f).await
    }

    /// [`Store::generation`]: the tag of a cached read of `domain`.
    pub fn generation(&self, domain: Domain) -> u64 {
        self.0.generation(domain)
    }

    /// [`Store::identity_generation`].
    pub fn identity_generation(&self) -> u64 {
        self.0.identity_generation()
    }

    /// [`Store::generation_elsewhere`]: other replicas' commits to `domain`, as heard.
    pub fn generation_elsewhere(&self, domain: Domain) -> u64 {
        self.0.generation_elsewhere(domain)
    }

    /// [`Store::is_shared`]: other servers write to this database too.
    pub fn is_shared(&self) -> bool {
        self.0.is_shared()
    }

    /// [`Store::commits`]: changes after every committed write batch.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.commits()
    }

    /// [`Store::dialect`].
    pub fn dialect(&self) -> Dialect {
        self.0.dialect()
    }

    /// [`Store::leadership`]: whether this replica is the one that posts statuses.
    pub fn leadership(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.leadership()
    }

    /// [`Store::writer_catch_ups`].
    pub fn writer_catch_ups(&self) -> u64 {
        self.0.writer_catch_ups()
    }

    /// [`Store::ping`]: the database reads and its writer takes jobs (`/healthz`).
    pub async fn ping(&self) -> StoreResult<()> {
        self.0.ping().await
    }
}
