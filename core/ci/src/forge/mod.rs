//! Forge drivers: what the CI module asks of the place a repository lives.
//!
//! A driver answers a few narrow questions (look a repository up, list branches and pull
//! requests, install or remove the hook that notifies us of pushes). The built-in `git`
//! driver ([`git`]) serves local repositories with the real `git` binary; the other forge
//! types are served by forge-adapter plugins, and until one is loaded for a type every
//! operation on such a forge is a clear [`ForgeError::NoDriver`].
//!
//! Drivers are async. The `git` driver's work is blocking (processes, pipes, files), so it
//! moves each call to the blocking pool itself ([`off_runtime`]); plugin drivers await the
//! plugin host directly, with no thread hop.

pub mod acting;
pub mod drivers;
pub mod git;
pub mod plugin;
pub mod remote_head;

use std::sync::Arc;

use async_trait::async_trait;
use woodlark_stdx::{Classify, Fault};

/// A commit status to show on the forge, one per workflow of a pipeline: the plugin
/// contract's own type, so no driver converts it.
pub use woodlark_plugin_host::{CommitStatus, StatusState};

use super::Services;
use crate::pipeline::types::Commit;
use crate::runner::protocol::Netrc;
use crate::store::StoreError;
use crate::store::repos::{DEFAULT_TIMEOUT, Repo, Trusted, Visibility};

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

impl RemoteRepo {
    /// A new repository record from what the forge says, with upstream's default settings.
    pub fn new_repo(&self, forge_id: i64, org_id: i64) -> Repo {
        Repo {
            id: 0,
            forge_id,
            forge_remote_id: self.forge_remote_id.clone(),
            org_id,
            owner: self.owner.clone(),
            name: self.name.clone(),
            full_name: format!("{}/{}", self.owner, self.name),
            avatar_url: self.avatar_url.clone(),
            forge_url: self.forge_url.clone(),
            clone_url: self.clone_url.clone(),
            clone_url_ssh: String::new(),
            default_branch: self.default_branch.clone(),
            pr_enabled: true,
            timeout: DEFAULT_TIMEOUT,
            visibility: if self.private {
                Visibility::Private
            } else {
                Visibility::Public
            },
            private: self.private,
            trusted: Trusted::default(),
            require_approval: "forks".into(),
            approval_allowed_users: Vec::new(),
            active: true,
            allow_pr: true,
            allow_deploy: false,
            config_file: String::new(),
            cancel_previous_pipeline_events: Vec::new(),
            netrc_trusted: Vec::new(),
            config_extension_endpoint: String::new(),
            config_extension_exclusive: false,
            config_extension_netrc: false,
            registry_extension_endpoint: String::new(),
            registry_extension_netrc: false,
            secret_extension_endpoint: String::new(),
            secret_extension_netrc: false,
            has_forge_name_conflict: false,
            has_no_forge_repo: false,
        }
    }
}

/// The OAuth tokens a forge gave for a user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForgeTokens {
    pub access: String,
    /// Empty when the forge gives none (its tokens do not expire).
    pub refresh: String,
    /// Unix seconds the access token stops working; 0 = never.
    pub expiry: i64,
}

/// A forge account, as its forge describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForgeAccount {
    /// The forge's stable id for the account (a login can change hands; this cannot).
    pub remote_id: String,
    pub login: String,
    pub email: String,
    pub avatar_url: String,
}

/// What a user may do with a repository, as its forge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForgePerm {
    pub pull: bool,
    pub push: bool,
    pub admin: bool,
}

/// A user's membership of an organisation on the forge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Membership {
    pub member: bool,
    pub admin: bool,
}

/// Where the browser goes to sign in, and where the forge sends it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthRedirect {
    /// This server's sign-in callback (`<public url><root>/authorize`).
    pub redirect_uri: String,
    /// The signed state the callback must bring back.
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PullRequest {
    pub index: String,
    pub title: String,
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
    /// The forge (or its adapter) cannot do this.
    #[error("{0}")]
    Unsupported(String),
    /// A forge-adapter plugin failed (trapped, ran out of fuel, broke its contract).
    #[error("forge adapter failed: {0}")]
    AdapterFailed(String),
    /// The adapter may not reach a host it needed: the operator's grant is missing.
    #[error("{0}")]
    HostDenied(String),
    /// The forge refused the credentials (a revoked or expired token): signing in again
    /// helps, retrying does not.
    #[error("the forge refused the credentials; sign in again: {0}")]
    Refused(String),
}

