//! The built-in web UI (crate `woodlark-ui`) as the server mounts it: its routes under the
//! web root, and the server's side of its [`UiHost`]: the UI's questions answered by the
//! REST API's own code (`modules::ci::access` and its caches, the forge reads of
//! `modules::ci::repos`, the list filters of `modules::ci::pipelines`, the sign-in of
//! `modules::web::login`) and its API requests run through `state::api::call`.

use std::sync::Arc;

use async_trait::async_trait;

use woodlark_ui::host::UiHost;

use crate::auth::{self, session};
use crate::ci::Services;
use crate::ci::forge::PullRequest;
use crate::http::{ApiError, Request, Response, Scope};
use crate::modules::ci::access::{self, OrgAccess, RepoAccess};
use crate::modules::ci::{pipelines, repos};
use crate::modules::web::{browser, login};
use crate::pipeline::types::ConfigFile;
use crate::state::{AppState, Ctx};
use crate::store::pipelines::ListFilter;
use crate::store::users::Account;

/// The UI's routes below the web root (`root`: `[web] root_path`).
pub fn routes(scope: &mut Scope<'_, Ctx>, root: &str) {
    woodlark_ui::routes(scope, root);
}

#[async_trait]
impl UiHost for AppState {
    fn services(&self) -> &Services {
        &self.ci
    }

    fn web_root(&self) -> &str {
        self.config.web.root_path()
    }

    fn api_mount(&self) -> &str {
        &self.config.ci.mount
    }

    fn public_url(&self) -> String {
        AppState::public_url(self)
    }

    fn over_tls(&self, req: &Request) -> bool {
        browser::over_tls(self, req)
    }

    fn csrf_token(&self, req: &Request, account: &Account) -> Option<String> {
        let raw = auth::bearer(req)?;
        Some(session::csrf_token(
            &raw,
            account.user.id,
            &self.token_key(account),
        ))
    }

    async fn current(&self, req: &Request) -> Result<Option<Arc<Account>>, ApiError> {
        access::current(self, req).await
    }

    async fn must_user(&self, req: &Request) -> Result<Arc<Account>, ApiError> {
        access::must_user(self, req).await
    }

    async fn must_admin(&self, req: &Request) -> Result<Arc<Account>, ApiError> {
        access::must_admin(self, req).await
    }

    async fn repo(&self, req: &Request) -> Result<RepoAccess, ApiError> {
        access::repo(self, req).await
    }

    async fn repo_push(&self, req: &Request) -> Result<RepoAccess, ApiError> {
        access::repo_push(self, req).await
    }

    async fn repo_admin(&self, req: &Request) -> Result<RepoAccess, ApiError> {
        access::repo_admin(self, req).await
    }

    async fn org(&self, req: &Request, need_admin: bool) -> Result<OrgAccess, ApiError> {
        access::org(self, req, need_admin).await
    }

    async fn org_of(
        &self,
        user: Arc<Account>,
        id: i64,
        need_admin: bool,
    ) -> Result<OrgAccess, ApiError> {
        access::org_of(self, user, id, need_admin).await
    }

    async fn branches(&self, access: &RepoAccess) -> Result<Vec<String>, ApiError> {
        repos::branches_of(self, access).await
    }

    async fn pull_requests(&self, access: &RepoAccess) -> Result<Vec<PullRequest>, ApiError> {
        repos::pull_requests_of(self, access).await
    }

    async fn configs(&self, pipeline_id: i64) -> Result<Vec<(String, ConfigFile)>, ApiError> {
        pipelines::configs_of(self, pipeline_id).await
    }

    fn login_form(&self, req: &Request) -> (String, String) {
        login::new_form(self, req)
    }

    fn login_form_path(&self) -> String {
        login::form_path(self.config.web.root_path())
    }

    fn sign_in_error(&self, code: &str) -> &'static str {
        login::sign_in_error(code)
    }

    fn list_filter(&self, req: &Request) -> Result<ListFilter, ApiError> {
        pipelines::list_filter(req)
    }

    async fn sign_out(&self, req: Request) -> Result<Response, ApiError> {
        login::logout_of(self, &req)
    }

    async fn api(self: Arc<Self>, req: Request) -> Result<Response, ApiError> {
        crate::state::api::call(&self, req).await
    }
}
