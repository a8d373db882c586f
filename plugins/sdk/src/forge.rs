//! Forge adapters (`woodlark:plugins/forge-adapter`): implement [`ForgeAdapter`] and call
//! [`forge_adapter!`](crate::forge_adapter).
//!
//! An adapter answers two questions for the server: "is this webhook request yours?"
//! ([`ForgeAdapter::recognize`], headers only) and "what does it trigger?"
//! ([`ForgeAdapter::parse_hook`]: a [`Repo`] plus a [`Pipeline`], or ignored with a reason).
//! The forge-API functions have defaults that answer `unavailable`.
//!
//! Verifying a webhook never needs the secret's value: the operator names a secret in the
//! instance's config (`hook-secret = "<name>"`, and grants it in `secrets = [...]`);
//! [`verify_hmac`] and [`verify_token`] ask the host to compare. The forge-API calls are
//! different by nature: they carry the forge's API token ([`ApiContext`]), and `create_hook`
//! receives the webhook secret it must register with the forge ([`HookApi::replace`] does the
//! list-delete-create dance). The requests the API functions share are [`ApiClient`]'s.

pub mod oauth;
mod rest;

use crate::forge_bindings::exports::woodlark::forge0_2_0::forge as wit;
pub use crate::forge_bindings::woodlark::host::signing::Algorithm;
pub use crate::{Header, PluginError, denied, header, invalid, unavailable};
pub use rest::{ApiClient, Listing, StatusFormat, contents_url, no_repo};
pub use rest::{link_has_next, status_description};
pub use wit::{
    ApiContext, CommitInfo, CommitStatus, Event, ForgeUser, HookBuild, HookRequest, NetrcInfo,
    OauthClient, OauthToken, OrgPerm, Outcome, Perm, Pipeline, PullRequestInfo, ReleaseInfo, Repo,
    RepoWithPerm, StatusState, Team,
};

/// The contract's "not supported" error for `function` (its WIT name): `unavailable`
/// worded so the host reports it as a missing feature (`PluginError::is_unsupported`), not
/// as a forge that is down.
pub fn unsupported(function: &str) -> PluginError {
    unavailable(format!("{function} is not supported by this adapter"))
}

/// A forge adapter. Only `recognize` and `parse_hook` are required.
pub trait ForgeAdapter {
    /// The forge's OAuth 2 endpoints: with them the sign-in functions (`authorize_url`,
    /// `exchange_code`, `refresh_token`) need no code of the adapter's own.
    const OAUTH: Option<oauth::Endpoints> = None;

    /// True when the headers say the request comes from this adapter's forge.
    fn recognize(headers: &[Header]) -> bool;

    /// Parses a webhook request.
    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError>;

