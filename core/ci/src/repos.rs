//! Repositories: activating one (hook installed on its forge), saving its settings, handing
//! it to another owner, moving it to a new name, repairing its hook, deactivating or removing
//! it. Who may do each is the caller's business; what happens is decided here.

use std::sync::Arc;

use super::forge::drivers::ForgeHandle;
use super::forge::{self, ForgeDriver, RemoteRepo};
use super::{Error, Services};
use crate::auth::{random_secret, token};
use crate::store::repos::{self, Perm, Repo, RepoRow};
use crate::store::users::User;
use crate::store::{logs, orgs};

/// The URL a forge posts pushes to for this repository.
pub fn hook_url(ci: &Services, forge_id: i64, remote_id: &str, hash: &str) -> String {
    format!(
        "{}{}/hook?access_token={}",
        ci.settings.public_url.get(),
        ci.settings.mount,
        token::hook_token(forge_id, remote_id, hash)
    )
}

/// Copies what the forge knows (names, URLs, default branch) onto a stored repository.
pub fn refresh_from_forge(repo: &mut Repo, remote: &RemoteRepo) {
    repo.forge_remote_id = remote.forge_remote_id.clone();
    repo.owner = remote.owner.clone();
    repo.name = remote.name.clone();
    repo.full_name = format!("{}/{}", remote.owner, remote.name);
    repo.forge_url = remote.forge_url.clone();
    repo.clone_url = remote.clone_url.clone();
    repo.default_branch = remote.default_branch.clone();
    repo.avatar_url = remote.avatar_url.clone();
}

/// Activates `remote` on forge `forge_id` for user `user_id` (who becomes its owner and
/// admin): installs the hook, then records the repository — re-activating the stored one
/// (`existing`, keeping its hook secret) or creating it. A failed write removes the hook
/// again. Conflict when it is active already.
pub async fn activate(
    ci: &Services,
    forge: &ForgeHandle,
    remote: RemoteRepo,
    existing: Option<RepoRow>,
    user_id: i64,
) -> Result<RepoRow, Error> {
    if existing.as_ref().is_some_and(|row| row.repo.active) {
        return Err(Error::Conflict("Repository is already active.".into()));
    }
    let forge_id = forge.row.forge.id;
    // The hook is created as the activating user, and later calls act as them (the owner).
    // Acting as them, the forge must say they administer the repository.
    let as_user = ci.tokens.as_user(forge, user_id).await?;
    let driver = as_user.clone().unwrap_or_else(|| forge.driver.clone());
    let hash = existing
        .as_ref()
        .map(|row| row.hash.clone())
        .unwrap_or_else(random_secret);
    let url = hook_url(ci, forge_id, &remote.forge_remote_id, &hash);
    let mut repo = remote.new_repo(forge_id, 0);
    let cleanup = repo.clone();
    if let Some(as_user) = &as_user {
        must_administer(as_user.as_ref(), &repo, "activating").await?;
    }
    driver.activate(&repo, &url).await?;
    let written = ci
        .store
        .write(move |c| {
            let org = orgs::find_or_create(c, forge_id, &remote.owner)?;
            let row = match existing {
                Some(mut row) => {
                    refresh_from_forge(&mut row.repo, &remote);
                    row.repo.org_id = org.id;
                    row.repo.active = true;
                    repos::update(c, &row.repo, Some(user_id))?
                }
                None => {
                    repo.org_id = org.id;
                    repos::create(c, &repo, user_id, &hash)?
                }
            };
            repos::set_perm(c, user_id, row.repo.id, Perm::all())?;
            Ok(row)
        })
        .await;
    match written {
        Ok(row) => {
            tracing::info!(repo = row.repo.full_name, user_id, "repository activated");
            Ok(row)
        }
        Err(err) => {
            // Leave no hook behind for a repository we did not record.
            let _ = driver.deactivate(&cleanup).await;
            Err(err.into())
        }
    }
}

/// Stores a repository's changed settings.
pub async fn save(ci: &Services, repo: Repo) -> Result<RepoRow, Error> {
    Ok(ci
        .store
        .write(move |c| repos::update(c, &repo, None))
        .await?)
}

