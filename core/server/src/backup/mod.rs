//! Backups of the embedded store (issue 51): `woodlark backup --to DIR`, `woodlark restore
//! --from DIR` and the scheduled backups of `[storage] backup_dir` ([`schedule`]).
//!
//! A backup is a directory: `woodlark.db` and `logs.db`, each an online copy of the live
//! database (`woodlark_store::backup`), `manifest.json` (format, schema versions, every
//! table's row count and checksum, the sealing key's fingerprint) and, only when asked
//! (`--with-key`), `secrets.key`. It is written into a hidden sibling directory and renamed
//! into place at the end, so a directory under the asked name is always a whole backup.
//!
//! A restore fills an empty data dir from a backup after checking every table against the
//! manifest and the key against the backup's fingerprint. The key it uses is the configured
//! one (`storage.secret_key_file`, or `<data_dir>/secrets.key`) when that file exists; only
//! when it does not is the backup's own key (taken `--with-key`) put there.

pub mod schedule;

use std::path::{Path, PathBuf};

use crate::auth::sealing::{KEY_FILE, SealError, SealKey};
use crate::config::Config;
use crate::config::backups::PG_DUMP;
use crate::store::DB_FILE;
pub use crate::store::backup::Pace;
use crate::store::backup::{
    self as copies, BackupError, Copied, Database, FORMAT, MANIFEST_FILE, Manifest,
};
use crate::store::logs::LOGS_FILE;
use crate::store::migrations::CURRENT_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "storage.url is set: this server's data is in PostgreSQL, which woodlark does not copy. \
         Back it up with pg_dump while the replicas run: {PG_DUMP} (keep the key file apart; \
         docs/deployment.md, Backups)"
    )]
    Postgres,
    #[error(
        "storage.url is set: restore a PostgreSQL dump with pg_restore into an empty database \
         (docs/deployment.md, Backups); woodlark restore fills a SQLite data dir"
    )]
    PostgresRestore,
    #[error("no database at {0}: nothing to back up (is server.data_dir right?)")]
    NoDatabase(PathBuf),
    #[error("{0} exists and is not empty: back up into a new or empty directory")]
    TargetNotEmpty(PathBuf),
    #[error(
        "the data dir {path} is not empty (it holds {entry}): restore only into an empty or \
         new data dir"
    )]
    DataDirNotEmpty { path: PathBuf, entry: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("sealing key: {0}")]
    Seal(#[from] SealError),
    #[error(
        "the key file {path} is not this database's key (its fingerprint is {found}, the \
         database's {recorded}): back up with the key the server uses"
    )]
    KeyNotTheDatabases {
        path: PathBuf,
        found: String,
        recorded: String,
    },
    #[error(
        "the backup was taken without its key (fingerprint {fingerprint}) and there is no key \
         at {path}: put the key file the server used there (or point storage.secret_key_file \
         at it) and restore again"
    )]
    NoKey { fingerprint: String, path: PathBuf },
    #[error(
        "the key at {path} has fingerprint {found}, the backup was taken with {expected}: the \
         backup's secrets and tokens open only with its own key; restore with that key"
    )]
    WrongKey {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error(
        "the backup's database has schema version {found}; this woodlark knows {known}: \
         restore it with the version that took it or a newer one"
    )]
    TooNew { found: i64, known: i64 },
    #[error("the manifest names {0:?}, which is no file of a backup")]
    UnknownFile(String),
    #[error(transparent)]
    Copy(#[from] BackupError),
}

type Result<T> = std::result::Result<T, Error>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a backup wrote.
#[derive(Debug)]
pub struct Taken {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Each database's online copy.
    pub copies: Vec<(String, Copied)>,
    /// Log lines left out: of steps the main snapshot does not have.
    pub trimmed_lines: u64,
}

impl Taken {
    /// The longest single step of the copies: the most a copy held anything at once.
    pub fn longest_step(&self) -> std::time::Duration {
        self.copies
            .iter()
            .map(|(_, c)| c.longest_step)
            .max()
            .unwrap_or_default()
    }
}

