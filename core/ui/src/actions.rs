//! What a pipeline's page can do to it: cancel, restart, approve, decline, each a POST form
//! at `…/pipeline/{number}/{action}` that answers `303` back to a page (a restart: to the
//! new pipeline).
//!
//! Who may do what is the REST API's decision, not a copy of it: each action is the API's
//! own `POST /repos/{id}/pipelines/{number}[/cancel|/approve|/decline]` (`through_api`), so
//! a refusal here is the refusal there (401 anonymous, 404 a repository the caller may not
//! see, 403 no push, 400 a pipeline in the wrong state). [`Offered`] decides which buttons the page shows with the
//! same rule (`RepoAccess::allows(RepoNeed::Push)`, the API's `require_push`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::forms;
use super::host::UiHost;
use super::through_api::{self, Call, Gate};
use crate::ci::access::{RepoAccess, RepoNeed};
use crate::http::{ApiError, Method, Request, Response, Scope, StatusCode};
use crate::store::pipelines::Pipeline;
use woodlark_pipeline::status::{self, Status};

/// The buttons a pipeline's page offers its viewer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    pub cancel: bool,
    pub restart: bool,
    pub approve: bool,
    pub decline: bool,
}

impl Offered {
    /// What `access`'s caller may do to `pipeline` now: nothing without push (the API's
    /// rule, `require_push`); then what its state allows (the API refuses the rest with 400).
    pub fn of(access: &RepoAccess, pipeline: &Pipeline) -> Offered {
        if !access.allows(RepoNeed::Push) {
            return Offered::default();
        }
        let blocked = pipeline.status == Status::Blocked;
        Offered {
            cancel: status::is_active(pipeline.status) && !blocked,
            restart: status::is_done(pipeline.status),
            approve: blocked,
            decline: blocked,
        }
    }

    /// Whether any button is shown.
    pub fn any(&self) -> bool {
        self.cancel || self.restart || self.approve || self.decline
    }
}

/// The routes of the pipeline actions, below the UI's root.
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    let at = |action: &str| format!("/repos/{{repo_id}}/pipeline/{{number}}/{action}");
    forms::post(scope, &at("cancel"), cancel);
    forms::post(scope, &at("restart"), restart);
    forms::post(scope, &at("approve"), approve);
    forms::post(scope, &at("decline"), decline);
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Cancel,
    Restart,
    Approve,
    Decline,
}

impl Action {
    /// The API route below `…/pipelines/{number}` that does it, and what it did (past tense).
    fn api(self) -> (&'static str, &'static str) {
        match self {
            Action::Cancel => ("/cancel", "canceled"),
            Action::Restart => ("", "restarted"),
            Action::Approve => ("/approve", "approved"),
            Action::Decline => ("/decline", "declined"),
        }
    }
}

/// `POST <root>/repos/{id}/pipeline/{number}/cancel`.
pub async fn cancel<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    act(host, req, Action::Cancel).await
}

/// `POST <root>/repos/{id}/pipeline/{number}/restart`: on to the new pipeline.
pub async fn restart<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    act(host, req, Action::Restart).await
}

/// `POST <root>/repos/{id}/pipeline/{number}/approve`.
pub async fn approve<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    act(host, req, Action::Approve).await
}

/// `POST <root>/repos/{id}/pipeline/{number}/decline`.
pub async fn decline<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    act(host, req, Action::Decline).await
}

/// The form read and checked (the caller's session and CSRF field, then `repo_push`, the
/// API's own rule, before a bad body is reported), then the API's
/// `POST /repos/{id}/pipelines/{number}[/action]`, then back to the pipeline (a restart: to
/// the new one) with what happened.
async fn act<H: UiHost>(
    host: Arc<H>,
    mut req: Request,
    action: Action,
) -> Result<Response, ApiError> {
    let posted = match through_api::read(&host, &mut req, "Pipeline", Gate::RepoPush).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let number = match req.param_i64("number") {
        Ok(number) => number,
        Err(err) => return Ok(through_api::error_page(posted.frame, err)),
    };
    let repo_id = req.param("repo_id").to_string();
    let page = |n: i64| format!("{}/repos/{repo_id}/pipeline/{n}", posted.frame.root);
    let head = through_api::head_of(&req);
    let (below, done) = action.api();
    let api = format!("/repos/{{repo_id}}/pipelines/{{number}}{below}");
    let call = Ok(Call::body(json!({})));
    let answer =
        match through_api::call(&host, req, posted.frame.clone(), Method::POST, &api, call).await {
            Ok(answer) => answer,
            Err(page) => return Ok(page),
        };
    let (to, message) = match action {
        // A restart answers the new pipeline, or 204 when it made none.
        Action::Restart if answer.status == StatusCode::OK => {
            let new: Value = serde_json::from_slice(&answer.body).map_err(ApiError::internal)?;
            let n = new["number"].as_i64().unwrap_or(number);
            (page(n), format!("Pipeline #{n} restarts #{number}."))
        }
        Action::Restart => (
            page(number),
            "The restart made no new pipeline: its workflows were filtered out or skipped."
                .to_string(),
        ),
        _ => (page(number), format!("Pipeline #{number} was {done}.")),
    };
    tracing::info!(repo_id = %repo_id, number, ?action, "ui pipeline action");
    Ok(forms::see_other(&host, &head, &to, Some(&message)))
}