    /// Looks up a repository: `full_name` is its `owner/name`, or the forge's own id for it
    /// (`forge_remote_id`) when a client activated it by that id and the user's repository
    /// list did not have it; accept both where the forge can.
    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        let _ = (ctx, full_name);
        Err(unsupported("repo-info"))
    }

    /// A file at a commit (`None` when absent).
    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        let _ = (ctx, full_name, commit, path);
        Err(unsupported("file-at"))
    }

    /// File paths directly inside a folder at a commit.
    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        let _ = (ctx, full_name, commit, path);
        Err(unsupported("dir-at"))
    }

    /// Branch names.
    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        let _ = (ctx, full_name);
        Err(unsupported("branches"))
    }

    /// Posts a commit status.
    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        let _ = (ctx, full_name, commit, status);
        Err(unsupported("post-status"))
    }

    /// The commit a branch points at. Without it the server asks the git remote for the
    /// commit id alone.
    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        let _ = (ctx, full_name, branch);
        Err(unsupported("branch-head"))
    }

    /// Makes the forge call `url` for the repository's events, signed with `secret` the way
    /// `parse_hook` verifies; replaces an existing hook with the same URL. Without it the
    /// operator creates the webhook by hand.
    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        let _ = (ctx, full_name, url, secret);
        Err(unsupported("create-hook"))
    }

    /// Removes the repository's hooks that call `url` (none: not an error).
    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        let _ = (ctx, full_name, url);
        Err(unsupported("delete-hook"))
    }

    /// The files pull request `pr_number` changes (old and new paths). PR payloads do not
    /// list them, and `when: path` filters need them.
    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        let _ = (ctx, full_name, pr_number);
        Err(unsupported("changed-files"))
    }

    // ---- signing in and acting as the user (contract 0.2.0) ----

    /// The URL that starts the forge's OAuth sign-in (no I/O): the forge sends the browser
    /// back to `client.redirect_uri` with a `code` and this `state`.
    fn authorize_url(client: OauthClient, state: String) -> Result<String, PluginError> {
        let oauth = Self::OAUTH.ok_or_else(|| unsupported("authorize-url"))?;
        Ok(oauth.authorize_url(&client, oauth.scope, &state))
    }

    /// Trades the callback's `code` for tokens ([`oauth::exchange`] does the usual POST).
    fn exchange_code(client: OauthClient, code: String) -> Result<OauthToken, PluginError> {
        let oauth = Self::OAUTH.ok_or_else(|| unsupported("exchange-code"))?;
        oauth.exchange(&client, &code)
    }

    /// A fresh access token from a refresh token.
    fn refresh_token(
        client: OauthClient,
        refresh_token: String,
    ) -> Result<OauthToken, PluginError> {
        let oauth = Self::OAUTH.ok_or_else(|| unsupported("refresh-token"))?;
        oauth.refresh(&client, &refresh_token)
    }

    /// The account `ctx.token` belongs to.
    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        let _ = ctx;
        Err(unsupported("current-user"))
    }

    /// Page `page` (from 1) of the user's repositories with permissions; empty ends it.
    fn user_repos(
        ctx: ApiContext,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<RepoWithPerm>, PluginError> {
        let _ = (ctx, page, per_page);
        Err(unsupported("user-repos"))
    }

    /// The user's permissions on a repository (no access: all false).
    fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
        let _ = (ctx, full_name);
        Err(unsupported("repo-perm"))
    }

    /// Page `page` (from 1) of the user's organisations.
    fn user_orgs(ctx: ApiContext, page: u32, per_page: u32) -> Result<Vec<Team>, PluginError> {
        let _ = (ctx, page, per_page);
        Err(unsupported("user-orgs"))
    }

    /// Whether `login` is a member (and admin) of `org` (not a member: all false).
    fn org_membership(ctx: ApiContext, org: String, login: String) -> Result<OrgPerm, PluginError> {
        let _ = (ctx, org, login);
        Err(unsupported("org-membership"))
    }

    /// Page `page` (from 1) of the repository's open pull requests.
    fn pull_requests(
        ctx: ApiContext,
        full_name: String,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<PullRequestInfo>, PluginError> {
        let _ = (ctx, full_name, page, per_page);
        Err(unsupported("pull-requests"))
    }

    /// The `.netrc` entry for cloning `clone_url` as the user (no I/O).
    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        let _ = (ctx, clone_url);
        Err(unsupported("netrc"))
    }
}

/// Glue between a [`ForgeAdapter`] and the generated bindings; used by [`forge_adapter!`](crate::forge_adapter).
#[doc(hidden)]
pub struct Bridge<T>(std::marker::PhantomData<T>);

impl<T: ForgeAdapter> wit::Guest for Bridge<T> {
    fn recognize(headers: Vec<Header>) -> bool {
        T::recognize(&headers)
    }
    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        T::parse_hook(req)
    }
    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        T::repo_info(ctx, full_name)
    }
    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        T::file_at(ctx, full_name, commit, path)
    }
    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        T::dir_at(ctx, full_name, commit, path)
    }
    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        T::branches(ctx, full_name)
    }
    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        T::post_status(ctx, full_name, commit, status)
    }
    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        T::branch_head(ctx, full_name, branch)
    }
    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        T::create_hook(ctx, full_name, url, secret)
    }
    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        T::delete_hook(ctx, full_name, url)
    }
    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        T::changed_files(ctx, full_name, pr_number)
    }
    fn authorize_url(client: OauthClient, state: String) -> Result<String, PluginError> {
        T::authorize_url(client, state)
    }
    fn exchange_code(client: OauthClient, code: String) -> Result<OauthToken, PluginError> {
        T::exchange_code(client, code)
    }
    fn refresh_token(
        client: OauthClient,
        refresh_token: String,
    ) -> Result<OauthToken, PluginError> {
        T::refresh_token(client, refresh_token)
    }
    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        T::current_user(ctx)
    }
    fn user_repos(
        ctx: ApiContext,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<RepoWithPerm>, PluginError> {
        T::user_repos(ctx, page, per_page)
    }
    fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
        T::repo_perm(ctx, full_name)
    }
    fn user_orgs(ctx: ApiContext, page: u32, per_page: u32) -> Result<Vec<Team>, PluginError> {
        T::user_orgs(ctx, page, per_page)
    }
    fn org_membership(ctx: ApiContext, org: String, login: String) -> Result<OrgPerm, PluginError> {
        T::org_membership(ctx, org, login)
    }
    fn pull_requests(
        ctx: ApiContext,
        full_name: String,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<PullRequestInfo>, PluginError> {
        T::pull_requests(ctx, full_name, page, per_page)
    }
    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        T::netrc(ctx, clone_url)
    }
}

