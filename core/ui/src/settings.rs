//! A repository's settings page (`/repos/{id}/settings`, upstream's path), for its admins as
//! the API's settings routes decide (`access::repo_admin`: anonymous → sign in, no pull → 404,
//! pull without admin → 403). It shows what `PATCH /api/repos/{id}` takes, the repository's
//! secrets and registries (never a value or password), the organisation's where the caller is
//! its admin and the instance's (any signed-in user reads those, as the API lets them), the
//! crons and the badge. The forms on it post to [`super::settings_actions`].

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::scoped::{ScopedLists, event_choices};
use super::{Frame, or_error_page, page, repos::visibility_name, when};
use crate::ci::access::RepoAccess;
use crate::http::paging::MAX_PER_PAGE;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::store::crons;
use crate::store::repos::{APPROVAL_MODES, Repo, Visibility};
use crate::store::secrets::ResourceScope;

/// `PATCH /api/repos/{id}`'s fields as the general form shows them.
pub struct General {
    pub config_file: String,
    pub timeout: i64,
    pub visibilities: Vec<(&'static str, bool)>,
    pub approval_modes: Vec<(&'static str, bool)>,
    pub allow_pr: bool,
    pub allow_deploy: bool,
    pub cancel_events: Vec<(&'static str, bool)>,
    pub trusted_network: bool,
    pub trusted_volumes: bool,
    pub trusted_security: bool,
    /// Only instance admins may change the trusted flags (the API answers others 403).
    pub trusted_editable: bool,
}

impl General {
    fn of(repo: &Repo, instance_admin: bool) -> General {
        General {
            config_file: repo.config_file.clone(),
            timeout: repo.timeout,
            visibilities: Visibility::ALL
                .iter()
                .map(|v| (visibility_name(*v), *v == repo.visibility))
                .collect(),
            approval_modes: APPROVAL_MODES
                .iter()
                .map(|m| (*m, *m == repo.require_approval))
                .collect(),
            allow_pr: repo.allow_pr,
            allow_deploy: repo.allow_deploy,
            cancel_events: event_choices(&repo.cancel_previous_pipeline_events),
            trusted_network: repo.trusted.network,
            trusted_volumes: repo.trusted.volumes,
            trusted_security: repo.trusted.security,
            trusted_editable: instance_admin,
        }
    }
}

pub struct CronItem {
    pub id: i64,
    pub name: String,
    pub schedule: String,
    pub timezone: String,
    pub branch: String,
    pub enabled: bool,
    /// The next run, RFC 3339 in UTC.
    pub next_iso: String,
}

#[derive(Template)]
#[template(path = "repo_settings.html")]
struct SettingsPage {
    frame: Frame,
    id: i64,
    full_name: String,
    /// Where the page's forms post: `<root>/repos/{id}/settings`.
    base: String,
    general: General,
    /// The organisation's lists only when the caller is its admin, then the instance's.
    lists: ScopedLists,
    crons: Vec<CronItem>,
    badge: Badge,
    limit: u32,
}

/// The badge snippet for one branch.
pub struct Badge {
    pub image: String,
    /// The same image by path alone, for the page's own preview: the page's policy allows
    /// images of its own origin, and `public_url` may name another one (a proxy's name the
    /// browser does not use, or `localhost` seen from elsewhere).
    pub preview: String,
    /// Where the badge links: the repository's page here.
    pub link: String,
    pub branch: String,
    /// The branches to choose from (the forge's list, or just the default branch).
    pub branches: Vec<(String, bool)>,
}

impl Badge {
    pub fn markdown(&self) -> String {
        format!("[![status-badge]({})]({})", self.image, self.link)
    }

    pub fn html(&self) -> String {
        format!(
            "<a href=\"{}\"><img src=\"{}\" alt=\"status-badge\" /></a>",
            self.link, self.image
        )
    }
}

/// `GET <root>/repos/{id}/settings[?branch=name]`.
pub async fn show<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Settings").await;
    let outcome = settings_page(&host, &req, frame.clone()).await;
    or_error_page(frame, outcome)
}

async fn settings_page<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    frame: Frame,
) -> Result<Response, ApiError> {
    let access = host.repo_admin(req).await?;
    let account = access.user.clone().ok_or_else(ApiError::unauthorized)?;
    let repo = access.row.repo.clone();
    let here = ResourceScope::repo(repo.id);
    // The organisation's lists only for its admins, as `GET /api/orgs/{id}/secrets` decides.
    let org_admin = host
        .org_of(account.clone(), repo.org_id, true)
        .await
        .is_ok();
    let org = ("organisation", ResourceScope::org(repo.org_id));
    let instance = ("instance", ResourceScope::GLOBAL);
    let wider: &[_] = if org_admin {
        &[org, instance]
    } else {
        &[instance]
    };
    let lists = ScopedLists::of(host, here, wider).await?;
    let repo_id = repo.id;
    let crons = host
        .services()
        .reads
        .read(move |c| crons::list(c, repo_id, 1, MAX_PER_PAGE))
        .await?
        .into_iter()
        .map(|c| CronItem {
            id: c.id,
            next_iso: when::iso(c.next_exec),
            name: c.name,
            schedule: c.schedule,
            timezone: c.timezone,
            branch: c.branch,
            enabled: c.enabled,
        })
        .collect();
    let badge = badge(host, req, &access, &frame).await;
    let base = format!("{}/repos/{}/settings", frame.root, repo.id);
    page(
        StatusCode::OK,
        &SettingsPage {
            frame: frame.titled(&format!("Settings · {}", repo.full_name)),
            id: repo.id,
            base,
            general: General::of(&repo, account.user.admin),
            full_name: repo.full_name,
            lists,
            crons,
            badge,
            limit: MAX_PER_PAGE,
        },
    )
}

/// The badge of `?branch=` (default: the repository's default branch), with the forge's
/// branches to pick from. A forge that cannot list them leaves the default branch alone
/// in the list (logged: the rest of the page does not need the forge).
async fn badge<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    access: &RepoAccess,
    frame: &Frame,
) -> Badge {
    let repo = &access.row.repo;
    let mut names = match host.branches(access).await {
        Ok(names) => names,
        Err(err) => {
            tracing::warn!(repo = repo.id, err = %err.message, "settings page: the forge listed no branches");
            Vec::new()
        }
    };
    if !repo.default_branch.is_empty() && !names.contains(&repo.default_branch) {
        names.insert(0, repo.default_branch.clone());
    }
    let wanted = req.query("branch").filter(|b| names.contains(b));
    let branch = wanted.unwrap_or_else(|| repo.default_branch.clone());
    let public = host.public_url();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("branch", &branch)
        .finish();
    let (origin, base) = split_origin(&public);
    let path = format!(
        "{base}{}/badges/{}/status.svg?{query}",
        host.api_mount(),
        repo.id
    );
    Badge {
        image: format!("{origin}{path}"),
        preview: path,
        link: format!("{public}{}/repos/{}", frame.root, repo.id),
        branches: names
            .into_iter()
            .map(|n| {
                let chosen = n == branch;
                (n, chosen)
            })
            .collect(),
        branch,
    }
}

/// `url` as its origin (`https://ci.example.com`) and the path after it (`/ci`, or empty).
fn split_origin(url: &str) -> (&str, &str) {
    let host = url.find("://").map_or(0, |i| i + 3);
    match url[host..].find('/') {
        Some(i) => url.split_at(host + i),
        None => (url, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::split_origin;

    #[test]
    fn a_public_url_splits_into_origin_and_path() {
        assert_eq!(
            split_origin("https://ci.example.com"),
            ("https://ci.example.com", "")
        );
        assert_eq!(
            split_origin("https://ci.example.com:8443/woodlark"),
            ("https://ci.example.com:8443", "/woodlark")
        );
        assert_eq!(
            split_origin("http://127.0.0.1:8000/"),
            ("http://127.0.0.1:8000", "/")
        );
    }
}
