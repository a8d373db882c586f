//! The user page's forms: show the personal access token (`POST /api/user/token`), reset
//! it (`DELETE /api/user/token`: a new signing secret, so every older
//! token and session stops working) and sign out (the `/logout` the upstream UI uses, as a
//! post that must carry the session's CSRF field, so another site cannot sign one out).

use std::sync::Arc;

use super::forms::{self, Form};
use super::host::UiHost;
use super::pages::user_page;
use super::through_api::{self, Call, Gate};
use crate::http::{ApiError, Method, Request, Response, Scope};

pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    forms::post(scope, "/user/token", show_token);
    forms::post(scope, "/user/token/reset", reset_token);
    forms::post(scope, "/logout", sign_out);
}

async fn show_token<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    token_page(host, req, false).await
}

async fn reset_token<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    token_page(host, req, true).await
}

/// The user page with the token the API's handler answers (plain text), on this answer
/// only: no redirect, nothing kept for a later page.
async fn token_page<H: UiHost>(
    host: Arc<H>,
    mut req: Request,
    reset: bool,
) -> Result<Response, ApiError> {
    let posted = match through_api::read(&host, &mut req, "Your account", Gate::User).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let call = Ok(Call::body(serde_json::json!({})));
    let frame = posted.frame;
    // `DELETE /user/token` resets, `POST /user/token` shows.
    let method = if reset { Method::DELETE } else { Method::POST };
    let answered = through_api::call(&host, req, frame.clone(), method, "/user/token", call).await;
    let token = match answered {
        Ok(response) => String::from_utf8_lossy(&response.body).trim().to_string(),
        Err(page) => return Ok(page),
    };
    if reset {
        tracing::info!(
            user = posted.account.user.id,
            "ui: personal access token reset"
        );
    }
    user_page(frame, &posted.account, Some(token), reset)
}

/// `POST <root>/logout`: the session cookie cleared, after the CSRF field is checked (a
/// stale form: 403). A browser whose session already ended is simply signed out.
async fn sign_out<H: UiHost>(host: Arc<H>, mut req: Request) -> Result<Response, ApiError> {
    if let Err(err) = Form::read(&mut req) {
        return Err(err.into());
    }
    if let Err(err) = forms::caller(&host, &req).await {
        let (frame, _) = super::Frame::of(&host, &req, "Sign out").await;
        return Ok(through_api::error_page(frame, err));
    }
    host.sign_out(req).await
}