/// Exports a [`ForgeAdapter`] implementation as the component's `woodlark:forge/forge`.
#[macro_export]
macro_rules! forge_adapter {
    ($ty:ty) => {
        $crate::__export_world!(forge, forge_bindings::__export_forge_adapter, $ty);
    };
}

/// An empty repository record, to fill in.
pub fn repo() -> Repo {
    Repo {
        forge_remote_id: String::new(),
        owner: String::new(),
        name: String::new(),
        full_name: String::new(),
        avatar_url: String::new(),
        forge_url: String::new(),
        clone_url: String::new(),
        clone_url_ssh: String::new(),
        default_branch: String::new(),
        private: false,
    }
}

/// An empty pipeline record for `event`, to fill in.
pub fn pipeline(event: Event) -> Pipeline {
    Pipeline {
        event,
        event_reason: Vec::new(),
        commit: String::new(),
        git_ref: String::new(),
        branch: String::new(),
        refspec: String::new(),
        title: String::new(),
        message: String::new(),
        timestamp: 0,
        author: String::new(),
        author_email: String::new(),
        author_avatar: String::new(),
        sender: String::new(),
        forge_url: String::new(),
        pr_number: None,
        pr_labels: Vec::new(),
        from_fork: false,
        release: None,
        deploy_to: String::new(),
        deploy_task: String::new(),
        changed_files: Vec::new(),
    }
}

/// `Outcome::Build`.
pub fn build(repo: Repo, pipeline: Pipeline, signature_verified: bool) -> Outcome {
    Outcome::Build(HookBuild {
        repo,
        pipeline,
        signature_verified,
    })
}

/// `Outcome::Ignored` with a reason.
pub fn ignored(reason: impl Into<String>) -> Outcome {
    Outcome::Ignored(reason.into())
}

/// The secret NAME configured for webhook verification (`hook-secret` in the instance's
/// config), if any.
pub fn hook_secret() -> Option<String> {
    crate::config::get("hook-secret").filter(|s| !s.is_empty())
}

/// Verifies an HMAC signature header such as `X-Hub-Signature-256: sha256=<hex>` (a
/// `sha256=`/`sha1=` prefix is optional) over `body`.
///
/// - no `hook-secret` configured: `Ok(false)` (not verified; the server then relies on the
///   hook token in the URL);
/// - configured, header missing or wrong: `Err(Denied)`;
/// - configured and matching: `Ok(true)`.
pub fn verify_hmac(
    alg: Algorithm,
    signature: Option<&str>,
    body: &[u8],
) -> Result<bool, PluginError> {
    let Some(secret) = hook_secret() else {
        return Ok(false);
    };
    let sig = signature.ok_or_else(|| denied("signature header missing"))?;
    let hex = sig
        .strip_prefix("sha256=")
        .or_else(|| sig.strip_prefix("sha1="))
        .unwrap_or(sig);
    let mac = hex_decode(hex).ok_or_else(|| denied("signature is not hex"))?;
    if crate::host_api::signing::verify(alg, &secret, body, &mac)? {
        Ok(true)
    } else {
        Err(denied("signature mismatch"))
    }
}

/// [`verify_hmac`] of an HMAC-SHA256 over the request's body, signed in header `name` (GitHub's
/// `X-Hub-Signature-256`, Bitbucket's `X-Hub-Signature`).
pub fn verify_hmac_sha256(req: &HookRequest, name: &str) -> Result<bool, PluginError> {
    verify_hmac(Algorithm::HmacSha256, header(&req.headers, name), &req.body)
}

/// The value of header `name`, which a hook of this forge always carries (its event header):
/// `InvalidInput` "missing `name` header" without it.
pub fn required_header<'a>(headers: &'a [Header], name: &str) -> Result<&'a str, PluginError> {
    header(headers, name).ok_or_else(|| invalid(format!("missing {name} header")))
}