/// Removes the hook (a forge that cannot be reached is logged, not fatal) and marks the
/// repository inactive; with `remove`, deletes it and everything that belongs to it, logs
/// included. Returns the repository as it was left.
pub async fn deactivate(ci: &Services, mut repo: Repo, remove: bool) -> Result<Repo, Error> {
    if let Err(err) = remove_hook(ci, &repo).await {
        tracing::warn!(repo = repo.full_name, error = %err, "could not remove the hook");
    }
    repo.active = false;
    let r = repo.clone();
    let step_ids = ci
        .store
        .write(move |c| {
            if remove {
                repos::delete(c, r.id).map(|removed| removed.step_ids)
            } else {
                repos::update(c, &r, None).map(|_| Vec::new())
            }
        })
        .await?;
    if !step_ids.is_empty() {
        ci.logs
            .write(move |c| logs::delete_steps(c, &step_ids))
            .await?;
    }
    tracing::info!(repo = repo.full_name, remove, "repository deactivated");
    Ok(repo)
}

/// Removes `repo`'s hook from its forge, as the repository's owner.
async fn remove_hook(ci: &Services, repo: &Repo) -> Result<(), Error> {
    let id = repo.id;
    let row = ci.store.read(move |c| repos::by_id(c, id)).await?;
    let forge = ci.drivers.get(repo.forge_id).await?;
    let driver = ci.tokens.for_repo(&forge, &row).await;
    Ok(driver.deactivate(repo).await?)
}

/// The repository `remote_id` names on the forge `driver` speaks to. Adapters look
/// repositories up by full name, while clients pass the forge's own id (the web UI's "add
/// repository" list sends `forge_remote_id` as the forge listed it): an id without a `/` is
/// first looked for in the acting user's repository list.
/// Refuses `doing` `repo` unless the forge, asked as the user (`as_user`), says they
/// administer it there; a forge that cannot say lets it through (its namespace rules hold).
pub async fn must_administer(
    as_user: &dyn ForgeDriver,
    repo: &Repo,
    doing: &str,
) -> Result<(), Error> {
    match as_user.repo_perm(repo).await {
        Ok(perm) if !perm.admin => Err(Error::Forbidden(format!(
            "{doing} {} needs admin permission on the forge's repository",
            repo.full_name
        ))),
        Ok(_) | Err(forge::ForgeError::Unsupported(_)) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

pub async fn find_remote(
    driver: &dyn ForgeDriver,
    remote_id: &str,
) -> Result<RemoteRepo, forge::ForgeError> {
    if !remote_id.contains('/')
        && let Ok(listed) = driver.user_repos().await
        && let Some((remote, _)) = listed.iter().find(|(r, _)| r.forge_remote_id == remote_id)
    {
        return driver
            .repo(&format!("{}/{}", remote.owner, remote.name))
            .await;
    }
    driver.repo(remote_id).await
}

/// Whether the user `driver` acts as administers `remote` on the forge (false when the forge
/// cannot say).
pub async fn forge_admin(driver: &dyn ForgeDriver, remote: &RemoteRepo) -> bool {
    let repo = remote.new_repo(0, 0);
    matches!(driver.repo_perm(&repo).await, Ok(perm) if perm.admin)
}

/// How long a permission read from the forge is trusted for reads (upstream: an hour).
pub const PERM_TTL_SECS: i64 = 60 * 60;

/// How long it is trusted for what matters (secrets, registries, settings, crons, manual
/// runs, approvals, agent tokens): a user removed on the forge loses those within this.
pub const RECHECK_SECS: i64 = 5 * 60;

/// Whether `user`'s permission on `row` (`perm`, as stored) should be read from the forge
/// again: a user of the repository's forge who signed in through it, whose permission is
/// not implied (instance admin, the repository's own namespace) and was synced `max_age`
/// seconds ago or more ([`PERM_TTL_SECS`] for reads, [`RECHECK_SECS`] for writes).
pub fn perm_is_stale(user: &User, row: &RepoRow, perm: &Perm, now: i64, max_age: i64) -> bool {
    !user.admin
        && user.org_id != row.repo.org_id
        && user.forge_id == row.repo.forge_id
        && !user.forge_remote_id.is_empty()
        && now - perm.synced >= max_age
}

/// Reads `user_id`'s permission on `row` from the forge, as them, and stores it; `true` when
/// the stored permission changed (read it again). A forge that says no ends what it granted:
/// 403/404 (the adapters' "no permission") stores none, 401 forgets the user's token and
/// every permission from that forge ([`forge::acting::Tokens::forget`]). A forge that cannot say
/// (down, 5xx, no token, no support: logged) leaves the stored permission as it is, so an
/// outage locks nobody out.
pub async fn sync_perm(ci: &Services, user_id: i64, row: &RepoRow) -> bool {
    // A user the forge could not answer for is asked again only after a pause: their
    // requests must not each wait on a forge that is down.
    let key = (user_id, row.repo.id);
    if ci.perm_sync_pauses.paused(key) {
        return false;
    }
    let synced = try_sync_perm(ci, user_id, row).await;
    if !synced {
        ci.perm_sync_pauses.pause(key);
    }
    synced
}

/// How long [`sync_perm`] leaves a user's permission on a repository alone after the forge
/// could not give it.
pub const PERM_SYNC_PAUSE: std::time::Duration = std::time::Duration::from_secs(60);

/// The (user, repository) pairs whose permission could not be read lately.
#[derive(Default)]
pub struct PermSyncPauses {
    since: std::sync::Mutex<std::collections::HashMap<(i64, i64), std::time::Instant>>,
}

impl PermSyncPauses {
    fn paused(&self, key: (i64, i64)) -> bool {
        let since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        since
            .get(&key)
            .is_some_and(|at| at.elapsed() < PERM_SYNC_PAUSE)
    }

    fn pause(&self, key: (i64, i64)) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        since.retain(|_, at| at.elapsed() < PERM_SYNC_PAUSE);
        since.insert(key, std::time::Instant::now());
    }
}

/// What the forge's answer to "what may this user do here?" comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// This permission (none when the forge says the user may not see the repository).
    Perm(forge::ForgePerm),
    /// The forge refused the user's token (401).
    TokenRefused,
    /// The forge could not say (down, 5xx, the adapter failed or cannot tell).
    Unknown,
}

