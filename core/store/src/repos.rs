//! Repositories activated from a forge, and the per-user permissions on them.
//!
//! The API rendering ([`Repo`]) is stored as a JSON document in `data`; the columns used in
//! look-ups (forge, remote id, org, owner user, full name, active) are kept beside it and win
//! over the document when a row is read. `user_id` (whose forge credentials are used) and
//! `hash` (the key of hook tokens) are never rendered.

use crate::{OptionalExtension, Row};
use crate::{Tx, WriteTx};
use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult, now_unix};

pub const RECORD_TYPE: events::RecordType = events::RecordType::Repos;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Trusted {
    pub network: bool,
    pub volumes: bool,
    pub security: bool,
}

/// Woodpecker's `Repo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repo {
    pub id: i64,
    pub forge_id: i64,
    pub forge_remote_id: String,
    pub org_id: i64,
    pub owner: String,
    pub name: String,
    pub full_name: String,
    pub avatar_url: String,
    pub forge_url: String,
    pub clone_url: String,
    pub clone_url_ssh: String,
    pub default_branch: String,
    pub pr_enabled: bool,
    /// Minutes.
    pub timeout: i64,
    pub visibility: Visibility,
    pub private: bool,
    pub trusted: Trusted,
    pub require_approval: String,
    pub approval_allowed_users: Vec<String>,
    pub active: bool,
    pub allow_pr: bool,
    pub allow_deploy: bool,
    pub config_file: String,
    pub cancel_previous_pipeline_events: Vec<String>,
    pub netrc_trusted: Vec<String>,
    pub config_extension_endpoint: String,
    pub config_extension_exclusive: bool,
    pub config_extension_netrc: bool,
    pub registry_extension_endpoint: String,
    pub registry_extension_netrc: bool,
    pub secret_extension_endpoint: String,
    pub secret_extension_netrc: bool,
    pub has_forge_name_conflict: bool,
    pub has_no_forge_repo: bool,
}

/// Who may see a repository without a permission of their own: anyone (`public`), any
/// signed-in user (`internal`), or nobody (`private`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    Public,
    Private,
    Internal,
}

impl Visibility {
    pub const ALL: [Visibility; 3] = [
        Visibility::Public,
        Visibility::Private,
        Visibility::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "public",
            Visibility::Private => "private",
            Visibility::Internal => "internal",
        }
    }

    /// The visibility named `text`, if it is one.
    pub fn parse(text: &str) -> Option<Visibility> {
        Visibility::ALL.into_iter().find(|v| v.as_str() == text)
    }
}
pub const APPROVAL_MODES: &[&str] = &["none", "forks", "pull_requests", "all_events"];
/// Default pipeline timeout, minutes (as upstream).
pub const DEFAULT_TIMEOUT: i64 = 60;

/// A repository row with the fields the API never shows.
#[derive(Debug, Clone)]
pub struct RepoRow {
    pub repo: Repo,
    pub user_id: i64,
    pub hash: String,
}

const COLUMNS: &str =
    "id, forge_id, forge_remote_id, org_id, user_id, full_name, active, hash, data";

fn from_row(r: &Row<'_>) -> rusqlite::Result<RepoRow> {
    let mut repo: Repo = super::json_column(r, 8)?;
    repo.id = r.get(0)?;
    repo.forge_id = r.get(1)?;
    repo.forge_remote_id = r.get(2)?;
    repo.org_id = r.get(3)?;
    repo.full_name = r.get(5)?;
    repo.active = r.get(6)?;
    Ok(RepoRow {
        repo,
        user_id: r.get(4)?,
        hash: r.get(7)?,
    })
}

pub fn owner_of(repo: &Repo) -> Owner {
    Owner {
        org_id: Some(repo.org_id),
        repo_id: Some(repo.id),
    }
}

pub fn by_id(conn: &Tx, id: i64) -> StoreResult<RepoRow> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM repos WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

pub fn by_remote_id(conn: &Tx, forge_id: i64, remote_id: &str) -> StoreResult<Option<RepoRow>> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM repos WHERE forge_id = ?1 AND forge_remote_id = ?2"),
        params![forge_id, remote_id],
        from_row,
    )
    .optional()
}

/// By `owner/name`; when several forges have one, the lowest id wins.
pub fn by_full_name(conn: &Tx, full_name: &str) -> StoreResult<RepoRow> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM repos WHERE full_name = ?1 ORDER BY id LIMIT 1"),
        [full_name],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

