//! Forge drivers: what the CI module asks of the place a repository lives.
//!
//! A driver answers a few narrow questions (look a repository up, list branches and pull
//! requests, install or remove the hook that notifies us of pushes). The built-in `git`
//! driver ([`git`]) serves local repositories with the real `git` binary; the other forge
//! types are served by forge-adapter plugins, and until one is loaded for a type every
//! operation on such a forge is a clear [`ForgeError::NoDriver`].
//!
//! Drivers block (they run processes or talk to forges); call them through
//! [`run_blocking`] so the async runtime never waits on them.

pub mod git;
pub mod git_diff;
pub mod git_objects;
pub mod git_pool;
pub mod plugin;
pub mod remote_head;

use std::sync::Arc;

use crate::app::Ctx;
use crate::http::{ApiError, StatusCode};
use crate::store::forges::{self, ForgeRow};
use crate::store::repos::Repo;

/// Forge types the API accepts (`git` is Woodlark's own; the rest are Woodpecker's).
pub const FORGE_TYPES: &[&str] = &[
    "git",
    "github",
    "gitlab",
    "gitea",
    "forgejo",
    "bitbucket",
    "bitbucket-dc",
    "addon",
];

/// A repository as the forge describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteRepo {
    pub forge_remote_id: String,
    /// Namespace (user or organisation) the repository belongs to.
    pub owner: String,
    pub name: String,
    pub clone_url: String,
    pub forge_url: String,
    pub default_branch: String,
    pub private: bool,
    pub avatar_url: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PullRequest {
    pub index: String,
    pub title: String,
}

/// A commit as the forge describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitInfo {
    pub sha: String,
    pub message: String,
    pub author: String,
    pub author_email: String,
    /// Unix seconds.
    pub timestamp: i64,
}

/// Where pipeline configs are looked for when the repository names no `config_file`.
pub const CONFIG_DIR: &str = ".woodpecker";
pub const CONFIG_FILES: &[&str] = &[".woodpecker.yaml", ".woodpecker.yml"];

#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("repository {0:?} not found on the forge")]
    RepoNotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("forge type {0:?} is served by a forge-adapter plugin and none is loaded for it")]
    NoDriver(String),
    #[error("{0}")]
    Conflict(String),
    #[error("forge operation failed: {0}")]
    Failed(String),
}

impl From<ForgeError> for ApiError {
    fn from(err: ForgeError) -> ApiError {
        match err {
            ForgeError::RepoNotFound(_) => ApiError::not_found(err.to_string()),
            ForgeError::Invalid(_) => ApiError::unprocessable(err.to_string()),
            ForgeError::Conflict(_) => ApiError::conflict(err.to_string()),
            ForgeError::NoDriver(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
            }
            ForgeError::Failed(_) => {
                tracing::warn!(error = %err, "forge operation failed");
                ApiError::new(StatusCode::BAD_GATEWAY, err.to_string())
            }
        }
    }
}

/// What the CI module needs from a forge. Implementations block.
pub trait ForgeDriver: Send + Sync {
    fn repo(&self, remote_id: &str) -> Result<RemoteRepo, ForgeError>;
    /// Every repository the forge holds, for the "add repository" list; `None` when the
    /// driver cannot list them (the forge-adapter contract has no listing call yet).
    fn list_repos(&self) -> Result<Option<Vec<RemoteRepo>>, ForgeError> {
        Ok(None)
    }
    fn branches(&self, repo: &Repo) -> Result<Vec<String>, ForgeError>;
    fn pull_requests(&self, repo: &Repo) -> Result<Vec<PullRequest>, ForgeError>;
    /// Installs (or re-installs) the hook that posts to `hook_url` on every push.
    fn activate(&self, repo: &Repo, hook_url: &str) -> Result<(), ForgeError>;
    /// Removes the hook; a missing hook is not an error.
    fn deactivate(&self, repo: &Repo) -> Result<(), ForgeError>;
    /// The commit a branch points at.
    fn branch_head(&self, repo: &Repo, branch: &str) -> Result<CommitInfo, ForgeError>;
    /// Message, author and time of a commit.
    fn commit(&self, repo: &Repo, sha: &str) -> Result<CommitInfo, ForgeError>;
    /// Files changed between two commits (`before` empty or all zeros: by `after` alone).
    fn changed_files(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<Vec<String>, ForgeError>;
    /// What a push of `before..after` needs: the commit `after` and the files the push
    /// changed ([`ForgeDriver::changed_files`]; empty when they cannot be worked out, which
    /// costs only `when: path` precision).
    fn pushed(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<(CommitInfo, Vec<String>), ForgeError> {
        let commit = self.commit(repo, after)?;
        let changed = self
            .changed_files(repo, before, after)
            .unwrap_or_else(|err| unknown_changes(repo, err));
        Ok((commit, changed))
    }
    /// The files pull request `number` changes: PR hooks do not list them, and `when: path`
    /// filters need them. Forges without pull requests have none.
    fn pr_changed_files(&self, repo: &Repo, number: u64) -> Result<Vec<String>, ForgeError> {
        let _ = (repo, number);
        Ok(Vec::new())
    }
    /// The pipeline config files at `commit`, in upstream's lookup order: the repository's
    /// `config_file` (a trailing `/` names a folder), else every `*.yaml`/`*.yml` in
    /// `.woodpecker/`, else `.woodpecker.yaml`, else `.woodpecker.yml`. Empty when none.
    fn config_files(
        &self,
        repo: &Repo,
        commit: &str,
    ) -> Result<Vec<crate::pipeline::types::ConfigFile>, ForgeError>;
}

/// No changed files, logged: a push whose changed files cannot be worked out still runs.
pub fn unknown_changes(repo: &Repo, err: ForgeError) -> Vec<String> {
    tracing::debug!(repo = repo.full_name, error = %err, "changed files unknown");
    Vec::new()
}

/// The driver for a forge, or why there is none.
pub fn driver_from(ctx: &Ctx, row: &ForgeRow) -> Result<Arc<dyn ForgeDriver>, ForgeError> {
    match row.forge.kind.as_str() {
        "git" => Ok(Arc::new(git::GitForge::from_url(&row.forge.url)?)),
        _ => Ok(Arc::new(plugin::PluginForge::new(ctx, row)?)),
    }
}

/// The driver of forge `forge_id`.
pub async fn driver(ctx: &Ctx, forge_id: i64) -> Result<Arc<dyn ForgeDriver>, ApiError> {
    let row = ctx.store.read(move |c| forges::by_id(c, forge_id)).await?;
    Ok(driver_from(ctx, &row)?)
}

/// Runs a blocking driver call on the blocking pool.
pub async fn run_blocking<T, F>(f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ForgeError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("forge task failed: {e}")))?
        .map_err(ApiError::from)
}
