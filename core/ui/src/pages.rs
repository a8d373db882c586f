//! The home, login and user pages.

use std::sync::Arc;

use askama::Template;

use super::host::UiHost;
use super::{Frame, or_error_page, page, to_login};
use crate::http::browser::{redirect, safe_next, set_cookie};
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::store::forges::{self, ForgeKind};
use crate::store::users::Account;

#[derive(Template)]
#[template(path = "home.html")]
struct Home {
    frame: Frame,
}

/// `GET <root>/`: a signed-in user's repositories; for anyone else, what this server is.
pub async fn home<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, account) = Frame::of(&host, &req, "Welcome").await;
    if account.is_some() {
        return Ok(redirect(&format!("{}/repos", frame.root)));
    }
    page(StatusCode::OK, &Home { frame })
}

/// A forge's sign-in button.
struct ForgeButton {
    id: i64,
    label: String,
}

#[derive(Template)]
#[template(path = "login.html")]
struct Login {
    frame: Frame,
    error: Option<&'static str>,
    forges: Vec<ForgeButton>,
    action: String,
    form_token: String,
    /// Where to go once signed in (a checked same-site path), or "".
    next: String,
    /// The same as a query to add to a forge button's link (`&next=…`, encoded), or "".
    next_query: String,
}

/// `GET <root>/login[?error=code]`: every way in — a button per forge with OAuth sign-in
/// (`/authorize?forge_id=N`), the personal-access-token form (`POST /authorize`), and how to
/// get a one-time login link. An error code (where a failed sign-in lands) shows as its
/// known message only (`login::sign_in_error`: a link's other text is not ours to show).
pub async fn login<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, _) = Frame::of(&host, &req, "Sign in").await;
    let forges = match sign_in_forges(&host).await {
        Ok(forges) => forges,
        Err(err) => return or_error_page(frame, Err(err)),
    };
    let error = req
        .query("error")
        .filter(|e| !e.is_empty())
        .map(|code| host.sign_in_error(&code));
    let (form_token, form_cookie) = host.login_form(&req);
    let action = host.login_form_path();
    let next = req
        .query("next")
        .and_then(|n| safe_next(&frame.root, &n))
        .unwrap_or_default();
    let next_query = super::next_query('&', &next);
    let mut response = page(
        StatusCode::OK,
        &Login {
            frame,
            error,
            forges,
            action,
            form_token,
            next,
            next_query,
        },
    )?;
    set_cookie(&mut response, &form_cookie);
    Ok(response)
}

/// The forges one signs in through (the built-in git forge has no accounts: its users sign
/// in with a token).
async fn sign_in_forges<H: UiHost>(host: &Arc<H>) -> Result<Vec<ForgeButton>, ApiError> {
    let listed = host
        .services()
        .reads
        .read(|c| forges::list(c, 1, crate::http::paging::MAX_PER_PAGE))
        .await?;
    Ok(listed
        .into_iter()
        .filter(|f| f.kind != ForgeKind::Git)
        .map(|f| ForgeButton {
            id: f.id,
            label: forge_label(f.kind, &f.url),
        })
        .collect())
}

/// "GitHub (github.com)": the forge's kind and host.
pub(super) fn forge_label(kind: ForgeKind, url: &str) -> String {
    let name = match kind {
        ForgeKind::Git => "Git",
        ForgeKind::Github => "GitHub",
        ForgeKind::Gitlab => "GitLab",
        ForgeKind::Gitea => "Gitea",
        ForgeKind::Forgejo => "Forgejo",
        ForgeKind::Bitbucket => "Bitbucket",
        ForgeKind::BitbucketDc => "Bitbucket Data Center",
        ForgeKind::Addon => "forge",
    };
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or("");
    if host.is_empty() {
        name.to_string()
    } else {
        format!("{name} ({host})")
    }
}

#[derive(Template)]
#[template(path = "user.html")]
struct UserPage {
    frame: Frame,
    login: String,
    email: String,
    admin: bool,
    /// The personal access token, on the answer to the form that asked for it only.
    token: Option<String>,
    /// The token was just reset: every older token and session stopped working.
    reset: bool,
}

/// `GET <root>/user`: who is signed in, their token (behind a form) and signing out.
/// Anonymous callers go to the login.
pub async fn user<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, account) = Frame::of(&host, &req, "Your account").await;
    let Some(account) = account else {
        return Ok(to_login(&frame));
    };
    let outcome = user_page(frame.clone(), &account, None, false);
    or_error_page(frame, outcome)
}

/// The user page of `account`, with `token` shown when the caller just asked for it.
pub(super) fn user_page(
    frame: Frame,
    account: &Account,
    token: Option<String>,
    reset: bool,
) -> Result<Response, ApiError> {
    page(
        StatusCode::OK,
        &UserPage {
            frame,
            login: account.user.login.clone(),
            email: account.user.email.clone(),
            admin: account.user.admin,
            token,
            reset,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forge_labels_name_kind_and_host() {
        assert_eq!(
            forge_label(ForgeKind::Github, "https://github.com"),
            "GitHub (github.com)"
        );
        assert_eq!(
            forge_label(ForgeKind::Gitea, "http://git.example:3000/x"),
            "Gitea (git.example:3000)"
        );
        assert_eq!(forge_label(ForgeKind::Addon, ""), "forge");
    }
}
