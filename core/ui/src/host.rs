//! What the built-in UI needs of the server that runs it, as one trait: the UI's handlers
//! are generic over a [`UiHost`] and reach the server only through it, so they depend on
//! the services and the HTTP core but on no server module.
//!
//! The server implements it for its `AppState` (`woodlark::modules::ui`): the caller and the
//! access decisions are the REST API's own (`modules::ci::access`, with its token and
//! permission caches), the forge reads the API's (as the caller), and [`UiHost::api`] runs
//! a request through the API's route table in process. A UI page reads through
//! [`UiHost::services`]' `reads`; every change is an [`UiHost::api`] call.

use std::sync::Arc;

use async_trait::async_trait;

use crate::ci::Services;
use crate::ci::access::{OrgAccess, RepoAccess};
use crate::ci::forge::PullRequest;
use crate::http::{ApiError, Request, Response};
use crate::store::pipelines::ListFilter;
use crate::store::users::Account;
use woodlark_pipeline::types::ConfigFile;

/// The server as the UI sees it.
#[async_trait]
pub trait UiHost: Send + Sync + 'static {
    /// The CI services: `reads` for every page's reads, the queue's state, the settings.
    fn services(&self) -> &Services;

    /// `[web] root_path`: where the UI's pages are ("" at the server root).
    fn web_root(&self) -> &str;

    /// The CI API's mount (`/api`): links to what the API serves (raw logs, streams, badges).
    fn api_mount(&self) -> &str;

    /// The public base URL, without a trailing slash (the badge snippet).
    fn public_url(&self) -> String;

    /// Whether the browser reached the server over TLS (directly or through a proxy that
    /// says so): the UI's cookies are then `Secure`.
    fn over_tls(&self, req: &Request) -> bool;

    /// The CSRF token of the session `req` carries for `account`, for the page's forms;
    /// `None` when `req` carries no token.
    fn csrf_token(&self, req: &Request, account: &Account) -> Option<String>;

    /// The signed-in caller, as the API finds it (`None`: anonymous); 401 for a browser
    /// session whose write lacks its CSRF token.
    async fn current(&self, req: &Request) -> Result<Option<Arc<Account>>, ApiError>;

    /// A signed-in caller, or 401.
    async fn must_user(&self, req: &Request) -> Result<Arc<Account>, ApiError>;

    /// A signed-in instance admin: 401 anonymous, 403 others.
    async fn must_admin(&self, req: &Request) -> Result<Arc<Account>, ApiError>;

    /// The `{repo_id}` repository, which the caller may pull: the API's 401/404 otherwise.
    async fn repo(&self, req: &Request) -> Result<RepoAccess, ApiError>;

    /// [`UiHost::repo`] for a caller who may push (403 otherwise).
    async fn repo_push(&self, req: &Request) -> Result<RepoAccess, ApiError>;

    /// [`UiHost::repo`] for a repository admin (403 otherwise).
    async fn repo_admin(&self, req: &Request) -> Result<RepoAccess, ApiError>;

    /// The `{org_id}` organisation, of which the caller is a member (an admin when
    /// `need_admin`): 401 anonymous, 404 unknown, 403 not allowed.
    async fn org(&self, req: &Request, need_admin: bool) -> Result<OrgAccess, ApiError>;

    /// [`UiHost::org`] for organisation `id` and a signed-in `user`.
    async fn org_of(
        &self,
        user: Arc<Account>,
        id: i64,
        need_admin: bool,
    ) -> Result<OrgAccess, ApiError>;

    /// The repository's branches as its forge lists them to the caller (the API's
    /// `/branches`).
    async fn branches(&self, access: &RepoAccess) -> Result<Vec<String>, ApiError>;

    /// The repository's open pull requests as its forge lists them to the caller.
    async fn pull_requests(&self, access: &RepoAccess) -> Result<Vec<PullRequest>, ApiError>;

    /// The config files pipeline `pipeline_id` was compiled from, with their hashes (the
    /// API's `…/config`).
    async fn configs(&self, pipeline_id: i64) -> Result<Vec<(String, ConfigFile)>, ApiError>;

    /// The sign-in form's one-time token and the cookie that goes with it
    /// (`Set-Cookie` value).
    fn login_form(&self, req: &Request) -> (String, String);

    /// Where the sign-in form posts (the server's `/authorize` under the web root).
    fn login_form_path(&self) -> String;

    /// The message of a failed sign-in's error code (a known code's text only: a link's
    /// other text is not ours to show).
    fn sign_in_error(&self, code: &str) -> &'static str;

    /// The filters of a pipeline list (`branch`, `event`, `status`, `ref`, `before`,
    /// `after`) as the API's `GET /repos/{id}/pipelines` reads them: 400 for a status or
    /// time it does not know.
    fn list_filter(&self, req: &Request) -> Result<ListFilter, ApiError>;

    /// Signs the browser out (its session cookie cleared): the answer to send.
    async fn sign_out(&self, req: Request) -> Result<Response, ApiError>;

    /// Runs `req` (its path under [`UiHost::api_mount`]) through the CI API's own route
    /// (guard, body limit, access decision, validation) as the browser's request would run:
    /// the API's answer, or its refusal.
    async fn api(self: Arc<Self>, req: Request) -> Result<Response, ApiError>;
}
