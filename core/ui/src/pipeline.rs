//! A pipeline (`/repos/{id}/pipeline/{number}`): its workflows and steps; with a step's pid
//! (`…/{step pid}`), that step's stored log too.

use std::sync::Arc;

use askama::Template;

use super::actions::Offered;
use super::host::UiHost;
use super::logview::{Chunk, Gap};
use super::{Frame, or_error_page, page, when};
use crate::http::browser::web_link;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::store::StoreError;
use crate::store::now_unix;
use crate::store::pipelines::{self, PipelineRow, Step};
use woodlark_pipeline::status;

struct StepItem {
    pid: i64,
    name: String,
    state: &'static str,
    duration: String,
    selected: bool,
}

struct WorkflowItem {
    name: String,
    state: &'static str,
    duration: String,
    error: String,
    steps: Vec<StepItem>,
}

struct LogView {
    step_name: String,
    step_state: &'static str,
    exit_code: i64,
    /// The chunk of lines shown, and links for the others ([`logview`]).
    chunk: Chunk,
    before: Vec<Gap>,
    after: Vec<Gap>,
    /// Where the script fetches lines (`…/{pid}/lines`).
    lines_url: String,
    /// The API's log stream, while the step may still write lines (the live view).
    live: Option<String>,
    /// The API's raw download of the whole log.
    download: String,
}

#[derive(Template)]
#[template(path = "pipeline.html")]
struct PipelinePage {
    frame: Frame,
    repo_id: i64,
    full_name: String,
    number: i64,
    status: &'static str,
    event: &'static str,
    branch: String,
    commit: String,
    message: String,
    author: String,
    created_ago: String,
    created_iso: String,
    duration: String,
    forge_url: String,
    /// The compiler's findings on the pipeline: message, and whether it is only a warning.
    errors: Vec<(String, bool)>,
    workflows: Vec<WorkflowItem>,
    log: Option<LogView>,
    /// The action buttons this viewer gets.
    offered: Offered,
    /// The pipeline may still change: the page follows the events stream.
    follow: bool,
}

/// `GET <root>/repos/{id}/pipeline/{number}`.
pub async fn show<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Pipeline").await;
    let outcome = render(&host, &req, frame.clone(), false).await;
    or_error_page(frame, outcome)
}

/// `GET <root>/repos/{id}/pipeline/{number}/{step pid}`.
pub async fn step<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Step").await;
    let outcome = render(&host, &req, frame.clone(), true).await;
    or_error_page(frame, outcome)
}

async fn render<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    frame: Frame,
    with_step: bool,
) -> Result<Response, ApiError> {
    // The same checks and answers as `GET /api/repos/{id}/pipelines/{number}` and the log
    // endpoints: the repository's access first, then the pipeline, then the step.
    let access = host.repo(req).await?;
    let number = req.param_i64("number")?;
    let pid = if with_step {
        Some(req.param_i64("step_pid")?)
    } else {
        None
    };
    let repo_id = access.row.repo.id;
    let row = load(host, repo_id, number).await?;
    let selected = match pid {
        Some(pid) => Some(
            steps(&row)
                .find(|s| s.pid == pid)
                .cloned()
                .ok_or_else(|| ApiError::not_found("Step not found"))?,
        ),
        None => None,
    };
    let log = match &selected {
        Some(step) => {
            let step_id = step.id;
            let from = match req.query("from") {
                None => 0,
                Some(raw) => raw.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    ApiError::bad_request(format!("invalid from {raw:?}: expected a line number"))
                })?,
            };
            let chunk = host
                .services()
                .log_reads
                .read_blocking(move |c| Chunk::read(c, step_id, from))
                .await?;
            Some(log_view(host, &frame, repo_id, number, step, chunk))
        }
        None => None,
    };
    let now = now_unix();
    let offered = Offered::of(&access, &row.pipeline);
    let p = row.pipeline;
    let workflows = p
        .workflows
        .iter()
        .flatten()
        .map(|w| WorkflowItem {
            name: w.name.clone(),
            state: w.state.as_str(),
            duration: when::duration(now, w.started, w.finished),
            error: w.error.clone(),
            steps: w
                .children
                .iter()
                .map(|s| StepItem {
                    pid: s.pid,
                    name: s.name.clone(),
                    state: s.state.as_str(),
                    duration: when::duration(now, s.started, s.finished),
                    selected: pid == Some(s.pid),
                })
                .collect(),
        })
        .collect();
    let full_name = access.row.repo.full_name.clone();
    let title = match &selected {
        Some(s) => format!("{} · #{} · {full_name}", s.name, p.number),
        None => format!("#{} · {full_name}", p.number),
    };
    page(
        StatusCode::OK,
        &PipelinePage {
            frame: frame.titled(&title),
            repo_id,
            full_name,
            number: p.number,
            status: p.status.as_str(),
            event: p.event.as_str(),
            branch: p.commit.branch.clone(),
            commit: p.commit.sha.chars().take(10).collect(),
            message: p.commit.message.clone(),
            author: p.commit.author.clone(),
            created_ago: when::ago(now, p.created),
            created_iso: when::iso(p.created),
            duration: when::duration(now, p.started, p.finished),
            forge_url: web_link(&p.commit.forge_url)
                .unwrap_or_default()
                .to_string(),
            errors: p
                .errors
                .iter()
                .map(|e| (e.message.clone(), e.is_warning))
                .collect(),
            workflows,
            log,
            offered,
            follow: !status::is_done(p.status),
        },
    )
}

/// Pipeline `number` of repository `repo_id`, or the API's 404.
pub(super) async fn load<H: UiHost>(
    host: &Arc<H>,
    repo_id: i64,
    number: i64,
) -> Result<PipelineRow, ApiError> {
    host.services()
        .reads
        .read(move |c| pipelines::full(c, repo_id, number))
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::not_found("Pipeline not found"),
            other => other.into(),
        })
}

pub(super) fn steps(row: &PipelineRow) -> impl Iterator<Item = &Step> {
    row.pipeline
        .workflows
        .iter()
        .flatten()
        .flat_map(|w| w.children.iter())
}

fn log_view<H: UiHost>(
    host: &Arc<H>,
    frame: &Frame,
    repo_id: i64,
    number: i64,
    step: &Step,
    chunk: Chunk,
) -> LogView {
    let api = host.api_mount();
    let live = (!status::is_done(step.state))
        .then(|| format!("{api}/stream/logs/{repo_id}/{number}/{}", step.id));
    LogView {
        step_name: step.name.clone(),
        step_state: step.state.as_str(),
        exit_code: step.exit_code,
        before: chunk.gaps_before(),
        after: chunk.gaps_after(),
        chunk,
        lines_url: format!(
            "{}/repos/{repo_id}/pipeline/{number}/{}/lines",
            frame.root, step.pid
        ),
        live,
        download: format!("{api}/repos/{repo_id}/logs/{number}/{}/download", step.id),
    }
}