/// Every repository (admin listing), optionally only active or inactive ones.
pub fn list(conn: &Tx, active: Option<bool>, page: u32, per_page: u32) -> StoreResult<Vec<Repo>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM repos WHERE (CAST(?1 AS INTEGER) IS NULL OR active = ?1)
         ORDER BY full_name, id LIMIT ?2 + 0 OFFSET ?3"
    ))?;
    let rows = stmt.query_map(params![active, per_page, offset], from_row)?;
    Ok(rows
        .map(|r| r.map(|row| row.repo))
        .collect::<Result<_, _>>()?)
}

/// Every repository of an organisation.
pub fn in_org(conn: &Tx, org_id: i64) -> StoreResult<Vec<RepoRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM repos WHERE org_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([org_id], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn data_of(repo: &Repo) -> StoreResult<String> {
    Ok(serde_json::to_string(repo)?)
}

/// Inserts a newly activated repository owned by `user_id`. Records `repos.created`.
pub fn create(conn: &WriteTx, repo: &Repo, user_id: i64, hash: &str) -> StoreResult<RepoRow> {
    conn.cached_exec(
        "INSERT INTO repos (forge_id, forge_remote_id, org_id, user_id, full_name, active, hash, data, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            repo.forge_id,
            repo.forge_remote_id,
            repo.org_id,
            user_id,
            repo.full_name,
            repo.active,
            hash,
            data_of(repo)?,
            now_unix()
        ],
    )?;
    let row = by_id(conn, conn.last_insert_rowid()?)?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        row.repo.id,
        &row.repo,
        owner_of(&row.repo),
    )?;
    Ok(row)
}

/// Writes `repo` (and optionally a new owner user) over the stored row. Records
/// `repos.updated` with the previous values when the rendering changed.
pub fn update(conn: &WriteTx, repo: &Repo, user_id: Option<i64>) -> StoreResult<RepoRow> {
    let before = by_id(conn, repo.id)?;
    conn.cached_exec(
        "UPDATE repos SET forge_id = ?2, forge_remote_id = ?3, org_id = ?4, full_name = ?5,
            active = ?6, data = ?7, user_id = coalesce(?8, user_id)
         WHERE id = ?1",
        params![
            repo.id,
            repo.forge_id,
            repo.forge_remote_id,
            repo.org_id,
            repo.full_name,
            repo.active,
            data_of(repo)?,
            user_id
        ],
    )?;
    let after = by_id(conn, repo.id)?;
    events::append_update(
        conn,
        RECORD_TYPE,
        after.repo.id,
        &before.repo,
        &after.repo,
        owner_of(&after.repo),
    )?;
    Ok(after)
}

/// Deletes a repository and everything that belongs only to it (pipelines with their
/// workflows, steps, queue entries and configs; permissions, secrets, registries, cron jobs),
/// recording the events of each in this same transaction. Step logs live in the logs database:
/// the caller deletes [`Removed::step_ids`] there (the sweep catches them after a crash).
pub fn delete(conn: &WriteTx, id: i64) -> StoreResult<Removed> {
    let row = by_id(conn, id)?;
    let mut step_ids = Vec::new();
    for pipeline in super::pipelines::ids_of_repo(conn, id)? {
        step_ids.extend(super::pipelines::delete(conn, pipeline)?);
    }
    conn.cached_exec("DELETE FROM configs WHERE repo_id = ?1", [id])?;
    conn.cached_exec("DELETE FROM perms WHERE repo_id = ?1", [id])?;
    super::crons::delete_scope(conn, id)?;
    super::secrets::delete_scope(conn, 0, id)?;
    super::registries::delete_scope(conn, 0, id)?;
    super::deliveries::delete_repo(conn, id)?;
    conn.cached_exec("DELETE FROM repos WHERE id = ?1", [id])?;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Deleted,
        id,
        &row.repo,
        owner_of(&row.repo),
    )?;
    Ok(Removed {
        repo: row.repo,
        step_ids,
    })
}

/// A deleted repository and the steps whose logs (in the logs database) are to go too.
#[derive(Debug)]
pub struct Removed {
    pub repo: Repo,
    pub step_ids: Vec<i64>,
}

/// Woodpecker's `Perm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Perm {
    pub pull: bool,
    pub push: bool,
    pub admin: bool,
    pub synced: i64,
    pub created: i64,
    pub updated: i64,
}

impl Perm {
    pub fn all() -> Perm {
        Perm {
            pull: true,
            push: true,
            admin: true,
            ..Perm::default()
        }
    }

    pub fn pull_only() -> Perm {
        Perm {
            pull: true,
            ..Perm::default()
        }
    }
}

