//! A pipeline's tabs beside its steps: `…/pipeline/{n}/changed-files` (the files the commit
//! changed, as the forge reported them) and `…/pipeline/{n}/config` (the config files the
//! pipeline was compiled from, as the API's `…/config` gives them, shown as escaped text).
//! Who may see them is `access::repo`'s answer, as for the pipeline itself.

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::pipeline::load;
use super::{Frame, or_error_page, page};
use crate::http::{ApiError, Request, Response, Scope, StatusCode};

/// Which tab a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tab {
    ChangedFiles,
    Config,
}

/// A config file as shown: its path, its hash, its text (escaped by the template).
struct ConfigItem {
    name: String,
    hash: String,
    text: String,
}

#[derive(Template)]
#[template(path = "pipeline_tab.html")]
struct TabPage {
    frame: Frame,
    repo_id: i64,
    full_name: String,
    number: i64,
    status: &'static str,
    config_tab: bool,
    changed_files: Vec<String>,
    configs: Vec<ConfigItem>,
}

/// The routes of the tabs, below the UI's root.
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    scope
        .get(
            "/repos/{repo_id}/pipeline/{number}/changed-files",
            changed_files,
        )
        .get("/repos/{repo_id}/pipeline/{number}/config", config);
}

/// `GET <root>/repos/{id}/pipeline/{number}/changed-files`.
pub async fn changed_files<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    show(host, req, Tab::ChangedFiles).await
}

/// `GET <root>/repos/{id}/pipeline/{number}/config`.
pub async fn config<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    show(host, req, Tab::Config).await
}

async fn show<H: UiHost>(host: Arc<H>, req: Request, tab: Tab) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Pipeline").await;
    let outcome = render(&host, &req, frame.clone(), tab).await;
    or_error_page(frame, outcome)
}

async fn render<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    frame: Frame,
    tab: Tab,
) -> Result<Response, ApiError> {
    let access = host.repo(req).await?;
    let number = req.param_i64("number")?;
    let repo_id = access.row.repo.id;
    let p = load(host, repo_id, number).await?.pipeline;
    let configs = match tab {
        Tab::Config => host
            .configs(p.id)
            .await?
            .into_iter()
            .map(|(hash, f)| ConfigItem {
                name: f.name,
                hash,
                text: f.data,
            })
            .collect(),
        Tab::ChangedFiles => Vec::new(),
    };
    let full_name = access.row.repo.full_name.clone();
    let what = match tab {
        Tab::Config => "Config",
        Tab::ChangedFiles => "Changed files",
    };
    page(
        StatusCode::OK,
        &TabPage {
            frame: frame.titled(&format!("{what} · #{number} · {full_name}")),
            repo_id,
            full_name,
            number,
            status: p.status.as_str(),
            config_tab: tab == Tab::Config,
            changed_files: match tab {
                Tab::ChangedFiles => p.commit.changed_files.clone(),
                Tab::Config => Vec::new(),
            },
            configs,
        },
    )
}
