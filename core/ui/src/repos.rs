//! The repository list (`/repos`) and a repository's pipelines (`/repos/{id}`).

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::{Frame, or_error_page, page, to_login, when};
use crate::ci::access::RepoNeed;
use crate::ci::users::home_list;
use crate::http::browser::web_link;
use crate::http::paging::Page;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::store::now_unix;
use crate::store::pipelines::{self, Pipeline};
use crate::store::repos::{Repo, Visibility};

/// A pipeline as a row of a list.
pub struct PipelineItem {
    pub number: i64,
    pub status: &'static str,
    pub event: &'static str,
    pub branch: String,
    /// The message's first line.
    pub title: String,
    pub author: String,
    pub created_ago: String,
    pub created_iso: String,
    pub duration: String,
}

impl PipelineItem {
    pub fn of(p: &Pipeline, now: i64) -> PipelineItem {
        PipelineItem {
            number: p.number,
            status: p.status.as_str(),
            event: p.event.as_str(),
            branch: p.commit.branch.clone(),
            title: p.commit.message.lines().next().unwrap_or("").to_string(),
            author: p.commit.author.clone(),
            created_ago: when::ago(now, p.created),
            created_iso: when::iso(p.created),
            duration: when::duration(now, p.started, p.finished),
        }
    }
}

/// A repository as one row of a list: its name and newest pipeline.
pub(super) struct RepoItem {
    pub(super) id: i64,
    pub(super) full_name: String,
    pub(super) last: Option<PipelineItem>,
}

impl RepoItem {
    pub(super) fn of(repo: Repo, last: Option<&Pipeline>, now: i64) -> RepoItem {
        RepoItem {
            id: repo.id,
            full_name: repo.full_name,
            last: last.map(|p| PipelineItem::of(p, now)),
        }
    }
}

#[derive(Template)]
#[template(path = "repos.html")]
struct RepoList {
    frame: Frame,
    filter: String,
    repos: Vec<RepoItem>,
    page: u32,
    /// There are more after this page.
    more: bool,
    /// The filter as a query for the pager's links (`&q=…`), "" unfiltered.
    filter_query: String,
}

/// `GET <root>/repos[?q=text]`: the signed-in user's repositories (the API's
/// `GET /user/repos`: those they own or may push to, active ones) with each one's newest
/// pipeline; `q` keeps those whose name holds it. Anonymous callers go to the login page
/// (the API answers them 401).
pub async fn list<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, account) = Frame::of(&host, &req, "Repositories").await;
    let Some(account) = account else {
        return Ok(to_login(&frame));
    };
    let filter = req.query("q").unwrap_or_default().trim().to_string();
    let needle = filter.to_lowercase();
    let user = account.user.clone();
    // The REST API's home list: the same repositories, one read, a page of them (`page`, as
    // the API's lists; one more than a page read to know whether there is a next one).
    let paging = Page::from_request(&req);
    let per_page = paging.per_page as usize;
    let skip = (paging.page as usize - 1).saturating_mul(per_page);
    let found = host
        .services()
        .reads
        .read(move |c| home_list(c, &user, false, &needle, skip, per_page + 1))
        .await;
    let mut found = match found {
        Ok(found) => found,
        Err(err) => return or_error_page(frame, Err(err.into())),
    };
    let more = found.len() > per_page;
    found.truncate(per_page);
    let filter_query = if filter.is_empty() {
        String::new()
    } else {
        let pairs = form_urlencoded::Serializer::new(String::new())
            .append_pair("q", &filter)
            .finish();
        format!("&{pairs}")
    };
    let now = now_unix();
    let repos = found
        .into_iter()
        .map(|(repo, last)| RepoItem::of(repo, last.as_ref(), now))
        .collect();
    page(
        StatusCode::OK,
        &RepoList {
            frame,
            filter,
            repos,
            page: paging.page,
            more,
            filter_query,
        },
    )
}

#[derive(Template)]
#[template(path = "repo.html")]
struct RepoPage {
    frame: Frame,
    id: i64,
    full_name: String,
    visibility: &'static str,
    forge_url: String,
    pipelines: Vec<PipelineItem>,
    page: u32,
    /// There are older pipelines than this page's.
    more: bool,
    /// The viewer may start a run (the API's `require_push`): the manual-run link.
    may_run: bool,
    /// The viewer may change the settings (the API's `require_admin`): the settings link.
    may_admin: bool,
    /// The list's filters as a query (`&branch=main`, for the pager), "" unfiltered.
    filter_query: String,
}

/// `GET <root>/repos/{id}[?page=N]`: the repository's pipelines, newest first, 50 a page.
/// Who may see it is `access::repo`'s answer, as for `GET /api/repos/{id}/pipelines`.
pub async fn pipelines<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Repository").await;
    let outcome = repo_page(&host, &req, frame.clone()).await;
    or_error_page(frame, outcome)
}

async fn repo_page<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    frame: Frame,
) -> Result<Response, ApiError> {
    let access = host.repo(req).await?;
    let paging = Page::from_request(req);
    let filter = host.list_filter(req)?;
    let filter_query = filter_query(req);
    let repo_id = access.row.repo.id;
    // The page, and whether one pipeline follows it (the pipeline at the next page's start,
    // read as a page of one), so the "Older" link never leads to an empty page.
    let (list, more) = host
        .services()
        .reads
        .read(move |c| {
            let list = pipelines::list(c, repo_id, &filter, paging.page, paging.per_page)?;
            let full = list.len() == paging.per_page as usize;
            let after = u32::try_from(u64::from(paging.page) * u64::from(paging.per_page) + 1);
            let more = match after {
                Ok(after) if full => !pipelines::list(c, repo_id, &filter, after, 1)?.is_empty(),
                _ => false,
            };
            Ok((list, more))
        })
        .await?;
    let now = now_unix();
    let may_run = access.allows(RepoNeed::Push);
    let may_admin = access.allows(RepoNeed::Admin);
    let repo = access.row.repo.clone();
    page(
        StatusCode::OK,
        &RepoPage {
            frame: frame.titled(&repo.full_name),
            id: repo.id,
            visibility: visibility_name(repo.visibility),
            full_name: repo.full_name,
            forge_url: web_link(&repo.forge_url).unwrap_or_default().to_string(),
            more,
            pipelines: list.iter().map(|p| PipelineItem::of(p, now)).collect(),
            page: paging.page,
            may_run,
            may_admin,
            filter_query,
        },
    )
}

/// The filters of `req` the pipeline list takes, and its page size, as `&name=value` pairs
/// for the pager's links (the branch and pull-request pages link to the list filtered so;
/// a page of 10 links to the next 10).
fn filter_query(req: &Request) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for name in [
        "branch", "event", "status", "ref", "before", "after", "perPage",
    ] {
        if let Some(v) = req.query(name).filter(|v| !v.is_empty()) {
            out.append_pair(name, &v);
        }
    }
    let pairs = out.finish();
    if pairs.is_empty() {
        pairs
    } else {
        format!("&{pairs}")
    }
}

pub fn visibility_name(v: Visibility) -> &'static str {
    match v {
        Visibility::Public => "public",
        Visibility::Internal => "internal",
        Visibility::Private => "private",
    }
}
