//! Forges served by forge-adapter plugins (GitHub, Gitea, Forgejo, GitLab, Bitbucket, …).
//!
//! Which plugin serves a forge: the forge's `additional_options.plugin` if set, else a loaded
//! forge adapter named like the forge type (`github`) or `forge-<type>` (the file name of
//! the first-party builds). Calls to the forge's API (repository look-up, config files at a
//! commit, branches and their heads, webhooks, sign-in, a user's repositories and
//! permissions, commit statuses) go through the plugin's allow-listed HTTP client, with the
//! token of the user the driver acts as ([`ForgeDriver::acting_as`], `acting`), or, for a
//! forge without an OAuth app, its `oauth_client_secret` as an API token. Calls an adapter of
//! the older contract does not have answer `Unsupported`, and the server falls back.
//!
//! Activation asks the adapter to create the forge's webhook: it calls
//! `<public_url>/api/hook?forge=<id>` (no token in the URL; the id only picks the adapter, which
//! checks the signature), signed with the forge's `webhook_secret`, which the operator grants
//! to the plugin as `forge:<id>`. Webhooks registered before the URL named the forge (plain
//! `/api/hook`) still work: every adapter is asked to recognise them.
//! An adapter that cannot (or a token without the permission) only costs a warning: the
//! webhook can be created by hand. A branch's head (manual runs, cron) comes from the adapter,
//! else from the git remote with the same token ([`super::remote_head`]).

use std::sync::Arc;

use woodlark_plugin_host::config::Origin;
use woodlark_plugin_host::{
    ApiContext, ErrorKind, ForgeGrant, NamedSecret, OAuthClient, PluginError, PluginHost, WorldKind,
};

use super::drivers::PluginContext;
use super::{
    CONFIG_DIR, CONFIG_FILES, CommitStatus, ForgeAccount, ForgeDriver, ForgeError, ForgePerm,
    ForgeTokens, Membership, OAuthRedirect, PullRequest, RemoteRepo, off_runtime,
};
use crate::auth::sealing::SealError;
use crate::pipeline::types::{Commit, ConfigFile};
use crate::runner::protocol::Netrc;
use crate::store::forges::{API_URL_OPTION, Forge, ForgeKind, ForgeRow, PLUGIN_OPTION};
use crate::store::repos::Repo;
use crate::{Settings, forge_secrets};

/// The query parameter of a plugin forge's webhook URL that names the forge.
pub const FORGE_PARAM: &str = "forge";

/// The loaded forge-adapter plugin that serves `forge`, if any.
pub fn plugin_for(host: &PluginHost, forge: &Forge) -> Option<String> {
    plugin_among(&host.names(WorldKind::ForgeAdapter), forge)
}

/// [`plugin_for`] among forge adapters `loaded` (listed once for many forges).
pub fn plugin_among(loaded: &[String], forge: &Forge) -> Option<String> {
    let wanted: Vec<String> = match forge.option(PLUGIN_OPTION) {
        Some(name) => vec![name.to_string()],
        None => vec![forge.kind.to_string(), format!("forge-{}", forge.kind)],
    };
    wanted.into_iter().find(|w| loaded.contains(w))
}

#[derive(Clone)]
pub struct PluginForge {
    host: PluginHost,
    plugin: String,
    api: ApiContext,
    forge_id: i64,
    settings: Arc<Settings>,
    /// The secret the forge signs webhook deliveries with.
    webhook_secret: String,
    /// The forge's OAuth app (`client` and `oauth_client_secret`); `None` when `client` is
    /// empty, and then `oauth_client_secret` is an API token the server calls the forge with
    /// (a forge without sign-in).
    oauth: Option<OAuthApp>,
}

/// A forge's OAuth app, as its record names it.
#[derive(Clone)]
struct OAuthApp {
    client_id: String,
    client_secret: String,
    /// Where browsers sign in, when not at the forge's URL.
    oauth_host: String,
    skip_verify: bool,
}

