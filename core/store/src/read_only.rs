//! A store opened for reading only: reader connections and nothing else.
//!
//! For commands that only read a data dir a server may be using at the same time (`woodlark
//! user token`, `user login-link`): opened this way they change nothing in the database (no
//! migration, no sealing-key claim, no checkpoint) and, on PostgreSQL, neither listen for
//! other replicas nor compete for their lead. There is no writer: every write answers
//! [`StoreError::Closed`]. The database must already be at this build's schema (a server of
//! this version has opened it), so a read never meets a column it does not know.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use crate::sql::Session;
use crate::{
    Dialect, Inner, Store, StoreError, StoreOptions, StoreResult, Tx, configure, meta, migrations,
    pg, same_sealing_key,
};

impl Store {
    /// Opens the SQLite database at `path` for reading only (see the module docs).
    pub fn open_read_only(path: &Path, options: &StoreOptions) -> StoreResult<Store> {
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let readers = (0..options.readers.max(1))
            .map(|_| {
                let conn = Connection::open_with_flags(
                    path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(open_err)?;
                configure(&conn, false, options.full_sync).map_err(open_err)?;
                Ok(Session::Sqlite(conn))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let version = readers[0]
            .tx()
            .sqlite_conn()
            .map(|c| c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)))
            .transpose()?
            .unwrap_or_default();
        at_current_schema(version, migrations::CURRENT_VERSION)?;
        sealed_with(&readers[0].tx(), options)?;
        Ok(readers_only(path, Dialect::Sqlite, readers, None))
    }

    /// Opens the PostgreSQL database at `url` for reading only (see the module docs).
    pub fn open_postgres_read_only(url: &str, options: &StoreOptions) -> StoreResult<Store> {
        // The blocking client cannot be started on a runtime's thread (as `open_postgres`).
        let readers = std::thread::scope(|s| {
            s.spawn(|| {
                let mut first =
                    pg::connect(url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
                let version = pg::schema::version(&mut first)
                    .map_err(|e| StoreError::Migration(e.to_string()))?;
                at_current_schema(version, pg::schema::latest())?;
                let mut readers = vec![Session::postgres(first)];
                for _ in 1..options.readers.max(1) {
                    let client =
                        pg::connect(url).map_err(|e| StoreError::Unavailable(e.to_string()))?;
                    readers.push(Session::postgres(client));
                }
                sealed_with(&readers[0].tx(), options)?;
                Ok::<_, StoreError>(readers)
            })
            .join()
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "opening PostgreSQL panicked".into(),
                ))
            })
        })?;
        let async_reads = pg::reads::AsyncReaders::new(url, readers.len(), None);
        Ok(readers_only(
            Path::new(url),
            Dialect::Postgres,
            readers,
            Some(Arc::new(async_reads)),
        ))
    }
}

/// Refuses a database at another schema version than this build's `current`.
fn at_current_schema(version: i64, current: i64) -> StoreResult<()> {
    if version == current {
        return Ok(());
    }
    Err(StoreError::Migration(format!(
        "the database has schema version {version}, this build reads {current}: \
         start `woodlark serve` of this version on it once, or use its own version"
    )))
}

/// Refuses a database whose secrets were sealed with another key than `options`' (one
/// never claimed is accepted: nothing in it is sealed yet).
fn sealed_with(conn: &Tx, options: &StoreOptions) -> StoreResult<()> {
    let (Some(found), Some(expected)) = (&options.sealing_key, meta::get(conn, meta::SEALING_KEY)?)
    else {
        return Ok(());
    };
    same_sealing_key(expected, found)
}