impl Classify for ForgeError {
    fn fault(&self) -> Fault {
        let message = self.to_string();
        match self {
            ForgeError::RepoNotFound(_) => Fault::NotFound(message),
            ForgeError::Invalid(_) => Fault::Unprocessable(message),
            ForgeError::Conflict(_) => Fault::Conflict(message),
            ForgeError::NoDriver(_) | ForgeError::Unsupported(_) => Fault::Unavailable(message),
            ForgeError::Failed(_) | ForgeError::AdapterFailed(_) | ForgeError::HostDenied(_) => {
                Fault::Upstream(message)
            }
            ForgeError::Refused(_) => Fault::Forbidden(message),
        }
    }
}

/// What the CI module needs from a forge.
#[async_trait]
pub trait ForgeDriver: Send + Sync {
    async fn repo(&self, remote_id: &str) -> Result<RemoteRepo, ForgeError>;
    /// Every repository the forge holds, for the "add repository" list; `None` when the
    /// driver cannot list them (the forge-adapter contract has no listing call yet).
    async fn list_repos(&self) -> Result<Option<Vec<RemoteRepo>>, ForgeError> {
        Ok(None)
    }
    async fn branches(&self, repo: &Repo) -> Result<Vec<String>, ForgeError>;
    async fn pull_requests(&self, repo: &Repo) -> Result<Vec<PullRequest>, ForgeError>;
    /// Installs (or re-installs) the hook that posts to `hook_url` on every push.
    async fn activate(&self, repo: &Repo, hook_url: &str) -> Result<(), ForgeError>;
    /// Removes the hook; a missing hook is not an error.
    async fn deactivate(&self, repo: &Repo) -> Result<(), ForgeError>;
    /// The commit a branch points at: its id, message, author and time (the rest empty).
    async fn branch_head(&self, repo: &Repo, branch: &str) -> Result<Commit, ForgeError>;
    /// Message, author and time of a commit (the rest of the record empty).
    async fn commit(&self, repo: &Repo, sha: &str) -> Result<Commit, ForgeError>;
    /// Files changed between two commits (`before` empty or all zeros: by `after` alone).
    async fn changed_files(
        &self,
        repo: &Repo,
        before: &str,
        after: &str,
    ) -> Result<Vec<String>, ForgeError>;
    /// What a push of `before..after` needs: the commit `after`, the files the push
    /// changed ([`ForgeDriver::changed_files`]; empty when they cannot be worked out, which
    /// costs only `when: path` precision) and the config files at the commit
    /// ([`ForgeDriver::config_files`]).
    async fn pushed(&self, repo: &Repo, before: &str, after: &str) -> Result<Pushed, ForgeError> {
        let commit = self.commit(repo, after).await?;
        let changed = self
            .changed_files(repo, before, after)
            .await
            .unwrap_or_else(|err| unknown_changes(repo, err));
        let config = self.config_files(repo, &commit.sha).await?;
        Ok(Pushed {
            commit,
            changed,
            config,
        })
    }
    /// The files pull request `number` changes: PR hooks do not list them, and `when: path`
    /// filters need them. Forges without pull requests have none.
    async fn pr_changed_files(&self, repo: &Repo, number: u64) -> Result<Vec<String>, ForgeError> {
        let _ = (repo, number);
        Ok(Vec::new())
    }
    /// Credentials for cloning `repo` (`CI_NETRC_*`); `None` when a clone needs none.
    async fn netrc(&self, repo: &Repo) -> Option<Netrc> {
        let _ = repo;
        None
    }

    // ---- acting as a user (sign-in, their repositories, statuses) ----

