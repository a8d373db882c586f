//! The instance admin's page (`/admin`, upstream's path): users, agents, the queue, forges,
//! the instance's secrets and registries, and the version. Who may see it is the API's
//! `access::must_admin` (anonymous callers are sent to sign in, as `/user` does; other users
//! get its 403 as a page). Its forms are in [`super::admin_actions`].

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::scoped::ScopedLists;
use super::{Frame, or_error_page, page, pages::forge_label, to_login, when};
use crate::http::paging::MAX_PER_PAGE;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::store::secrets::ResourceScope;
use crate::store::tasks::{self, TaskState};
use crate::store::{agents, forges, now_unix, users};

pub struct UserItem {
    pub login: String,
    pub email: String,
    pub admin: bool,
    /// Made an admin by the operator's configuration: the flag cannot be changed here.
    pub admin_env: bool,
}

pub struct AgentItem {
    pub id: i64,
    pub name: String,
    pub platform: String,
    pub backend: String,
    pub capacity: i64,
    pub version: String,
    pub last_contact: String,
    pub org_scoped: bool,
    pub no_schedule: bool,
}

pub struct ForgeItem {
    pub id: i64,
    pub label: String,
    pub url: String,
}

pub struct QueueInfo {
    pub paused: bool,
    pub pending: usize,
    pub running: usize,
    pub waiting: usize,
    pub free_workers: usize,
}

/// An agent just registered: its token, shown on this one answer only.
pub struct NewAgent {
    pub name: String,
    pub token: String,
}

#[derive(Template)]
#[template(path = "admin.html")]
struct AdminPage {
    frame: Frame,
    users: Vec<UserItem>,
    agents: Vec<AgentItem>,
    new_agent: Option<NewAgent>,
    queue: QueueInfo,
    forges: Vec<ForgeItem>,
    /// The instance's (no wider scope).
    lists: ScopedLists,
    base: String,
    version: String,
    limit: u32,
}

/// `GET <root>/admin`.
pub async fn show<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, account) = Frame::of(&host, &req, "Administration").await;
    if account.is_none() {
        return Ok(to_login(&frame));
    }
    let outcome = match host.must_admin(&req).await {
        Ok(_) => admin_page(&host, frame.clone(), None).await,
        Err(err) => Err(err),
    };
    or_error_page(frame, outcome)
}

/// The page, with `new_agent`'s token when one was just registered. The caller has been
/// checked to be an instance admin.
pub async fn admin_page<H: UiHost>(
    host: &Arc<H>,
    frame: Frame,
    new_agent: Option<NewAgent>,
) -> Result<Response, ApiError> {
    let env = host.services().settings.env_admins.clone();
    let (users, agents, forges, (pending, running, waiting)) = host
        .services()
        .reads
        .read(move |c| {
            let users = users::list(c, &env, 1, MAX_PER_PAGE)?;
            let agents = agents::list(c, 1, MAX_PER_PAGE)?;
            let forges = forges::list(c, 1, MAX_PER_PAGE)?;
            let mut counts = (0, 0, 0);
            for t in tasks::list(c, None)? {
                match t.state {
                    TaskState::Pending => counts.0 += 1,
                    TaskState::Running => counts.1 += 1,
                    TaskState::Waiting => counts.2 += 1,
                }
            }
            Ok((users, agents, forges, counts))
        })
        .await?;
    let now = now_unix();
    let queue = QueueInfo {
        paused: host.services().queue.paused().await,
        pending,
        running,
        waiting,
        free_workers: host.services().queue.free_workers(),
    };
    page(
        StatusCode::OK,
        &AdminPage {
            base: format!("{}/admin", frame.root),
            frame,
            users: users
                .into_iter()
                .map(|u| UserItem {
                    login: u.login,
                    email: u.email,
                    admin: u.admin,
                    admin_env: u.admin_env,
                })
                .collect(),
            agents: agents
                .into_iter()
                .map(|row| {
                    let a = row.agent;
                    AgentItem {
                        id: a.id,
                        last_contact: when::ago(now, a.last_contact),
                        name: a.name,
                        platform: a.platform,
                        backend: a.backend,
                        capacity: a.capacity,
                        version: a.version,
                        org_scoped: a.org_id > 0,
                        no_schedule: a.no_schedule,
                    }
                })
                .collect(),
            new_agent,
            queue,
            forges: forges
                .into_iter()
                .map(|f| ForgeItem {
                    id: f.id,
                    label: forge_label(f.kind, &f.url),
                    url: f.url,
                })
                .collect(),
            lists: ScopedLists::of(host, ResourceScope::GLOBAL, &[]).await?,
            version: crate::ci::version_string(),
            limit: MAX_PER_PAGE,
        },
    )
}