/// A store of `readers` only: no writer thread (writes answer `Closed`), generations that
/// never move, never the leader.
fn readers_only(
    path: &Path,
    dialect: Dialect,
    readers: Vec<Session>,
    async_reads: Option<Arc<pg::reads::AsyncReaders>>,
) -> Store {
    let (_, commits) = tokio::sync::watch::channel(0u64);
    Store {
        inner: Arc::new(Inner {
            path: path.to_path_buf(),
            jobs: Mutex::new(None),
            reader_slots: Arc::new(Semaphore::new(readers.len())),
            readers: Mutex::new(readers),
            writer_thread: Mutex::new(None),
            helper_threads: Mutex::default(),
            stopping: Arc::default(),
            commits,
            generations: Arc::default(),
            catch_ups: Arc::default(),
            dialect,
            leader: Arc::new(tokio::sync::watch::Sender::new(false)),
            elsewhere: Arc::default(),
            revive: None,
            async_reads,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_only_store_reads_refuses_writes_and_leaves_the_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let options = StoreOptions {
            sealing_key: Some("key-a".into()),
            ..StoreOptions::default()
        };
        let store = Store::open(&path, &options).unwrap();
        store.write(|c| meta::set(c, "probe", "1")).await.unwrap();
        store.close();
        drop(store);
        let before = std::fs::read(&path).unwrap();

        let reader = Store::open_read_only(&path, &options).unwrap();
        let probe = reader.read(|c| meta::get(c, "probe")).await.unwrap();
        assert_eq!(probe.as_deref(), Some("1"));
        let refused = reader.write(|c| meta::set(c, "probe", "2")).await;
        assert!(matches!(refused, Err(StoreError::Closed)), "{refused:?}");
        reader.close();
        drop(reader);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the file is unchanged"
        );

        let other_key = StoreOptions {
            sealing_key: Some("key-b".into()),
            ..StoreOptions::default()
        };
        assert!(matches!(
            Store::open_read_only(&path, &other_key),
            Err(StoreError::SealingKeyMismatch { .. })
        ));
        assert!(Store::open_read_only(&dir.path().join("none.sqlite"), &options).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_only_postgres_store_reads_and_refuses_writes_and_other_keys() {
        let url = crate::pg::testing::Cluster::shared().fresh_database();
        let options = StoreOptions {
            sealing_key: Some("key-a".into()),
            ..StoreOptions::default()
        };
        let store = Store::open_postgres(&url, &options).unwrap();
        store.write(|c| meta::set(c, "probe", "1")).await.unwrap();
        store.close();

        let reader = Store::open_postgres_read_only(&url, &options).unwrap();
        assert!(!*reader.leadership().borrow(), "a reader never leads");
        let probe = reader.read(|c| meta::get(c, "probe")).await.unwrap();
        assert_eq!(probe.as_deref(), Some("1"));
        // A one-statement read, on the asynchronous sessions this runtime allows.
        let probe = reader.read_one(|c| meta::get(c, "probe")).await.unwrap();
        assert_eq!(probe.as_deref(), Some("1"));
        let opened = reader
            .inner
            .async_reads
            .as_ref()
            .map(|r| r.sessions_opened());
        assert_eq!(
            opened,
            Some(2),
            "both reads ran on the asynchronous client: the snapshot on a session of its \
             own, the one statement on a shared one"
        );
        let refused = reader.write(|c| meta::set(c, "probe", "2")).await;
        assert!(matches!(refused, Err(StoreError::Closed)), "{refused:?}");
        reader.close();

        let other_key = StoreOptions {
            sealing_key: Some("key-b".into()),
            ..StoreOptions::default()
        };
        let url2 = url.clone();
        let refused = std::thread::spawn(move || Store::open_postgres_read_only(&url2, &other_key))
            .join()
            .unwrap();
        assert!(matches!(
            refused,
            Err(StoreError::SealingKeyMismatch { .. })
        ));
    }

    #[test]
    fn a_database_at_another_schema_is_refused_with_both_versions() {
        assert!(at_current_schema(7, 7).is_ok());
        let Err(StoreError::Migration(text)) = at_current_schema(6, 7) else {
            panic!("an older schema was accepted");
        };
        assert!(text.contains('6') && text.contains('7'), "{text}");
    }
}