/// Verifies a shared-token header such as `X-Gitlab-Token`; same rules as [`verify_hmac`].
pub fn verify_token(token: Option<&str>) -> Result<bool, PluginError> {
    let Some(secret) = hook_secret() else {
        return Ok(false);
    };
    let token = token.ok_or_else(|| denied("token header missing"))?;
    if crate::host_api::signing::equals(&secret, token.as_bytes())? {
        Ok(true)
    } else {
        Err(denied("token mismatch"))
    }
}

/// Decodes lowercase or uppercase hex.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The value of field `name` in an `application/x-www-form-urlencoded` body.
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (url_decode(k)? == name).then(|| url_decode(v)).flatten()
    })
}

fn url_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The JSON payload of a webhook: the body itself, or the `payload` form field when the
/// request is form-encoded (GitHub's `application/x-www-form-urlencoded` hooks).
pub fn json_payload(req: &HookRequest) -> Result<serde_json::Value, PluginError> {
    payload_as(&payload_bytes(req)?)
}

/// The bytes of a webhook's JSON payload (see [`json_payload`]): borrowed from the body
/// unless the request is form-encoded. For parsers that deserialize into typed structs
/// with [`payload_as`] instead of building a `Value`.
pub fn payload_bytes(req: &HookRequest) -> Result<std::borrow::Cow<'_, [u8]>, PluginError> {
    let form = header(&req.headers, "content-type")
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
    if form {
        let payload = form_field(&req.body, "payload")
            .ok_or_else(|| invalid("form body without a payload field"))?;
        Ok(std::borrow::Cow::Owned(payload.into_bytes()))
    } else {
        Ok(std::borrow::Cow::Borrowed(&req.body))
    }
}

/// Deserializes a payload from [`payload_bytes`], with [`json_payload`]'s error.
pub fn payload_as<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, PluginError> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("payload is not JSON: {e}")))
}

/// `refs/heads/main` → `main`; `refs/tags/v1` → `v1`; anything else unchanged.
pub fn short_ref(git_ref: &str) -> &str {
    git_ref
        .strip_prefix("refs/heads/")
        .or_else(|| git_ref.strip_prefix("refs/tags/"))
        .unwrap_or(git_ref)
}