/// A user's stored permission on a repository, if any.
pub fn perm(conn: &Tx, user_id: i64, repo_id: i64) -> StoreResult<Option<Perm>> {
    conn
        .cached_row(
            "SELECT pull, push, admin, synced, created, updated FROM perms WHERE user_id = ?1 AND repo_id = ?2",
            params![user_id, repo_id],
            |r| {
                Ok(Perm {
                    pull: r.get(0)?,
                    push: r.get(1)?,
                    admin: r.get(2)?,
                    synced: r.get(3)?,
                    created: r.get(4)?,
                    updated: r.get(5)?,
                })
            },
        )
        .optional()
}

/// Stores a user's permission on a repository (as synced from the forge now).
pub fn set_perm(conn: &WriteTx, user_id: i64, repo_id: i64, perm: Perm) -> StoreResult<()> {
    let now = now_unix();
    conn.cached_exec(
        "INSERT INTO perms (user_id, repo_id, pull, push, admin, synced, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?6)
         ON CONFLICT (user_id, repo_id) DO UPDATE SET
            pull = excluded.pull, push = excluded.push, admin = excluded.admin,
            synced = excluded.synced, updated = excluded.updated",
        params![user_id, repo_id, perm.pull, perm.push, perm.admin, now],
    )?;
    Ok(())
}

/// Removes every permission user `user_id` holds on a repository of forge `forge_id` (that
/// forge refused them: what it granted goes); how many there were.
pub fn drop_forge_perms(conn: &WriteTx, user_id: i64, forge_id: i64) -> StoreResult<usize> {
    conn.cached_exec(
        "DELETE FROM perms WHERE user_id = ?1
            AND repo_id IN (SELECT id FROM repos WHERE forge_id = ?2)",
        params![user_id, forge_id],
    )
}

/// Makes user `user_id`'s permissions on the repositories of forge `forge_id` what the forge
/// listed (`listed`: the forge's remote id and the permission): a listed repository stored
/// here gets its permission, and a stored one the forge no longer lists for the user loses
/// theirs (they were removed from it).
pub fn replace_forge_perms(
    conn: &WriteTx,
    user_id: i64,
    forge_id: i64,
    listed: &[(String, Perm)],
) -> StoreResult<()> {
    let mut kept = std::collections::HashSet::new();
    for (remote_id, perm) in listed {
        let stored: Option<i64> = conn
            .cached_row(
                "SELECT id FROM repos WHERE forge_id = ?1 AND forge_remote_id = ?2",
                params![forge_id, remote_id],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(repo_id) = stored {
            set_perm(conn, user_id, repo_id, *perm)?;
            kept.insert(repo_id);
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT p.repo_id FROM perms p JOIN repos r ON r.id = p.repo_id
         WHERE p.user_id = ?1 AND r.forge_id = ?2",
    )?;
    let held = stmt
        .query_map(params![user_id, forge_id], |r| r.get(0))?
        .collect::<Result<Vec<i64>, _>>()?;
    for repo_id in held.into_iter().filter(|id| !kept.contains(id)) {
        conn.cached_exec(
            "DELETE FROM perms WHERE user_id = ?1 AND repo_id = ?2",
            params![user_id, repo_id],
        )?;
    }
    Ok(())
}

/// Makes every permission of `user_id` look synced `secs` earlier (tests of the re-check
/// outside the store, which hold no SQL; feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub fn backdate_perms(conn: &WriteTx, user_id: i64, secs: i64) -> StoreResult<()> {
    conn.execute(
        "UPDATE perms SET synced = synced - ?2 WHERE user_id = ?1",
        params![user_id, secs],
    )?;
    Ok(())
}

/// The repositories a user owns in upstream's sense (`RepoList(user, owned=true)`): those
/// in their own namespace (they administer it) and those they may push to or administer, by
/// full name. Not those they may merely pull, and not every repository for an instance
/// admin: it is the home page's list, and upstream shows there only what the user works on.
pub fn owned_by(conn: &Tx, user_id: i64, own_org_id: i64) -> StoreResult<Vec<RepoRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM repos
         WHERE org_id = ?2
            OR id IN (SELECT repo_id FROM perms WHERE user_id = ?1 AND (push != 0 OR admin != 0))
         ORDER BY full_name"
    ))?;
    let rows = stmt.query_map(params![user_id, own_org_id], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What a non-admin user may read: ids of the repositories they can pull (public and
/// internal ones, those in their own namespace, those they hold a permission on) and of the
/// organisations they belong to (their own, and those where they may push somewhere).
pub fn readable_ids(conn: &Tx, user_id: i64, own_org_id: i64) -> StoreResult<(Vec<i64>, Vec<i64>)> {
    let visibility = match conn.dialect() {
        crate::Dialect::Sqlite => "json_extract(data, '$.visibility')",
        crate::Dialect::Postgres => "(data::json ->> 'visibility')",
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id FROM repos
         WHERE {visibility} IN ('public', 'internal')
            OR org_id = ?2
            OR id IN (SELECT repo_id FROM perms
                      WHERE user_id = ?1 AND (pull != 0 OR push != 0 OR admin != 0))"
    ))?;
    let repos = stmt
        .query_map(params![user_id, own_org_id], |r| r.get(0))?
        .collect::<Result<Vec<i64>, _>>()?;
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT r.org_id FROM perms p JOIN repos r ON r.id = p.repo_id
         WHERE p.user_id = ?1 AND (p.push != 0 OR p.admin != 0)",
    )?;
    let mut orgs = stmt
        .query_map([user_id], |r| r.get(0))?
        .collect::<Result<Vec<i64>, _>>()?;
    if own_org_id != 0 && !orgs.contains(&own_org_id) {
        orgs.push(own_org_id);
    }
    Ok((repos, orgs))
}

