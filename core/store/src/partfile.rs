//! algod's partkey file: an SQLite database (`ParticipationAccount`, `schema`,
//! `StateProofKeys`), read from an untrusted upload and written for export. It lives in the
//! store because it is SQLite; what its blobs mean (msgpack key material) is the
//! participation module's business, which decodes every value of a [`PartFile`] before
//! anything is stored.
//!
//! Reading trusts nothing in the file: the bytes must start with the SQLite header, the file
//! is opened read-only and `immutable` (no journal, WAL or locking files are touched), with
//! `trusted_schema=OFF`; the objects read must be plain tables (a view or trigger could run
//! arbitrary SQL); every column's storage type is checked, and the parent address must be 32
//! non-zero bytes. Schema versions 1-3 are read (1 and 2 lack `keyDilution` / `stateProof`,
//! as algod migrates).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, params};

/// The rows of a partkey file, as stored: the secret parts are algod's msgpack bytes, kept
/// exactly as read so a key can be written back byte-compatible with its source.
#[derive(Clone, PartialEq, Eq)]
pub struct PartFile {
    pub parent: [u8; 32],
    pub first_valid: u64,
    pub last_valid: u64,
    pub key_dilution: u64,
    /// msgpack VRF secrets.
    pub vrf: Vec<u8>,
    /// msgpack voting secrets.
    pub voting: Vec<u8>,
    /// msgpack state-proof secrets (public Merkle tree data), if the key has any.
    pub state_proof: Option<Vec<u8>>,
    /// State-proof signing keys: (round, msgpack `FalconSigner`).
    pub state_proof_keys: Vec<(u64, Vec<u8>)>,
}

impl std::fmt::Debug for PartFile {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartFile")
            .field("first_valid", &self.first_valid)
            .field("last_valid", &self.last_valid)
            .field("key_dilution", &self.key_dilution)
            .field("state_proof_keys", &self.state_proof_keys.len())
            .finish_non_exhaustive()
    }
}

/// The latest partkey file schema version (algod's `PartTableSchemaVersion`).
pub const SCHEMA_VERSION: i64 = 3;
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file is not a usable partkey file; the message is for the client.
    #[error("{0}")]
    Bad(String),
    /// The server could not stage the upload (disk full, permissions).
    #[error("{0}")]
    Internal(String),
}

fn bad(message: impl Into<String>) -> ReadError {
    ReadError::Bad(message.into())
}

