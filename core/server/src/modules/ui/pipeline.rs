//! A pipeline (`/repos/{id}/pipeline/{number}`): its workflows and steps; with a step's pid
//! (`…/{step pid}`), that step's stored log too.

use askama::Template;

use super::actions::Offered;
use super::{Frame, ansi, or_error_page, page, when};
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::modules::ci::access;
use crate::state::Ctx;
use crate::store::logs;
use crate::store::now_unix;
use crate::store::pipelines::{self, PipelineRow, Step};
use crate::store::{StoreError, StoreResult};

/// At most this much of a log is shown on its page; the whole of it is the raw download.
const LOG_LINES: usize = 10_000;
const LOG_BYTES: usize = 2 * 1024 * 1024;

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

/// A log line: its number (from 1, as the anchors `#L1`… count) and its text as HTML
/// (escaped, colours as classes: [`ansi::line_to_html`]).
struct LogLine {
    number: i64,
    html: String,
}

struct LogView {
    step_name: String,
    step_state: &'static str,
    exit_code: i64,
    lines: Vec<LogLine>,
    /// The page shows the first lines only.
    truncated: bool,
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
}

/// `GET <root>/repos/{id}/pipeline/{number}`.
pub async fn show(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&ctx, &req, "Pipeline").await;
    let outcome = render(&ctx, &req, frame.clone(), false).await;
    or_error_page(frame, outcome)
}

/// `GET <root>/repos/{id}/pipeline/{number}/{step pid}`.
pub async fn step(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&ctx, &req, "Step").await;
    let outcome = render(&ctx, &req, frame.clone(), true).await;
    or_error_page(frame, outcome)
}

async fn render(
    ctx: &Ctx,
    req: &Request,
    frame: Frame,
    with_step: bool,
) -> Result<Response, ApiError> {
    // The same checks and answers as `GET /api/repos/{id}/pipelines/{number}` and the log
    // endpoints: the repository's access first, then the pipeline, then the step.
    let access = access::repo(ctx, req).await?;
    let number = req.param_i64("number")?;
    let pid = if with_step {
        Some(req.param_i64("step_pid")?)
    } else {
        None
    };
    let repo_id = access.row.repo.id;
    let row = load(ctx, repo_id, number).await?;
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
            let lines = ctx
                .ci
                .log_reads
                .read_blocking(move |c| first_lines(c, step_id))
                .await?;
            Some(log_view(ctx, repo_id, number, step, lines))
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
    let full_name = access.row.repo.full_name;
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
            forge_url: p.commit.forge_url.clone(),
            errors: p
                .errors
                .iter()
                .map(|e| (e.message.clone(), e.is_warning))
                .collect(),
            workflows,
            log,
            offered,
        },
    )
}

/// Pipeline `number` of repository `repo_id`, or the API's 404.
pub(super) async fn load(ctx: &Ctx, repo_id: i64, number: i64) -> Result<PipelineRow, ApiError> {
    ctx.ci
        .reads
        .read(move |c| pipelines::full(c, repo_id, number))
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::not_found("Pipeline not found"),
            other => other.into(),
        })
}

fn steps(row: &PipelineRow) -> impl Iterator<Item = &Step> {
    row.pipeline
        .workflows
        .iter()
        .flatten()
        .flat_map(|w| w.children.iter())
}

/// The first lines of a step's log, one more than shown when there are more.
fn first_lines(c: &crate::store::Tx, step_id: i64) -> StoreResult<Vec<logs::StoredLine>> {
    logs::page(c, step_id, 0, LOG_LINES + 1, LOG_BYTES)
}

fn log_view(
    ctx: &Ctx,
    repo_id: i64,
    number: i64,
    step: &Step,
    mut stored: Vec<logs::StoredLine>,
) -> LogView {
    let bytes: usize = stored.iter().map(|l| l.data.len()).sum();
    let truncated = stored.len() > LOG_LINES || bytes >= LOG_BYTES;
    stored.truncate(LOG_LINES);
    let lines = stored
        .iter()
        .filter(|l| l.kind != crate::pipeline::types::LineKind::ExitCode)
        .map(|l| LogLine {
            number: l.line + 1,
            html: ansi::line_to_html(&l.data),
        })
        .collect();
    LogView {
        step_name: step.name.clone(),
        step_state: step.state.as_str(),
        exit_code: step.exit_code,
        lines,
        truncated,
        download: format!(
            "{}/repos/{repo_id}/logs/{number}/{}/download",
            ctx.config.ci.mount, step.id
        ),
    }
}
