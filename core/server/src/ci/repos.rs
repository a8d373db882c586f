//! Repositories: activating one (hook installed on its forge), saving its settings, handing
//! it to another owner, moving it to a new name, repairing its hook, deactivating or removing
//! it. Who may do each is the caller's business; what happens is decided here.

use std::sync::Arc;

use super::forge::drivers::ForgeHandle;
use super::forge::{self, ForgeDriver, RemoteRepo};
use super::{Error, Services};
use crate::auth::{random_secret, token};
use crate::store::repos::{self, Perm, Repo, RepoRow};
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
    let (driver, forge_id) = (&forge.driver, forge.row.forge.id);
    let hash = existing
        .as_ref()
        .map(|row| row.hash.clone())
        .unwrap_or_else(random_secret);
    let url = hook_url(ci, forge_id, &remote.forge_remote_id, &hash);
    let mut repo = remote.new_repo(forge_id, 0);
    let cleanup = repo.clone();
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
    if let Ok(driver) = forge::driver(ci, repo.forge_id).await
        && let Err(err) = driver.deactivate(&repo).await
    {
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
    let driver = forge::driver(ci, row.repo.forge_id).await?;
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