    /// The same forge, its calls made with a user's token instead of the forge's own.
    fn acting_as(&self, token: &str) -> Arc<dyn ForgeDriver>;
    /// Where to send a browser to sign in; `Unsupported` when the forge has no OAuth
    /// sign-in (the built-in git forge, a forge without an OAuth client).
    async fn authorize_url(&self, redirect: &OAuthRedirect) -> Result<String, ForgeError> {
        let _ = redirect;
        Err(unsupported("sign-in through the forge"))
    }
    /// Trades the code the forge's callback brought for the user's tokens.
    async fn exchange_code(
        &self,
        redirect_uri: &str,
        code: &str,
    ) -> Result<ForgeTokens, ForgeError> {
        let _ = (redirect_uri, code);
        Err(unsupported("sign-in through the forge"))
    }
    /// New tokens for a refresh token.
    async fn refresh(&self, refresh_token: &str) -> Result<ForgeTokens, ForgeError> {
        let _ = refresh_token;
        Err(unsupported("refreshing tokens"))
    }
    /// The account the acting token belongs to.
    async fn current_user(&self) -> Result<ForgeAccount, ForgeError> {
        Err(unsupported("reading the signed-in user"))
    }
    /// Every repository the acting user can see, with their permission.
    async fn user_repos(&self) -> Result<Vec<(RemoteRepo, ForgePerm)>, ForgeError> {
        Err(unsupported("listing a user's repositories"))
    }
    /// The acting user's permission on `repo`.
    async fn repo_perm(&self, repo: &Repo) -> Result<ForgePerm, ForgeError> {
        let _ = repo;
        Err(unsupported("reading repository permissions"))
    }
    /// The organisations the acting user belongs to (their logins).
    async fn user_orgs(&self) -> Result<Vec<String>, ForgeError> {
        Err(unsupported("listing organisations"))
    }
    /// `login`'s membership of organisation `org` on the forge.
    async fn org_membership(&self, org: &str, login: &str) -> Result<Membership, ForgeError> {
        let _ = (org, login);
        Err(unsupported("organisation memberships"))
    }
    /// Posts a commit status on `commit` of `repo`.
    async fn post_status(
        &self,
        repo: &Repo,
        commit: &str,
        status: &CommitStatus,
    ) -> Result<(), ForgeError> {
        let _ = (repo, commit, status);
        Err(unsupported("commit statuses"))
    }
    /// The pipeline config files at `commit`, in upstream's lookup order: the repository's
    /// `config_file` (a trailing `/` names a folder), else every `*.yaml`/`*.yml` in
    /// `.woodpecker/`, else `.woodpecker.yaml`, else `.woodpecker.yml`. Empty when none.
    async fn config_files(
        &self,
        repo: &Repo,
        commit: &str,
    ) -> Result<Vec<crate::pipeline::types::ConfigFile>, ForgeError>;
}

/// [`ForgeDriver::pushed`]'s answer.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub commit: Commit,
    pub changed: Vec<String>,
    pub config: Vec<crate::pipeline::types::ConfigFile>,
}

/// A forge's answer for what it cannot do.
pub fn unsupported(what: &str) -> ForgeError {
    ForgeError::Unsupported(format!("this forge does not support {what}"))
}

/// No changed files, logged: a push whose changed files cannot be worked out still runs.
pub fn unknown_changes(repo: &Repo, err: ForgeError) -> Vec<String> {
    tracing::debug!(repo = repo.full_name, error = %err, "changed files unknown");
    Vec::new()
}

/// Why a forge's driver could not be had: the forge record, or the driver itself.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
}

impl Classify for DriverError {
    fn fault(&self) -> Fault {
        match self {
            DriverError::Store(e) => e.fault(),
            DriverError::Forge(e) => e.fault(),
        }
    }
}

/// The driver of forge `forge_id` (see [`drivers`]).
pub async fn driver(ci: &Services, forge_id: i64) -> Result<Arc<dyn ForgeDriver>, DriverError> {
    Ok(ci.drivers.get(forge_id).await?.driver.clone())
}

/// Runs blocking forge work (a `git` process, the object pool) on the blocking pool, so the
/// async runtime never waits on it.
pub async fn off_runtime<T, F>(f: F) -> Result<T, ForgeError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ForgeError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ForgeError::Failed(format!("forge task failed: {e}")))?
}