impl PluginForge {
    /// The driver of forge `row`, served by adapter `plugin`.
    pub fn new(
        context: &PluginContext,
        row: &ForgeRow,
        plugin: String,
    ) -> Result<PluginForge, ForgeError> {
        let unsealed = |e: SealError| ForgeError::Failed(e.to_string());
        let secret = forge_secrets::api_token(&context.seal, row).map_err(unsealed)?;
        let forge = &row.forge;
        let webhook_secret = forge_secrets::webhook_secret(&context.seal, row).map_err(unsealed)?;
        let grant = grant_of(forge, &webhook_secret);
        let (token, oauth) = if forge.client.is_empty() {
            (secret, None)
        } else {
            let app = OAuthApp {
                client_id: forge.client.clone(),
                client_secret: secret,
                oauth_host: forge.oauth_host.clone(),
                skip_verify: forge.skip_verify,
            };
            (String::new(), Some(app))
        };
        Ok(PluginForge {
            host: context.plugins.clone(),
            plugin,
            api: ApiContext {
                forge_url: forge.url.clone(),
                token,
                skip_verify: forge.skip_verify,
                grant,
            },
            forge_id: forge.id,
            settings: context.settings.clone(),
            webhook_secret,
            oauth,
        })
    }

    /// What the forge grants its adapter (its hosts and webhook secret).
    pub fn grant(&self) -> &ForgeGrant {
        &self.api.grant
    }

    /// The endpoint the forge's webhook calls: it names the forge.
    fn hook_endpoint(&self) -> String {
        format!(
            "{}?{FORGE_PARAM}={}",
            self.settings.hook_endpoint(),
            self.forge_id
        )
    }

    /// The endpoint webhooks were registered with before it named the forge (removed on
    /// activation and deactivation too).
    fn legacy_endpoint(&self) -> String {
        self.settings.hook_endpoint()
    }
}

/// The secret name under which a forge's webhook secret reaches `signing` (and which the
/// adapter reads as config `hook-secret`).
pub fn hook_secret_name(forge_id: i64) -> String {
    format!("forge:{forge_id}")
}

/// What `forge` grants the adapter serving it, for every call made on its behalf: HTTP to
/// the origins of its URL, OAuth host and API root ([`api_root`]), and its webhook secret.
/// Built from the record, so a changed forge is granted anew with its next driver.
pub fn grant_of(forge: &Forge, webhook_secret: &str) -> ForgeGrant {
    let api = api_root(forge);
    let mut origins: Vec<Origin> = Vec::new();
    for url in [forge.url.as_str(), forge.oauth_host.as_str(), api.as_str()] {
        if let Some(origin) = url.parse().ok().as_ref().and_then(Origin::of)
            && !origins.contains(&origin)
        {
            origins.push(origin);
        }
    }
    let mut config = std::collections::BTreeMap::new();
    if let Some(api_url) = forge.option(API_URL_OPTION) {
        config.insert("api-url".to_string(), api_url.to_string());
    }
    ForgeGrant {
        label: format!("forge {}", forge.id),
        origins,
        hook_secret: Some(NamedSecret {
            name: hook_secret_name(forge.id),
            value: webhook_secret.as_bytes().to_vec(),
        }),
        config,
    }
}

/// Where the forge's REST API is: `additional_options.api_url` if set, else where each
/// type's adapter looks for it (github.com's and Bitbucket Cloud's APIs have hosts of their
/// own; every other forge serves its API under its URL).
pub fn api_root(forge: &Forge) -> String {
    if let Some(url) = forge.option(API_URL_OPTION) {
        return url.to_string();
    }
    let url = forge.url.trim_end_matches('/');
    match forge.kind {
        ForgeKind::Github if url == "https://github.com" => "https://api.github.com".into(),
        ForgeKind::Bitbucket => "https://api.bitbucket.org".into(),
        _ => url.to_string(),
    }
}