/// Backs up the data dir of `config` into `target` (new, or an empty directory), with the
/// key file when `with_key`. On any failure nothing is left under `target`'s name.
/// `pace` says how the databases are copied ([`Pace::default`] but for a stop flag).
pub fn take(config: &Config, target: &Path, with_key: bool, pace: &Pace) -> Result<Taken> {
    if !config.storage.url.is_empty() {
        return Err(Error::Postgres);
    }
    let main = config.server.data_dir.join(DB_FILE);
    if !main.is_file() {
        return Err(Error::NoDatabase(main));
    }
    if first_entry(target, None)?.is_some() {
        return Err(Error::TargetNotEmpty(target.to_path_buf()));
    }
    let key_path = config.secret_key_path();
    let key = SealKey::load(&key_path)?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".into());
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let partial = parent.join(format!(
        ".{name}.partial-{}-{}",
        std::process::id(),
        woodlark_stdx::now_unix_ms()
    ));
    private_dir(&partial)?;
    let filled = fill(config, &partial, &key, with_key.then_some(&key_path), pace);
    let done = filled.and_then(|mut taken| {
        // An empty target directory is replaced (rename onto it), a missing one made.
        std::fs::rename(&partial, target).map_err(io(target))?;
        sync_dir(&parent)?;
        taken.dir = target.to_path_buf();
        Ok(taken)
    });
    if done.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    done
}

/// Writes the copies, the manifest and maybe the key into `dir`.
fn fill(
    config: &Config,
    dir: &Path,
    key: &SealKey,
    key_file: Option<&PathBuf>,
    pace: &Pace,
) -> Result<Taken> {
    let data = &config.server.data_dir;
    let mut copied = Vec::new();
    let main_copy = dir.join(DB_FILE);
    copied.push((
        DB_FILE.to_string(),
        copies::copy_online(&data.join(DB_FILE), &main_copy, pace)?,
    ));
    // Second, and trimmed to the main copy's steps (see `woodlark_store::backup`).
    let mut trimmed = 0;
    if data.join(LOGS_FILE).is_file() {
        let logs_copy = dir.join(LOGS_FILE);
        copied.push((
            LOGS_FILE.to_string(),
            copies::copy_online(&data.join(LOGS_FILE), &logs_copy, pace)?,
        ));
        trimmed = copies::trim_logs(&logs_copy, &main_copy)?;
    }
    let fingerprint = key.fingerprint();
    if let Some(recorded) = copies::recorded_key_fingerprint(&main_copy)?
        && recorded != fingerprint
    {
        return Err(Error::KeyNotTheDatabases {
            path: config.secret_key_path(),
            found: fingerprint,
            recorded,
        });
    }
    let databases = copied
        .iter()
        .map(|(file, _)| copies::describe(&dir.join(file), file))
        .collect::<std::result::Result<Vec<Database>, _>>()?;
    let key_name = match key_file {
        Some(path) => {
            copy_private(path, &dir.join(KEY_FILE))?;
            Some(KEY_FILE.to_string())
        }
        None => None,
    };
    let manifest = Manifest {
        format: FORMAT,
        created_unix_ms: woodlark_stdx::now_unix_ms(),
        woodlark_version: env!("CARGO_PKG_VERSION").to_string(),
        key_fingerprint: fingerprint,
        key_file: key_name,
        databases,
    };
    manifest.write(dir)?;
    for file in copied
        .iter()
        .map(|(f, _)| f.as_str())
        .chain([MANIFEST_FILE])
        .chain(manifest.key_file.as_deref())
    {
        sync_file(&dir.join(file))?;
    }
    sync_dir(dir)?;
    Ok(Taken {
        dir: dir.to_path_buf(),
        manifest,
        copies: copied,
        trimmed_lines: trimmed,
    })
}

/// What a restore did.
#[derive(Debug)]
pub struct Restored {
    pub data_dir: PathBuf,
    pub manifest: Manifest,
    /// Where the key the restored data opens with is, and whether the restore put it there.
    pub key_path: PathBuf,
    pub key_from_backup: bool,
}

