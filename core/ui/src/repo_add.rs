//! Adding a repository (`/repos/add`, upstream's path): the forge's repositories as the
//! API's `GET /api/user/repos?all=true` lists them (the API answers, so the list and its
//! rules are the API's), each inactive one with an Activate button that posts through
//! `POST /api/repos?forge_remote_id=`, then goes to the repository.

use std::sync::Arc;

use askama::Template;
use serde_json::Value;

use super::forms;
use super::host::UiHost;
use super::through_api::{self, Call, Gate};
use super::{Frame, or_error_page, page, to_login};
use crate::http::{ApiError, Method, Request, Response, Scope, StatusCode};

pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    scope.get("/repos/add", show);
    forms::post(scope, "/repos/add", activate);
}

struct Addable {
    full_name: String,
    forge_remote_id: String,
    forge_id: i64,
    /// Stored and active: a link to it instead of a button.
    active_id: Option<i64>,
}

#[derive(Template)]
#[template(path = "repo_add.html")]
struct AddPage {
    frame: Frame,
    repos: Vec<Addable>,
}

/// `GET <root>/repos/add`. Anonymous callers go to the sign-in page.
pub async fn show<H: UiHost>(host: Arc<H>, req: Request) -> Result<Response, ApiError> {
    let (frame, account) = Frame::of(&host, &req, "Add a repository").await;
    if account.is_none() {
        return Ok(to_login(&frame));
    }
    let outcome = async {
        let call = Call::body(Value::Null).query(&[("all", "true")]);
        let asked = through_api::head_of(&req);
        let listed = through_api::send(&host, asked, Method::GET, "/user/repos", call).await?;
        let listed: Vec<Value> =
            serde_json::from_slice(&listed.body).map_err(ApiError::internal)?;
        let repos = listed
            .iter()
            .map(|r| {
                let id = r["id"].as_i64().unwrap_or(0);
                Addable {
                    full_name: r["full_name"].as_str().unwrap_or_default().to_string(),
                    forge_remote_id: r["forge_remote_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    forge_id: r["forge_id"].as_i64().unwrap_or(0),
                    active_id: (id > 0 && r["active"] == true).then_some(id),
                }
            })
            .collect();
        page(
            StatusCode::OK,
            &AddPage {
                frame: frame.clone(),
                repos,
            },
        )
    }
    .await;
    or_error_page(frame, outcome)
}

/// `POST <root>/repos/add`: `forge_remote_id` (and `forge_id`) activated; on to its page.
async fn activate<H: UiHost>(host: Arc<H>, mut req: Request) -> Result<Response, ApiError> {
    let posted = match through_api::read(&host, &mut req, "Add a repository", Gate::User).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let call = (|| {
        let remote = posted.form.required("forge_remote_id")?;
        let mut pairs = vec![("forge_remote_id", remote)];
        // No forge id (0: the caller's own forge) leaves the choice to the API.
        match posted.form.get("forge_id").map(str::trim) {
            None | Some("") | Some("0") => {}
            Some(forge) => pairs.push(("forge_id", forge)),
        }
        Ok::<_, ApiError>(Call::body(serde_json::json!({})).query(&pairs))
    })();
    let head = through_api::head_of(&req);
    let frame = posted.frame;
    let root = frame.root.clone();
    let activated = match through_api::call(&host, req, frame, Method::POST, "/repos", call).await {
        Ok(activated) => activated,
        Err(page) => return Ok(page),
    };
    let repo: Value = serde_json::from_slice(&activated.body).map_err(ApiError::internal)?;
    let location = format!("{root}/repos/{}", repo["id"].as_i64().unwrap_or(0));
    Ok(forms::see_other(
        &host,
        &head,
        &location,
        Some("Repository activated."),
    ))
}
