//! What a pipeline's page can do to it: cancel, restart, approve, decline, each a POST form
//! at `…/pipeline/{number}/{action}` that answers `303` back to a page (a restart: to the
//! new pipeline).
//!
//! Who may do what is the REST API's decision, not a copy of it: each action takes
//! `access::repo_push` and calls the function the API's handler calls
//! (`ci::pipelines::{cancel_as, restart_as, decide_as}`), so a refusal here is the refusal
//! there (401 anonymous, 404 a repository the caller may not see, 403 no push, 400 a
//! pipeline in the wrong state). [`Offered`] decides which buttons the page shows with the
//! same `RepoAccess::require_push`.

use super::forms::{self, Form};
use super::{Frame, or_error_page};
use crate::http::{ApiError, Request, Response, Scope};
use crate::modules::ci::access::{self, RepoAccess};
use crate::modules::ci::pipelines::{Decision, cancel_as, decide_as, restart_as};
use crate::pipeline::status::{self, Status};
use crate::state::Ctx;
use crate::store::pipelines::Pipeline;

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
        if access.require_push().is_err() {
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
pub fn routes(scope: &mut Scope<'_, Ctx>) {
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
    Decide(Decision),
}

/// `POST <root>/repos/{id}/pipeline/{number}/cancel`.
pub async fn cancel(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    act(ctx, req, Action::Cancel).await
}

/// `POST <root>/repos/{id}/pipeline/{number}/restart`: on to the new pipeline.
pub async fn restart(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    act(ctx, req, Action::Restart).await
}

/// `POST <root>/repos/{id}/pipeline/{number}/approve`.
pub async fn approve(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    act(ctx, req, Action::Decide(Decision::Approve)).await
}

/// `POST <root>/repos/{id}/pipeline/{number}/decline`.
pub async fn decline(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    act(ctx, req, Action::Decide(Decision::Decline)).await
}

async fn act(ctx: Ctx, mut req: Request, action: Action) -> Result<Response, ApiError> {
    // The form first: its CSRF field decides whether the frame's caller is signed in.
    let form = Form::read(&mut req);
    let (frame, _) = Frame::of(&ctx, &req, "Pipeline").await;
    let outcome = perform(&ctx, &req, &frame, form, action).await;
    or_error_page(frame, outcome)
}

async fn perform(
    ctx: &Ctx,
    req: &Request,
    frame: &Frame,
    form: Result<Form, forms::FormError>,
    action: Action,
) -> Result<Response, ApiError> {
    // Who may act is decided before a bad body is reported: a refusal never depends on it.
    forms::caller(ctx, req).await?;
    let access = access::repo_push(ctx, req).await?;
    form?;
    let number = req.param_i64("number")?;
    let repo_id = access.row.repo.id;
    let page = |n: i64| format!("{}/repos/{repo_id}/pipeline/{n}", frame.root);
    let (to, message) = match action {
        Action::Cancel => {
            cancel_as(ctx, &access, number).await?;
            (page(number), format!("Pipeline #{number} was canceled."))
        }
        Action::Decide(decision) => {
            decide_as(ctx, &access, number, decision).await?;
            let done = match decision {
                Decision::Approve => "approved",
                Decision::Decline => "declined",
            };
            (page(number), format!("Pipeline #{number} was {done}."))
        }
        Action::Restart => match restart_as(ctx, &access, number, Vec::new()).await? {
            crate::ci::create::Created::Pipeline(p) => (
                page(p.number),
                format!("Pipeline #{} restarts #{number}.", p.number),
            ),
            _ => (
                page(number),
                "The restart made no new pipeline: its workflows were filtered out or skipped."
                    .to_string(),
            ),
        },
    };
    tracing::info!(repo_id, number, ?action, "ui pipeline action");
    Ok(forms::see_other(ctx, req, &to, Some(&message)))
}