/// Page size asked of forges for lists.
const PER_PAGE: u32 = 100;
/// Lists stop after this many pages (10,000 items): a forge that never returns a short page
/// must not keep the server asking.
const MAX_PAGES: u32 = 100;

/// Every page of a paginated plugin call, until a short one.
async fn all_pages<T, F, Fut>(mut page_of: F) -> Result<Vec<T>, ForgeError>
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, PluginError>>,
{
    let mut out = Vec::new();
    for page in 1..=MAX_PAGES {
        let items = call(page_of(page)).await?;
        let short = items.len() < PER_PAGE as usize;
        out.extend(items);
        if short {
            break;
        }
    }
    Ok(out)
}

fn tokens(t: woodlark_plugin_host::OAuthToken) -> Result<ForgeTokens, ForgeError> {
    if t.access_token.is_empty() {
        return Err(ForgeError::Failed("the forge gave no access token".into()));
    }
    Ok(ForgeTokens {
        access: t.access_token,
        refresh: t.refresh_token,
        expiry: t.expiry,
    })
}

/// A repository as the adapter described it.
fn remote_repo(r: woodlark_plugin_host::Repo) -> RemoteRepo {
    RemoteRepo {
        forge_remote_id: r.forge_remote_id,
        owner: r.owner,
        name: r.name,
        clone_url: r.clone_url,
        forge_url: r.forge_url,
        default_branch: r.default_branch,
        private: r.private,
        avatar_url: r.avatar_url,
    }
}

fn forge_perm(p: woodlark_plugin_host::Perm) -> ForgePerm {
    ForgePerm {
        pull: p.pull,
        push: p.push,
        admin: p.admin,
    }
}

/// The host name of a clone URL (`https://user@host:port/path` → `host`).
fn clone_host(url: &str) -> Option<String> {
    let authority = url.split("://").nth(1)?.split('/').next()?;
    let host = authority.rsplit('@').next()?.split(':').next()?;
    (!host.is_empty()).then(|| host.to_string())
}

/// Awaits a plugin call, its failure as a forge error.
async fn call<T>(
    f: impl std::future::Future<Output = Result<T, PluginError>>,
) -> Result<T, ForgeError> {
    f.await.map_err(plugin_error)
}

/// A plugin failure as a forge error, by the kind the adapter gave: its "invalid" answers
/// (not found, bad input) stay client errors, a refused token is [`ForgeError::Refused`],
/// and a forge that is down or answers oddly is an upstream failure.
pub fn plugin_error(err: PluginError) -> ForgeError {
    if err.is_unsupported() {
        return ForgeError::Unsupported(err.to_string());
    }
    // A host the adapter may not reach is the operator's grant to fix, never a refused
    // login (which would end the user's tokens).
    if let PluginError::HostDenied { .. } = err {
        return ForgeError::HostDenied(err.to_string());
    }
    match err.kind() {
        Some(ErrorKind::Denied) => return ForgeError::Refused(err.to_string()),
        Some(ErrorKind::Unavailable | ErrorKind::Internal) => {
            return ForgeError::Failed(err.to_string());
        }
        Some(ErrorKind::InvalidInput) | None => {}
    }
    match err {
        PluginError::NotLoaded(name) => ForgeError::NoDriver(name),
        other if other.is_fault() => ForgeError::Failed(other.to_string()),
        other => ForgeError::Invalid(other.to_string()),
    }
}

#[async_trait::async_trait]
impl ForgeDriver for PluginForge {
    async fn repo(&self, remote_id: &str) -> Result<RemoteRepo, ForgeError> {
        let r = call(
            self.host
                .repo_info(&self.plugin, self.api.clone(), remote_id),
        )
        .await?;
        Ok(remote_repo(r))
    }

    async fn branches(&self, repo: &Repo) -> Result<Vec<String>, ForgeError> {
        call(
            self.host
                .branches(&self.plugin, self.api.clone(), &repo.full_name),
        )
        .await
    }