/// A temporary copy of the upload, readable only by the owner, removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn stage(bytes: &[u8], dir: &Path) -> Result<TempFile, ReadError> {
    use std::io::Write;
    let name: String = woodlark_stdx::random_bytes(8)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = dir.join(format!(".partkey-upload-{name}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let internal = |e: std::io::Error| ReadError::Internal(format!("{}: {e}", path.display()));
    let mut file = options.open(&path).map_err(internal)?;
    let guard = TempFile(path.clone());
    file.write_all(bytes).map_err(internal)?;
    Ok(guard)
}

/// `file:` URI of a path (RFC 3986 percent-encoding of everything but unreserved and `/`).
fn file_uri(path: &Path) -> String {
    let mut out = String::from("file:");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push_str("?immutable=1");
    out
}

/// Reads a partkey file from `bytes`, staging it in `tmp_dir` for SQLite. Blocking. The
/// blobs are not decoded here: the caller must validate them before trusting them.
pub fn read(bytes: &[u8], tmp_dir: &Path) -> Result<PartFile, ReadError> {
    if !bytes.starts_with(SQLITE_MAGIC) || bytes.len() < 512 {
        return Err(bad(
            "the request body is not a participation key file: expected the SQLite database of a .partkey file",
        ));
    }
    let staged = stage(bytes, tmp_dir)?;
    let conn = Connection::open_with_flags(
        file_uri(&staged.0),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| bad(format!("cannot open the participation key file: {e}")))?;
    let result = read_conn(&conn);
    drop(conn);
    drop(staged);
    result
}

fn sql_err(e: rusqlite::Error) -> ReadError {
    bad(format!("participation key file: {e}"))
}

fn read_conn(conn: &Connection) -> Result<PartFile, ReadError> {
    conn.pragma_update(None, "trusted_schema", "OFF")
        .map_err(sql_err)?;
    conn.pragma_update(None, "cell_size_check", "ON")
        .map_err(sql_err)?;

    let mut objects: HashMap<String, String> = HashMap::new();
    {
        let mut stmt = conn
            .prepare("SELECT name, type FROM sqlite_master")
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(sql_err)?;
        for row in rows {
            let (name, ty) = row.map_err(sql_err)?;
            objects.insert(name, ty);
        }
    }
    let table = |name: &str| -> Result<bool, ReadError> {
        match objects.get(name).map(String::as_str) {
            None => Ok(false),
            Some("table") => Ok(true),
            Some(other) => Err(bad(format!(
                "participation key file: {name} is a {other}, not a table"
            ))),
        }
    };
    if !table("schema")? {
        return Err(bad(
            "unsupported participation file schema version (expected 3): the file has no schema table",
        ));
    }
    if !table("ParticipationAccount")? {
        return Err(bad(
            "participation key file: the ParticipationAccount table is missing",
        ));
    }
    let has_keys_table = table("StateProofKeys")?;

    let version: Option<i64> = conn
        .query_row(
            "SELECT version FROM schema WHERE tablename = 'parttable'",
            [],
            |r| r.get::<_, Option<i64>>(0),
        )
        .map_err(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => bad(
                "unsupported participation file schema version (expected 3): no parttable version",
            ),
            other => sql_err(other),
        })?;
    let version = version.unwrap_or(0);
    if !(1..=SCHEMA_VERSION).contains(&version) {
        return Err(bad(format!(
            "unsupported participation file schema version {version} (this server reads versions 1 to {SCHEMA_VERSION})"
        )));
    }

    let mut columns = Vec::new();
    {
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_table_info('ParticipationAccount')")
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(sql_err)?;
        for row in rows {
            columns.push(row.map_err(sql_err)?);
        }
    }
    for required in ["parent", "vrf", "voting", "firstValid", "lastValid"] {
        if !columns.iter().any(|c| c == required) {
            return Err(bad(format!(
                "participation key file: ParticipationAccount has no {required} column"
            )));
        }
    }
    let dilution_col = if columns.iter().any(|c| c == "keyDilution") {
        "keyDilution"
    } else {
        "0"
    };
    let state_proof_col = if columns.iter().any(|c| c == "stateProof") {
        "stateProof"
    } else {
        "NULL"
    };

    let rows: i64 = conn
        .query_row("SELECT count(*) FROM ParticipationAccount", [], |r| {
            r.get(0)
        })
        .map_err(sql_err)?;
    if rows != 1 {
        return Err(bad(format!(
            "participation key file: expected exactly one ParticipationAccount row, found {rows}"
        )));
    }

    let mut key = conn
        .query_row(
            &format!(
                "SELECT parent, vrf, voting, firstValid, lastValid, {dilution_col}, {state_proof_col} FROM ParticipationAccount"
            ),
            [],
            |r| {
                Ok((
                    blob(r.get_ref(0)?, "parent"),
                    blob(r.get_ref(1)?, "vrf"),
                    blob(r.get_ref(2)?, "voting"),
                    uint(r.get_ref(3)?, "firstValid"),
                    uint(r.get_ref(4)?, "lastValid"),
                    uint(r.get_ref(5)?, "keyDilution"),
                    optional_blob(r.get_ref(6)?, "stateProof"),
                ))
            },
        )
        .map_err(sql_err)
        .and_then(|(parent, vrf, voting, first, last, dilution, state_proof)| {
            let parent = parent?;
            let parent: [u8; 32] = parent.as_slice().try_into().map_err(|_| {
                bad(format!(
                    "participation key file: the parent address must be 32 bytes, found {}",
                    parent.len()
                ))
            })?;
            if parent == [0; 32] {
                return Err(bad(
                    "cannot install partkey with missing (zero) parent address",
                ));
            }
            Ok(PartFile {
                parent,
                vrf: vrf?,
                voting: voting?,
                first_valid: first?,
                last_valid: last?,
                key_dilution: dilution?,
                state_proof: state_proof?,
                state_proof_keys: Vec::new(),
            })
        })?;

    if key.state_proof.is_some() {
        if !has_keys_table {
            return Err(bad(
                "participation key file: the key has state proof data but no StateProofKeys table",
            ));
        }
        let mut stmt = conn
            .prepare("SELECT round, key FROM StateProofKeys ORDER BY round")
            .map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((uint(r.get_ref(0)?, "round"), blob(r.get_ref(1)?, "key")))
            })
            .map_err(sql_err)?;
        for row in rows {
            let (round, signer) = row.map_err(sql_err)?;
            key.state_proof_keys.push((round?, signer?));
        }
    }

    Ok(key)
}

fn blob(v: ValueRef<'_>, column: &str) -> Result<Vec<u8>, ReadError> {
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(b.to_vec()),
        ValueRef::Null => Err(bad(format!(
            "participation key file: column {column} is NULL"
        ))),
        _ => Err(bad(format!(
            "participation key file: column {column} must be a blob"
        ))),
    }
}

fn optional_blob(v: ValueRef<'_>, column: &str) -> Result<Option<Vec<u8>>, ReadError> {
    match v {
        ValueRef::Null => Ok(None),
        ValueRef::Blob([]) | ValueRef::Text([]) => Ok(None),
        other => blob(other, column).map(Some),
    }
}

fn uint(v: ValueRef<'_>, column: &str) -> Result<u64, ReadError> {
    match v {
        ValueRef::Integer(i) if i >= 0 => Ok(i as u64),
        ValueRef::Integer(i) => Err(bad(format!(
            "participation key file: column {column} is negative ({i})"
        ))),
        _ => Err(bad(format!(
            "participation key file: column {column} must be an integer"
        ))),
    }
}

/// Why a partkey file could not be written (SQLite's message, naming the cause).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WriteError(#[from] rusqlite::Error);