/// Fills the (empty or missing) data dir of `config` from the backup in `from`.
pub fn restore(config: &Config, from: &Path) -> Result<Restored> {
    if !config.storage.url.is_empty() {
        return Err(Error::PostgresRestore);
    }
    let manifest = Manifest::read(from)?;
    if manifest.format != FORMAT {
        return Err(BackupError::Format {
            found: manifest.format,
        }
        .into());
    }
    for db in &manifest.databases {
        if db.file != DB_FILE && db.file != LOGS_FILE {
            return Err(Error::UnknownFile(db.file.clone()));
        }
        if db.file == DB_FILE && db.schema_version > CURRENT_VERSION {
            return Err(Error::TooNew {
                found: db.schema_version,
                known: CURRENT_VERSION,
            });
        }
    }
    let data = &config.server.data_dir;
    let key_path = config.secret_key_path();
    if let Some(entry) = first_entry(data, Some(&key_path))? {
        return Err(Error::DataDirNotEmpty {
            path: data.clone(),
            entry,
        });
    }
    let (key, backup_key) = if key_path.exists() {
        (SealKey::load(&key_path)?, None)
    } else {
        match manifest.key_file.as_deref() {
            Some(KEY_FILE) => {
                let path = from.join(KEY_FILE);
                (SealKey::load(&path)?, Some(path))
            }
            Some(other) => return Err(Error::UnknownFile(other.to_string())),
            None => {
                return Err(Error::NoKey {
                    fingerprint: manifest.key_fingerprint.clone(),
                    path: key_path,
                });
            }
        }
    };
    if key.fingerprint() != manifest.key_fingerprint {
        return Err(Error::WrongKey {
            path: backup_key.clone().unwrap_or_else(|| key_path.clone()),
            found: key.fingerprint(),
            expected: manifest.key_fingerprint.clone(),
        });
    }
    copies::verify(from, &manifest)?;

    private_dir(data)?;
    #[cfg(unix)]
    {
        // An empty data dir that was there keeps its mode otherwise (as the server does).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o700)).map_err(io(data))?;
    }
    let placed = place(from, data, &manifest, backup_key.as_deref(), &key_path);
    if placed.is_err() {
        for db in &manifest.databases {
            let _ = std::fs::remove_file(data.join(&db.file));
            let _ = std::fs::remove_file(data.join(format!("{}.restoring", db.file)));
        }
        if backup_key.is_some() {
            let _ = std::fs::remove_file(&key_path);
        }
    }
    placed?;
    Ok(Restored {
        data_dir: data.clone(),
        manifest,
        key_path,
        key_from_backup: backup_key.is_some(),
    })
}

/// Copies the databases (and the backup's key) into place and checks the copies again.
fn place(
    from: &Path,
    data: &Path,
    manifest: &Manifest,
    backup_key: Option<&Path>,
    key_path: &Path,
) -> Result<()> {
    for db in &manifest.databases {
        let partial = data.join(format!("{}.restoring", db.file));
        copy_private(&from.join(&db.file), &partial)?;
        sync_file(&partial)?;
        let path = data.join(&db.file);
        std::fs::rename(&partial, &path).map_err(io(&path))?;
    }
    if let Some(key) = backup_key {
        if let Some(parent) = key_path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        copy_private(key, key_path)?;
        sync_file(key_path)?;
    }
    sync_dir(data)?;
    copies::verify(data, manifest)?;
    Ok(())
}

/// The name of an entry of `dir` other than `except`, if `dir` exists and has one.
fn first_entry(dir: &Path, except: Option<&Path>) -> Result<Option<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        if except.is_some_and(|except| entry.path() == except) {
            continue;
        }
        return Ok(Some(entry.file_name().to_string_lossy().into_owned()));
    }
    Ok(None)
}

/// Creates `dir` (and missing parents) accessible to its owner only (0700).
pub(crate) fn private_dir(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(io(dir))
}

/// Copies `from` to the new file `to`, mode 0600.
fn copy_private(from: &Path, to: &Path) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut out = options.open(to).map_err(io(to))?;
    let mut input = std::fs::File::open(from).map_err(io(from))?;
    std::io::copy(&mut input, &mut out).map_err(io(to))?;
    Ok(())
}

fn sync_file(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// Makes the directory's entries (a rename, a new file) durable.
fn sync_dir(path: &Path) -> Result<()> {
    #[cfg(unix)]
    sync_file(path)?;
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}