    /// Open pull requests, every page; an adapter of the older contract has no listing
    /// (none, as before).
    async fn pull_requests(&self, repo: &Repo) -> Result<Vec<PullRequest>, ForgeError> {
        let listed = all_pages(|page| {
            self.host.pull_requests(
                &self.plugin,
                self.api.clone(),
                &repo.full_name,
                page,
                PER_PAGE,
            )
        })
        .await;
        match listed {
            Ok(prs) => Ok(prs
                .into_iter()
                .map(|pr| PullRequest {
                    index: pr.number.to_string(),
                    title: pr.title,
                })
                .collect()),
            Err(ForgeError::Unsupported(_)) => Ok(Vec::new()),
            Err(err) => Err(err),
        }
    }

    /// Creates the forge's webhook (see the module docs); `_hook_url` is the built-in git
    /// forge's per-repository URL, which plugin forges do not use.
    async fn activate(&self, repo: &Repo, _hook_url: &str) -> Result<(), ForgeError> {
        // A webhook registered with the URL that did not name the forge would deliver every
        // push a second time: it goes first.
        self.remove_hook(repo, &self.legacy_endpoint()).await;
        let endpoint = self.hook_endpoint();
        let created = call(self.host.create_hook(
            &self.plugin,
            self.api.clone(),
            &repo.full_name,
            &endpoint,
            &self.webhook_secret,
        ))
        .await;
        match created {
            Ok(()) => {
                tracing::info!(
                    repo = repo.full_name,
                    plugin = self.plugin,
                    url = endpoint,
                    "webhook created"
                );
                Ok(())
            }
            // An adapter without `create-hook` (or a token that may not) costs a warning:
            // the webhook can be made by hand, signed with the forge's webhook secret.
            Err(ForgeError::Invalid(reason) | ForgeError::Unsupported(reason)) => {
                tracing::warn!(
                    repo = repo.full_name,
                    plugin = self.plugin,
                    %reason,
                    url = endpoint,
                    "webhook not created; create it on the forge by hand with this URL and the forge's webhook_secret (GET /api/forges/{id})",
                    id = self.forge_id
                );
                Ok(())
            }
            Err(other) => Err(other),
        }
    }

    async fn deactivate(&self, repo: &Repo) -> Result<(), ForgeError> {
        self.remove_hook(repo, &self.hook_endpoint()).await;
        self.remove_hook(repo, &self.legacy_endpoint()).await;
        Ok(())
    }

    /// From the adapter; if it cannot answer, from the git remote (commit id only).
    async fn branch_head(&self, repo: &Repo, branch: &str) -> Result<Commit, ForgeError> {
        let asked =
            call(
                self.host
                    .branch_head(&self.plugin, self.api.clone(), &repo.full_name, branch),
            )
            .await;
        match asked {
            Ok(c) if !c.sha.is_empty() => Ok(Commit {
                sha: c.sha,
                message: c.message,
                author: c.author,
                author_email: c.author_email,
                timestamp: c.timestamp,
                ..Commit::default()
            }),
            other => {
                if let Err(err) = other {
                    tracing::debug!(repo = repo.full_name, plugin = self.plugin, error = %err, "branch head from the git remote");
                }
                let (url, token) = (repo.clone_url.clone(), self.api.token.clone());
                let branch = branch.to_string();
                let sha = off_runtime(move || {
                    super::remote_head::branch_head(
                        &url,
                        &token,
                        &branch,
                        super::remote_head::TIMEOUT,
                    )
                })
                .await?;
                Ok(Commit {
                    sha,
                    ..Commit::default()
                })
            }
        }
    }

    async fn commit(&self, _repo: &Repo, sha: &str) -> Result<Commit, ForgeError> {
        Ok(Commit {
            sha: sha.to_string(),
            ..Commit::default()
        })
    }