/// [`Answer`] of `asked`: not found is no permission, a refused token is the token's end,
/// anything else says nothing about the user.
fn answer_of(asked: Result<forge::ForgePerm, forge::ForgeError>) -> Answer {
    match asked {
        Ok(perm) => Answer::Perm(perm),
        Err(forge::ForgeError::RepoNotFound(_)) => Answer::Perm(forge::ForgePerm::default()),
        Err(forge::ForgeError::Refused(_)) => Answer::TokenRefused,
        Err(_) => Answer::Unknown,
    }
}

async fn try_sync_perm(ci: &Services, user_id: i64, row: &RepoRow) -> bool {
    let Ok(forge) = ci.drivers.get(row.repo.forge_id).await else {
        return false;
    };
    if forge.kind().is_builtin() {
        return false;
    }
    let forge_id = forge.row.forge.id;
    let driver = match ci.tokens.as_user(&forge, user_id).await {
        Ok(Some(driver)) => driver,
        Ok(None) => return false,
        // `as_user` forgot a token the forge refused to refresh.
        Err(Error::Forge(forge::ForgeError::Refused(_))) => return true,
        Err(err) => {
            tracing::warn!(user = user_id, forge = forge_id, error = %err, "permission not synced: no usable token; the stored one stays");
            return false;
        }
    };
    let asked = driver.repo_perm(&row.repo).await;
    let perm = match answer_of(asked) {
        Answer::Perm(perm) => perm,
        Answer::TokenRefused => {
            ci.tokens.forget(user_id, forge_id).await;
            return true;
        }
        Answer::Unknown => {
            tracing::warn!(
                user = user_id,
                repo = row.repo.full_name,
                "permission not synced: the forge could not say; the stored one stays"
            );
            return false;
        }
    };
    let repo_id = row.repo.id;
    let stored = Perm {
        pull: perm.pull,
        push: perm.push,
        admin: perm.admin,
        ..Perm::default()
    };
    match ci
        .store
        .write(move |c| repos::set_perm(c, user_id, repo_id, stored))
        .await
    {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(user = user_id, error = %err, "synced permission not stored");
            false
        }
    }
}

/// Makes `user_id`'s permissions on forge `forge_id`'s repositories what the forge listed
/// (sign-in, the repository list): listed repositories stored here get theirs, stored ones
/// the forge no longer lists for them lose theirs.
pub async fn store_perms(
    ci: &Services,
    user_id: i64,
    forge_id: i64,
    listed: &[(RemoteRepo, forge::ForgePerm)],
) -> Result<(), Error> {
    let perms: Vec<(String, Perm)> = listed
        .iter()
        .map(|(remote, p)| {
            let perm = Perm {
                pull: p.pull,
                push: p.push,
                admin: p.admin,
                ..Perm::default()
            };
            (remote.forge_remote_id.clone(), perm)
        })
        .collect();
    ci.store
        .write(move |c| repos::replace_forge_perms(c, user_id, forge_id, &perms))
        .await?;
    Ok(())
}

