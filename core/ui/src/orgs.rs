//! An organisation's page (`/orgs/{id}`: its repositories) and settings (`/org/{id}/settings`:
//! its secrets and registries, never a value or password), upstream's paths. Who may see
//! them is the API's `access::org`: members the page (as `GET /api/orgs/{id}`), org admins
//! the settings (as `/api/orgs/{id}/secrets`); anonymous callers are offered the sign-in.
//! The settings' forms are `scoped_actions` at the organisation's level.

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::repos::RepoItem;
use super::scoped::ScopedLists;
use super::{Frame, or_error_page, page};
use crate::ci::users::home_list;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::store::now_unix;
use crate::store::secrets::ResourceScope;

pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    scope
        .get("/orgs/{org_id}", show)
        .get("/org/{org_id}/settings", settings);
    let gate = super::through_api::Gate::OrgAdmin;
    let show = super::through_api::page_handler(settings::<H>);
    super::scoped_actions::routes(
        scope,
        "/org/{org_id}/settings",
        gate,
        "/orgs/{org_id}",
        show,
    );
}

#[derive(Template)]
#[template(path = "org.html")]
struct OrgPage {
    frame: Frame,
    id: i64,
    name: String,
    repos: Vec<RepoItem>,
    admin: bool,
}

/// `GET <root>/orgs/{id}`: the caller's repositories in the organisation (the home list's,
/// `ci::users::home_list`, kept to this organisation), each with its newest pipeline.
pub async fn show<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Organisation").await;
    let outcome = async {
        let org = host.org(&req, false).await?;
        let (user, org_id) = (org.user.user.clone(), org.org.id);
        let found = host
            .services()
            .reads
            .read(move |c| home_list(c, &user, false, "", 0, usize::MAX))
            .await?;
        let now = now_unix();
        let repos = found
            .into_iter()
            .filter(|(repo, _)| repo.org_id == org_id)
            .map(|(repo, last)| RepoItem::of(repo, last.as_ref(), now))
            .collect();
        page(
            StatusCode::OK,
            &OrgPage {
                frame: frame.clone().titled(&org.org.name),
                id: org.org.id,
                name: org.org.name,
                repos,
                admin: org.perm.admin,
            },
        )
    }
    .await;
    or_error_page(frame, outcome)
}

#[derive(Template)]
#[template(path = "org_settings.html")]
struct OrgSettings {
    frame: Frame,
    id: i64,
    name: String,
    base: String,
    /// The organisation's, then the instance's.
    lists: ScopedLists,
}

/// `GET <root>/org/{id}/settings`.
pub async fn settings<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Organisation settings").await;
    let outcome = async {
        let org = host.org(&req, true).await?;
        let here = ResourceScope::org(org.org.id);
        page(
            StatusCode::OK,
            &OrgSettings {
                frame: frame
                    .clone()
                    .titled(&format!("Settings · {}", org.org.name)),
                base: format!("{}/org/{}/settings", frame.root, org.org.id),
                id: org.org.id,
                name: org.org.name,
                lists: ScopedLists::of(&host, here, &[("instance", ResourceScope::GLOBAL)]).await?,
            },
        )
    }
    .await;
    or_error_page(frame, outcome)
}