    async fn changed_files(
        &self,
        _repo: &Repo,
        _before: &str,
        _after: &str,
    ) -> Result<Vec<String>, ForgeError> {
        Ok(Vec::new())
    }

    fn acting_as(&self, token: &str) -> Arc<dyn ForgeDriver> {
        let mut driver = self.clone();
        driver.api.token = token.to_string();
        Arc::new(driver)
    }

    /// The adapter's netrc for the acting token (each forge wants its own login), else the
    /// token under login `oauth2` for the clone URL's host.
    async fn netrc(&self, repo: &Repo) -> Option<Netrc> {
        if self.api.token.is_empty() {
            return None;
        }
        let asked = call(
            self.host
                .netrc(&self.plugin, self.api.clone(), &repo.clone_url),
        )
        .await;
        match asked {
            Ok(n) => {
                return Some(Netrc {
                    machine: n.machine,
                    login: n.login,
                    password: n.password,
                });
            }
            Err(ForgeError::Unsupported(_)) => {}
            Err(err) => {
                tracing::warn!(repo = repo.full_name, plugin = self.plugin, error = %err, "netrc from the adapter failed; using the token as oauth2");
            }
        }
        Some(Netrc {
            machine: clone_host(&repo.clone_url)?,
            login: "oauth2".into(),
            password: self.api.token.clone(),
        })
    }

    async fn authorize_url(&self, redirect: &OAuthRedirect) -> Result<String, ForgeError> {
        let client = self.oauth_client(&redirect.redirect_uri)?;
        call(
            self.host
                .authorize_url(&self.plugin, client, &redirect.state),
        )
        .await
    }

    async fn exchange_code(
        &self,
        redirect_uri: &str,
        code: &str,
    ) -> Result<ForgeTokens, ForgeError> {
        let client = self.oauth_client(redirect_uri)?;
        let t = call(self.host.exchange_code(&self.plugin, client, code)).await?;
        tokens(t)
    }

    async fn refresh(&self, refresh_token: &str) -> Result<ForgeTokens, ForgeError> {
        let client = self.oauth_client(&self.settings.oauth_callback())?;
        let t = call(self.host.refresh_token(&self.plugin, client, refresh_token)).await?;
        tokens(t)
    }

    async fn current_user(&self) -> Result<ForgeAccount, ForgeError> {
        let u = call(self.host.current_user(&self.plugin, self.api.clone())).await?;
        Ok(ForgeAccount {
            remote_id: u.remote_id,
            login: u.login,
            email: u.email,
            avatar_url: u.avatar_url,
        })
    }

    async fn user_repos(&self) -> Result<Vec<(RemoteRepo, ForgePerm)>, ForgeError> {
        let listed = all_pages(|page| {
            self.host
                .user_repos(&self.plugin, self.api.clone(), page, PER_PAGE)
        })
        .await?;
        Ok(listed
            .into_iter()
            .map(|r| (remote_repo(r.repo), forge_perm(r.perm)))
            .collect())
    }

    async fn repo_perm(&self, repo: &Repo) -> Result<ForgePerm, ForgeError> {
        let p = call(
            self.host
                .repo_perm(&self.plugin, self.api.clone(), &repo.full_name),
        )
        .await?;
        Ok(forge_perm(p))
    }

    async fn user_orgs(&self) -> Result<Vec<String>, ForgeError> {
        let teams = all_pages(|page| {
            self.host
                .user_orgs(&self.plugin, self.api.clone(), page, PER_PAGE)
        })
        .await?;
        Ok(teams.into_iter().map(|t| t.login).collect())
    }

    async fn org_membership(&self, org: &str, login: &str) -> Result<Membership, ForgeError> {
        let m = call(
            self.host
                .org_membership(&self.plugin, self.api.clone(), org, login),
        )
        .await?;
        Ok(Membership {
            member: m.member,
            admin: m.admin,
        })
    }