/// Writes `key` as a version-3 partkey file at `path` (which must not exist yet).
pub fn write(key: &PartFile, path: &Path) -> Result<(), WriteError> {
    Ok(write_rows(key, path)?)
}

fn write_rows(key: &PartFile, path: &Path) -> rusqlite::Result<()> {
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let tx = conn.transaction()?;
    tx.execute_batch(
        "CREATE TABLE ParticipationAccount (
            parent BLOB,
            vrf BLOB,
            voting BLOB,
            firstValid INTEGER,
            lastValid INTEGER,
            keyDilution INTEGER NOT NULL DEFAULT 0,
            stateProof BLOB
        );
        CREATE TABLE schema (tablename TEXT PRIMARY KEY, version INTEGER);
        CREATE TABLE StateProofKeys (id INTEGER PRIMARY KEY, round INTEGER, key BLOB);
        CREATE UNIQUE INDEX roundIdx ON StateProofKeys (round);",
    )?;
    tx.execute(
        "INSERT INTO schema (tablename, version) VALUES ('parttable', ?1), ('merklesignaturescheme', 1)",
        [SCHEMA_VERSION],
    )?;
    tx.execute(
        "INSERT INTO ParticipationAccount (parent, vrf, voting, firstValid, lastValid, keyDilution, stateProof)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            &key.parent[..],
            key.vrf,
            key.voting,
            key.first_valid as i64,
            key.last_valid as i64,
            key.key_dilution as i64,
            key.state_proof,
        ],
    )?;
    for (round, signer) in &key.state_proof_keys {
        tx.execute(
            "INSERT INTO StateProofKeys (round, key) VALUES (?1, ?2)",
            params![*round as i64, signer],
        )?;
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's rows with made-up blobs (the store does not decode them).
    fn sample() -> PartFile {
        PartFile {
            parent: [3; 32],
            first_valid: 100,
            last_valid: 5000,
            key_dilution: 71,
            vrf: vec![0x82, 1, 2, 3],
            voting: vec![0x87, 4, 5],
            state_proof: Some(vec![0x83, 9]),
            state_proof_keys: vec![(256, vec![1, 2]), (512, vec![3, 4])],
        }
    }

    fn file_bytes(key: &PartFile) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.partkey");
        write(key, &path).unwrap();
        std::fs::read(&path).unwrap()
    }

    #[test]
    fn round_trip() {
        let key = sample();
        let bytes = file_bytes(&key);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(&bytes, dir.path()).unwrap(), key);
        // The staged copy is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let without = PartFile {
            state_proof: None,
            state_proof_keys: Vec::new(),
            ..sample()
        };
        assert_eq!(read(&file_bytes(&without), dir.path()).unwrap(), without);
    }

    #[test]
    fn wal_mode_files_are_read() {
        // algod opens partkey files with journal_mode=WAL, which stays in the header.
        let key = sample();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.partkey");
        write(&key, &path).unwrap();
        let c = Connection::open(&path).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(c);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!((bytes[18], bytes[19]), (2, 2), "WAL mode is in the header");
        let staging = tempfile::tempdir().unwrap();
        assert_eq!(read(&bytes, staging.path()).unwrap(), key);
    }

    #[test]
    fn bad_files_are_rejected_with_messages() {
        let dir = tempfile::tempdir().unwrap();
        let msg = |bytes: &[u8]| match read(bytes, dir.path()) {
            Err(ReadError::Bad(m)) => m,
            other => panic!("expected a bad-file error, got {other:?}"),
        };
        assert!(msg(b"hello").contains("not a participation key file"));
        // A valid SQLite file that is not a partkey file.
        let other = dir.path().join("other.db");
        let c = Connection::open(&other).unwrap();
        c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        drop(c);
        let bytes = std::fs::read(&other).unwrap();
        std::fs::remove_file(&other).unwrap();
        assert!(msg(&bytes).contains("no schema table"), "{}", msg(&bytes));

        // Truncated / corrupted partkey file.
        let good = file_bytes(&sample());
        let mut corrupt = good.clone();
        for b in corrupt.iter_mut().skip(100).take(3000) {
            *b = 0x5a;
        }
        let m = msg(&corrupt);
        assert!(
            m.contains("participation key file") || m.contains("cannot open"),
            "{m}"
        );
        let m = msg(&good[..good.len() / 2]);
        assert!(!m.is_empty());
        let zero = file_bytes(&PartFile {
            parent: [0; 32],
            ..sample()
        });
        assert!(msg(&zero).contains("missing (zero) parent address"));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn views_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE schema (tablename TEXT PRIMARY KEY, version INTEGER);
             INSERT INTO schema VALUES ('parttable', 3);
             CREATE VIEW ParticipationAccount AS SELECT 1 AS parent;",
        )
        .unwrap();
        drop(c);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        match read(&bytes, dir.path()) {
            Err(ReadError::Bad(m)) => assert!(m.contains("is a view"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn uri_escapes() {
        assert_eq!(
            file_uri(Path::new("/a b/c?d#e%")),
            "file:/a%20b/c%3Fd%23e%25?immutable=1"
        );
    }
}
