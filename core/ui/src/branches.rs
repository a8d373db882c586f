//! A repository's branches (`/repos/{id}/branches`) and open pull requests
//! (`/repos/{id}/pull-requests`), upstream's paths: the forge's lists as the API's
//! `/branches` and `/pull_requests` read them (the caller's pull permission, `access::repo`;
//! the forge asked as the caller), each entry linking to the repository's pipelines filtered
//! by it (`?branch=`, or a pull request's events and ref).

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::{Frame, or_error_page, page};
use crate::ci::access;
use crate::http::{ApiError, Request, Response, StatusCode};

/// One entry: its label and the query of the pipeline list filtered by it.
struct Entry {
    label: String,
    query: String,
}

#[derive(Template)]
#[template(path = "branches.html")]
struct ListPage {
    frame: Frame,
    id: i64,
    full_name: String,
    heading: &'static str,
    empty: &'static str,
    entries: Vec<Entry>,
}

fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        out.append_pair(k, v);
    }
    out.finish()
}

/// `GET <root>/repos/{id}/branches`.
pub async fn branches<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Branches").await;
    let outcome = async {
        let access = host.repo(&req).await?;
        let names = host.branches(&access).await?;
        let entries = names
            .into_iter()
            .map(|b| Entry {
                query: query(&[("branch", &b)]),
                label: b,
            })
            .collect();
        list_page(frame.clone(), &access, "Branches", "No branches.", entries)
    }
    .await;
    or_error_page(frame, outcome)
}

/// `GET <root>/repos/{id}/pull-requests`: each links to the pipelines of its events whose
/// ref names its number (`refs/pull/N/head`, `refs/merge-requests/N/head`, …).
pub async fn pull_requests<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Pull requests").await;
    let outcome = async {
        let access = host.repo(&req).await?;
        let open = host.pull_requests(&access).await?;
        let entries = open
            .into_iter()
            .map(|pr| Entry {
                query: query(&[
                    (
                        "event",
                        "pull_request,pull_request_closed,pull_request_metadata",
                    ),
                    ("ref", &format!("/{}/", pr.index)),
                ]),
                label: format!("#{} {}", pr.index, pr.title),
            })
            .collect();
        list_page(
            frame.clone(),
            &access,
            "Pull requests",
            "No open pull requests.",
            entries,
        )
    }
    .await;
    or_error_page(frame, outcome)
}

fn list_page(
    frame: Frame,
    access: &access::RepoAccess,
    heading: &'static str,
    empty: &'static str,
    entries: Vec<Entry>,
) -> Result<Response, ApiError> {
    let repo = &access.row.repo;
    page(
        StatusCode::OK,
        &ListPage {
            frame: frame.titled(&format!("{heading} · {}", repo.full_name)),
            id: repo.id,
            full_name: repo.full_name.clone(),
            heading,
            empty,
            entries,
        },
    )
}