    async fn post_status(
        &self,
        repo: &Repo,
        commit: &str,
        status: &CommitStatus,
    ) -> Result<(), ForgeError> {
        call(self.host.post_status(
            &self.plugin,
            self.api.clone(),
            &repo.full_name,
            commit,
            status.clone(),
        ))
        .await
    }

    async fn pr_changed_files(&self, repo: &Repo, number: u64) -> Result<Vec<String>, ForgeError> {
        call(
            self.host
                .changed_files(&self.plugin, self.api.clone(), &repo.full_name, number),
        )
        .await
    }

    async fn config_files(&self, repo: &Repo, commit: &str) -> Result<Vec<ConfigFile>, ForgeError> {
        let config = repo.config_file.trim();
        if !config.is_empty() {
            return if config.ends_with('/') {
                self.folder_at(repo, commit, config).await
            } else {
                Ok(self
                    .file_at(repo, commit, config)
                    .await?
                    .into_iter()
                    .collect())
            };
        }
        let in_dir = self
            .folder_at(repo, commit, CONFIG_DIR)
            .await
            .unwrap_or_default();
        if !in_dir.is_empty() {
            return Ok(in_dir);
        }
        for f in CONFIG_FILES {
            if let Some(file) = self.file_at(repo, commit, f).await? {
                return Ok(vec![file]);
            }
        }
        Ok(Vec::new())
    }
}

impl PluginForge {
    /// The forge's OAuth app with the server's callback; unsupported without one.
    fn oauth_client(&self, redirect_uri: &str) -> Result<OAuthClient, ForgeError> {
        let app = self.oauth.as_ref().ok_or_else(|| {
            ForgeError::Unsupported(
                "this forge has no OAuth app: set its `client` and `oauth_client_secret`".into(),
            )
        })?;
        Ok(OAuthClient {
            forge_url: self.api.forge_url.clone(),
            oauth_host: app.oauth_host.clone(),
            client_id: app.client_id.clone(),
            client_secret: app.client_secret.clone(),
            redirect_uri: redirect_uri.to_string(),
            skip_verify: app.skip_verify,
            grant: self.api.grant.clone(),
        })
    }

    /// Removes the repository's webhooks that call `endpoint`; a failure is only logged (the
    /// webhook can be removed by hand).
    async fn remove_hook(&self, repo: &Repo, endpoint: &str) {
        let removed = self
            .host
            .delete_hook(&self.plugin, self.api.clone(), &repo.full_name, endpoint)
            .await;
        if let Err(err) = removed {
            tracing::warn!(repo = repo.full_name, plugin = self.plugin, url = endpoint, error = %err, "webhook not removed");
        }
    }

    /// The file at `path` at `commit`, if there is one.
    async fn file_at(
        &self,
        repo: &Repo,
        commit: &str,
        path: &str,
    ) -> Result<Option<ConfigFile>, ForgeError> {
        let data = call(self.host.file_at(
            &self.plugin,
            self.api.clone(),
            &repo.full_name,
            commit,
            path,
        ))
        .await?;
        Ok(data.map(|data| ConfigFile {
            name: path.to_string(),
            data: String::from_utf8_lossy(&data).into_owned(),
        }))
    }

    /// The `*.yaml`/`*.yml` files directly in folder `dir` at `commit`, by name.
    async fn folder_at(
        &self,
        repo: &Repo,
        commit: &str,
        dir: &str,
    ) -> Result<Vec<ConfigFile>, ForgeError> {
        let dir = dir.trim_end_matches('/');
        let mut names =
            call(
                self.host
                    .dir_at(&self.plugin, self.api.clone(), &repo.full_name, commit, dir),
            )
            .await?;
        names.retain(|n| n.ends_with(".yaml") || n.ends_with(".yml"));
        names.sort();
        let mut out = Vec::new();
        for n in names {
            let path = if n.contains('/') {
                n
            } else {
                format!("{dir}/{n}")
            };
            out.extend(self.file_at(repo, commit, &path).await?);
        }
        Ok(out)
    }
}