/// A bare repository row (with a `git` forge row of its own) for unit tests outside the
/// store, which hold no SQL (feature `test-support`, a dev-dependency of the server).
#[cfg(any(test, feature = "test-support"))]
pub fn insert_bare(conn: &WriteTx, org_id: i64, user_id: i64, full_name: &str) -> StoreResult<i64> {
    conn.execute(
        "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///x', '{}', 's')",
        [],
    )?;
    conn.execute(
        "INSERT INTO repos (forge_id, forge_remote_id, org_id, user_id, full_name, active, hash, data, created)
         VALUES (?1, ?2, ?3, ?4, ?2, 1, 'h', '{}', 0)",
        params![conn.last_insert_rowid()?, full_name, org_id, user_id],
    )?;
    conn.last_insert_rowid()
}

/// The strongest permission `user_id` holds on any repository of `org_id`.
pub fn best_perm_in_org(conn: &Tx, user_id: i64, org_id: i64) -> StoreResult<Perm> {
    let (push, admin): (bool, bool) = conn.cached_row(
        "SELECT coalesce(max(p.push), 0), coalesce(max(p.admin), 0)
         FROM perms p JOIN repos r ON r.id = p.repo_id
         WHERE p.user_id = ?1 AND r.org_id = ?2",
        params![user_id, org_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(Perm {
        pull: push || admin,
        push,
        admin,
        ..Perm::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::migrate;
    use crate::users::{self, EnvAdmins, NewUser};

    #[test]
    fn a_forge_s_listing_and_refusal_replace_only_its_own_permissions() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let c = &WriteTx::new(&conn);
        let new = NewUser {
            login: "alice".into(),
            token_seed: "seed".into(),
            ..NewUser::default()
        };
        let alice = users::create(c, &EnvAdmins::default(), &new)
            .unwrap()
            .user
            .id;
        // Each bare repository comes with a forge of its own.
        let (a, b, other) = (
            insert_bare(c, 0, alice, "o/a").unwrap(),
            insert_bare(c, 0, alice, "o/b").unwrap(),
            insert_bare(c, 0, alice, "p/c").unwrap(),
        );
        // Put `b` on `a`'s forge: one forge, two repositories.
        let forge: i64 = c
            .cached_row("SELECT forge_id FROM repos WHERE id = ?1", [a], |r| {
                r.get(0)
            })
            .unwrap();
        c.execute(
            "UPDATE repos SET forge_id = ?1 WHERE id = ?2",
            params![forge, b],
        )
        .unwrap();
        for id in [a, b, other] {
            set_perm(c, alice, id, Perm::all()).unwrap();
        }
        // The forge lists `a` (now pull only) but not `b` any more.
        replace_forge_perms(c, alice, forge, &[("o/a".into(), Perm::pull_only())]).unwrap();
        let pull = perm(c, alice, a).unwrap().unwrap();
        assert!(pull.pull && !pull.push && !pull.admin);
        assert_eq!(perm(c, alice, b).unwrap(), None);
        assert!(perm(c, alice, other).unwrap().is_some(), "another forge's");
        // The forge refuses alice: what it granted goes, the other forge's stays.
        assert_eq!(drop_forge_perms(c, alice, forge).unwrap(), 1);
        assert_eq!(perm(c, alice, a).unwrap(), None);
        assert!(perm(c, alice, other).unwrap().is_some());
        // Backdated (for tests elsewhere): the sync time moves, nothing else.
        let before = perm(c, alice, other).unwrap().unwrap();
        backdate_perms(c, alice, 600).unwrap();
        let after = perm(c, alice, other).unwrap().unwrap();
        assert_eq!(after.synced, before.synced - 600);
        assert!(after.admin);
    }
}