/// The sorted, de-duplicated union of the `added`, `modified` and `removed` lists of each
/// commit in a push payload (GitHub, Gitea, Forgejo and GitLab share this shape).
pub fn changed_files(commits: &[serde_json::Value]) -> Vec<String> {
    let mut files: Vec<String> = commits
        .iter()
        .flat_map(|c| {
            ["added", "modified", "removed"].map(|k| crate::json::strings_at(c, &format!("/{k}")))
        })
        .flatten()
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Sorted, de-duplicated, without empty entries: the shape of a changed-files list (old and
/// new paths of a rename both count, as Woodpecker counts them).
pub fn file_set(files: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut files: Vec<String> = files.into_iter().filter(|f| !f.is_empty()).collect();
    files.sort();
    files.dedup();
    files
}

/// Follows a forge's paged list: `fetch(page)` returns one page's items and whether another
/// follows. Stops after `max_pages` so a misbehaving forge cannot keep a call busy forever.
pub fn paged<T>(
    max_pages: u32,
    mut fetch: impl FnMut(u32) -> Result<(Vec<T>, bool), PluginError>,
) -> Result<Vec<T>, PluginError> {
    let mut all = Vec::new();
    for page in 1..=max_pages {
        let (items, more) = fetch(page)?;
        all.extend(items);
        if !more {
            break;
        }
    }
    Ok(all)
}

/// How one forge's API lists the files a pull request changes: a paged JSON list whose items
/// each name a file's new and old path (both count, as Woodpecker counts renames).
pub struct FileListApi<'a> {
    /// `Authorization` scheme for the token (`Bearer`, or `token` for Gitea-like APIs).
    pub scheme: &'a str,
    /// How the forge calls the thing in a not-found error: `pull request`, `merge request`.
    pub noun: &'a str,
    /// Pages read at most (see [`paged`]).
    pub max_pages: u32,
    /// JSON pointer of the page's item array (`""` for a bare array).
    pub items: &'a str,
    /// JSON pointers, within an item, of its new and old path.
    pub paths: [&'a str; 2],
}

impl<'a> FileListApi<'a> {
    /// `scheme`, `noun`, `max_pages`, `items`, `paths` in the fields' order.
    pub fn new(
        scheme: &'a str,
        noun: &'a str,
        max_pages: u32,
        items: &'a str,
        paths: [&'a str; 2],
    ) -> FileListApi<'a> {
        FileListApi {
            scheme,
            noun,
            max_pages,
            items,
            paths,
        }
    }

    /// The changed files of pull request `number` of `full_name`: `page_url(page)` is each
    /// page's URL (pages count from 1) and `more(page_json, items)` says whether another page
    /// follows. Sorted and de-duplicated ([`file_set`]).
    pub fn fetch(
        &self,
        ctx: &ApiContext,
        full_name: &str,
        number: u64,
        page_url: impl Fn(u32) -> String,
        more: impl Fn(&serde_json::Value, usize) -> bool,
    ) -> Result<Vec<String>, PluginError> {
        let auth = auth_header(ctx, self.scheme);
        let files = paged(self.max_pages, |page| {
            let v = crate::http::get_json(&page_url(page), auth.as_deref())?
                .ok_or_else(|| invalid(format!("{full_name}: {} {number} not found", self.noun)))?;
            let items = crate::json::array_at(&v, self.items);
            let names = items
                .iter()
                .flat_map(|item| self.paths.map(|p| crate::json::str_at(item, p)))
                .collect();
            Ok((names, more(&v, items.len())))
        })?;
        Ok(file_set(files))
    }
}

/// The `Authorization` value for a token (`token` scheme for Gitea-like APIs, `Bearer` else).
pub fn auth_header(ctx: &ApiContext, scheme: &str) -> Option<String> {
    (!ctx.token.is_empty()).then(|| format!("{scheme} {}", ctx.token))
}

/// A repository's webhooks on a forge's API: listed with GET on the collection, created with
/// POST to it, deleted with DELETE on `<collection>/<id>`. The defaults read GitHub's and
/// Gitea's shape (a JSON array of `{"id", "config": {"url"}}`).
pub struct HookApi {
    list_url: String,
    authorization: Option<String>,
    items: &'static str,
    url: &'static str,
    id: &'static str,
}

impl HookApi {
    pub fn new(list_url: String, authorization: Option<String>) -> HookApi {
        HookApi {
            list_url,
            authorization,
            items: "",
            url: "/config/url",
            id: "/id",
        }
    }

    /// JSON pointer to the array of hooks in the list reply (default: the reply itself).
    pub fn items_at(mut self, ptr: &'static str) -> HookApi {
        self.items = ptr;
        self
    }

    /// JSON pointer to a hook's target URL (default `/config/url`).
    pub fn url_at(mut self, ptr: &'static str) -> HookApi {
        self.url = ptr;
        self
    }

    /// JSON pointer to a hook's id, number or string (default `/id`).
    pub fn id_at(mut self, ptr: &'static str) -> HookApi {
        self.id = ptr;
        self
    }

    /// Deletes the hooks that call `hook_url` (from the first page of the list), then creates
    /// `create` if given: create-or-replace, and delete, in one.
    pub fn replace(
        &self,
        hook_url: &str,
        create: Option<&serde_json::Value>,
    ) -> Result<(), PluginError> {
        let auth = self.authorization.as_deref();
        let list = crate::http::get_json(&self.list_url, auth)?
            .ok_or_else(|| invalid(format!("{}: not found", self.list_url)))?;
        for hook in crate::json::array_at(&list, self.items) {
            let id = crate::json::str_at(hook, self.id);
            if crate::json::str_at(hook, self.url) != hook_url || id.is_empty() {
                continue;
            }
            let url = format!("{}/{}", self.list_url, crate::http::encode(&id));
            crate::http::delete(&url, auth)?;
        }
        if let Some(body) = create {
            crate::http::send_json("POST", &self.list_url, auth, body)?;
        }
        Ok(())
    }
}

/// `not found` for a branch, as `branch-head` reports it.
pub fn no_branch(full_name: &str, branch: &str) -> PluginError {
    invalid(format!("{full_name}: branch {branch} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_form() {
        assert_eq!(hex_decode("00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(hex_decode("0g"), None);
        assert_eq!(
            form_field(b"a=1&payload=%7B%22x%22%3A+1%7D", "payload").as_deref(),
            Some("{\"x\": 1}")
        );
        assert_eq!(short_ref("refs/heads/feat/x"), "feat/x");
    }
}