/// Reads user `user_id`'s repositories and permissions from the forge `as_user` speaks to
/// and stores them ([`store_perms`]), and has their organisation memberships read afresh;
/// a refused token is forgotten ([`forge::acting::Tokens::forget`]). The listing, for
/// callers that show it.
pub async fn sync_listed_perms(
    ci: &Services,
    user_id: i64,
    forge_id: i64,
    as_user: &dyn ForgeDriver,
) -> Result<Vec<(RemoteRepo, forge::ForgePerm)>, Error> {
    ci.memberships.forget_user(user_id);
    match as_user.user_repos().await {
        Ok(listed) => {
            store_perms(ci, user_id, forge_id, &listed).await?;
            Ok(listed)
        }
        Err(err @ forge::ForgeError::Refused(_)) => {
            ci.tokens.forget(user_id, forge_id).await;
            Err(err.into())
        }
        Err(err) => Err(err.into()),
    }
}

/// User `user_id` becomes the repository's owner (and its admin).
pub async fn chown(ci: &Services, repo: Repo, user_id: i64) -> Result<RepoRow, Error> {
    Ok(ci
        .store
        .write(move |c| {
            let row = repos::update(c, &repo, Some(user_id))?;
            repos::set_perm(c, user_id, row.repo.id, Perm::all())?;
            Ok(row)
        })
        .await?)
}

/// Re-reads a repository from its forge, re-installs its hook and stores the result. Looked
/// up by full name, which every driver takes (a plugin forge's remote id is the forge's own
/// numeric id, which its `repo-info` does not accept).
pub async fn repair(ci: &Services, row: RepoRow) -> Result<(), Error> {
    let forge = ci.drivers.get(row.repo.forge_id).await?;
    let driver = ci.tokens.for_repo(&forge, &row).await;
    let remote = driver.repo(&row.repo.full_name).await?;
    let mut repo = row.repo.clone();
    refresh_from_forge(&mut repo, &remote);
    let url = hook_url(ci, repo.forge_id, &repo.forge_remote_id, &row.hash);
    driver.activate(&repo, &url).await?;
    ci.store
        .write(move |c| repos::update(c, &repo, None))
        .await?;
    Ok(())
}

/// The repository now lives at `remote` on its forge: the old hook goes, names and URLs
/// follow (into the new owner's organisation), and the hook is installed again.
pub async fn move_to(
    ci: &Services,
    driver: &Arc<dyn ForgeDriver>,
    row: RepoRow,
    remote: RemoteRepo,
) -> Result<(), Error> {
    let _ = driver.deactivate(&row.repo).await;
    let mut repo = row.repo.clone();
    refresh_from_forge(&mut repo, &remote);
    let moved = ci
        .store
        .write(move |c| {
            let org = orgs::find_or_create(c, repo.forge_id, &remote.owner)?;
            repo.org_id = org.id;
            repos::update(c, &repo, None)
        })
        .await?;
    repair(ci, moved).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge::{ForgeError, ForgePerm};

    #[test]
    fn a_forge_that_says_no_ends_the_permission_and_one_that_is_down_keeps_it() {
        let push = ForgePerm {
            pull: true,
            push: true,
            admin: false,
        };
        assert_eq!(answer_of(Ok(push)), Answer::Perm(push));
        // 403/404: the adapters' "no permission", or a repository the forge hides.
        assert_eq!(
            answer_of(Ok(ForgePerm::default())),
            Answer::Perm(ForgePerm::default())
        );
        assert_eq!(
            answer_of(Err(ForgeError::RepoNotFound("o/r".into()))),
            Answer::Perm(ForgePerm::default())
        );
        // 401: the token is gone.
        assert_eq!(
            answer_of(Err(ForgeError::Refused("HTTP 401".into()))),
            Answer::TokenRefused
        );
        // Down, 5xx, a rate limit, a broken adapter, no support: nothing is known.
        for down in [
            ForgeError::Failed("HTTP 502".into()),
            ForgeError::Failed("HTTP 403".into()),
            ForgeError::AdapterFailed("trap".into()),
            ForgeError::Unsupported("no".into()),
            ForgeError::NoDriver("github".into()),
        ] {
            assert_eq!(answer_of(Err(down)), Answer::Unknown);
        }
    }
}
